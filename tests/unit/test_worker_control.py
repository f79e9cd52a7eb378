"""The primary <-> worker control channel's records (workers/control.py): round trips in any
pieces, descriptors matched to their PASS records, and malformed input refused by name."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.config import Config
from trio_typha.config_sources import load_config
from trio_typha.workers import control as c

u32 = st.integers(0, 0xFFFFFFFF)


@st.composite
def statuses(draw: st.DrawFn) -> c.Status:
    accepted = draw(st.integers(0, (1 << 64) - 1))
    return c.Status(draw(st.booleans()), accepted,
                    draw(st.integers(0, min(accepted, 0xFFFFFFFF))), draw(st.text(max_size=80)))


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """Configs with a few fields changed from their defaults, of each field type."""
    return Config().replace(
        server_workers=draw(st.integers(-5, 64)),
        health_enabled=draw(st.booleans()),
        server_ping_interval_secs=draw(st.floats(0, 1e6, allow_nan=False)),
        client_cn=draw(st.text(max_size=20)),
        etcd_endpoints=tuple(draw(st.lists(st.text(max_size=20), max_size=3))),
        tls_cipher_suites=tuple(draw(st.lists(st.sampled_from(
            Config().tls_cipher_suites), min_size=1, max_size=3))))


records = st.one_of(
    st.builds(c.Start, configs(), st.text(max_size=60), st.integers(0, 65535),
              st.integers(1, 64)),
    st.builds(c.Query, u32, st.sampled_from([c.METRICS, c.CONNECTIONS])),
    st.builds(c.Limit, u32),
    st.just(c.Drain()),
    statuses(),
    st.builds(c.Reply, u32, st.binary(max_size=300)),
)


def decode_all(data: bytes, chunk: int, fds: list[int] | None = None) -> list[c.Record]:
    decoder = c.Decoder()
    out: list[c.Record] = []
    if fds:
        decoder.feed(b"", fds)
    for i in range(0, len(data), chunk):
        decoder.feed(data[i:i + chunk])
        out.extend(decoder)
    return out


@given(st.lists(records, max_size=8), st.integers(1, 64))
def test_records_round_trip_in_any_pieces(sent: list[c.Record], chunk: int) -> None:
    data = b"".join(c.encode(r) for r in sent)
    assert decode_all(data, chunk) == sent


@given(st.lists(st.one_of(st.none(), records), max_size=10), st.integers(1, 16))
def test_each_pass_takes_the_oldest_descriptor(sent: list[c.Record | None],
                                               chunk: int) -> None:
    """None stands for a PASS: its descriptor arrives before (or with) its bytes."""
    fds = list(range(100, 100 + sent.count(None)))
    data = b"".join(c.PASS_RECORD if r is None else c.encode(r) for r in sent)
    got = decode_all(data, chunk, fds)
    assert [r.fd for r in got if isinstance(r, c.Pass)] == fds
    assert [r for r in got if not isinstance(r, c.Pass)] == [r for r in sent if r is not None]


def test_the_real_configuration_travels_whole(tmp_path) -> None:
    cfg = load_config({"TYPHA_DATASTORETYPE": "memory", "TYPHA_SERVERWORKERS": "3",
                       "TLS_MIN_VERSION": "1.3", "KUBECONFIG": "/kc",
                       "TYPHA_ETCDENDPOINTS": "http://a:1,https://b:2"}, config_file=None)
    start = c.Start(cfg, str(tmp_path / "primary.sock"), 5473, 2)
    [got] = decode_all(c.encode(start), 1 << 20)
    assert got == start
    assert isinstance(got, c.Start) and got.config.etcd_endpoints == ("http://a:1/", "https://b:2/")


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<BI", kind, len(payload)) + payload


def start_payload(doc: object, version: int = c.VERSION) -> bytes:
    import json
    return bytes([version]) + json.dumps(doc).encode()


GOOD = {"config": c.config_document(Config()), "upstream": "/s", "port": 1, "index": 1}


@pytest.mark.parametrize(("data", "needle"), [
    (frame(99, b""), "unknown record type 99"),
    (frame(c.START, start_payload(GOOD, version=2)), "unsupported control version"),
    (frame(c.START, b"\x01not json"), "not JSON"),
    (frame(c.START, start_payload([1])), "not a JSON object"),
    (frame(c.START, start_payload({**GOOD, "port": "1"})), "mistyped"),
    (frame(c.START, start_payload({**GOOD, "config": {"server_port": 1}})), "fields differ"),
    (frame(c.START, start_payload({**GOOD, "config": {**GOOD["config"], "server_port": "1"}})),
     "server_port is str, not int"),
    (frame(c.START, start_payload({**GOOD, "config": {**GOOD["config"], "health_enabled": 1}})),
     "health_enabled is int, not bool"),
    (frame(c.PASS, b""), "without a descriptor"),
    (frame(c.PASS, b"x"), "with a payload"),
    (frame(c.QUERY, struct.pack("<IB", 1, 9)), "unknown 9"),
    (frame(c.QUERY, b"\x01"), "malformed record of type 3"),
    (frame(c.STATUS, struct.pack("<BQI", 2, 1, 1)), "status ready=2"),
    (frame(c.STATUS, struct.pack("<BQI", 1, 1, 2)), "open=2 accepted=1"),
    (frame(c.STATUS, struct.pack("<BQI", 1, 1, 1) + b"\xff"), "malformed"),
    (frame(c.DRAIN, b"x"), "drain record with a payload"),
])
def test_malformed_records_are_named(data: bytes, needle: str) -> None:
    decoder = c.Decoder()
    decoder.feed(data)
    with pytest.raises(c.ControlError, match=needle):
        list(decoder)


def test_a_record_over_the_limit_is_refused_before_it_is_read() -> None:
    decoder = c.Decoder(max_record=10)
    decoder.feed(struct.pack("<BI", c.REPLY, 11))
    with pytest.raises(c.ControlError, match="over the 10"):
        list(decoder)


def test_every_config_field_type_is_one_the_document_carries() -> None:
    kinds = {type(f.default) for f in dataclasses.fields(Config)}
    assert kinds <= {str, int, float, bool, tuple}
