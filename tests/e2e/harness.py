"""Shared pieces of the end-to-end tests: daemon config, running it, reading its caches."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx
import trio

from tests.grpcio_sync import GrpcioSync
from trio_typha.config import Config
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.base import Datastore

# Hang protection only: every wait in these tests normally ends in well under a second.
HANG = 30


def daemon_config(env: Mapping[str, str] | None = None, **overrides: str) -> Config:
    """Loopback, ephemeral health port, quick pings (so acks are exercised) and a quick
    drain.  ``env`` is passed as the environment (TYPHA_* names); ``overrides`` as flags.
    (The sync port comes from :func:`running_daemon`: ServerPort 0 means Typha's 5473.)"""
    flags = {"ServerHost": "127.0.0.1", "ServerWorkers": "1",
             "HealthEnabled": "true", "HealthPort": "0", "HealthHost": "127.0.0.1",
             "ServerPingIntervalSecs": "0.2", "ServerPongTimeoutSecs": "5",
             "ShutdownTimeoutSecs": "5", "ShutdownConnectionDropIntervalMaxSecs": "0.05",
             "ServerDrainTimeoutSecs": "2", **overrides}
    return load_config(dict(env or {}), overrides=flags)


@asynccontextmanager
async def running_daemon(cfg: Config, *, datastore: Datastore | None = None
                         ) -> AsyncIterator[Daemon]:
    """Run the whole daemon in-process, listening on a free port, until the block ends; then
    shut it down cleanly."""
    daemon = Daemon(cfg, datastore=datastore, listen_port=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        try:
            yield daemon
        finally:
            daemon.shutdown()


def cache_contents(daemon: Daemon, syncer_type: str) -> dict[str, tuple[bytes, str]]:
    """The daemon's current cache of ``syncer_type``: key -> (value, revision)."""
    snapshot = daemon.pipelines[syncer_type].feed.snapshot_point().snapshot()
    return {u.key: (u.value or b"", u.revision) for u in snapshot}


def client_contents(client: GrpcioSync) -> dict[str, tuple[bytes, str]]:
    return {k: (r.value, r.revision) for k, r in client.kvs.items()}


async def converge(client: GrpcioSync, daemon: Daemon) -> None:
    """Wait until ``client`` holds exactly the daemon's cache of its syncer type.

    Callers first wait for the change they made to reach the client, so the cache has
    settled; this then shows nothing else differs (values and revisions, every key).
    """
    with trio.fail_after(HANG):
        await client.wait_until(
            lambda: client_contents(client) == cache_contents(daemon, client.syncer_type))


async def readiness(daemon: Daemon) -> tuple[int, str]:
    """GET /readiness on the daemon's health port: (HTTP status, body)."""
    async with httpx.AsyncClient() as http:
        resp = await http.get(f"http://127.0.0.1:{daemon.ports['health']}/readiness")
    return resp.status_code, resp.text


async def wait_readiness(daemon: Daemon, status: int) -> str:
    """Poll /readiness until it answers ``status``; returns the body.

    Readiness is computed per request and nothing signals a change, so polling the real
    endpoint is the honest way to watch it.
    """
    with trio.fail_after(HANG):
        while True:
            got, body = await readiness(daemon)
            if got == status:
                return body
            await trio.sleep(0.02)
