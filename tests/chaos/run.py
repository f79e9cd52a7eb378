"""The chaos run: a real etcd, a trio-typha replica reading it through a fault proxy, a fleet
on both protocols, churn, and seeded faults; after each fault the invariant checker decides.

Each fault is injected while churn runs, then healed; churn pauses and every holder (the
replica's four caches and every agent) must converge on what the conversion layer derives
from etcd's contents as read afresh (testbed/invariant.py).  A fault is survived if they do
within the convergence budget; keys missing from a holder are keys lost, keys it holds that
the datastore does not are phantom keys.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import resource
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import trio

from testbed import hostile
from testbed.apiserver import ApiServer, open_apiserver
from testbed.churn import api_client
from testbed.cluster import k8s_network_policy, v3
from testbed.fleet import PROTOCOLS, Agent, AgentSpec
from testbed.invariant import (
    DatastoreContents,
    NotConverged,
    Report,
    read_etcd,
    read_kubernetes,
    wait_converged,
)
from tests.etcd_server import EtcdClient, EtcdServer, run_etcd
from tests.fault_proxy import FaultProxy
from trio_typha.client.discovery import Connector, ReconnectPolicy, StaticDiscovery, parse_address
from trio_typha.client.typha import Connected, TyphaClient
from trio_typha.config import Config
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.base import Datastore
from trio_typha.datastore.etcd_errors import EtcdError
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.model.kinds import CALICO_CRD_GROUP
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate

log = logging.getLogger("tests.chaos")

CANARY = "canary"
CONVERGE_WITHIN = 30.0


# --- the fleet ------------------------------------------------------------------------------

#: Agents redial at once after a loss (then back off quickly): what is measured is how the
#: replica recovers, not how long the agents wait.
AGENT_POLICY = ReconnectPolicy(startup_delay_max=0.0, reconnect_delay_max=0.1,
                               backoff_initial=0.05, backoff_max=0.5)


def chaos_agent(name: str, protocol: str, port: int,
                arrivals: dict[str, float] | None) -> Agent:
    """A felix agent of the test bed's fleet on ``protocol``, dialing the replica's port;
    with ``arrivals``, it notes when each canary key first reached it."""
    connector = Connector(StaticDiscovery([parse_address(f"127.0.0.1:{port}")]),
                          AGENT_POLICY, random.Random(name))
    return Agent(AgentSpec(name, protocol), connector,
                 on_updates=partial(_note, arrivals) if arrivals is not None else None)


def _note(arrivals: dict[str, float], agent: Agent, updates: Sequence[SerializedUpdate]
          ) -> None:
    now = trio.current_time()
    for u in updates:
        if CANARY in u.key:
            arrivals.setdefault(u.key, now)


# --- the report -----------------------------------------------------------------------------

@dataclass
class ChaosReport:
    seed: int
    datastore: str = "etcd"
    faults_injected: int = 0
    faults_survived: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [injected, survived]
    keys_checked: int = 0
    keys_lost: int = 0
    phantom_keys: int = 0
    differing_values: int = 0
    churn_writes: int = 0
    max_rss_mib: float = 0.0
    canary_rate_before: float = 0.0  # canary updates/s at one agent of each protocol
    canary_rate_during_attacks: float = 0.0
    #: canary writes/s that reached etcd in the same windows (the writer shares the process)
    canary_written_before: float = 0.0
    canary_written_during_attacks: float = 0.0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    @classmethod
    def merged(cls, parts: list[ChaosReport]) -> ChaosReport:
        """One report for runs against several datastores (rates: weighted by nothing, the
        mean of the parts)."""
        out = cls(parts[0].seed, "+".join(p.datastore for p in parts))
        for p in parts:
            for name in ("faults_injected", "faults_survived", "keys_checked", "keys_lost",
                         "phantom_keys", "differing_values", "churn_writes", "seconds"):
                setattr(out, name, getattr(out, name) + getattr(p, name))
            for kind, (injected, survived) in p.by_kind.items():
                mine = out.by_kind.setdefault(f"{p.datastore}:{kind}", [0, 0])
                mine[0] += injected
                mine[1] += survived
            out.failures += p.failures
            out.max_rss_mib = max(out.max_rss_mib, p.max_rss_mib)
        for name in ("canary_rate_before", "canary_rate_during_attacks",
                     "canary_written_before", "canary_written_during_attacks"):
            setattr(out, name, sum(getattr(p, name) for p in parts) / len(parts))
        return out

    def lines(self) -> list[str]:
        return [
            f"{self.datastore}, seed {self.seed}: faults injected {self.faults_injected}, "
            f"survived {self.faults_survived}",
            "by kind: " + ", ".join(f"{k} {v[1]}/{v[0]}" for k, v in sorted(self.by_kind.items())),
            f"keys checked {self.keys_checked}, keys lost {self.keys_lost}, "
            f"phantom keys {self.phantom_keys}, differing values {self.differing_values}",
            f"churn writes {self.churn_writes}, max RSS {self.max_rss_mib:.0f} MiB, "
            f"{self.seconds:.0f} s",
            f"canary update rate: {self.canary_rate_before:.1f}/s before, "
            f"{self.canary_rate_during_attacks:.1f}/s during attacks (written: "
            f"{self.canary_written_before:.1f}/s and {self.canary_written_during_attacks:.1f}/s)",
            *(f"FAILED: {f}" for f in self.failures),
        ]


# --- the environment ------------------------------------------------------------------------

class Chaos:
    def __init__(self, backend: Backend, proxy: FaultProxy, rng: random.Random,
                 nursery: trio.Nursery, *, agents_per_protocol: int) -> None:
        self.backend = backend
        self.proxy = proxy
        #: Fault order and parameters: the same sequence for the same seed, however the
        #: run's timing goes (the writes, whose number depends on timing, use their own).
        self.rng = rng
        self.data_rng = random.Random(rng.random())
        self.nursery = nursery
        self.agents_per_protocol = agents_per_protocol
        self.port = 0
        self.daemon: Daemon | None = None
        self._replica_scope: trio.CancelScope | None = None
        self.agents: list[Agent] = []
        self.arrivals: dict[str, dict[str, float]] = {"typha": {}, "grpc": {}}
        self.churning = trio.Event()
        self.writes = 0
        self.canaries = 0
        self.canary_written: list[float] = []
        self.attack_windows: list[tuple[float, float]] = []
        self.cfg = load_config({}, config_file=None, overrides={
            **backend.replica_params(proxy.port),
            "ServerHost": "127.0.0.1", "ServerWorkers": "1", "WatchStallTimeoutSecs": "1",
            "ServerWriteTimeoutSecs": "3", "ServerHandshakeTimeoutSecs": "3",
            "ServerH2IdleTimeoutSecs": "3", "ShutdownTimeoutSecs": "2",
            "ShutdownConnectionDropIntervalMaxSecs": "0.01",
            "SnapshotReuseAgeSecs": "0.2", "LogSeverityScreen": "WARNING"})

    # -- the replica --

    async def start_replica(self) -> None:
        scope = trio.CancelScope()
        self._replica_scope = scope

        async def replica(task_status: trio.TaskStatus[Daemon]) -> None:
            with scope:
                async with self.backend.replica_datastore(self.proxy.port) as datastore:
                    await Daemon(self.cfg, datastore=datastore,
                                 listen_port=self.port).run(task_status=task_status)

        self.daemon = await self.nursery.start(replica)
        self.port = self.daemon.ports["server"]
        with trio.fail_after(CONVERGE_WITHIN):
            await self.daemon.wait_in_sync()

    def kill_replica(self) -> None:
        """Abrupt: every connection drops at once, nothing drains."""
        assert self._replica_scope is not None
        self._replica_scope.cancel()
        self.daemon = None

    async def stop_replica(self) -> None:
        """The SIGTERM path: graceful drain (Daemon.shutdown is what the handler calls)."""
        assert self.daemon is not None
        daemon = self.daemon
        daemon.shutdown()
        with trio.fail_after(30):
            while daemon.listening or len(daemon.connections):  # noqa: ASYNC110
                await trio.sleep(0.02)
        self.kill_replica()

    # -- the fleet --

    def start_fleet(self) -> None:
        for i in range(self.agents_per_protocol):
            for protocol in PROTOCOLS:
                arrivals = self.arrivals[protocol] if i == 0 else None
                agent = chaos_agent(f"{protocol}-{i}", protocol, self.port, arrivals)
                self.agents.append(agent)
                self.nursery.start_soon(agent.run)

    def holders(self) -> list[tuple[str, str, Any]]:
        """The replica's caches, and every agent's state once it is in sync (until then
        it holds nothing, as Felix applies nothing before its first in-sync)."""
        out: list[tuple[str, str, Any]] = []
        if self.daemon is not None:
            out += [(f"replica/{t}", t, self.daemon.pipelines[t]) for t in SYNCER_TYPES]
        out += [(a.spec.name, "felix", a.kvs if a.in_sync else {}) for a in self.agents]
        return out

    # -- datastore writes --

    async def churn(self) -> None:
        """Creates, updates and deletes policies and network sets at ~25 writes/s."""
        while True:
            await self.churning.wait()
            with contextlib.suppress(*self.backend.write_errors):
                await self.backend.write(self.data_rng)
                self.writes += 1
            await trio.sleep(0.04)

    async def canary_writer(self) -> None:
        while True:
            await self.churning.wait()
            with contextlib.suppress(*self.backend.write_errors):
                await self.backend.canary(f"{CANARY}-{self.canaries}")
                self.canaries += 1
                self.canary_written.append(trio.current_time())
            await trio.sleep(0.1)

    @staticmethod
    def rate(times: list[float], windows: list[tuple[float, float]]) -> float:
        span = sum(b - a for a, b in windows)
        return sum(any(a <= t < b for a, b in windows) for t in times) / span if span else 0.0

    def canary_rate(self, windows: list[tuple[float, float]]) -> float:
        """Canary keys first seen per second inside ``windows``, per agent (average of the
        gob and the gRPC one)."""
        span = sum(b - a for a, b in windows)
        if span <= 0:
            return 0.0
        seen = [sum(any(a <= t < b for a, b in windows) for t in arr.values())
                for arr in self.arrivals.values()]
        return sum(seen) / len(seen) / span

    async def converge(self) -> list[Report]:
        return await wait_converged(self.backend.read, self.holders,
                                    within=CONVERGE_WITHIN, interval=0.1)


# --- the datastores -------------------------------------------------------------------------

class Backend(Protocol):
    """What the run needs from a datastore: its port (behind the proxy), a replica's
    datastore, writes, a fresh read of its contents, and its own faults."""

    name: str
    upstream_port: int
    write_errors: tuple[type[BaseException], ...]
    faults: dict[str, Fault]

    def replica_params(self, proxy_port: int) -> dict[str, str]: ...

    def replica_datastore(self, proxy_port: int
                          ) -> contextlib.AbstractAsyncContextManager[Datastore | None]: ...

    async def write(self, rng: random.Random) -> None: ...

    async def canary(self, name: str) -> None: ...

    def read(self) -> DatastoreContents: ...


class EtcdBackend:
    """A real etcd; the replica watches it over its gRPC API through the proxy."""

    name = "etcd"
    write_errors = (EtcdError,)

    def __init__(self, etcd: EtcdServer, client: EtcdClient) -> None:
        self.etcd = etcd
        self.client = client
        self.upstream_port = etcd.client_port
        self.faults = {"etcd_sigkill": etcd_sigkill, "watch_blackhole": watch_blackhole,
                       "cut_and_compact": cut_and_compact}

    def replica_params(self, proxy_port: int) -> dict[str, str]:
        return {"DatastoreType": "etcdv3", "EtcdEndpoints": f"http://127.0.0.1:{proxy_port}"}

    @contextlib.asynccontextmanager
    async def replica_datastore(self, proxy_port: int) -> AsyncIterator[Datastore | None]:
        yield None  # the daemon builds it from EtcdEndpoints

    async def write(self, rng: random.Random) -> None:
        c = self.client
        i = rng.randrange(40)
        if rng.random() < 0.25:
            await c.delete(f"/calico/resources/v3/projectcalico.org/globalnetworksets/gns-{i}")
        elif rng.random() < 0.8:
            nets = [f"10.{i}.{rng.randrange(256)}.0/24" for _ in range(rng.randrange(1, 4))]
            await c.put_resource(v3("GlobalNetworkSet", f"gns-{i}", {"nets": nets},
                                     labels={"gen": str(rng.randrange(1000))}))
        else:
            await c.put_resource(v3("GlobalNetworkPolicy", f"gnp-{i % 8}", {
                "order": rng.randrange(1000), "selector": f"gen == '{rng.randrange(9)}'",
                "types": ["Ingress"], "ingress": [{"action": "Allow"}]}))

    async def canary(self, name: str) -> None:
        await self.client.put_resource(v3("GlobalNetworkSet", name, {"nets": ["10.255.0.1/32"]}))

    def read(self) -> DatastoreContents:
        return read_etcd(f"http://127.0.0.1:{self.etcd.client_port}")


class KddBackend:
    """The test bed's Kubernetes API server (real HTTP, the official client reads it); the
    replica list-watches it through the proxy."""

    name = "kdd"
    write_errors = ()

    def __init__(self, srv: ApiServer, workdir: Path, api_client: Any) -> None:
        self.srv = srv
        self.workdir = workdir
        self.api_client = api_client
        self.upstream_port = int(srv.url.rsplit(":", 1)[1])
        self.faults = {"api_drop_watches": api_drop_watches, "api_410": api_gone,
                       "api_500": api_500, "api_429": api_429,
                       "watch_blackhole": watch_blackhole}

    def replica_params(self, proxy_port: int) -> dict[str, str]:
        return {"DatastoreType": "kubernetes"}

    @contextlib.asynccontextmanager
    async def replica_datastore(self, proxy_port: int) -> AsyncIterator[Datastore | None]:
        doc = self.srv.kubeconfig()
        doc["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{proxy_port}"
        path = self.workdir / "proxied-kubeconfig"
        path.write_text(json.dumps(doc))  # YAML is a superset of JSON
        config = load_kube_client_config(Config(kubeconfig=str(path),
                                                calico_api_group=f"{CALICO_CRD_GROUP}/v1"))
        async with open_kubernetes_datastore(config, tuning=WatchTuning(
                backoff_initial=0.05, backoff_max=1.0, min_watch_interval=0.05,
                stall_deadline=1.0)) as ds:
            yield ds

    async def write(self, rng: random.Random) -> None:
        i = rng.randrange(40)
        store = self.srv.store
        if rng.random() < 0.25:
            if store.get(K.K8S_NETWORK_POLICY, "default", f"np-{i}") is not None:
                store.delete(K.K8S_NETWORK_POLICY, "default", f"np-{i}")
        else:
            store.put(K.K8S_NETWORK_POLICY, k8s_network_policy(f"np-{i}", port=rng.randrange(1, 65535)))

    async def canary(self, name: str) -> None:
        self.srv.store.put(K.K8S_NETWORK_POLICY, k8s_network_policy(name, port=443))

    def read(self) -> DatastoreContents:
        return read_kubernetes(self.api_client, calico_group=CALICO_CRD_GROUP)


# --- the faults -----------------------------------------------------------------------------

Fault = Callable[[Chaos], Awaitable[None]]


async def etcd_sigkill(env: Chaos) -> None:
    """etcd SIGKILLed under churn, restarted on the same data a moment later."""
    etcd = env.backend.etcd  # type: ignore[attr-defined]
    await etcd.kill()
    await trio.sleep(env.rng.uniform(0.2, 1.0))
    await etcd.start()
    await trio.sleep(0.5)


async def watch_blackhole(env: Chaos) -> None:
    """Every open datastore connection goes silent (server -> client) while churn goes on;
    new connections work: the replica must notice the silent watch and resume."""
    env.proxy.blackhole()
    await trio.sleep(env.rng.uniform(1.5, 3.0))
    env.proxy.heal()


async def cut_and_compact(env: Chaos) -> None:
    """The replica's connection to etcd is cut; meanwhile etcd changes and is compacted past
    the watcher's revision, so the watch cannot resume: it must relist."""
    env.proxy.cut()
    await trio.sleep(0.3)
    backend = env.backend
    assert isinstance(backend, EtcdBackend)
    for _ in range(10):
        await backend.write(env.data_rng)
        env.writes += 1
    await backend.client.compact(await backend.client.revision())
    await trio.sleep(env.rng.uniform(0.2, 0.8))
    env.proxy.heal()


