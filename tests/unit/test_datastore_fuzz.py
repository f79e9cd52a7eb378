"""Fuzzing the datastore decoders: whatever a datastore sends is events or our own error.

The Kubernetes watch and list decoders (``k8s_stream``, ``k8s_listbody``, the reflector) and
etcd's decoders (``etcd_rpc``, ``etcd_state``) generated protobuf messages and raw bytes
of every shape, the objects in them converted by the felix syncer of that datastore: each
input ends in events, or in :class:`MalformedResponse` / :class:`WatchErrorEvent` (KDD) or
:class:`EtcdProtocolError` / :class:`EtcdServerError` (etcd), which the watch loops answer
with one warning and a relist or a new watch (tests/integration/test_kdd_malformed_events.py).
Any other exception would end the process.  The same targets run coverage-guided under
atheris (tests/fuzz/targets.py).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import targets
from trio_typha.datastore import etcd_pb2 as pb
from trio_typha.datastore import etcd_rpc as rpc
from trio_typha.datastore.etcd_errors import EtcdProtocolError, EtcdServerError
from trio_typha.datastore.etcd_state import EtcdSyncState
from trio_typha.datastore.events import DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.k8s_errors import MalformedResponse, StatusInfo
from trio_typha.datastore.k8s_listbody import split_list
from trio_typha.datastore.k8s_profile_watch import ProfileStamps
from trio_typha.datastore.k8s_reflector import KindReflector, WatchErrorEvent
from trio_typha.datastore.k8s_stream import LineDecoder, parse_watch_event
from trio_typha.model import kinds as K
from trio_typha.model.syncers import DatastoreMode, syncer_definition

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KDD_FELIX = syncer_definition("felix", DatastoreMode.KDD, calico_group=K.CALICO_CRD_GROUP)
ETCD_FELIX = syncer_definition("felix", DatastoreMode.ETCD)

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4)
                           | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=20)
names = st.text(alphabet="abc-.", min_size=1, max_size=5) | json_values
metadata = st.fixed_dictionaries({}, optional={
    "name": names, "namespace": names, "resourceVersion": st.sampled_from(["1", "9"]) | names,
    "uid": st.just("11111111-2222-3333-4444-555555555555") | json_values,
    "labels": json_values, "annotations": json_values}) | json_values
objects = st.fixed_dictionaries({}, optional={
    "metadata": metadata, "spec": json_values, "status": json_values,
    "apiVersion": st.just("v1") | json_values, "kind": st.just("Pod") | json_values,
    "code": json_values, "reason": json_values, "details": json_values}) | json_values
watch_lines = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "SYNC"])
    | json_values, "object": objects}) | json_values
KDD_KINDS = (K.POD, K.NAMESPACE, K.SERVICE_ACCOUNT, K.NODE, K.K8S_NETWORK_POLICY,
             K.calico_kind("GlobalNetworkPolicy", K.CALICO_CRD_GROUP))


def _converted(definition: Any, events: list[DatastoreEvent]) -> None:
    for ev in events:
        assert isinstance(ev, ResourceEvent | KindSynced)
        if isinstance(ev, ResourceEvent) and ev.obj is not None:
            assert isinstance(definition.convert(ev.kind, ev.obj,
                                                 key=(ev.namespace, ev.name)), list)


@FUZZ
@given(st.sampled_from(KDD_KINDS), st.lists(watch_lines, max_size=6))
def test_kdd_watch_lines_are_events_or_our_error(kind: K.ResourceKind,
                                                 docs: list[Any]) -> None:
    reflector = KindReflector(kind, profile=ProfileStamps())
    reflector.resume_rv = "1"
    for doc in docs:
        line = json.dumps(doc).encode()
        try:
            event = parse_watch_event(line)
        except MalformedResponse:
            continue
        assert event is not None and isinstance(event.resource_version, str)
        try:
            _converted(KDD_FELIX, reflector.watched(event))
        except (MalformedResponse, WatchErrorEvent):
            continue


@FUZZ
@given(st.binary(max_size=300))
def test_kdd_watch_bytes_are_events_or_our_error(data: bytes) -> None:
    targets.kdd_watch_stream(data)  # raises anything but the declared errors
    decoder = LineDecoder(max_line=64)
    try:
        lines = decoder.feed(data)
    except MalformedResponse as exc:
        assert "exceeds 64 bytes" in str(exc)
        return
    for line in lines:
        with contextlib.suppress(MalformedResponse):
            parse_watch_event(line)


@FUZZ
@given(st.lists(objects, max_size=5), json_values)
def test_kdd_list_items_are_events_or_our_error(items: list[Any], list_md: Any) -> None:
    body = json.dumps({"kind": "PodList", "metadata": list_md, "items": items}).encode()
    reflector = KindReflector(K.POD)
    try:
        _, decoded = split_list(body, "list of pods")
        _converted(KDD_FELIX, list(reflector.stream_listed(decoded, "7")))
    except MalformedResponse:
        pass


etcd_values = (objects.map(lambda o: json.dumps(o).encode()) | st.binary(max_size=40))
etcd_keys = st.sampled_from([
    b"/calico/resources/v3/projectcalico.org/globalnetworkpolicies/p",
    b"/calico/resources/v3/projectcalico.org/workloadendpoints/ns/n-k8s-p-eth0",
    b"/calico/resources/v3/projectcalico.org/profiles/kns.a",
    b"/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26", b"/elsewhere"]) | st.binary(max_size=20)
revisions = st.integers(-2**63, 2**63 - 1)
kvs = st.builds(pb.KeyValue, key=etcd_keys, value=etcd_values, mod_revision=revisions,
                create_revision=revisions)
# Event types past DELETE are what a newer etcd could send (proto3 enums are open).
etcd_events = st.builds(pb.Event, type=st.integers(0, 3), kv=kvs)
headers = st.builds(pb.ResponseHeader, revision=revisions,
                    cluster_id=st.integers(0, 2**64 - 1))
watch_responses = st.builds(
    pb.WatchResponse, header=headers, watch_id=st.integers(-1, 3),
    created=st.booleans(), canceled=st.booleans(), compact_revision=revisions,
    events=st.lists(etcd_events, max_size=3)).map(lambda m: m.SerializeToString())
ETCD_KINDS = tuple(K.calico_kind(k) for k in ("GlobalNetworkPolicy", "WorkloadEndpoint",
                                               "Profile", "IPAMBlock"))


@FUZZ
@given(st.lists(watch_responses | st.binary(max_size=60), max_size=4))
def test_etcd_watch_messages_are_events_or_our_error(messages: list[bytes]) -> None:
    state = EtcdSyncState(ETCD_KINDS)
    for message in messages:
        try:
            _converted(ETCD_FELIX, list(state.watched(rpc.decode_watch_response(message))))
        except (EtcdProtocolError, EtcdServerError):
            continue


@FUZZ
@given(st.builds(pb.RangeResponse, header=headers, kvs=st.lists(kvs, max_size=4),
                 more=st.booleans()).map(lambda m: m.SerializeToString())
       | st.binary(max_size=80))
def test_etcd_ranges_are_events_or_our_error(reply: bytes) -> None:
    state = EtcdSyncState(ETCD_KINDS)
    try:
        page = rpc.decode_range(reply)
    except (EtcdProtocolError, EtcdServerError):
        return
    for kind in ETCD_KINDS:
        _converted(ETCD_FELIX, state.listed(kind, page.kvs, page.header))


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(("line", "why"), [
    (b'{"type":"BOOKMARK","object":{"metadata":null}}', "metadata is not an object"),
    (b'{"type":"BOOKMARK","object":{"metadata":"x"}}', "metadata is not an object"),
    (b'{"type":"BOOKMARK","object":{}}', "metadata is not an object"),
    (b'{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":5}}}',
     "resourceVersion is not a string"),
    (b'{"type":"ADDED"}', "ADDED watch event has no object"),
    (b'{"type":"ADDED","object":[1]}', "ADDED watch event has no object"),
    (b'{"type":"SYNC","object":{}}', "unknown watch event type 'SYNC'"),
    (b'[{"type":"ADDED"}]', "watch event is not a JSON object"),
    (b'{"type":"ADDED",', "watch event is not JSON"),
    (b'\xff\xfe{}', "watch event is not JSON"),
    (b'{"type":"ADDED","object":' + DEEP + b"}", "watch event is not JSON"),
])
def test_malformed_watch_lines_are_named(line: bytes, why: str) -> None:
    with pytest.raises(MalformedResponse, match=why.replace("(", r"\(")):
        parse_watch_event(line)


def test_a_bookmark_with_metadata_but_no_version_moves_nothing() -> None:
    reflector = KindReflector(K.POD)
    reflector.resume_rv = "4"
    event = parse_watch_event(b'{"type":"BOOKMARK","object":{"metadata":{}}}')
    assert event is not None and event.resource_version == ""
    assert reflector.watched(event) == [] and reflector.resume_rv == "4"


def test_a_line_past_the_limit_is_our_error() -> None:
    decoder = LineDecoder(max_line=1024)
    assert decoder.feed(b'{"type":"BOOKMARK"') == []
    with pytest.raises(MalformedResponse, match="exceeds 1024 bytes"):
        decoder.feed(b"x" * 2000)


def test_odd_error_events_still_read_as_a_status() -> None:
    status = StatusInfo.from_object({"code": True, "reason": 5, "details": {"causes": 7}})
    assert (status.code, status.reason, status.causes) == (0, "5", ())
    status = StatusInfo.from_object({"code": 410, "details": {"causes": [{"reason": "R"}, 1]}})
    assert status.expired and status.causes == ("R",)


def test_etcd_truncated_message_is_our_error() -> None:
    whole = pb.WatchResponse(events=[pb.Event(kv=pb.KeyValue(key=b"/k", value=b"v" * 50))])
    with pytest.raises(EtcdProtocolError, match="not a valid message"):
        rpc.decode_watch_response(whole.SerializeToString()[:-10])


def test_etcd_values_nested_too_deeply_are_skipped_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    key = b"/calico/resources/v3/projectcalico.org/globalnetworkpolicies/p"
    message = pb.WatchResponse(header=pb.ResponseHeader(revision=5), events=[
        pb.Event(kv=pb.KeyValue(key=key, value=b'{"spec":' + DEEP + b"}", mod_revision=5))])
    state = EtcdSyncState(ETCD_KINDS)
    assert state.watched(rpc.decode_watch_response(message.SerializeToString())) == []
    assert "Skipping etcd key /calico/resources/v3/projectcalico.org/globalnetworkpolicies/p" \
        in caplog.text and "nested too deeply" in caplog.text


def test_kdd_list_nested_too_deeply_is_our_error() -> None:
    body = b'{"kind":"PodList","metadata":{},"items":[' + DEEP + b"]}"
    with pytest.raises(MalformedResponse, match="nested too deeply"):
        _, items = split_list(body, "list of pods")
        list(items)
