"""Each HTTP/2 flood, from raw peers, against the real daemon while canaries on both
protocols follow a stream of writes: the attacker gets GOAWAY ENHANCE_YOUR_CALM, the
metric counts it, memory stays bounded, and the canaries get every write.  A peer that
breaks framing with an oversized frame gets GOAWAY FRAME_SIZE_ERROR at once."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
import trio
from h2.errors import ErrorCodes

from testbed.hostile import (
    Attack,
    Canary,
    canary_key,
    close_wait_count,
    h2_flood,
    h2_oversized_frame,
    h2_paced_reset,
    rss_bytes,
    wait_delivered,
    write_canaries,
)

ATTACKERS = 4
ATTACK_SECS = 1.5


@pytest.fixture
async def daemon(memory_daemon):
    return await memory_daemon()


@dataclass
class Watched:
    """What the canaries saw of an attack: the writes made while it ran and when it ran."""

    canaries: list[Canary]
    written: list[str]
    started: float = 0.0
    ended: float = 0.0


async def watched_attack(daemon, prefix: str, attack: Callable[[], Awaitable[None]],
                         after: Callable[[], Awaitable[None]] | None = None) -> Watched:
    """Canaries on both protocols in sync, then ``attack()`` while a writer adds canary
    keys; returns once every canary has every key (and ``after()`` has run)."""
    port = daemon.ports["server"]
    watched = Watched([Canary("127.0.0.1", port, proto, prefix=canary_key(f"{prefix}-"))
                       for proto in ("typha", "grpc")], [])
    async with trio.open_nursery() as nursery:
        for canary in watched.canaries:
            with trio.fail_after(15):
                await nursery.start(canary.run)
        stop = trio.Event()

        async def writer() -> None:
            watched.written.extend(await write_canaries(daemon.store.put, prefix, stop))

        nursery.start_soon(writer)
        watched.started = trio.current_time()
        await attack()
        watched.ended = trio.current_time()
        stop.set()
        with trio.fail_after(20):
            await wait_delivered(watched.canaries, watched.written)
            if after is not None:
                await after()
        nursery.cancel_scope.cancel()
    return watched


@pytest.mark.parametrize("kind", list(Attack))
async def test_flood_is_closed_and_canaries_keep_receiving(daemon, kind, caplog) -> None:
    caplog.set_level(logging.INFO)
    port = daemon.ports["server"]
    rss_before = rss_bytes()
    outcomes = []

    async def attacker() -> None:
        # It comes back after each GOAWAY, for at least three rounds and ATTACK_SECS.
        while len(outcomes) < 3 * ATTACKERS or trio.current_time() < attack_until:
            outcomes.append(await h2_flood("127.0.0.1", port, kind, seconds=20))

    async def attack() -> None:
        nonlocal attack_until
        attack_until = trio.current_time() + ATTACK_SECS
        async with trio.open_nursery() as attackers:
            for _ in range(ATTACKERS):
                attackers.start_soon(attacker)

    attack_until = 0.0
    watched = await watched_attack(daemon, kind.value, attack)
    canaries, written = watched.canaries, watched.written
    attack_started, attack_ended = watched.started, watched.ended

    # Every attacking connection was told why and closed.
    assert len(outcomes) >= 3 * ATTACKERS
    for outcome in outcomes:
        assert outcome.goaway_code == ErrorCodes.ENHANCE_YOUR_CALM, outcome
        assert kind.value.encode() in outcome.goaway_debug
        assert outcome.closed
    metric = daemon.metrics.h2_abuse_closed.labels(kind=kind.value)._value.get()
    assert metric == len(outcomes)
    assert f'typha_h2_abuse_closed{{kind="{kind.value}"}}'.encode() in \
        daemon.metrics.exposition()
    # One WARNING per peer per interval, naming the peer, the kind and the counts.
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "ENHANCE_YOUR_CALM" in r.getMessage()]
    assert 1 <= len(warnings) <= 2, warnings  # ATTACK_SECS < the 10 s log interval
    assert "127.0.0.1" in warnings[0] and f"{kind.value} flood" in warnings[0]
    assert "frames in" in warnings[0] and "budget" in warnings[0]
    # Per-stream lines are rate-limited too (one per kind per peer per interval).
    for line in ("cancelled by the client", "stream", "refused"):
        per_stream = [r for r in caplog.records if line in r.getMessage()
                      and "gRPC stream" in r.getMessage()]
        assert len(per_stream) <= 4, per_stream[:5]
    # The canaries were served while the attack ran, and got every write.
    for canary in canaries:
        assert canary.received_between(attack_started, attack_ended) > 0, canary.protocol
        assert set(written) <= canary.arrivals.keys()
    assert rss_bytes() - rss_before < 64 << 20


async def test_oversized_frame_gets_goaway_frame_size_error_and_canaries_keep_receiving(
        daemon, caplog) -> None:
    caplog.set_level(logging.INFO)
    port = daemon.ports["server"]
    canaries = [Canary("127.0.0.1", port, proto, prefix=canary_key("oversized-"))
                for proto in ("typha", "grpc")]
    async with trio.open_nursery() as nursery:
        for canary in canaries:
            with trio.fail_after(15):
                await nursery.start(canary.run)
        stop = trio.Event()
        written: list[str] = []

        async def writer() -> None:
            written.extend(await write_canaries(daemon.store.put, "oversized", stop))

        nursery.start_soon(writer)
        outcomes = []
        for length in (16_385, 1 << 20, (1 << 24) - 1):
            outcomes.append((length, await h2_oversized_frame("127.0.0.1", port,
                                                              length=length, wait=10)))
        stop.set()
        with trio.fail_after(20):
            await wait_delivered(canaries, written)
        nursery.cancel_scope.cancel()

    for length, outcome in outcomes:
        assert outcome.goaway_code == ErrorCodes.FRAME_SIZE_ERROR, (length, outcome)
        assert str(length).encode() in outcome.goaway_debug
        assert outcome.closed
    lines = [r.getMessage() for r in caplog.records
             if r.levelno == logging.WARNING and "FRAME_SIZE_ERROR" in r.getMessage()]
    assert len(lines) == len(outcomes), lines
    assert all("127.0.0.1" in line for line in lines)
    for canary in canaries:
        assert canary.disconnects == 0 and canary.error is None, canary
        assert set(written) <= canary.arrivals.keys()


SPREAD_CONNECTIONS = 60
SPREAD_RATE = 60  # resets per second per connection: under the per-connection 100/s
SPREAD_SECS = 3.0


async def _get(port: int, path: str) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = b""
        while chunk := await stream.receive_some(4096):
            got += chunk
    return got


@pytest.mark.parametrize("sync_start", [False, True], ids=["reset", "sync-start-reset"])
async def test_rapid_reset_spread_over_many_connections_is_throttled(
        memory_daemon, sync_start, caplog) -> None:
    """One address, many connections, each under its own budget: the budget they share
    closes them (GOAWAY ENHANCE_YOUR_CALM), the canaries keep receiving, hello lines are
    throttled, and once the attacker has gone readiness answers and no connection is
    left in CLOSE-WAIT with frames nobody will read."""
    caplog.set_level(logging.INFO)
    daemon = await memory_daemon(HealthEnabled="true", HealthPort="0",
                                 HealthHost="127.0.0.1")
    port, health = daemon.ports["server"], daemon.ports["health"]
    outcomes: list = []

    async def attacker() -> None:
        while trio.current_time() < attack_until:
            outcomes.append(await h2_paced_reset(
                "127.0.0.1", port, rate=SPREAD_RATE, sync_start=sync_start,
                seconds=attack_until - trio.current_time()))

    async def attack() -> None:
        nonlocal attack_until
        attack_until = trio.current_time() + SPREAD_SECS
        async with trio.open_nursery() as attackers:
            for _ in range(SPREAD_CONNECTIONS):
                attackers.start_soon(attacker)

    async def after() -> None:
        # The attacker is gone: readiness answers, nothing lingers half-closed.
        assert (await _get(health, "/readiness")).startswith(b"HTTP/1.1 200")
        while close_wait_count(port):  # noqa: ASYNC110 (kernel state, no event)
            await trio.sleep(0.1)

    attack_until = 0.0
    watched = await watched_attack(daemon, f"spread-{sync_start}", attack, after)
    canaries, written = watched.canaries, watched.written
    attack_started, attack_ended = watched.started, watched.ended

    calm = [o for o in outcomes if o.goaway_code == ErrorCodes.ENHANCE_YOUR_CALM]
    assert calm, outcomes[:3]
    assert any(b"across connections" in o.goaway_debug for o in calm)
    assert all(b"rapid_reset" in o.goaway_debug for o in calm)
    for canary in canaries:
        assert canary.received_between(attack_started, attack_ended) > 0, canary.protocol
        assert set(written) <= canary.arrivals.keys()
        assert canary.disconnects == 0 and canary.error is None
    hellos = [r for r in caplog.records if r.getMessage().startswith("Received Hello")]
    # Two canaries' hellos, then at most a burst per 10 s interval from the address.
    assert len(hellos) <= 2 + 10 * 2, len(hellos)
    # One closing WARNING per address per interval, not one per connection.
    calm_lines = [r for r in caplog.records if "ENHANCE_YOUR_CALM" in r.getMessage()]
    assert 1 <= len(calm_lines) <= 2, [r.getMessage() for r in calm_lines]
