"""Watch-stream decoding: lines across arbitrary chunk boundaries, event parsing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.datastore.k8s_errors import MalformedResponse, StatusInfo
from trio_typha.datastore.k8s_stream import LineDecoder, WatchEvent, parse_watch_event


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


_line = st.binary(max_size=300).map(lambda b: b.replace(b"\n", b""))


@given(lines=st.lists(_line, max_size=20), cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_lines_survive_any_chunking(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    decoder = LineDecoder()
    out: list[bytes] = []
    for chunk in _split(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == lines
    assert decoder.pending == 0
    assert decoder.close() == b""


@given(lines=st.lists(_line, min_size=1, max_size=5), tail=_line.filter(bool),
       cuts=st.lists(st.integers(0, 2_000), max_size=10))
def test_unterminated_tail_is_held_until_close(lines: list[bytes], tail: bytes,
                                                cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines) + tail
    decoder = LineDecoder()
    out: list[bytes] = []
    for chunk in _split(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == lines
    assert decoder.pending == len(tail)
    assert decoder.close() == tail
    assert decoder.pending == 0


@given(events=st.lists(st.fixed_dictionaries({
    "type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]),
    "name": st.text(min_size=1, max_size=20),
    "rv": st.integers(1, 10**9).map(str),
}), max_size=15), cuts=st.lists(st.integers(0, 5_000), max_size=40))
def test_watch_events_decode_across_chunks(events: list[dict[str, str]],
                                           cuts: list[int]) -> None:
    docs = [{"type": e["type"], "object": {"metadata": {"name": e["name"],
                                                        "resourceVersion": e["rv"]}}}
            for e in events]
    stream = b"".join(json.dumps(d, ensure_ascii=False).encode() + b"\n" for d in docs)
    decoder = LineDecoder()
    decoded: list[WatchEvent] = []
    for chunk in _split(stream, cuts):
        for line in decoder.feed(chunk):
            event = parse_watch_event(line)
            assert event is not None
            decoded.append(event)
    assert [(e.type, e.object, e.resource_version) for e in decoded] == [
        (d["type"], d["object"], d["object"]["metadata"]["resourceVersion"]) for d in docs]


def test_line_too_long_is_an_error() -> None:
    decoder = LineDecoder(max_line=10)
    assert decoder.feed(b"0123456789\nabc") == [b"0123456789"]
    with pytest.raises(MalformedResponse, match="exceeds 10 bytes"):
        decoder.feed(b"defghijk")


def test_many_small_chunks_of_one_long_line() -> None:
    decoder = LineDecoder()
    payload = b"x" * 100_000
    for i in range(0, len(payload), 7):
        assert decoder.feed(payload[i:i + 7]) == []
    assert decoder.feed(b"\n") == [payload]


def test_blank_lines_are_keepalives() -> None:
    assert parse_watch_event(b"") is None
    assert parse_watch_event(b"  \r") is None


@pytest.mark.parametrize("line, message", [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"type": "SNAPSHOT", "object": {}}', "unknown watch event type"),
    (b'{"type": "ADDED"}', "has no object"),
    (b'{"type": "ADDED", "object": "pod"}', "has no object"),
])
def test_malformed_events_are_errors(line: bytes, message: str) -> None:
    with pytest.raises(MalformedResponse, match=message):
        parse_watch_event(line)


def test_error_event_status() -> None:
    event = parse_watch_event(json.dumps({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
        "reason": "Expired", "message": "too old resource version: 1 (50)"}}).encode())
    assert event is not None and event.type == "ERROR"
    status = StatusInfo.from_object(event.object)
    assert status == StatusInfo(410, "Expired", "too old resource version: 1 (50)")
    assert status.expired
    assert not StatusInfo(500, "InternalError", "boom").expired
    assert StatusInfo.from_object("garbage").code == 0


def test_too_large_resource_version_status() -> None:
    status = StatusInfo.from_object({
        "kind": "Status", "code": 504, "reason": "Timeout",
        "message": "Too large resource version: 90, current: 12",
        "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version"}]}})
    assert status.causes == ("ResourceVersionTooLarge",)
    assert status.too_large_rv and not status.expired
    assert not StatusInfo(504, "Timeout", "etcd is slow").too_large_rv
