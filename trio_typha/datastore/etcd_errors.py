"""What the etcd client raises: one small hierarchy, nothing of the HTTP/2 client.

:class:`~trio_typha.datastore.etcd_client.EtcdClient` translates every transport exception
into these once, at its edge; the codec (:mod:`.etcd_rpc`) raises the last two from the
bytes etcd sent.  The session loop catches :class:`EtcdError` and never names the
transport.  The original exception stays the ``__cause__``.

* :class:`EtcdError` - any request that did not give us what we asked for;
* :class:`EtcdTransportError` - etcd could not be reached, or the connection broke
  (refused, reset, TLS, no PING ack); :class:`EtcdTimeout` - a call that took too long;
* :class:`EtcdProtocolError` - a reply that is not what etcd sends;
* :class:`EtcdServerError` - etcd refused the request (its gRPC status and message).
"""

from __future__ import annotations

__sans_io__ = True

from ..grpcwire.status import StatusCode


class EtcdError(Exception):
    """A request to etcd failed (see the subclasses for how)."""


class EtcdTransportError(EtcdError):
    """etcd could not be reached or the connection broke; the message names the transport's
    own kind of failure (``ConnectError: ...``)."""


class EtcdTimeout(EtcdTransportError):
    """A connect or a unary call that took longer than the client's ``request_timeout``."""


class EtcdProtocolError(EtcdError, ValueError):
    """A reply that is not what etcd sends (a message that does not parse, no status)."""


class EtcdServerError(EtcdError):
    """etcd refused a request; ``code`` is the gRPC status code when it gave one."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    @property
    def compacted(self) -> bool:
        """The revision asked for has been compacted away: the caller must list afresh."""
        # OUT_OF_RANGE is etcd's code for both "compacted" and "future revision".
        return self.code == StatusCode.OUT_OF_RANGE and "compacted" in self.message
