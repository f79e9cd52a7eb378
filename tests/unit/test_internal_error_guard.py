"""The suite-wide guard against hidden shell bugs (tests/conftest.py).

The per-connection bulkheads log a crashing handler and drop that one connection, so a
test that only checks other clients would pass over the bug.  The autouse fixture fails any
test during which the server logged an internal error (ERROR with a traceback), unless the
test is marked ``internal_error_expected``.  Shown here on a real bulkhead (the gob shell
with a session whose receive path is broken) and, through a pytest subprocess that loads
tests/conftest.py as a plugin, on the three outcomes of the guard itself.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.internal_errors import internal_errors
from trio_typha.cache.feed import CacheFeed
from trio_typha.client.typha import TyphaClient
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate, SyncStatus
from trio_typha.protocols.gob import session as gob_session
from trio_typha.protocols.gob.shell import serve_gob_connection
from trio_typha.sessions.context import ServerContext
from trio_typha.sessions.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[2]


def _ctx() -> ServerContext:
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    feeds["felix"].apply([SerializedUpdate("/calico/v1/k", b"v", "1")])
    feeds["felix"].set_status(SyncStatus.IN_SYNC)
    return ServerContext(feeds=feeds, settings=ServerSettings(), version="v-test")


@pytest.mark.internal_error_expected(reason="a session bug is put in on purpose: the gob "
                                            "bulkhead must log it and drop one connection")
async def test_a_crashing_gob_session_is_logged_and_dropped_alone(
        autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    ctx = _ctx()

    def broken(self: object, data: bytes, now: float) -> object:
        raise RuntimeError("a bug in the session")

    async with trio.open_nursery() as nursery:
        good_server, good_client = trio.testing.memory_stream_pair()
        nursery.start_soon(functools.partial(serve_gob_connection, good_server, ctx,
                                             peer="good"))

        async def opened() -> trio.abc.Stream:
            return good_client

        async with TyphaClient("mem", open_stream=opened, hostname="h1") as client:
            await client.wait_for_status()
            monkeypatch.setattr(gob_session.ServerSession, "receive_data", broken)
            bad_server, bad_client = trio.testing.memory_stream_pair()
            nursery.start_soon(functools.partial(serve_gob_connection, bad_server, ctx,
                                                 peer="bad"))
            await bad_client.send_all(b"\x00")
            with trio.fail_after(5):
                assert await bad_client.receive_some() == b""  # dropped
            assert "/calico/v1/k" in client.kvs  # the other client is still served
        nursery.cancel_scope.cancel()
    [record] = [r for r in caplog.records if r.exc_info]
    assert record.getMessage().startswith("Internal error serving Typha client bad")


GUARDED = '''
import logging
import pytest

log = logging.getLogger("trio_typha.protocols.gob.shell")


def _crash():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("Internal error serving Typha client x")


def test_unmarked_crash():
    _crash()


@pytest.mark.internal_error_expected(reason="on purpose")
def test_marked_crash():
    _crash()


@pytest.mark.internal_error_expected(reason="on purpose")
def test_marked_but_nothing_logged():
    pass


def test_an_error_without_traceback_is_no_internal_error():
    log.error("a peer misbehaved")
'''


def test_the_guard_fails_unmarked_internal_errors_and_dishonest_marks(tmp_path: Path) -> None:
    (tmp_path / "test_guarded.py").write_text(GUARDED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-q", "--rootdir", str(tmp_path), "-o", "markers=internal_error_expected",
         str(tmp_path / "test_guarded.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = done.stdout
    # The guard fails a test at its teardown: two of the four pass, two error.
    assert done.returncode == 1 and "4 passed, 2 errors" in out, out
    errored = [m.group(1) for m in re.finditer(r"^ERROR \S+::(\w+)", out, re.M)]
    assert errored == ["test_unmarked_crash", "test_marked_but_nothing_logged"], out
    assert "the server logged internal errors:" in out
    assert "trio_typha.protocols.gob.shell: Internal error serving Typha client x" in out
    assert "marked internal_error_expected but none was logged" in out


def test_internal_errors_in_a_daemon_log() -> None:
    text = textwrap.dedent("""\
        2026-12-02 06:00:00.000 [INFO][7] shell.py 80: Connection from a closed
        2026-12-02 06:00:01.000 [ERROR][7] shell.py 88: Internal error serving Typha client b
        Traceback (most recent call last):
          File "x.py", line 1, in <module>
        RuntimeError: boom
        2026-12-02 06:00:02.000 [ERROR][7] rebalance.py 47: Failed to get the EndpointSlice
        """)
    assert internal_errors(text) == [
        "2026-12-02 06:00:01.000 [ERROR][7] shell.py 88: Internal error serving Typha client b"]
