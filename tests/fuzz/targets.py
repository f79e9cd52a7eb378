"""Fuzz targets: each takes arbitrary bytes and must end in values, a wait for more input,
or the module's own clean error; anything else (another exception, a hang, memory growing
with the input) is a bug.  Shared by the atheris runner (coverage-guided) and its CI test.
"""

from __future__ import annotations

from collections.abc import Callable

from trio_typha.protocols.gob.codec import NEED_DATA, Decoder, GobError
from trio_typha.protocols.gob.messages import ENVELOPE, REGISTRY
from trio_typha.protocols.gob.session import ServerSession
from trio_typha.protocols.grpc.framing import FramingError, MessageDecoder
from trio_typha.protocols.grpc.h2conn import ConnectionState, H2Core, StreamGone
from trio_typha.protocols.grpc.status import StatusCode
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


def seeds(name: str) -> list[bytes]:
    """Inputs to start ``name`` from (each with a chunking byte in front)."""
    if name.startswith("gob"):
        stream = _gob_client_stream()
    elif name == "grpc_framing":
        stream = b"\x00\x00\x00\x00\x05hello\x00\x00\x00\x00\x00"
    else:
        stream = _h2_client_stream()
    return [bytes([step]) + stream for step in (0, 7, 63)]


TARGETS: dict[str, Callable[[bytes], None]] = {
    "gob_decoder": gob_decoder,
    "gob_session": gob_session,
    "grpc_framing": grpc_framing,
    "h2_core": h2_core,
}
