"""Calico's KDD profile watch: the resourceVersion it stamps on watched Profiles, and how it
lists Namespaces and ServiceAccounts.

Go's behaviour, stated here, is read from Calico v3.32.1:
``libcalico-go/lib/backend/k8s/resources/profile.go`` (``profileWatcher``: ``k8sNSRev`` /
``k8sSARev``, set by bookmarks and by every other event from the converted Profile's own,
never set, resourceVersion; a new watcher per ``Watch`` call), ``k8s/conversion/
conversion.go`` (``NamespaceToProfile`` / ``ServiceAccountToProfile`` leave the Profile's
resourceVersion empty; ``SplitProfileRevision("0")`` is two empty revisions),
``k8s/resources/list_pager.go`` (``NotOlderThan`` only with a resourceVersion) and
``typha/pkg/syncproto/sync_proto.go`` (``SerializeUpdate`` moves a v3 value's
resourceVersion into ``V3ResourceVersion``).
"""

from __future__ import annotations

from typing import Any

from trio_typha.datastore.base import ResourceEvent
from trio_typha.datastore.k8s_profile_watch import ProfileStamps
from trio_typha.datastore.k8s_reflector import KindReflector
from trio_typha.datastore.k8s_stream import WatchEvent
from trio_typha.model import kinds as K
from trio_typha.model.kv import SerializedUpdate
from trio_typha.model.syncers import DatastoreMode, syncer_definition
from trio_typha.syncer.tracker import SourceTracker

V3_PROFILES = "/calico/resources/v3/projectcalico.org/profiles/"


def _ns(name: str, rv: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "resourceVersion": rv, "labels": labels,
                         "uid": "11111111-2222-4333-8444-555555555555",
                         "creationTimestamp": "2024-01-01T00:00:00Z"}}


def _sa(ns: str, name: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv,
                         "uid": "11111111-2222-4333-8444-666666666666",
                         "creationTimestamp": "2024-01-01T00:00:00Z"}}


