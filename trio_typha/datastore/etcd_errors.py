"""What the etcd client raises: one small hierarchy, nothing of httpx.

:class:`~trio_typha.datastore.etcd_client.EtcdClient` translates every transport exception
into these once, at its edge (:mod:`.http_edge`); the gateway codec (:mod:`.etcd_gateway`)
raises the last two from the bytes etcd sent.  The session loop catches :class:`EtcdError`
and never names the HTTP library.  The original exception stays the ``__cause__``.

* :class:`EtcdError` - any request that did not give us what we asked for;
* :class:`EtcdTransportError` - etcd could not be reached, or the connection broke
  (refused, reset, TLS); :class:`EtcdTimeout` - a connect, read, write or pool timeout;
* :class:`EtcdProtocolError` - a reply that is not what etcd's gateway sends;
* :class:`EtcdGatewayError` - etcd refused the request (its gRPC status, when it gave one).
"""

from __future__ import annotations

__sans_io__ = True

# gRPC status OUT_OF_RANGE: etcd's code for "compacted" and "future revision".
_GRPC_OUT_OF_RANGE = 11


class EtcdError(Exception):
    """A request to etcd failed (see the subclasses for how)."""


class EtcdTransportError(EtcdError):
    """etcd could not be reached or the connection broke; the message names the transport's
    own kind of failure (``ConnectError: ...``)."""


class EtcdTimeout(EtcdTransportError):
    """A connect, read, write or connection-pool timeout."""


class EtcdProtocolError(EtcdError, ValueError):
    """A gateway response that is not what etcd sends (bad JSON, bad base64, wrong shape)."""


class EtcdGatewayError(EtcdError):
    """etcd refused a request; ``code`` is the gRPC status code when it gave one."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    @property
    def compacted(self) -> bool:
        """The revision asked for has been compacted away: the caller must list afresh."""
        return self.code == _GRPC_OUT_OF_RANGE and "compacted" in self.message
