"""Text forms of Go standard-library values, as Calico's Go code prints and parses them.

Byte-exact output depends on these details: ``strconv`` float formatting, ``fmt``'s ``%v``
for floats, ``time.Duration`` strings, and ``net`` IP / CIDR / MAC parsing and printing
(IPv4-mapped IPv6 addresses print as IPv4, zero runs compress as RFC 5952, ...).
"""

from __future__ import annotations

__sans_io__ = True

import ipaddress
import re
from datetime import UTC, datetime
from socket import inet_aton, inet_ntoa

# --------------------------------------------------------------------------------------------
# time.Duration

_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
          "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_DUR_PART = re.compile(r"([0-9]*)(\.[0-9]*)?([^0-9.]+)")
_MAX_DURATION = (1 << 63) - 1


def parse_duration(s: str) -> int:
    """``time.ParseDuration``: nanoseconds, or ValueError."""
    orig = s
    neg = False
    if s[:1] in ("-", "+"):
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"invalid duration {orig!r}")
    total = 0
    while s:
        m = _DUR_PART.match(s)
        if m is None:
            raise ValueError(f"invalid duration {orig!r}")
        whole, frac, unit_s = m.groups()
        if not whole and (not frac or frac == "."):
            raise ValueError(f"invalid duration {orig!r}")
        # The unit runs until the next digit or '.'.
        unit = _UNITS.get(unit_s)
        if unit is None:
            raise ValueError(f"unknown unit {unit_s!r} in duration {orig!r}")
        v = int(whole) if whole else 0
        if v > _MAX_DURATION // unit:
            raise ValueError(f"invalid duration {orig!r}")
        v *= unit
        if frac and len(frac) > 1:
            f = int(frac[1:])
            scale = 10.0 ** (len(frac) - 1)
            v += int(float(f) * (float(unit) / scale))
        total += v
        if total > _MAX_DURATION:
            raise ValueError(f"invalid duration {orig!r}")
        s = s[m.end():]
    return -total if neg else total


def format_duration(ns: int) -> str:
    """``time.Duration.String``."""
    if ns == 0:
        return "0s"
    neg = ns < 0
    u = -ns if neg else ns
    if u < 1_000_000_000:
        if u < 1_000:
            out = f"{u}ns"
        elif u < 1_000_000:
            out = _frac(u, 3) + "\u00b5s"
        else:
            out = _frac(u, 6) + "ms"
    else:
        secs_part = _frac(u % 60_000_000_000, 9) + "s"
        mins = u // 60_000_000_000
        if mins == 0:
            out = secs_part
        else:
            hours, mins = divmod(mins, 60)
            out = (f"{hours}h" if hours else "") + f"{mins}m" + secs_part
    return "-" + out if neg else out


def _frac(v: int, prec: int) -> str:
    whole, frac = divmod(v, 10**prec)
    if frac == 0:
        return str(whole)
    return f"{whole}." + f"{frac:0{prec}d}".rstrip("0")


# --------------------------------------------------------------------------------------------
# time.Time (metav1.Time's RFC 3339 form)


