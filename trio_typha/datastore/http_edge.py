"""What the HTTP client edges share: the one place httpx's (and the project's HTTP/2
client's) exceptions become a client's own (httpcore's ``map_exceptions``), and the TCP
options of a watch's socket.

Each HTTP client edge (:mod:`.k8s_api`, :mod:`.etcd_client`) names its hierarchy as an
:class:`ErrorFamily` and wraps every call into httpx with :func:`translated`; what leaves
the edge is then one of the family's classes, raised ``from`` the original so its chain
(an ``ETIMEDOUT`` deep inside, say) stays readable.  Everything above the edges catches the
family and never imports httpx (``tests/unit/test_client_edges.py`` checks it).

Only transport failures are mapped.  An error *status* is an answer, not a failure of the
transport, and each edge turns it into its own status error where it reads the response.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from ..h2client.shell import H2StreamError
from .etcd_errors import EtcdTransportError
from .k8s_errors import K8sTransportError


@dataclass(frozen=True, slots=True)
class ErrorFamily:
    """A client's classes for the failures the transport can raise."""

    transport: type[Exception]  # unreachable, refused, reset, TLS, proxy, broken framing
    timeout: type[Exception]  # connect, read, write or pool timeout
    malformed: type[Exception]  # a body the transport could not decode (content-encoding)


def brief(exc: BaseException) -> str:
    """``Kind: message``, or just the kind when there is no message (httpx's timeouts)."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def describe(exc: BaseException) -> str:
    """``exc`` for a log line or a ``Connection`` reason: a translated transport error's
    message already leads with the transport's kind of failure; anything else gets its
    class name (:func:`brief`)."""
    return str(exc) if isinstance(exc, K8sTransportError | EtcdTransportError) else brief(exc)


@contextmanager
def translated(family: ErrorFamily) -> Iterator[None]:
    """Re-raise httpx's and the HTTP/2 client's exceptions (and the ``OSError``s, TLS ones
    included, that reach us unwrapped) as ``family``'s, keeping the original as the
    cause."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise family.timeout(brief(exc)) from exc
    except httpx.DecodingError as exc:
        raise family.malformed(brief(exc)) from exc
    except (httpx.HTTPError, H2StreamError, OSError) as exc:
        raise family.transport(brief(exc)) from exc


def keepalive_socket_options(deadline: float) -> list[tuple[int, int, int]]:
    """``setsockopt`` triples that make the kernel give up on a silent peer within
    ``deadline`` seconds: keepalive probes after ``deadline / 3`` of idleness, then every
    ``deadline / 6``; ``TCP_USER_TIMEOUT`` bounds both unanswered probes and unacknowledged
    data to ``5/6`` of the deadline.  Options the platform lacks are left out."""
    idle = max(1, int(deadline / 3))
    interval = max(1, int(deadline / 6))
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                        ("TCP_KEEPCNT", 3),
                        ("TCP_USER_TIMEOUT", max(1000, int(deadline * 5 / 6 * 1000)))):
        opt = getattr(socket, name, None)
        if opt is not None:
            options.append((socket.IPPROTO_TCP, opt, value))
    return options
