"""The source tracker: derived keys become New / Updated / Deleted correctly."""

from __future__ import annotations

from trio_typha.datastore.base import ResourceEvent
from trio_typha.model.kinds import POD
from trio_typha.model.kv import UpdateType
from trio_typha.model.syncers import ConvertedKV, SyncerDefinition
from trio_typha.syncer.tracker import SourceTracker


def convert(kind, obj, *, key=None):
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


def test_every_model_error_is_a_value_error() -> None:
    """The tracker's narrow catch relies on this: each of the model's own exceptions is a
    ValueError."""
    import inspect
    import pkgutil

    import trio_typha.model

    found = []
    for info in pkgutil.walk_packages(trio_typha.model.__path__, "trio_typha.model."):
        module = __import__(info.name, fromlist=["_"])
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == info.name and issubclass(cls, Exception)
                    and not cls.__name__.startswith("_")):
                found.append(cls)
                assert issubclass(cls, ValueError), cls
    assert len(found) >= 5


def test_one_key_many_keys_and_back_keep_types_and_deletion_order() -> None:
    """The tracker keeps one key as itself and several as a tuple (no values: the cache has
    them); going between the two forms, and past the set threshold, loses nothing and
    deletes in the order the keys were produced."""
    t = SourceTracker(DEF)
    many = {f"k{i:02d}": "1" for i in range(12)}
    steps = [({"a": "1"}, [("/k/a", UpdateType.NEW)]),
             ({"a": "2", "b": "1"}, [("/k/a", UpdateType.UPDATED), ("/k/b", UpdateType.NEW)]),
             ({"b": "2"}, [("/k/b", UpdateType.UPDATED), ("/k/a", UpdateType.DELETED)]),
             (many, [(f"/k/{k}", UpdateType.NEW) for k in many] + [("/k/b", UpdateType.DELETED)]),
             ({"k05": "2"}, [("/k/k05", UpdateType.UPDATED)]
              + [(f"/k/{k}", UpdateType.DELETED) for k in many if k != "k05"]),
             (None, [("/k/k05", UpdateType.DELETED)])]
    for rev, (keys, want) in enumerate(steps, 1):
        assert [(u.key, u.update_type) for u in t.apply(ev(keys, str(rev)))] == want
    assert len(t) == 0
