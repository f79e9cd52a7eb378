"""Hostile peers and canaries for attack tests and the chaos suite (loopback only).

The attackers speak raw bytes (HTTP/2 frames built with hyperframe and hpack, a TLS
ClientHello, an HTTP/1.1 request) so they can do what no well-behaved client does; each
returns how the server ended the connection.  A :class:`Canary` is an ordinary client on
either protocol that records when each update with a given key prefix reached it, so a test
can check that the others kept being served while an attack ran.
"""

from __future__ import annotations

import contextlib
import enum
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import hpack
import trio
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SYNC_PATH = "/typha.v1.Sync/Sync"
REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", SYNC_PATH),
           (":authority", "typha"), ("content-type", "application/grpc"), ("te", "trailers")]


class Attack(enum.Enum):
    """The HTTP/2 floods; values match the server's ``typha_h2_abuse_closed`` kinds."""

    RAPID_RESET = "rapid_reset"
    NEW_STREAMS = "new_streams"
    SETTINGS = "settings"
    PING = "ping"
    WINDOW_UPDATE = "window_update"
    PRIORITY = "priority"
    EMPTY_DATA = "empty_data"


@dataclass
class Outcome:
    """How the server ended one attacking connection."""

    goaway_code: int | None = None
    goaway_debug: bytes = b""
    closed: bool = False  # the server closed the socket (EOF or reset)
    frames_sent: int = 0
    bytes_received: int = 0
    first_bytes: bytes = b""  # for the non-HTTP/2 peers: what the server answered


class _FrameReader:
    """Reads the server's frames in the background, noting GOAWAY and EOF."""

    def __init__(self, stream: trio.SocketStream, outcome: Outcome) -> None:
        self.stream = stream
        self.outcome = outcome
        self.done = trio.Event()
        self.streams_ended = 0  # responses ended by the server (END_STREAM or RST_STREAM)
        self.progress = trio.Event()
        self._buf = bytearray()

    async def run(self) -> None:
        try:
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    break
                self.outcome.bytes_received += len(data)
                self._buf += data
                for frame in self._frames():
                    if isinstance(frame, GoAwayFrame) and self.outcome.goaway_code is None:
                        self.outcome.goaway_code = frame.error_code
                        self.outcome.goaway_debug = frame.additional_data
                    elif isinstance(frame, HeadersFrame) and "END_STREAM" in frame.flags:
                        self.streams_ended += 1
                self.progress.set()
                self.progress = trio.Event()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self.outcome.closed = True
        self.progress.set()
        self.done.set()

    def _frames(self) -> list[Frame]:
        out = []
        while len(self._buf) >= 9:
            length = int.from_bytes(self._buf[:3])
            if len(self._buf) < 9 + length:
                break
            frame, _ = Frame.parse_frame_header(memoryview(bytes(self._buf[:9])))
            frame.parse_body(memoryview(bytes(self._buf[9:9 + length])))
            del self._buf[:9 + length]
            out.append(frame)
        return out


def _headers(encoder: hpack.Encoder, sid: int, *, end_stream: bool = False) -> bytes:
    f = HeadersFrame(sid, encoder.encode(REQUEST), flags=["END_HEADERS"])
    if end_stream:
        f.flags.add("END_STREAM")
    return f.serialize()


def _window_update(sid: int, n: int) -> bytes:
    f = WindowUpdateFrame(sid)
    f.window_increment = n
    return f.serialize()


