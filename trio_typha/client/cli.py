"""``trio-typha client``: connect, report the snapshot and time to in-sync, then updates.

Output: one human-readable line per milestone on stderr-free stdout; with ``--json`` every
key/value as a JSON line (``{"key", "value", "revision", "type"}``) and a final summary line.
"""

from __future__ import annotations

import argparse
import json
import random
import ssl
import sys
from typing import Any

import trio

from ..grpcwire.status import GrpcError
from ..model.kv import SerializedUpdate, SyncStatus
from ..tls.client import client_ssl_context
from ..tls.diagnosis import TLSFailure
from .discovery import (
    Discovery,
    DiscoveryError,
    EndpointSliceDiscovery,
    SrvDiscovery,
    StaticDiscovery,
    TyphaAddress,
    parse_address,
)
from .typha import TyphaClient, TyphaDisconnected
from .view import SyncView


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _kv_json(u: SerializedUpdate) -> dict[str, Any]:
    value: Any = None
    if u.value:
        try:
            value = u.value.decode()
        except UnicodeDecodeError:
            value = u.value.hex()
    return {"key": u.key, "value": value, "revision": u.revision,
            "type": u.update_type.name.lower()}


def _ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    if not (args.ca_file or args.cert_file):
        return None
    return client_ssl_context(args.ca_file, args.cert_file, args.key_file)


class Reporter:
    """Prints progress the same way for both protocols."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.view = SyncView()
        self.start = trio.current_time()
        self.synced_at: float | None = None

    def updates(self, updates: list[SerializedUpdate], *, snapshot: bool) -> None:
        self.view.apply(updates)
        if self.args.json and not (self.args.once and not snapshot and self.synced_at):
            for u in updates:
                _emit(_kv_json(u))
        elif not self.args.json and self.synced_at is not None:
            for u in updates:
                print(f"{u.update_type.name:<8} {u.key}")

    def status(self, status: SyncStatus) -> bool:
        """Record a status; True when the client should stop (``--once`` and in sync)."""
        self.view.status = status
        if status is SyncStatus.IN_SYNC and self.synced_at is None:
            self.synced_at = trio.current_time()
            line = {"syncer": self.args.syncer, "protocol": self.args.protocol,
                    "status": "in-sync", "keys": len(self.view.kvs),
                    "seconds_to_in_sync": round(self.synced_at - self.start, 3)}
            if self.args.json:
                _emit({"summary": line})
            else:
                print(f"in sync: syncer={line['syncer']} protocol={line['protocol']} "
                      f"keys={line['keys']} time={line['seconds_to_in_sync']}s")
            return bool(self.args.once)
        return False


async def _run_grpc(args: argparse.Namespace, host: str, port: int, rep: Reporter) -> None:
    from . import grpc as g
    stream = await g.open_stream(host, port, ssl_context=_ssl_context(args),
                                 server_hostname=args.server_cn or None,
                                 server_cn=args.server_cn, server_uri_san=args.server_uri_san)
    async with stream:
        async for ev in g.sync(stream, args.syncer, hostname=args.hostname):
            if isinstance(ev, g.Updates):
                rep.updates(ev.updates, snapshot=ev.snapshot)
            elif isinstance(ev, g.Finished | g.StatusChanged) and rep.status(ev.status):
                return


async def _run_typha(args: argparse.Namespace, host: str, port: int, rep: Reporter) -> None:
    client = TyphaClient(host, port, syncer_type=args.syncer, hostname=args.hostname,
                         compression=not args.no_compression, ssl_context=_ssl_context(args),
                         server_hostname=args.server_cn or None, server_cn=args.server_cn,
                         server_uri_san=args.server_uri_san)
    async with client:
        async for batch in client.batches():
            if batch.updates:
                rep.updates(batch.updates, snapshot=not batch.after_snapshot)
            if batch.status is not None and rep.status(batch.status):
                return


async def _candidates(args: argparse.Namespace) -> list[TyphaAddress]:
    """Where to connect, by the same discovery code the fleet's agents use."""
    rng = random.Random()
    discovery: Discovery
    if args.srv:
        server = parse_address(args.dns_server, 53) if args.dns_server else None
        discovery = SrvDiscovery(args.srv, rng=rng,
                                 server=(server.host, server.port) if server else None)
    elif args.k8s_service:
        from ..config_sources import environment_config
        from ..datastore.k8s_api import KubeApi
        from ..datastore.k8s_config import load_kube_client_config
        async with KubeApi(load_kube_client_config(environment_config()),
                           request_timeout=10.0) as api:
            return await EndpointSliceDiscovery(
                api, service=args.k8s_service, namespace=args.k8s_namespace,
                node_name=args.node_name, rng=rng).discover()
    else:
        discovery = StaticDiscovery([parse_address(a) for a in args.addr.split(",") if a])
    return await discovery.discover()


async def run_client(args: argparse.Namespace) -> int:
    try:
        if args.startup_delay_max > 0:
            await trio.sleep(random.uniform(0, args.startup_delay_max))
        candidates = await _candidates(args)
    except ValueError as exc:
        print(f"trio-typha client: --addr: {exc}", file=sys.stderr)
        return 2
    except DiscoveryError as exc:
        print(f"trio-typha client: discovery failed: {exc}", file=sys.stderr)
        return 1
    rep = Reporter(args)
    run = _run_grpc if args.protocol == "grpc" else _run_typha
    for i, address in enumerate(candidates):
        try:
            await run(args, address.host, address.port, rep)
            break
        except TLSFailure as exc:
            print(f"trio-typha client: {address}: {exc}", file=sys.stderr)
            return 3
        except TyphaDisconnected as exc:
            if exc.tls_failure is not None:
                print(f"trio-typha client: {address}: {exc.tls_failure}", file=sys.stderr)
                return 3
            if rep.view.status is SyncStatus.WAIT_FOR_DATASTORE and i + 1 < len(candidates):
                continue  # never got going on this one: try the next, as Felix does
            print(f"trio-typha client: stream ended: {exc}", file=sys.stderr)
            return 1
        except GrpcError as exc:
            if rep.view.status is SyncStatus.WAIT_FOR_DATASTORE and i + 1 < len(candidates):
                continue  # never got going on this one: try the next, as Felix does
            print(f"trio-typha client: stream ended: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            if i + 1 < len(candidates):
                continue
            print(f"trio-typha client: cannot connect to {address}: {exc}", file=sys.stderr)
            return 1
    if args.once and rep.synced_at is None:
        print("trio-typha client: connection ended before in-sync", file=sys.stderr)
        return 1
    return 0
