"""Typha's liveness timeouts: a pipeline loop that stops reporting turns /liveness 503 after
20 s (autojump clock), the health table shows the TIMEOUT column; a healthy idle daemon
keeps beating and stays live."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.syncer.pipeline import SyncerPipeline


def daemon() -> Daemon:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    cfg = load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1", "ShutdownTimeoutSecs": "1"})
    return Daemon(cfg, store=store, listen_port=0)


def liveness(d: Daemon) -> tuple[int, str]:
    # The health port's own handler, without a socket (the clock is virtual here).
    status, _, body = d.health.handle("/liveness")  # type: ignore[misc]
    return status, body.decode()


async def test_idle_daemon_keeps_reporting_and_table_shows_timeouts(autojump_clock: Any
                                                                    ) -> None:
    d = daemon()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        await d.wait_in_sync()
        await trio.sleep(300)  # nothing happens for five minutes
        status, table = liveness(d)
        assert status == 200
        header = table.splitlines()[1]
        assert [c.strip() for c in header.split("|")[1:6]] == [
            "COMPONENT", "TIMEOUT", "LIVENESS", "READINESS", "DETAIL"]
        rows = {line.split("|")[1].strip(): line for line in table.splitlines()[3:-1]}
        assert rows["felix-cache"].split("|")[2].strip() == "20s"
        assert rows["SyncServer"].split("|")[2].strip() == "20s"
        assert "reporting live" in rows["felix-cache"]
        d.shutdown()


async def test_a_wedged_pipeline_turns_liveness_503(autojump_clock: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    wedge: dict[str, trio.CancelScope] = {}
    real = SyncerPipeline._consume

    async def consume(self: SyncerPipeline, recv: Any) -> None:
        # Fault injection: the felix loop runs normally until told to hang forever.
        with trio.CancelScope() as scope:
            wedge[self.syncer_type] = scope
            await real(self, recv)
        await trio.sleep_forever()

    monkeypatch.setattr(SyncerPipeline, "_consume", consume)
    d = daemon()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        await d.wait_in_sync()
        assert liveness(d)[0] == 200
        wedge["felix"].cancel()
        await trio.sleep(15)
        assert liveness(d)[0] == 200  # within Typha's 20 s
        await trio.sleep(10)
        status, table = liveness(d)
        assert status == 503
        (row,) = [line for line in table.splitlines() if "felix-cache" in line]
        assert "timed out" in row and "no report for" in row and "(timeout 20s)" in row
        assert all("timed out" not in line for line in table.splitlines()
                   if "bgp-cache" in line or "SyncServer" in line)
        assert d.health.handle("/readiness")[0] == 503  # type: ignore[index]
        d.shutdown()
