"""A fleet of simulated node agents: Typha-protocol and gRPC clients that behave like Felix.

Each :class:`Agent` discovers Typha (``trio_typha.client.discovery``), connects (plain or
mutual TLS, :class:`ClientTLS`), keeps a full copy of its syncer's key/value state (Felix's
semantics: a new connection's snapshot replaces the old state once it is in sync), answers
pings, reconnects after a drop or a failure as its
:class:`~trio_typha.client.discovery.ReconnectPolicy` says (or, ``reconnect=False``, stops at
its first loss), and records what a dashboard or a
verdict needs: time to first in-sync, updates received, write-to-receipt delay of churned
pods (their ``churn-ts`` label holds the wall-clock nanoseconds of the write), connections.
Hooks see every delay, every receipt in sync and every batch of updates.

This is the one Python fleet: the demo, the chaos suite, the tests and the benchmarks
(``python -m testbed.fleet_bench``, the runner's contract the Go fleet also speaks) run it.
Three ways to run agents:

* one at a time: ``Agent(spec, connector)`` and ``nursery.start_soon(agent.run)``;
* many in this process: ``AgentGroup(specs, discovery, policy)`` and
  ``await nursery.start(group.run)``;
* over several processes (to use the cores): ``async with open_fleet(FleetConfig(...)) as
  fleet`` runs ``python -m testbed.fleet`` workers, each an :class:`AgentGroup`, and merges
  their once-a-second reports into ``fleet.stats``; ``await fleet.compare(expected)`` has
  every worker diff every agent's state against the expected state.

The workers speak JSON lines: the config as the first stdin line, then commands on stdin
(``{"cmd": "compare", "path": ...}``), reports on stdout (``{"event": "stats"|"compare"}``);
stdin closing stops the worker.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from trio_typha.cache.digest import KeyTree
from trio_typha.client import grpc as g
from trio_typha.client.discovery import (
    Connector,
    Discovery,
    EndpointSliceDiscovery,
    ReconnectPolicy,
    SrvDiscovery,
    StaticDiscovery,
    TyphaAddress,
    parse_address,
)
from trio_typha.client.typha import (
    Connected,
    Disconnected,
    KVsReceived,
    SyncStatusReceived,
    TyphaClient,
)
from trio_typha.client.view import SyncView
from trio_typha.grpcwire.status import GrpcError
from trio_typha.model.kv import SerializedUpdate, SyncStatus

if TYPE_CHECKING:
    from .invariant import ExpectedKV
from .jsonlines import JsonLines, send_json

log = logging.getLogger("testbed.fleet")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROTOCOLS = ("typha", "grpc")
#: The churn generators stamp pods with the wall clock at the write (label ``churn-ts``).
CHURN_STAMP = re.compile(rb'"churn-ts":"(\d+)"')


def churn_delay(value: bytes | None, now_ns: int) -> float | None:
    """Seconds from the churn's write of ``value`` to ``now_ns`` (None: no stamp)."""
    m = CHURN_STAMP.search(value or b"")
    return (now_ns - int(m.group(1))) / 1e9 if m else None


# -- what to run -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str  # hostname sent in the hello, and the node it runs on (local-first discovery)
    protocol: str  # "typha" or "grpc"
    syncer: str = "felix"


@dataclass(frozen=True, slots=True)
class DiscoverySpec:
    """How agents find Typha: static addresses, EndpointSlices, or SRV (JSON-serializable)."""

    static: tuple[str, ...] = ()
    kubeconfig: str = ""  # EndpointSlices via this kubeconfig
    service: str = "calico-typha"
    namespace: str = "kube-system"
    srv_name: str = ""  # DNS SRV name, resolved at ``dns_server``
    dns_server: str = ""  # host:port

    def describe(self) -> str:
        if self.static:
            return "static " + ",".join(self.static)
        if self.srv_name:
            return f"SRV {self.srv_name} @ {self.dns_server or 'resolv.conf'}"
        return f"EndpointSlices of {self.namespace}/{self.service}"


def protocol_mix(n: int, grpc_share: float) -> list[str]:
    """``n`` protocols with ``grpc_share`` of them gRPC, interleaved evenly."""
    if not 0 <= grpc_share <= 1:
        raise ValueError(f"gRPC share must be in [0, 1], got {grpc_share}")
    return ["grpc" if int((i + 1) * grpc_share) > int(i * grpc_share) else "typha"
            for i in range(n)]


