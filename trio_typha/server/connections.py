"""The set of live client connections: spawned, counted, and dropped one at a time."""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger(__name__)


class ConnectionRegistry:
    """Owns each connection's cancel scope so the server can drop chosen connections.

    Used for Typha's graceful shutdown and connection rebalancing, both of which close one
    randomly chosen connection per tick.
    """

    def __init__(self) -> None:
        self.nursery: trio.Nursery | None = None
        self.accepting: trio.CancelScope | None = None
        self._scopes: dict[int, trio.CancelScope] = {}
        self._ids = 0

    def __len__(self) -> int:
        return len(self._scopes)

    def spawn(self, handler: Callable[[trio.SocketStream], Awaitable[None]],
              sock: trio.SocketStream, gauge: Any = None) -> None:
        assert self.nursery is not None
        self._ids += 1
        self.nursery.start_soon(self._run, self._ids, handler, sock, gauge)

    async def _run(self, ident: int, handler: Callable[[trio.SocketStream], Awaitable[None]],
                   sock: trio.SocketStream, gauge: Any) -> None:
        with trio.CancelScope() as scope:
            self._scopes[ident] = scope
            if gauge is not None:
                gauge.inc()
            try:
                await handler(sock)
            finally:
                del self._scopes[ident]
                if gauge is not None:
                    gauge.dec()
        if scope.cancelled_caught:
            await trio.aclose_forcefully(sock)

    def drop_one(self, reason: str) -> int | None:
        """Close one randomly chosen connection; returns its id, or None if there is none."""
        if not self._scopes:
            return None
        ident = random.choice(list(self._scopes))
        log.info("Closing connection; reason: %s.", reason)
        self._scopes[ident].cancel()
        return ident