def parse_rfc3339(s: str) -> datetime:
    """``time.Parse(time.RFC3339, s)`` (fractional seconds allowed)."""
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", s):
        raise ValueError(f"not an RFC 3339 time: {s!r}")
    main, _, rest = s.partition(".")
    if rest:
        digits = re.match(r"\d+", rest)
        assert digits is not None
        s = main + rest[digits.end():]  # Go keeps the fraction, but it never prints it
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def format_rfc3339_utc(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# net.IP / net.IPNet / net.HardwareAddr

_V4_MAPPED_PREFIX = b"\x00" * 10 + b"\xff\xff"

# A dotted quad exactly as ipaddress.IPv4Address (and Go) accept it: four decimal octets,
# no leading zeros, ASCII digits only.  Matching text is safe for inet_aton, which is C.
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")


def _v4_packed(s: str) -> bytes:
    """``ipaddress.IPv4Address(s).packed`` (ValueError if invalid), fast for valid text."""
    if _DOTTED_QUAD.fullmatch(s):
        return inet_aton(s)
    return ipaddress.IPv4Address(s).packed


def parse_ip(s: str) -> bytes | None:
    """``net.ParseIP``: 4 bytes for IPv4 (and IPv4-mapped IPv6), 16 for IPv6; None if
    invalid (zones are refused)."""
    if not s or "%" in s:
        return None
    try:
        if ":" in s:
            b = ipaddress.IPv6Address(s).packed
            return b[12:] if b[:12] == _V4_MAPPED_PREFIX else b
        return _v4_packed(s)
    except ValueError:
        return None


def format_ip(b: bytes) -> str:
    """``net.IP.String``.

    Go and the standard library agree on IPv6 text (RFC 5952: lowercase, no leading zeros,
    the first longest run of two or more zero groups as ``::``) except for IPv4-mapped
    addresses, which Go prints as a bare dotted quad; tests/unit/model/test_golang_ip.py
    and tests/interop/test_ip_go.py check both on many random addresses.
    """
    if len(b) == 16 and b[:12] == _V4_MAPPED_PREFIX:
        b = b[12:]
    if len(b) == 4:
        return inet_ntoa(b)
    return ipaddress.IPv6Address(b).compressed


def ip_version(b: bytes) -> int:
    return 4 if len(b) == 4 else 6


class IPNet:
    """A parsed CIDR: ``ip`` (4 or 16 bytes, as given) and ``prefix`` bits."""

    __slots__ = ("ip", "prefix")

    def __init__(self, ip: bytes, prefix: int) -> None:
        self.ip, self.prefix = ip, prefix

    @property
    def version(self) -> int:
        return ip_version(self.ip)

    def network(self) -> IPNet:
        bits = len(self.ip) * 8
        n = int.from_bytes(self.ip, "big") & (((1 << self.prefix) - 1) << (bits - self.prefix))
        return IPNet(n.to_bytes(len(self.ip), "big"), self.prefix)

    def __str__(self) -> str:
        return f"{format_ip(self.ip)}/{self.prefix}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IPNet) and (self.ip, self.prefix) == (other.ip, other.prefix)

    def __hash__(self) -> int:
        return hash((self.ip, self.prefix))

    def contains(self, ip: bytes) -> bool:
        if len(ip) != len(self.ip):
            return False
        return IPNet(ip, self.prefix).network() == self.network()


def parse_cidr(s: str) -> IPNet | None:
    """``net.ParseCIDR`` as Calico's ``cnet.ParseCIDR`` uses it: the *masked* network, or
    None.  IPv4-mapped IPv6 networks come back as IPv4 ones, as Go prints them."""
    addr, sep, mask = s.partition("/")
    if not sep or not mask or not mask.isdigit() or not mask.isascii():
        return None
    if "%" in addr:
        return None
    try:
        if ":" in addr:
            ip = ipaddress.IPv6Address(addr).packed
            bits = 128
        else:
            ip = _v4_packed(addr)
            bits = 32
    except ValueError:
        return None
    n = int(mask)
    if n > bits:
        return None
    net = IPNet(ip, n) if n == bits else IPNet(ip, n).network()
    if bits == 128 and net.ip[:12] == _V4_MAPPED_PREFIX:
        # Go views a (masked) v4-mapped network as IPv4 with the last 32 mask bits.
        net = IPNet(net.ip[12:], n - 96)
    return net


class NilIPNet(IPNet):
    """What ``cnet.ParseCIDROrIP("")`` yields: an IPNet with a nil IP, printed ``<nil>``
    (Go's ``net.IP.UnmarshalText`` accepts empty text)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(b"", 128)

    @property
    def version(self) -> int:
        return 0

    def network(self) -> IPNet:
        return self

    def __str__(self) -> str:
        return "<nil>"


def parse_cidr_or_ip(s: str, *, allow_empty: bool = False) -> IPNet | None:
    """``cnet.ParseCIDROrIP``'s network: a CIDR (masked) or a bare IP as a /32 or /128.
    With ``allow_empty`` an empty string gives :class:`NilIPNet`, as in Go; callers that
    Calico guards against empty strings (or that would crash on it) leave it off."""
    if s == "" and allow_empty:
        return NilIPNet()
    net = parse_cidr(s)
    if net is not None:
        return net
    ip = parse_ip(s)
    if ip is None:
        return None
    return IPNet(ip, len(ip) * 8)


def go_mask_ones(s: str, net: IPNet) -> int:
    """``IPMask.Size()``'s ones for ``net`` as :func:`parse_cidr_or_ip` parsed it from ``s``.

    Go keeps an IPv4-mapped IPv6 CIDR's 128-bit mask (``::ffff:1.2.3.4/128`` has 128 ones)
    where :class:`IPNet` views the network as IPv4 (``prefix`` 32); everything else agrees.
    """
    if net.version == 4 and "/" in s and ":" in s.partition("/")[0]:
        return net.prefix + 96
    return net.prefix


def parse_mac(s: str) -> bytes | None:
    """``net.ParseMAC``: EUI-48/64 or 20-byte InfiniBand, ``:``/``-``/``.`` forms."""
    if len(s) < 14:
        return None
    if s[2] in ":-":
        if (len(s) + 1) % 3 != 0:
            return None
        n = (len(s) + 1) // 3
        if n not in (6, 8, 20):
            return None
        sep = s[2]
        parts = s.split(sep)
        if len(parts) != n or any(len(p) != 2 for p in parts):
            return None
    elif s[4] == ".":
        if (len(s) + 1) % 5 != 0:
            return None
        n = 2 * (len(s) + 1) // 5
        if n not in (6, 8, 20):
            return None
        parts4 = s.split(".")
        if any(len(p) != 4 for p in parts4):
            return None
        parts = [p[i:i + 2] for p in parts4 for i in (0, 2)]
    else:
        return None
    try:
        if not all(re.fullmatch(r"[0-9a-fA-F]{2}", p) for p in parts):
            return None
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        return None


def format_mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)
