"""Shared fixtures for the integration tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate


@pytest.fixture
async def memory_daemon(nursery) -> Callable[..., Awaitable[Daemon]]:
    """``await memory_daemon(**params)``: a daemon on 127.0.0.1 (free port) serving the
    ``tiny`` synthetic cluster from the memory datastore, in sync; shut down at the end."""
    daemons: list[Daemon] = []

    async def start(**params: str) -> Daemon:
        store = MemoryStore()
        store.put_all(generate("tiny"))
        cfg = load_config({}, config_file=None, overrides={
            "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1", **params})
        daemon = await nursery.start(Daemon(cfg, store=store, listen_port=0).run)
        daemons.append(daemon)
        with trio.fail_after(10):
            await daemon.wait_in_sync()
        return daemon

    yield start
    for daemon in daemons:
        daemon.shutdown()
