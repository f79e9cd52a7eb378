"""``trio-typha demo`` end to end, through the real CLI: the test bed API server, three KDD
replicas, 50 agents over both protocols discovering them from the EndpointSlice, 30 s of
NetworkPolicy churn with one replica SIGKILLed mid-run; while it runs, the dashboard in
headless Chromium must show the fleet's live numbers; at the end the --json verdict must say
every agent converged to the invariant checker's state with nothing lost.

One demo run serves both tests (module fixture), to keep the suite's time down.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio

from tests.chromium import open_page
from tests.internal_errors import internal_errors

AGENTS = 50
CHURN_S = 30
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", Path(__file__).resolve().parents[2]
                                / "test-artifacts"))


@dataclass
class DemoRun:
    proc: subprocess.Popen[bytes]
    dashboard: str
    workdir: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    workdir = tmp_path_factory.mktemp("demo")
    port = _free_port()
    cmd = [sys.executable, "-m", "trio_typha", "demo", "--size", "small",
           "--agents", str(AGENTS), "--grpc-share", "0.5", "--duration", str(CHURN_S),
           "--churn-rate", "10", "--kill-replica-at", "10", "--dashboard-port", str(port),
           "--workdir", str(workdir), "--json"]
    with open(workdir / "demo.stderr", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
    try:
        yield DemoRun(proc, f"http://127.0.0.1:{port}/", workdir)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _fleet(url: str) -> dict | None:
    async with httpx.AsyncClient() as http:
        try:
            return (await http.get(url + "fleet.json", timeout=2)).json()
        except httpx.HTTPError:
            return None


async def test_dashboard_shows_the_fleet_live(demo: DemoRun, tmp_path: Path) -> None:
    """Headless Chromium on the dashboard while the demo runs: the connection count the
    page sums from the three replicas' /feed WebSockets equals what the fleet reports, per
    replica too, and the in-sync count is the fleet's."""
    with trio.fail_after(90):
        while await _fleet(demo.dashboard) is None:
            assert demo.proc.poll() is None, (demo.workdir / "demo.stderr").read_text()
            await trio.sleep(0.5)
        async with open_page(tmp_path / "chromium-profile") as page:
            await page.navigate(demo.dashboard)
            checks = 0
            while True:
                await trio.sleep(1.0)
                fleet = await _fleet(demo.dashboard)
                dom = await page.evaluate("""(() => {
                    const t = (id) => (document.getElementById(id) || {}).textContent;
                    return {total: t("total-connections"), in_sync: t("in-sync"),
                            phase: t("phase"), writes: t("writes"),
                            per: Object.fromEntries([...document.querySelectorAll(
                                "td[id^=conn-]")].map((td) => [td.id.slice(5),
                                                               td.textContent]))};
                })()""")
                if fleet is None or fleet["phase"] != "churning":
                    continue
                per_fleet = {r["name"]: str(r["agents"]) for r in fleet["replicas"]
                             if r["alive"]}
                per_dom = {k: v for k, v in dom["per"].items() if v != "-"}
                if (fleet["connected"] == AGENTS and dom["total"] == str(AGENTS)
                        and dom["in_sync"] == str(fleet["in_sync"]) == str(AGENTS)
                        and per_dom == per_fleet):
                    checks += 1
                    if checks == 2:  # twice, a second apart: the numbers are live
                        break
            assert int(dom["writes"]) > 0 and dom["phase"] == "churning"
            await trio.sleep(0.5)  # let the plots draw another point
            shot = await page.screenshot()
    await trio.Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
    await trio.Path(ARTIFACTS / "dashboard.png").write_bytes(shot)
    assert shot.startswith(b"\x89PNG") and len(shot) > 20_000


def test_demo_converges_after_a_replica_kill(demo: DemoRun) -> None:
    out, _ = demo.proc.communicate(timeout=180)
    stderr = (demo.workdir / "demo.stderr").read_text()
    assert demo.proc.returncode == 0, stderr
    verdict = json.loads(out)
    assert verdict["converged"] is True, stderr
    assert verdict["agents"] == AGENTS
    assert verdict["protocols"] == {"typha": AGENTS // 2, "grpc": AGENTS // 2}
    # Zero lost updates: every agent holds exactly the invariant checker's state.
    assert verdict["missing"] == verdict["extra"] == verdict["differing"] == 0
    assert verdict["agents_not_in_sync"] == 0 and verdict["mismatched"] == []
    assert verdict["keys_checked"] > AGENTS * 500  # small cluster: ~600 felix keys each
    assert 250 <= verdict["writes"] <= 310 and verdict["write_errors"] == 0
    # No replica's connection handler crashed (the bulkheads would have hidden it).
    logs = sorted(demo.workdir.glob("typha-*.log"))
    assert logs
    assert {log.name: internal_errors(log.read_text()) for log in logs} == {
        log.name: [] for log in logs}
    assert verdict["replica_kills"] == verdict["replica_kills_survived"] == 1
    killed = [r for r in verdict["replicas"] if not r["alive"]]
    assert len(killed) == 1 and killed[0]["connections"] == 0
    alive = [r for r in verdict["replicas"] if r["alive"]]
    assert sum(r["connections"] for r in alive) == AGENTS
    assert all(r["server_connections"] == r["connections"] for r in alive)
    p = verdict["propagation"]
    assert p["n"] > verdict["writes"] * AGENTS // 2  # most writes reached most agents live
    assert 0 < p["p50_ms"] <= p["p99_ms"] <= p["max_ms"]
