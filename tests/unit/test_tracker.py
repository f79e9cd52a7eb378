"""The source tracker: derived keys become New / Updated / Deleted correctly."""

from __future__ import annotations

from trio_typha.datastore.base import ResourceEvent
from trio_typha.model.kinds import POD
from trio_typha.model.kv import UpdateType
from trio_typha.model.syncers import ConvertedKV, SyncerDefinition
from trio_typha.syncer.tracker import SourceTracker


def convert(kind, obj, *, key=None):
    if obj.get("boom"):
        raise ValueError("bad object")
    return [ConvertedKV(f"/k/{k}", v.encode()) for k, v in obj["keys"].items()]


DEF = SyncerDefinition("felix", (POD,), convert, (ConvertedKV("/static", b"s"),))


def ev(keys=None, rev="1", **extra):
    obj = None if keys is None else {"keys": keys, **extra}
    return ResourceEvent(POD, "ns", "p", obj, rev)


def test_new_updated_deleted_derived_keys() -> None:
    t = SourceTracker(DEF)
    first = t.apply(ev({"a": "1", "b": "1"}, "1"))
    assert {(u.key, u.update_type) for u in first} == {("/k/a", UpdateType.NEW),
                                                       ("/k/b", UpdateType.NEW)}
    second = t.apply(ev({"a": "2", "c": "1"}, "2"))
    assert {(u.key, u.update_type, u.value) for u in second} == {
        ("/k/a", UpdateType.UPDATED, b"2"), ("/k/c", UpdateType.NEW, b"1"),
        ("/k/b", UpdateType.DELETED, None)}
    # Go Typha: updates carry the object's revision, every deletion Revision "".
    assert {u.key: u.revision for u in second} == {"/k/a": "2", "/k/c": "2", "/k/b": ""}
    gone = t.apply(ev(None, "3"))
    assert {(u.key, u.update_type, u.revision) for u in gone} == {
        ("/k/a", UpdateType.DELETED, ""), ("/k/c", UpdateType.DELETED, "")}
    assert len(t) == 0


def test_conversion_error_treated_as_absent() -> None:
    t = SourceTracker(DEF)
    t.apply(ev({"a": "1"}))
    out = t.apply(ev({"a": "1"}, "2", boom=True))
    assert [(u.key, u.update_type) for u in out] == [("/k/a", UpdateType.DELETED)]
    assert t.conversion_errors == 1


def test_static_keys() -> None:
    [u] = SourceTracker(DEF).static_updates()
    assert (u.key, u.value, u.revision, u.update_type) == ("/static", b"s", "1", UpdateType.NEW)


def test_profile_revisions_follow_calico() -> None:
    from trio_typha.model import kinds as K
    from trio_typha.model.syncers import DatastoreMode, syncer_definition
    t = SourceTracker(syncer_definition("felix", DatastoreMode.KDD))
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "prod", "uid": "11111111-2222-3333-4444-555555555555",
                       "resourceVersion": "42", "creationTimestamp": "2024-01-01T00:00:00Z"}}
    sa = {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": "default", "namespace": "prod", "resourceVersion": "43",
                       "uid": "11111111-2222-3333-4444-666666666666",
                       "creationTimestamp": "2024-01-01T00:00:00Z"}}
    ns_updates = t.apply(ResourceEvent(K.NAMESPACE, "", "prod", ns, "42"))
    sa_updates = t.apply(ResourceEvent(K.SERVICE_ACCOUNT, "prod", "default", sa, "43"))
    assert ns_updates and {u.revision for u in ns_updates} == {"42/"}
    assert sa_updates and {u.revision for u in sa_updates} == {"/43"}
