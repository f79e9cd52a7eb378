"""The Kubernetes API datastore (KDD, ``TYPHA_DATASTORETYPE=kubernetes``).

Open it with :func:`open_kubernetes_datastore`, or build it with
:meth:`KubernetesDatastore.from_config` and start :meth:`KubernetesDatastore.run` (the
daemon does, first thing); either settles which API group backs Calico's resources
(:attr:`KubernetesDatastore.calico_group`, to be passed to the model layer when asking for
the kinds to watch), asking the server over the one HTTP/2 connection every later request
shares, then :meth:`KubernetesDatastore.watch` runs one list-watch loop
(:class:`~trio_typha.datastore.k8s_watch.KindWatcher`) per kind.

The group follows Calico v3.32's ``UsingV3CRDs`` (``libcalico-go/lib/backend/k8s/discovery.go``):
``CALICO_API_GROUP`` decides when set (``projectcalico.org/v3``, compared case-insensitively,
means the v3 group; any other value the ``crd.projectcalico.org/v1`` CRDs).  Otherwise the
server's API groups decide: v3 only when ``projectcalico.org`` is served and
``crd.projectcalico.org`` is not (both served means the Calico API server implements v3 on top
of the v1 CRDs, so the CRDs are read directly); when discovery fails, v1.
"""

from __future__ import annotations

import logging
import random as _random
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..config import Config
from ..model.kinds import CALICO_CRD_GROUP, CALICO_V3_GROUP, ResourceKind
from .base import Datastore, DatastoreEvent
from .k8s_api import KubeApi
from .k8s_config import KubeClientConfig, load_kube_client_config
from .k8s_errors import K8sError
from .k8s_profile_watch import ProfileStamps
from .k8s_reflector import KindReflector
from .k8s_watch import KindWatcher, WatchTuning
from .known import StateError
from .stall import WatchBoard

log = logging.getLogger(__name__)

V3_GROUP_VERSION = f"{CALICO_V3_GROUP}/v3"


def choose_calico_group(configured: str | None, served: Collection[str] | None) -> str:
    """The API group backing Calico resources (pure; see the module docstring).

    ``configured`` is ``CALICO_API_GROUP`` (None when unset); ``served`` the server's API
    group names, None when discovery failed.
    """
    if configured:
        return CALICO_V3_GROUP if configured.lower() == V3_GROUP_VERSION else CALICO_CRD_GROUP
    if served is None:
        return CALICO_CRD_GROUP
    return (CALICO_V3_GROUP if CALICO_V3_GROUP in served and CALICO_CRD_GROUP not in served
            else CALICO_CRD_GROUP)


async def resolve_calico_group(api: KubeApi, configured: str | None) -> str:
    """:func:`choose_calico_group`, asking the API server only when not configured."""
    if configured:
        return _decided(configured, None)
    try:
        served: set[str] | None = await api.served_groups()
    except K8sError as exc:
        log.warning("Cannot discover the API groups (%s); using %s", exc, CALICO_CRD_GROUP)
        served = None
    return _decided(None, served)


def _decided(configured: str | None, served: set[str] | None) -> str:
    group = choose_calico_group(configured, served)
    if configured:
        log.info("Using the configured Calico API group %s (CALICO_API_GROUP=%s)",
                 group, configured)
    elif served is not None:
        log.info("Discovered Calico API group %s (projectcalico.org served: %s, "
                 "crd.projectcalico.org served: %s)", group, CALICO_V3_GROUP in served,
                 CALICO_CRD_GROUP in served)
    return group