def agent_specs(n: int, *, grpc_share: float = 0.5,
                syncers: Sequence[str] = ("felix",)) -> list[AgentSpec]:
    """Agent ``i`` is node ``node-%04d`` (the synthetic clusters' node names)."""
    return [AgentSpec(f"node-{i:04d}", proto, syncers[i % len(syncers)])
            for i, proto in enumerate(protocol_mix(n, grpc_share))]


@dataclass(frozen=True, slots=True)
class ClientTLS:
    """Mutual TLS for agents, as file paths (JSON-serializable, for the workers)."""

    ca_file: str
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""  # a name the server's certificate must carry; "" checks none

    def context(self) -> ssl.SSLContext:
        """A new context: the gRPC dial sets ALPN on it, so each connection has its own."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        ctx.check_hostname = bool(self.server_name)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file or None)
        return ctx


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """A client fleet's mutual TLS flags (``bench.fanout.BenchPKI.client_flags`` passes them)."""
    parser.add_argument("--ca", help="CA file: mutual TLS (with --cert, --key, --server-name)")
    parser.add_argument("--cert", default="")
    parser.add_argument("--key", default="")
    parser.add_argument("--server-name", default="")


def tls_from_arguments(args: argparse.Namespace) -> ClientTLS | None:
    return ClientTLS(args.ca, args.cert, args.key, args.server_name) if args.ca else None


# -- one agent ----------------------------------------------------------------------------

class _Lost(Exception):
    """The connection ended; ``established`` says whether it got as far as the handshake."""

    def __init__(self, reason: str, *, established: bool) -> None:
        super().__init__(reason)
        self.established = established


