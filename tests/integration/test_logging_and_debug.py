"""LogFilePath/LogSeverityFile, LogSeveritySys (a real unix syslog socket), the debug
endpoint (DebugHost/DebugPort) and SIGUSR1's tracemalloc snapshot (DebugMemoryProfilePath)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import tracemalloc
from pathlib import Path

import httpx
import pytest
import trio

from tests.e2e.harness import HANG, daemon_config
from trio_typha import logs
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        if h not in handlers:
            h.close()
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_file_and_syslog_destinations_with_their_own_levels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None) -> None:
    sock_path = str(tmp_path / "log.sock")
    syslog = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    syslog.bind(sock_path)
    syslog.settimeout(5)
    monkeypatch.setattr(logs, "SYSLOG_ADDRESS", sock_path)
    log_file = tmp_path / "calico" / "typha.log"
    logs.setup_logging("ERROR", file_path=str(log_file), file_level="WARNING",
                       sys_level="INFO")
    log = logging.getLogger("trio_typha.test")
    log.info("an info line")
    log.warning("a warning line")
    received = [syslog.recv(4096).decode() for _ in range(2)]
    syslog.close()
    text = log_file.read_text()
    assert "a warning line" in text and "an info line" not in text
    assert "[WARNING][" in text  # Typha's line format
    assert all(r.startswith("<") and "calico-typha[" in r for r in received)
    # Typha's syslog layout: the tag and pid, then the level without brackets.
    assert any("]: INFO test_logging_and_debug.py " in r and r.rstrip("\x00").endswith(": an info line")
               for r in received)


def test_setting_up_again_closes_the_files_it_opened_and_no_others(
        tmp_path: Path, restore_logging: None) -> None:
    logs.setup_logging("INFO", file_path=str(tmp_path / "first.log"))
    (first,) = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    foreign = logging.FileHandler(tmp_path / "foreign.log")
    logging.getLogger().addHandler(foreign)
    try:
        logs.setup_logging("INFO", file_path=str(tmp_path / "second.log"))
        files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
        assert [h.baseFilename for h in files] == [str(tmp_path / "second.log")]
        assert first.stream is None  # closed
        assert foreign.stream is not None and not foreign.stream.closed
    finally:
        foreign.close()


def test_missing_syslog_is_one_error_line_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(logs, "SYSLOG_ADDRESS", str(tmp_path / "absent.sock"))
    logs.setup_logging("INFO", sys_level="INFO")
    err = capsys.readouterr().err
    assert err.count("Failed to connect to syslog") == 1
    assert "set config parameter LogSeveritySys=none" in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_debug_endpoint_and_sigusr1_memory_profile(tmp_path: Path) -> None:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    template = str(tmp_path / "typha-<timestamp>.prof")
    cfg = daemon_config(DatastoreType="memory", DebugHost="127.0.0.1",
                        DebugPort=str(free_port()), DebugMemoryProfilePath=template)
    d = Daemon(cfg, store=store, listen_port=0, handle_signals=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        with trio.fail_after(HANG):
            await d.wait_in_sync()
        base = f"http://127.0.0.1:{d.ports['debug']}"
        async with httpx.AsyncClient() as http:
            tasks = (await http.get(f"{base}/debug/tasks")).text
            memory = (await http.get(f"{base}/debug/memory")).text
            config = json.loads((await http.get(f"{base}/debug/config")).text)
            missing = await http.get(f"{base}/debug/nothing")
        assert "ServingProcess.run" in tasks and "SyncerPipeline.run" in tasks
        assert "tracemalloc is not tracing" not in memory and "size=" in memory
        assert config["DebugMemoryProfilePath"] == template and config["DebugHost"] == \
            "127.0.0.1"
        assert missing.status_code == 404
        os.kill(os.getpid(), signal.SIGUSR1)
        with trio.fail_after(HANG):
            while not list(tmp_path.glob("typha-*.prof")):  # noqa: ASYNC110, ASYNC240
                await trio.sleep(0.02)
        (profile,) = tmp_path.glob("typha-*.prof")  # noqa: ASYNC240
        assert "<timestamp>" not in profile.name
        snapshot = tracemalloc.Snapshot.load(str(profile))
        assert snapshot.statistics("filename")
        d.shutdown()
    tracemalloc.stop()