def _burst(kind: Attack, encoder: hpack.Encoder, next_sid: list[int], n: int) -> bytes:
    """``n`` frames (or stream openings) of the flood ``kind``."""
    out = bytearray()
    for _ in range(n):
        if kind in (Attack.RAPID_RESET, Attack.NEW_STREAMS):
            sid = next_sid[0]
            next_sid[0] += 2
            out += _headers(encoder, sid, end_stream=kind is Attack.NEW_STREAMS)
            if kind is Attack.RAPID_RESET:
                rst = RstStreamFrame(sid)
                rst.error_code = 8  # CANCEL
                out += rst.serialize()
        elif kind is Attack.SETTINGS:
            out += SettingsFrame(0).serialize()
        elif kind is Attack.PING:
            out += PingFrame(0, opaque_data=b"12345678").serialize()
        elif kind is Attack.WINDOW_UPDATE:
            out += _window_update(0, 1)
        elif kind is Attack.PRIORITY:
            f = PriorityFrame(1)
            f.depends_on, f.stream_weight = 0, 16
            out += f.serialize()
        elif kind is Attack.EMPTY_DATA:
            out += DataFrame(1).serialize()
    return bytes(out)


async def h2_flood(host: str, port: int, kind: Attack, *, seconds: float = 10.0,
                   burst: int = 200) -> Outcome:
    """Flood one connection with ``kind`` until the server closes it (or ``seconds``)."""
    outcome = Outcome()
    stream = await trio.open_tcp_stream(host, port)
    encoder = hpack.Encoder()
    next_sid = [1]
    async with stream, trio.open_nursery() as nursery:
        reader = _FrameReader(stream, outcome)
        nursery.start_soon(reader.run)
        try:
            hello = PREFACE + SettingsFrame(0).serialize()
            if kind not in (Attack.RAPID_RESET, Attack.NEW_STREAMS):
                hello += _headers(encoder, 1)  # a stream for the frames that name one
                next_sid[0] = 3
            await stream.send_all(hello)
            with trio.move_on_after(seconds):
                while outcome.goaway_code is None and not outcome.closed:
                    if kind is Attack.NEW_STREAMS:
                        # Within the concurrent-stream limit: a few requests, then their
                        # answers (each costs the server a handler), as fast as it goes.
                        burst = 8
                        while reader.streams_ended < outcome.frames_sent and \
                                outcome.goaway_code is None and not outcome.closed:
                            await reader.progress.wait()
                    await stream.send_all(_burst(kind, encoder, next_sid, burst))
                    outcome.frames_sent += burst
            with trio.move_on_after(5):
                await reader.done.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            with trio.move_on_after(5):
                await reader.done.wait()
        nursery.cancel_scope.cancel()
    return outcome


def _sync_start(sid: int) -> bytes:
    """A real Sync start (felix) on stream ``sid``: the server answers with a session."""
    from trio_typha.protocols.grpc import typha_pb2 as pb

    start = pb.SyncRequest(start=pb.SyncRequestStart(syncer_type="felix", hostname="flood"))
    payload = start.SerializeToString()
    return DataFrame(sid, b"\x00" + len(payload).to_bytes(4, "big") + payload).serialize()


async def h2_paced_reset(host: str, port: int, *, rate: float, seconds: float,
                         sync_start: bool = False, ticks_per_second: int = 10) -> Outcome:
    """Rapid reset at ``rate`` streams a second on one connection (each opened, with a real
    Sync start if ``sync_start``, then reset), in ``ticks_per_second`` bursts, for
    ``seconds`` or until the server closes it: one of many connections spreading a flood
    under the per-connection budget."""
    outcome = Outcome()
    stream = await trio.open_tcp_stream(host, port)
    encoder = hpack.Encoder()
    sid = 1
    per_tick = max(1, round(rate / ticks_per_second))
    async with stream, trio.open_nursery() as nursery:
        reader = _FrameReader(stream, outcome)
        nursery.start_soon(reader.run)
        try:
            await stream.send_all(PREFACE + SettingsFrame(0).serialize())
            with trio.move_on_after(seconds):
                while outcome.goaway_code is None and not outcome.closed:
                    out = bytearray()
                    for _ in range(per_tick):
                        out += _headers(encoder, sid)
                        if sync_start:
                            out += _sync_start(sid)
                        rst = RstStreamFrame(sid)
                        rst.error_code = 8  # CANCEL
                        out += rst.serialize()
                        sid += 2
                    await stream.send_all(bytes(out))
                    outcome.frames_sent += per_tick
                    await trio.sleep(1 / ticks_per_second)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        with trio.move_on_after(2):
            await reader.done.wait()
        nursery.cancel_scope.cancel()
    return outcome


