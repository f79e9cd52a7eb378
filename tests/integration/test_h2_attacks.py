"""Each HTTP/2 flood, from raw peers, against the real daemon while canaries on both
protocols follow a stream of writes: the attacker gets GOAWAY ENHANCE_YOUR_CALM, the
metric counts it, memory stays bounded, and the canaries get every write.  A peer that
breaks framing with an oversized frame gets GOAWAY FRAME_SIZE_ERROR at once."""

from __future__ import annotations

import logging

import pytest
import trio
from h2.errors import ErrorCodes

from testbed.hostile import (
    Attack,
    Canary,
    canary_key,
    h2_flood,
    h2_oversized_frame,
    rss_bytes,
    wait_delivered,
    write_canaries,
)

ATTACKERS = 4
ATTACK_SECS = 1.5


@pytest.fixture
async def daemon(memory_daemon):
    return await memory_daemon()


@pytest.mark.parametrize("kind", list(Attack))
async def test_flood_is_closed_and_canaries_keep_receiving(daemon, kind, caplog) -> None:
    caplog.set_level(logging.INFO)
    port = daemon.ports["server"]
    store = daemon.store
    canaries = [Canary("127.0.0.1", port, proto, prefix=canary_key(f"{kind.value}-"))
                for proto in ("typha", "grpc")]
    async with trio.open_nursery() as nursery:
        for canary in canaries:
            with trio.fail_after(15):
                await nursery.start(canary.run)
        rss_before = rss_bytes()
        stop = trio.Event()
        outcomes = []
        written: list[str] = []

        async def writer() -> None:
            written.extend(await write_canaries(store.put, kind.value, stop))

        async def attacker() -> None:
            # It comes back after each GOAWAY, for at least three rounds and ATTACK_SECS.
            while len(outcomes) < 3 * ATTACKERS or trio.current_time() < attack_until:
                outcomes.append(await h2_flood("127.0.0.1", port, kind, seconds=20))

        nursery.start_soon(writer)
        attack_started = trio.current_time()
        attack_until = attack_started + ATTACK_SECS
        async with trio.open_nursery() as attackers:
            for _ in range(ATTACKERS):
                attackers.start_soon(attacker)
        attack_ended = trio.current_time()
        stop.set()
        with trio.fail_after(20):
            await wait_delivered(canaries, written)
        nursery.cancel_scope.cancel()

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
