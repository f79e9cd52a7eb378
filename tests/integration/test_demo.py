"""``trio-typha demo`` end to end, through the real CLI: the test bed API server, three KDD
replicas, 50 agents over both protocols discovering them from the EndpointSlice, 30 s of
NetworkPolicy churn with one replica SIGKILLed mid-run and started again 8 s later; while it
runs, the dashboard in headless Chromium must show the fleet's live numbers; a page opened
after the verdict must show the whole run (history, kill and restart markers, the verdict);
at the end the --json verdict must say every agent converged to the invariant checker's state
with nothing lost.

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
LINGER_S = 25  # the dashboard stays up this long after the verdict
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
           "--churn-rate", "10", "--kill-replica-at", "10", "--restart-replica-after", "8",
           "--linger", str(LINGER_S), "--dashboard-port", str(port),
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


#: What the page shows beyond the counts: per-replica CPU/RSS/reconnects/watches cells, the
#: legends under the plots, the lag definition, the events line and the page's history.
PAGE_DETAILS = """(() => {
    const t = (el) => el ? el.textContent.trim() : null;
    const cells = (prefix) => Object.fromEntries([...document.querySelectorAll(
        `td[id^=${prefix}-]`)].map((td) => [td.id.slice(prefix.length + 1), t(td)]));
    const legend = (id) => [...document.querySelectorAll(`#legend-${id} span`)].map(t);
    return {cpu: cells("cpu"), rss: cells("rss"), reconnects: cells("reconnects"),
            watches: cells("watches"), lag: t(document.getElementById("lag-definition")),
            lag_headers: [...document.querySelectorAll("th")].map(t).filter(
                (h) => h.startsWith("lag")),
            legends: Object.fromEntries(["connections", "convergence", "updates",
                "propagation", "cpu", "rss"].map((id) => [id, legend(id)])),
            events: [...document.querySelectorAll("#events span")].map(t),
            verdict: t(document.getElementById("verdict-head")),
            points: state.points.map((p) => [p.i, p.elapsed])};
})()"""

#: For every plot, the x of each canvas column drawn mostly in a marker colour (a kill or
#: restart line spans the plot's height; series lines and labels cross a column only briefly).
MARKER_COLUMNS = """(() => {
    const want = {kill: [0xd6, 0x28, 0x28], restart: [0x1b, 0x99, 0x8b]};
    const out = {};
    for (const canvas of document.querySelectorAll("canvas")) {
        const g = canvas.getContext("2d");
        const {width, height} = canvas;
        const px = g.getImageData(0, 0, width, height).data;
        const found = {kill: [], restart: []};
        for (let x = 0; x < width; x++) {
            const n = {kill: 0, restart: 0};
            for (let y = 0; y < height; y++) {
                const k = 4 * (y * width + x);
                for (const [kind, c] of Object.entries(want)) {
                    if (px[k] === c[0] && px[k + 1] === c[1] && px[k + 2] === c[2]) n[kind]++;
                }
            }
            for (const kind of Object.keys(want)) if (n[kind] > height / 2) found[kind].push(x);
        }
        out[canvas.id] = found;
    }
    return out;
})()"""


def _assert_replica_cells(details: dict, alive: list[str]) -> None:
    """CPU, RSS, reconnects and watch health are shown, as numbers, for each live replica."""
    for name in alive:
        assert float(details["cpu"][name]) >= 0, details
        assert 20 < float(details["rss"][name]) < 2000, details  # MiB of a real process
        assert int(details["reconnects"][name]) >= 0, details
        count, ok = details["watches"][name].split()
        assert ok == "ok" and int(count) > 5, details  # a KDD felix syncer's watches


async def test_dashboard_shows_the_fleet_live(demo: DemoRun, tmp_path: Path) -> None:
    """Headless Chromium on the dashboard while the demo runs: the connection count the
    page sums from the three replicas' /feed WebSockets equals what the fleet reports, per
    replica too, and the in-sync count is the fleet's; each replica's CPU, RSS, reconnects
    and watch health, the plots' legends and the lag definition are on the page, and the
    page's history starts where the demo's does, before the page was opened."""
    with trio.fail_after(90):
        while await _fleet(demo.dashboard) is None:
            assert demo.proc.poll() is None, (demo.workdir / "demo.stderr").read_text()
            await trio.sleep(0.5)
        async with httpx.AsyncClient() as http:  # a few points before the page opens
            while True:
                history = (await http.get(demo.dashboard + "history.json")).json()
                if len(history["points"]) >= 3:
                    break
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
                            start_bytes: t("start-bytes"),
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
            # KiB per gRPC start, by method: at least the first snapshots are there.
            assert dom["start_bytes"].startswith("snapshot ")
            details = await page.evaluate(PAGE_DETAILS)
            _assert_replica_cells(details, list(per_fleet))
            names = [r["name"] for r in fleet["replicas"]]
            for plot in ("connections", "updates", "cpu", "rss"):
                assert details["legends"][plot] == names
            assert details["legends"]["propagation"] == ["p50", "p99"]
            assert details["legends"]["convergence"] == ["agents in sync"]
            assert len(details["lag_headers"]) == 2
            assert details["lag"].startswith("* lag: ") and "fan-out" in details["lag"]
            # The history was served, not collected by the page: its first point is the
            # demo's first, from before the page was opened, and none is missing since.
            points = details["points"]
            served = [[p["i"], p["elapsed"]] for p in history["points"]]
            assert points[:len(served)] == served and served[0][0] == 0
            assert [i for i, _ in points] == list(range(len(points)))
            await trio.sleep(0.5)  # let the plots draw another point
            shot = await page.screenshot()
    await trio.Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
    await trio.Path(ARTIFACTS / "dashboard.png").write_bytes(shot)
    assert shot.startswith(b"\x89PNG") and len(shot) > 20_000


async def test_a_page_opened_after_the_run_shows_all_of_it(demo: DemoRun,
                                                           tmp_path: Path) -> None:
    """A page opened only once the verdict is in (the demo lingers) shows the whole run from
    the demo's history: every point since the start, the kill and the restart as markers on
    every plot (kill before restart) and in the events line, the restarted replica live again,
    and the verdict with every replica's figures."""
    with trio.fail_after(240):
        while True:
            assert demo.proc.poll() is None, (demo.workdir / "demo.stderr").read_text()
            fleet = await _fleet(demo.dashboard)
            if fleet is not None and fleet["verdict"] is not None:
                break
            await trio.sleep(0.5)
    await trio.sleep(1.5)  # the last point is in
    async with httpx.AsyncClient() as http:
        history = (await http.get(demo.dashboard + "history.json")).json()
    kill, restart = history["events"]
    assert (kill["kind"], restart["kind"]) == ("kill", "restart")
    assert kill["replica"] == restart["replica"] and kill["elapsed"] < restart["elapsed"]
    victim = kill["replica"]
    with trio.fail_after(LINGER_S - 5):
        async with open_page(tmp_path / "chromium-profile") as page:
            await page.navigate(demo.dashboard)
            while True:
                await trio.sleep(0.5)
                details = await page.evaluate(PAGE_DETAILS)
                if details["verdict"] and details["watches"].get(victim, "-") != "-":
                    break
            markers = await page.evaluate(MARKER_COLUMNS)
            shot = await page.screenshot(full_page=True)
    await trio.Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
    await trio.Path(ARTIFACTS / "dashboard-after-verdict.png").write_bytes(shot)
    assert details["verdict"].startswith(f"CONVERGED: {AGENTS} agents, ")
    assert "replica kills survived 1/1, restarts 1" in details["verdict"]
    points = [[p["i"], p["elapsed"]] for p in history["points"]]
    assert details["points"] == points and points[0][0] == 0
    assert points[0][1] < kill["elapsed"] - 5  # from before the kill
    assert details["events"] == [
        f"{kill['elapsed']:.1f} s: kill {victim}",
        f"{restart['elapsed']:.1f} s: restart {victim} (ready after {restart['ready_after_s']:.1f} s)"]
    assert 0 < restart["ready_after_s"] < 60
    # The restarted replica's feed was opened again: its row is live.
    _assert_replica_cells(details, [r["name"] for r in fleet["replicas"]])
    assert set(markers) == {"plot-connections", "plot-convergence", "plot-updates",
                            "plot-propagation", "plot-cpu", "plot-rss"}
    for plot, found in markers.items():
        assert len(found["kill"]) == len(found["restart"]) == 1, (plot, found)
        assert found["kill"][0] < found["restart"][0], (plot, found)


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
    assert verdict["replica_restarts"] == 1
    restarted = [r for r in verdict["replicas"] if r["restarts"]]
    assert len(restarted) == 1 and restarted[0]["alive"]
    assert all(r["alive"] for r in verdict["replicas"])
    assert sum(r["connections"] for r in verdict["replicas"]) == AGENTS
    assert all(r["server_connections"] == r["connections"] for r in verdict["replicas"])
    # The killed replica's agents reconnected, to the other two (it was down meanwhile).
    assert sum(r["reconnects"] for r in verdict["replicas"]) >= 1
    assert verdict["reconnects"] == sum(r["reconnects"] for r in verdict["replicas"])
    # Every gRPC agent started once with a snapshot; its reconnects resumed instead.
    starts = verdict["grpc_starts"]
    assert starts["snapshot"]["count"] == AGENTS // 2 and starts["snapshot"]["bytes"] > 0
    resumed = {m: s for m, s in starts.items() if m != "snapshot"}
    for s in resumed.values():
        assert s["bytes"] / s["count"] < starts["snapshot"]["bytes"] / starts["snapshot"]["count"]
    p = verdict["propagation"]
    assert p["n"] > verdict["writes"] * AGENTS // 2  # most writes reached most agents live
    assert 0 < p["p50_ms"] <= p["p99_ms"] <= p["max_ms"]
