"""A Kubernetes API server for tests: real REST, list/watch and Status semantics on trio.

Layers, bottom up: :mod:`.store` (objects and revisions), :mod:`.selectors`, :mod:`.patch`,
:mod:`.watch` (what a watch sends next) and :mod:`.api` (REST routing) are pure;
:mod:`.exchange` (answering a request, streaming a watch), :mod:`.connection` (HTTP/1.1,
h11), :mod:`.h2connection` (HTTP/2, h2) and :mod:`.server` (listeners, protocol choice,
hooks) do the I/O.
``python -m testbed.apiserver`` runs one standalone.
"""

from .api import Api, Request, Response, WatchPlan
from .resources import ApiSurface, ServedKind
from .server import DEFAULT_TOKEN, ApiServer, open_apiserver
from .status import ApiError
from .store import Store

__all__ = ["DEFAULT_TOKEN", "Api", "ApiError", "ApiServer", "ApiSurface", "Request", "Response",
           "ServedKind", "Store", "WatchPlan", "open_apiserver"]
