"""A Kubernetes API server for tests: real REST, list/watch and Status semantics on trio.

Layers, bottom up: :mod:`.store` (objects and revisions), :mod:`.selectors`, :mod:`.patch`,
:mod:`.watch` (what a watch sends next) and :mod:`.api` (REST routing) are pure;
:mod:`.connection` (h11 on a trio stream) and :mod:`.server` (listeners, hooks) do the I/O.
``python -m testbed.apiserver`` runs one standalone.
"""

from .api import Api, Request, Response, WatchPlan
from .resources import ApiSurface, ServedKind
from .server import DEFAULT_TOKEN, ApiServer, open_apiserver
from .status import ApiError
from .store import Store

__all__ = ["DEFAULT_TOKEN", "Api", "ApiError", "ApiServer", "ApiSurface", "Request", "Response",
           "ServedKind", "Store", "WatchPlan", "open_apiserver"]
