"""IPv6 text: the model's ``format_ip`` is Go's ``net.IP.String`` (pure, no Go needed).

Go's output is checked against Go itself in tests/interop/test_ip_go.py; here what makes the
standard library usable: equal to ``ipaddress`` except for IPv4-mapped addresses, which Go
prints as a dotted quad.
"""

from __future__ import annotations

import ipaddress
import random

from trio_typha.model.golang import format_ip, parse_ip

MAPPED = b"\x00" * 10 + b"\xff\xff"


def random_addresses(n: int, seed: int) -> list[bytes]:
    """Addresses rich in zero groups (runs of every length and position), some mapped."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.05:
            out.append(MAPPED + rng.randbytes(4))
            continue
        groups = [0 if rng.random() < 0.5 else rng.choice(
            (rng.randrange(1, 16), rng.randrange(1 << 16))) for _ in range(8)]
        out.append(b"".join(g.to_bytes(2, "big") for g in groups))
    return out


def test_format_ip_equals_the_standard_library_on_200000_random_addresses() -> None:
    """Apart from IPv4-mapped addresses, whose Go form is checked below."""
    addresses = random_addresses(200_000, seed=8)
    got = [format_ip(b) for b in addresses]
    want = [".".join(map(str, b[12:])) if b[:12] == MAPPED
            else ipaddress.IPv6Address(b).compressed for b in addresses]
    assert got == want
    for b, text in zip(addresses[:5_000], got, strict=False):  # and the text parses back
        assert parse_ip(text) == (b[12:] if b[:12] == MAPPED else b)


def test_where_go_and_the_standard_library_differ() -> None:
    b = MAPPED + bytes([10, 0, 0, 1])
    assert format_ip(b) == "10.0.0.1"  # Go: the dotted quad
    assert ipaddress.IPv6Address(b).compressed != "10.0.0.1"
    assert format_ip(bytes(16)) == "::"
    assert format_ip(bytes(15) + b"\x01") == "::1"
    # A single zero group is not shortened; of two equal runs the first one is.
    assert format_ip(bytes.fromhex("20010db8000000010001000100010001")) == "2001:db8:0:1:1:1:1:1"
    assert format_ip(bytes.fromhex("20010000000000010000000000010001")) == "2001::1:0:0:1:1"
