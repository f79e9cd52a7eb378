"""Flood budgets shared across connections: token buckets per address and per process,
and which connections an overdraft closes (no event loop: the tests pass the time)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.protocols.grpc.abuse import Flood, FloodGuard
from trio_typha.sessions.budgets import SharedBudgets, SharedLimits, TokenBucket

LIMITS = SharedLimits(per_address={"rapid_reset": 100}, per_process={"rapid_reset": 300},
                      burst_seconds=1.0, half_life=5.0, offender_score=20.0)


def test_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=10, burst=5, now=0.0)
    assert all(bucket.take(0.0) for _ in range(5))
    assert not bucket.take(0.0)
    assert bucket.take(0.1) and not bucket.take(0.1)  # one token per 0.1 s
    assert bucket.full(100.0) and bucket.tokens == 5


@given(st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=1, max_size=200))
def test_bucket_never_grants_more_than_burst_plus_rate_times_time(gaps: list[float]) -> None:
    bucket = TokenBucket(rate=20, burst=10, now=0.0)
    now = granted = 0.0
    for gap in gaps:
        now += gap
        granted += bucket.take(now)
    assert granted <= 10 + 20 * now + 1e-9


def test_spread_flood_closes_the_busy_connections_once_the_address_runs_dry() -> None:
    budgets = SharedBudgets(LIMITS)
    attackers = [budgets.account("10.0.0.9") for _ in range(10)]
    closed: set[int] = set()
    t = 0.0
    for _ in range(40):  # 40 rounds of one reset per attacker, 10 ms apart: 1000/s in all
        t += 0.01
        for i, a in enumerate(attackers):
            if i not in closed and (od := a.charge("rapid_reset", t)) is not None:
                closed.add(i)
                assert od.scope == "address 10.0.0.9" and od.rate == 100
                assert od.score >= LIMITS.offender_score
                assert str(od).startswith("rapid_reset flood across connections")
    # Each under any per-connection cap, yet all are closed but what the address's refill
    # (100/s, one token per round here) keeps admitting: the first to charge each round.
    assert closed == set(range(1, 10))
    assert budgets.overdrafts["rapid_reset"] == 9


def test_a_cheap_connection_is_admitted_even_when_its_address_is_dry() -> None:
    budgets = SharedBudgets(LIMITS)
    attacker = budgets.account("127.0.0.1")
    for i in range(200):
        attacker.charge("rapid_reset", i * 0.001)
    canary = budgets.account("127.0.0.1")
    # A client that cancels a few streams on the same address is never the offender.
    assert all(canary.charge("rapid_reset", 0.2 + i * 0.01) is None for i in range(10))
    assert any(attacker.charge("rapid_reset", 0.3) is not None for _ in range(5))


def test_other_addresses_draw_on_the_process_budget_only() -> None:
    budgets = SharedBudgets(LIMITS)
    verdicts = []
    t = 0.0
    for n in range(200):  # 20 addresses, 10 connections each, none over its address budget
        accounts = [budgets.account(f"10.1.{n}.{i}") for i in range(10)]
        for a in accounts:
            for _ in range(25):
                t += 0.0001
                verdicts.append(a.charge("rapid_reset", t))
    overdrafts = [v for v in verdicts if v is not None]
    assert overdrafts and {v.scope for v in overdrafts} == {"process"}


def test_scores_decay_so_a_quiet_connection_stops_being_an_offender() -> None:
    budgets = SharedBudgets(LIMITS)
    a = budgets.account("10.0.0.1")
    for i in range(400):
        a.charge("rapid_reset", i * 0.001)
    assert a.score("rapid_reset", 0.4) > LIMITS.offender_score
    assert a.score("rapid_reset", 0.4 + 10 * LIMITS.half_life) < 1
    # The address budget has refilled by then too: the next charge is admitted.
    assert a.charge("rapid_reset", 0.4 + 10 * LIMITS.half_life) is None


def test_kinds_without_a_shared_budget_are_never_charged() -> None:
    budgets = SharedBudgets(LIMITS)
    a = budgets.account("10.0.0.1")
    assert all(a.charge("window_update", i * 1e-6) is None for i in range(10_000))


@settings(max_examples=50)
@given(st.integers(min_value=1, max_value=50), st.integers(min_value=1, max_value=40))
def test_connections_under_the_offender_score_are_never_closed(conns: int, each: int) -> None:
    # However many share an address, a connection that has charged fewer frames than the
    # offender score is admitted.
    budgets = SharedBudgets(SharedLimits(per_address={"new_streams": 1},
                                         per_process={"new_streams": 1}, burst_seconds=1.0,
                                         offender_score=50.0))
    accounts = [budgets.account("10.0.0.1") for _ in range(conns)]
    assert all(a.charge("new_streams", 0.0) is None for a in accounts for _ in range(each))


def test_address_table_is_bounded() -> None:
    budgets = SharedBudgets(SharedLimits(max_addresses=100))
    for i in range(1000):
        budgets.account(f"10.2.{i // 256}.{i % 256}").charge("ping", i * 10.0)
    assert len(budgets._addresses) <= 100


def test_flood_guard_reports_an_overdraft_as_a_flood_of_its_kind() -> None:
    budgets = SharedBudgets(LIMITS)
    guards = [FloodGuard(shared=budgets.account("10.0.0.7")) for _ in range(20)]
    reports = []
    t = 0.0
    for _ in range(30):  # 30 resets each, far under the per-connection 100/s
        t += 0.02
        for g in guards:
            if (r := g.count(Flood.RAPID_RESET, t)) is not None:
                reports.append(r)
    assert reports
    assert all(r.kind is Flood.RAPID_RESET and r.shared is not None for r in reports)
    assert str(reports[0]).startswith("rapid_reset flood across connections")
    assert "address 10.0.0.7's shared budget of 100/s" in str(reports[0])


def test_pings_of_a_peer_we_are_sending_data_are_not_charged_to_the_shared_budget() -> None:
    # grpcio probes its bandwidth with PINGs while it reads a snapshot: a thousand such
    # readers on one address must not empty the address's bucket into closing them.
    budgets = SharedBudgets(SharedLimits(per_address={"ping": 1}, per_process={"ping": 1},
                                         burst_seconds=1.0, offender_score=5.0))
    reader = FloodGuard(shared=budgets.account("10.0.0.3"))
    idle = FloodGuard(shared=budgets.account("10.0.0.3"))
    t = 0.0
    for _ in range(50):
        t += 0.02
        reader.data_sent(t, 3)
        assert reader.count(Flood.PING, t) is None
    assert any(idle.count(Flood.PING, t + i * 0.01) is not None for i in range(50))


def test_an_address_that_keeps_reconnecting_gets_a_lower_offender_score() -> None:
    budgets = SharedBudgets(LIMITS)
    t = 0.0
    costs = []  # resets each new connection got in before it was closed
    for _ in range(40):
        conn = budgets.account("10.0.0.66")
        n = 0
        while True:
            t += 0.001
            n += 1
            if conn.charge("rapid_reset", t) is not None:
                break
        costs.append(n)
    assert costs[-1] < costs[1] and costs[-1] >= LIMITS.min_offender_score
    assert budgets.offender_score("10.0.0.66", "rapid_reset", t) < LIMITS.offender_score
    # Other addresses, and the same one once it has been quiet a while, are unaffected.
    assert budgets.offender_score("10.0.0.67", "rapid_reset", t) == LIMITS.offender_score
    quiet = t + 20 * LIMITS.half_life
    assert budgets.offender_score("10.0.0.66", "rapid_reset", quiet) > 0.99 * LIMITS.offender_score


def test_strike_table_is_bounded() -> None:
    budgets = SharedBudgets(SharedLimits(max_addresses=50))
    for i in range(500):
        budgets.strike(f"10.3.{i // 256}.{i % 256}", "ping", float(i))
    assert len(budgets._strikes) <= 50