def _bookmark(rv: str) -> WatchEvent:
    return WatchEvent("BOOKMARK", {"kind": "Namespace", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": rv}})


class _Profiles:
    """The Namespace and ServiceAccount reflectors of one watch, and the felix tracker."""

    def __init__(self) -> None:
        self.stamps = ProfileStamps()
        self.ns = KindReflector(K.NAMESPACE, profile=self.stamps)
        self.sa = KindReflector(K.SERVICE_ACCOUNT, profile=self.stamps)
        self.tracker = SourceTracker(syncer_definition("felix", DatastoreMode.KDD))
        self.ns.listed([], "10")
        self.sa.listed([], "10")
        self.watch_started()

    def watch_started(self) -> None:
        self.ns.watch_started()
        self.sa.watch_started()

    def events(self, reflector: KindReflector, event: WatchEvent) -> list[SerializedUpdate]:
        out: list[SerializedUpdate] = []
        for ev in reflector.watched(event):
            assert isinstance(ev, ResourceEvent)
            out += self.tracker.apply(ev)
        return out

    def v3(self, reflector: KindReflector, event: WatchEvent, profile: str
           ) -> tuple[str, str]:
        """(V3ResourceVersion, Revision) of the v3 Profile ``profile`` the event updates."""
        (u,) = [u for u in self.events(reflector, event) if u.key == V3_PROFILES + profile]
        return u.v3_resource_version, u.revision


def test_a_namespace_profile_carries_the_last_service_account_bookmark() -> None:
    """The difference seen after churn: Go sent ``"/11259"`` for ``kns.churn-*`` Profiles
    created after the ServiceAccount stream's bookmark at 11259."""
    p = _Profiles()
    assert p.events(p.sa, _bookmark("11259")) == []
    assert p.v3(p.ns, WatchEvent("ADDED", _ns("churn-1", "11300")), "kns.churn-1") == (
        "/11259", "11300/")
    # The Namespace side stays empty: its events clear it, only its bookmarks set it.
    assert p.v3(p.ns, WatchEvent("ADDED", _ns("churn-2", "11301")), "kns.churn-2") == (
        "/11259", "11301/")


def test_a_service_account_profile_carries_the_last_namespace_bookmark() -> None:
    p = _Profiles()
    p.events(p.ns, _bookmark("40"))
    assert p.v3(p.sa, WatchEvent("ADDED", _sa("prod", "web", "41")), "ksa.prod.web") == (
        "40/", "/41")
    # A ServiceAccount event clears the ServiceAccount side for the Namespace Profiles.
    p.events(p.sa, _bookmark("45"))
    p.events(p.sa, WatchEvent("MODIFIED", _sa("prod", "web", "46")))
    assert p.v3(p.ns, WatchEvent("ADDED", _ns("prod", "47")), "kns.prod") == ("/", "47/")


def test_each_stream_s_event_clears_only_its_own_side() -> None:
    p = _Profiles()
    p.events(p.ns, _bookmark("50"))
    p.events(p.sa, _bookmark("51"))
    assert p.v3(p.ns, WatchEvent("ADDED", _ns("a", "52")), "kns.a") == ("/51", "52/")
    assert p.v3(p.sa, WatchEvent("ADDED", _sa("a", "x", "53")), "ksa.a.x") == ("/", "/53")
    p.events(p.ns, _bookmark("54"))
    assert p.v3(p.sa, WatchEvent("MODIFIED", _sa("a", "x", "55")), "ksa.a.x") == ("54/", "/55")


def test_deletions_and_dropped_duplicates_still_clear_their_side() -> None:
    """Go stamps every event before its watcher cache decides to drop it: a deletion, or a
    re-sent object at a revision already sent, still clears its stream's revision."""
    p = _Profiles()
    p.events(p.ns, WatchEvent("ADDED", _ns("a", "60")))
    p.events(p.sa, _bookmark("61"))
    assert p.events(p.sa, WatchEvent("DELETED", _sa("a", "gone", "62"))) == []  # never sent
    assert p.v3(p.ns, WatchEvent("MODIFIED", _ns("a", "63", x="1")), "kns.a") == ("/", "63/")
    p.events(p.sa, WatchEvent("ADDED", _sa("a", "x", "64")))
    p.events(p.sa, _bookmark("65"))
    assert p.events(p.sa, WatchEvent("ADDED", _sa("a", "x", "64"))) == []  # same revision
    assert p.v3(p.ns, WatchEvent("MODIFIED", _ns("a", "66", x="2")), "kns.a") == ("/", "66/")


def test_a_restarted_watch_forgets_both_bookmarks() -> None:
    """Either stream ending ends Go's profile watcher; the next ``Watch`` starts a new one
    with both revisions empty."""
    p = _Profiles()
    p.events(p.ns, _bookmark("70"))
    p.events(p.sa, _bookmark("71"))
    p.watch_started()
    assert p.v3(p.ns, WatchEvent("ADDED", _ns("a", "72")), "kns.a") == ("/", "72/")
    assert p.v3(p.sa, WatchEvent("ADDED", _sa("a", "x", "73")), "ksa.a.x") == ("/", "/73")


def test_listed_profiles_carry_no_stamp_and_only_the_v3_profile_takes_one() -> None:
    p = _Profiles()
    p.events(p.sa, _bookmark("80"))
    listed = [u for ev in p.ns.listed([_ns("l", "81")], "82")
              if isinstance(ev, ResourceEvent) for u in p.tracker.apply(ev)]
    assert {(u.key, u.v3_resource_version, u.revision) for u in listed} == {
        (V3_PROFILES + "kns.l", "", "81/"),
        ("/calico/v1/policy/profile/kns.l/rules", "", "81/"),
        ("/calico/v1/policy/profile/kns.l/labels", "", "81/")}
    watched = p.events(p.ns, WatchEvent("MODIFIED", _ns("l", "83", team="b")))
    assert {(u.key, u.v3_resource_version) for u in watched} == {
        (V3_PROFILES + "kns.l", "/80"), ("/calico/v1/policy/profile/kns.l/rules", ""),
        ("/calico/v1/policy/profile/kns.l/labels", "")}


def test_other_kinds_carry_no_stamp() -> None:
    stamps = ProfileStamps()
    pods = KindReflector(K.POD, profile=stamps)
    pods.listed([], "1")
    (ev,) = pods.watched(WatchEvent("ADDED", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "a", "resourceVersion": "2"}}))
    assert isinstance(ev, ResourceEvent) and ev.profile_stamp is None
    assert pods.watched(_bookmark("3")) == [] and stamps.service_account_rv == ""


def test_namespaces_and_service_accounts_are_listed_as_consistent_reads() -> None:
    """Go's profile client lists both with no resourceVersion at first and after a 410
    (``SplitProfileRevision("0")``); other kinds list at ``"0"``.  After repeated watch
    failures every kind lists NotOlderThan the last revision it saw."""
    for kind, fresh in ((K.NAMESPACE, ""), (K.SERVICE_ACCOUNT, ""), (K.POD, "0")):
        r = KindReflector(kind, profile=ProfileStamps())
        assert r.list_rv == fresh
        r.listed([], "90")
        r.expire(gone=False)
        assert r.list_rv == "90"
        r.listed([], "91")
        r.expire()
        assert r.list_rv == fresh
