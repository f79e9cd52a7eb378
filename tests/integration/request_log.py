"""A spy on the test bed API server's request handler (the real one still answers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import trio

from testbed.apiserver import ApiServer, Request
from trio_typha.datastore.k8s_api import resource_path
from trio_typha.model.kinds import ResourceKind


class RequestLog:
    """Records each request the test bed handles and wakes waiters (a spy, not a stub)."""

    def __init__(self, server: ApiServer) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._changed = trio.Event()
        handle = server.api.handle

        def spy(request: Request) -> Any:
            split = urlsplit(request.target)
            self.requests.append((split.path, dict(parse_qsl(split.query))))
            self._changed.set()
            self._changed = trio.Event()
            return handle(request)

        server.api.handle = spy  # type: ignore[method-assign]

    def lists(self, kind: ResourceKind) -> list[dict[str, str]]:
        return [q for p, q in self.requests if p == resource_path(kind) and "watch" not in q]

    def watches(self, kind: ResourceKind) -> list[dict[str, str]]:
        return [q for p, q in self.requests if p == resource_path(kind) and "watch" in q]

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait (up to 10 s) until ``condition()`` holds, checking after each request."""
        with trio.fail_after(10):
            while not condition():
                await self._changed.wait()

    async def watch_from(self, kind: ResourceKind, rv: str | int) -> None:
        """Wait until ``kind`` is watched from resourceVersion ``rv``."""
        await self.wait_until(lambda: any(q.get("resourceVersion") == str(rv)
                                          for q in self.watches(kind)))
