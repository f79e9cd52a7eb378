"""Stalled-watch detection: the pure StallCheck, and its trio loop in virtual time.

The loop tests model a datastore and a watch stream in virtual time (autojump_clock): the
datastore's revision moves on with every write; the stream delivers each write at once until
it is stalled.  The probe answers, as the real ones do, whether the datastore holds a change
after the stream's last revision.  Deadlines are checked in virtual time only.
"""

from __future__ import annotations

import socket

import pytest
import trio

from trio_typha.datastore.crosscheck import delivering, until_stalled
from trio_typha.datastore.http_edge import keepalive_socket_options
from trio_typha.datastore.stall import (
    Activity,
    StallCheck,
    Verdict,
    WatchBoard,
    WatchStalled,
    probe_window,
)

DEADLINE = 30.0


def test_a_missed_change_undelivered_after_the_grace_stalls_the_stream() -> None:
    check = StallCheck(DEADLINE, now=0.0)
    assert check.grace == 1.0 and check.interval == 28.0  # one probe per deadline at most
    assert not check.due(27.9) and check.due(28.0)
    assert check.probed(True, 28.0) is Verdict.SUSPECT
    assert check.suspect and check.suspect_since == 28.0
    assert check.probed(None, 28.5) is Verdict.SUSPECT  # no answer changes nothing
    assert not check.overdue(28.9) and check.overdue(29.0)
    assert check.silent_for(29.0) == 29.0
    check.paused = True  # a stream we are not reading is not judged
    assert not check.overdue(40.0)


def test_progress_within_the_grace_clears_the_suspicion() -> None:
    check = StallCheck(DEADLINE, now=0.0)
    assert check.probed(True, 28.0) is Verdict.SUSPECT
    check.progressed(28.5)  # the stream delivered the change after all
    assert not check.suspect and not check.overdue(40.0)
    assert not check.due(56.0) and check.due(56.5)  # the next probe an interval later


def test_short_deadlines_scale_the_grace_and_the_interval() -> None:
    check = StallCheck(1.5, now=0.0)
    assert check.grace == 0.25 and check.interval == 1.0


def test_a_probe_finding_nothing_counts_as_progress() -> None:
    check = StallCheck(DEADLINE, now=0.0)
    assert check.probed(False, 28.0) is Verdict.FRESH
    assert check.last_progress == 28.0
    assert not check.due(55.0)
    assert check.silent_for(37.0) == 9.0  # known current at 28.0


async def test_the_warning_the_metric_and_readiness_give_one_silence(
        autojump_clock: trio.testing.MockClock) -> None:
    """A stream quiet for minutes (its last event long ago, probes confirming it current)
    then stalled: the figure the WARNING reports is the board's age at that moment (the
    metric) and readiness's, and it counts from the last confirmation, not the last
    event."""
    board = WatchBoard(trio.current_time)
    check = board.add("felix/pods", DEADLINE)
    model = Model(check)
    model.write()
    last_event = trio.current_time()
    async with trio.open_nursery() as nursery:
        result: list[WatchStalled] = []
        ages: list[float] = []
        described: list[str] = []

        async def run() -> None:
            result.append(await until_stalled(check, model.probe, "felix/pods"))
            (state,) = board.states()  # what /metrics and /readiness read right then
            ages.append(state.age)
            described.append(state.describe())
            nursery.cancel_scope.cancel()

        nursery.start_soon(run)
        await trio.sleep(150)  # quiet: every probe confirms the stream current
        model.stalled = True
        model.write()  # missed
        await trio.sleep_forever()
    (stalled,) = result
    assert trio.current_time() - last_event > 150
    assert stalled.silent_for == ages[0] <= DEADLINE
    assert f"silent for {stalled.silent_for:.1f}s" in str(stalled)
    assert described[0].startswith(f"watch felix/pods silent for {ages[0]:.0f}s")


