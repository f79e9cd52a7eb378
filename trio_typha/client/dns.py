"""Just enough DNS (RFC 1035, RFC 2782 SRV, RFC 3596 AAAA) to discover Typha by SRV record.

The standard library resolves host names but not SRV records, and the fixed stack has no DNS
library, so this is a small codec of our own: pure functions that build a query and parse an
answer (name compression included), plus the encoder a test responder needs, and one trio
coroutine that asks a server over UDP.  Nothing here trusts the bytes it parses: a short,
looping or otherwise malformed message raises :class:`DnsFormatError`.
"""

from __future__ import annotations

import ipaddress
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import trio

TYPE_A = 1
TYPE_AAAA = 28
TYPE_SRV = 33
CLASS_IN = 1
RCODE_NOERROR = 0
RCODE_NXDOMAIN = 3
_MAX_POINTERS = 64  # compression pointers followed in one name before we call it a loop


class DnsError(Exception):
    """A DNS lookup failed (timeout, error code, or a reply we cannot use)."""


class DnsFormatError(DnsError):
    """A DNS message is malformed."""


@dataclass(frozen=True, slots=True)
class Srv:
    priority: int
    weight: int
    port: int
    target: str


@dataclass(frozen=True, slots=True)
class Record:
    name: str
    rtype: int
    ttl: int
    data: Srv | str | bytes  # Srv, an address string for A/AAAA, raw bytes otherwise


@dataclass(frozen=True, slots=True)
class Message:
    ident: int
    rcode: int
    questions: list[tuple[str, int]]
    answers: list[Record]
    additionals: list[Record]
    response: bool = True


# -- encoding ------------------------------------------------------------------------------

def encode_name(name: str) -> bytes:
    out = bytearray()
    for label in name.rstrip(".").split("."):
        if not label:
            continue
        raw = label.encode("idna") if not label.isascii() else label.encode()
        if len(raw) > 63:
            raise ValueError(f"DNS label too long: {label!r}")
        out += bytes([len(raw)]) + raw
    return bytes(out + b"\0")


def encode_query(name: str, rtype: int, ident: int) -> bytes:
    """A recursive query for ``name``/``rtype``."""
    header = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    return header + encode_name(name) + struct.pack("!HH", rtype, CLASS_IN)


def _rdata(record: Record) -> bytes:
    data = record.data
    if isinstance(data, Srv):
        return struct.pack("!HHH", data.priority, data.weight, data.port) + \
            encode_name(data.target)
    if isinstance(data, str):
        return ipaddress.ip_address(data).packed
    return data


def encode_response(query: Message, answers: Sequence[Record],
                    additionals: Sequence[Record] = (),
                    *, rcode: int = RCODE_NOERROR) -> bytes:
    """The authoritative answer to ``query`` (no name compression: a responder for tests)."""
    flags = 0x8400 | 0x0100 | 0x0080 | rcode  # QR, AA, RD echoed, RA
    out = bytearray(struct.pack("!HHHHHH", query.ident, flags, len(query.questions),
                                len(answers), 0, len(additionals)))
    for qname, qtype in query.questions:
        out += encode_name(qname) + struct.pack("!HH", qtype, CLASS_IN)
    for record in (*answers, *additionals):
        rdata = _rdata(record)
        out += encode_name(record.name) + struct.pack("!HHIH", record.rtype, CLASS_IN,
                                                      record.ttl, len(rdata)) + rdata
    return bytes(out)


# -- decoding ------------------------------------------------------------------------------

def _read_name(buf: bytes, pos: int) -> tuple[str, int]:
    """The name at ``pos`` and the offset just after it (following compression pointers)."""
    labels: list[str] = []
    end: int | None = None
    for _ in range(_MAX_POINTERS):
        if pos >= len(buf):
            raise DnsFormatError("name runs past the end of the message")
        length = buf[pos]
        if length & 0xC0 == 0xC0:
            if pos + 1 >= len(buf):
                raise DnsFormatError("truncated compression pointer")
            if end is None:
                end = pos + 2
            pos = ((length & 0x3F) << 8) | buf[pos + 1]
            continue
        if length & 0xC0:
            raise DnsFormatError(f"unsupported label type {length:#x}")
        if length == 0:
            return ".".join(labels), (end if end is not None else pos + 1)
        label = buf[pos + 1:pos + 1 + length]
        if len(label) != length:
            raise DnsFormatError("label runs past the end of the message")
        labels.append(label.decode("ascii", "replace"))
        pos += 1 + length
    raise DnsFormatError("compression pointer loop")


