"""The test bed API server: listeners, kubeconfig, wakeups and test hooks.

Start it inside a test with ``async with open_apiserver() as srv`` (or
``await nursery.start(srv.serve)``), seed ``srv.store`` directly for speed, point clients at
``srv.url`` or ``srv.kubeconfig_path(tmp_path)``, and use the hook methods to make the API
misbehave the way a real one can: dropped watches, compaction (410), RBAC denials (403),
latency.
"""

from __future__ import annotations

import base64
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import yaml

from trio_typha.model.kinds import CALICO_CRD_GROUP, NAMESPACE, ResourceKind

from .api import DEFAULT_USER, Api
from .connection import Connection
from .exchange import Traffic, WatchHandle
from .h2connection import PREFACE, H2Connection
from .resources import ApiSurface
from .status import KindLike
from .store import Store

logger = logging.getLogger("testbed.apiserver")

DEFAULT_TOKEN = "testbed-token"
DEFAULT_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")


class ApiServer:
    """A Kubernetes API server for tests, served over HTTP/2 and HTTP/1.1 on trio.

    With TLS the protocol is chosen by ALPN as kube-apiserver offers it (``h2``, then
    ``http/1.1``); in plaintext a connection that opens with the HTTP/2 client preface is
    HTTP/2 (h2c with prior knowledge), any other HTTP/1.1.  ``http2=False`` serves
    HTTP/1.1 only, as kube-apiserver's ``--disable-http2-serving`` (ALPN offers
    ``http/1.1`` alone; a preface in plaintext is answered as bad HTTP/1.1).

    Options:
      calico_groups: which Calico API groups to serve (``crd.projectcalico.org`` and/or
        ``projectcalico.org``); each has its own objects.
      cluster_network_policy: serve ``policy.networking.k8s.io`` (otherwise it is absent
        from discovery, like a cluster without that CRD).
      kubevirt: serve ``kubevirt.io`` VirtualMachineInstanceMigrations (likewise optional).
        Either can be installed later with :meth:`install`.
      history_size: events kept for watch resumption and consistent pagination; older
        revisions answer 410.
      bookmark_interval: seconds between BOOKMARK events on watches that allow them
        (kube-apiserver: one minute), sent whatever the traffic and once more 2 s before
        the watch's deadline; each carries the revision its kind's watch cache has
        processed, and only once that is past the watch's start.
      progress_interval: seconds between etcd progress notifications, which move every
        kind's watch cache (and so its bookmarks) up to the store's revision; etcd's
        default is 10 minutes.  None: never.
      default_watch_timeout: watch length when the client sends no ``timeoutSeconds``.
      cache_pagination: lists served from the watch cache (``resourceVersion=0`` or
        ``NotOlderThan``) honour ``limit`` as on kube-apiserver 1.34+; by default they
        come whole, as on earlier versions (see :attr:`Api.list_reads`).
      token / require_token: the bearer token written to kubeconfigs, and whether
        requests without it get 401.
      enforce_namespaces: creating into a missing namespace is 404 (as with the real
        NamespaceLifecycle admission); direct store writes are never checked.
      default_namespaces: create default, kube-system, kube-public and kube-node-lease.
      ssl_context: serve HTTPS with this server context (its ALPN protocols are set
        here); ``ca_pem`` is the CA written into kubeconfigs.
      http2: serve HTTP/2 beside HTTP/1.1.

    :attr:`traffic` counts what clients cost it: connections, requests, watch streams,
    HTTP/2 PINGs and bytes each way.  :meth:`wedge_watches` wedges its watch hub: watches,
    new ones too, are accepted and then given nothing (no events, no bookmarks) while
    every other request is answered, until :meth:`unwedge_watches`.

    The store must only be written from the trio thread that runs the server.
    """

    def __init__(self, *, calico_groups: Sequence[str] = (CALICO_CRD_GROUP,),
                 cluster_network_policy: bool = False, kubevirt: bool = False,
                 history_size: int = 10_000,
                 bookmark_interval: float = 10.0, progress_interval: float | None = 600.0,
                 default_watch_timeout: float = 1800.0,
                 cache_pagination: bool = False,
                 token: str = DEFAULT_TOKEN, require_token: bool = False,
                 user: str = DEFAULT_USER, enforce_namespaces: bool = True,
                 default_namespaces: bool = True, ssl_context: ssl.SSLContext | None = None,
                 ca_pem: bytes | None = None, http2: bool = True) -> None:
        self.surface = ApiSurface(calico_groups=calico_groups,
                                  cluster_network_policy=cluster_network_policy,
                                  kubevirt=kubevirt)
        self.store = Store(history_size=history_size)
        self.api = Api(self.store, self.surface, token=token if require_token else None,
                       user=user, enforce_namespaces=enforce_namespaces,
                       default_watch_timeout=default_watch_timeout,
                       cache_pagination=cache_pagination)
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.progress_interval = progress_interval
        self.ssl_context = ssl_context
        self.ca_pem = ca_pem
        self.http2 = http2
        self.traffic = Traffic()
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["h2", "http/1.1"] if http2 else ["http/1.1"])
        self.latency = 0.0
        self.watches: set[WatchHandle] = set()
        self._watches_changed: trio.Event | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self._changed: trio.Event | None = None
        self._unwedged: trio.Event | None = None  # set: watches send (None: never wedged)
        self.store.on_change = self._wake
        if default_namespaces:
            for name in DEFAULT_NAMESPACES:
                self.store.create(NAMESPACE, {
                    "metadata": {"name": name,
                                 "labels": {"kubernetes.io/metadata.name": name}},
                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})

    # -- serving -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    async def serve(self, host: str = "127.0.0.1", port: int = 0, *,
                    task_status: trio.TaskStatus[ApiServer] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Listen on ``host:port`` (0: any free port) and serve until cancelled.

        Reports ``task_status.started(self)`` once the socket is bound; ``url`` and ``port``
        are valid from then on.
        """
        listeners: list[Any] = await trio.open_tcp_listeners(port, host=host)
        self.host, self.port = host, listeners[0].socket.getsockname()[1]
        self.api.server_address = f"{host}:{self.port}"
        if self.ssl_context is not None:
            listeners = [trio.SSLListener(listener, self.ssl_context, https_compatible=True)
                         for listener in listeners]
        logger.info("apiserver: serving %s", self.url)
        async with trio.open_nursery() as nursery:
            if self.progress_interval is not None:
                await nursery.start(self._notify_progress, self.progress_interval)
            task_status.started(self)
            await trio.serve_listeners(self.handle_connection, listeners,
                                       handler_nursery=nursery)

    async def _notify_progress(self, interval: float, *,
                               task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                               ) -> None:
        task_status.started()
        while True:
            await trio.sleep(interval)
            self.store.progress()

    async def handle_connection(self, stream: trio.abc.Stream) -> None:
        """Serve one client stream (any trio Stream: tests use in-memory pairs)."""
        peer = _peer_name(stream)
        self.traffic.connections += 1
        try:
            h2, initial = await self._choose_protocol(stream)
            if h2:
                await H2Connection(self, stream, peer, initial).run()
            else:
                await Connection(self, stream, peer, initial).run()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await trio.aclose_forcefully(stream)  # gone during the TLS handshake or preface
        except Exception:  # one broken connection must never take the server down
            logger.exception("apiserver: connection from %s failed", peer)

    async def _choose_protocol(self, stream: trio.abc.Stream) -> tuple[bool, bytes]:
        """HTTP/2 or not, and the bytes read to tell (given to the protocol's parser)."""
        if not self.http2:
            return False, b""
        if isinstance(stream, trio.SSLStream):
            await stream.do_handshake()
            return stream.selected_alpn_protocol() == "h2", b""
        # Plaintext: h2c with prior knowledge starts with the client preface; read until
        # the bytes stop matching it (HTTP/1.1 parts ways within four bytes: "PRI " is no
        # HTTP/1.1 method a client sends) or the whole preface is in.
        initial = b""
        while len(initial) < len(PREFACE) and PREFACE.startswith(initial):
            data = await stream.receive_some(len(PREFACE) - len(initial))
            if not data:
                break
            initial += data
        return initial == PREFACE, initial

    def install(self, kind: ResourceKind) -> None:
        """Start serving the optional API ``kind``, as installing its CRD does: from now on
        it is in discovery and its list and watch answer instead of 404."""
        self.surface.install(kind)
        logger.info("apiserver: now serving %s", kind)

    def uninstall(self, kind: ResourceKind) -> None:
        """Stop serving the optional API ``kind`` and end its open watches, as an API server
        that has lost the kind (its CRD deleted, or not yet loaded after a restart) answers:
        every request for it is 404 until :meth:`install`.  Its stored objects are kept, as
        a restart keeps them."""
        served_kind = self.surface.uninstall(kind)
        for handle in list(self.watches):
            if handle.plan.cursor.kind is served_kind:
                handle.drop(abrupt=False)
        logger.info("apiserver: no longer serving %s", kind)

    # -- change notification (used by watch streams) ----------------------------------

    def changed_event(self) -> trio.Event:
        """An event set by the next store write."""
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def watch_opened(self, handle: WatchHandle) -> None:
        self.watches.add(handle)
        self._notify_watches()

    def watch_closed(self, handle: WatchHandle) -> None:
        self.watches.discard(handle)
        self._notify_watches()

    def _notify_watches(self) -> None:
        if self._watches_changed is not None:
            self._watches_changed.set()
            self._watches_changed = None

    # -- kubeconfig ------------------------------------------------------------------------

    def kubeconfig(self) -> dict[str, Any]:
        cluster: dict[str, Any] = {"server": self.url}
        if self.ca_pem is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        return {"apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "testbed", "cluster": cluster}],
                "users": [{"name": "testbed", "user": {"token": self.token}}],
                "contexts": [{"name": "testbed",
                              "context": {"cluster": "testbed", "user": "testbed",
                                          "namespace": "default"}}],
                "current-context": "testbed", "preferences": {}}

    def write_kubeconfig(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        return path

    def kubeconfig_path(self, directory: str | Path) -> Path:
        """Write ``<directory>/kubeconfig`` for this server and return its path."""
        return self.write_kubeconfig(Path(directory) / "kubeconfig")

    # -- test hooks --------------------------------------------------------------------

    @property
    def open_watches(self) -> int:
        return len(self.watches)

    async def wait_for_watches(self, condition: Callable[[int], bool]) -> None:
        """Sleep until ``condition(number of open watches)`` holds, e.g. ``lambda n: n >= 20``
        to wait for a watcher to have its watches up before writing."""
        if condition(len(self.watches)):
            await trio.lowlevel.checkpoint()
        while not condition(len(self.watches)):
            if self._watches_changed is None:
                self._watches_changed = trio.Event()
            await self._watches_changed.wait()

    def drop_watches(self, *, abrupt: bool = True) -> int:
        """End every open watch: ``abrupt`` closes the connections mid-stream (a crashed or
        restarted API server), otherwise the chunked bodies end cleanly (a watch timeout).
        Returns how many were dropped."""
        handles = list(self.watches)
        for handle in handles:
            handle.drop(abrupt=abrupt)
        return len(handles)

    def wedge_watches(self) -> None:
        """Wedge the watch hub: every watch, open or opened later, is accepted (its
        response headers go out) and then sent nothing - no events, no bookmarks - while
        lists, gets and writes are answered as usual.  (A kube-apiserver whose watch cache
        stopped dispatching, or an aggregated API behind a stuck proxy, looks so.)"""
        if self._unwedged is None or self._unwedged.is_set():
            self._unwedged = trio.Event()

    def unwedge_watches(self) -> None:
        """Undo :meth:`wedge_watches`: each watch sends what it held back, then goes on."""
        if self._unwedged is not None:
            self._unwedged.set()

    @property
    def watches_wedged(self) -> bool:
        return self._unwedged is not None and not self._unwedged.is_set()

    async def hub_open(self) -> None:
        unwedged = self._unwedged
        if unwedged is not None:
            await unwedged.wait()

    def compact(self, revision: int | None = None) -> None:
        """Compact at ``revision`` (default: now): older RVs and continue tokens answer 410
        to new lists and watches; open watches carry on."""
        self.store.compact(revision)

    def forbid(self, resource: KindLike | str, verbs: Iterable[str] | None = None) -> None:
        """Deny ``verbs`` (default: all) on a resource with an RBAC-style 403.

        ``resource`` is a kind object or a ``plural[.group]`` string such as ``"pods"`` or
        ``"ippools.crd.projectcalico.org"``.
        """
        group, plural = _resource_key(resource)
        self.api.forbid(group, plural, None if verbs is None else set(verbs))

    def allow(self, resource: KindLike | str) -> None:
        """Undo :meth:`forbid`."""
        self.api.allow(*_resource_key(resource))

    def set_latency(self, seconds: float) -> None:
        """Delay every response (not each watch event) by ``seconds``."""
        self.latency = max(0.0, seconds)


def _resource_key(resource: KindLike | str) -> tuple[str, str]:
    if isinstance(resource, str):
        plural, _, group = resource.partition(".")
        return group, plural
    return resource.group, resource.plural


def _peer_name(stream: trio.abc.Stream) -> str:
    inner = getattr(stream, "transport_stream", stream)
    try:
        host, port = inner.socket.getpeername()[:2]
    except (AttributeError, OSError):
        return "?"
    return f"{host}:{port}"


@asynccontextmanager
async def open_apiserver(host: str = "127.0.0.1", port: int = 0,
                         **options: Any) -> AsyncIterator[ApiServer]:
    """Run an :class:`ApiServer` (``options`` as its constructor) for the ``async with``."""
    server = ApiServer(**options)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, host, port)
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
