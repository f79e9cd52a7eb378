"""The invariant every trio-typha replica and every client must hold once the datastore is
quiet: its KV set is exactly what the conversion layer derives from the datastore's contents.

The checker is independent of the watch path it checks: it reads the datastore afresh (one
list per kind, with the official ``kubernetes`` client, etcd's gRPC API, or a
:class:`~trio_typha.datastore.memory.MemoryStore`), converts every object with the syncer
definitions of :mod:`trio_typha.model.syncers`, applies the same validation, and compares the
result with what a replica's cache or a client's local state holds.  Watches, relists, the
tracker's diffs, breadcrumbs, both protocols and reconnects all sit between the two, so any
update lost, duplicated, reordered or left stale on the way shows up as a difference.

Pure core: :func:`expected_state` and :func:`compare`.  Readers (blocking; from trio call them
in a worker thread): :func:`read_kubernetes`, :func:`read_etcd`, :func:`read_memory`.  Values
are compared byte for byte; revisions are not (the cache keeps a key's old revision when an
update leaves its value unchanged, as Typha does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trio_typha.datastore.etcd_rpc import KeyValue
from trio_typha.model import validation
from trio_typha.model.kinds import CALICO_V3_GROUP, ResourceKind
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate
from trio_typha.model.syncers import DatastoreMode, syncer_definition

__all__ = [
    "DatastoreContents", "Difference", "ExpectedKV", "NotConverged", "Report", "StoredObject",
    "check", "compare", "contents_from_etcd", "expected_state", "expected_states", "read_etcd",
    "read_kubernetes", "read_memory", "state_of", "wait_converged", "watched_kinds",
]


# --- the datastore's contents ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StoredObject:
    kind: ResourceKind
    namespace: str
    name: str
    obj: Mapping[str, Any]
    revision: str

    @property
    def source(self) -> str:
        """How a report names the object, e.g. ``NetworkPolicy churn-0/p-12``."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind.kind} {where}"


@dataclass
class DatastoreContents:
    """Every object of every kind some syncer watches, as one read found them."""

    mode: DatastoreMode
    calico_group: str = CALICO_V3_GROUP
    objects: list[StoredObject] = field(default_factory=list)
    #: kinds the datastore does not serve (CRD not installed): empty, as the watcher treats them
    absent: list[ResourceKind] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.objects)


def watched_kinds(mode: DatastoreMode, calico_group: str = CALICO_V3_GROUP,
                  syncer_types: Iterable[str] = SYNCER_TYPES) -> list[ResourceKind]:
    """Every kind at least one of ``syncer_types`` watches, in first-seen order."""
    kinds: dict[ResourceKind, None] = {}
    for t in syncer_types:
        for kind in syncer_definition(t, mode, calico_group=calico_group).kinds:
            kinds[kind] = None
    return list(kinds)


# --- the expected state (pure) --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ExpectedKV:
    value: bytes
    revision: str
    #: the object it derives from ("" for the static default-allow profile)
    source: str


def expected_state(contents: DatastoreContents, syncer_type: str, *,
                   validation_filter: validation.ValidationFilter | None = None
                   ) -> dict[str, ExpectedKV]:
    """The KV set a replica's ``syncer_type`` cache must hold for ``contents``
    (``validation_filter``: one to share between calls, else a new one)."""
    valid = validation_filter or validation.ValidationFilter()
    definition = syncer_definition(syncer_type, contents.mode,
                                   calico_group=contents.calico_group)
    wanted = set(definition.kinds)
    out: dict[str, ExpectedKV] = {
        kv.key: ExpectedKV(kv.value, definition.static_revision, "")
        for kv in definition.static_kvs}
    for stored in contents.objects:
        if stored.kind not in wanted:
            continue
        revision = definition.source_revision(stored.kind, stored.revision)
        for kv in definition.convert(stored.kind, stored.obj):
            if valid.error(kv.key, kv.value) is None:
                out[kv.key] = ExpectedKV(kv.value, revision, stored.source)
    return out


