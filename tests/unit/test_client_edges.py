"""Errors are translated once, at each HTTP client's edge: nothing above names httpx.

The scan reads every module's syntax tree (function-level imports and attribute uses
included), so an ``import httpx`` tucked into a function is seen as surely as one at the
top.  The mapping itself is checked on httpx's own exception classes.
"""

from __future__ import annotations

import ast
import errno
import ssl

import httpx
import pytest

from tests.source_scan import PACKAGE_ROOT, Source, sources
from trio_typha.datastore import k8s_api
from trio_typha.datastore.etcd_errors import (
    EtcdError,
    EtcdProtocolError,
    EtcdTimeout,
    EtcdTransportError,
)
from trio_typha.datastore.http_edge import ErrorFamily, translated
from trio_typha.datastore.k8s_errors import (
    ApiError,
    K8sError,
    K8sTimeout,
    K8sTransportError,
    MalformedResponse,
    StatusInfo,
)

#: The modules allowed to name httpx, and why.
EDGES = {
    "datastore/http_edge.py": "the one map from httpx's exceptions to a client's own",
    "datastore/k8s_api.py": "the Kubernetes API client",
    "cli.py": "`connections`: one GET per replica, each failure printed as it happens",
}


def _names_httpx(source: Source) -> list[int]:
    return [imp.line for imp in source.imports() if imp.top == "httpx"] + \
        source.names_used("httpx")


def test_only_the_client_edges_name_httpx() -> None:
    naming = {s.rel for s in sources() if _names_httpx(s)}
    assert sorted(naming - set(EDGES)) == []
    # An edge that stopped using httpx leaves the list too.
    assert naming == set(EDGES)


def test_the_scan_sees_a_function_level_import() -> None:
    def source(text: str) -> Source:
        return Source("trio_typha.example", PACKAGE_ROOT / "example.py", ast.parse(text))

    assert _names_httpx(source("def f():\n    import httpx.foo\n    return 1\n")) == [2]
    assert _names_httpx(source("from httpx import Client\n")) == [1]
    assert _names_httpx(source("def f(c):\n    return c\nx = httpx\n")) == [3]


FAMILIES = [(k8s_api.ERRORS, K8sError)]


@pytest.mark.parametrize(("family", "base"), FAMILIES)
def test_every_transport_failure_becomes_the_familys(family: ErrorFamily,
                                                     base: type[Exception]) -> None:
    request = httpx.Request("GET", "http://127.0.0.1:1/")
    cases: list[tuple[BaseException, type[Exception], str]] = [
        (httpx.ConnectError("All connection attempts failed", request=request),
         family.transport, "ConnectError: All connection attempts failed"),
        (httpx.ReadTimeout("", request=request), family.timeout, "ReadTimeout"),
        (httpx.PoolTimeout("no connection", request=request), family.timeout,
         "PoolTimeout: no connection"),
        (httpx.RemoteProtocolError("peer closed connection", request=request),
         family.transport, "RemoteProtocolError: peer closed connection"),
        (httpx.DecodingError("bad gzip", request=request), family.malformed,
         "DecodingError: bad gzip"),
        (ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
         family.transport, "SSLError: [SSL: WRONG_VERSION_NUMBER] wrong version number"),
        (OSError(errno.ECONNRESET, "Connection reset by peer"), family.transport,
         "ConnectionResetError: [Errno 104] Connection reset by peer"),
    ]
    for original, expected, message in cases:
        with pytest.raises(expected) as info, translated(family):
            raise original
        assert isinstance(info.value, base)
        assert str(info.value) == message
        assert info.value.__cause__ is original  # the chain stays readable


def test_the_families_are_distinct_and_complete() -> None:
    assert issubclass(K8sTimeout, K8sTransportError)
    assert issubclass(EtcdTimeout, EtcdTransportError)
    assert issubclass(MalformedResponse, ValueError) and issubclass(MalformedResponse, K8sError)
    assert issubclass(EtcdProtocolError, ValueError) and issubclass(EtcdProtocolError, EtcdError)
    assert not issubclass(K8sError, EtcdError) and not issubclass(EtcdError, K8sError)


def test_other_exceptions_pass_through_untouched() -> None:
    for original in (ValueError("a bug"), KeyError("k"), ApiError(
            "GET", "/x", 500, StatusInfo(500, "InternalError", "boom"))):
        with pytest.raises(type(original)) as info, translated(k8s_api.ERRORS):
            raise original
        assert info.value is original


def test_api_error_carries_code_and_reason() -> None:
    err = ApiError("GET", "/api/v1/pods", 403,
                   StatusInfo(403, "Forbidden", 'pods is forbidden: User "x" cannot list'))
    assert (err.code, err.reason) == (403, "Forbidden")
    assert str(err) == 'GET /api/v1/pods: HTTP 403: pods is forbidden: User "x" cannot list'
    assert not err.expired
    assert ApiError("GET", "/x", 410, StatusInfo(410, "Expired", "too old")).expired
