"""The debug endpoint (DebugHost:DebugPort) and the SIGUSR1 memory snapshot.

Typha serves Go's pprof there; the Python equivalents are the trio task tree, tracemalloc's
top allocation sites and the effective configuration.  ``DebugMemoryProfilePath`` makes
SIGUSR1 write a tracemalloc snapshot (``<timestamp>`` in the path is replaced), loadable
with ``tracemalloc.Snapshot.load``.
"""

from __future__ import annotations

import json
import logging
import time
import tracemalloc
from collections.abc import Awaitable, Callable

import trio

from ..config import PARAMS, Config

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
TOP_N = 25


def task_tree() -> str:
    """Every task under the root, indented by nursery."""
    lines: list[str] = []

    def walk(task: trio.lowlevel.Task, depth: int) -> None:
        lines.append("  " * depth + task.name)
        for nursery in task.child_nurseries:
            for child in sorted(nursery.child_tasks, key=lambda t: t.name):
                walk(child, depth + 1)

    walk(trio.lowlevel.current_root_task(), 0)  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def memory_top() -> str:
    if not tracemalloc.is_tracing():
        return ("tracemalloc is not tracing: set DebugMemoryProfilePath (or run with "
                "PYTHONTRACEMALLOC=1) to record allocations\n")
    stats = tracemalloc.take_snapshot().statistics("lineno")[:TOP_N]
    return "".join(f"{s}\n" for s in stats)


def config_json(cfg: Config) -> bytes:
    from ..config import _shown
    values = {p.name: getattr(cfg, p.field) for p in PARAMS}
    shown = {k: _shown(k, v) if isinstance(v, str) else v for k, v in values.items()}
    return json.dumps(shown, indent=2, sort_keys=True, default=list).encode()


def debug_handler(cfg: Config) -> Callable[[str], Awaitable[Response | None]]:
    async def handle(path: str) -> Response | None:
        text = "text/plain; charset=utf-8"
        if path == "/debug/tasks":
            return 200, text, task_tree().encode()
        if path == "/debug/memory":
            return 200, text, memory_top().encode()
        if path == "/debug/config":
            return 200, "application/json", config_json(cfg)
        return None
    return handle


def write_memory_profile(path_template: str) -> str:
    """Write a tracemalloc snapshot (SIGUSR1); returns the path written."""
    path = path_template.replace("<timestamp>", time.strftime("%Y-%m-%dT%H%M%SZ",
                                                                time.gmtime()))
    if not tracemalloc.is_tracing():
        tracemalloc.start()
    tracemalloc.take_snapshot().dump(path)
    return path


__all__ = ["debug_handler", "memory_top", "task_tree", "write_memory_profile"]
