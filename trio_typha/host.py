"""What this host lets the process use, read from the OS: the CPUs it may be scheduled on
(its affinity mask) under its cgroups' CPU quota (:mod:`.cpus` reads the quota files' text),
for ServerWorkers' default."""

from __future__ import annotations

import os

from .config import Config
from .cpus import cgroup_quota, default_workers


def read_text(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as fh:
        return fh.read()


def usable_cpus() -> int:
    """ServerWorkers' default for this process (see :func:`.cpus.default_workers`)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    return default_workers(affinity, cgroup_quota(read_text))


def server_processes(cfg: Config) -> int:
    """Processes serving the port: ServerWorkers, or for a value <= 0 this process's
    usable CPUs (at most :data:`~trio_typha.config.MAX_DEFAULT_WORKERS`)."""
    return cfg.server_workers if cfg.server_workers > 0 else usable_cpus()