async def replica_kill(env: Chaos) -> None:
    """The replica is killed with agents connected, and restarted on the same port."""
    env.kill_replica()
    await trio.sleep(env.rng.uniform(0.1, 0.5))
    await env.start_replica()


async def sigterm_snapshot_storm(env: Chaos) -> None:
    """Many agents connect at once (a snapshot storm); the replica is told to shut down in
    the middle of it, drains, and is started again."""
    async with trio.open_nursery() as storm:
        for i in range(20):
            agent = chaos_agent(f"storm-{i}", "typha" if i % 2 else "grpc", env.port, None)
            storm.start_soon(agent.run)
        await trio.sleep(env.rng.uniform(0.05, 0.3))
        await env.stop_replica()
        storm.cancel_scope.cancel()
    await env.start_replica()


async def stalled_readers(env: Chaos) -> None:
    """A gob client and an HTTP/2 client stop reading (the latter grants no window) while
    churn goes on: both stay parked, bounded, and nobody else waits for them."""
    stuck = TyphaClient("127.0.0.1", env.port, syncer_type="felix", hostname="stuck",
                        compression=False, read_timeout=600)
    h2 = None
    try:
        with trio.fail_after(10):
            async for event in stuck:
                if isinstance(event, Connected):
                    break  # ... and never reads again
        h2 = await trio.open_tcp_stream("127.0.0.1", env.port)
        await h2.send_all(hostile.h2_stalled_reader())
        await trio.sleep(env.rng.uniform(1.5, 3.0))
    finally:
        await stuck.aclose()
        if h2 is not None:
            await h2.aclose()


