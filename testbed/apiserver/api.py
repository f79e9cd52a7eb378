"""The Kubernetes REST API over the store: one request in, one response (or watch) out.

Pure and synchronous: the HTTP shell parses a request into a :class:`Request`, calls
:meth:`Api.handle`, and either sends the :class:`Response` or streams the
:class:`WatchPlan`.  URL layout, query parameters, resourceVersion semantics and error
``Status`` bodies follow kube-apiserver closely enough for client-go, the official Python
client and trio-typha's watcher to take their normal code paths.

Deliberate simplifications: deletes are immediate (no finalizers, grace periods or
Terminating namespaces); a create keeps the ``status`` it is given even for kinds with a
status subresource (so a churn generator can make a running pod in one call), while
updates and patches honour the subresource split; responses are always JSON; strategic
merge patch acts as a merge patch on built-in kinds and, as on a real server, is refused
(415) for custom resources; server-side apply and dryRun are refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from .patch import PatchError, json_patch, merge_patch
from .resources import ApiSurface, ServedKind
from .selectors import SelectorError, combine, parse_field_selector, parse_label_selector
from .status import (
    ApiError,
    bad_request,
    expired,
    forbidden,
    method_not_allowed,
    no_such_path,
    not_found,
    too_large_resource_version,
    unauthorized,
    unsupported_media_type,
)
from .store import Predicate, Store, Stored, encode_json
from .watch import WatchCursor

DEFAULT_USER = "system:serviceaccount:calico-system:calico-typha"
VERSION_INFO = {"major": "1", "minor": "33", "gitVersion": "v1.33.0",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "2025-04-23T00:00:00Z",
                "goVersion": "go1.24.2", "compiler": "gc", "platform": "linux/amd64"}
_MERGE = "application/merge-patch+json"
_STRATEGIC = "application/strategic-merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str  # the raw request-target, path plus query
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def of(cls, status: int, obj: Any) -> Response:
        return cls(status, encode_json(obj))

    @classmethod
    def error(cls, error: ApiError) -> Response:
        return cls(error.code, encode_json(error.status()))


@dataclass(slots=True)
class WatchPlan:
    """A watch to stream: the cursor, when to stop, whether to send bookmarks."""

    cursor: WatchCursor
    timeout: float
    bookmarks: bool


@dataclass(frozen=True, slots=True)
class _Route:
    kind: ServedKind
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool  # legacy /watch/ URL prefix


def _bool(query: Mapping[str, str], name: str) -> bool | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise bad_request(f'invalid boolean value "{value}" for {name}')


def _int(query: Mapping[str, str], name: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise bad_request(f'{name}: Invalid value: "{value}": must be an integer') from None
    if number < 0:
        raise bad_request(f'{name}: Invalid value: {number}: must be greater than or equal to 0')
    return number


def _revision(value: str, name: str = "resourceVersion") -> int:
    try:
        return int(value)
    except ValueError:
        raise bad_request(f'{name}: Invalid value: "{value}": strconv.ParseUint: '
                          f'parsing "{value}": invalid syntax') from None


def encode_continue(revision: int, last_key: tuple[str, str]) -> str:
    token = {"v": "meta.k8s.io/v1", "rv": revision, "start": list(last_key)}
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        ns, name = data["start"]
        return int(data["rv"]), (str(ns), str(name))
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise bad_request(f'continue key is not valid: "{token}"') from None


def _list_body(kind: ServedKind, metadata: dict[str, Any], items: list[Stored]) -> bytes:
    """A list as kube-apiserver sends it: a built-in kind's items carry no ``apiVersion`` or
    ``kind`` (typed lists); a custom resource's do (unstructured lists keep them).  Watch
    event objects carry them either way."""
    encoded = (s.list_item if kind.builtin else s.raw for s in items)
    return b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[%s]}' % (
        kind.list_kind.encode(), kind.api_version.encode(), encode_json(metadata),
        b",".join(encoded))


class Api:
    """Routes requests to the store.  Test hooks that change answers live here too."""

    def __init__(self, store: Store, surface: ApiSurface, *, token: str | None = None,
                 user: str = DEFAULT_USER, enforce_namespaces: bool = True,
                 default_watch_timeout: float = 1800.0,
                 cache_pagination: bool = False) -> None:
        self.store = store
        #: whether lists served from the watch cache honour ``limit`` (kube-apiserver 1.34+
        #: with ListFromCacheSnapshot); otherwise such lists come whole, as older versions serve them
        self.cache_pagination = cache_pagination
        #: how many lists each layer served: "cache" (the watch cache: resourceVersion=0 or
        #: NotOlderThan) or "storage" (a quorum read of etcd: paginated consistent lists,
        #: exact revisions, continuations)
        self.list_reads: dict[str, int] = {"cache": 0, "storage": 0}
        self.surface = surface
        self.token = token  # when set, requests must carry "Authorization: Bearer <token>"
        self.user = user
        self.enforce_namespaces = enforce_namespaces
        self.default_watch_timeout = default_watch_timeout
        self.server_address = "127.0.0.1:0"
        # (group, plural) -> verbs denied (None: every verb)
        self._forbidden: dict[tuple[str, str], frozenset[str] | None] = {}

    # -- test hooks --------------------------------------------------------------------

    def forbid(self, group: str, plural: str, verbs: set[str] | None = None) -> None:
        """Answer 403 (RBAC-style Status) for ``verbs`` (default: all) on a resource."""
        self._forbidden[(group, plural)] = None if verbs is None else frozenset(verbs)

    def allow(self, group: str, plural: str) -> None:
        self._forbidden.pop((group, plural), None)

    # -- dispatch ------------------------------------------------------------------------

    def handle(self, request: Request) -> Response | WatchPlan:
        try:
            return self._handle(request)
        except ApiError as e:
            return Response.error(e)
        except SelectorError as e:
            return Response.error(bad_request(str(e)))

    def _handle(self, request: Request) -> Response | WatchPlan:
        split = urlsplit(request.target)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        segments = [unquote(s) for s in split.path.split("/") if s]
        method = request.method
        if not segments:
            return Response.of(200, {"paths": self._paths()})
        if segments[0] in ("healthz", "livez", "readyz"):
            return Response(200, b"ok", "text/plain; charset=utf-8")
        if segments == ["version"]:
            return Response.of(200, VERSION_INFO)
        if (self.token is not None
                and request.headers.get("authorization", "") != f"Bearer {self.token}"):
            raise unauthorized()
        if segments[0] == "api":
            group, rest = "", segments[1:]
            if not rest:
                return self._discovery(method, self.surface.api_versions(self.server_address))
        elif segments[0] == "apis":
            if len(segments) == 1:
                return self._discovery(method, self.surface.group_list())
            group, rest = segments[1], segments[2:]
            if not rest:
                return self._discovery(method, self.surface.group(group))
        else:
            raise no_such_path()
        version, rest = rest[0], rest[1:]
        if not rest:
            return self._discovery(method, self.surface.resource_list(group, version))
        route = self._route(group, version, rest)
        return self._resource(request, route, query)

    def _discovery(self, method: str, doc: dict[str, Any] | None) -> Response:
        if doc is None:
            raise no_such_path()
        if method != "GET":
            raise method_not_allowed(method)
        return Response.of(200, doc)

    def _paths(self) -> list[str]:
        paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
        for group, version in self.surface.versions.items():
            if group:
                paths += [f"/apis/{group}", f"/apis/{group}/{version}"]
        return sorted(paths)

    def _route(self, group: str, version: str, rest: list[str]) -> _Route:
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        if not rest:
            raise no_such_path()
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            inner = self.surface.lookup(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        kind = self.surface.lookup(group, version, rest[0])
        if kind is None or len(rest) > 3:
            raise no_such_path()
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if kind.namespaced and namespace is None and name is not None:
            raise no_such_path()
        if subresource is not None and not (subresource == "status"
                                            and kind.status_subresource):
            raise no_such_path()
        return _Route(kind, namespace, name, subresource, watch_path)

    def _resource(self, request: Request, route: _Route,
                  query: dict[str, str]) -> Response | WatchPlan:
        method, name = request.method, route.name
        if route.watch_path and method != "GET":
            raise method_not_allowed(method)
        if method == "GET":
            if name is not None:
                verb = "get"
            elif route.watch_path or _bool(query, "watch"):
                verb = "watch"
            else:
                verb = "list"
        elif method == "POST" and name is None:
            verb = "create"
        elif method == "PUT" and name is not None:
            verb = "update"
        elif method == "PATCH" and name is not None:
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name is not None else "deletecollection"
        else:
            raise method_not_allowed(method)
        denied = self._forbidden.get(route.kind.key, frozenset())
        if denied is None or verb in denied:
            raise forbidden(route.kind, verb, route.namespace, self.user)
        if query.get("dryRun"):
            raise bad_request("dryRun is not supported by the test bed API server")
        if verb == "get":
            return self._get(route)
        if verb == "list":
            return self._list(route, query)
        if verb == "watch":
            return self._watch(route, query)
        if verb == "create":
            return self._create(route, _object_body(request))
        if verb == "update":
            return self._replace(route, _object_body(request))
        if verb == "patch":
            return self._patch(route, request)
        if verb == "delete":
            return self._delete(route, request)
        return self._delete_collection(route, query)

    # -- reads -------------------------------------------------------------------------

    def _existing(self, route: _Route) -> Stored:
        assert route.name is not None
        found = self.store.entry(route.kind, route.namespace or "", route.name)
        if found is None:
            raise not_found(route.kind, route.name)
        return found

    def _get(self, route: _Route) -> Response:
        return Response(200, self._existing(route).raw)

    def _predicate(self, route: _Route, query: Mapping[str, str]) -> Predicate | None:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), route.kind.group,
                                      route.kind.plural)
        return combine(labels, fields)

    def _list(self, route: _Route, query: Mapping[str, str]) -> Response:
        store = self.store
        limit = _int(query, "limit") or 0
        token = query.get("continue", "")
        rv = query.get("resourceVersion", "")
        rv_match = query.get("resourceVersionMatch", "")
        match = self._predicate(route, query)
        if rv_match not in ("", "Exact", "NotOlderThan"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{rv_match}"')
        if rv_match and not rv:
            raise bad_request("resourceVersionMatch: Forbidden: resourceVersionMatch is "
                              "forbidden unless resourceVersion is provided")
        after = None
        revision: int | None = None
        if token:
            if rv not in ("", "0"):
                raise bad_request("specifying resource version is not allowed when using "
                                  "continue")
            revision, after = decode_continue(token)
            if revision == -1:  # an "inconsistent continue" token: carry on at the latest
                revision = None
            elif revision < store.compacted_revision:
                raise expired(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter, or use "
                    "the continue token in this response to retrieve the remainder of the "
                    "results. Continuing with the provided token results in an inconsistent "
                    "list - objects that were created, modified, or deleted between the time "
                    "the first chunk was returned and now may show up in the list.",
                    metadata={"continue": encode_continue(-1, after)})
        elif rv and not (rv == "0" and rv_match != "Exact"):
            requested = _revision(rv)
            # Legacy rule: a paginated list with a resourceVersion and no match is Exact.
            if rv_match == "Exact" or (not rv_match and limit):
                revision = requested
            elif requested > store.revision:
                raise too_large_resource_version(requested, store.revision)
        # Where kube-apiserver serves it from (storage/cacher/delegator.go): a list with
        # any resourceVersion but Exact (legacy or not) comes from the watch cache, at its
        # latest revision, whole unless the cache can paginate; the rest read etcd.
        from_cache = not token and rv != "" and revision is None
        self.list_reads["cache" if from_cache else "storage"] += 1
        if from_cache and not self.cache_pagination:
            limit = 0
        page = store.list(route.kind, route.namespace, revision=revision, after=after,
                          limit=limit, match=match)
        metadata: dict[str, Any] = {"resourceVersion": str(page.revision)}
        if page.last_key is not None:
            metadata["continue"] = encode_continue(page.revision, page.last_key)
            if page.remaining is not None:
                metadata["remainingItemCount"] = page.remaining
        return Response(200, _list_body(route.kind, metadata, page.items))

    def _watch(self, route: _Route, query: Mapping[str, str]) -> WatchPlan:
        rv = query.get("resourceVersion", "")
        rv_match = query.get("resourceVersionMatch", "")
        initial = _bool(query, "sendInitialEvents")
        bookmarks = bool(_bool(query, "allowWatchBookmarks"))
        timeout = _int(query, "timeoutSeconds")
        match = self._predicate(route, query)
        if initial is not None:
            if rv_match != "NotOlderThan":
                raise bad_request("sendInitialEvents: Forbidden: sendInitialEvents is forbidden "
                                  "for watch unless resourceVersionMatch is set to NotOlderThan")
            if initial and not bookmarks:
                raise bad_request("allowWatchBookmarks: Required value: allowWatchBookmarks "
                                  "required when sendInitialEvents is true")
        elif rv_match:
            raise bad_request("resourceVersionMatch: Forbidden: resourceVersionMatch is "
                              "forbidden for watch unless sendInitialEvents is provided")
        start = None if rv in ("", "0") else _revision(rv)
        if initial and start is not None and start > self.store.revision:
            raise too_large_resource_version(start, self.store.revision)
        cursor = WatchCursor(self.store, route.kind, namespace=route.namespace, match=match,
                             start=None if initial else start, initial_events=bool(initial))
        # As kube-apiserver: no timeout, or 0, means the server's default.
        return WatchPlan(cursor, float(timeout or self.default_watch_timeout), bookmarks)

    # -- writes ------------------------------------------------------------------------

    def _check_identity(self, route: _Route, obj: dict[str, Any]) -> dict[str, Any]:
        """Check apiVersion/kind/namespace/name against the URL; returns the metadata."""
        kind = route.kind
        if obj.get("apiVersion") not in (None, "", kind.api_version):
            raise bad_request(f"the API version in the data ({obj['apiVersion']}) does not "
                              f"match the expected API version ({kind.api_version})")
        if obj.get("kind") not in (None, "", kind.kind):
            raise bad_request(f"the kind in the data ({obj['kind']}) does not match the "
                              f"expected kind ({kind.kind})")
        meta = obj.get("metadata") or {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        meta = dict(meta)
        if kind.namespaced:
            if route.namespace is None:
                raise method_not_allowed("POST")
            if meta.get("namespace") not in (None, "", route.namespace):
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            meta["namespace"] = route.namespace
        if route.name is not None and meta.get("name") != route.name:
            raise bad_request(f"the name of the object ({meta.get('name', '')}) does not match "
                              f"the name on the URL ({route.name})")
        return meta

    def _create(self, route: _Route, obj: dict[str, Any]) -> Response:
        kind = route.kind
        meta = self._check_identity(route, obj)
        namespaces = self.surface.by_key("", "namespaces")
        if (kind.namespaced and self.enforce_namespaces and namespaces is not None
                and self.store.entry(namespaces, "", route.namespace or "") is None):
            raise not_found(namespaces, route.namespace or "")
        obj = {**obj, "metadata": meta}
        if kind.key == ("", "namespaces"):
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {**(obj.get("status") or {}), "phase": "Active"}
        created = self.store.create(kind, obj)
        meta = created["metadata"]
        return Response(201, self._entry_raw(kind, meta))

    def _entry_raw(self, kind: ServedKind, meta: Mapping[str, Any]) -> bytes:
        stored = self.store.entry(kind, meta.get("namespace", ""), meta["name"])
        assert stored is not None
        return stored.raw

    def _subresource_rules(self, route: _Route, old: dict[str, Any],
                           new: dict[str, Any]) -> dict[str, Any]:
        """/status writes change only status; main-resource writes keep the old status."""
        if route.subresource == "status":
            out = {k: v for k, v in old.items() if k != "status"}
            out["metadata"] = {**old["metadata"],
                               "resourceVersion": new.get("metadata", {}).get(
                                   "resourceVersion", "")}
            if new.get("status") is not None:
                out["status"] = new["status"]
            return out
        if route.kind.status_subresource:
            out = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                out["status"] = old["status"]
            return out
        return new

    def _replace(self, route: _Route, obj: dict[str, Any]) -> Response:
        meta = self._check_identity(route, obj)
        old = self._existing(route)
        new = self._subresource_rules(route, old.obj, {**obj, "metadata": meta})
        updated = self.store.update(route.kind, new)
        return Response(200, self._entry_raw(route.kind, updated["metadata"]))

    def _patch(self, route: _Route, request: Request) -> Response:
        kind = route.kind
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        old = self._existing(route)
        body = _json_body(request)
        if content_type == _MERGE or (content_type == _STRATEGIC and kind.builtin):
            if not isinstance(body, dict):
                raise bad_request("a merge patch must be a JSON object")
            patched = merge_patch(old.obj, body)
        elif content_type == _JSON_PATCH:
            try:
                patched = json_patch(old.obj, body)
            except PatchError as e:
                raise ApiError(422, "Invalid", f"the server rejected our request due to an "
                                               f"error in our request: {e}") from None
        else:
            raise unsupported_media_type(content_type)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise ApiError(422, "Invalid", "the patched object is not a valid object")
        meta = patched["metadata"]
        if meta.get("name") != route.name or (
                kind.namespaced and meta.get("namespace") != route.namespace):
            raise bad_request("metadata.name and metadata.namespace cannot be patched")
        new = self._subresource_rules(route, old.obj, patched)
        updated = self.store.update(kind, new)
        return Response(200, self._entry_raw(kind, updated["metadata"]))

    def _delete(self, route: _Route, request: Request) -> Response:
        assert route.name is not None
        options = _json_body(request) if request.body.strip() else {}
        if not isinstance(options, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        pre = options.get("preconditions") or {}
        final = self.store.delete(route.kind, route.namespace or "", route.name,
                                  uid=pre.get("uid"), resource_version=pre.get("resourceVersion"))
        if route.kind.key == ("", "namespaces"):
            # No Terminating phase: the namespace goes at once, then everything in it.
            self._delete_namespace_contents(route.name)
        return Response.of(200, final)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for kind in self.surface.kinds:
            if kind.namespaced:
                for stored in self.store.list(kind, namespace).items:
                    self.store.delete(kind, namespace, stored.obj["metadata"]["name"])

    def _delete_collection(self, route: _Route, query: Mapping[str, str]) -> Response:
        match = self._predicate(route, query)
        deleted = []
        for stored in self.store.list(route.kind, route.namespace, match=match).items:
            meta = stored.obj["metadata"]
            deleted.append(Stored(self.store.delete(route.kind, meta.get("namespace", ""),
                                                    meta["name"]), 0))
        metadata = {"resourceVersion": str(self.store.revision)}
        return Response(200, _list_body(route.kind, metadata, deleted))


def _json_body(request: Request) -> Any:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if "protobuf" in content_type or "yaml" in content_type or "cbor" in content_type:
        raise unsupported_media_type(content_type)
    try:
        return json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None


def _object_body(request: Request) -> dict[str, Any]:
    body = _json_body(request)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body
