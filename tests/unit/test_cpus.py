"""ServerWorkers' default: the CPUs this process may use (cpus.py, host.py, config.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from trio_typha import cpus, host
from trio_typha.config_sources import load_config


@pytest.mark.parametrize(("text", "limit"), [
    ("max 100000\n", None),
    ("max", None),
    ("200000 100000\n", 2.0),
    ("150000 100000", 1.5),
    ("50000 100000", 0.5),
    ("400000", 4.0),  # period omitted: the kernel's default, 100 ms
    ("", None),
    ("garbage here", None),
    ("0 100000", None),
])
def test_cpu_max_parsing(text: str, limit: float | None) -> None:
    assert cpus.parse_cpu_max(text) == limit


@pytest.mark.parametrize(("affinity", "quota", "workers"), [
    (64, None, cpus.MAX_DEFAULT_WORKERS),  # capped
    (16, 4.0, 4),  # a container's CPU limit beats the CPUs it may run on
    (4, 16.0, 4),  # ... and the other way round
    (8, 5.5, 5),  # whole CPUs only
    (6, None, 6),
])
def test_default_is_usable_whole_cpus_capped(affinity: int, quota: float | None,
                                             workers: int) -> None:
    assert cpus.default_workers(affinity, quota) == workers


@pytest.mark.parametrize(("affinity", "quota"), [
    (1, None), (2, None), (3, None),  # this machine's 2 CPUs: no worker pays for itself
    (8, 3.9), (8, 2.0), (8, 0.25),  # a CPU limit below the threshold
    (3, 16.0),
])
def test_below_the_threshold_the_default_is_one_process(affinity: int,
                                                        quota: float | None) -> None:
    assert cpus.default_workers(affinity, quota) == 1


def test_the_threshold_is_where_workers_begin() -> None:
    m = cpus.MIN_CPUS_FOR_WORKERS
    assert cpus.default_workers(m, None) == m
    assert cpus.default_workers(m, m - 0.01) == 1
    assert cpus.default_workers(64, None, min_cpus=65) == 1
    assert cpus.default_workers(2, None, min_cpus=1) == 2  # the rule before the curve


def fake_files(files: dict[str, str]) -> Callable[[str], str]:
    def read(path: str) -> str:
        try:
            return files[path]
        except KeyError:
            raise FileNotFoundError(path) from None
    return read


def test_the_tightest_quota_of_the_cgroup_and_its_parents_applies() -> None:
    read = fake_files({
        "/proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
        "/cg/kubepods/pod1/ctr/cpu.max": "max 100000\n",
        "/cg/kubepods/pod1/cpu.max": "300000 100000\n",
        "/cg/kubepods/cpu.max": "800000 100000\n",
    })
    assert cpus.cgroup_quota(read, root="/cg") == 3.0


def test_no_quota_files_means_no_quota() -> None:
    assert cpus.cgroup_quota(fake_files({"/proc/self/cgroup": "1:cpu:/\n"})) is None
    assert cpus.cgroup_quota(fake_files({})) is None
    # A container's own namespace: its cgroup is the root of the mount.
    read = fake_files({"/proc/self/cgroup": "0::/\n", "/cg/cpu.max": "100000 100000"})
    assert cpus.cgroup_quota(read, root="/cg") == 1.0


def test_config_zero_or_less_means_this_machines_default() -> None:
    expected = cpus.default_workers(len(os.sched_getaffinity(0)),
                                    cpus.cgroup_quota(host.read_text))
    for raw in ("0", "-1"):
        cfg = load_config({"TYPHA_SERVERWORKERS": raw}, config_file=None)
        assert host.server_processes(cfg) == expected
    assert host.server_processes(load_config({}, config_file=None)) == expected
    assert host.server_processes(load_config({"TYPHA_SERVERWORKERS": "1"},
                                             config_file=None)) == 1
    assert host.server_processes(load_config({"TYPHA_SERVERWORKERS": "3"},
                                             config_file=None)) == 3


def test_a_process_pinned_to_one_cpu_defaults_to_one_process() -> None:
    """The affinity mask is read for real: pinned to one CPU (as ``taskset -c 0``), the
    default is the single-process server."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from trio_typha.config_sources import load_config; "
            "from trio_typha.host import server_processes; "
            "print(server_processes(load_config({}, config_file=None)))")
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "1"


@pytest.mark.parametrize(("quota", "period", "limit"), [
    ("-1\n", "100000\n", None), ("200000", "100000", 2.0), ("50000", "100000", 0.5),
    ("x", "100000", None), ("100000", "0", None),
])
def test_cfs_quota_parsing(quota: str, period: str, limit: float | None) -> None:
    assert cpus.parse_cfs(quota, period) == limit


def test_cgroup_v1_quota_of_the_cpu_controller_and_its_parents() -> None:
    read = fake_files({
        "/proc/self/cgroup": "4:memory:/kubepods/pod1/ctr\n"
                             "3:cpu,cpuacct:/kubepods/pod1/ctr\n2:cpuset:/\n",
        "/cg/cpu,cpuacct/kubepods/pod1/ctr/cpu.cfs_quota_us": "-1\n",
        "/cg/cpu,cpuacct/kubepods/pod1/ctr/cpu.cfs_period_us": "100000\n",
        "/cg/cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us": "150000\n",
        "/cg/cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us": "100000\n",
    })
    assert cpus.cgroup_quota(read, root="/cg") == 1.5
    # A host where the controller is mounted as plain "cpu", no quota at all (this one).
    read = fake_files({"/proc/self/cgroup": "1:cpu:/\n0::/\n",
                       "/cg/cpu/cpu.cfs_quota_us": "-1", "/cg/cpu/cpu.cfs_period_us": "100000"})
    assert cpus.cgroup_quota(read, root="/cg") is None
