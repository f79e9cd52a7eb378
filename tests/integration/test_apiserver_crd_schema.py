"""The test bed holds only Calico CRD objects kube-apiserver would accept.

kube-apiserver validates ``crd.projectcalico.org/v1`` objects against Calico's CRD schemas
(``libcalico-go/config/crd/crd.projectcalico.org_*.yaml``, generated from
``libcalico-go/lib/apis/crd.projectcalico.org/v1``: the v3 spec types, except
BlockAffinity's and IPAMBlock's, which are ``libcalico-go/lib/apis/internalapi``'s).  A
wrongly typed or missing required field is a 422 with a ``Status`` of reason ``Invalid``
and one cause per field.  Driven with the official ``kubernetes`` client over loopback.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from testbed.apiserver import ApiServer, open_apiserver
from testbed.apiserver.status import ApiError
from testbed.cluster import in_calico_group
from trio_typha.datastore.seed import load_seed_file
from trio_typha.model import kinds as K

T = TypeVar("T")
CRD, V3 = K.CALICO_CRD_GROUP, K.CALICO_V3_GROUP
SEED = Path(__file__).parents[2] / "testbed" / "seeds" / "all-kinds.yaml"
AFFINITY = K.calico_kind("BlockAffinity", CRD)


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


async def refused(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """Run a call the server must refuse with 422; its Status body."""
    with pytest.raises(ApiException) as exc:
        await call(fn, *args)
    assert exc.value.status == 422
    body: dict[str, Any] = json.loads(exc.value.body)
    return body


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with open_apiserver(calico_groups=(CRD, V3)) as srv:
        yield srv


@pytest.fixture
async def custom(server: ApiServer, tmp_path: Path) -> AsyncIterator[client.CustomObjectsApi]:
    api = await call(config.new_client_from_config,
                     config_file=str(server.kubeconfig_path(tmp_path)))
    yield client.CustomObjectsApi(api)
    await call(api.close)


def affinity(deleted: Any, group: str = CRD, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{group}/{'v1' if group == CRD else 'v3'}", "kind": "BlockAffinity",
            "metadata": {"name": "node-1-10-244-1-0-26"},
            "spec": {"state": "confirmed", "node": "node-1", "cidr": "10.244.1.0/26",
                     "deleted": deleted, **spec}}


async def test_a_bool_where_the_crd_declares_a_string_is_422(
        custom: client.CustomObjectsApi, server: ApiServer) -> None:
    body = await refused(custom.create_cluster_custom_object, CRD, "v1", "blockaffinities",
                         affinity(False))
    why = 'Invalid value: "boolean": spec.deleted in body must be of type string: "boolean"'
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'BlockAffinity.crd.projectcalico.org "node-1-10-244-1-0-26" is invalid: '
                   f"spec.deleted: {why}",
        "reason": "Invalid",
        "details": {"name": "node-1-10-244-1-0-26", "group": CRD, "kind": "BlockAffinity",
                    "causes": [{"reason": "FieldValueInvalid", "message": why,
                                "field": "spec.deleted"}]},
        "code": 422}
    assert server.store.count(AFFINITY) == 0
    # The string the CRD declares is stored; projectcalico.org/v3 declares a bool.
    await call(custom.create_cluster_custom_object, CRD, "v1", "blockaffinities",
               affinity("false"))
    await call(custom.create_cluster_custom_object, V3, "v3", "blockaffinities",
               affinity(False, V3))


async def test_every_refused_field_is_a_cause(custom: client.CustomObjectsApi) -> None:
    bad = affinity(1, node=["node-1"])
    del bad["spec"]["cidr"]
    body = await refused(custom.create_cluster_custom_object, CRD, "v1", "blockaffinities",
                         bad)
    assert [(c["reason"], c["field"]) for c in body["details"]["causes"]] == [
        ("FieldValueInvalid", "spec.node"), ("FieldValueRequired", "spec.cidr"),
        ("FieldValueInvalid", "spec.deleted")]
    assert body["message"].endswith(
        'is invalid: [spec.node: Invalid value: "array": spec.node in body must be of type '
        'string: "array", spec.cidr: Required value, spec.deleted: Invalid value: "integer": '
        'spec.deleted in body must be of type string: "integer"]')


async def test_nested_fields_and_int_or_string(custom: client.CustomObjectsApi) -> None:
    """A rule's port is an IntOrString-like numorstring.Port (``x-kubernetes-int-or-string``):
    a number or a string, nothing else; deeper fields are checked at their paths."""
    def gnp(port: Any, action: Any = "Allow") -> dict[str, Any]:
        return {"apiVersion": f"{CRD}/v1", "kind": "GlobalNetworkPolicy",
                "metadata": {"name": f"p-{type(port).__name__}"},
                "spec": {"ingress": [{"action": action, "protocol": "TCP",
                                      "destination": {"ports": [port]}}]}}
    for port in (80, "http"):
        await call(custom.create_cluster_custom_object, CRD, "v1", "globalnetworkpolicies",
                   gnp(port))
    body = await refused(custom.create_cluster_custom_object, CRD, "v1",
                         "globalnetworkpolicies", gnp(True, action=None))
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == [
        # A null is pruned first, so a required field holding one is missing.
        ("spec.ingress[0].action", "Required value"),
        ("spec.ingress[0].destination.ports[0]",
         'Invalid value: "boolean": spec.ingress[0].destination.ports[0] in body must be of '
         'type integer,string: "boolean"')]


async def test_patches_and_direct_writes_are_checked_too(
        custom: client.CustomObjectsApi, server: ApiServer) -> None:
    await call(custom.create_cluster_custom_object, CRD, "v1", "blockaffinities",
               affinity("false"))
    await refused(custom.patch_cluster_custom_object, CRD, "v1", "blockaffinities",
                  "node-1-10-244-1-0-26", {"spec": {"deleted": True}})
    stored = server.store.get(AFFINITY, "", "node-1-10-244-1-0-26")
    assert stored is not None and stored["spec"]["deleted"] == "false"
    with pytest.raises(ApiError) as exc:
        server.store.create(AFFINITY, {**affinity(False), "metadata": {"name": "direct"}})
    assert exc.value.code == 422 and exc.value.reason == "Invalid"


async def test_the_seed_moved_into_the_crd_group_is_accepted(server: ApiServer) -> None:
    """Every projectcalico.org/v3 document of the seed, in the CRD form Calico's backend
    writes (``in_calico_group``), is one kube-apiserver accepts; the same documents with
    only their apiVersion changed are not (BlockAffinity's ``deleted`` is a bool)."""
    served = {k.key for k in server.surface.kinds}
    moved = 0
    for doc in load_seed_file(str(SEED)):
        if not doc["apiVersion"].startswith(f"{V3}/"):
            continue
        kind, obj = in_calico_group(doc, CRD)
        if (kind.group, kind.plural) not in served:  # derived in KDD mode: no CRD
            continue
        server.store.create(kind, obj)
        moved += 1
        swapped = {**doc, "apiVersion": kind.api_version,
                   "metadata": {**doc["metadata"], "name": "swapped"}}
        if kind.kind == "BlockAffinity":
            with pytest.raises(ApiError, match='spec.deleted in body must be of type string'):
                server.store.create(kind, swapped)
    assert moved >= 20
