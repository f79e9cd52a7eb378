"""How many CPUs a process may use: ServerWorkers' default (pure: the files' text is read
through a callable the caller passes, :mod:`.host` the one that reads them).

Two limits apply to a process on Linux: the CPUs it may be scheduled on (its affinity
mask: ``taskset``, cpusets, a Kubernetes pod with the static CPU manager) and, in a
container with a CPU limit, the cgroup quota, which throttles the whole cgroup to
QUOTA/PERIOD CPUs however many it may run on: cgroup v2's ``cpu.max`` ("QUOTA PERIOD" in
microseconds, or "max" for none) or, on hosts still on cgroup v1, the ``cpu`` controller's
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none).  Every ancestor cgroup's quota
applies too.
"""

from __future__ import annotations

__sans_io__ = True

import math
from collections.abc import Callable

from .config import MAX_DEFAULT_WORKERS, MIN_CPUS_FOR_WORKERS

CGROUP_ROOT = "/sys/fs/cgroup"


def parse_cpu_max(text: str) -> float | None:
    """CPUs a cgroup v2 ``cpu.max`` allows ("max 100000": no limit, None)."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    try:
        quota = int(fields[0])
        period = int(fields[1]) if len(fields) > 1 else 100_000
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def parse_cfs(quota_us: str, period_us: str) -> float | None:
    """CPUs a cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` allow (-1: none)."""
    try:
        quota, period = int(quota_us.strip()), int(period_us.strip())
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def cgroup_path(proc_self_cgroup: str) -> str | None:
    """This process's cgroup v2 path from ``/proc/self/cgroup`` ("0::/path"), if any."""
    for line in proc_self_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return None


def cgroup_v1_cpu_path(proc_self_cgroup: str) -> tuple[str, str] | None:
    """The cgroup v1 ``cpu`` controller's (mount directory name, path), if any: the line
    "N:cpu,cpuacct:/path" is mounted at ``<root>/cpu,cpuacct``."""
    for line in proc_self_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "cpu" in controllers.split(","):
            return controllers, path or "/"
    return None


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts]) if parts else base


def _tightest(read: Callable[[str], str], base: str, path: str,
              limit_at: Callable[[Callable[[str], str], str], float | None]) -> float | None:
    """The smallest limit of ``path`` and its ancestors under ``base``."""
    limits = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        try:
            limit = limit_at(read, _join(base, *parts[:depth]))
        except OSError:
            continue  # the root cgroup has no quota files; a mount may hide parents
        if limit is not None:
            limits.append(limit)
    return min(limits, default=None)


def _v2_limit(read: Callable[[str], str], directory: str) -> float | None:
    return parse_cpu_max(read(_join(directory, "cpu.max")))


def _v1_limit(read: Callable[[str], str], directory: str) -> float | None:
    return parse_cfs(read(_join(directory, "cpu.cfs_quota_us")),
                     read(_join(directory, "cpu.cfs_period_us")))


def cgroup_quota(read: Callable[[str], str], root: str = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota of this process's cgroup and its ancestors (v2, else v1)."""
    try:
        text = read("/proc/self/cgroup")
    except OSError:
        return None
    limits = []
    path = cgroup_path(text)
    if path is not None:
        limits.append(_tightest(read, root, path, _v2_limit))
    v1 = cgroup_v1_cpu_path(text)
    if v1 is not None:
        controllers, v1_path = v1
        # Mounted under the joined name (cpu,cpuacct) or, with a symlink, just "cpu".
        for mount in dict.fromkeys((controllers, "cpu")):
            limits.append(_tightest(read, _join(root, mount), v1_path, _v1_limit))
    return min((x for x in limits if x is not None), default=None)


def default_workers(affinity: int, quota: float | None,
                    cap: int = MAX_DEFAULT_WORKERS,
                    min_cpus: int = MIN_CPUS_FOR_WORKERS) -> int:
    """Processes for ``affinity`` schedulable CPUs under ``quota`` CPUs (None: no quota):
    one below ``min_cpus`` usable CPUs (a worker there takes its core from the primary,
    the datastore client and the kernel's network work, and costs more than it serves:
    :data:`~trio_typha.config.MIN_CPUS_FOR_WORKERS` says what was measured), else one per
    whole CPU (a 4.5-CPU quota keeps four processes busy, not five), at most ``cap``."""
    usable = float(affinity) if quota is None else min(float(affinity), quota)
    if usable < min_cpus:
        return 1
    return max(1, min(cap, math.floor(usable)))