def expected_states(contents: DatastoreContents,
                    syncer_types: Iterable[str] = SYNCER_TYPES
                    ) -> dict[str, dict[str, ExpectedKV]]:
    valid = validation.ValidationFilter()
    return {t: expected_state(contents, t, validation_filter=valid) for t in syncer_types}


# --- what a replica or client holds -------------------------------------------------------

def state_of(holder: Any) -> dict[str, bytes]:
    """Key -> value of whatever holds a KV set.

    Accepts a replica's cache (``SnapshotCache``, its ``CacheFeed``, or the
    ``SyncerPipeline`` that owns it: ``daemon.pipelines[syncer_type]``); a client
    (``TyphaClient``, ``client.view.SyncView``, the e2e suite's grpcio client: anything with a
    ``.kvs`` mapping); or a plain mapping of key to ``bytes`` or :class:`SerializedUpdate`.
    """
    for attr in ("feed", "cache"):  # pipeline -> feed -> cache
        holder = getattr(holder, attr, holder)
    values_by_key = getattr(holder, "values_by_key", None)
    if callable(values_by_key):
        return {k: v for k, v in values_by_key().items() if v}
    kvs = getattr(holder, "kvs", holder)
    if not isinstance(kvs, Mapping):
        raise TypeError(f"cannot read a KV set from {type(holder).__name__}")
    out: dict[str, bytes] = {}
    for key, v in kvs.items():
        value = v if isinstance(v, bytes | bytearray) else getattr(v, "value", None)
        if value is None and not isinstance(v, SerializedUpdate):
            raise TypeError(f"value of {key!r} is a {type(v).__name__}, not bytes")
        if value:
            out[key] = bytes(value)
    return out


# --- comparing ------------------------------------------------------------------------------

Problem = Literal["missing", "extra", "differing"]


@dataclass(frozen=True, slots=True)
class Difference:
    key: str
    problem: Problem
    expected: bytes | None
    actual: bytes | None
    source: str = ""

    def __str__(self) -> str:
        src = f" (from {self.source})" if self.source else ""
        if self.problem == "missing":
            return f"missing   {self.key}{src}"
        if self.problem == "extra":
            return f"extra     {self.key}: {_short(self.actual)}"
        return (f"differing {self.key}{src}: expected {_short(self.expected)}, "
                f"got {_short(self.actual)}")


def _short(value: bytes | None, limit: int = 160) -> str:
    if value is None:
        return "nothing"
    text = value.decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


@dataclass
class Report:
    """One holder's KV set against the expected one."""

    syncer_type: str
    subject: str
    expected_keys: int
    actual_keys: int
    differences: list[Difference]

    @property
    def ok(self) -> bool:
        return not self.differences

    def _count(self, problem: Problem) -> int:
        return sum(1 for d in self.differences if d.problem == problem)

    @property
    def missing(self) -> int:
        return self._count("missing")

    @property
    def extra(self) -> int:
        return self._count("extra")

    @property
    def differing(self) -> int:
        return self._count("differing")

    def summary(self) -> str:
        return (f"{self.subject or '?'} [{self.syncer_type}]: {self.actual_keys} keys held, "
                f"{self.expected_keys} expected; missing {self.missing}, extra {self.extra}, "
                f"differing {self.differing}")

    def __str__(self) -> str:
        return "\n".join([self.summary(), *(f"  {d}" for d in self.differences)])


def compare(expected: Mapping[str, ExpectedKV], actual: Mapping[str, bytes], *,
            syncer_type: str, subject: str = "") -> Report:
    """Every key missing from ``actual``, extra in it, or holding a different value."""
    diffs: list[Difference] = []
    for key in sorted(expected.keys() | actual.keys()):
        want = expected.get(key)
        got = actual.get(key)
        if want is None:
            diffs.append(Difference(key, "extra", None, got))
        elif got is None:
            diffs.append(Difference(key, "missing", want.value, None, want.source))
        elif got != want.value:
            diffs.append(Difference(key, "differing", want.value, got, want.source))
    return Report(syncer_type, subject, len(expected), len(actual), diffs)


