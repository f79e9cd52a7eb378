"""Which connection goes when descriptors run out, and the start-up limit."""

from __future__ import annotations

import resource

from trio_typha.server.fdlimit import raise_nofile_limit, shed_candidate
from trio_typha.sessions.connections import Connection, Session, State


def conn(ident: int, age: float, *, protocol: str = "", state: State | None = None,
         draining: bool = False) -> Connection:
    c = Connection(ident, f"10.0.0.{ident}:5000", protocol=protocol, connected_at=-age,
                   connected_wall=0.0, draining=draining)
    if state is not None:
        c.sessions[ident] = Session(ident, c, protocol or "grpc", state=state)
    return c


WINDOW = 10.0


async def test_past_the_window_sessionless_first_oldest_first():
    conns = [conn(1, 50, protocol="typha-gob", state=State.HANDSHAKE),
             conn(2, 15), conn(3, 30, protocol="grpc"), conn(4, 12),
             conn(5, 99, protocol="grpc", state=State.STREAMING)]
    assert shed_candidate(conns, 0.0, WINDOW).id == 3


async def test_then_handshaking_then_mid_snapshot_never_streaming_or_draining():
    streaming = conn(1, 99, protocol="grpc", state=State.STREAMING)
    snap = conn(2, 80, protocol="grpc", state=State.SNAPSHOT)
    hand = conn(3, 10, protocol="typha-gob", state=State.HANDSHAKE)
    going = conn(4, 999, draining=True)
    assert shed_candidate([streaming, snap, hand, going], 0.0, WINDOW).id == 3
    assert shed_candidate([streaming, snap, going], 0.0, WINDOW).id == 2
    assert shed_candidate([streaming, going], 0.0, WINDOW) is None


async def test_a_fresh_connection_goes_only_after_every_older_one():
    """The scenario of a good client just accepted among idle attackers: the newcomer (not
    even sniffed yet) is never chosen while an older non-streaming connection exists."""
    fresh = conn(1, 0.0)
    idle_attackers = [conn(10 + i, 3.0 + i, protocol="grpc") for i in range(5)]
    old_attackers = [conn(20 + i, 60.0 + i, protocol="grpc") for i in range(5)]
    pool = [fresh, *idle_attackers, *old_attackers]
    order = []
    while (c := shed_candidate(pool, 0.0, WINDOW)) is not None:
        order.append(c.id)
        pool.remove(c)
    assert order == [24, 23, 22, 21, 20, 14, 13, 12, 11, 10, 1]


def test_soft_limit_is_raised_to_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before, after = raise_nofile_limit()
    assert before == soft
    now_soft, now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert now_hard == hard and after == now_soft
    if hard != resource.RLIM_INFINITY:
        assert now_soft == hard
