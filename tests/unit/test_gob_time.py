"""time.Time's binary layout (Go's time.Time.MarshalBinary)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.protocols.gob.gotime import UNIX_TO_INTERNAL, ZERO_TIME, GoTime, TimeFormatError

PING = 1_700_000_000 * 10**9 + 5  # 2023-11-14T22:13:20.000000005Z


@pytest.mark.parametrize(("offset", "tail"), [
    (0, "00 00"),           # Local zone that is UTC: not the UTC marker
    (None, "ff ff"),        # Go's UTC location
    (19800, "01 4a"),       # +05:30 = 330 minutes
    (-28800, "fe 20"),      # -08:00 = -480 minutes
])
def test_version_1(offset: int | None, tail: str) -> None:
    t = GoTime.from_unix_ns(PING, offset)
    data = t.marshal_binary()
    assert data == bytes.fromhex("01 00 00 00 0e dc e5 e8 00 00 00 00 05" + tail)
    assert GoTime.unmarshal_binary(data) == t


def test_version_2_for_offsets_with_seconds() -> None:
    t = GoTime.from_unix_ns(PING, 3600 + 75)
    data = t.marshal_binary()
    assert len(data) == 16 and data[0] == 2
    assert data[13:] == bytes.fromhex("00 3d 0f")  # 61 minutes, 15 seconds
    assert GoTime.unmarshal_binary(data) == t


def test_negative_leftover_seconds_decode_as_go_does() -> None:
    data = GoTime.from_unix_ns(PING, -(3600 + 75)).marshal_binary()
    assert data[13:] == bytes.fromhex("ff c3 f1")  # -61 minutes, -15 as int8
    # Go adds the seconds byte unsigned: -3660 + 241.
    assert GoTime.unmarshal_binary(data).offset == -3660 + 241


def test_zero_time() -> None:
    assert ZERO_TIME.is_zero
    assert ZERO_TIME.marshal_binary() == bytes.fromhex("01" + "00" * 12 + "ff ff")
    assert not GoTime(0, 0, 3600).is_zero  # a zero instant in a zone is sent
    assert GoTime.from_unix_ns(0).seconds == UNIX_TO_INTERNAL


def test_offset_of_minus_one_minute_cannot_be_marshalled() -> None:
    with pytest.raises(TimeFormatError):
        GoTime.from_unix_ns(PING, -60).marshal_binary()


@pytest.mark.parametrize("data", [
    b"", b"\x03" + bytes(14), b"\x01" + bytes(13), b"\x01" + bytes(15), b"\x02" + bytes(14),
])
def test_strict_lengths_and_versions(data: bytes) -> None:
    with pytest.raises(TimeFormatError):
        GoTime.unmarshal_binary(data)


_OFFSETS = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=32767 * 60 + 59),
    # Negative offsets round-trip in Go only in whole minutes, and -1 minute is refused.
    st.integers(min_value=-32768, max_value=-2).map(lambda m: m * 60))


@given(st.integers(min_value=-(10**19), max_value=10**19), _OFFSETS)
def test_round_trip(unix_ns: int, offset: int | None) -> None:
    t = GoTime.from_unix_ns(unix_ns, offset)
    assert GoTime.unmarshal_binary(t.marshal_binary()) == t
    assert t.unix_ns == unix_ns
