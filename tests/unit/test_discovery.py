"""Agent-side discovery, pure parts: EndpointSlice parsing and ordering, the DNS codec, SRV
ordering, the attempt rotation, and the connection policy's timing on autojump_clock."""

from __future__ import annotations

import contextlib
import random
from collections import Counter

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.client import dns
from trio_typha.client.discovery import (
    AttemptTracker,
    Connector,
    DiscoveryError,
    ReconnectPolicy,
    StaticDiscovery,
    TyphaAddress,
    local_first,
    parse_address,
    parse_endpoint_slices,
)


def slice_(port_name: str | None, endpoints: list[dict], port: int = 5473) -> dict:
    return {"ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": endpoints}


def ep(ip: str, node: str, ready: bool | None = True) -> dict:
    conditions = {} if ready is None else {"ready": ready}
    return {"addresses": [ip], "nodeName": node, "conditions": conditions}


def test_endpoint_slices_ready_named_port_only() -> None:
    slices = [
        slice_("calico-typha", [ep("10.0.0.1", "n1"), ep("10.0.0.2", "n2", ready=False),
                                ep("10.0.0.3", "n3", ready=None)]),
        slice_("metrics", [ep("10.0.0.9", "n9")]),  # no named port: skipped, not fatal
        slice_(None, [ep("10.0.0.8", "n8")]),  # an unnamed port would crash Felix
    ]
    found = parse_endpoint_slices(slices)
    assert found == [TyphaAddress("10.0.0.1", 5473, "n1"), TyphaAddress("10.0.0.3", 5473, "n3")]


def test_endpoint_slices_dedupe_and_garbage() -> None:
    slices = [slice_("calico-typha", [ep("10.0.0.1", "n1")]),
              slice_("calico-typha", [ep("10.0.0.1", "n1"), {"addresses": [None, 7]}]),
              {"ports": [], "endpoints": [ep("1.1.1.1", "x")]}, {}]
    assert [a.addr for a in parse_endpoint_slices(slices)] == ["10.0.0.1:5473"]


def test_local_first_then_shuffled() -> None:
    addrs = [TyphaAddress(f"10.0.0.{i}", 5473, f"n{i % 3}") for i in range(12)]
    firsts = Counter()
    for seed in range(200):
        order = local_first(addrs, "n1", random.Random(seed))
        assert {a.node_name for a in order[:4]} == {"n1"}
        assert {a.node_name for a in order[4:]} == {"n0", "n2"}
        firsts[order[4].addr] += 1
    assert len(firsts) == 8  # every remote Typha gets to be first among the remotes


def test_no_node_name_means_no_preference() -> None:
    addrs = [TyphaAddress("10.0.0.1", 1, ""), TyphaAddress("10.0.0.2", 1, "n")]
    orders = {tuple(a.addr for a in local_first(addrs, "", random.Random(s))) for s in range(20)}
    assert len(orders) == 2


def test_attempt_tracker_rotates() -> None:
    a, b, c = (TyphaAddress(f"10.0.0.{i}", 5473) for i in range(3))
    t = AttemptTracker()
    assert [t.pick([a, b, c]) for _ in range(4)] == [a, b, c, a]
    # The tried set survives a new candidate list (a reconnect re-discovers): only a is
    # tried now, so c then b, then round again.
    assert [t.pick([c, b]) for _ in range(3)] == [c, b, c]
    with pytest.raises(DiscoveryError):
        t.pick([])


@pytest.mark.parametrize("text,expected", [
    ("10.0.0.1:5473", ("10.0.0.1", 5473)), ("typha", ("typha", 5473)),
    ("[::1]:6000", ("::1", 6000)), ("::1", ("::1", 5473)),
])
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    a = parse_address(text)
    assert (a.host, a.port) == expected