async def adversarial_peers(env: Chaos) -> None:
    """Every HTTP/2 flood, idle and silent peers, TLS and HTTP/1.x on the plain port, at
    once, while the fleet is served."""
    start = trio.current_time()
    with trio.move_on_after(env.rng.uniform(1.5, 2.5)):
        async with trio.open_nursery() as nursery:
            for kind in hostile.Attack:
                nursery.start_soon(_attack_loop, env, kind)
            nursery.start_soon(hostile.h2_idle, "127.0.0.1", env.port)
            nursery.start_soon(hostile.raw_bytes, "127.0.0.1", env.port,
                               hostile.tls_client_hello())
            nursery.start_soon(hostile.raw_bytes, "127.0.0.1", env.port, hostile.HTTP1_REQUEST)
    env.attack_windows.append((start, trio.current_time()))


async def _attack_loop(env: Chaos, kind: hostile.Attack) -> None:
    while True:
        with contextlib.suppress(OSError, trio.BrokenResourceError):
            await hostile.h2_flood("127.0.0.1", env.port, kind, seconds=5)


async def api_drop_watches(env: Chaos) -> None:
    """The API server ends every watch abruptly (a restart), twice in a row."""
    srv = env.backend.srv  # type: ignore[attr-defined]
    for _ in range(2):
        srv.drop_watches(abrupt=True)
        await trio.sleep(env.rng.uniform(0.2, 0.6))


