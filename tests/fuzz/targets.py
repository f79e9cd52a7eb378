"""Fuzz targets: each takes arbitrary bytes and must end in values, a wait for more input,
or the module's own clean error; anything else (another exception, a hang, memory growing
with the input) is a bug.  Shared by the atheris runner (coverage-guided) and its CI test.
"""

from __future__ import annotations

from collections.abc import Callable

from trio_typha.datastore import etcd_pb2 as pb
from trio_typha.datastore import etcd_rpc as rpc
from trio_typha.datastore.etcd_errors import EtcdProtocolError, EtcdServerError
from trio_typha.datastore.etcd_state import EtcdSyncState
from trio_typha.datastore.events import ResourceEvent
from trio_typha.datastore.k8s_errors import MalformedResponse
from trio_typha.datastore.k8s_listbody import split_list
from trio_typha.datastore.k8s_profile_watch import ProfileStamps
from trio_typha.datastore.k8s_reflector import KindReflector, WatchErrorEvent
from trio_typha.datastore.k8s_stream import LineDecoder, parse_watch_event
from trio_typha.grpcwire.framing import FramingError, MessageDecoder, frame_message
from trio_typha.grpcwire.status import StatusCode
from trio_typha.model import kinds as K
from trio_typha.model.syncers import DatastoreMode, SyncerDefinition, syncer_definition
from trio_typha.protocols.gob.codec import NEED_DATA, Decoder, GobError
from trio_typha.protocols.gob.messages import ENVELOPE, REGISTRY
from trio_typha.protocols.gob.session import ServerSession
from trio_typha.protocols.grpc.h2conn import ConnectionState, H2Core, StreamGone
from trio_typha.sessions.settings import ServerSettings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _pieces(data: bytes) -> list[bytes]:
    """Split the input where its first byte says, so chunking is fuzzed too."""
    if not data:
        return []
    step = data[0] % 64 + 1
    body = data[1:]
    return [body[i:i + step] for i in range(0, len(body), step)]


def gob_decoder(data: bytes) -> None:
    """Typha's gob envelope decoder, fed in pieces."""
    dec = Decoder(REGISTRY, ENVELOPE)
    try:
        for piece in _pieces(data):
            dec.feed(piece)
            while dec.next_value() is not NEED_DATA:
                pass
    except GobError:
        pass


def gob_session(data: bytes) -> None:
    """The server's gob session state machine: it may only ever ask to close."""
    session = ServerSession(settings=ServerSettings(), syncer_types=("felix",),
                            server_version="v", conn_id=1, now=0.0)
    for piece in _pieces(data):
        session.receive_data(piece, now=0.0)


def grpc_framing(data: bytes) -> None:
    """gRPC length-prefixed message framing, with a small size limit."""
    dec = MessageDecoder(4096)
    try:
        for piece in _pieces(data):
            for payload in dec.feed(piece):
                assert len(payload) <= 4096
    except FramingError:
        pass


def h2_core(data: bytes) -> None:
    """The server's HTTP/2 core after a valid preface, answering every request."""
    core = H2Core(max_concurrent_streams=4, max_inbound_message=4096)
    core.receive(PREFACE)
    now = 0.0
    for piece in _pieces(data):
        now += 0.01
        for event in core.receive(piece, now):
            sid = getattr(event, "stream_id", None)
            if sid is not None and type(event).__name__ == "RequestReceived":
                try:
                    core.send_message(sid, b"\x00\x00\x00\x00\x01x")
                    core.end_stream(sid, StatusCode.OK)
                except StreamGone:
                    pass
        core.data_to_send()
        if core.state is ConnectionState.CLOSED:
            break
    assert core.buffered_bytes <= 1 << 20


# The datastore decoders: whatever a datastore (or a proxy in its place) sends, the
# result is events (converted by the syncers that watch them, which refuse bad objects
# themselves) or the decoder's declared error, which the watch loops answer with a warning
# and a relist or a new watch.  Small line limits so that "too long" is reachable.

_KDD_KINDS = (K.POD, K.NAMESPACE, K.calico_kind("GlobalNetworkPolicy", K.CALICO_CRD_GROUP))
_ETCD_KINDS = tuple(K.calico_kind(k) for k in ("GlobalNetworkPolicy", "Profile",
                                                "WorkloadEndpoint", "IPAMBlock"))
_DEFINITIONS: dict[DatastoreMode, SyncerDefinition] = {}


def _convert(mode: DatastoreMode, events: list[object]) -> None:
    definition = _DEFINITIONS.get(mode)
    if definition is None:
        group = K.CALICO_CRD_GROUP if mode is DatastoreMode.KDD else K.CALICO_V3_GROUP
        definition = _DEFINITIONS[mode] = syncer_definition("felix", mode, calico_group=group)
    for ev in events:
        if isinstance(ev, ResourceEvent) and ev.obj is not None:
            definition.convert(ev.kind, ev.obj, key=(ev.namespace, ev.name))


