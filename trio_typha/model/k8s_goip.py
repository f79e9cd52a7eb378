"""IP, CIDR and MAC parsing and printing with Go's ``net`` semantics.

Calico parses every address in the Kubernetes objects with Go's ``net`` package (through
libcalico-go's ``lib/net`` wrappers) and prints the result with Go's ``String`` methods.
The printed text ends up in the Calico objects, so the edge cases have to match Go's:
zones are rejected, an IPv4-mapped IPv6 address counts (and prints) as IPv4, a CIDR's
network keeps the length of the mask it was parsed with, and a nil IP prints ``<nil>``.

Addresses are handled as Go's ``net.IP`` byte strings: 4 or 16 bytes, or empty for nil.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

_V4_IN_V6_PREFIX = b"\x00" * 10 + b"\xff\xff"
_MASK_DIGITS_LIMIT = 0xFFFFFF  # Go's dtoi gives up at this value


def to4(ip: bytes) -> bytes | None:
    """``net.IP.To4``: the 4-byte form of an IPv4 (or IPv4-mapped) address, else None."""
    if len(ip) == 4:
        return ip
    if len(ip) == 16 and ip[:12] == _V4_IN_V6_PREFIX:
        return ip[12:]
    return None


def ip_version(ip: bytes) -> int:
    """libcalico-go's ``IP.Version``: 4, 6, or 0 for a nil/odd-length IP."""
    if to4(ip) is not None:
        return 4
    return 6 if len(ip) == 16 else 0


def ip_string(ip: bytes) -> str:
    """``net.IP.String``."""
    if not ip:
        return "<nil>"
    v4 = to4(ip)
    if v4 is not None:
        return str(ipaddress.IPv4Address(v4))
    if len(ip) == 16:
        return ipaddress.IPv6Address(ip).compressed
    return "?" + ip.hex()


def parse_ip(s: str) -> bytes | None:
    """``net.ParseIP``: the 16-byte form, or None (zones are rejected)."""
    if "%" in s:
        return None
    try:
        if ":" in s:
            return ipaddress.IPv6Address(s).packed
        return _V4_IN_V6_PREFIX + ipaddress.IPv4Address(s).packed
    except ValueError:
        return None


def cidr_mask(ones: int, bits: int) -> bytes:
    """``net.CIDRMask``."""
    value = ((1 << ones) - 1) << (bits - ones) if ones else 0
    return value.to_bytes(bits // 8, "big")


def mask_ip(ip: bytes, mask: bytes) -> bytes | None:
    """``net.IP.Mask``."""
    if len(mask) == 16 and len(ip) == 4 and mask[:12] == b"\xff" * 12:
        mask = mask[12:]
    if len(mask) == 4 and len(ip) == 16 and ip[:12] == _V4_IN_V6_PREFIX:
        ip = ip[12:]
    if len(ip) != len(mask):
        return None
    return bytes(a & b for a, b in zip(ip, mask, strict=True))


def mask_size(mask: bytes) -> int:
    """``net.IPMask.Size`` ones count (0 for a mask that is not a prefix)."""
    return max(_mask_ones(mask), 0)


def _mask_ones(mask: bytes) -> int:
    """Length of a canonical mask, or -1 if the mask is not a prefix."""
    value = int.from_bytes(mask, "big")
    bits = len(mask) * 8
    ones = bits - (((~value) & ((1 << bits) - 1)).bit_length())
    return ones if cidr_mask(ones, bits) == mask else -1


@dataclass(frozen=True, slots=True)
class IPNet:
    """Go's ``net.IPNet``: an address (not necessarily masked) and a mask."""

    ip: bytes
    mask: bytes

    def __str__(self) -> str:
        """``net.IPNet.String``."""
        ip = to4(self.ip)
        if ip is None:
            ip = self.ip
            if len(ip) != 16:
                return "<nil>"
        mask = self.mask
        if len(mask) == 4:
            if len(ip) != 4:
                return "<nil>"
        elif len(mask) == 16:
            if len(ip) == 4:
                mask = mask[12:]
        else:
            return "<nil>"
        ones = _mask_ones(mask)
        if ones < 0:
            return f"{ip_string(ip)}/{mask.hex()}"
        return f"{ip_string(ip)}/{ones}"

    @property
    def version(self) -> int:
        return ip_version(self.ip)


def parse_cidr(s: str) -> tuple[bytes, IPNet]:
    """libcalico-go's ``net.ParseCIDR`` (Go's, with the address shortened to 4 bytes
    when it is IPv4).  Returns (address, masked network); raises ``ValueError``."""
    addr, sep, mask_text = s.partition("/")
    if not sep or "%" in addr:
        raise ValueError(f"invalid CIDR address: {s}")
    try:
        if ":" in addr:
            raw, bits = ipaddress.IPv6Address(addr).packed, 128
        else:
            raw, bits = _V4_IN_V6_PREFIX + ipaddress.IPv4Address(addr).packed, 32
    except ValueError as exc:
        raise ValueError(f"invalid CIDR address: {s}") from exc
    if not re.fullmatch(r"[0-9]+", mask_text):
        raise ValueError(f"invalid CIDR address: {s}")
    ones = int(mask_text)
    if ones >= _MASK_DIGITS_LIMIT or ones > bits:
        raise ValueError(f"invalid CIDR address: {s}")
    mask = cidr_mask(ones, bits)
    net_ip = mask_ip(raw, mask)
    assert net_ip is not None
    return (to4(raw) or raw), IPNet(net_ip, mask)


def parse_cidr_or_ip(s: str) -> tuple[bytes, IPNet]:
    """libcalico-go's ``ParseCIDROrIP``: a CIDR, or a bare IP as a /32 or /128.

    As in Go, the empty string parses as a nil IP (whose network prints ``<nil>``).
    Raises ``ValueError`` for anything else that is not an address.
    """
    try:
        return parse_cidr(s)
    except ValueError as cidr_error:
        if s == "":
            return b"", IPNet(b"", cidr_mask(128, 128))
        ip = parse_ip(s)
        if ip is None:
            raise cidr_error from None
        v4 = to4(ip)
        if v4 is not None:
            return v4, IPNet(v4, cidr_mask(32, 32))
        return ip, IPNet(ip, cidr_mask(128, 128))


def parse_mac(s: str) -> bool:
    """Whether Go's ``net.ParseMAC`` accepts ``s`` (EUI-48, EUI-64 or 20-byte IPoIB)."""
    if len(s) < 14:
        return False
    if s[2] in ":-":
        sep = re.escape(s[2])
        groups = (len(s) + 1) // 3
        if (len(s) + 1) % 3 or groups not in (6, 8, 20):
            return False
        return re.fullmatch(f"[0-9a-fA-F]{{2}}(?:{sep}[0-9a-fA-F]{{2}}){{{groups - 1}}}", s,
                            re.ASCII) is not None
    if s[4] == ".":
        groups = (len(s) + 1) // 5
        if (len(s) + 1) % 5 or 2 * groups not in (6, 8, 20):
            return False
        return re.fullmatch(f"[0-9a-fA-F]{{4}}(?:\\.[0-9a-fA-F]{{4}}){{{groups - 1}}}", s,
                            re.ASCII) is not None
    return False