async def api_gone(env: Chaos) -> None:
    """The API server compacts its history and drops the watches: resuming answers 410
    Gone, so the replica must relist (sending only the differences)."""
    srv = env.backend.srv  # type: ignore[attr-defined]
    await trio.sleep(env.rng.uniform(0.2, 0.5))  # some churn first
    srv.compact()
    srv.drop_watches(abrupt=env.rng.random() < 0.5)
    await trio.sleep(0.5)


async def api_500(env: Chaos) -> None:
    """Lists and watches answer 500 for a while (the connections are cut first)."""
    env.proxy.inject(500, "InternalError")
    await trio.sleep(env.rng.uniform(0.5, 1.5))
    env.proxy.heal()


async def api_429(env: Chaos) -> None:
    """Requests answer 429 Too Many Requests with Retry-After: 1 for a while."""
    env.proxy.inject(429, "TooManyRequests", retry_after=1)
    await trio.sleep(env.rng.uniform(0.5, 1.5))
    env.proxy.heal()


#: Faults that need no particular datastore.
FAULTS: dict[str, Fault] = {
    "replica_kill": replica_kill,
    "sigterm_snapshot_storm": sigterm_snapshot_storm,
    "stalled_readers": stalled_readers,
    "adversarial_peers": adversarial_peers,
}


