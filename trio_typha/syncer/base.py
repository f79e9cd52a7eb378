"""The contract between what fills a syncer type's cache and the process that serves it.

A serving process runs one pipeline per syncer type and reads the same few things of each,
whatever fills the cache: a datastore's :class:`~trio_typha.syncer.pipeline.SyncerPipeline`
(list-watch, conversion, validation), or a follower's pipeline, which mirrors another
trio-typha process's cache from its feed (:mod:`trio_typha.upstream.follow`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import trio

from ..cache.feed import CacheFeed
from ..observe.health import Heartbeat


class Pipeline(Protocol):
    """Keeps one syncer type's :class:`CacheFeed` current."""

    @property
    def syncer_type(self) -> str: ...

    @property
    def feed(self) -> CacheFeed: ...

    @property
    def failing(self) -> Mapping[Any, str]:
        """What is wrong now, by where (a resource kind, or None for all): for readiness."""
        ...

    @property
    def ready(self) -> bool:
        """The cache is in sync and may be served."""
        ...

    @property
    def heartbeat(self) -> Heartbeat | None:
        """Beats while the pipeline's loop turns (liveness watches it); None: nothing to
        watch."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Keep the cache current until cancelled; started once the cache may be served or
        is being filled."""
        ...