def kdd_watch_stream(data: bytes) -> None:
    """A Kubernetes watch stream, in pieces, through a reflector of one kind (the chunking
    byte's top bits pick it)."""
    kind = _KDD_KINDS[data[0] // 64 % len(_KDD_KINDS)] if data else K.POD
    reflector = KindReflector(kind, profile=ProfileStamps())
    reflector.resume_rv = "1"
    decoder = LineDecoder(max_line=4096)
    try:
        for piece in _pieces(data):
            for line in decoder.feed(piece):
                event = parse_watch_event(line)
                if event is not None:
                    _convert(DatastoreMode.KDD, list(reflector.watched(event)))
        tail = decoder.close()
        if (event := parse_watch_event(tail)) is not None:
            _convert(DatastoreMode.KDD, list(reflector.watched(event)))
    except (MalformedResponse, WatchErrorEvent):
        pass


def kdd_list(data: bytes) -> None:
    """A Kubernetes list response, decoded item by item into a reflector's events."""
    reflector = KindReflector(K.POD)
    try:
        head, items = split_list(data, "fuzz list")
        _convert(DatastoreMode.KDD, list(reflector.stream_listed(items, "7")))
    except MalformedResponse:
        pass


def etcd_watch_stream(data: bytes) -> None:
    """etcd's Watch stream: gRPC-framed WatchResponse messages, in pieces, applied to the
    sync state."""
    state = EtcdSyncState(_ETCD_KINDS)
    decoder = MessageDecoder(1 << 16)
    try:
        for piece in _pieces(data):
            for message in decoder.feed(piece):
                _convert(DatastoreMode.ETCD,
                         list(state.watched(rpc.decode_watch_response(message))))
    except (EtcdProtocolError, EtcdServerError, FramingError):
        pass


def etcd_range(data: bytes) -> None:
    """An etcd RangeResponse listed as each kind's objects."""
    state = EtcdSyncState(_ETCD_KINDS)
    try:
        page = rpc.decode_range(data)
        for kind in _ETCD_KINDS:
            _convert(DatastoreMode.ETCD, state.listed(kind, page.kvs, page.header))
    except (EtcdProtocolError, EtcdServerError):
        pass


# --- seed inputs: valid streams for the fuzzer to mutate --------------------------------

def _gob_client_stream() -> bytes:
    from trio_typha.protocols.gob.client_session import ClientSession
    return ClientSession(syncer_type="felix", hostname="fuzz").data_to_send()


def _h2_client_stream() -> bytes:
    import h2.config
    import h2.connection

    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.data_to_send()  # the preface: h2_core sends its own
    sid = client.get_next_available_stream_id()
    client.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                              (":path", "/typha.v1.Sync/Sync"), (":authority", "x"),
                              ("content-type", "application/grpc"), ("te", "trailers")])
    client.send_data(sid, b"\x00\x00\x00\x00\x04\x0a\x02\x08\x01")
    client.ping(b"12345678")
    client.increment_flow_control_window(1000)
    client.reset_stream(sid)
    return client.data_to_send()


def _kdd_watch_lines() -> bytes:
    import json

    pod = {"metadata": {"name": "web", "namespace": "prod", "resourceVersion": "5",
                        "uid": "11111111-2222-3333-4444-555555555555", "labels": {"a": "b"}},
           "spec": {"nodeName": "node-1", "containers": [{"name": "c", "ports": [
               {"containerPort": 80, "name": "http"}]}]},
           "status": {"podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
                      "phase": "Running"}}
    lines = [{"type": "ADDED", "object": pod},
             {"type": "MODIFIED", "object": {**pod, "metadata": {**pod["metadata"],
                                                                  "resourceVersion": "6"}}},
             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
             {"type": "DELETED", "object": pod},
             {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                          "details": {"causes": [{"reason": "x"}]}}}]
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def _etcd_responses() -> list[pb.WatchResponse]:
    gnp = b'{"kind":"GlobalNetworkPolicy","metadata":{"name":"p"},"spec":{"order":1}}'
    key = b"/calico/resources/v3/projectcalico.org/globalnetworkpolicies/p"
    events = [pb.Event(kv=pb.KeyValue(key=key, value=gnp, mod_revision=5)),
              pb.Event(type=pb.Event.DELETE, kv=pb.KeyValue(key=key, mod_revision=6))]
    return [pb.WatchResponse(header=pb.ResponseHeader(revision=4), created=True),
            pb.WatchResponse(header=pb.ResponseHeader(revision=6), events=events),
            pb.WatchResponse(header=pb.ResponseHeader(revision=6), watch_id=-1),
            pb.WatchResponse(canceled=True, compact_revision=3)]


def _etcd_lines() -> bytes:
    return b"".join(frame_message(m.SerializeToString()) for m in _etcd_responses())


def _etcd_range_reply() -> bytes:
    created, with_events = _etcd_responses()[:2]
    return pb.RangeResponse(header=with_events.header, kvs=[with_events.events[0].kv],
                            count=1).SerializeToString()


def seeds(name: str) -> list[bytes]:
    """Inputs to start ``name`` from (each with a chunking byte in front)."""
    if name == "kdd_watch_stream":
        return [bytes([step + 64 * kind]) + _kdd_watch_lines() for step in (0, 7, 63)
                for kind in range(len(_KDD_KINDS))]
    if name == "kdd_list":
        return [b'{"kind":"PodList","metadata":{"resourceVersion":"7"},"items":['
                + _kdd_watch_lines().split(b"\n")[0][len(b'{"type": "ADDED", "object": '):-1]
                + b"]}"]
    if name == "etcd_watch_stream":
        return [bytes([step]) + _etcd_lines() for step in (0, 7, 63)]
    if name == "etcd_range":
        return [_etcd_range_reply()]
    if name.startswith("gob"):
        stream = _gob_client_stream()
    elif name == "grpc_framing":
        stream = b"\x00\x00\x00\x00\x05hello\x00\x00\x00\x00\x00"
    else:
        stream = _h2_client_stream()
    return [bytes([step]) + stream for step in (0, 7, 63)]


TARGETS: dict[str, Callable[[bytes], None]] = {
    "kdd_watch_stream": kdd_watch_stream,
    "kdd_list": kdd_list,
    "etcd_watch_stream": etcd_watch_stream,
    "etcd_range": etcd_range,
    "gob_decoder": gob_decoder,
    "gob_session": gob_session,
    "grpc_framing": grpc_framing,
    "h2_core": h2_core,
}
