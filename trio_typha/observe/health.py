"""Typha's /liveness and /readiness: 200 or 503 with a table of reporters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Report:
    live: bool
    ready: bool | None  # None: this reporter says nothing about readiness
    detail: str = ""


class Health:
    """Named reporters (callables evaluated per request, so nothing goes stale)."""

    def __init__(self) -> None:
        self._reporters: dict[str, Callable[[], Report]] = {}

    def register(self, name: str, reporter: Callable[[], Report]) -> None:
        self._reporters[name] = reporter

    def reports(self) -> dict[str, Report]:
        return {name: fn() for name, fn in sorted(self._reporters.items())}

    @property
    def live(self) -> bool:
        return all(r.live for r in self.reports().values())

    @property
    def ready(self) -> bool:
        reports = self.reports().values()
        return bool(reports) and all(r.ready is not False for r in reports)

    def table(self) -> str:
        rows = [("COMPONENT", "LIVENESS", "READINESS", "DETAIL")]
        for name, r in self.reports().items():
            rows.append((name, "reporting live" if r.live else "reporting non-live",
                         "-" if r.ready is None else
                         ("reporting ready" if r.ready else "reporting non-ready"), r.detail))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
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
