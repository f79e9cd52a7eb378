"""What the stalled-watch tests share: a felix-only daemon with a grpcio client, its
metrics, and waiting for a deletion to reach the client."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

from testbed.cluster import v3
from tests.e2e.harness import HANG, daemon_config
from tests.grpcio_sync import GrpcioSync, grpcio_sync
from trio_typha.daemon import Daemon
from trio_typha.datastore.base import Datastore

GNP_KEY = "/calico/v1/policy/GlobalNetworkPolicy//{}"
PROFILE_KEY = "/calico/v1/policy/profile/kns.{}/rules"


def gnp(name: str) -> dict[str, Any]:
    return v3("GlobalNetworkPolicy", name, {"order": 1, "selector": "all()"})


def is_watch(target: bytes) -> bool:
    return b"watch=true" in target


@asynccontextmanager
async def felix_daemon(datastore: Datastore) -> AsyncIterator[tuple[Daemon, GrpcioSync]]:
    cfg = daemon_config(PrometheusMetricsEnabled="true", PrometheusMetricsPort="0",
                        PrometheusMetricsHost="127.0.0.1")
    daemon = Daemon(cfg, datastore=datastore, listen_port=0, syncer_types=("felix",))
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        try:
            with trio.fail_after(HANG):
                await daemon.wait_in_sync()
            async with grpcio_sync(daemon.ports["server"], "felix") as client:
                with trio.fail_after(HANG):
                    await client.wait_until(lambda: client.in_sync)
                yield daemon, client
        finally:
            daemon.shutdown()


async def watch_ages(daemon: Daemon) -> dict[str, float]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{daemon.ports['metrics']}/metrics")).text
    ages = {}
    for line in text.splitlines():
        if line.startswith("typha_watch_progress_age_seconds{"):
            labels, value = line.rsplit(" ", 1)
            ages[labels.split('"')[1]] = float(value)
    return ages


async def deletion_arrives(client: GrpcioSync, key: str, started: float) -> float:
    with trio.fail_after(HANG):
        await client.wait_until(lambda: key not in client.kvs)
    return time.monotonic() - started


def stall_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return warnings(caplog.records, "stalled")


def warnings(records: list[logging.LogRecord], word: str) -> list[str]:
    return [r.getMessage() for r in records
            if r.levelno == logging.WARNING and word in r.getMessage()]