def check(contents: DatastoreContents,
          holders: Iterable[tuple[str, str, Any]]) -> list[Report]:
    """Compare every ``(subject, syncer_type, holder)`` with ``contents``; one report each
    (the expected state is computed once per syncer type)."""
    cache: dict[str, dict[str, ExpectedKV]] = {}
    valid = validation.ValidationFilter()
    reports = []
    for subject, syncer_type, holder in holders:
        if syncer_type not in cache:
            cache[syncer_type] = expected_state(contents, syncer_type,
                                                validation_filter=valid)
        reports.append(compare(cache[syncer_type], state_of(holder),
                               syncer_type=syncer_type, subject=subject))
    return reports


class NotConverged(AssertionError):
    """:func:`wait_converged` ran out of time; the message names every difference left."""

    def __init__(self, reports: list[Report]) -> None:
        super().__init__("\n".join(str(r) for r in reports if not r.ok))
        self.reports = reports


async def wait_converged(read: Callable[[], DatastoreContents],
                         holders: Callable[[], Iterable[tuple[str, str, Any]]], *,
                         within: float = 30.0, interval: float = 0.05) -> list[Report]:
    """Poll until every holder matches the datastore (trio; ``read`` runs in a thread).

    Both sides are read afresh each round: the datastore may still be settling, and clients
    may reconnect (``holders`` is called each time).  Raises :class:`NotConverged` with the
    last round's reports if they differ after ``within`` seconds (trio's clock; the
    round's differences are what a plain ``trio.fail_after`` around it would lose).
    """
    import trio

    reports: list[Report] = []
    with trio.move_on_after(within):
        while True:
            contents = await trio.to_thread.run_sync(read)
            reports = check(contents, holders())
            if all(r.ok for r in reports):
                return reports
            await trio.sleep(interval)
    raise NotConverged(reports)


# --- readers --------------------------------------------------------------------------------

