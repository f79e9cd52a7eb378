"""KubeVirt VirtualMachineInstanceMigration -> Calico LiveMigration, as Calico's KDD backend
derives it.

Mirrors libcalico-go v3.32.1 ``k8s/resources/livemigration.go``: in KDD mode a LiveMigration
is not stored anywhere; each ``kubevirt.io/v1`` VirtualMachineInstanceMigration (VMIM) in a
phase from ``Scheduling`` to ``Running``, or ``Failed``, that names its VMI and has a UID,
stands for one LiveMigration of the same namespace and name.  Its target is the
virt-launcher pod that carries the migration's UID and the VMI's name (under either label
KubeVirt uses for it); its source, once KubeVirt reports the source pod, is that pod.  A VMIM
in any other phase stands for nothing, so one that leaves those phases withdraws its
LiveMigration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .k8s_meta import (
    CALICO_API_VERSION,
    ORCHESTRATOR_K8S,
    go_time,
    mapping,
    sorted_map,
    str_or_empty,
)

LIVE_MIGRATION_KIND = "LiveMigration"

# Phases in which a VMIM has a LiveMigration (``vmimShouldEmitLiveMigration``).
EMITTING_PHASES = frozenset({"Scheduling", "Scheduled", "PreparingTarget", "TargetReady",
                             "Running", "Failed"})

# Labels of KubeVirt's virt-launcher pods (kubevirt.io/api core/v1).
LABEL_VMI_ID = "vmi.kubevirt.io/id"
LABEL_VM_NAME = "vm.kubevirt.io/name"
LABEL_MIGRATION_JOB_UID = "kubevirt.io/migrationJobUID"


def vmim_to_live_migration(vmim: Mapping[str, Any]) -> dict[str, Any] | None:
    """The v3 LiveMigration a VMIM stands for, or None when it stands for none."""
    meta = mapping(vmim.get("metadata"))
    spec = mapping(vmim.get("spec"))
    status = mapping(vmim.get("status"))
    vmi = str_or_empty(spec.get("vmiName"))
    uid = str_or_empty(meta.get("uid"))
    if str_or_empty(status.get("phase")) not in EMITTING_PHASES or not vmi or not uid:
        return None
    namespace = str_or_empty(meta.get("namespace"))

    metadata: dict[str, Any] = {"name": str_or_empty(meta.get("name"))}
    if namespace:
        metadata["namespace"] = namespace
    metadata["uid"] = uid
    if meta.get("resourceVersion"):
        metadata["resourceVersion"] = str(meta["resourceVersion"])
    metadata["creationTimestamp"] = go_time(meta.get("creationTimestamp"))
    for field in ("labels", "annotations"):
        if meta.get(field):
            metadata[field] = sorted_map(mapping(meta[field]))

    selector = (f"({LABEL_VMI_ID} == '{vmi}' || {LABEL_VM_NAME} == '{vmi}') && "
                f"{LABEL_MIGRATION_JOB_UID} == '{uid}'")
    live_spec: dict[str, Any] = {}
    source_pod = str_or_empty(mapping(status.get("migrationState")).get("sourcePod"))
    if source_pod:
        live_spec["source"] = {"workload": {"orchestratorID": ORCHESTRATOR_K8S,
                                            "workloadID": f"{namespace}/{source_pod}"}}
    live_spec["target"] = {"selector": selector}
    return {
        "kind": LIVE_MIGRATION_KIND,
        "apiVersion": CALICO_API_VERSION,
        "metadata": metadata,
        "spec": live_spec,
    }
