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
    Step,
    Verdict,
    WatchBoard,
    WatchStalled,
    probe_window,
)

DEADLINE = 30.0


def test_a_missed_change_undelivered_after_the_grace_stalls_the_stream() -> None:
    check = StallCheck(DEADLINE, now=0.0)
    assert check.grace == 1.0 and check.interval == 28.0  # one probe per deadline at most
    assert check.step(27.9) == (Step.WAIT, 28.0) and check.step(28.0)[0] is Step.PROBE
    assert check.probed(True, 28.0) is Verdict.SUSPECT
    assert check.suspect and check.suspect_since == 28.0
    assert check.probed(None, 28.5) is Verdict.SUSPECT  # no answer changes nothing
    assert check.step(28.9) == (Step.WAIT, 29.0) and check.step(29.0)[0] is Step.STALLED
    assert check.silent_for(29.0) == 29.0
    check.paused = True  # a stream we are not reading is not judged
    assert check.step(40.0)[0] is Step.WAIT


def test_progress_within_the_grace_clears_the_suspicion() -> None:
    check = StallCheck(DEADLINE, now=0.0)
    assert check.probed(True, 28.0) is Verdict.SUSPECT
    check.delivered(28.5)  # the stream delivered the change after all
    assert not check.suspect
    # The next probe an interval after the delivery.
    assert check.step(56.0) == (Step.WAIT, 56.5) and check.step(56.5)[0] is Step.PROBE


def test_short_deadlines_scale_the_grace_and_the_interval() -> None:
    check = StallCheck(1.5, now=0.0)
    assert check.grace == 0.25 and check.interval == 1.0


def test_a_probe_finding_nothing_counts_as_progress() -> None:
    check = StallCheck(DEADLINE, now=0.0)
    assert check.probed(False, 28.0) is Verdict.FRESH
    assert check.last_progress == 28.0
    assert check.step(55.0) == (Step.WAIT, 56.0)
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


def shared_checks(activity: Activity, *names: str, now: float = 0.0
                  ) -> list[StallCheck]:
    """Streams of one HTTP/2 connection, as the KDD watcher sets them up."""
    checks = []
    for name in names:
        check = StallCheck(DEADLINE, now, name=name)
        check.shared = activity
        check.bookmark_every = 60.0
        check.new_stream()
        checks.append(check)
    return checks


def test_quiet_streams_of_a_shared_connection_owe_nothing_and_are_never_probed() -> None:
    """Over HTTP/2 a stream that has delivered nothing owes no bookmark (the API server
    sends none until the kind moves past the watch's start): however long it is quiet, it
    is neither probed nor suspect, and a busy neighbour does not change that."""
    activity = Activity(lambda: 0.0)
    quiet, busy = shared_checks(activity, "felix/pods", "felix/nodes")
    for t in range(0, 600, 5):
        busy.delivered(float(t))
        assert quiet.step(float(t))[0] is Step.WAIT
    assert quiet.step(600.0)[0] is Step.WAIT and not quiet.suspect


def test_a_missed_bookmark_wedges_the_stream_and_a_silent_connection_every_stream() -> None:
    activity = Activity(lambda: 0.0)
    pods, nodes, policies = shared_checks(activity, "felix/pods", "felix/nodes",
                                          "felix/policies")
    assert pods.bookmark_slack == 3.0
    pods.delivered(10.0)  # an event: the server now owes a bookmark every minute
    nodes.delivered(12.0)
    assert pods.step(70.0) == (Step.WAIT, 73.0)
    pods.delivered(70.0)  # the bookmark
    assert pods.step(132.9) == (Step.WAIT, 133.0)
    assert nodes.step(75.0)[0] is Step.WEDGED  # nodes missed its own: others delivered
    assert activity.wedged_at is None  # ...so only nodes is wedged, not the hub
    nodes.new_stream()  # (the watcher lists and watches it again)
    assert policies.step(100.0)[0] is Step.WAIT
    # Nothing delivered after pods' bookmark at 70: at 133 pods finds the hub silent,
    # and every stream of the connection with it, even one that owes nothing.
    assert pods.step(133.0)[0] is Step.WEDGED and "no bookmark for 63.0s" in pods.why
    assert activity.hub_silent
    assert policies.step(133.5)[0] is Step.WEDGED and "every watch" in policies.why
    assert nodes.step(133.5)[0] is Step.WEDGED
    nodes.delivered(140.0)  # anything delivered: the hub works
    assert not activity.hub_silent and policies.step(140.0)[0] is Step.WAIT


