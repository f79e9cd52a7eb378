"""Calico's KDD profile watch: how it lists Namespaces and ServiceAccounts, and the
resourceVersion it stamps on the Profiles it derives from their watch events (pure).

Calico v3.32.1 serves Namespaces and ServiceAccounts as one resource, Profiles
(``libcalico-go/lib/backend/k8s/resources/profile.go``).  Its revision joins the two:
``"<namespace rv>/<service account rv>"``.

Listing: the watcher cache lists Profiles at revision ``"0"`` at first and after a 410,
which ``SplitProfileRevision`` (``k8s/conversion/conversion.go``) turns into an empty
resourceVersion for both lists; ``listOptionsToK8sListOptions`` (``k8s/resources/
list_pager.go``) asks for ``resourceVersionMatch=NotOlderThan`` only with a non-empty one,
and client-go's pager adds ``limit=500``.  So Go's first list of either kind is a consistent
read: ``limit=500`` and nothing else (continue pages: ``limit`` and ``continue``) -
:data:`CONSISTENT_LIST_KINDS`.

Stamping: each ``Watch`` call starts a new ``profileWatcher`` whose two revisions start
empty.  A BOOKMARK on either stream sets that stream's revision to the bookmark's.  Any other
event (added, modified, deleted) sets its stream's revision to the resourceVersion of the
converted v3 Profile, which ``NamespaceToProfile`` / ``ServiceAccountToProfile`` never set:
it becomes ``""``; then the joined pair is written into that Profile.  So a ``kns.*``
Profile from a watch carries ``"/<last ServiceAccount bookmark>"`` (``"/"`` when no
ServiceAccount bookmark came since the last ServiceAccount event or since the watch
started) and a ``ksa.*`` Profile ``"<last Namespace bookmark>/"``.  Listed Profiles carry
none (``""``).  Either stream ending ends both (``processProfileEvents`` returns), and the
watcher cache's next ``Watch`` starts afresh: :meth:`ProfileStamps.restart`.
"""

from __future__ import annotations

__sans_io__ = True

from ..model.kinds import NAMESPACE, SERVICE_ACCOUNT, ResourceKind

#: Kinds Calico lists with no resourceVersion at first and after a 410 (consistent reads).
CONSISTENT_LIST_KINDS = frozenset({NAMESPACE, SERVICE_ACCOUNT})


def is_profile_source(kind: ResourceKind) -> bool:
    """Whether Calico's KDD backend reads ``kind`` through its profile client."""
    return kind in CONSISTENT_LIST_KINDS


class ProfileStamps:
    """The two revisions of Calico's ``profileWatcher`` (``k8sNSRev`` / ``k8sSARev``)."""

    def __init__(self) -> None:
        self.namespace_rv = ""
        self.service_account_rv = ""

    def restart(self) -> None:
        """A watch (re)started: a new ``profileWatcher``, both revisions empty."""
        self.namespace_rv = self.service_account_rv = ""

    def bookmark(self, kind: ResourceKind, resource_version: str) -> None:
        """A BOOKMARK on ``kind``'s stream."""
        self._set(kind, resource_version)

    def stamp(self, kind: ResourceKind) -> str:
        """An added, modified or deleted object on ``kind``'s stream: the resourceVersion its
        v3 Profile gets."""
        self._set(kind, "")
        return f"{self.namespace_rv}/{self.service_account_rv}"

    def _set(self, kind: ResourceKind, resource_version: str) -> None:
        if kind == NAMESPACE:
            self.namespace_rv = resource_version
        elif kind == SERVICE_ACCOUNT:
            self.service_account_rv = resource_version
        else:
            raise ValueError(f"{kind} is not a profile source")
