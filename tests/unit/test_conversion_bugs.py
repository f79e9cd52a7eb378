"""A bug in a conversion crashes the pipeline; it never withdraws policy.

Through the real syncer definitions and :class:`SourceTracker`: a ``TypeError``,
``KeyError`` or ``AttributeError`` raised inside any function a conversion calls (found by
reading ``model/syncers.py``'s ``_Converter``, so a new one is covered when it is added)
propagates with its traceback out of ``SourceTracker.apply``, before the tracker sends or
forgets anything, for every syncer type and datastore that uses that function.  Only the
model's ``ValueError`` family means "Calico refuses this object" (one warning, the object's
keys deleted).  The same bug in a running daemon ends the process:
tests/integration/test_conversion_bug_exits.py.
"""

from __future__ import annotations

import ast
import inspect
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster import in_calico_group
from trio_typha.datastore.events import ResourceEvent
from trio_typha.model import ipam, k8s, syncers
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES, UpdateType
from trio_typha.model.syncers import DatastoreMode, SyncerDefinition, syncer_definition
from trio_typha.syncer.tracker import SourceTracker

SEEDS = Path(__file__).parents[2] / "testbed" / "seeds" / "all-kinds.yaml"
DOCS: list[dict[str, Any]] = [d for d in yaml.safe_load_all(SEEDS.read_text()) if d]
V3, CRD = K.CALICO_V3_GROUP, K.CALICO_CRD_GROUP
BUGS = (TypeError, KeyError, AttributeError)
# etcd reports IPAM blocks and affinities as the v1 values it stores.
ETCD_V1 = [ipam.etcd_v1_object("IPAMBlock",
                               "/calico/ipam/v2/assignment/ipv4/block/10.244.9.0-26",
                               b'{"cidr":"10.244.9.0/26","allocations":[null],'
                               b'"unallocated":[0],"attributes":[]}'),
           ipam.etcd_v1_object("BlockAffinity",
                               "/calico/ipam/v2/host/node-1/ipv4/block/10.244.9.0-26",
                               b'{"state":"confirmed","deleted":false}')]


