"""Typha's /liveness and /readiness: 200 or 503 with a table of reporters.

A reporter registered with a ``timeout`` and a :class:`Heartbeat` also has to have beaten
within the timeout, as Typha's reporters must report within theirs (20 s for the caches
and the sync server): a pipeline or governor loop that is wedged turns the replica
non-live, so the kubelet restarts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import trio

#: Typha's reporter timeout (caches and SyncServer) and how often the loops beat.
REPORT_TIMEOUT = 20.0
BEAT_INTERVAL = 10.0


class Heartbeat:
    """When a loop last showed it is running (trio clock)."""

    def __init__(self) -> None:
        self.last: float | None = None

    def beat(self) -> None:
        self.last = trio.current_time()


@dataclass(frozen=True, slots=True)
class Report:
    live: bool
    ready: bool | None  # None: this reporter says nothing about readiness
    detail: str = ""


class Health:
    """Named reporters (callables evaluated per request, so nothing goes stale)."""

    def __init__(self) -> None:
        self._reporters: dict[str, Callable[[], Report]] = {}
        self._timeouts: dict[str, tuple[float, Heartbeat]] = {}
        self._timed_out: set[str] = set()

    def register(self, name: str, reporter: Callable[[], Report], *,
                 timeout: float | None = None, heartbeat: Heartbeat | None = None) -> None:
        self._reporters[name] = reporter
        if timeout is not None and heartbeat is not None:
            if heartbeat.last is None:
                heartbeat.beat()  # registered now: the timeout runs from here
            self._timeouts[name] = (timeout, heartbeat)

    def reports(self) -> dict[str, Report]:
        out = {}
        self._timed_out = set()
        for name, fn in sorted(self._reporters.items()):
            report = fn()
            limit = self._timeouts.get(name)
            if limit is not None:
                timeout, heartbeat = limit
                age = trio.current_time() - (heartbeat.last or 0.0)
                if age > timeout:
                    self._timed_out.add(name)
                    report = replace(report, live=False,
                                     ready=None if report.ready is None else False,
                                     detail=f"no report for {age:.0f}s (timeout {timeout:g}s)")
            out[name] = report
        return out

    @property
    def live(self) -> bool:
        return all(r.live for r in self.reports().values())

    @property
    def ready(self) -> bool:
        reports = self.reports().values()
        return bool(reports) and all(r.ready is not False for r in reports)

    def table(self) -> str:
        rows = [("COMPONENT", "TIMEOUT", "LIVENESS", "READINESS", "DETAIL")]
        for name, r in self.reports().items():
            limit = self._timeouts.get(name)
            late = name in self._timed_out
            rows.append((name, f"{limit[0]:g}s" if limit else "-",
                         "timed out" if late else
                         "reporting live" if r.live else "reporting non-live",
                         "-" if r.ready is None else "timed out" if late else
                         ("reporting ready" if r.ready else "reporting non-ready"), r.detail))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
        lines = [sep]
        for i, row in enumerate(rows):
            lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                         + " |")
            if i == 0:
                lines.append(sep)
        lines.append(sep)
        return "\n".join(lines) + "\n"

    def handle(self, path: str) -> tuple[int, str, bytes] | None:
        if path == "/liveness":
            ok = self.live
        elif path == "/readiness":
            ok = self.live and self.ready
        else:
            return None
        return (200 if ok else 503), "text/plain; charset=utf-8", self.table().encode()
