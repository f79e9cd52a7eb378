"""What the Kubernetes API client raises: one small hierarchy, nothing of httpx or h2client.

:class:`~trio_typha.datastore.k8s_api.KubeApi` translates every transport exception into
these once, at its edge (:mod:`.http_edge`), so the watch loops, discovery, initialisation
and rebalancing catch :class:`K8sError` (or one branch of it) and never name the HTTP
library.  The original exception stays the ``__cause__``.

* :class:`K8sError` - any request that did not give us what we asked for;
* :class:`K8sTransportError` - the API server could not be reached, or the connection broke
  (refused, reset, TLS, proxy); :class:`K8sTimeout` - a connect, read, write or pool timeout;
* :class:`MalformedResponse` - the server answered with something that is not what
  kube-apiserver sends (a watch line, a list, an object);
* :class:`ApiError` - the server answered with an error status (``metav1.Status``).
"""

from __future__ import annotations

__sans_io__ = True

from dataclasses import dataclass
from typing import Any


class K8sError(Exception):
    """A request to the Kubernetes API failed (see the subclasses for how)."""


class K8sTransportError(K8sError):
    """The API server could not be reached or the connection broke; the message names the
    transport's own kind of failure (``ConnectError: ...``)."""


class K8sTimeout(K8sTransportError):
    """A connect, read, write or connection-pool timeout."""


class MalformedResponse(K8sError, ValueError):
    """The API server sent something malformed: a watch stream, a list, an object."""


@dataclass(frozen=True, slots=True)
class StatusInfo:
    """The parts of a ``metav1.Status`` a watcher acts on."""

    code: int
    reason: str
    message: str
    causes: tuple[str, ...] = ()  # details.causes[].reason

    @classmethod
    def from_object(cls, obj: Any) -> StatusInfo:
        if not isinstance(obj, dict):
            return cls(0, "", repr(obj)[:200])
        code = obj.get("code")
        details = obj.get("details")
        causes = details.get("causes") if isinstance(details, dict) else None
        if not isinstance(causes, list):
            causes = []
        return cls(code if isinstance(code, int) and not isinstance(code, bool) else 0,
                   str(obj.get("reason", "")), str(obj.get("message", "")),
                   tuple(str(c.get("reason", "")) for c in causes if isinstance(c, dict)))

    @property
    def expired(self) -> bool:
        """The requested resourceVersion is too old: list again."""
        return self.code == 410 or self.reason in ("Expired", "Gone")

    @property
    def too_large_rv(self) -> bool:
        """The requested resourceVersion is newer than the server's (e.g. a restored etcd):
        client-go's reflector and Calico list again, as for an expired one."""
        return ("ResourceVersionTooLarge" in self.causes
                or "too large resource version" in self.message.lower())


class ApiError(K8sError):
    """The API server answered a request with an error status."""

    def __init__(self, method: str, path: str, http_status: int, status: StatusInfo) -> None:
        detail = status.message or status.reason or "no detail"
        super().__init__(f"{method} {path}: HTTP {http_status}: {detail}")
        self.http_status = http_status
        self.status = status

    @property
    def code(self) -> int:
        """The HTTP status code (``metav1.Status.code`` when the body gave one agrees)."""
        return self.http_status

    @property
    def reason(self) -> str:
        """``metav1.Status.reason`` (``NotFound``, ``Forbidden``, ``Expired``...), or the
        HTTP reason phrase when the body was not a Status."""
        return self.status.reason

    @property
    def detail(self) -> str:
        """What the server said, for a log line: its message, else its reason."""
        return self.status.message or self.status.reason or "no detail"

    @property
    def expired(self) -> bool:
        """The resourceVersion asked for is unusable (410, or too new): list afresh."""
        return self.http_status == 410 or self.status.expired or self.status.too_large_rv