def _called_by_the_converter() -> list[tuple[Any, str]]:
    """(module, name) of every model function ``_Converter`` calls: the names it calls from
    ``model.syncers``' namespace and the ``k8s.<name>`` conversions."""
    tree = ast.parse(Path(inspect.getfile(syncers)).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Converter")
    found: set[tuple[Any, str]] = set()
    for node in ast.walk(cls):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and inspect.isfunction(getattr(syncers, f.id, None)):
            found.add((syncers, f.id))
        elif (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
              and f.value.id == "k8s"):
            found.add((k8s, f.attr))
    return sorted(found, key=lambda t: (t[0].__name__, t[1]))


CONVERTERS = _called_by_the_converter()


def _definitions() -> Iterator[tuple[str, SyncerDefinition, str]]:
    for syncer in SYNCER_TYPES:
        for mode in DatastoreMode:
            for group in ([V3, CRD] if mode is DatastoreMode.KDD else ["etcd"]):
                yield (f"{syncer}-{mode.name}-{group}",
                       syncer_definition(syncer, mode, calico_group=CRD if group == CRD
                                         else V3), group)


def _events(definition: SyncerDefinition, group: str, rev: int) -> list[ResourceEvent]:
    """Every seed object ``definition`` watches, at revision ``rev``; ``group`` is the API
    group KDD reads Calico's kinds from, or ``"etcd"``."""
    out = []
    for doc in DOCS + (ETCD_V1 if group == "etcd" else []):
        if doc["apiVersion"].startswith(V3 + "/"):
            kind, doc = in_calico_group(doc, V3 if group == "etcd" else group)
        else:
            kind = K.kind_for(doc["apiVersion"], doc["kind"])
        if kind in definition.kinds:
            md = doc["metadata"]
            out.append(ResourceEvent(kind, md.get("namespace") or "" if kind.namespaced else "",
                                     md["name"], doc, str(rev)))
    return out


def _users() -> Iterator[Any]:
    """Each (definition, converter function) pair where the seed objects reach that
    function, with the events that do."""
    for label, definition, group in _definitions():
        events = _events(definition, group, 1)
        for module, name in CONVERTERS:
            real = getattr(module, name)
            calls: list[int] = []
            reached: list[ResourceEvent] = []

            def spy(*a: Any, _real: Callable[..., Any] = real, _calls: list[int] = calls,
                    **kw: Any) -> Any:
                _calls.append(1)
                return _real(*a, **kw)

            setattr(module, name, spy)
            try:
                for ev in events:
                    before = len(calls)
                    definition.convert(ev.kind, ev.obj, key=(ev.namespace, ev.name))
                    if len(calls) > before:
                        reached.append(ev)
            finally:
                setattr(module, name, real)
            if reached:
                yield pytest.param(definition, group, module, name,
                                   {(e.kind, e.namespace, e.name) for e in reached},
                                   id=f"{label}-{name}")


USERS = list(_users())


def test_every_converter_function_is_reached_by_some_syncer() -> None:
    reached = {p.values[3] for p in USERS}
    assert reached == {name for _, name in CONVERTERS}
    assert len(CONVERTERS) >= 20


@pytest.mark.parametrize(("definition", "group", "module", "name", "sources"), USERS)
def test_a_bug_in_a_conversion_crashes_and_withdraws_nothing(
        definition: SyncerDefinition, group: str, module: Any, name: str,
        sources: set[tuple[Any, str, str]], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    tracker = SourceTracker(definition)
    first = [u for ev in _events(definition, group, 1) for u in tracker.apply(ev)]
    held = {u.key for u in first if u.value is not None}
    known = len(tracker)
    later = [ev for ev in _events(definition, group, 2)
             if (ev.kind, ev.namespace, ev.name) in sources]
    for bug in BUGS:
        def injected(*a: Any, _bug: type[Exception] = bug, **kw: Any) -> Any:
            raise _bug("a bug in the conversion")

        monkeypatch.setattr(module, name, injected)
        caplog.clear()
        for ev in later:
            with pytest.raises(bug) as info:
                tracker.apply(ev)
            assert info.traceback[-1].name == "injected"  # the traceback reaches the bug
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(tracker) == known
        monkeypatch.undo()
    # Nothing was forgotten: the objects' next good versions update their keys in place.
    again = [u for ev in later for u in tracker.apply(ev)]
    assert again and not [u for u in again if u.update_type is UpdateType.DELETED]
    assert {u.key for u in again} <= held


def test_a_refused_object_is_withdrawn_with_one_named_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """The other side: an object Calico would refuse (a field of the wrong type) is treated
    as absent, its keys deleted, with one warning that names it."""
    definition = syncer_definition("felix", DatastoreMode.KDD)
    tracker = SourceTracker(definition)
    gnp = K.calico_kind("GlobalNetworkPolicy")
    good = {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "p"}, "spec": {"order": 10, "selector": "all()"}}
    [new] = tracker.apply(ResourceEvent(gnp, "", "p", good, "1"))
    assert (new.key, new.update_type) == ("/calico/v1/policy/GlobalNetworkPolicy//p",
                                          UpdateType.NEW)
    bad = {**good, "spec": {"order": 10, "ingress": [{"action": "Allow", "source": "x"}]}}
    with caplog.at_level(logging.WARNING):
        [gone] = tracker.apply(ResourceEvent(gnp, "", "p", bad, "2"))
    assert (gone.key, gone.update_type) == (new.key, UpdateType.DELETED)
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.getMessage() == (
        "The felix syncer treats GlobalNetworkPolicy /p as absent: it does not convert: "
        "spec.ingress[0].source: expected an object, got a string")
    assert len(tracker) == 0