def test_board_ages_and_staleness() -> None:
    now = [0.0]
    board = WatchBoard(lambda: now[0])
    pods = board.add("felix/pods", DEADLINE)
    board.add("bgp/nodes", DEADLINE)
    now[0] = 31.0
    pods.progressed(31.0)
    states = {s.name: s for s in board.states()}
    assert states["felix/pods"].age == 0.0 and not states["felix/pods"].stale
    assert states["bgp/nodes"].age == 31.0 and states["bgp/nodes"].stale  # past its deadline
    assert [s.name for s in board.states("felix/")] == ["felix/pods"]
    assert "watch bgp/nodes silent for 31s" in states["bgp/nodes"].describe()
    pods.probed(True, 32.0)
    assert next(board.states("felix/")).stale  # suspect: missing a change, whatever its age
    nodes = next(board.states("bgp/"))
    assert nodes.stale
    board_check = board.add("felix/kubevirt", DEADLINE)
    board_check.dormant = True  # its kind is not served: no stream, nothing stale
    now[0] = 500.0
    assert not next(board.states("felix/kubevirt")).stale
    board.remove("felix/pods", StallCheck(DEADLINE, 0.0))  # not the registered one: kept
    assert [s.name for s in board.states("felix/p")] == ["felix/pods"]
    board.remove("felix/pods", pods)
    assert list(board.states("felix/p")) == []


def test_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="deadline must be > 0"):
        StallCheck(0, now=0.0)


def test_keepalive_options_give_up_within_the_deadline() -> None:
    opts = {(level, name): value for level, name, value in keepalive_socket_options(DEADLINE)}
    assert opts[(socket.SOL_SOCKET, socket.SO_KEEPALIVE)] == 1
    idle = opts[(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)]
    interval = opts[(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)]
    count = opts[(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)]
    assert idle + interval * count <= DEADLINE
    assert opts[(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)] <= DEADLINE * 1000
    # The options really apply to a socket.
    with socket.socket() as s:
        for level, name, value in keepalive_socket_options(3.0):
            s.setsockopt(level, name, value)
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 1
    assert probe_window(DEADLINE) == 1.0 and probe_window(1.5) == 0.25


class Model:
    """A datastore revision and a stream that delivers it until stalled (virtual time)."""

    def __init__(self, check: StallCheck) -> None:
        self.check = check
        self.revision = 0
        self.delivered = 0
        self.stalled = False
        self.probes = 0

    def write(self) -> None:
        self.revision += 1
        if not self.stalled:
            self.delivered = self.revision
            self.check.progressed(trio.current_time())

    async def probe(self) -> bool | None:
        self.probes += 1
        await trio.sleep(0.2)  # a round trip
        return self.revision > self.delivered


