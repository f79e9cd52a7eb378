"""Typha's endpoints in ``discovery.k8s.io/v1`` EndpointSlices (pure).

Both sides of Typha read the ``calico-typha`` Service's slices: the server counts replicas for
connection rebalancing, a client picks addresses to connect to.  They read them differently,
and each way is Calico's:

* counting (Typha's rebalancing poll): every slice that has a port *named* ``port_name``
  contributes the distinct addresses of **all** its endpoints, ready or not;
* connecting (the client's discovery, :func:`trio_typha.client.discovery.parse_endpoint_slices`):
  only endpoints whose ``conditions.ready`` is not explicitly false, ``address:port`` with
  that slice's port number.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Label the EndpointSlice controller sets to the owning Service's name.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True, slots=True)
class SliceEndpoint:
    address: str
    port: int
    node_name: str
    ready: bool  # conditions.ready, with an absent condition counting as ready


def _named_port(slice_: Mapping[str, Any], port_name: str) -> int | None:
    for port in slice_.get("ports") or ():
        if isinstance(port, Mapping) and port.get("name") == port_name:
            number = port.get("port")
            return number if isinstance(number, int) else 0
    return None


def slice_endpoints(slices: Iterable[Mapping[str, Any]], port_name: str) -> list[SliceEndpoint]:
    """Every address of every endpoint in the slices that carry the port ``port_name``."""
    out: list[SliceEndpoint] = []
    for slice_ in slices:
        port = _named_port(slice_, port_name)
        if port is None:
            continue
        for ep in slice_.get("endpoints") or ():
            if not isinstance(ep, Mapping):
                continue
            conditions = ep.get("conditions") or {}
            ready = conditions.get("ready") is not False
            for address in ep.get("addresses") or ():
                if isinstance(address, str):
                    out.append(SliceEndpoint(address, port, str(ep.get("nodeName") or ""),
                                             ready))
    return out


def count_typhas(slices: Iterable[Mapping[str, Any]], port_name: str) -> int:
    """Typha's ``GetNumTyphas``: distinct addresses behind the named port, ready or not."""
    return len({ep.address for ep in slice_endpoints(slices, port_name)})
