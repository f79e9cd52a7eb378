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

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from .k8s_meta import CALICO_API_VERSION, ORCHESTRATOR_K8S, go_time, sorted_map
from .shape import as_map, as_str, field_map, field_str, root

LIVE_MIGRATION_KIND = "LiveMigration"

# Phases in which a VMIM has a LiveMigration (``vmimShouldEmitLiveMigration``).
EMITTING_PHASES = frozenset({"Scheduling", "Scheduled", "PreparingTarget", "TargetReady",
                             "Running", "Failed"})

# Labels of KubeVirt's virt-launcher pods (kubevirt.io/api core/v1).
LABEL_VMI_ID = "vmi.kubevirt.io/id"
LABEL_VM_NAME = "vm.kubevirt.io/name"
LABEL_MIGRATION_JOB_UID = "kubevirt.io/migrationJobUID"


def vmim_to_live_migration(vmim: Mapping[str, Any]) -> dict[str, Any] | None:
    """The v3 LiveMigration a VMIM stands for, or None when it stands for none.

    Raises ``MalformedResource`` for a field of the wrong JSON type (Go's decoder refuses
    the object).
    """
    meta = field_map(root(vmim), "metadata")
    spec = field_map(vmim, "spec")
    status = field_map(vmim, "status")
    vmi = field_str(spec, "vmiName")
    uid = field_str(meta, "uid")
    namespace = field_str(meta, "namespace")
    name = field_str(meta, "name")
    rv = field_str(meta, "resourceVersion")
    created = go_time(meta.get("creationTimestamp"))
    labels = _string_map(meta, "labels")
    annotations = _string_map(meta, "annotations")
    source_pod = field_str(as_map(status.get("migrationState"), "status.migrationState"),
                           "sourcePod")
    if field_str(status, "phase") not in EMITTING_PHASES or not vmi or not uid:
        return None

    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["uid"] = uid
    if rv:
        metadata["resourceVersion"] = rv
    metadata["creationTimestamp"] = created
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations

    selector = (f"({LABEL_VMI_ID} == '{vmi}' || {LABEL_VM_NAME} == '{vmi}') && "
                f"{LABEL_MIGRATION_JOB_UID} == '{uid}'")
    live_spec: dict[str, Any] = {}
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


def _string_map(meta: Mapping[str, Any], field: str) -> dict[str, str]:
    """A ``map[string]string`` field, in the order Go marshals it."""
    m = field_map(meta, field)
    return sorted_map({k: as_str(v, f"metadata.{field}[{k!r}]") for k, v in m.items()})