def close_wait_count(port: int) -> int:
    """Sockets on local TCP ``port`` in CLOSE-WAIT (the peer has gone, we have not closed),
    from /proc/net/tcp and tcp6."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "08":
                    count += 1
    return count


async def h2_oversized_frame(host: str, port: int, *, length: int = (1 << 24) - 1,
                             wait: float = 10.0) -> Outcome:
    """Open a stream, then send a DATA frame header announcing ``length`` bytes (more
    than the server's SETTINGS_MAX_FRAME_SIZE) and part of its body; read until the
    server's GOAWAY and close (or ``wait``)."""
    outcome = Outcome()
    stream = await trio.open_tcp_stream(host, port)
    async with stream, trio.open_nursery() as nursery:
        reader = _FrameReader(stream, outcome)
        nursery.start_soon(reader.run)
        header = length.to_bytes(3) + bytes([0, 0]) + (1).to_bytes(4)
        try:
            await stream.send_all(PREFACE + SettingsFrame(0).serialize()
                                  + _headers(hpack.Encoder(), 1) + header + b"\0" * 4096)
            outcome.frames_sent = 3
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        with trio.move_on_after(wait):
            await reader.done.wait()
        nursery.cancel_scope.cancel()
    return outcome


async def h2_idle(host: str, port: int, *, open_stream: bool = False,
                  give_up_after: float = 600.0) -> Outcome:
    """Send the preface and SETTINGS (and, if asked, open a stream and end it), then
    nothing: wait for the server to say GOAWAY and close."""
    outcome = Outcome()
    stream = await trio.open_tcp_stream(host, port)
    async with stream, trio.open_nursery() as nursery:
        reader = _FrameReader(stream, outcome)
        nursery.start_soon(reader.run)
        ack = SettingsFrame(0)
        ack.flags.add("ACK")
        hello = PREFACE + SettingsFrame(0).serialize() + ack.serialize()
        if open_stream:
            # A request that is refused at once: the connection has had a stream, and
            # has none open from then on.
            bad = [(k, "/nope/Nope" if k == ":path" else v) for k, v in REQUEST]
            hello += HeadersFrame(1, hpack.Encoder().encode(bad),
                                  flags=["END_HEADERS", "END_STREAM"]).serialize()
        await stream.send_all(hello)
        with trio.move_on_after(give_up_after):
            await reader.done.wait()
        nursery.cancel_scope.cancel()
    return outcome


def h2_stalled_reader() -> bytes:
    """A gRPC client's opening that grants no flow-control window (SETTINGS initial window
    0) and then starts a felix Sync stream: the server can send it nothing."""
    from trio_typha.protocols.grpc import typha_pb2 as pb

    start = pb.SyncRequest(start=pb.SyncRequestStart(syncer_type="felix", hostname="stalled"))
    payload = start.SerializeToString()
    message = b"\x00" + len(payload).to_bytes(4, "big") + payload
    settings = SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    return (PREFACE + settings.serialize() + _headers(hpack.Encoder(), 1)
            + DataFrame(1, message).serialize())


async def raw_bytes(host: str, port: int, data: bytes, *,
                    give_up_after: float = 600.0) -> Outcome:
    """Send ``data`` (a TLS ClientHello, an HTTP/1.1 request, ...); read until closed."""
    outcome = Outcome()
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(data)
        with trio.move_on_after(give_up_after):
            try:
                while chunk := await stream.receive_some(65536):
                    outcome.bytes_received += len(chunk)
                    if len(outcome.first_bytes) < 4096:
                        outcome.first_bytes += chunk[:4096]
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            outcome.closed = True
    return outcome


def tls_client_hello(version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> bytes:
    """A real ClientHello, as a TLS client sent to the plaintext port would start with."""
    ctx = ssl.create_default_context()
    ctx.minimum_version = ctx.maximum_version = version
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="typha")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()  # wants the server's answer: the hello is written by then
    return outgoing.read()


HTTP1_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: typha\r\nUser-Agent: curl/8\r\n\r\n"


# --- canaries ------------------------------------------------------------------------------

def rss_bytes() -> int:
    """This process's resident set size now (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def canary_object(name: str) -> dict:
    """A GlobalNetworkSet: every syncer that carries network sets gets one key for it."""
    return {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
            "metadata": {"name": name}, "spec": {"nets": ["10.0.0.1/32"]}}


def canary_key(name: str) -> str:
    return f"/calico/v1/netset/{name}"


async def write_canaries(put: Callable[[dict], object], prefix: str, stop: trio.Event, *,
                         interval: float = 0.05) -> list[str]:
    """Write ``prefix-0``, ``prefix-1``, ... every ``interval`` until ``stop``; returns the
    keys written (see :func:`canary_key`)."""
    keys = []
    while not stop.is_set():
        name = f"{prefix}-{len(keys)}"
        put(canary_object(name))
        keys.append(canary_key(name))
        with trio.move_on_after(interval):
            await stop.wait()
    return keys


@dataclass
class Canary:
    """A well-behaved client on one protocol, noting when keys with ``prefix`` arrive."""

    host: str
    port: int
    protocol: str  # "typha" (gob) or "grpc"
    prefix: str
    syncer_type: str = "felix"
    arrivals: dict[str, float] = field(default_factory=dict)  # key -> first seen (trio time)
    in_sync: trio.Event = field(default_factory=trio.Event)
    disconnects: int = 0
    error: str | None = None

    def _seen(self, keys: list[str]) -> None:
        now = trio.current_time()
        for key in keys:
            if key.startswith(self.prefix):
                self.arrivals.setdefault(key, now)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Connect, sync, then record arrivals until cancelled (started once in sync)."""
        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                started = True
                self.in_sync.set()
                task_status.started()

        if self.protocol == "grpc":
            await self._run_grpc(ready)
        else:
            await self._run_gob(ready)

    async def _run_gob(self, ready: Callable[[], None]) -> None:
        from trio_typha.client.typha import TyphaClient
        from trio_typha.model.kv import SyncStatus
        async with TyphaClient(self.host, self.port, syncer_type=self.syncer_type,
                               hostname=f"canary-gob-{self.prefix}", read_timeout=60) as client:
            async for batch in client.batches():
                self._seen([u.key for u in batch.updates])
                if batch.status is SyncStatus.IN_SYNC:
                    ready()

    async def _run_grpc(self, ready: Callable[[], None]) -> None:
        from trio_typha.client import grpc as grpc_client
        from trio_typha.model.kv import SyncStatus
        stream = await grpc_client.open_stream(self.host, self.port)
        async with stream:
            async for event in grpc_client.sync(stream, self.syncer_type,
                                                hostname=f"canary-grpc-{self.prefix}"):
                if isinstance(event, grpc_client.Updates):
                    self._seen([u.key for u in event.updates])
                if isinstance(event, grpc_client.Finished | grpc_client.StatusChanged) and \
                        event.status is SyncStatus.IN_SYNC:
                    ready()

    def received_between(self, start: float, end: float) -> int:
        return sum(start <= t < end for t in self.arrivals.values())


async def wait_delivered(canaries: list[Canary], keys: list[str]) -> None:
    """Until every canary has received every key in ``keys`` (and there is at least one);
    bound it with ``trio.fail_after``."""
    # Arrivals have no change event to wait on; poll them.
    while not keys or not all(set(keys) <= c.arrivals.keys() for c in canaries):  # noqa: ASYNC110
        await trio.sleep(0.05)