class KubernetesDatastore(Datastore):
    """List-watches resource kinds on a Kubernetes API server (see the module docstring)."""

    name = "kubernetes"

    def __init__(self, api: KubeApi, *, calico_group: str | None,
                 tuning: WatchTuning | None = None,
                 random: Callable[[], float] | None = None) -> None:
        """``calico_group`` None: discovered from the API server when :meth:`run` starts."""
        self.api = api
        self._calico_group = calico_group
        self.tuning = tuning or WatchTuning()
        self._random = random or _random.Random().random
        self._watches = WatchBoard(trio.current_time)
        #: Calico's profile-watcher state of each running :meth:`watch`, by its ``name``
        self.profile_stamps: dict[str, ProfileStamps] = {}
        #: each running watch's loops, by its ``name`` (for :meth:`export_watch`)
        self._watchers: dict[str, list[KindWatcher]] = {}
        #: reflectors restored from a sibling, taken by the next watch of that ``name``
        self._restored: dict[str, dict[ResourceKind, KindReflector]] = {}

    @property
    def calico_group(self) -> str:
        if self._calico_group is None:
            raise RuntimeError("the Calico API group is discovered when "
                               "KubernetesDatastore.run starts; it has not")
        return self._calico_group

    @property
    def watches(self) -> WatchBoard:
        """Progress of every running watch, as ``<name>/<plural>``."""
        return self._watches

    @classmethod
    def from_config(cls, cfg: Config, *, tuning: WatchTuning | None = None,
                    random: Callable[[], float] | None = None) -> KubernetesDatastore:
        """From Calico's client settings (:mod:`.k8s_config`); no request is made here.

        Without ``CALICO_API_GROUP`` the API group is discovered (``GET /apis``) when
        :meth:`run` starts, on the shared HTTP/2 connection every later request uses.
        """
        config = load_kube_client_config(cfg)
        log.info("Kubernetes API server %s (from %s)", config.server, config.source)
        group = (_decided(config.calico_api_group, None) if config.calico_api_group
                 else None)
        tuning = tuning or WatchTuning()
        return cls(KubeApi(config, stall_deadline=tuning.stall_deadline), calico_group=group,
                   tuning=tuning, random=random)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host the API client's shared HTTP/2 connection (:meth:`.KubeApi.run`) until
        cancelled, and first settle the Calico API group if it was left to discovery:
        started once it is, so the process asks for its syncers' kinds after."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.api.run)
            if self._calico_group is None:
                self._calico_group = await resolve_calico_group(self.api, None)
            task_status.started()

    @property
    def kube_api(self) -> KubeApi:
        return self.api

    async def aclose(self) -> None:
        """Close the HTTP connections (watches must have been cancelled)."""
        await self.api.aclose()

    def export_watch(self, name: str) -> dict[str, Any] | None:
        watchers = self._watchers.get(name)
        if watchers is None:
            return None
        return {"kinds": {str(w.kind): w.reflector.export() for w in watchers}}

    def restore_watch(self, name: str, kinds: Sequence[ResourceKind], state: object) -> None:
        by_name = {str(k): k for k in kinds}
        held = state.get("kinds") if isinstance(state, dict) else None
        if not isinstance(held, dict) or set(held) != set(by_name):
            raise StateError(f"watch state of kinds "
                             f"{sorted(held) if isinstance(held, dict) else held!r:.200}, "
                             f"not {sorted(by_name)}")
        reflectors = {}
        for key, kind_state in held.items():
            reflector = KindReflector(by_name[key])
            reflector.restore(kind_state)
            reflectors[reflector.kind] = reflector
        self._restored[name] = reflectors

    async def watch(self, kinds: Sequence[ResourceKind],
                    send: trio.MemorySendChannel[DatastoreEvent], *, name: str = "",
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """One list-watch loop per kind, named ``<name>/<plural>`` in :attr:`watches`;
        started once every loop has started.  The Namespace and ServiceAccount loops share
        the state of Calico's profile watcher (:mod:`.k8s_profile_watch`)."""
        watchers: list[KindWatcher] = []
        profile = self.profile_stamps[name] = ProfileStamps()
        restored = self._restored.pop(name, {})
        self._watchers[name] = watchers
        try:
            async with trio.open_nursery() as nursery:
                for kind in kinds:
                    stream = f"{name}/{kind.plural}" if name else kind.plural
                    watcher = KindWatcher(
                        self.api, kind, send, tuning=self.tuning, random=self._random,
                        check=self.watches.add(stream, self.tuning.stall_deadline),
                        stream=stream, profile=profile, reflector=restored.get(kind))
                    watchers.append(watcher)
                    await nursery.start(watcher.run)
                task_status.started()
        finally:
            for watcher in watchers:
                self.watches.remove(watcher.stream, watcher.check)
            if self.profile_stamps.get(name) is profile:
                del self.profile_stamps[name]
            if self._watchers.get(name) is watchers:
                del self._watchers[name]


@asynccontextmanager
async def open_kubernetes_datastore(config: KubeClientConfig, *,
                                    tuning: WatchTuning | None = None,
                                    random: Callable[[], float] | None = None,
                                    ) -> AsyncIterator[KubernetesDatastore]:
    """Connect to the API server of ``config`` and settle the Calico API group.

    Discovery failing is not fatal (v1 CRDs are assumed, as Calico does); the HTTP client is
    closed on exit.
    """
    log.info("Kubernetes API server %s (from %s)", config.server, config.source)
    async with KubeApi(config, stall_deadline=(tuning or WatchTuning()).stall_deadline) as api:
        group = await resolve_calico_group(api, config.calico_api_group)
        yield KubernetesDatastore(api, calico_group=group, tuning=tuning, random=random)
