"""gRPC message framing: whole messages out of arbitrarily cut byte streams."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.grpcwire.framing import FramingError, MessageDecoder, frame_message
from trio_typha.grpcwire.status import StatusCode

payloads = st.lists(st.binary(max_size=300), max_size=12)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(payloads, st.lists(st.integers(min_value=0), max_size=40))
def test_any_split_yields_the_same_messages(messages, cuts):
    stream = b"".join(frame_message(m) for m in messages)
    decoder = MessageDecoder(max_message_size=1000)
    out = []
    for chunk in cut(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == messages
    assert decoder.at_boundary and decoder.buffered == 0


@given(payloads)
def test_byte_at_a_time(messages):
    stream = b"".join(frame_message(m) for m in messages)
    decoder = MessageDecoder(max_message_size=1000)
    out = []
    for i in range(len(stream)):
        out.extend(decoder.feed(stream[i:i + 1]))
    assert out == messages


@given(st.binary(min_size=1, max_size=100), st.integers(min_value=1, max_value=104))
def test_partial_message_is_held_not_returned(payload, keep):
    framed = frame_message(payload)
    keep = min(keep, len(framed) - 1)
    decoder = MessageDecoder(max_message_size=1000)
    assert decoder.feed(framed[:keep]) == []
    assert not decoder.at_boundary
    assert decoder.feed(framed[keep:]) == [payload]


def test_prefix_is_flag_and_big_endian_length():
    assert frame_message(b"abc") == b"\x00\x00\x00\x00\x03abc"
    assert frame_message(b"") == b"\x00" * 5


@given(st.integers(min_value=0, max_value=4))
def test_oversized_message_is_rejected_from_its_prefix_alone(extra_cut):
    decoder = MessageDecoder(max_message_size=100)
    assert decoder.feed(frame_message(b"x" * 100)) == [b"x" * 100]  # the limit itself is fine
    prefix = struct.pack(">BI", 0, 101)
    decoder.feed(prefix[:extra_cut])
    with pytest.raises(FramingError) as info:
        decoder.feed(prefix[extra_cut:])
    assert info.value.code is StatusCode.RESOURCE_EXHAUSTED
    assert "101" in info.value.message
    assert decoder.buffered == 0
    with pytest.raises(FramingError):  # stays failed
        decoder.feed(frame_message(b"ok"))


def test_oversized_prefix_behind_a_good_message_fails_the_chunk():
    # The stream is over either way; the error must not be hidden by the good message.
    decoder = MessageDecoder(max_message_size=10)
    with pytest.raises(FramingError):
        decoder.feed(frame_message(b"fine") + struct.pack(">BI", 0, 11))


@pytest.mark.parametrize(("flag", "code"), [(1, StatusCode.INTERNAL), (7, StatusCode.INTERNAL)])
def test_compressed_or_unknown_flag_is_rejected(flag, code):
    decoder = MessageDecoder(max_message_size=100)
    with pytest.raises(FramingError) as info:
        decoder.feed(struct.pack(">BI", flag, 1) + b"x")
    assert info.value.code is code