def _complete(kind: ResourceKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """List items omit ``apiVersion`` and ``kind``; the conversions expect them."""
    return {**obj, "apiVersion": kind.api_version, "kind": kind.kind}


# The official client's typed cluster-wide list of each built-in kind (raw JSON is read with
# ``_preload_content=False``: the conversions want the API's own field names).
_K8S_LISTS: dict[str, tuple[str, str]] = {
    "pods": ("CoreV1Api", "list_pod_for_all_namespaces"),
    "namespaces": ("CoreV1Api", "list_namespace"),
    "serviceaccounts": ("CoreV1Api", "list_service_account_for_all_namespaces"),
    "nodes": ("CoreV1Api", "list_node"),
    "services": ("CoreV1Api", "list_service_for_all_namespaces"),
    "endpointslices": ("DiscoveryV1Api", "list_endpoint_slice_for_all_namespaces"),
    "networkpolicies": ("NetworkingV1Api", "list_network_policy_for_all_namespaces"),
}


def read_kubernetes(api_client: Any, *, calico_group: str | None = None,
                    page_size: int = 500) -> DatastoreContents:
    """List every watched kind through the official client's ``ApiClient`` (blocking).

    ``calico_group`` as trio-typha decides it (``CALICO_API_GROUP``, else discovery); kinds
    answered with 404 are recorded as :attr:`DatastoreContents.absent`.
    """
    import json

    import kubernetes

    from trio_typha.datastore.kubernetes import choose_calico_group

    custom = kubernetes.client.CustomObjectsApi(api_client)
    if calico_group is None:
        groups = kubernetes.client.ApisApi(api_client).get_api_versions().groups or []
        calico_group = choose_calico_group(None, {g.name for g in groups})
    contents = DatastoreContents(DatastoreMode.KDD, calico_group)

    def page_of(kind: ResourceKind, token: str) -> Mapping[str, Any]:
        if kind.group in ("", "discovery.k8s.io", "networking.k8s.io"):
            api_name, method = _K8S_LISTS[kind.plural]
            api = getattr(kubernetes.client, api_name)(api_client)
            resp = getattr(api, method)(limit=page_size, _continue=token or None,
                                        _preload_content=False)
            return json.loads(resp.data)
        return custom.list_cluster_custom_object(kind.group, kind.version, kind.plural,
                                                 limit=page_size, _continue=token or None)

    for kind in watched_kinds(DatastoreMode.KDD, calico_group):
        token = ""
        try:
            while True:
                page = page_of(kind, token)
                for item in page.get("items") or []:
                    md = item.get("metadata") or {}
                    contents.objects.append(StoredObject(
                        kind, md.get("namespace") or "", md.get("name") or "",
                        _complete(kind, item), md.get("resourceVersion") or ""))
                token = (page.get("metadata") or {}).get("continue") or ""
                if not token:
                    break
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
            contents.absent.append(kind)
    return contents


def contents_from_etcd(kvs: Iterable[KeyValue]) -> DatastoreContents:
    """Contents of an etcd keyspace (Calico's v3 resources plus the v1 IPAM layout), from its
    key/value pairs; keys of no watched kind and undecodable values are left out, as the
    etcd watcher leaves them out (pure)."""
    from trio_typha.datastore.etcd_layout import KeyParser, decode_value

    kinds = watched_kinds(DatastoreMode.ETCD)
    parser = KeyParser(kinds)
    contents = DatastoreContents(DatastoreMode.ETCD)
    for kv in kvs:
        parsed = parser.parse(kv.key)
        if parsed is None:
            continue
        kind, ns, name = parsed
        try:
            obj = decode_value(kind, name, kv.value)
        except ValueError:
            continue
        contents.objects.append(StoredObject(kind, ns, name, obj, str(kv.mod_revision)))
    return contents


def read_etcd(endpoint: str, *, page_size: int = 500, timeout: float = 10.0
              ) -> DatastoreContents:
    """Range every watched kind's prefix at one revision over etcd's gRPC API (blocking:
    its own trio loop, so a worker thread may call it; plain HTTP endpoints, as the tests'
    real etcd serves)."""
    import trio

    from trio_typha.datastore.etcd_client import EtcdClient
    from trio_typha.datastore.etcd_config import EtcdConfig
    from trio_typha.datastore.etcd_layout import kind_prefix
    from trio_typha.datastore.etcd_rpc import next_page_key, prefix_end

    prefixes = sorted({kind_prefix(k).encode() for k in watched_kinds(DatastoreMode.ETCD)})

    async def read() -> list[KeyValue]:
        kvs: list[KeyValue] = []
        revision = 0
        async with EtcdClient(EtcdConfig(endpoints=(endpoint,)),
                              request_timeout=timeout) as client:
            for prefix in prefixes:
                start, end = prefix, prefix_end(prefix)
                while True:
                    page = await client.range(start, end, revision=revision, limit=page_size)
                    revision = revision or page.header.revision
                    kvs.extend(page.kvs)
                    if not page.more or not page.kvs:
                        break
                    start = next_page_key(page.kvs[-1].key)
        return kvs

    return contents_from_etcd(trio.run(read))


def read_memory(store: Any, *, mode: DatastoreMode = DatastoreMode.KDD,
                calico_group: str = CALICO_V3_GROUP) -> DatastoreContents:
    """Contents of a :class:`~trio_typha.datastore.memory.MemoryStore` (the embedded
    datastore serves its objects as KDD-mode projectcalico.org/v3)."""
    contents = DatastoreContents(mode, calico_group)
    for kind in watched_kinds(mode, calico_group):
        for ns, name, obj in store.objects(kind):
            contents.objects.append(StoredObject(
                kind, ns, name, obj, (obj.get("metadata") or {}).get("resourceVersion", "")))
    return contents