@pytest.mark.parametrize("text", ["", ":5", "host:x", "host:70000"])
def test_parse_address_errors(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(text)


# -- DNS -----------------------------------------------------------------------------------

def test_dns_round_trip_with_compression() -> None:
    q = dns.decode_message(dns.encode_query("_calico-typha._tcp.t.ns.svc.cluster.local",
                                            dns.TYPE_SRV, 77))
    assert q.ident == 77 and not q.response and q.questions[0][1] == dns.TYPE_SRV
    reply = dns.encode_response(q, [dns.Record(q.questions[0][0], dns.TYPE_SRV, 5,
                                               dns.Srv(1, 2, 5473, "a.t.ns.svc.cluster.local"))],
                                [dns.Record("a.t.ns.svc.cluster.local", dns.TYPE_A, 5,
                                            "127.0.0.11")])
    msg = dns.decode_message(reply)
    assert msg.response and msg.ident == 77
    assert msg.answers[0].data == dns.Srv(1, 2, 5473, "a.t.ns.svc.cluster.local")
    assert msg.additionals[0].data == "127.0.0.11"
    # The same answer with its owner name compressed to a pointer at the question.
    qname_end = 12 + len(dns.encode_name(q.questions[0][0]))
    compressed = reply[:qname_end + 4] + b"\xc0\x0c" + reply[qname_end + 4 + qname_end - 12:]
    assert dns.decode_message(compressed).answers == msg.answers


@given(st.binary(max_size=200))
def test_dns_decoder_never_crashes(data: bytes) -> None:
    with contextlib.suppress(dns.DnsFormatError):
        dns.decode_message(data)


def test_dns_pointer_loop_is_an_error() -> None:
    looping = bytes.fromhex("0001 8000 0001 0000 0000 0000".replace(" ", "")) + b"\xc0\x0c"
    with pytest.raises(dns.DnsFormatError, match="loop"):
        dns.decode_message(looping)


def test_srv_order_priority_then_weight() -> None:
    low = [dns.Srv(0, 90, 1, "heavy"), dns.Srv(0, 10, 1, "light")]
    high = [dns.Srv(5, 0, 1, "backup")]
    firsts = Counter(dns.order_srv(low + high, random.Random(s))[0].target for s in range(500))
    assert 380 < firsts["heavy"] < 490 and firsts["backup"] == 0
    assert all(dns.order_srv(high + low, random.Random(s))[-1].target == "backup"
               for s in range(50))


# -- the connection policy's timing -------------------------------------------------------

async def test_startup_delay_and_backoff(autojump_clock: trio.abc.Clock) -> None:
    """Start-up waits uniform(0, max); failures back off exponentially with jitter; a
    success resets; a drop waits uniform(0, reconnect_delay_max)."""
    policy = ReconnectPolicy(startup_delay_max=30, reconnect_delay_max=4, backoff_initial=1,
                             backoff_max=8, backoff_jitter=0.5)
    addr = TyphaAddress("10.0.0.1", 5473)
    starts = []
    for seed in range(40):
        c = Connector(StaticDiscovery([addr]), policy, random.Random(seed))
        t0 = trio.current_time()
        await c.next_address()
        starts.append(trio.current_time() - t0)
    assert all(0 <= s <= 30 for s in starts) and max(starts) - min(starts) > 15

    c = Connector(StaticDiscovery([addr]), policy, random.Random(1))
    await c.next_address()
    gaps = []
    for _ in range(6):
        c.failed()
        t0 = trio.current_time()
        await c.next_address()
        gaps.append(trio.current_time() - t0)
    for gap, base in zip(gaps, [1, 2, 4, 8, 8, 8], strict=True):
        assert base * 0.5 <= gap <= base
    c.connected()
    c.failed()
    t0 = trio.current_time()
    await c.next_address()
    assert trio.current_time() - t0 <= 1  # reset to the initial delay
    c.dropped()
    t0 = trio.current_time()
    await c.next_address()
    assert trio.current_time() - t0 <= 4


async def test_discovery_failure_backs_off(autojump_clock: trio.abc.Clock) -> None:
    class Flaky:
        calls: list[float] = []

        async def discover(self) -> list[TyphaAddress]:
            self.calls.append(trio.current_time())
            if len(self.calls) < 4:
                raise DiscoveryError("nothing yet")
            return [TyphaAddress("10.0.0.1", 5473)]

    flaky = Flaky()
    c = Connector(flaky, ReconnectPolicy(backoff_initial=1, backoff_jitter=0.0),
                  random.Random(0))
    assert (await c.next_address()).addr == "10.0.0.1:5473"
    gaps = [b - a for a, b in zip(flaky.calls, flaky.calls[1:], strict=False)]
    assert gaps == pytest.approx([1, 2, 4])