# --- the run --------------------------------------------------------------------------------

async def run(faults: int, seed: int, *, datastore: str = "etcd",
              agents_per_protocol: int = 3, workdir: Path | None = None) -> ChaosReport:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="chaos-"))
    async with contextlib.AsyncExitStack() as stack:
        backend: Backend
        if datastore == "etcd":
            etcd = await stack.enter_async_context(run_etcd(workdir))
            client = await stack.enter_async_context(etcd.client())
            backend = EtcdBackend(etcd, client)
        else:
            srv = await stack.enter_async_context(
                open_apiserver(calico_groups=(CALICO_CRD_GROUP,)))
            api = stack.enter_context(api_client(srv.kubeconfig_path(workdir)))
            backend = KddBackend(srv, workdir, api)
        return await _run(backend, faults, seed, agents_per_protocol)


async def _run(backend: Backend, faults: int, seed: int, agents_per_protocol: int
               ) -> ChaosReport:
    rng = random.Random(seed)
    report = ChaosReport(seed, backend.name)
    t0 = time.monotonic()
    catalogue = {**backend.faults, **FAULTS}
    async with trio.open_nursery() as nursery:
        proxy = FaultProxy(backend.upstream_port)
        await nursery.start(proxy.serve)
        env = Chaos(backend, proxy, rng, nursery, agents_per_protocol=agents_per_protocol)
        for _ in range(40):
            await backend.write(env.data_rng)
        await env.start_replica()
        env.start_fleet()
        nursery.start_soon(env.churn)
        nursery.start_soon(env.canary_writer)
        await env.converge()  # before any churn: the fleet has its first snapshot
        env.churning.set()
        baseline = (trio.current_time(), trio.current_time() + 2.0)
        await trio.sleep(2.0)
        kinds = list(catalogue)
        for n in range(faults):
            # Every kind once in each round, in a seeded order.
            if n % len(kinds) == 0:
                rng.shuffle(kinds)
            kind = kinds[n % len(kinds)]
            counts = report.by_kind.setdefault(kind, [0, 0])
            counts[0] += 1
            report.faults_injected += 1
            env.churning.set()
            await catalogue[kind](env)
            env.churning = trio.Event()  # pause churn: the datastore must go quiet to judge
            try:
                reports = await env.converge()
            except NotConverged as exc:
                _tally(report, exc.reports, failed=True)
                report.failures.append(f"fault {n} {kind}: {str(exc)[:2000]}")
                log.error("fault %d (%s) not survived:\n%s", n, kind, exc)
            else:
                _tally(report, reports, failed=False)
                report.faults_survived += 1
                counts[1] += 1
            report.max_rss_mib = max(report.max_rss_mib, _rss_peak_mib())
        report.churn_writes = env.writes
        report.canary_rate_before = env.canary_rate([baseline])
        report.canary_rate_during_attacks = env.canary_rate(env.attack_windows)
        report.canary_written_before = env.rate(env.canary_written, [baseline])
        report.canary_written_during_attacks = env.rate(env.canary_written, env.attack_windows)
        nursery.cancel_scope.cancel()
    report.seconds = time.monotonic() - t0
    return report


