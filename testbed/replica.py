"""One ``trio-typha serve`` replica process on loopback, as a pod of the Deployment runs it.

Used by the demo (:mod:`testbed.demo`) and the e2e suite's embedded cluster
(tests/e2e/cluster.py): start it in KDD mode against a kubeconfig, wait for its /readiness,
describe it as its EndpointSlice endpoint (:class:`testbed.cluster.Replica`), stop it with
SIGTERM (graceful drain) or kill it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
import trio

from .cluster import Replica


def free_port(*hosts: str) -> int:
    """A TCP port free on every one of ``hosts`` (default: 127.0.0.1)."""
    hosts = hosts or ("127.0.0.1",)
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in hosts[1:]:
                with socket.socket() as s:
                    s.bind((host, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no TCP port free on all of {hosts}")


@dataclass
class ReplicaProcess:
    name: str  # pod name
    ip: str
    port: int
    health_port: int
    node: str  # the node its EndpointSlice endpoint names
    log_path: Path | None = None  # stdout and stderr; None: this process's own
    #: ``TYPHA_*`` (and other) variables on top of the Deployment's essentials.
    settings: Mapping[str, str] = field(default_factory=dict)
    proc: trio.Process | None = None
    alive: bool = False

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def health(self) -> str:
        return f"{self.ip}:{self.health_port}"

    def replica(self) -> Replica:
        return Replica(self.name, self.ip, self.port, self.node, ready=self.alive)

    async def start(self, kubeconfig: str) -> None:
        env = {**os.environ, "TYPHA_DATASTORETYPE": "kubernetes", "KUBECONFIG": kubeconfig,
               "TYPHA_SERVERHOST": self.ip, "TYPHA_SERVERPORT": str(self.port),
               "TYPHA_HEALTHENABLED": "true", "TYPHA_HEALTHHOST": self.ip,
               "TYPHA_HEALTHPORT": str(self.health_port),
               "TYPHA_LOGSEVERITYSCREEN": "WARNING", "TYPHA_SHUTDOWNTIMEOUTSECS": "3",
               "TYPHA_SHUTDOWNCONNECTIONDROPINTERVALMAXSECS": "0.05",
               # One process per replica: the demo runs several replicas on one machine
               # (a 2-CPU laptop), where ServerWorkers' default (one process per CPU, each
               # with a copy of the caches) would only multiply memory and contention.
               "TYPHA_SERVERWORKERS": "1", **self.settings}
        cmd = [sys.executable, "-m", "trio_typha", "serve"]
        if self.log_path is None:
            self.proc = await trio.lowlevel.open_process(cmd, env=env,
                                                         stdin=subprocess.DEVNULL)
        else:
            logfile = await trio.to_thread.run_sync(partial(open, self.log_path, "ab"))
            with logfile:
                self.proc = await trio.lowlevel.open_process(
                    cmd, env=env, stdin=subprocess.DEVNULL, stdout=logfile, stderr=logfile)
        self.alive = True

    async def wait_ready(self) -> None:
        url = f"http://{self.health}/readiness"
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                assert self.proc is not None
                if self.proc.returncode is not None:
                    where = f"; see {self.log_path}" if self.log_path else ""
                    raise RuntimeError(f"{self.name} exited with code "
                                       f"{self.proc.returncode}{where}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(url)).status_code == 200:
                        return
                await trio.sleep(0.2)

    def kill(self) -> None:
        if self.proc is not None and self.alive:
            self.proc.kill()
            self.alive = False

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (Typha drains its clients), then SIGKILL after ``grace`` seconds."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            with trio.move_on_after(grace):
                await self.proc.wait()
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        self.alive = False