def test_listing_in_a_wedged_streams_place_until_a_watch_delivers() -> None:
    """The fallback: a list every deadline while nothing is delivered; neither its lists,
    a new watch's acknowledgement nor a probe's "nothing" make the stream current (a
    wedged hub gives every new watch nothing), and readiness names it throughout."""
    board = WatchBoard(lambda: 200.0)
    check = board.add("felix/etcd", DEADLINE)
    check.delivered(50.0)
    assert check.enter_fallback(100.0) and not check.enter_fallback(101.0)
    check.listed(102.0)
    check.new_stream()
    check.progressed(102.5)  # the new watch was accepted
    assert check.probed(False, 110.0) is Verdict.FRESH  # a probe's watch saw nothing
    assert check.step(131.9) == (Step.WAIT, 132.0)
    assert check.step(132.0)[0] is Step.RELIST and "after the last list" in check.why
    check.listed(133.0)
    assert check.silent_for(200.0) == 150.0  # since the last delivery, at 50
    (state,) = board.states()
    assert state.stale and state.age == 150.0
    assert state.describe() == ("watch felix/etcd silent for 150s: the datastore gives it "
                                "nothing; listing it every 30s instead")
    check.delivered(150.0)  # the watch delivers again: back to watching, no more lists
    assert check.fallback_since is None and check.step(151.0)[0] is Step.WAIT
    assert check.silent_for(160.0) == 10.0


def test_another_stream_delivering_ends_a_fallback_of_the_same_connection() -> None:
    activity = Activity(lambda: 0.0)
    quiet, busy = shared_checks(activity, "felix/namespaces", "felix/pods")
    quiet.enter_fallback(100.0)
    quiet.listed(101.0)
    assert quiet.step(120.0) == (Step.WAIT, 127.0)  # (polled: the hub may deliver)
    busy.delivered(125.0)  # the hub delivers to another watch: this one is only quiet
    assert quiet.step(126.0)[0] is Step.WAIT and quiet.fallback_since is None
    assert quiet.last_progress == 101.0  # current as of its last list


class Hub:
    """An API server's watch hub in virtual time: bookmarks on a minute's cadence to the
    streams that owe them, events as written, nothing at all while wedged."""

    def __init__(self, checks: list[StallCheck]) -> None:
        self.checks = checks
        self.wedged = False

    async def run(self) -> None:
        while True:
            await trio.sleep(60.0)
            if not self.wedged:
                for check in self.checks:
                    check.delivered(trio.current_time())

    def write(self, check: StallCheck) -> None:
        if not self.wedged:
            check.delivered(trio.current_time())


async def test_a_wedged_hub_is_listed_within_a_bookmark_period_and_left_when_it_delivers(
        autojump_clock: trio.testing.MockClock) -> None:
    """Every stream of one connection owes its bookmarks; the hub wedges: each stream is
    found wedged within a bookmark period plus its slack of its last delivery, and lists
    in its place every deadline (no probes: they would see nothing) until the hub
    delivers again."""
    activity = Activity(trio.current_time)  # PINGs answered throughout
    checks = shared_checks(activity, "felix/pods", "felix/namespaces")
    hub = Hub(checks)
    lists: dict[str, list[float]] = {c.name: [] for c in checks}

    async def watcher(check: StallCheck) -> None:
        async def probe() -> bool | None:
            raise AssertionError("no probe on a shared connection")

        while True:
            stalled = await until_stalled(check, probe, check.name)
            assert stalled.wedged
            check.enter_fallback(trio.current_time())
            await trio.sleep(0.5)  # the list
            check.listed(trio.current_time())
            lists[check.name].append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        for check in checks:
            check.delivered(0.0)
            nursery.start_soon(watcher, check)
        await trio.sleep(600)
        assert lists == {"felix/pods": [], "felix/namespaces": []}  # bookmarks on time
        hub.write(checks[0])
        hub.wedged = True
        wedged_at = trio.current_time()
        await trio.sleep(200)
        for times in lists.values():
            # The first list within a bookmark period plus slack of the last delivery
            # (the bookmark at 600 s), then one every deadline.
            assert times[0] - wedged_at <= 60.0 + 3.0 + 0.5
            assert all(b - a == pytest.approx(DEADLINE + 0.5) for a, b in zip(
                times, times[1:], strict=False))
        assert all(c.fallback_since is not None for c in checks)
        hub.wedged = False
        hub.write(checks[0])  # one stream delivers: the hub works, both go back
        before = {name: len(times) for name, times in lists.items()}
        await trio.sleep(300)
        assert {name: len(times) for name, times in lists.items()} == before
        assert all(c.fallback_since is None for c in checks)
        nursery.cancel_scope.cancel()


def test_a_confirming_probe_is_not_a_delivery_of_the_connection() -> None:
    activity = Activity()
    check = StallCheck(DEADLINE, now=0.0)
    check.shared = activity
    check.delivered(0.0)
    assert check.probed(False, 28.0) is Verdict.FRESH
    assert activity.last_delivery == 0.0 and check.last_progress == 28.0


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


def test_a_resumed_stream_that_gets_no_reply_either_is_wedged() -> None:
    """etcd: a stalled stream is resumed on a new one, whose watch creation etcd answers at
    once; no reply within the grace means the hub gives every watch nothing."""
    check = StallCheck(DEADLINE, now=0.0)
    check.expect_reply(30.0)
    check.new_stream()
    assert check.step(30.5) == (Step.WAIT, 31.0)  # no probe while the reply is due
    assert check.step(31.0)[0] is Step.WEDGED and "no reply either" in check.why
    check.expect_reply(40.0)
    check.delivered(40.2)  # the creation came: an ordinary stream again
    assert check.step(41.0) == (Step.WAIT, 68.2)