def _tally(report: ChaosReport, reports: list[Report], *, failed: bool) -> None:
    for r in reports:
        report.keys_checked += r.expected_keys
        if failed:
            report.keys_lost += r.missing
            report.phantom_keys += r.extra
            report.differing_values += r.differing


def _rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def print_report(report: ChaosReport, *, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print("\n".join(report.lines()))


async def run_both(faults: int, seed: int, *, agents_per_protocol: int = 3,
                   workdir: Path | None = None) -> ChaosReport:
    """Half the faults against etcd, the rest against the Kubernetes API; one report."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="chaos-"))
    parts = []
    for datastore, n in (("etcd", faults // 2), ("kdd", faults - faults // 2)):
        sub = workdir / datastore
        sub.mkdir(exist_ok=True)
        parts.append(await run(n, seed, datastore=datastore,
                               agents_per_protocol=agents_per_protocol, workdir=sub))
    return ChaosReport.merged(parts)


def main(faults: int, seed: int, *, datastore: str, agents: int, as_json: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        if datastore == "both":
            report = trio.run(lambda: run_both(faults, seed, agents_per_protocol=agents,
                                               workdir=Path(tmp)))
        else:
            report = trio.run(lambda: run(faults, seed, datastore=datastore,
                                          agents_per_protocol=agents, workdir=Path(tmp)))
    print_report(report, as_json=as_json)
    ok = (report.faults_survived == report.faults_injected and not report.keys_lost
          and not report.phantom_keys and not report.differing_values)
    return 0 if ok else 1
