"""``trio-typha demo``: the whole system on one machine, and a verdict on it.

One command starts, as separate processes,

* the test bed Kubernetes API server with a synthetic cluster (:mod:`testbed.bed`);
* three trio-typha replicas in KDD mode against it, each on its own loopback address
  (127.0.0.11, .12, .13) and the same port, as pods of one Deployment would be;
* the ``calico-typha`` Service's EndpointSlice listing them (each on a node of its own);
* a fleet of agents (:mod:`testbed.fleet`) on both protocols, finding the replicas from that
  EndpointSlice (same-node Typha first) with a random start-up delay;

then NetworkPolicy and pod churn through the official ``kubernetes`` client
(:mod:`testbed.churn`; the pods relabelled are the synthetic cluster's own, scheduled ones),
optionally a replica killed mid-run (its EndpointSlice entry goes unready, as the
EndpointSlice controller would mark it) and started again later, a dashboard page fed by
every replica's ``/feed`` WebSocket and by the demo's own ``/fleet`` one, and a progress line
in the terminal.  The demo keeps the run's history (one point a second: the fleet's numbers
and each replica's from its feed and /proc, plus the kills and restarts), serves it as
``/history.json`` and streams each new point on ``/fleet``, so a page opened late draws the
whole run; ``--linger`` keeps the page up with the verdict on it.

At the end (or on Ctrl-C) churn stops, the demo waits for quiescence and compares every
agent's state with the state the invariant checker (:mod:`testbed.invariant`) derives from
the API server's contents, then prints the verdict (``--json``: one JSON object) and exits
non-zero unless every agent converged.

Propagation delay is measured per write and per agent: the churn records each write's
resourceVersion and wall-clock time, the agents report when each revision reached them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO, TypeVar

import trio
from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

from trio_typha.client.discovery import ReconnectPolicy
from trio_typha.observe.httpd import serve_http

from .cluster import typha_endpoint_slice
from .demo_options import Options, options
from .fleet import DiscoverySpec, Fleet, FleetConfig, FleetStats, open_fleet
from .invariant import ExpectedKV, expected_states, read_kubernetes
from .jsonlines import JsonLines
from .replica import ReplicaProcess, free_port
from .verdict import percentiles_ms, render

log = logging.getLogger("testbed.demo")
T = TypeVar("T")

DASHBOARD = Path(__file__).resolve().parent / "dashboard"
REPLICA_IPS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
SLICE_NAME = "calico-typha-demo"
HANG = 120.0  # no single phase of the demo may take longer than this (hang protection)


# -- the processes ----------------------------------------------------------------------------

def _proc_usage(pid: int) -> tuple[float, float, float]:
    """(CPU seconds, RSS MiB, peak RSS MiB) of a live process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(stat[11]) + int(stat[12])) / ticks
        status = dict(line.split(":", 1) for line in
                      Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        rss = int(status["VmRSS"].split()[0]) / 1024
        peak = int(status["VmHWM"].split()[0]) / 1024
        return round(cpu, 2), round(rss, 1), round(peak, 1)
    except (OSError, KeyError, IndexError, ValueError):
        return 0.0, 0.0, 0.0


@dataclass
class DemoReplica(ReplicaProcess):
    """A replica as the demo watches it: resource usage and its /feed."""

    killed_at: float | None = None
    restarts: int = 0
    usage: tuple[float, float, float] = (0.0, 0.0, 0.0)  # last seen (cpu s, rss, peak rss)
    cpu_percent: float = 0.0  # CPU use between the last two samples (100: one core)
    _sampled: tuple[float, float] | None = None  # (trio time, cpu s) of the last sample
    feed: dict[str, Any] = field(default_factory=dict)  # latest /feed sample
    lag_p99_max_ms: float = 0.0  # the worst client lag p99 its feed reported

    @property
    def feed_url(self) -> str:
        return f"ws://{self.health}/feed"

    def sample_usage(self) -> None:
        if self.proc is not None and self.alive:
            self.usage = _proc_usage(self.proc.pid)
            now = trio.current_time()
            if self._sampled is not None and now > self._sampled[0]:
                used = max(self.usage[0] - self._sampled[1], 0.0)
                self.cpu_percent = round(100 * used / (now - self._sampled[0]), 1)
            self._sampled = (now, self.usage[0])

    async def start(self, kubeconfig: str) -> None:
        self._sampled = None  # a new process: its CPU counts from zero
        self.cpu_percent = 0.0
        await super().start(kubeconfig)

    def kill(self) -> None:
        if self.proc is not None and self.alive:
            self.sample_usage()
            self.killed_at = trio.current_time()
        super().kill()
        self.cpu_percent = 0.0


async def _follow_feed(replica: DemoReplica, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Keep ``replica.feed`` at the latest /feed sample, reconnecting while it is alive."""
    task_status.started()
    while True:
        if replica.alive:
            try:
                async with open_websocket_url(replica.feed_url) as ws:
                    while True:
                        replica.feed = json.loads(await ws.get_message())
                        replica.lag_p99_max_ms = max(replica.lag_p99_max_ms,
                                                     replica.feed.get("lag_p99_ms", 0.0))
            except (OSError, HandshakeError, ConnectionClosed):
                pass
        replica.feed = {}
        await trio.sleep(1.0)


# -- the Kubernetes side (blocking official client, run in threads) -----------------------

class Cluster:
    """The official ``kubernetes`` client on the test bed: EndpointSlice, churn, reading."""

    def __init__(self, kubeconfig: str) -> None:
        from .churn import api_client
        self.kubeconfig = kubeconfig
        self.client = api_client(kubeconfig)

    def publish(self, replicas: list[DemoReplica]) -> None:
        """Create or replace the calico-typha EndpointSlice with ``replicas``."""
        import kubernetes
        api = kubernetes.client.DiscoveryV1Api(self.client)
        body = typha_endpoint_slice([r.replica() for r in replicas], name=SLICE_NAME)
        try:
            current = api.read_namespaced_endpoint_slice(SLICE_NAME, "kube-system")
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
            api.create_namespaced_endpoint_slice("kube-system", body)  # type: ignore[arg-type]
            return
        if current.metadata is not None:  # replace only the version we read
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
        api.replace_namespaced_endpoint_slice(SLICE_NAME, "kube-system",
                                              body)  # type: ignore[arg-type]

    def scheduled_pods(self, limit: int = 200) -> list[tuple[str, str]]:
        """(namespace, name) of up to ``limit`` pods with a node and an IP."""
        import kubernetes
        pods = kubernetes.client.CoreV1Api(self.client).list_pod_for_all_namespaces(
            limit=limit).items
        return [(str(p.metadata.namespace), str(p.metadata.name)) for p in pods
                if p.metadata is not None and p.spec is not None and p.spec.node_name
                and p.status is not None and p.status.pod_ip]

    def expected(self, syncers: tuple[str, ...]) -> dict[str, dict[str, ExpectedKV]]:
        """What every agent must hold: the invariant checker on the API server's contents."""
        return expected_states(read_kubernetes(self.client), syncers)

    def close(self) -> None:
        self.client.close()


# -- the demo ----------------------------------------------------------------------------------

class Demo:
    def __init__(self, opts: Options, out: TextIO = sys.stdout, err: TextIO = sys.stderr
                 ) -> None:
        self.opts = opts
        self.out = out
        self.err = err
        self.workdir = Path(opts.workdir or tempfile.mkdtemp(prefix="trio-typha-demo-"))
        self.replicas: list[DemoReplica] = []
        self.fleet: Fleet | None = None
        self.cluster: Cluster | None = None
        self.phase = "starting"
        self.started = 0.0
        self.fleet_started = 0.0
        self.all_in_sync_s: float | None = None
        self.churn: Any = None
        self.write_times: dict[str, float] = {}  # resourceVersion -> wall time of the write
        self._receipts_seen = 0
        self._unmatched: list[tuple[str, float, str]] = []
        self.delays_by_protocol: dict[str, list[float]] = {}
        self.delays: list[float] = []
        self.recent_delays: list[float] = []
        self.kills = 0
        self.kills_survived = 0
        self.stop = trio.Event()
        self._abandon = trio.CancelScope()
        self.verdict: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []  # one point a second (see _history_point)
        self.events: list[dict[str, Any]] = []  # kills and restarts, in order
        self.kubeconfig = ""
        self.dashboard_url = ""
        self._tty = err.isatty()

    # -- output --------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        if self._tty:
            self.err.write("\r\x1b[K")
        self.err.write(text + "\n")
        self.err.flush()

    def progress(self) -> None:
        if self.fleet is None:
            return
        s = self.fleet.stats
        per = " ".join(f"{r.name}:{self._agents_on(r)}" if r.alive else f"{r.name}:dead"
                       for r in self.replicas)
        lag = percentiles_ms(self.recent_delays)
        line = (f"[{trio.current_time() - self.started:6.1f}s] {self.phase:<10} agents in sync "
                f"{s.in_sync}/{self.opts.agents}  writes {self._writes()}  "
                f"lag p50 {lag['p50_ms']} ms p99 {lag['p99_ms']} ms  {per}")
        if self._tty:
            self.err.write("\r\x1b[K" + line)
            self.err.flush()
        elif int(trio.current_time() - self.started) % 5 == 0:
            self.err.write(line + "\n")
            self.err.flush()

    def _agents_on(self, r: DemoReplica) -> int:
        assert self.fleet is not None
        return self.fleet.stats.by_address.get(r.address, 0)

    def _writes(self) -> int:
        return len(self.churn.writes) if self.churn is not None else 0

    # -- propagation: match agents' receipts with the churn's writes -------------------------------

    def _match_receipts(self) -> None:
        assert self.fleet is not None
        if self.churn is not None:
            for w in self.churn.writes[len(self.write_times):]:
                self.write_times[w.resource_version or f"?{w.seq}"] = w.at
        fresh = self.fleet.receipts[self._receipts_seen:]
        self._receipts_seen = len(self.fleet.receipts)
        pending, self._unmatched = self._unmatched + fresh, []
        now = time.time()
        self.recent_delays = []
        for rev, at, protocol in pending:
            written = self.write_times.get(rev)
            if written is not None:
                self.delays.append(at - written)
                self.recent_delays.append(at - written)
                self.delays_by_protocol.setdefault(protocol, []).append(at - written)
            elif now - at < 30:  # the churn thread may not have recorded it yet
                self._unmatched.append((rev, at, protocol))

    # -- the live page ---------------------------------------------------------------------------

    def fleet_sample(self) -> dict[str, Any]:
        s = self.fleet.stats if self.fleet is not None else None
        lag = percentiles_ms(self.recent_delays)
        sample = {
            "type": "fleet", "time": round(time.time(), 3), "phase": self.phase,
            "elapsed": round(trio.current_time() - self.started, 1),
            "agents": self.opts.agents, "in_sync": s.in_sync if s else 0,
            "connected": s.connected if s else 0,
            "by_protocol": s.by_protocol if s else {},
            "starts": _starts(s) if s else {},
            "writes": self._writes(), "propagation_p50_ms": lag["p50_ms"],
            "propagation_p99_ms": lag["p99_ms"],
            "replicas": [{"name": r.name, "address": r.address, "feed": r.feed_url,
                          "alive": r.alive, "agents": self._agents_on(r) if s else 0,
                          "reconnects": s.reconnects_by_address.get(r.address, 0) if s else 0,
                          "restarts": r.restarts, "cpu_percent": r.cpu_percent,
                          "rss_mib": r.usage[1] if r.alive else 0.0,
                          "watches": r.feed.get("watches")}
                         for r in self.replicas],
            "events": self.events,
            "point": self.history[-1] if self.history else None,
            "verdict": self.verdict,
        }
        return sample

    def _event(self, kind: str, replica: DemoReplica) -> dict[str, Any]:
        """A kill or a restart (when the process was killed or started), as the page marks
        it on every plot."""
        event = {"kind": kind, "replica": replica.name,
                 "elapsed": round(trio.current_time() - self.started, 1)}
        self.events.append(event)
        return event

    def _history_point(self, sample: dict[str, Any]) -> dict[str, Any]:
        """One second of the run as the page plots it (``i`` numbers the points)."""
        point = {k: sample[k] for k in ("elapsed", "agents", "in_sync", "writes",
                                        "propagation_p50_ms", "propagation_p99_ms")}
        point["i"] = len(self.history)
        point["replicas"] = {
            r.name: {"connections": r.feed.get("connections", 0) if r.alive else 0,
                     "updates_per_s": round(sum(r.feed.get("updates_per_s", {}).values()), 1)
                     if r.alive else 0.0,
                     "cpu_percent": r.cpu_percent, "rss_mib": r.usage[1] if r.alive else 0.0}
            for r in self.replicas}
        return point

    async def _dashboard(self, path: str) -> tuple[int, str, bytes] | None:
        files = {"/": ("index.html", "text/html; charset=utf-8"),
                 "/index.html": ("index.html", "text/html; charset=utf-8"),
                 "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8")}
        if path == "/fleet.json":
            return 200, "application/json", json.dumps(self.fleet_sample()).encode()
        if path == "/history.json":
            return 200, "application/json", json.dumps(
                {"points": self.history, "events": self.events}).encode()
        found = files.get(path)
        if found is None:
            return None
        return 200, found[1], await trio.Path(DASHBOARD / found[0]).read_bytes()

    async def _fleet_feed(self, ws: Any) -> None:
        try:
            while True:
                await ws.send_message(json.dumps(self.fleet_sample()))
                await trio.sleep(1.0)
        except ConnectionClosed:
            pass

    # -- phases ------------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any] | None:
        """The demo, start to verdict; None if abandoned (a second Ctrl-C)."""
        with self._abandon:
            return await self._run()
        return None

    async def _run(self) -> dict[str, Any]:
        self.started = trio.current_time()
        opts = self.opts
        async with contextlib.AsyncExitStack() as stack:
            nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)
            await nursery.start(self._signals)
            kubeconfig = await stack.enter_async_context(self._apiserver())
            self.kubeconfig = kubeconfig
            self.cluster = Cluster(kubeconfig)
            stack.callback(self.cluster.close)
            await stack.enter_async_context(self._replicas(kubeconfig))
            await trio.to_thread.run_sync(self.cluster.publish, self.replicas)
            self.say(f"== EndpointSlice kube-system/{SLICE_NAME}: "
                     + ", ".join(f"{r.name} {r.address} on {r.node}" for r in self.replicas))
            listeners = await nursery.start(partial(
                serve_http, opts.dashboard_host, opts.dashboard_port, self._dashboard,
                websockets={"/fleet": self._fleet_feed}))
            port = listeners[0].socket.getsockname()[1]
            self.dashboard_url = f"http://{opts.dashboard_host}:{port}/"
            self.say(f"== dashboard: {self.dashboard_url}")
            for r in self.replicas:
                await nursery.start(_follow_feed, r)
            self.phase = "syncing"
            self.fleet = await stack.enter_async_context(self._fleet(kubeconfig))
            await nursery.start(self._tick)
            self.fleet_started = trio.current_time()
            sync_limit = HANG + opts.agents * 0.5  # generous: a shared machine may be slow
            stats = None
            with trio.move_on_after(sync_limit) as too_long:
                stats = await self._until_stopped(partial(
                    self.fleet.wait,
                    lambda s: s.agents == opts.agents and s.in_sync == opts.agents))
            if too_long.cancelled_caught:
                self.say(f"!! agents did not all sync within {sync_limit:g} s")
            if stats is not None:
                self.all_in_sync_s = round(trio.current_time() - self.fleet_started, 2)
                self.say(f"== {opts.agents} agents in sync after {self.all_in_sync_s} s")
            if not self.stop.is_set():
                await self._churn_phase(nursery)
            self.phase = "quiescing"
            self.verdict = await self._verdict()
            self.phase = "done"
            await trio.sleep(1.2)  # one more feed message carries the verdict to the page
            if opts.linger > 0 and not self.stop.is_set():
                self.say(f"== verdict on the dashboard {self.dashboard_url} for "
                         f"{opts.linger:g} s (Ctrl-C to end now)")
                await self._until_stopped(partial(trio.sleep, opts.linger))
        return self.verdict

    async def _until_stopped(self, fn: Callable[[], Awaitable[T]]) -> T | None:
        """``await fn()``, unless Ctrl-C comes first (then None)."""
        result: T | None = None
        async with trio.open_nursery() as n:
            async def run() -> None:
                nonlocal result
                result = await fn()
                n.cancel_scope.cancel()

            async def stopped() -> None:
                await self.stop.wait()
                n.cancel_scope.cancel()

            n.start_soon(run)
            n.start_soon(stopped)
        return result

    async def _churn_phase(self, nursery: trio.Nursery) -> None:
        from .churn import Churn, ChurnConfig, Mix, run_in_trio
        opts = self.opts
        assert self.cluster is not None
        if opts.churn_rate <= 0 or opts.duration <= 0:
            return
        self.churn = Churn(self.cluster.client, ChurnConfig(
            rate=opts.churn_rate, mix=Mix(create=1, update=2, delete=1, pod_label=2),
            prefix="demo", namespaces=3, max_policies=60, seed=13))
        await trio.to_thread.run_sync(self.churn.setup)
        # Pod churn relabels the synthetic cluster's own pods: they are scheduled and have
        # IPs, so every relabel is a workload endpoint update the felix agents must get.
        self.churn.pods.extend(await trio.to_thread.run_sync(self.cluster.scheduled_pods))
        self.phase = "churning"
        self.say(f"== churn: {opts.churn_rate:g} writes/s for {opts.duration:g} s "
                 f"(NetworkPolicies created, updated and deleted; pods relabelled, "
                 f"{len(self.churn.pods)} of them)")
        churn = self.churn
        killed = trio.Event()  # the kill, its recovery and any restart are over
        async with trio.open_nursery() as n:
            if opts.kill_replica_at is not None:
                n.start_soon(self._kill_later, opts.kill_replica_at, killed)
            await self._until_stopped(partial(run_in_trio, churn, seconds=opts.duration))
            # No kill once the churn is over; one under way finishes (its restart too), so
            # the verdict sees every replica as it is meant to end.
            if self.kills:
                await self._until_stopped(killed.wait)
            n.cancel_scope.cancel()
        self.say(f"== churn stopped after {self._writes()} writes")

    async def _kill_later(self, after: float, done: trio.Event) -> None:
        try:
            await self._kill_and_restart(after)
        finally:
            done.set()

    async def _kill_and_restart(self, after: float) -> None:
        await trio.sleep(after)
        victim = next((r for r in self.replicas if r.alive and self._agents_on(r)),
                      self.replicas[0])
        had = self._agents_on(victim)
        self.say(f"== killing {victim.name} ({victim.address}, {had} agents) with SIGKILL")
        victim.kill()
        self.kills += 1
        self._event("kill", victim)
        assert self.cluster is not None
        await trio.to_thread.run_sync(self.cluster.publish, self.replicas)
        t0 = trio.current_time()
        assert self.fleet is not None
        with trio.move_on_after(HANG):
            await self.fleet.wait(lambda s: s.in_sync == self.opts.agents
                                  and s.by_address.get(victim.address, 0) == 0)
            self.kills_survived += 1
            self.say(f"== all agents in sync again {trio.current_time() - t0:.1f} s after "
                     f"the kill, none left on {victim.name}")
        if self.opts.restart_replica_after is not None:
            await trio.sleep_until(t0 + self.opts.restart_replica_after)
            await self._restart(victim)

    async def _restart(self, replica: DemoReplica) -> None:
        """Start a killed replica again at its address, as its pod's replacement would be;
        its endpoint is ready again once its /readiness answers."""
        t0 = trio.current_time()
        await replica.start(self.kubeconfig)
        replica.restarts += 1
        event = self._event("restart", replica)
        with trio.fail_after(HANG):
            await replica.wait_ready()
        event["ready_after_s"] = round(trio.current_time() - t0, 1)
        assert self.cluster is not None
        await trio.to_thread.run_sync(self.cluster.publish, self.replicas)
        self.say(f"== {replica.name} ({replica.address}) restarted, ready after "
                 f"{event['ready_after_s']} s")

    async def _verdict(self) -> dict[str, Any]:
        """Quiescence, then every agent against the invariant checker's expected state."""
        assert self.fleet is not None and self.cluster is not None
        opts = self.opts
        result: dict[str, Any] = {}
        deadline = trio.current_time() + opts.quiescence_timeout
        attempt = 0
        while True:
            attempt += 1
            # Quiet: every agent in sync and the fleet's update count unchanged for a full
            # round of reports from every worker, twice.
            with trio.move_on_at(deadline):
                await self._quiet()
            expected = await trio.to_thread.run_sync(self.cluster.expected, opts.syncers)
            result = await self.fleet.compare(expected, str(self.workdir / "expected.json"))
            if not result["mismatched"] or trio.current_time() >= deadline:
                break
            self.say(f"   {len(result['mismatched'])} agents differ (attempt {attempt}); "
                     "waiting for quiescence")
        self._match_receipts()
        for r in self.replicas:
            r.sample_usage()
        s = self.fleet.stats
        totals = {k: sum(m[k] for m in result["mismatched"]) for k in
                  ("missing", "extra", "differing")}
        writes = self.churn.writes if self.churn is not None else []
        converged = not result["mismatched"] and result["agents"] == opts.agents
        return {
            "converged": converged, "agents": result["agents"], "protocols": s.by_protocol,
            "syncers": list(opts.syncers), "size": opts.size,
            "time_to_all_in_sync_s": self.all_in_sync_s,
            "keys_checked": result["keys_checked"], **totals,
            "agents_not_in_sync": sum(1 for m in result["mismatched"] if not m["in_sync"]),
            "writes": len(writes), "write_errors": sum(1 for w in writes if not w.ok),
            "churn_rate": opts.churn_rate, "churn_s": opts.duration,
            "propagation": percentiles_ms(self.delays),
            "propagation_by_protocol": {p: percentiles_ms(d) for p, d in
                                        sorted(self.delays_by_protocol.items())},
            "replica_kills": self.kills, "replica_kills_survived": self.kills_survived,
            "replica_restarts": sum(r.restarts for r in self.replicas),
            "reconnects": s.connections - opts.agents, "connect_failures": s.failures,
            "grpc_starts": _starts(s),
            "replicas": [{"name": r.name, "address": r.address, "node": r.node,
                          "alive": r.alive, "restarts": r.restarts,
                          "connections": self._agents_on(r),
                          "reconnects": s.reconnects_by_address.get(r.address, 0),
                          "server_connections": r.feed.get("connections"),
                          "client_lag_p99_max_ms": r.lag_p99_max_ms,
                          "cpu_s": r.usage[0], "rss_mib": r.usage[1],
                          "peak_rss_mib": r.usage[2]} for r in self.replicas],
            "fleet_processes": [dict(zip(("cpu_s", "rss_mib", "peak_rss_mib"),
                                         _proc_usage(pid), strict=True))
                                for pid in self.fleet.pids],
            "mismatched": result["mismatched"][:20],
            "dashboard": self.dashboard_url, "workdir": str(self.workdir),
        }

    async def _quiet(self, rounds: int = 2) -> None:
        assert self.fleet is not None
        quiet, last = 0, -1
        while quiet < rounds:
            for _ in range(self.opts.processes):
                stats = await self.fleet.next_report()
            quiet = quiet + 1 if stats.updates == last and stats.in_sync == self.opts.agents \
                else 0
            last = stats.updates

    async def _tick(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        task_status.started()
        while True:
            await trio.sleep(1.0)
            self._match_receipts()
            for r in self.replicas:
                r.sample_usage()
            sample = self.fleet_sample()
            if self.phase == "done":
                continue  # the pieces are shutting down
            self.history.append(self._history_point(sample))
            self.progress()

    async def _signals(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                       ) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            async for _ in signals:
                if self.stop.is_set():
                    self._abandon.cancel()  # the pieces still shut down on the way out
                    continue
                self.say("== stopping (Ctrl-C again to abandon the verdict)")
                self.stop.set()

    # -- the pieces' lifetimes ----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _apiserver(self) -> AsyncIterator[str]:
        path = self.workdir / "kubeconfig"
        logfile = await trio.to_thread.run_sync(partial(open, self.workdir / "apiserver.log",
                                                        "ab"))
        with logfile:
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "testbed.bed", "--size", self.opts.size,
                 "--kubeconfig", str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=logfile)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            with trio.fail_after(HANG):
                serving = await JsonLines(proc.stdout).json()
            self.say(f"== test bed API server {serving['url']}: {self.opts.size} cluster, "
                     f"{serving['objects']} objects")
            yield serving["kubeconfig"]
        finally:
            with trio.CancelScope(shield=True):
                await proc.stdin.aclose()
                with trio.move_on_after(5):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    @contextlib.asynccontextmanager
    async def _replicas(self, kubeconfig: str) -> AsyncIterator[None]:
        port = free_port(*REPLICA_IPS)
        health = free_port(*REPLICA_IPS)
        self.replicas = [DemoReplica(f"typha-{i}", ip, port, health, f"node-{i:04d}",
                                     self.workdir / f"typha-{i}.log")
                         for i, ip in enumerate(REPLICA_IPS)]
        try:
            for r in self.replicas:
                await r.start(kubeconfig)
            t0 = trio.current_time()
            with trio.fail_after(HANG):
                async with trio.open_nursery() as n:
                    for r in self.replicas:
                        n.start_soon(r.wait_ready)
            self.say(f"== 3 trio-typha replicas (KDD) ready after "
                     f"{trio.current_time() - t0:.1f} s: "
                     + ", ".join(r.address for r in self.replicas))
            yield
        finally:
            with trio.CancelScope(shield=True):
                for r in self.replicas:
                    r.sample_usage()
                async with trio.open_nursery() as n:
                    for r in self.replicas:
                        n.start_soon(r.stop)

    @contextlib.asynccontextmanager
    async def _fleet(self, kubeconfig: str) -> AsyncIterator[Fleet]:
        opts = self.opts
        config = FleetConfig(
            agents=opts.agents, discovery=DiscoverySpec(kubeconfig=kubeconfig),
            grpc_share=opts.grpc_share, syncers=opts.syncers, processes=opts.processes,
            policy=ReconnectPolicy(startup_delay_max=opts.startup_delay_max,
                                   reconnect_delay_max=opts.reconnect_delay_max))
        self.say(f"== fleet: {opts.agents} agents in {opts.processes} processes, "
                 f"{opts.grpc_share:.0%} gRPC, discovering {config.discovery.describe()}")
        async with open_fleet(config) as fleet:
            yield fleet


# -- the command line --------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    try:
        opts = options(args)
    except ValueError as exc:
        print(f"trio-typha demo: {exc}", file=sys.stderr)
        return 2
    demo = Demo(opts)
    verdict = trio.run(demo.run)
    if verdict is None:
        demo.say("trio-typha demo: abandoned, no verdict")
        return 130
    if opts.json:
        print(json.dumps(verdict), flush=True)
    else:
        demo.say(render(verdict))
    return 0 if verdict["converged"] else 1


def _starts(stats: FleetStats) -> dict[str, dict[str, int]]:
    """gRPC agents' stream starts by method (snapshot, position, digest): how many, and the
    bytes they cost."""
    return {m: {"count": n, "bytes": stats.start_bytes_by_method.get(m, 0)}
            for m, n in sorted(stats.starts_by_method.items())}
