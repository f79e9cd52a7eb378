"""A small Kubernetes REST client: list pages, watch streams, API-group discovery.

While :meth:`KubeApi.run` runs (``async with KubeApi(...)`` starts it; the daemon starts it
first thing), every request and watch goes over one HTTP/2 connection (:mod:`.k8s_h2`),
its liveness checked by HTTP/2 PINGs, as client-go's.  A server that does not speak HTTP/2,
a configured proxy, or ``http2=False`` gets httpx's ``AsyncClient`` (HTTP/1.1, under trio
through httpcore), where each kind's watch holds a connection of its own and lists reuse
pooled ones.  Authentication headers are refreshed periodically: service-account tokens
are rotated on disk by the kubelet, and kubeconfig exec plugins mint short-lived tokens.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from urllib.parse import urlencode

import httpx
import trio

from ..h2client.shell import H2Stream, Keepalive
from ..model.jsonload import loads
from ..model.kinds import ResourceKind
from .http_edge import ErrorFamily, keepalive_socket_options, translated
from .k8s_config import KubeClientConfig, build_ssl_context, read_token_file
from .k8s_errors import (
    ApiError,
    K8sError,
    K8sTimeout,
    K8sTransportError,
    MalformedResponse,
    StatusInfo,
)
from .k8s_h2 import Answer, FallBack, H2Link
from .k8s_listbody import json_object, split_list
from .k8s_stream import LineDecoder, WatchEvent, parse_watch_event
from .stall import DEFAULT_DEADLINE, Activity

log = logging.getLogger(__name__)

USER_AGENT = "trio-typha"

#: What this client raises for a failed transport (see :mod:`.k8s_errors`).
ERRORS = ErrorFamily(transport=K8sTransportError, timeout=K8sTimeout, malformed=MalformedResponse)


def _status_error(response: httpx.Response) -> ApiError:
    """The :class:`ApiError` of a response with an error status (its body a
    ``metav1.Status``, or anything else: the reason phrase and the start of the text)."""
    return status_error(response.request.method, response.request.url.path,
                        response.status_code, response.reason_phrase, response.content)


def status_error(method: str, path: str, code: int, reason: str, body: bytes) -> ApiError:
    try:
        status = StatusInfo.from_object(loads(body))
    except ValueError:
        status = StatusInfo(code, reason, body[:200].decode("utf-8", "replace"))
    return ApiError(method, path, code, status)


def client_options(config: KubeClientConfig) -> dict[str, Any]:
    """httpx client arguments (sync or async) for ``config``, minus auth and timeouts."""
    return {"base_url": config.server,
            "verify": build_ssl_context(config) if config.uses_tls else True,
            "proxy": config.proxy, "trust_env": False,
            "headers": {"Accept": "application/json", "User-Agent": USER_AGENT}}


def group_names(doc: Any) -> set[str]:
    """The group names in an ``APIGroupList``."""
    groups = doc.get("groups") if isinstance(doc, dict) else None
    return {g["name"] for g in groups or ()
            if isinstance(g, dict) and isinstance(g.get("name"), str)}


def resource_path(kind: ResourceKind) -> str:
    """The collection URL of ``kind`` across all namespaces."""
    if kind.group:
        return f"/apis/{kind.group}/{kind.version}/{kind.plural}"
    return f"/api/{kind.version}/{kind.plural}"


class KubeApi:
    """The client for one API server: HTTP/2, else httpx (use as an async context manager).

    Every method raises only :mod:`.k8s_errors`' classes for a failed request."""

    def __init__(self, config: KubeClientConfig, *, request_timeout: float = 30.0,
                 auth_refresh_interval: float = 60.0,
                 stall_deadline: float = DEFAULT_DEADLINE, http2: bool = True) -> None:
        self.config = config
        self.request_timeout = request_timeout
        #: the shared HTTP/2 connection (None: HTTP/1.1 only, as with a proxy configured)
        self.link: H2Link | None = None
        if http2 and not config.proxy:
            self.link = H2Link(
                config.server,
                ssl_context=build_ssl_context(config) if config.uses_tls else None,
                server_hostname=config.tls_server_name,
                keepalive=Keepalive.for_deadline(stall_deadline),
                connect_timeout=request_timeout)
        self._stack: AsyncExitStack | None = None
        #: deliveries on the shared HTTP/2 connection, for its streams' stall checks
        self.activity = Activity(self._heard_at)
        self.auth_refresh_interval = auth_refresh_interval
        self._authorization = config.authorization
        self._refreshable = bool(config.token_file or config.refresh_authorization)
        # None: the first request sets the first refresh time (the config was just loaded).
        self._auth_due: float | None = None if self._refreshable else math.inf
        self._extensions = ({"sni_hostname": config.tls_server_name}
                            if config.tls_server_name else {})
        options = client_options(config)
        # TCP keepalive on every connection, so a watch whose path drops inbound packets
        # dies within the stall deadline (see .stall).
        transport = httpx.AsyncHTTPTransport(
            verify=options.pop("verify"), proxy=options.pop("proxy"), trust_env=False,
            socket_options=keepalive_socket_options(stall_deadline))
        self._client = httpx.AsyncClient(
            **options, transport=transport, timeout=httpx.Timeout(request_timeout),
            # One long-lived watch connection per watched kind and syncer: no pool ceiling.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32))

    async def __aenter__(self) -> KubeApi:
        if self.link is not None and not self.link.running:
            self._stack = AsyncExitStack()
            nursery = await self._stack.enter_async_context(trio.open_nursery())
            await nursery.start(self.run)
            self._stack.callback(nursery.cancel_scope.cancel)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host the shared HTTP/2 connection until cancelled; requests made while this
        does not run go over HTTP/1.1."""
        if self.link is None or self.link.running:
            task_status.started()
            return
        await self.link.run(task_status=task_status)

    async def aclose(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
        await self._client.aclose()

    def _heard_at(self) -> float:
        conn = self.link.conn if self.link is not None else None
        return conn.core.last_read if conn is not None and conn.usable else -math.inf

    def _h2(self) -> H2Link | None:
        link = self.link
        return link if link is not None and link.running else None

    async def _h2_request(self, method: str, path: str, params: dict[str, str] | None,
                          headers: dict[str, str], body: bytes | None = None
                          ) -> Answer | None:
        """The answer over the shared HTTP/2 connection; None when it is not in use (the
        caller then asks over HTTP/1.1)."""
        link = self._h2()
        if link is None:
            return None
        try:
            with translated(ERRORS), trio.fail_after(self.request_timeout):
                return await link.request(method, _target(path, params), _h2_headers(headers),
                                          body)
        except FallBack:
            return None
        except trio.TooSlowError:
            raise K8sTimeout(f"ReadTimeout: {method} {path} over HTTP/2") from None

    @asynccontextmanager
    async def _h2_stream(self, link: H2Link, path: str, params: dict[str, str],
                         headers: dict[str, str]) -> AsyncIterator[tuple[H2Stream, int]]:
        """A GET whose body is read as it comes (watches); raises :class:`FallBack`
        before yielding when the server turns out not to speak HTTP/2."""
        with translated(ERRORS):
            async with link.exchange("GET", _target(path, params), _h2_headers(headers)
                                     ) as (stream, status, _):
                yield stream, status

    def _check_answer(self, method: str, path: str, answer: Answer, *ok: int) -> None:
        if answer.status not in ok:
            self._note_rejection(answer.status)
            raise status_error(method, path, answer.status, "", answer.body)

    async def _get_body(self, path: str, params: dict[str, str] | None) -> bytes:
        headers = await self._headers()
        answer = await self._h2_request("GET", path, params, headers)
        if answer is not None:
            self._check_answer("GET", path, answer, 200)
            return answer.body
        with translated(ERRORS):
            response = await self._client.get(path, params=params, headers=headers,
                                              extensions=self._extensions)
        self._check(response, 200)
        return response.content

    def _check(self, response: httpx.Response, *ok: int) -> None:
        if response.status_code not in ok:
            self._note_rejection(response.status_code)
            raise _status_error(response)

    async def get_json(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        """GET ``path``; the decoded JSON object, or :class:`ApiError`."""
        return json_object(await self._get_body(path, params), f"GET {path}")

    async def write_json(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST/PUT ``body`` to ``path``; the object the server stored, or :class:`ApiError`."""
        headers = await self._headers()
        answer = await self._h2_request(method, path, None,
                                        {**headers, "Content-Type": "application/json"},
                                        json.dumps(body).encode())
        if answer is not None:
            self._check_answer(method, path, answer, 200, 201)
            return json_object(answer.body, f"{method} {path}")
        with translated(ERRORS):
            response = await self._client.request(method, path, json=body, headers=headers,
                                                  extensions=self._extensions)
        self._check(response, 200, 201)
        return json_object(response.content, f"{method} {path}")

    async def list_page(self, kind: ResourceKind, *, limit: int | None,
                        continue_token: str | None = None,
                        resource_version: str = "0") -> tuple[dict[str, Any], Iterator[Any]]:
        """One page of ``kind``'s list (``limit`` None: everything at once): its members
        other than ``items`` (``metadata``...), and the items, each decoded only when the
        iterator reaches it (:func:`.k8s_listbody.split_list`).

        As Calico's paged list (``listOptionsToK8sListOptions`` in
        ``libcalico-go/lib/backend/k8s/resources/list_pager.go``, then client-go's pager):
        the first page asks for ``resource_version`` with
        ``resourceVersionMatch=NotOlderThan`` ("0": any), which kube-apiserver serves from
        its watch cache rather than a quorum read of etcd (whole, where the cache cannot
        paginate); an empty ``resource_version`` sends neither (a consistent read);
        continuation pages send only the token.
        """
        params: dict[str, str] = {}
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        elif resource_version:
            params["resourceVersion"] = resource_version
            params["resourceVersionMatch"] = "NotOlderThan"
        path = resource_path(kind)
        body = await self._get_body(path, params)
        return split_list(body, f"GET {path}")

    async def served_groups(self) -> set[str]:
        """Names of the API groups the server serves (``GET /apis``)."""
        return group_names(await self.get_json("/apis"))

    @asynccontextmanager
    async def watch(self, kind: ResourceKind, *, resource_version: str,
                    timeout_seconds: int | None = None
                    ) -> AsyncIterator[WatchStream]:
        """Open a watch of ``kind`` from ``resource_version``; yields its event iterator.

        ``timeout_seconds`` None sends no ``timeoutSeconds``: the server ends the stream at
        its own timeout (kube-apiserver: 30 to 60 minutes), as Calico's watches leave it.

        Raises :class:`ApiError` if the server refuses the watch; the iterator ends when the
        server ends the stream and raises :class:`K8sTransportError` if it drops,
        :class:`MalformedResponse` for a line that is not a watch event.
        """
        params = {"watch": "true", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true"}
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(timeout_seconds)
        # A quiet kind's stream may carry nothing for as long as the server keeps it open
        # (bookmarks come only once its revision moves), so its silence is judged by the
        # stall check and TCP keepalive (.stall), not a read timeout; with timeoutSeconds,
        # a silence past it is a dead peer.
        headers = await self._headers()
        link = self._h2()
        if link is not None:
            try:
                async with self._h2_stream(link, resource_path(kind), params,
                                           headers) as (stream, status):
                    if status != 200:
                        body = await _read_all(stream)
                        self._note_rejection(status)
                        raise status_error("GET", resource_path(kind), status, "", body)
                    yield WatchStream(_h2_chunks(stream), multiplexed=True)
                return
            except FallBack:
                pass  # the server speaks HTTP/1.1 only: as below
        read = None if timeout_seconds is None else timeout_seconds + 30.0
        request = self._client.build_request(
            "GET", resource_path(kind), params=params, headers=headers,
            extensions=self._extensions,
            timeout=httpx.Timeout(self._client.timeout.connect, read=read))
        with translated(ERRORS):
            response = await self._client.send(request, stream=True)
        try:
            if response.status_code != 200:
                with translated(ERRORS):
                    await response.aread()
                self._check(response, 200)
            yield WatchStream(response.aiter_bytes())
        finally:
            with translated(ERRORS):
                await response.aclose()

    async def changed_since(self, kind: ResourceKind, resource_version: str, *,
                            window: float) -> bool | None:
        """Whether ``kind`` changed after ``resource_version``: a short watch from there (a
        stream of the shared HTTP/2 connection, or over HTTP/1.1 a connection of its own,
        closed after), as a cross-check of a silent watch stream.

        True when the server replays an event, False when none arrives within ``window``
        of the watch being accepted, None when the server could not tell (an error, a 410).
        The caller bounds the whole call (:func:`.crosscheck.until_stalled`).
        """
        params = {"watch": "true", "resourceVersion": resource_version,
                  "timeoutSeconds": str(max(1, math.ceil(window)))}
        link = self._h2()
        if link is not None:
            try:
                async with self._h2_stream(link, resource_path(kind), params,
                                           await self._headers()) as (stream, status):
                    if status != 200:
                        return None
                    return await _replays(WatchStream(_h2_chunks(stream)), window)
            except FallBack:
                pass
            except K8sError as exc:
                log.debug("Cross-check of the %s watch failed: %s", kind, exc)
                return None
        headers = {**await self._headers(), "Connection": "close"}
        request = self._client.build_request("GET", resource_path(kind), params=params,
                                             headers=headers, extensions=self._extensions)
        try:
            with translated(ERRORS):
                response = await self._client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    return None
                return await _replays(WatchStream(response.aiter_bytes()), window)
            finally:
                with translated(ERRORS):
                    await response.aclose()
        except K8sError as exc:
            log.debug("Cross-check of the %s watch failed: %s", kind, exc)
        return None

    async def _headers(self) -> dict[str, str]:
        now = trio.current_time()
        if self._auth_due is None:
            self._auth_due = now + self.auth_refresh_interval
        elif now >= self._auth_due:
            self._auth_due = now + self.auth_refresh_interval
            await self._refresh_authorization()
        return {"Authorization": self._authorization} if self._authorization else {}

    async def _refresh_authorization(self) -> None:
        cfg = self.config
        try:
            if cfg.token_file:
                self._authorization = await trio.to_thread.run_sync(read_token_file,
                                                                    cfg.token_file)
            elif cfg.refresh_authorization is not None:
                self._authorization = await trio.to_thread.run_sync(cfg.refresh_authorization)
        except Exception as exc:  # exec plugins can fail in any way
            # Keep the old credentials: they may still work, and the next refresh may not fail.
            log.warning("Failed to refresh Kubernetes API credentials (%s): %s", cfg.source, exc)

    def _note_rejection(self, http_status: int) -> None:
        if http_status == 401 and self._refreshable:
            self._auth_due = -math.inf  # a rotated token: re-read it before the next request


def _target(path: str, params: dict[str, str] | None) -> str:
    return f"{path}?{urlencode(params)}" if params else path


def _h2_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(b"user-agent", USER_AGENT.encode()),
            *((k.lower().encode(), v.encode("latin-1")) for k, v in headers.items())]


async def _h2_chunks(stream: H2Stream) -> AsyncIterator[bytes]:
    while chunk := await stream.receive():
        yield chunk


async def _read_all(stream: H2Stream) -> bytes:
    with translated(ERRORS):
        return b"".join([chunk async for chunk in _h2_chunks(stream)])


async def _replays(events: WatchStream, window: float) -> bool | None:
    """A cross-check's verdict from its watch: True at the first replayed change, None for
    an ERROR (a 410), False when ``window`` passes without either."""
    with trio.move_on_after(window):
        async for event in events:
            if event.type == "ERROR":
                return None
            if event.type != "BOOKMARK":
                return True
    return False


class WatchStream:
    """Async iterator of the watch events of one stream (a chunked body, or the DATA of
    an HTTP/2 stream)."""

    def __init__(self, chunks: AsyncIterator[bytes], *, multiplexed: bool = False) -> None:
        #: a stream of the shared HTTP/2 connection (whose PINGs prove it alive)
        self.multiplexed = multiplexed
        self._chunks = chunks
        self._decoder = LineDecoder()
        self._ready: deque[WatchEvent] = deque()
        self._eof = False

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        while not self._ready:
            if self._eof:
                raise StopAsyncIteration
            try:
                with translated(ERRORS):
                    chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._eof = True
                lines = [self._decoder.close()]
            else:
                lines = self._decoder.feed(chunk)
            for line in lines:
                event = parse_watch_event(line)
                if event is not None:
                    self._ready.append(event)
        return self._ready.popleft()
