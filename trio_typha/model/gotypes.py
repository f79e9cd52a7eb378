"""Encoders for the Go types that marshal themselves (their ``MarshalJSON`` output is what
json-iterator inserts).

Each accepts what Go's decoder would accept from the datastore's JSON and emits what the Go
type's ``MarshalJSON`` writes back, so decode-then-encode normalisation happens here: a port
given as ``"80"`` comes out as ``80``, a duration ``"90s"`` as ``"1m30s"``, a timestamp with
an offset in UTC.  Values Go's decoder would refuse raise :class:`GoJSONError`.
"""

from __future__ import annotations

__sans_io__ = True

import re
from collections.abc import Mapping
from typing import Any

from .gojson import STD_STRING, Custom, GoJSONError, Map, RawJSON, go_string
from .golang import (
    IPNet,
    format_duration,
    format_ip,
    format_mac,
    format_rfc3339_utc,
    parse_cidr_or_ip,
    parse_duration,
    parse_ip,
    parse_mac,
    parse_rfc3339,
)

# --------------------------------------------------------------------------------------------
# numorstring


_ALL_DIGITS = re.compile(r"[0-9]+")
_PORT_RANGE = re.compile(r"([0-9]+):([0-9]+)")
_PORT_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


class Port:
    """``numorstring.Port``: a single port, a range or a name."""

    __slots__ = ("min", "max", "name")

    def __init__(self, lo: int = 0, hi: int = 0, name: str = "") -> None:
        self.min, self.max, self.name = lo, hi, name

    @classmethod
    def parse(cls, v: Any) -> Port:
        """What ``Port.UnmarshalJSON`` makes of a JSON value."""
        if isinstance(v, Port):
            return v
        if v is None:
            return cls(0, 0)  # the zero Port
        if isinstance(v, bool):
            raise GoJSONError(f"invalid port {v!r}")
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int):
            if not 0 <= v <= 0xFFFF:
                raise GoJSONError(f"invalid port {v!r}")
            return cls(v, v)
        if not isinstance(v, str):
            raise GoJSONError(f"invalid port {v!r}")
        if _ALL_DIGITS.fullmatch(v):
            n = int(v)
            if n > 0xFFFF:
                raise GoJSONError(f"invalid port format ({v})")
            return cls(n, n)
        m = _PORT_RANGE.fullmatch(v)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > 0xFFFF or hi > 0xFFFF or lo > hi:
                raise GoJSONError(f"invalid port range ({v})")
            return cls(lo, hi)
        if not _PORT_NAME.fullmatch(v):
            raise GoJSONError(f"invalid name for named port ({v})")
        return cls(name=v)

    def __str__(self) -> str:
        if self.name:
            return self.name
        if self.min == self.max:
            return str(self.min)
        return f"{self.min}:{self.max}"

    def json(self) -> str:
        if self.name:
            return go_string(self.name, std=True)
        if self.min == self.max:
            return str(self.min)
        return f'"{self.min}:{self.max}"'


class Uint8OrString:
    """``numorstring.Uint8OrString`` (the base of ``Protocol`` and ``DSCP``)."""

    __slots__ = ("num", "str")

    def __init__(self, num: int | None, s: str = "") -> None:
        self.num, self.str = num, s

    @classmethod
    def parse(cls, v: Any) -> Uint8OrString:
        if isinstance(v, Uint8OrString):
            return v
        if v is None:
            return cls(0)  # the zero value is the number 0
        if isinstance(v, bool):
            raise GoJSONError(f"invalid number-or-string {v!r}")
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int):
            if not 0 <= v <= 255:
                raise GoJSONError(f"number {v} does not fit a uint8")
            return cls(v)
        if isinstance(v, str):
            if _ALL_DIGITS.fullmatch(v) and int(v) <= 255:
                return cls(int(v))
            return cls(None, v)
        raise GoJSONError(f"invalid number-or-string {v!r}")

    def num_value(self) -> int | None:
        """``NumValue``: the number, also for a numeric string; None otherwise."""
        if self.num is not None:
            return self.num
        if _ALL_DIGITS.fullmatch(self.str) and int(self.str) <= 255:
            return int(self.str)
        return None

    def __str__(self) -> str:
        return self.str if self.num is None else str(self.num)

    def json(self) -> str:
        n = self.num_value()
        return str(n) if n is not None else go_string(self.str, std=True)


