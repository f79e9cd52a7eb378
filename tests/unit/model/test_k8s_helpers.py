"""Go-compatible building blocks of the k8s conversions: UIDs, times, JSON, IPs, quantities."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from trio_typha.model.golang import format_ip, parse_cidr, parse_cidr_or_ip, parse_ip, parse_mac
from trio_typha.model.k8s import ConversionError, convert_uid
from trio_typha.model.k8s_meta import go_marshal_string_map, go_time
from trio_typha.model.k8s_quantity import clamp_quantity, quantity_value


@pytest.mark.parametrize(("uid", "expected"), [
    # Worked examples of Calico's ConvertUID (the first is also in
    # libcalico-go/lib/backend/k8s/conversion/conversion_test.go).
    ("30316465-6365-4463-ad63-3564622d3638", "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c"),
    ("11111111-2222-4333-8444-555555555555", "88888888-4444-43cc-8422-aaaaaaaaaaaa"),
    # Other spellings Go's uuid.Parse accepts give the canonical lower-case output.
    ("{11111111-2222-4333-8444-555555555555}", "88888888-4444-43cc-8422-aaaaaaaaaaaa"),
    ("URN:UUID:11111111-2222-4333-8444-555555555555", "88888888-4444-43cc-8422-aaaaaaaaaaaa"),
    ("1111111122224333844455555555555F", "88888888-4444-43cc-8422-aaaaaaaaaafa"),
])
def test_convert_uid(uid: str, expected: str) -> None:
    assert convert_uid(uid) == expected


def test_convert_uid_round_trips() -> None:
    uid = "9f1c3e7a-5b2d-4c8e-9a01-23456789abcd"
    assert convert_uid(convert_uid(uid)) == uid


@pytest.mark.parametrize("bad", ["", "x", "11111111-2222-4333-8444-55555555555g",
                                 "1111111-12222-4333-8444-555555555555",
                                 "(11111111-2222-4333-8444-555555555555)"])
def test_convert_uid_rejects(bad: str) -> None:
    with pytest.raises(ConversionError):
        convert_uid(bad)


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("", None), ("0001-01-01T00:00:00Z", None),
    ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"),
    ("2024-05-01T10:00:00.999999999Z", "2024-05-01T10:00:00Z"),
    ("2024-05-01T00:30:00+01:00", "2024-04-30T23:30:00Z"),
    (datetime(2024, 5, 1, 10, 0, 0, 500, tzinfo=UTC), "2024-05-01T10:00:00Z"),
])
def test_go_time(value: object, expected: str | None) -> None:
    assert go_time(value) == expected


@pytest.mark.parametrize("bad", ["2024-05-01", "2024-05-01 10:00:00Z", "2024-13-01T10:00:00Z"])
def test_go_time_rejects(bad: str) -> None:
    with pytest.raises(ConversionError):
        go_time(bad)


def test_go_marshal_string_map_matches_json_iterator() -> None:
    assert go_marshal_string_map(None) == "null"
    assert go_marshal_string_map({}) == "{}"
    assert go_marshal_string_map({"b": "x", "a": 'q"\\\n\t\r'}) == '{"a":"q\\"\\\\\\n\\t\\r","b":"x"}'
    assert go_marshal_string_map({"k": "<&>\x08\x0c\x01\u2028é'"}) == (
        '{"k":"\\u003c\\u0026\\u003e\\u0008\\u000c\\u0001\\u2028é\'"}')


@pytest.mark.parametrize(("text", "ip", "net"), [
    ("10.1.2.3/16", "10.1.2.3", "10.1.0.0/16"),
    ("10.1.2.3", "10.1.2.3", "10.1.2.3/32"),
    ("2001:DB8::1/32", "2001:db8::1", "2001:db8::/32"),
    ("fd00::1", "fd00::1", "fd00::1/128"),
    ("1:0:0:2:0:0:0:3", "1:0:0:2::3", "1:0:0:2::3/128"),
    ("::ffff:10.0.0.1", "10.0.0.1", "10.0.0.1/32"),          # IPv4-mapped counts as IPv4
    ("::ffff:10.0.0.1/120", "10.0.0.1", "10.0.0.0/24"),
    ("10.0.0.0/024", "10.0.0.0", "10.0.0.0/24"),             # Go's dtoi allows leading zeros
    ("", "<nil>", "<nil>"),                                  # Go: empty text is a nil IP
])
def test_parse_cidr_or_ip(text: str, ip: str, net: str) -> None:
    # The address as written is what parse_ip makes of the text before any "/".
    parsed_ip = parse_ip(text.partition("/")[0])
    assert (format_ip(parsed_ip) if parsed_ip is not None else "<nil>") == ip
    assert str(parse_cidr_or_ip(text, allow_empty=True)) == net


@pytest.mark.parametrize("bad", ["10.0.0.1/33", "10.0.0.01", "fe80::1%eth0", "fe80::1%eth0/64",
                                 "10.0.0.0/+8", "10.0.0.0/8/8", "10.0.0.0 /8", "::ffff:1.2.3.4/129",
                                 "1.2.3", "x"])
def test_parse_cidr_or_ip_rejects(bad: str) -> None:
    assert parse_cidr_or_ip(bad, allow_empty=True) is None


def test_parse_cidr_requires_a_prefix() -> None:
    assert parse_cidr("10.0.0.1") is None
    assert parse_ip("10.0.0.1/8") is None


@pytest.mark.parametrize(("mac", "ok"), [
    ("00:11:22:33:44:55", True), ("00-11-22-33-44-55", True), ("0011.2233.4455", True),
    ("00:11:22:33:44:55:66:77", True), ("00:11:22:33:44:55:66", False),
    ("00:11:22:33:44:5", False), ("0011.2233.4455.6677", True), ("0011:2233:4455", False),
    ("00:11:22:33:44:55:" + ":".join(["aa"] * 14), True),
])
def test_parse_mac(mac: str, ok: bool) -> None:
    assert (parse_mac(mac) is not None) is ok


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("1", 1), ("1k", 1000), ("1M", 10**6), ("1.01k", 1010), ("1.01P", 1010 * 10**12),
    ("4Gi", 4 * 2**30), ("1Ki", 1024), ("1.5", 2), ("0.1m", 1), ("-1.5", -2), ("+7", 7),
    ("2e3", 2000), ("2E3", 2000), ("1E", 10**18), ("1e-3", 1), (".5k", 500), ("5.", 5),
    ("100m", 1), ("1000m", 1), ("1001m", 2), ("+", 0),
])
def test_quantity_value(text: str, value: int) -> None:
    assert quantity_value(text) == value


@pytest.mark.parametrize("bad", ["", "1K", "1ki", "1e", "1.5.5", "abc", "1 k", "1e3.5", "--1"])
def test_quantity_value_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        quantity_value(bad)


def test_clamp_quantity() -> None:
    assert clamp_quantity("5k", 1000, 10**15) == (5000, True)
    assert clamp_quantity("1", 1000, 10**15) == (1000, False)
    assert clamp_quantity("1e400", 1000, 10**15) == (10**15, False)
    assert clamp_quantity("junk", 1000, 10**15) == (0, False)
