"""endpoints.encode_workload_endpoint writes exactly what the generic encoder writes
(``dumps(v1.WorkloadEndpoint, value)``), or fails the same way, for the values the pod
conversion makes and for values of every other shape."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_k8s_properties import pods

from trio_typha.model.endpoints import (
    _WEP,
    encode_workload_endpoint,
    workload_endpoint_value,
)
from trio_typha.model.gojson import GoJSONError, dumps
from trio_typha.model.golang import IPNet, NilIPNet, parse_cidr_or_ip
from trio_typha.model.k8s import pod_to_workload_endpoint

_text = st.text(max_size=12) | st.sampled_from(["", "a<b>&c", "\u2028", "\ud800", "é", "\x00"])
_nets = st.one_of(
    st.ip_addresses().map(lambda a: parse_cidr_or_ip(str(a))),
    st.builds(lambda: NilIPNet()),
    st.builds(IPNet, st.binary(min_size=4, max_size=4), st.integers(0, 32)))
# Every field gets the types workload_endpoint_value produces, and others besides (which
# must take the generic encoder's path and raise or encode as it does).
_odd = st.one_of(st.none(), st.integers(-3, 70000), st.booleans(), st.binary(max_size=4),
                 _text, st.lists(_text, max_size=2), st.dictionaries(_text, _text, max_size=2))
_fields: dict[str, st.SearchStrategy[Any]] = {
    "state": _text, "name": _text, "active_instance_id": _text, "generate_name": _text,
    "mac": st.none() | st.binary(min_size=6, max_size=6),
    "profile_ids": st.none() | st.lists(_text, max_size=3),
    "ipv4_nets": st.none() | st.lists(_nets, max_size=2),
    "ipv6_nets": st.none() | st.lists(_nets, max_size=2),
    "labels": st.none() | st.dictionaries(_text, _text, max_size=4),
    "ports": st.just([]) | st.lists(st.fixed_dictionaries(
        {"name": _text, "protocol": st.sampled_from(["tcp", "udp", "sctp", 6, None]),
         "port": st.integers(0, 65535)}), max_size=2),
    "annotations": st.none() | st.dictionaries(_text, _text, max_size=2),
}
values = st.fixed_dictionaries({}, optional={
    name: st.one_of(strategy, _odd) for name, strategy in _fields.items()})


def _same(value: Any) -> None:
    try:
        want: Any = dumps(_WEP, value)
    except (GoJSONError, TypeError, ValueError) as exc:
        want = type(exc)
    try:
        got: Any = encode_workload_endpoint(value)
    except (GoJSONError, TypeError, ValueError) as exc:
        got = type(exc)
    assert got == want


@settings(max_examples=1500, deadline=None)
@given(values)
def test_any_value_encodes_as_the_generic_encoder_does(value: dict[str, Any]) -> None:
    _same(value)


@settings(max_examples=200, deadline=None)
@given(pods())
def test_converted_pods_encode_as_the_generic_encoder_does(pod: dict[str, Any]) -> None:
    wep = pod_to_workload_endpoint(pod)
    value = workload_endpoint_value(wep) if wep is not None else None
    if value is not None:
        _same(value)


def test_not_a_dict_takes_the_generic_path() -> None:
    for value in (None, [], "x"):
        _same(value)
