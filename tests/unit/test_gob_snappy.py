"""Snappy framing (docs/typha-protocol.md §2.3): our chunks, and Go's reader rules on input."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.protocols.gob import snappy
from trio_typha.protocols.gob.snappy import STREAM_IDENTIFIER, FrameReader, FramingError


def crc32c(data: bytes) -> int:
    """Reference CRC-32C (Castagnoli), bit by bit: independent of cramjam."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> bytes:
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF).to_bytes(4, "little")


def parse(stream: bytes) -> list[tuple[int, bytes]]:
    out, i = [], 0
    while i < len(stream):
        n = int.from_bytes(stream[i + 1:i + 4], "little")
        out.append((stream[i], stream[i + 4:i + 4 + n]))
        i += 4 + n
    assert i == len(stream)
    return out


def read_all(data: bytes, step: int = 1 << 20) -> bytes:
    r = FrameReader()
    out = b""
    for i in range(0, len(data), step):
        r.feed(data[i:i + step])
        while (chunk := r.next_chunk()) is not None:
            out += chunk
    assert r.unconsumed() == b""
    return out


def test_crc_test_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert masked(b"123456789") == bytes.fromhex("e5 b0 8a c7")


def test_a_short_message_is_one_uncompressed_chunk() -> None:
    assert snappy.chunks(bytes.fromhex("07 ff 8c 03 01 02 00 00")) == bytes.fromhex(
        "01 0c 00 00 dc 29 ff 56 07 ff 8c 03 01 02 00 00")


@pytest.mark.parametrize("data", [b"x", b"hello world" * 1000, os.urandom(65536),
                                  os.urandom(200_000), b"ab" * 100_000])
def test_stream_layout_and_checksums(data: bytes) -> None:
    stream = snappy.stream(data)
    chunks = parse(stream)
    assert chunks[0] == (0xFF, b"sNaPpY")
    decoded = b""
    for kind, body in chunks[1:]:
        assert kind in (0x00, 0x01)
        part = body[4:] if kind == 0x01 else read_all(STREAM_IDENTIFIER + bytes((kind,))
                                                       + len(body).to_bytes(3, "little") + body)
        assert len(part) <= 65536
        assert body[:4] == masked(part)
        decoded += part
    assert decoded == data
    assert read_all(stream, step=7919) == data


def test_chunks_continue_a_stream() -> None:
    parts = [b"first message", os.urandom(70_000), b"third"]
    stream = snappy.STREAM_IDENTIFIER + b"".join(snappy.chunks(p) for p in parts)
    r = FrameReader()
    r.feed(stream)
    got = []
    while (c := r.next_chunk()) is not None:
        got.append(c)
    assert got[0] == b"" and b"".join(got) == b"".join(parts)
    assert got[1] == parts[0]  # each part starts a chunk: readable as soon as it arrives


def test_skippable_chunks_and_repeated_identifier() -> None:
    data = (STREAM_IDENTIFIER + b"\xfe\x02\x00\x00xx" + b"\x80\x01\x00\x00y" + snappy.chunks(b"a")
            + STREAM_IDENTIFIER + snappy.chunks(b"b"))
    assert read_all(data, step=3) == b"ab"


@pytest.mark.parametrize(("desc", "data"), [
    ("no identifier first", snappy.chunks(b"abc")),
    ("padding first", b"\xfe\x00\x00\x00" + snappy.stream(b"abc")),
    ("bad identifier", b"\xff\x06\x00\x00sNaPpX"),
    ("identifier of wrong length", b"\xff\x05\x00\x00sNaPp"),
    ("unskippable chunk", STREAM_IDENTIFIER + b"\x02\x01\x00\x00x"),
    ("chunk too long", STREAM_IDENTIFIER + b"\x01" + (76495).to_bytes(3, "little")),
    ("bad checksum", STREAM_IDENTIFIER + b"\x01\x05\x00\x00\x00\x00\x00\x00x"),
    ("shorter than its checksum", STREAM_IDENTIFIER + b"\x01\x02\x00\x00xx"),
    ("stored chunk over 64 KiB", STREAM_IDENTIFIER + b"\x01" + (65541).to_bytes(3, "little")
     + masked(b"x" * 65537) + b"x" * 65537),
    ("corrupt block", STREAM_IDENTIFIER + b"\x00\x06\x00\x00" + masked(b"") + b"\xff\xff"),
])
def test_reader_refuses(desc: str, data: bytes) -> None:
    with pytest.raises(FramingError):
        read_all(data)


@given(st.binary(max_size=3000))
def test_random_input_is_refused_or_read(data: bytes) -> None:
    r = FrameReader()
    r.feed(data)
    try:
        while r.next_chunk() is not None:
            pass
    except FramingError:
        pass
