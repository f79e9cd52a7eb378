"""Typha's validation filter.

``golden/validation.json`` holds serialized KVs (from the golden conversions, with names,
labels, selectors, ports, protocols, nets, ICMP fields, HTTP matches, BGP and Felix settings
mutated into invalid forms) and whether Calico v3.32.1's v1/v3 validators accepted the Go
value they were serialized from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trio_typha.model.kv import SerializedUpdate, UpdateType
from trio_typha.model.validation import ValidationFilter

GOLDEN = json.loads((Path(__file__).parent / "golden" / "validation.json").read_text("utf-8"))
# One filter for the module: its memos carry over from case to case, as in a pipeline.
validation_error = ValidationFilter().error


@pytest.mark.parametrize("case", GOLDEN, ids=[f"{i}-{c['key']}" for i, c in enumerate(GOLDEN)])
def test_matches_calico_validators(case: dict) -> None:
    why = validation_error(case["key"], case["value"].encode("utf-8"))
    assert (why is None) == case["valid"], why


def test_golden_has_both_outcomes_for_many_kinds() -> None:
    invalid = {c["key"].split("/")[5] if c["key"].startswith("/calico/resources")
               else c["key"].split("/")[3] for c in GOLDEN if not c["valid"]}
    assert {"policy", "host", "profiles", "nodes", "bgppeers", "bgpconfigurations",
            "bgpfilters", "felixconfigurations", "caliconodestatuses"} <= invalid


def test_filter_nulls_failures_and_keeps_the_update_type() -> None:
    good = SerializedUpdate("/calico/v1/policy/GlobalNetworkPolicy//g", b'{"selector":"all()"}',
                            "5", "", 0, UpdateType.UPDATED)
    bad = SerializedUpdate("/calico/resources/v3/projectcalico.org/bgppeers/Bad_Name",
                           b'{"kind":"BGPPeer","metadata":{"name":"Bad_Name"},"spec":{}}',
                           "6", "6", 0, UpdateType.NEW)
    no_name = SerializedUpdate("/calico/v1/host/h/workload/k8s/ns%2fp/endpoint/eth0",
                               b'{"state":"active","name":"","ipv4_nets":["10.0.0.1/32"]}', "7")
    deletion = SerializedUpdate("/calico/v1/policy/GlobalNetworkPolicy//x", None, "8",
                                update_type=UpdateType.DELETED)
    raw = SerializedUpdate("/calico/v1/config/Anything", b"not json", "9")
    out = ValidationFilter()([good, bad, no_name, deletion, raw])
    assert out[0] is good and out[3] is deletion and out[4] is raw
    assert out[1] == SerializedUpdate(bad.key, None, "6", "", 0, UpdateType.NEW)
    assert out[2].value is None and out[2].deleted


def test_unvalidated_values() -> None:
    # Raw strings, booleans, host IPs and profile label maps are not structs.
    for key, value in (("/calico/v1/Ready", b"maybe"), ("/calico/v1/host/n/bird_ip", b"x"),
                       ("/calico/v1/host/n/config/X", b""),
                       ("/calico/v1/policy/profile/p/labels", b'{"bad key!":"v"}')):
        assert validation_error(key, value) is None


def test_flat_struct_verdicts_are_remembered_exactly(monkeypatch) -> None:
    """The memo of flat-struct verdicts (ports, NATs) gives what the walk gives, per value
    and type: ``True`` and ``1`` or ``"1"`` never share a verdict."""
    import json as _json

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from trio_typha.model import validation as V

    key = "/calico/v1/host/n/workload/k8s/ns%2fpod/endpoint/eth0"
    scalar = st.one_of(st.none(), st.booleans(), st.integers(-2, 70000),
                       st.sampled_from(["", "http", "tcp", "udp", "TCP", "sctp", "x y", "1"]))
    port = st.fixed_dictionaries({}, optional={"name": scalar, "protocol": scalar,
                                               "port": scalar})

    @settings(max_examples=500, deadline=None)
    @given(st.lists(port, min_size=1, max_size=3))
    def check(ports: list[dict]) -> None:
        value = _json.dumps({"name": "cali1", "ports": ports}).encode()
        remembering = V.ValidationFilter()
        remembered = [remembering.error(key, value) for _ in range(2)]
        with monkeypatch.context() as m:
            m.setattr(V, "_LEAVES", frozenset())
            walked = V.ValidationFilter().error(key, value)
        assert remembered == [walked, walked]

    check()