async def test_a_change_missed_by_a_stalled_stream_is_noticed_within_the_deadline(
        autojump_clock: trio.testing.MockClock) -> None:
    check = StallCheck(DEADLINE, trio.current_time())
    model = Model(check)
    async with trio.open_nursery() as nursery:
        result = []
        done = trio.Event()

        async def run() -> None:
            result.append(await until_stalled(check, model.probe, "felix/etcd"))
            done.set()

        nursery.start_soon(run)
        for _ in range(5):  # a healthy stream with writes now and then
            await trio.sleep(7)
            model.write()
        await trio.sleep(100)  # a healthy idle stream is probed but never stalled
        # ...once per interval at most: 135 s, the last write at 35 s.
        assert not result and model.probes == int((135 - 35) // check.interval)
        model.stalled = True
        await trio.sleep(3)
        changed_at = trio.current_time()
        model.write()  # the stream misses this one
        await done.wait()
        noticed = trio.current_time() - changed_at
        assert noticed <= DEADLINE, noticed
        assert result[0].stream == "felix/etcd"
        assert result[0].silent_for >= noticed


async def test_unanswered_probes_never_stall_but_the_age_grows(
        autojump_clock: trio.testing.MockClock) -> None:
    board = WatchBoard(trio.current_time)
    check = board.add("felix/pods", DEADLINE)

    async def no_answer() -> bool | None:
        await trio.sleep_forever()  # the datastore is unreachable: cut off at an interval
        return None

    with trio.move_on_after(300):
        await until_stalled(check, no_answer, "felix/pods")
        pytest.fail("stalled without evidence")
    (state,) = board.states()
    assert state.stale and state.age >= 300


async def test_a_full_pipeline_is_not_a_silent_stream(
        autojump_clock: trio.testing.MockClock) -> None:
    """While the watcher is blocked handing events downstream it reads nothing, and the
    datastore moves on; that must not tear the stream down."""
    check = StallCheck(DEADLINE, trio.current_time())
    model = Model(check)
    model.stalled = True  # the stream delivers nothing while we are busy...
    with trio.move_on_after(300):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(until_stalled, check, model.probe, "felix/pods")
            with delivering(check):  # ...because the pipeline is full
                for _ in range(30):
                    model.write()
                    await trio.sleep(10)
            assert check.last_progress == trio.current_time() and not check.suspect
            nursery.cancel_scope.cancel()
    assert model.probes == 0


def test_a_watch_broken_by_the_kernel_is_told_from_a_server_closing_it() -> None:
    """Only a connection that timed out (keepalive / TCP_USER_TIMEOUT: ETIMEDOUT, however
    deep in httpx's exception chain) gets the WARNING; a server ending a watch does not."""
    import errno

    import httpx

    from trio_typha.datastore.k8s_watch import _timed_out

    def chained(cause: BaseException) -> httpx.ReadError:
        try:
            try:
                raise cause
            except BaseException as inner:
                raise trio.BrokenResourceError("socket connection broken") from inner
        except trio.BrokenResourceError as broken:
            err = httpx.ReadError("socket connection broken")
            err.__cause__ = broken
            return err

    assert _timed_out(chained(OSError(errno.ETIMEDOUT, "Connection timed out")))
    assert not _timed_out(chained(OSError(errno.ECONNRESET, "Connection reset by peer")))
    assert not _timed_out(httpx.RemoteProtocolError("peer closed connection"))


async def test_streams_of_a_shared_connection_are_probed_only_when_another_delivers(
        autojump_clock: trio.testing.MockClock) -> None:
    """On one HTTP/2 connection (its liveness the PINGs'), a quiet cluster costs no
    probes; a stream that stays silent while another stream of the connection delivers
    is probed, and stalled if it missed a change."""
    activity = Activity()
    quiet, busy = StallCheck(DEADLINE, trio.current_time()), StallCheck(DEADLINE,
                                                                        trio.current_time())
    for check in (quiet, busy):
        check.shared = activity
        check.progressed(trio.current_time())
    model = Model(quiet)
    result: list[WatchStalled] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            result.append(await until_stalled(quiet, model.probe, "felix/pods"))
            nursery.cancel_scope.cancel()

        nursery.start_soon(run)
        await trio.sleep(300)
        assert model.probes == 0 and not result  # every stream silent: nobody probed
        model.stalled = True
        model.write()  # missed by the quiet stream
        await trio.sleep(5)
        assert model.probes == 0  # still nothing else delivers
        delivered_at = trio.current_time()
        busy.progressed(delivered_at)  # another stream of the connection delivers
        await trio.sleep_forever()
    (stalled,) = result
    assert model.probes == 1
    assert trio.current_time() - delivered_at <= 2 * quiet.grace + 0.2 + 0.01
    assert stalled.stream == "felix/pods"


def test_a_confirming_probe_is_not_a_delivery_of_the_connection() -> None:
    activity = Activity()
    check = StallCheck(DEADLINE, now=0.0)
    check.shared = activity
    check.progressed(0.0)
    other = StallCheck(DEADLINE, now=0.0)
    other.shared = activity
    other.progressed(20.0)
    assert check.due(28.0)  # the other stream delivered 20 s after this one's last
    assert check.probed(False, 28.0) is Verdict.FRESH
    assert activity.last_delivery == 20.0 and not check.due(56.0)  # nothing since


def test_quiet_streams_of_a_live_connection_are_as_current_as_the_connection() -> None:
    heard = [0.0]
    activity = Activity(lambda: heard[0])
    board = WatchBoard(lambda: 100.0)
    check = board.add("felix/pods", DEADLINE)
    check.shared = activity
    check.progressed(0.0)
    heard[0] = 95.0  # a PING's ack, 5 s ago
    (state,) = board.states()
    assert state.age == check.silent_for(100.0) == 5.0 and not state.stale
    check.probed(True, 99.0)  # once suspect, only the stream's own progress counts
    assert check.silent_for(100.0) == 100.0
