"""A small client for one etcd endpoint's gRPC-JSON gateway, on httpx.

Unary calls (:meth:`EtcdClient.call`) and watch streams (:meth:`EtcdClient.watch`) carry
the bodies :mod:`.etcd_gateway` builds and decodes; every failure leaves as one of
:mod:`.etcd_errors`' classes (the transport's translated once, here, by :mod:`.http_edge`).
TCP keepalive is set on every connection so a watch whose path drops inbound packets dies
within the stall deadline (see :mod:`.stall`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from . import etcd_gateway as gw
from .etcd_config import EtcdConfig
from .etcd_errors import EtcdGatewayError, EtcdProtocolError, EtcdTimeout, EtcdTransportError
from .http_edge import ErrorFamily, keepalive_socket_options, translated

#: What this client raises for a failed transport (see :mod:`.etcd_errors`).
ERRORS = ErrorFamily(transport=EtcdTransportError, timeout=EtcdTimeout,
                     malformed=EtcdProtocolError)

_JSON = {"content-type": "application/json"}


class EtcdClient:
    """One etcd endpoint (``endpoint``, else the config's first); an async context manager.

    ``request_timeout`` bounds each unary call and a watch's connect; ``stall_deadline``
    (when given) sets TCP keepalive so a dead path is noticed within it.
    """

    def __init__(self, config: EtcdConfig, endpoint: str | None = None, *,
                 request_timeout: float = 10.0, stall_deadline: float | None = None) -> None:
        self.endpoint = endpoint or config.endpoints[0]
        self.request_timeout = request_timeout
        with translated(ERRORS):  # the TLS files are read here
            verify: Any = config.ssl_context() if self.endpoint.startswith("https:") else True
        options = keepalive_socket_options(stall_deadline) if stall_deadline else None
        transport = httpx.AsyncHTTPTransport(verify=verify, trust_env=False,
                                             socket_options=options)
        self._http = httpx.AsyncClient(base_url=self.endpoint, transport=transport,
                                       trust_env=False, timeout=request_timeout)

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with translated(ERRORS):
            await self._http.aclose()

    async def call(self, path: str, body: dict[str, Any]) -> Any:
        """One unary gateway call: the decoded JSON reply; etcd's error replies become
        :class:`EtcdGatewayError`."""
        with translated(ERRORS):
            resp = await self._http.post(path, content=json.dumps(body).encode(),
                                         headers=_JSON)
        if resp.status_code != 200:
            raise _refused(resp.status_code, resp.content, path)
        payload = gw.parse_json(resp.content)
        gw.check_error(payload)
        return payload

    @asynccontextmanager
    async def watch(self, body: dict[str, Any], *, idle_timeout: float | None = None,
                    close: bool = False) -> AsyncIterator[AsyncIterator[str]]:
        """Open a watch stream with ``body`` (:func:`.etcd_gateway.watch_request`); yields
        its non-blank lines.  ``idle_timeout`` bounds the silence between two reads (None:
        the stream may idle; the caller's keepalive covers it); ``close`` asks for a
        connection of its own, closed after."""
        timeout = httpx.Timeout(self.request_timeout, read=idle_timeout)
        request = self._http.build_request(
            "POST", gw.WATCH_PATH, content=json.dumps(body).encode(), timeout=timeout,
            headers={**_JSON, "connection": "close"} if close else _JSON)
        with translated(ERRORS):
            resp = await self._http.send(request, stream=True)
        try:
            if resp.status_code != 200:
                with translated(ERRORS):
                    content = await resp.aread()
                raise _refused(resp.status_code, content, gw.WATCH_PATH)
            yield _Lines(resp)
        finally:
            with translated(ERRORS):
                await resp.aclose()


def _refused(status: int, content: bytes, path: str) -> EtcdGatewayError:
    """The error of a reply with an error status: etcd's own when the body is the
    gateway's error shape, else the status."""
    try:
        gw.check_error(gw.parse_json(content))
    except EtcdGatewayError as exc:
        return exc
    except EtcdProtocolError:
        pass  # not JSON: a proxy's page, say
    return EtcdGatewayError(f"HTTP {status} from {path}")


class _Lines:
    """Async iterator of a stream's non-blank lines, transport errors translated."""

    def __init__(self, resp: httpx.Response) -> None:
        self._lines = resp.aiter_lines()

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            with translated(ERRORS):
                line = await self._lines.__anext__()
            if line.strip():
                return line