class Agent:
    """One simulated node agent (see the module docstring)."""

    def __init__(self, spec: AgentSpec, connector: Connector, *,
                 tls: ClientTLS | None = None, read_timeout: float = 30.0,
                 reconnect: bool = True,
                 on_delay: Callable[[float], None] | None = None,
                 on_receipt: Callable[[str, float], None] | None = None,
                 on_updates: Callable[[Agent, Sequence[SerializedUpdate]], None] | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.spec = spec
        self.connector = connector
        self.tls = tls
        self.read_timeout = read_timeout
        self.reconnect = reconnect  # False: the first loss ends run() (last_error says why)
        self.kvs: dict[str, SerializedUpdate] = {}  # the state as of the last in-sync
        self.status = SyncStatus.WAIT_FOR_DATASTORE
        self.address: TyphaAddress | None = None  # connected to, None while not
        self.started_at = 0.0
        self.first_in_sync: float | None = None  # seconds after start
        self.updates = 0
        self.connects: list[float] = []  # trio time of each established connection
        #: the address of each connection established after an earlier one was lost
        self.reconnected_to: list[str] = []
        self.failures = 0
        self.drops: list[float] = []  # trio time each established connection was lost
        self.last_error = ""
        self._on_delay = on_delay
        self._on_change = on_change or (lambda: None)
        self._on_receipt = on_receipt
        self._on_updates = on_updates
        #: A gRPC agent's copy, kept across streams so that it resumes instead of taking
        #: a snapshot; how each stream started and the bytes its start cost.
        self.view = SyncView(tree=KeyTree())
        self.starts: Counter[str] = Counter()
        self.start_bytes: list[tuple[str, int]] = []

    @property
    def in_sync(self) -> bool:
        return self.status is SyncStatus.IN_SYNC

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        self.started_at = trio.current_time()
        task_status.started()
        while True:
            address = await self.connector.next_address()
            try:
                if self.spec.protocol == "grpc":
                    await self._grpc(address)
                else:
                    await self._typha(address)
                lost = _Lost("server ended the stream", established=True)
            except _Lost as exc:
                lost = exc
            self.address = None
            self.status = SyncStatus.WAIT_FOR_DATASTORE
            self.last_error = str(lost)
            if lost.established:
                self.drops.append(trio.current_time())
                self.connector.dropped()
            else:
                self.failures += 1
                self.connector.failed()
            self._on_change()
            if not self.reconnect:
                return

    def _established(self, address: TyphaAddress) -> None:
        self.address = address
        if self.connects:
            self.reconnected_to.append(address.addr)
        self.connects.append(trio.current_time())
        self.connector.connected()
        self._on_change()

    def _synced(self, kvs: dict[str, SerializedUpdate]) -> None:
        self.kvs = kvs
        self.status = SyncStatus.IN_SYNC
        if self.first_in_sync is None:
            self.first_in_sync = trio.current_time() - self.started_at
        self._on_change()

    def _batch(self, updates: Sequence[SerializedUpdate]) -> None:
        """Every batch: counted, shown to the hook, and measured once in sync."""
        self.updates += len(updates)
        if self._on_updates is not None:
            self._on_updates(self, updates)
        delay, receipt = self._on_delay, self._on_receipt
        if not self.in_sync or (delay is None and receipt is None):
            return
        now = time.time_ns()
        for u in updates:
            if delay is not None and (seconds := churn_delay(u.value, now)) is not None:
                delay(seconds)
            if receipt is not None and u.revision:
                receipt(u.revision, now / 1e9)

    async def _typha(self, address: TyphaAddress) -> None:
        tls = self.tls
        client = TyphaClient(address.host, address.port, syncer_type=self.spec.syncer,
                             hostname=self.spec.name, info="trio-typha fleet agent",
                             read_timeout=self.read_timeout,
                             ssl_context=tls.context() if tls else None,
                             server_hostname=tls.server_name or None if tls else None)
        established = False
        async with client:
            async for event in client:
                if isinstance(event, Connected):
                    established = True
                    self._established(address)
                elif isinstance(event, KVsReceived):
                    self._batch(event.updates)
                elif isinstance(event, SyncStatusReceived):
                    if event.status is SyncStatus.IN_SYNC:
                        self._synced(client.kvs)  # the client keeps the map; share it
                    elif not self.in_sync:
                        self.status = event.status
                elif isinstance(event, Disconnected):
                    raise _Lost(event.reason, established=established)

    async def _grpc(self, address: TyphaAddress) -> None:
        established = False
        view = self.view
        method = ""
        try:
            tls = self.tls
            with trio.fail_after(10):
                stream = g.CountingStream(await g.open_stream(
                    address.host, address.port, ssl_context=tls.context() if tls else None,
                    server_hostname=tls.server_name or None if tls else None))
            async with stream:
                async for ev in g.sync(stream, self.spec.syncer, hostname=self.spec.name,
                                       info="trio-typha fleet agent",
                                       resume=g.resume_of(view)):
                    g.apply_event(view, ev)
                    if isinstance(ev, g.Header):
                        established = True
                        method = ev.resume
                        self._established(address)
                    elif isinstance(ev, g.Updates):
                        self._batch(ev.updates)
                    elif isinstance(ev, g.Finished | g.StatusChanged):
                        if isinstance(ev, g.Finished):
                            self.starts[method] += 1
                            self.start_bytes.append((method, stream.received))
                        if ev.status is SyncStatus.IN_SYNC:
                            self._synced(view.kvs)
                        elif not self.in_sync:
                            self.status = ev.status
        except (GrpcError, OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                trio.TooSlowError) as exc:
            raise _Lost(str(exc) or type(exc).__name__, established=established) from None


def _bytes_by_method(agents: Sequence[Agent]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for a in agents:
        for method, nbytes in a.start_bytes:
            out[method] += nbytes
    return dict(out)


# -- many agents in one process ------------------------------------------------------------

def make_discovery(spec: DiscoverySpec, agent: AgentSpec, rng: random.Random,
                   kube_api: Any = None) -> Discovery:
    if spec.static:
        addrs = [parse_address(a) for a in spec.static]
        rng.shuffle(addrs)
        return StaticDiscovery(addrs)
    if spec.srv_name:
        server = parse_address(spec.dns_server, 53) if spec.dns_server else None
        return SrvDiscovery(spec.srv_name, server=(server.host, server.port) if server else None,
                            rng=rng)
    return EndpointSliceDiscovery(kube_api, service=spec.service, namespace=spec.namespace,
                                  node_name=agent.name, rng=rng)


class AgentGroup:
    """Agents in this process; ``stats()`` summarizes them, ``drain_delays()`` the delays."""

    def __init__(self, specs: Sequence[AgentSpec], discovery: DiscoverySpec,
                 policy: ReconnectPolicy, *, seed: int = 0, tls: ClientTLS | None = None,
                 read_timeout: float = 30.0, reconnect: bool = True, receipts: bool = True,
                 delays: bool = True, on_updates: Callable[[Agent, Sequence[SerializedUpdate]], None] | None = None
                 ) -> None:
        self.discovery = discovery
        self.policy = policy
        self.tls = tls
        self.read_timeout = read_timeout
        self.reconnect = reconnect
        self.receipts = receipts  # False: drain_receipts() has nothing (a benchmark's agents)
        self.measure_delays = delays  # False: no churn-stamp parsing (in-process benchmarks)
        self._on_updates = on_updates
        self._delays: list[float] = []
        self._receipts: list[tuple[str, float, str]] = []
        self._seed = seed
        self.specs = list(specs)
        self.agents: list[Agent] = []
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[AgentGroup] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        kube = None
        if not self.discovery.static and not self.discovery.srv_name:
            from trio_typha.config import Config
            from trio_typha.config_sources import environment_config
            from trio_typha.datastore.k8s_api import KubeApi
            from trio_typha.datastore.k8s_config import load_kube_client_config
            settings = (Config(kubeconfig=self.discovery.kubeconfig)
                        if self.discovery.kubeconfig else environment_config())
            kube = KubeApi(load_kube_client_config(settings), request_timeout=10.0)
        try:
            async with trio.open_nursery() as nursery:
                for i, spec in enumerate(self.specs):
                    rng = random.Random(f"{self._seed}/{spec.name}/{i}")
                    connector = Connector(make_discovery(self.discovery, spec, rng, kube),
                                          self.policy, rng)
                    agent = Agent(spec, connector, tls=self.tls,
                                  read_timeout=self.read_timeout,
                                  reconnect=self.reconnect,
                                  on_delay=self._delays.append if self.measure_delays else None,
                                  on_receipt=partial(self._receipt, spec.protocol)
                                  if self.receipts else None,
                                  on_updates=self._on_updates, on_change=self._notify)
                    self.agents.append(agent)
                # start_soon, not start: a busy fleet (agents decoding snapshots) would make
                # each start wait a whole scheduling round, and the last agent minutes late.
                for agent in self.agents:
                    nursery.start_soon(agent.run)
                task_status.started(self)
        finally:
            if kube is not None:
                with trio.CancelScope(shield=True):
                    await kube.aclose()

    def _receipt(self, protocol: str, revision: str, at: float) -> None:
        self._receipts.append((revision, round(at, 4), protocol))

    def drain_receipts(self) -> list[tuple[str, float, str]]:
        """(revision, wall-clock second, protocol) of every update received in sync since
        the last call."""
        out = self._receipts[:]
        self._receipts.clear()
        return out

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, predicate: Callable[[AgentGroup], bool]) -> None:
        """Return once ``predicate(self)`` holds (checked after every connect, sync, loss)."""
        while not predicate(self):
            await self._changed.wait()

    @property
    def delays(self) -> list[float]:
        """Delays measured since the last :meth:`drain_delays` (read-only)."""
        return self._delays

    def drain_delays(self) -> list[float]:
        out = self._delays[:]
        self._delays.clear()  # in place: every agent holds this list's append
        return out

    def stats(self) -> dict[str, Any]:
        by_addr = Counter(a.address.addr for a in self.agents if a.address is not None)
        by_proto = Counter(a.spec.protocol for a in self.agents if a.address is not None)
        by_syncer = Counter(a.spec.syncer for a in self.agents if a.address is not None)
        return {
            "agents": len(self.agents),
            "in_sync": sum(a.in_sync for a in self.agents),
            "connected": sum(by_addr.values()),
            "by_address": dict(by_addr), "by_protocol": dict(by_proto),
            "by_syncer": dict(by_syncer),
            "updates": sum(a.updates for a in self.agents),
            "connections": sum(len(a.connects) for a in self.agents),
            "reconnects_by_address": dict(Counter(
                addr for a in self.agents for addr in a.reconnected_to)),
            "failures": sum(a.failures for a in self.agents),
            # gRPC agents: how their streams started, and the bytes each start cost.
            "starts_by_method": dict(sum((a.starts for a in self.agents), Counter())),
            "start_bytes_by_method": _bytes_by_method(self.agents),
            "first_in_sync": [a.first_in_sync for a in self.agents
                              if a.first_in_sync is not None],
        }

    def compare(self, expected: Mapping[str, Mapping[str, ExpectedKV]]) -> dict[str, Any]:
        """Every agent's state against ``expected`` (syncer type -> the invariant checker's
        expected state): agents that are not in sync or differ in any key."""
        # Imported here: the checker (and the model validation it loads) takes half a second
        # to import, which every benchmark agent process would pay at start-up.
        from . import invariant

        bad: list[dict[str, Any]] = []
        keys = 0
        for a in self.agents:
            want = expected.get(a.spec.syncer, {})
            keys += len(want)
            report = invariant.compare(want, invariant.state_of(a.kvs),
                                       syncer_type=a.spec.syncer, subject=a.spec.name)
            if not a.in_sync or not report.ok:
                bad.append({"agent": a.spec.name, "protocol": a.spec.protocol,
                            "syncer": a.spec.syncer, "in_sync": a.in_sync,
                            "missing": report.missing, "extra": report.extra,
                            "differing": report.differing,
                            "first": [str(d) for d in report.differences[:3]]})
        return {"agents": len(self.agents), "keys_checked": keys, "mismatched": bad}


# -- the worker process ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FleetConfig:
    agents: int
    discovery: DiscoverySpec
    grpc_share: float = 0.5
    syncers: tuple[str, ...] = ("felix",)
    policy: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    processes: int = 2
    report_interval: float = 1.0
    seed: int = 0
    tls: ClientTLS | None = None

    def worker_config(self, index: int) -> dict[str, Any]:
        specs = agent_specs(self.agents, grpc_share=self.grpc_share, syncers=self.syncers)
        mine = specs[index::self.processes]
        return {"specs": [asdict(s) for s in mine], "discovery": asdict(self.discovery),
                "policy": asdict(self.policy), "report_interval": self.report_interval,
                "seed": self.seed, "worker": index,
                "tls": asdict(self.tls) if self.tls else None}


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def load_expected(path: str) -> dict[str, dict[str, ExpectedKV]]:
    """Read what :meth:`Fleet.compare` wrote: syncer -> key -> [value, revision, source]."""
    from .invariant import ExpectedKV

    with open(path) as fh:
        doc = json.load(fh)
    return {syncer: {k: ExpectedKV(v.encode(), rev, src) for k, (v, rev, src) in kvs.items()}
            for syncer, kvs in doc.items()}


async def _worker() -> None:
    lines = JsonLines(trio.lowlevel.FdStream(os.dup(0)))
    config = await lines.next()
    if config is None:
        return
    d = config["discovery"]
    group = AgentGroup([AgentSpec(**s) for s in config["specs"]],
                       DiscoverySpec(**{**d, "static": tuple(d["static"])}),
                       ReconnectPolicy(**config["policy"]), seed=config["seed"],
                       tls=ClientTLS(**config["tls"]) if config.get("tls") else None)
    wall_offset = time.time() - trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(group.run)

        async def report(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                         ) -> None:
            task_status.started()
            seen = 0
            while True:
                stats = group.stats()
                connects = sorted(t for a in group.agents for t in a.connects)
                stats.update(event="stats", worker=config["worker"], time=time.time(),
                             delays=group.drain_delays(), receipts=group.drain_receipts(),
                             connect_times=[round(t + wall_offset, 3) for t in connects[seen:]])
                seen = len(connects)
                _emit(stats)
                await trio.sleep(config["report_interval"])

        await nursery.start(report)
        while (cmd := await lines.next()) is not None:
            if cmd.get("cmd") == "compare":
                result = group.compare(load_expected(cmd["path"]))
                _emit({"event": "compare", "worker": config["worker"], **result})
        nursery.cancel_scope.cancel()


# -- the controller side -------------------------------------------------------------------

@dataclass
class FleetStats:
    """The merged latest reports of every worker (delays and connect times accumulate)."""

    agents: int = 0
    in_sync: int = 0
    connected: int = 0
    updates: int = 0
    connections: int = 0
    failures: int = 0
    by_address: dict[str, int] = field(default_factory=dict)
    #: connections agents made to each address after losing an earlier one
    reconnects_by_address: dict[str, int] = field(default_factory=dict)
    by_protocol: dict[str, int] = field(default_factory=dict)
    by_syncer: dict[str, int] = field(default_factory=dict)
    #: gRPC agents: streams by how they started (snapshot, position, digest), and the
    #: bytes those starts cost
    starts_by_method: dict[str, int] = field(default_factory=dict)
    start_bytes_by_method: dict[str, int] = field(default_factory=dict)
    first_in_sync: list[float] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    connect_times: list[float] = field(default_factory=list)


class Fleet:
    """Handle on running worker processes (made by :func:`open_fleet`)."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self._latest: dict[int, dict[str, Any]] = {}
        self.delays: list[float] = []
        self.connect_times: list[float] = []
        #: (revision, wall-clock second, protocol) of every update an agent got in sync
        self.receipts: list[tuple[str, float, str]] = []
        self._procs: list[trio.Process] = []
        self._compare: dict[int, dict[str, Any]] = {}
        self._compare_done: trio.Event | None = None
        self._changed = trio.Event()
        self.reports = 0
        self.closing = False

    @property
    def stats(self) -> FleetStats:
        s = FleetStats(delays=self.delays, connect_times=self.connect_times)
        for rep in self._latest.values():
            for name in ("agents", "in_sync", "connected", "updates", "connections",
                         "failures"):
                setattr(s, name, getattr(s, name) + rep[name])
            for name in ("by_address", "reconnects_by_address", "by_protocol", "by_syncer",
                         "starts_by_method", "start_bytes_by_method"):
                merged = getattr(s, name)
                for k, v in rep.get(name, {}).items():
                    merged[k] = merged.get(k, 0) + v
            s.first_in_sync.extend(rep["first_in_sync"])
        return s

    async def wait(self, predicate: Callable[[FleetStats], bool]) -> FleetStats:
        """Wait for a report after which ``predicate(stats)`` holds."""
        while True:
            if len(self._latest) == self.config.processes:
                stats = self.stats
                if predicate(stats):
                    return stats
            await self._changed.wait()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    async def next_report(self) -> FleetStats:
        """Wait for the next report from any worker; the merged stats after it."""
        await self._changed.wait()
        return self.stats

    async def compare(self, expected: Mapping[str, Mapping[str, ExpectedKV]], path: str
                      ) -> dict[str, Any]:
        """Write ``expected`` (the invariant checker's, per syncer type) to ``path``; every
        worker compares each of its agents with it (:meth:`AgentGroup.compare`)."""
        await trio.Path(path).write_text(json.dumps(
            {s: {k: [kv.value.decode(), kv.revision, kv.source] for k, kv in kvs.items()}
             for s, kvs in expected.items()}))
        self._compare, self._compare_done = {}, trio.Event()
        for proc in self._procs:
            assert proc.stdin is not None
            await send_json(proc.stdin, {"cmd": "compare", "path": path})
        await self._compare_done.wait()
        out: dict[str, Any] = {"agents": 0, "keys_checked": 0, "mismatched": []}
        for rep in self._compare.values():
            out["agents"] += rep["agents"]
            out["keys_checked"] += rep["keys_checked"]
            out["mismatched"].extend(rep["mismatched"])
        return out

    def _on_line(self, msg: dict[str, Any]) -> None:
        if msg.get("event") == "stats":
            self.delays.extend(msg.pop("delays"))
            self.receipts.extend((rev, at, proto) for rev, at, proto in msg.pop("receipts"))
            self.connect_times.extend(msg.pop("connect_times"))
            self._latest[msg["worker"]] = msg
            self.reports += 1
            self._changed.set()
            self._changed = trio.Event()
        elif msg.get("event") == "compare":
            self._compare[msg["worker"]] = msg
            if len(self._compare) == len(self._procs) and self._compare_done is not None:
                self._compare_done.set()

    async def _read(self, proc: trio.Process, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        assert proc.stdout is not None
        task_status.started()
        lines = JsonLines(proc.stdout)
        while (msg := await lines.next()) is not None:
            self._on_line(msg)
        code = await proc.wait()
        if not self.closing:
            raise RuntimeError(f"fleet worker exited early (code {code})")


@asynccontextmanager
async def open_fleet(config: FleetConfig) -> AsyncIterator[Fleet]:
    """Start ``config.processes`` worker processes; stop them when the block ends."""
    fleet = Fleet(config)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_REPO, os.environ.get("PYTHONPATH", "")])}
    async with trio.open_nursery() as nursery:
        for i in range(config.processes):
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "testbed.fleet"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, env=env)
            assert proc.stdin is not None
            await send_json(proc.stdin, config.worker_config(i))
            fleet._procs.append(proc)
            await nursery.start(fleet._read, proc)
        try:
            yield fleet
        finally:
            fleet.closing = True
            with trio.CancelScope(shield=True):
                for proc in fleet._procs:
                    assert proc.stdin is not None
                    await proc.stdin.aclose()
                with trio.move_on_after(5):
                    for proc in fleet._procs:
                        await proc.wait()
                for proc in fleet._procs:
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
            nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m testbed.fleet", description=(
        "fleet worker: reads its JSON config as the first stdin line")).parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s fleet %(levelname)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(_worker)


if __name__ == "__main__":
    main()
