"""The starting replica's side of a warm start: ask siblings for their state in turn.

Each sibling is tried once, in order, within ``timeout``: connect to its sync port (under
TLS when the server has it: our own certificate as the client's, the sibling's checked
against WarmStartPeerCN / WarmStartPeerURISAN), send the request, assemble the answer
(:class:`~.wire.Assembly`).  The first complete transfer wins; any failure (unreachable,
refused, wrong identity, cut off mid-transfer, malformed) is one log line naming the sibling
and the reason, and the next one is tried.  With none left the replica starts cold.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from ..datastore.k8s_api import KubeApi
from ..datastore.k8s_errors import K8sError
from ..model.endpoint_slices import SERVICE_NAME_LABEL, slice_endpoints
from ..syncer.handover import SyncerState
from ..tls.client import tls_handshake
from ..tls.diagnosis import TLSFailure
from . import wire

log = logging.getLogger(__name__)


@dataclass
class WarmOutcome:
    """What the siblings gave: ``states`` (empty: start cold) from ``source``, and why
    each sibling tried before failed."""

    states: dict[str, SyncerState] = field(default_factory=dict)
    source: str = ""
    received: int = 0  # bytes
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """Where the caches' state came from, for the log and /readiness."""
        if self.states:
            return (f"warm start from sibling {self.source} ({self.received} bytes in "
                    f"{self.seconds:.2f}s)")
        if self.failures:
            return f"cold start: listed from the datastore ({'; '.join(self.failures)})"
        return "cold start: listed from the datastore"


@dataclass(frozen=True, slots=True)
class PeerTLS:
    context: ssl.SSLContext
    peer_cn: str = ""
    peer_uri_san: str = ""


def split_peer(peer: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) -> (host, port); ValueError if not."""
    host, sep, port = peer.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{peer!r} is not host:port")
    return host.strip("[]"), int(port)


#: How long the EndpointSlice lookup may take.
DISCOVERY_TIMEOUT = 10.0


async def discover_siblings(api: KubeApi, *, namespace: str, service: str,
                            port_name: str) -> list[str]:
    """Ready Typhas in the Service's EndpointSlices, as clients find them (this replica,
    not listening yet, refuses its own connection and is passed over)."""
    path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    try:
        with trio.fail_after(DISCOVERY_TIMEOUT):
            doc = await api.get_json(path, {"labelSelector": f"{SERVICE_NAME_LABEL}={service}"})
    except (K8sError, trio.TooSlowError) as exc:
        log.warning("Warm start: cannot list the EndpointSlices of %s/%s: %s", namespace,
                    service, exc or "no answer")
        return []
    items = doc.get("items")
    found = slice_endpoints(items if isinstance(items, list) else [], port_name)
    return list(dict.fromkeys(f"[{e.address}]:{e.port}" if ":" in e.address
                              else f"{e.address}:{e.port}" for e in found if e.ready))


async def fetch_state(peers: Sequence[str], syncer_types: Sequence[str],
                      fingerprint: dict[str, str], *, tls: PeerTLS | None,
                      per_peer: float) -> WarmOutcome:
    """The first sibling's complete state, or an outcome saying why none gave it."""
    outcome = WarmOutcome()
    for peer in peers:
        started = trio.current_time()
        try:
            with trio.fail_after(per_peer):
                assembly = await _fetch_one(peer, syncer_types, fingerprint, tls)
        except trio.TooSlowError:
            why = f"no complete state within {per_peer:g}s (WarmStartTimeoutSecs)"
        except (OSError, wire.WarmError, trio.BrokenResourceError, ValueError) as exc:
            why = str(exc) or type(exc).__name__
        else:
            assert assembly.states is not None
            outcome.states = assembly.states
            outcome.source = peer
            outcome.received = assembly.received
            outcome.seconds = trio.current_time() - started
            return outcome
        log.warning("Warm start from sibling %s failed: %s", peer, why)
        outcome.failures.append(f"sibling {peer}: {why}")
    return outcome


async def _fetch_one(peer: str, syncer_types: Sequence[str], fingerprint: dict[str, str],
                     tls: PeerTLS | None) -> wire.Assembly:
    host, port = split_peer(peer)
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    try:
        if tls is not None:
            try:
                stream = await tls_handshake(stream, tls.context, server_cn=tls.peer_cn,
                                             server_uri_san=tls.peer_uri_san)
            except TLSFailure as exc:
                raise wire.WarmError(str(exc)) from None
        await stream.send_all(wire.encode_request(syncer_types, fingerprint))
        assembly = wire.Assembly(syncer_types)
        while not assembly.done:
            data = await stream.receive_some(1 << 20)
            if not data:
                raise wire.WarmError(f"the sibling closed the connection after "
                                     f"{assembly.received} bytes, before the end")
            assembly.feed(data)
        return assembly
    finally:
        await trio.aclose_forcefully(stream)
