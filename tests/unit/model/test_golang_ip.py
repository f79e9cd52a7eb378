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


def _stdlib_parse_v4(s: str) -> bytes | None:
    try:
        return ipaddress.IPv4Address(s).packed
    except ValueError:
        return None


def test_the_dotted_quad_fast_path_accepts_exactly_what_ipaddress_accepts() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from trio_typha.model.golang import parse_cidr

    octet = st.one_of(st.integers(0, 300).map(str), st.text("0123456789", max_size=4),
                      st.text("0123456789\u0661\u00b2 +-x", max_size=3))
    texts = st.one_of(st.lists(octet, min_size=1, max_size=6).map(".".join),
                      st.text("0123456789.\n", max_size=16))

    @settings(max_examples=3000, deadline=None)
    @given(texts, st.integers(0, 40))
    def check(s: str, mask: int) -> None:
        want = _stdlib_parse_v4(s) if s and "%" not in s else None
        assert parse_ip(s) == want
        net = parse_cidr(f"{s}/{mask}")
        if want is None or mask > 32:
            assert net is None
        else:
            assert net is not None and net.prefix == mask
            n = int.from_bytes(want, "big") >> (32 - mask) << (32 - mask) if mask else 0
            assert net.ip == n.to_bytes(4, "big")
            assert format_ip(net.ip) == str(ipaddress.IPv4Address(net.ip))

    check()
