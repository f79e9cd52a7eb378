"""A tiny HTTP/1.1 server (h11 on trio) for the health and metrics endpoints.

Each request is answered by a synchronous handler that returns (status, content type, body);
one request per connection, then close: probes and scrapers need nothing more, and it keeps
a misbehaving peer from holding a connection open.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import h11
import trio

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
Handler = Callable[[str], Response | None]  # path -> response, or None for 404

_MAX_REQUEST = 16 * 1024
_REQUEST_TIMEOUT = 10.0


async def _handle(stream: trio.SocketStream, handler: Handler) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_REQUEST)
    try:
        with trio.move_on_after(_REQUEST_TIMEOUT):
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(4096)
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    path = event.target.decode("latin-1").split("?", 1)[0]
                    result = handler(path)
                    status, ctype, body = result if result is not None else (
                        404, "text/plain; charset=utf-8", b"404 page not found\n")
                    headers = [("content-type", ctype), ("content-length", str(len(body))),
                               ("connection", "close")]
                    await stream.send_all(conn.send(h11.Response(status_code=status,
                                                                 headers=headers)))
                    if event.method != b"HEAD":
                        await stream.send_all(conn.send(h11.Data(data=body)))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                return
    except h11.RemoteProtocolError as exc:
        log.debug("Bad HTTP request on health/metrics port: %s", exc)
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                  b"connection: close\r\n\r\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


async def serve_http(host: str, port: int, handler: Handler, *,
                     task_status: trio.TaskStatus[list[trio.SocketListener]]
                     = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``handler`` on ``host:port`` until cancelled; reports the listeners when bound."""
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    async def on_conn(stream: trio.SocketStream) -> None:
        await _handle(stream, handler)
    await trio.serve_listeners(on_conn, listeners, task_status=task_status)
