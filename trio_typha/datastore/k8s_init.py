"""KDD datastore initialisation, as Typha's ``EnsureInitialized(ctx, "", "typha")``.

Before serving, Typha makes sure ClusterInformation ``default`` exists (a new cluster GUID,
``datastoreReady: true``) with ``typha`` and ``kdd`` among its cluster types, and that the
built-in Tiers exist: ``kube-admin`` (order 1,000, default action Pass), ``default``
(1,000,000, Deny) and ``kube-baseline`` (10,000,000, Pass).  Typha retries until that works;
here a replica without write permission (RBAC 401/403) skips it with one log line and
serves anyway: the objects are usually created by calico-node or the operator.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ..model.kinds import calico_kind
from .k8s_api import KubeApi, resource_path
from .k8s_errors import ApiError

log = logging.getLogger(__name__)

CLUSTER_TYPES = ("typha", "kdd")
BUILT_IN_TIERS = (("kube-admin", 1_000, "Pass"), ("default", 1_000_000, "Deny"),
                  ("kube-baseline", 10_000_000, "Pass"))  # JSON numbers as Go writes them


#: The verbs initialisation uses per Calico kind (``_get`` then POST, or PUT to complete
#: ClusterInformation); deploy/rbac grants exactly these beside the watcher's list/watch.
WRITES: dict[str, tuple[str, ...]] = {
    "ClusterInformation": ("get", "create", "update"),
    "Tier": ("get", "create"),
}


class InitForbidden(Exception):
    """The credentials may not write what initialisation needs."""


async def ensure_initialized(api: KubeApi, calico_group: str) -> list[str]:
    """Create or complete the objects above; returns what was written (e.g.
    ``["created ClusterInformation default", ...]``).  :class:`InitForbidden` on 401/403."""
    log.info("Initializing the datastore (if needed).")
    done: list[str] = []
    try:
        await _cluster_information(api, calico_group, done)
        for name, order, action in BUILT_IN_TIERS:
            await _tier(api, calico_group, name, order, action, done)
    except ApiError as exc:
        if exc.http_status in (401, 403):
            raise InitForbidden(str(exc)) from None
        raise
    log.info("Datastore initialized.%s", f" ({'; '.join(done)})" if done else "")
    return done


def _base(calico_group: str, kind: str) -> tuple[str, str]:
    k = calico_kind(kind, calico_group)
    return resource_path(k), k.api_version


async def _get(api: KubeApi, path: str) -> dict[str, Any] | None:
    try:
        return await api.get_json(path)
    except ApiError as exc:
        if exc.http_status == 404:
            return None
        raise


async def _cluster_information(api: KubeApi, group: str, done: list[str]) -> None:
    collection, api_version = _base(group, "ClusterInformation")
    current = await _get(api, f"{collection}/default")
    if current is None:
        await api.write_json("POST", collection, {
            "apiVersion": api_version, "kind": "ClusterInformation",
            "metadata": {"name": "default"},
            "spec": {"clusterGUID": uuid.uuid4().hex, "clusterType": ",".join(CLUSTER_TYPES),
                     "datastoreReady": True}})
        done.append("created ClusterInformation default")
        return
    spec = dict(current.get("spec") or {})
    types = [t for t in str(spec.get("clusterType") or "").split(",") if t]
    missing = [t for t in CLUSTER_TYPES if t not in types]
    changed = bool(missing) or not spec.get("clusterGUID") or spec.get("datastoreReady") is None
    if not changed:
        return
    spec["clusterType"] = ",".join(types + missing)
    spec.setdefault("clusterGUID", uuid.uuid4().hex)
    if spec.get("datastoreReady") is None:
        spec["datastoreReady"] = True
    await api.write_json("PUT", f"{collection}/default", {**current, "spec": spec})
    done.append(f"updated ClusterInformation default (clusterType {spec['clusterType']})")


async def _tier(api: KubeApi, group: str, name: str, order: int, action: str,
                done: list[str]) -> None:
    collection, api_version = _base(group, "Tier")
    if await _get(api, f"{collection}/{name}") is not None:
        return
    await api.write_json("POST", collection, {
        "apiVersion": api_version, "kind": "Tier", "metadata": {"name": name},
        "spec": {"order": order, "defaultAction": action}})
    done.append(f"created Tier {name}")

