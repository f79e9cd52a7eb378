"""Reading Typha's EndpointSlices: Typha's replica count and the client's ready addresses."""

from __future__ import annotations

from trio_typha.model.endpoint_slices import (
    SliceEndpoint,
    count_typhas,
    slice_endpoints,
)


def slice_(ports, *endpoints):
    return {"ports": ports, "endpoints": list(endpoints)}


def ep(*addresses, ready=None, node=""):
    out = {"addresses": list(addresses), "nodeName": node}
    if ready is not None:
        out["conditions"] = {"ready": ready}
    return out


TYPHA_PORT = [{"name": "calico-typha", "port": 5473, "protocol": "TCP"}]


def test_count_is_distinct_addresses_behind_the_named_port_ready_or_not() -> None:
    slices = [
        slice_(TYPHA_PORT, ep("10.0.0.1", node="a"), ep("10.0.0.2", ready=False)),
        # The same replica in a second slice counts once.
        slice_(TYPHA_PORT, ep("10.0.0.1"), ep("10.0.0.3", ready=True)),
        # A slice without the named port does not count at all.
        slice_([{"name": "metrics", "port": 9093}], ep("10.0.0.9")),
        slice_([{"port": 5473}], ep("10.0.0.8")),  # unnamed port
        slice_(None, ep("10.0.0.7")),
        {"endpoints": None},
    ]
    assert count_typhas(slices, "calico-typha") == 3
    assert count_typhas(slices, "metrics") == 1
    assert count_typhas([], "calico-typha") == 0


def test_every_endpoint_with_its_readiness_absent_meaning_ready() -> None:
    slices = [slice_(TYPHA_PORT, ep("10.0.0.1", node="a"), ep("10.0.0.2", ready=False),
                     ep("10.0.0.3", ready=True))]
    assert slice_endpoints(slices, "calico-typha") == [
        SliceEndpoint("10.0.0.1", 5473, "a", True), SliceEndpoint("10.0.0.2", 5473, "", False),
        SliceEndpoint("10.0.0.3", 5473, "", True)]
