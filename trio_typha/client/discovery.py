"""Finding Typha from the agent side, as Felix does it and a little better (Calico's
typha/pkg/discovery/discovery.go is Felix's version).

Sources of addresses (each a :class:`Discovery`):

* :class:`StaticDiscovery`: fixed ``host:port`` addresses (Felix's ``TyphaAddr``);
* :class:`EndpointSliceDiscovery`: the ``calico-typha`` Service's EndpointSlices, read from the
  Kubernetes API; the port is the one *named* ``calico-typha``, endpoints explicitly not
  ready are skipped, and Typhas on this agent's own node come first, each group shuffled
  (Felix's ordering).  Unlike Felix, a slice without the named port is skipped rather than
  failing the whole lookup when it happens to be the last one, and an unnamed port is ignored;
* :class:`SrvDiscovery`: DNS SRV records (``_calico-typha._tcp.<service>.<ns>.svc.<zone>``),
  ordered by priority and weight (RFC 2782), targets resolved from the reply's additional
  records or by an A/AAAA lookup.

Then the connection policy, which Felix lacks: a random start-up delay (so a fleet that starts
together does not arrive together), a random delay after a dropped connection (so the agents
of a restarted replica spread their reconnects over ``reconnect_delay_max`` seconds instead of
arriving in one burst), and exponential backoff with jitter after failed attempts.  Which
address to try next follows Felix's ``ConnectionAttemptTracker``: the first one not tried yet,
starting over when all have been tried, so a dropped agent moves to a different Typha.

The parsing and ordering are pure; the discoverers and :class:`Connector` are the trio part.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from ..backoff import Backoff
from ..datastore.k8s_errors import K8sError
from ..model.endpoint_slices import SERVICE_NAME_LABEL, slice_endpoints
from . import dns

log = logging.getLogger(__name__)

TYPHA_PORT_NAME = "calico-typha"


class DiscoveryError(Exception):
    """No Typha address could be found (the message says where we looked)."""


@dataclass(frozen=True, slots=True)
class TyphaAddress:
    host: str
    port: int
    node_name: str = ""

    @property
    def addr(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return self.addr


def parse_address(text: str, default_port: int = 5473) -> TyphaAddress:
    """``host:port``, ``[v6]:port`` or a bare host (Typha's port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_s = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port_s = text.partition(":")
    else:
        host, port_s = text, ""
    try:
        port = int(port_s) if port_s else default_port
    except ValueError:
        raise ValueError(f"bad Typha address {text!r}: expected HOST:PORT") from None
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad Typha address {text!r}: expected HOST:PORT")
    return TyphaAddress(host, port)


# -- EndpointSlices (pure) ---------------------------------------------------------------

def parse_endpoint_slices(slices: Iterable[Mapping[str, Any]], *,
                          port_name: str = TYPHA_PORT_NAME) -> list[TyphaAddress]:
    """Every ready Typha address in ``slices`` (``discovery.k8s.io/v1`` EndpointSlice dicts).

    Shared by agent discovery and the server's Kubernetes rebalancing (which counts Typhas).
    """
    found: dict[str, TyphaAddress] = {}
    for ep in slice_endpoints(slices, port_name):
        if ep.ready and ep.port > 0 and ep.address:  # absent condition means ready
            ta = TyphaAddress(ep.address, ep.port, ep.node_name)
            found.setdefault(ta.addr, ta)
    return list(found.values())


def local_first(addresses: Sequence[TyphaAddress], node_name: str,
                rng: random.Random) -> list[TyphaAddress]:
    """Typhas on ``node_name`` first, then the others; each group shuffled."""
    local = [a for a in addresses if node_name and a.node_name == node_name]
    remote = [a for a in addresses if not (node_name and a.node_name == node_name)]
    rng.shuffle(local)
    rng.shuffle(remote)
    return local + remote


def srv_name(service: str, namespace: str, *, zone: str = "cluster.local",
             port_name: str = TYPHA_PORT_NAME) -> str:
    """The SRV name Kubernetes DNS serves for a named port of a Service."""
    return f"_{port_name}._tcp.{service}.{namespace}.svc.{zone}"


# -- discoverers (trio) ------------------------------------------------------------------

def _describe(exc: Exception) -> str:
    """The message, or the exception's name when it has none."""
    return str(exc) or type(exc).__name__


class Discovery(Protocol):
    async def discover(self) -> list[TyphaAddress]:
        """Candidate addresses, best first; raises :class:`DiscoveryError` if none."""
        ...


@dataclass
class StaticDiscovery:
    addresses: Sequence[TyphaAddress]

    async def discover(self) -> list[TyphaAddress]:
        if not self.addresses:
            raise DiscoveryError("no static Typha address configured")
        return list(self.addresses)


class EndpointSliceDiscovery:
    """Lists the Service's EndpointSlices through the Kubernetes API on every call."""

    def __init__(self, api: Any, *, service: str = "calico-typha",
                 namespace: str = "kube-system", node_name: str = "",
                 rng: random.Random | None = None, port_name: str = TYPHA_PORT_NAME) -> None:
        self.api = api  # a trio_typha.datastore.k8s_api.KubeApi (anything with get_json)
        self.service = service
        self.namespace = namespace
        self.port_name = port_name
        self.node_name = node_name
        self.rng = rng or random.Random()

    async def discover(self) -> list[TyphaAddress]:
        path = f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
        try:
            doc = await self.api.get_json(
                path, params={"labelSelector": f"{SERVICE_NAME_LABEL}={self.service}"})
        except K8sError as exc:
            raise DiscoveryError(f"listing EndpointSlices of {self.namespace}/{self.service}"
                                 f" failed: {_describe(exc)}") from exc
        found = parse_endpoint_slices(doc.get("items") or (), port_name=self.port_name)
        if not found:
            raise DiscoveryError(f"no ready Typha in the EndpointSlices of "
                                 f"{self.namespace}/{self.service}")
        return local_first(found, self.node_name, self.rng)


class SrvDiscovery:
    """Resolves a DNS SRV name against ``server`` on every call."""

    def __init__(self, name: str, *, server: tuple[str, int] | None = None,
                 timeout: float = 2.0, rng: random.Random | None = None) -> None:
        self.name = name
        self.server = server or dns.system_nameserver()
        self.timeout = timeout
        self.rng = rng or random.Random()

    async def discover(self) -> list[TyphaAddress]:
        try:
            reply = await dns.query(self.server, self.name, dns.TYPE_SRV,
                                    attempt_secs=self.timeout,
                                    rng=self.rng)
            records = [r.data for r in reply.answers if isinstance(r.data, dns.Srv)]
            if not records:
                raise DiscoveryError(f"no SRV records for {self.name}")
            known: dict[str, list[str]] = {}
            for r in reply.additionals:
                if r.rtype in (dns.TYPE_A, dns.TYPE_AAAA) and isinstance(r.data, str):
                    known.setdefault(r.name.lower(), []).append(r.data)
            out: list[TyphaAddress] = []
            for srv in dns.order_srv(records, self.rng):
                hosts = known.get(srv.target.lower())
                if hosts is None:
                    answer = await dns.query(self.server, srv.target, dns.TYPE_A,
                                             attempt_secs=self.timeout, rng=self.rng)
                    hosts = [r.data for r in answer.answers
                             if r.rtype == dns.TYPE_A and isinstance(r.data, str)]
                out.extend(TyphaAddress(h, srv.port, srv.target) for h in hosts)
        except (dns.DnsError, OSError) as exc:
            raise DiscoveryError(f"SRV lookup of {self.name} via {self.server[0]}:"
                                 f"{self.server[1]} failed: {_describe(exc)}") from exc
        if not out:
            raise DiscoveryError(f"SRV targets of {self.name} have no addresses")
        return out


# -- which address next, and when (pure) -------------------------------------------------------

class AttemptTracker:
    """Felix's rotation: the first candidate not tried yet; start over once all were tried."""

    def __init__(self) -> None:
        self._tried: set[str] = set()

    def pick(self, candidates: Sequence[TyphaAddress]) -> TyphaAddress:
        if not candidates:
            raise DiscoveryError("no candidate Typha addresses")
        for c in candidates:
            if c.addr not in self._tried:
                break
        else:
            self._tried.clear()
            c = candidates[0]
        self._tried.add(c.addr)
        return c


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """When an agent (re)connects.  All delays in seconds; every one is randomized."""

    startup_delay_max: float = 0.0  # first attempt after uniform(0, this)
    reconnect_delay_max: float = 5.0  # after a dropped connection: uniform(0, this)
    backoff_initial: float = 0.5  # after a failed attempt: exponential backoff ...
    backoff_max: float = 30.0
    backoff_jitter: float = 0.5  # ... each delay cut by up to this fraction

    def __post_init__(self) -> None:
        for name in ("startup_delay_max", "reconnect_delay_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def backoff(self, rng: random.Random) -> Backoff:
        return Backoff(initial=self.backoff_initial, maximum=self.backoff_max,
                       jitter=self.backoff_jitter, random=rng.random)


@dataclass
class Connector:
    """Discovery plus policy for one agent: ``await next_address()`` before each dial.

    Call :meth:`connected` once a connection works, :meth:`dropped` when an established
    connection ends, and :meth:`failed` when a dial or handshake fails; each returns at once,
    and the next :meth:`next_address` sleeps as much as the policy asks first.
    """

    discovery: Discovery
    policy: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0
    #: trio time of each attempt (when the policy let the agent dial)
    attempt_times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._backoff = self.policy.backoff(self.rng)
        self._tracker = AttemptTracker()
        self._delay = self.rng.uniform(0, self.policy.startup_delay_max)

    def connected(self) -> None:
        self._backoff.reset()

    def dropped(self) -> None:
        self._delay = self.rng.uniform(0, self.policy.reconnect_delay_max)

    def failed(self) -> None:
        self._delay = self._backoff.next_delay()

    async def next_address(self) -> TyphaAddress:
        """Sleep as the policy says, discover, and pick; retries discovery with backoff."""
        while True:
            await trio.sleep(self._delay)
            self.attempts += 1
            self.attempt_times.append(trio.current_time())
            try:
                return self._tracker.pick(await self.discovery.discover())
            except DiscoveryError as exc:
                log.warning("Typha discovery failed: %s", exc)
                self.failed()
