"""Go standard-library text forms (expected values printed by Go 1.25)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trio_typha.gofmt import format_v
from trio_typha.model.golang import (
    format_duration,
    format_ip,
    parse_cidr,
    parse_cidr_or_ip,
    parse_duration,
    parse_ip,
    parse_mac,
)


def test_fmt_v_of_float64() -> None:
    cases = {0: "0", 1: "1", 1.5: "1.5", 100000: "100000", 123456: "123456", 1e6: "1e+06",
             1080000: "1.08e+06", 1234567: "1.234567e+06", 0.0001: "0.0001", 0.00001: "1e-05",
             1e21: "1e+21", 1e20: "1e+20", 123456789012345678: "1.2345678901234568e+17"}
    for value, text in cases.items():
        assert format_v(float(value)) == text


def test_durations() -> None:
    cases = {"1h": ("1h0m0s", 3_600_000_000_000), "90s": ("1m30s", 90_000_000_000),
             "1.5s": ("1.5s", 1_500_000_000), "1m30.5s": ("1m30.5s", 90_500_000_000),
             "100ms": ("100ms", 100_000_000), "1500us": ("1.5ms", 1_500_000),
             "2h45m": ("2h45m0s", 9_900_000_000_000), "0": ("0s", 0),
             "1.0000000001s": ("1s", 1_000_000_000), ".5s": ("500ms", 500_000_000),
             "3.h": ("3h0m0s", 10_800_000_000_000), "-1.5h": ("-1h30m0s", -5_400_000_000_000),
             "1us": ("1\u00b5s", 1000), "999ns": ("999ns", 999)}
    for text, (printed, ns) in cases.items():
        assert parse_duration(text) == ns
        assert format_duration(ns) == printed


def test_bad_durations() -> None:
    for bad in ("", "5", "1x", "s", ".s", "1h-2m", "99999999999999999999h"):
        try:
            parse_duration(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_ip_text() -> None:
    cases = {"::ffff:1.2.3.4": "1.2.3.4", "1:0:0:1:0:0:0:1": "1:0:0:1::1",
             "1:0:2:3:4:5:6:7": "1:0:2:3:4:5:6:7", "fd00::5": "fd00::5", "::": "::",
             "::1.2.3.4": "::102:304", "1::": "1::", "FD00:0:0::A": "fd00::a"}
    for text, printed in cases.items():
        ip = parse_ip(text)
        assert ip is not None
        assert format_ip(ip) == printed
    for bad in ("010.0.0.1", "1.2.3", "fe80::1%eth0", "", "1.2.3.4/32", "::g"):
        assert parse_ip(bad) is None


def test_cidrs() -> None:
    cases = {"::ffff:10.0.0.0/104": "10.0.0.0/8", "::ffff:10.0.0.0/64": "::/64",
             "10.0.0.1/08": "10.0.0.0/8", "fd00::1/48": "fd00::/48",
             "10.1.2.3/16": "10.1.0.0/16", "0.0.0.0/0": "0.0.0.0/0"}
    for text, printed in cases.items():
        assert str(parse_cidr(text)) == printed
    for bad in ("10.0.0.0/33", "10.0.0.0/", "10.0.0.0", "10.0.0.0/-1", "x/8", "::/129"):
        assert parse_cidr(bad) is None
    assert str(parse_cidr_or_ip("192.0.2.7")) == "192.0.2.7/32"
    assert str(parse_cidr_or_ip("fd00::7")) == "fd00::7/128"


def test_macs() -> None:
    assert parse_mac("01-23-45-67-89-AB") == bytes.fromhex("0123456789ab")
    assert parse_mac("0123.4567.89ab") == bytes.fromhex("0123456789ab")
    assert parse_mac("00:00:00:00:fe:80:00:00") == bytes.fromhex("00000000fe800000")
    for bad in ("01:23:45:67:89", "01:23:45:67:89:zz", "0123456789ab"):
        assert parse_mac(bad) is None


@given(st.integers(-(1 << 62), 1 << 62))
def test_duration_round_trip(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns


@given(st.ip_addresses())
def test_ip_round_trip(addr: object) -> None:
    text = str(addr)
    ip = parse_ip(text)
    assert ip is not None
    assert parse_ip(format_ip(ip)) == ip
