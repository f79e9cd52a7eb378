"""KubeVirt VirtualMachineInstanceMigrations as the KDD felix syncer serves them: LiveMigrations.

Expected values are worked out from Calico v3.32.1's
``libcalico-go/lib/backend/k8s/resources/livemigration.go`` (``vmimShouldEmitLiveMigration``,
``convertVMIMToLiveMigration``), ``libcalico-go/lib/apis/internalapi/livemigration.go``
(the value's fields) and ``syncersv1/felixsyncer/felixsyncerv1.go`` (LiveMigration is listed
without an update processor, so the v3 value is served as it is; Typha moves its
resourceVersion into V3ResourceVersion).
"""

from __future__ import annotations

from typing import Any

import pytest

from trio_typha.datastore.base import ResourceEvent
from trio_typha.model import kinds as K
from trio_typha.model.kv import UpdateType
from trio_typha.model.syncers import ConvertedKV, DatastoreMode, syncer_definition
from trio_typha.syncer.tracker import SourceTracker

FELIX = syncer_definition("felix", DatastoreMode.KDD)
KEY = "/calico/resources/v3/projectcalico.org/livemigrations/prod/migrate-vm1"
UID = "c05275a7-f85b-42d5-a1d0-acdd49c26d57"


def vmim(phase: str = "Running", source_pod: str | None = "virt-launcher-vm1-abcde",
         **meta: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if source_pod is not None:
        status["migrationState"] = {"sourcePod": source_pod}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "migrate-vm1", "namespace": "prod", "uid": UID,
                         "resourceVersion": "1005",
                         "creationTimestamp": "2024-05-01T12:00:04Z", **meta},
            "spec": {"vmiName": "vm1"}, "status": status}


def served(obj: dict[str, Any]) -> list[ConvertedKV]:
    return FELIX.convert(K.KUBEVIRT_MIGRATION, obj)


SELECTOR = (b"(vmi.kubevirt.io/id == 'vm1' || vm.kubevirt.io/name == 'vm1') \\u0026\\u0026 "
            b"kubevirt.io/migrationJobUID == '" + UID.encode() + b"'")


def test_a_running_migration_is_served_byte_for_byte() -> None:
    # Name, namespace, UID (as it is: no ConvertUID here), creationTimestamp, labels and
    # annotations are copied; the target selects the virt-launcher pod by either VMI label
    # and the migration job's UID; the source is "<namespace>/<sourcePod>" under
    # orchestrator k8s.
    obj = vmim(labels={"z": "1", "a": "2"}, annotations={"note": "x"})
    assert served(obj) == [ConvertedKV(
        KEY,
        b'{"kind":"LiveMigration","apiVersion":"projectcalico.org/v3","metadata":{'
        b'"name":"migrate-vm1","namespace":"prod","uid":"' + UID.encode() + b'",'
        b'"creationTimestamp":"2024-05-01T12:00:04Z","labels":{"a":"2","z":"1"},'
        b'"annotations":{"note":"x"}},"spec":{'
        b'"source":{"workload":{"orchestratorID":"k8s","workloadID":"prod/virt-launcher-vm1-abcde"}},'
        b'"target":{"selector":"' + SELECTOR + b'"}}}',
        "1005")]


def test_early_phases_have_a_target_but_no_source_yet() -> None:
    (kv,) = served(vmim("Scheduling", source_pod=None))
    assert kv.value.endswith(b'"spec":{"target":{"selector":"' + SELECTOR + b'"}}}')
    (kv,) = served(vmim("Scheduled", source_pod=""))
    assert b'"source"' not in kv.value


@pytest.mark.parametrize("phase", ["Scheduling", "Scheduled", "PreparingTarget", "TargetReady",
                                   "Running", "Failed"])
def test_emitting_phases(phase: str) -> None:
    assert [kv.key for kv in served(vmim(phase))] == [KEY]


@pytest.mark.parametrize("phase", ["", "Pending", "WaitingForSync", "Synchronizing",
                                   "Succeeded"])
def test_other_phases_stand_for_no_live_migration(phase: str) -> None:
    assert served(vmim(phase)) == []


def test_a_migration_without_vmi_name_or_uid_stands_for_none() -> None:
    no_vmi = vmim()
    no_vmi["spec"] = {}
    assert served(no_vmi) == []
    assert served(vmim(uid="")) == []


def test_a_migration_that_succeeds_withdraws_its_live_migration() -> None:
    tracker = SourceTracker(FELIX)

    def apply(obj: dict[str, Any], rev: str) -> list[tuple[str, UpdateType, str]]:
        return [(u.key, u.update_type, u.revision) for u in tracker.apply(
            ResourceEvent(K.KUBEVIRT_MIGRATION, "prod", "migrate-vm1", obj, rev))]

    assert apply(vmim("Scheduling", source_pod=None), "10") == [(KEY, UpdateType.NEW, "10")]
    assert apply(vmim("Running"), "11") == [(KEY, UpdateType.UPDATED, "11")]
    assert apply(vmim("Succeeded"), "12") == [(KEY, UpdateType.DELETED, "")]


def test_only_the_kdd_felix_syncer_reads_migrations() -> None:
    for syncer in ("bgp", "tunnel-ip-allocation", "node-status"):
        assert K.KUBEVIRT_MIGRATION not in syncer_definition(syncer, DatastoreMode.KDD).kinds
    etcd = syncer_definition("felix", DatastoreMode.ETCD)
    assert K.KUBEVIRT_MIGRATION not in etcd.kinds
    assert K.calico_kind("LiveMigration") in etcd.kinds  # etcd stores LiveMigrations