def _unpack(fmt: str, buf: bytes, pos: int) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    if pos + size > len(buf):
        raise DnsFormatError("message truncated")
    return struct.unpack_from(fmt, buf, pos)


def _read_record(buf: bytes, pos: int) -> tuple[Record, int]:
    name, pos = _read_name(buf, pos)
    rtype, _cls, ttl, rdlen = _unpack("!HHIH", buf, pos)
    pos += 10
    rdata = buf[pos:pos + rdlen]
    if len(rdata) != rdlen:
        raise DnsFormatError("record data truncated")
    data: Srv | str | bytes = rdata
    if rtype == TYPE_SRV:
        priority, weight, port = _unpack("!HHH", buf, pos)
        target, _ = _read_name(buf, pos + 6)
        data = Srv(priority, weight, port, target)
    elif rtype == TYPE_A and rdlen == 4 or rtype == TYPE_AAAA and rdlen == 16:
        data = str(ipaddress.ip_address(rdata))
    return Record(name, rtype, ttl, data), pos + rdlen


def decode_message(buf: bytes) -> Message:
    ident, flags, qd, an, ns, ar = _unpack("!HHHHHH", buf, 0)
    pos = 12
    questions = []
    for _ in range(qd):
        qname, pos = _read_name(buf, pos)
        qtype, _cls = _unpack("!HH", buf, pos)
        pos += 4
        questions.append((qname, qtype))
    sections: list[list[Record]] = [[], [], []]
    for section, count in zip(sections, (an, ns, ar), strict=True):
        for _ in range(count):
            record, pos = _read_record(buf, pos)
            section.append(record)
    return Message(ident, flags & 0xF, questions, sections[0], sections[2],
                   response=bool(flags & 0x8000))


# -- SRV ordering (RFC 2782) ------------------------------------------------------------------

def order_srv(records: list[Srv], rng: random.Random) -> list[Srv]:
    """Lowest priority first; within a priority, a weighted random order."""
    out: list[Srv] = []
    for priority in sorted({r.priority for r in records}):
        group = [r for r in records if r.priority == priority]
        while group:
            total = sum(r.weight for r in group)
            if total == 0:
                pick = rng.randrange(len(group))
            else:
                point, pick = rng.uniform(0, total), 0
                for pick, r in enumerate(group):  # noqa: B007 (pick is the result)
                    point -= r.weight
                    if point <= 0:
                        break
            out.append(group.pop(pick))
    return out


# -- the trio part ---------------------------------------------------------------------------

async def query(server: tuple[str, int], name: str, rtype: int, *, attempt_secs: float = 2.0,
                attempts: int = 2, rng: random.Random | None = None) -> Message:
    """Ask ``server`` (host, port) over UDP, waiting ``attempt_secs`` per attempt; the reply.

    Raises :class:`DnsError` on timeout, on an error code other than NXDOMAIN (which comes
    back as a reply with no answers), or a reply that does not match the query.
    """
    ident = (rng or random.Random()).getrandbits(16)
    packet = encode_query(name, rtype, ident)
    family = trio.socket.AF_INET6 if ":" in server[0] else trio.socket.AF_INET
    with trio.socket.socket(family, trio.socket.SOCK_DGRAM) as sock:
        await sock.connect(server)
        for _ in range(attempts):
            await sock.send(packet)
            with trio.move_on_after(attempt_secs):
                while True:
                    data = await sock.recv(65535)
                    try:
                        reply = decode_message(data)
                    except DnsFormatError:
                        continue  # not for us, or garbage: keep waiting for the real reply
                    if reply.ident != ident or not reply.response:
                        continue
                    if reply.rcode not in (RCODE_NOERROR, RCODE_NXDOMAIN):
                        raise DnsError(f"DNS server {server[0]}:{server[1]} answered "
                                       f"rcode {reply.rcode} for {name}")
                    return reply
    raise DnsError(f"DNS server {server[0]}:{server[1]} did not answer for {name} "
                   f"within {attempts}x{attempt_secs:g}s")


def system_nameserver(path: str = "/etc/resolv.conf") -> tuple[str, int]:
    """The first ``nameserver`` in resolv.conf (port 53), or 127.0.0.1 if there is none."""
    try:
        with open(path) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver":
                    return parts[1], 53
    except OSError:
        pass
    return "127.0.0.1", 53
