"""A tiny HTTP/1.1 server (h11 on trio) for the health and metrics endpoints.

Each request is answered by a handler that returns (status, content type, body);
one request per connection, then close: probes and scrapers need nothing more, and it keeps
a misbehaving peer from holding a connection open.  The one exception is a WebSocket
upgrade on a path given in ``websockets`` (the live feed): that connection is handed, with
the request bytes already read, to trio-websocket, at most ``_MAX_WEBSOCKETS`` at a time.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

import h11
import trio

from .accept import serve_listeners

if TYPE_CHECKING:  # trio-websocket is imported by the first upgrade (it imports
    # importlib.metadata, a few per cent of a start's CPU, for a page few ever open)
    from trio_websocket import WebSocketConnection

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
Handler = Callable[[str], Awaitable[Response | None]]  # path -> response, or None for 404

WebSocketHandler = Callable[["WebSocketConnection"], Awaitable[None]]

_MAX_REQUEST = 16 * 1024
_REQUEST_TIMEOUT = 10.0
_MAX_WEBSOCKETS = 32
_MAX_WS_MESSAGE = 4096  # the feed's clients have nothing to say


class _Replay(trio.abc.Stream):
    """``stream`` with ``data`` (bytes already read from it) put back in front."""

    def __init__(self, stream: trio.abc.Stream, data: bytes) -> None:
        self._stream = stream
        self._data = data

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._data:
            n = max_bytes or len(self._data)
            out, self._data = self._data[:n], self._data[n:]
            return out
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


async def _websocket(stream: trio.abc.Stream, head: bytes, ws_handler: WebSocketHandler) -> None:
    from trio_websocket import wrap_server_stream

    async with trio.open_nursery() as nursery:
        with trio.move_on_after(_REQUEST_TIMEOUT) as handshake:
            request = await wrap_server_stream(nursery, _Replay(stream, head),
                                               max_message_size=_MAX_WS_MESSAGE)
            ws = await request.accept()
        if handshake.cancelled_caught:
            log.debug("WebSocket handshake on the health port timed out")
        else:
            try:
                await ws_handler(ws)
            finally:
                await ws.aclose()
        nursery.cancel_scope.cancel()


def _is_upgrade(request: h11.Request) -> bool:
    headers = {k.lower(): v.lower() for k, v in request.headers}
    return headers.get(b"upgrade") == b"websocket"


async def _handle(stream: trio.abc.Stream, handler: Handler,
                  websockets: Mapping[str, WebSocketHandler] | None = None,
                  slots: trio.CapacityLimiter | None = None) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_REQUEST)
    head = bytearray()
    upgrade: WebSocketHandler | None = None
    try:
        with trio.move_on_after(_REQUEST_TIMEOUT):
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(4096)
                    head += data
                    conn.receive_data(bytes(data))
                    continue
                if isinstance(event, h11.Request):
                    path = event.target.decode("latin-1").split("?", 1)[0]
                    result: Response | None
                    if websockets and path in websockets and _is_upgrade(event) and \
                            slots is not None:
                        try:
                            slots.acquire_nowait()
                        except trio.WouldBlock:
                            result = (503, "text/plain; charset=utf-8", b"too many feeds\n")
                        else:
                            upgrade = websockets[path]
                            break
                    else:
                        result = await handler(path)
                    status, ctype, body = result if result is not None else (
                        404, "text/plain; charset=utf-8", b"404 page not found\n")
                    headers = [("content-type", ctype), ("content-length", str(len(body))),
                               ("connection", "close")]
                    # One write: on a busy loop every write waits a scheduling round, and a
                    # probe answered late is a probe failed.
                    out = conn.send(h11.Response(status_code=status, headers=headers)) or b""
                    if event.method != b"HEAD":
                        out += conn.send(h11.Data(data=body)) or b""
                    out += conn.send(h11.EndOfMessage()) or b""
                    await stream.send_all(out)
                return
        if upgrade is not None:
            assert slots is not None
            try:
                await _websocket(stream, bytes(head), upgrade)
            finally:
                slots.release()
    except h11.RemoteProtocolError as exc:
        log.debug("Bad HTTP request on health/metrics port: %s", exc)
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                  b"connection: close\r\n\r\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


async def serve_http(host: str, port: int, handler: Handler, *,
                     websockets: Mapping[str, WebSocketHandler] | None = None,
                     tls: Callable[[], ssl.SSLContext] | None = None,
                     task_status: trio.TaskStatus[list[trio.SocketListener]]
                     = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``handler`` on ``host:port`` until cancelled; reports the listeners when bound.

    ``websockets``: path -> handler of an accepted WebSocket on that path.  ``tls``: serve
    HTTPS, with the context it returns for each connection (so rotated files apply).
    """
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    slots = trio.CapacityLimiter(_MAX_WEBSOCKETS)

    async def on_conn(stream: trio.SocketStream) -> None:
        if tls is not None:
            secure = trio.SSLStream(stream, tls(), server_side=True)
            try:
                with trio.fail_after(_REQUEST_TIMEOUT):
                    await secure.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError) as exc:
                log.info("TLS handshake on the metrics port from %s failed: %s",
                         _peer(stream), exc.__cause__ or exc)
                await trio.aclose_forcefully(stream)
                return
            await _handle(secure, handler, websockets, slots)
            return
        await _handle(stream, handler, websockets, slots)
    await serve_listeners(on_conn, listeners, what=f"HTTP port {port}",
                          task_status=task_status)
