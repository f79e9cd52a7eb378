"""A follower: a process whose caches follow another trio-typha process's feed.

It is the serving process (:mod:`.serving`) with the upstream feed for its datastore
(:class:`~.upstream.follow.UpstreamFeed`): each syncer type's cache mirrors the upstream's,
breadcrumb for breadcrumb and with the upstream's encodings, and a follower that loses its
upstream shuts down rather than serve a cache going stale.  A ServerWorkers worker is a
follower of the primary with a control channel to it (:mod:`.workers.channel`): its
connections, the primary's queries, its share of the connection limit and the drain come
in there, and its status goes out.

``python -m trio_typha.follower`` is the worker process the primary starts
(:mod:`.workers.pool`): its stdin is its end of the channel, the START record says how to
run, and the channel's end (the primary is gone) ends it.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import trio

from .cache.feed import CacheFeed
from .config import Config
from .serving import ServingProcess
from .sessions.connections import SocketListener
from .upstream.follow import FollowerPipeline, UpstreamFeed
from .warm.serve import WORKER_SOCKET, forwarder
from .workers import control as worker_control
from .workers.channel import ChannelClosed, ControlSocket, PrimaryLink

log = logging.getLogger(__name__)


class Follower(ServingProcess[FollowerPipeline]):
    """Serves the connections the primary passes over ``control`` from caches that follow
    ``upstream``."""

    def __init__(self, cfg: Config, *, upstream: UpstreamFeed, control: ControlSocket,
                 listen_port: int, handle_signals: bool = False) -> None:
        """``listen_port``: the port the connections were accepted on (for reports)."""
        super().__init__(cfg, handle_signals=handle_signals, listen_port=listen_port)
        self.upstream = upstream
        self.link = PrimaryLink(control, status=self._status, answer=self._answer,
                                on_limit=self._set_limit, on_drain=self.shutdown,
                                on_gone=self.shutdown)
        self.connections.on_change = self.link.changed
        self._limit: int | None = None  # this process's share, from the primary

    @property
    def source_name(self) -> str:
        return self.upstream.name

    def warm_session(self) -> Callable[..., Any] | None:
        """A sibling's warm start that landed here goes on to the primary, which holds the
        trackers and watch state (:mod:`.warm.serve`)."""
        return forwarder(os.path.join(os.path.dirname(self.upstream.path), WORKER_SOCKET))

    def make_pipeline(self, syncer_type: str, feed: CacheFeed) -> FollowerPipeline:
        return FollowerPipeline(syncer_type, feed, self.upstream, on_lost=self.shutdown)

    async def start_first(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.link.run)

    async def open_listeners(self) -> list[SocketListener]:
        self.ports["server"] = self.listen_port
        return [self.link.listener]

    def connection_limit(self) -> int:
        return self._limit or super().connection_limit()

    def accepted(self) -> int | None:
        return self.link.listener.accepted

    def _set_limit(self, connections: int) -> None:
        """The primary says how many connections this process may hold."""
        self._limit = connections
        if self.governor is not None:
            self.governor.set_limit(connections)

    def _status(self) -> worker_control.Status:
        """What this worker reports to the primary (readiness as its /readiness would say)."""
        reports = self.health.reports()
        ready = bool(reports) and all(r.live and r.ready is not False for r in reports.values())
        detail = "; ".join(f"{name}: {r.detail or 'not ready'}" for name, r in reports.items()
                           if not r.live or r.ready is False)
        accepted = self.link.listener.accepted
        return worker_control.Status(ready, accepted, min(len(self.connections), accepted),
                                     detail[:500] or ("" if ready else "starting"))

    def _answer(self, what: int) -> bytes:
        """This worker's answer to the primary's query."""
        if what == worker_control.METRICS:
            return self.metrics.exposition()
        return self.connections_document([])


def main() -> None:
    """A ServerWorkers worker process (started by the primary, its stdin the channel)."""
    from .config_sources import early_log_level
    from .logs import setup_logging
    setup_logging(early_log_level())

    async def run() -> int:
        control = ControlSocket(socket.socket(fileno=sys.stdin.fileno()))
        try:
            start = await control.receive()
        except (ChannelClosed, worker_control.ControlError) as exc:
            log.error("Worker: no start record from the primary (%s); exiting", exc)
            return 2
        if not isinstance(start, worker_control.Start):
            log.error("Worker: the primary began with %s, not START; exiting",
                      type(start).__name__)
            return 2
        cfg = start.config
        setup_logging(cfg.log_severity_screen)
        follower = Follower(cfg, upstream=UpstreamFeed(start.upstream), control=control,
                            listen_port=start.port, handle_signals=True)
        try:
            await follower.run()
        finally:
            follower.link.close()  # the socket, and any passed socket nobody accepted
        return 0

    sys.exit(trio.run(run))


if __name__ == "__main__":
    main()