def protocol_to_v1(v: Any) -> Uint8OrString:
    """``Protocol.ToV1``: names lower-cased, numbers kept."""
    p = Uint8OrString.parse(v)
    return p if p.num is not None else Uint8OrString(None, p.str.lower())


def protocol_supports_ports(p: Uint8OrString) -> bool:
    n = p.num_value()
    if n is not None:
        return n in (6, 17, 132)
    return p.str in ("TCP", "UDP", "tcp", "udp", "SCTP", "sctp")


DSCP_VALUES = {"DF": 0, "EF": 46, "AF11": 10, "AF12": 12, "AF13": 14, "AF21": 18, "AF22": 20,
               "AF23": 22, "AF31": 26, "AF32": 28, "AF33": 30, "AF41": 34, "AF42": 36,
               "AF43": 38, "CS0": 0, "CS1": 8, "CS2": 16, "CS3": 24, "CS4": 32, "CS5": 40,
               "CS6": 48}


# --------------------------------------------------------------------------------------------
# IntOrString, Duration, Time


def _int_or_string(v: Any) -> str:
    if v is None:
        return "0"  # the zero IntOrString is the integer 0
    if isinstance(v, bool):
        raise GoJSONError(f"invalid int-or-string {v!r}")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int):
        if not -(1 << 31) <= v < (1 << 31):
            raise GoJSONError(f"int-or-string {v} does not fit an int32")
        return str(v)
    if isinstance(v, str):
        return go_string(v, std=True)
    raise GoJSONError(f"invalid int-or-string {v!r}")


def _duration(v: Any) -> str:
    if v is None:
        return '"0s"'
    if not isinstance(v, str):
        raise GoJSONError(f"invalid duration {v!r}")
    try:
        return go_string(format_duration(parse_duration(v)), std=True)
    except ValueError as e:
        raise GoJSONError(str(e)) from None


def _time(v: Any) -> str:
    if v is None or v == "":
        return "null"
    if not isinstance(v, str):
        raise GoJSONError(f"invalid time {v!r}")
    try:
        return f'"{format_rfc3339_utc(parse_rfc3339(v))}"'
    except ValueError as e:
        raise GoJSONError(str(e)) from None


# --------------------------------------------------------------------------------------------
# Calico net types (values we build ourselves: IPNet objects, strings or bytes)


def _ip(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)):
        return f'"{format_ip(bytes(v))}"'
    if isinstance(v, str):
        b = parse_ip(v)
        if b is None:
            raise GoJSONError(f"invalid IP {v!r}")
        return f'"{format_ip(b)}"'
    raise GoJSONError(f"invalid IP {v!r}")


def _ipnet(v: Any) -> str:
    if isinstance(v, IPNet):
        return go_string(str(v))  # "<nil>" for a nil IPNet, HTML-escaped
    if isinstance(v, str):
        n = parse_cidr_or_ip(v)
        if n is None:
            raise GoJSONError(f"invalid CIDR {v!r}")
        return f'"{n}"'
    raise GoJSONError(f"invalid CIDR {v!r}")


def _mac(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)):
        return f'"{format_mac(bytes(v))}"'
    if isinstance(v, str):
        b = parse_mac(v)
        if b is None:
            raise GoJSONError(f"invalid MAC {v!r}")
        return f'"{format_mac(b)}"'
    raise GoJSONError(f"invalid MAC {v!r}")


_LABEL_MAP = Map(STD_STRING, std=True)


def _labels(v: Any) -> str:
    # uniquelabels.Map marshals its inner map with encoding/json.
    if v is None:
        return "null"
    if not isinstance(v, Mapping):
        raise GoJSONError(f"invalid labels {v!r}")
    out: list[str] = []
    _LABEL_MAP.encode(v, out)
    return "".join(out)


def _port(v: Any) -> str:
    return Port.parse(v).json()


def _u8s(v: Any) -> str:
    return Uint8OrString.parse(v).json()


TIME = Custom("metav1.Time", _time)
DURATION = Custom("metav1.Duration", _duration)
INT_OR_STRING = Custom("intstr.IntOrString", _int_or_string)
PORT = Custom("numorstring.Port", _port)
PROTOCOL = Custom("numorstring.Protocol", _u8s)
DSCP = Custom("numorstring.DSCP", _u8s)
IP = Custom("net.IP", _ip)
IPNET = Custom("net.IPNet", _ipnet)
MAC = Custom("net.MAC", _mac)
LABELS = Custom("uniquelabels.Map", _labels)
FIELDS_V1 = RawJSON()
