"""An accept loop for the server's own ports (health, metrics, the workers' feed).

trio's ``serve_listeners`` retries an accept that failed for want of descriptors or memory,
logging an ERROR with a traceback each time: when client connections have taken every
descriptor that is one traceback per retry, ten a second.  Here the same errors are one
WARNING per interval naming the port, and the loop goes on once a descriptor is free.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable

import trio

from .throttle import LogThrottle, held_back

log = logging.getLogger(__name__)

#: Accept errors that mean the process or the kernel is out of room *for now*.
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: How long to wait before accepting again after one of them (trio uses the same).
ACCEPT_RETRY_SLEEP = 0.1


def capacity_error_name(exc: OSError) -> str | None:
    """The errno's name if ``exc`` is one of :data:`ACCEPT_CAPACITY_ERRNOS`, else None."""
    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
        return None
    return errno.errorcode.get(exc.errno or 0, "?")


async def serve_listeners(handler: Callable[[trio.SocketStream], Awaitable[object]],
                          listeners: list[trio.SocketListener], *, what: str,
                          log_interval: float = 10.0,
                          task_status: trio.TaskStatus[list[trio.SocketListener]]
                          = trio.TASK_STATUS_IGNORED) -> None:
    """Accept on ``listeners`` until cancelled, running ``handler`` for each connection
    in a nursery of its own; ``what`` names the port in the log."""
    throttle = LogThrottle(log_interval)

    async def accept_loop(listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    name = capacity_error_name(exc)
                    if name is None:
                        raise
                    held = throttle.allow(name, trio.current_time())
                    if held is not None:
                        log.warning("%s: accept failed with %s (%s); retrying every %gs%s",
                                    what, name, exc.strerror, ACCEPT_RETRY_SLEEP,
                                    held_back(held))
                    await trio.sleep(ACCEPT_RETRY_SLEEP)
                else:
                    nursery.start_soon(handler, stream)

    async with trio.open_nursery() as handlers, trio.open_nursery() as accepting:
        for listener in listeners:
            accepting.start_soon(accept_loop, listener, handlers)
        task_status.started(listeners)
