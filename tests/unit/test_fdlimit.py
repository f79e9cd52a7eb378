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


async def test_half_open_first_oldest_first():
    conns = [conn(1, 50, protocol="typha-gob", state=State.HANDSHAKE),
             conn(2, 5), conn(3, 9), conn(4, 99, protocol="grpc", state=State.STREAMING)]
    assert shed_candidate(conns).id == 3


async def test_then_handshaking_then_mid_snapshot_never_streaming_or_draining():
    streaming = conn(1, 99, protocol="grpc", state=State.STREAMING)
    snap = conn(2, 80, protocol="grpc", state=State.SNAPSHOT)
    hand = conn(3, 10, protocol="typha-gob", state=State.HANDSHAKE)
    going = conn(4, 999, draining=True)
    assert shed_candidate([streaming, snap, hand, going]).id == 3
    assert shed_candidate([streaming, snap, going]).id == 2
    assert shed_candidate([streaming, going]) is None


async def test_idle_h2_connection_with_no_session_counts_as_handshaking():
    idle = conn(1, 30, protocol="grpc")  # sniffed, no stream
    streaming = conn(2, 99, protocol="grpc", state=State.STREAMING)
    assert shed_candidate([streaming, idle]).id == 1


def test_soft_limit_is_raised_to_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before, after = raise_nofile_limit()
    assert before == soft
    now_soft, now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert now_hard == hard and after == now_soft
    if hard != resource.RLIM_INFINITY:
        assert now_soft == hard
