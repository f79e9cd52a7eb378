"""The INFO line both protocols log when a client says hello, with what Go Typha logs.

Go Typha logs its connection's context (the client's address, the connection id) with the
whole hello message: hostname, syncer type, client version and info; the compression the
server then picks goes into the same line here, so one line says who connected and how.
"""

from __future__ import annotations

__sans_io__ = True

import logging

from ..gofmt import fields
from ..observe.throttle import LogThrottle, held_back


def log_hello(logger: logging.Logger, protocol: str, peer: str, conn_id: int, *,
              hostname: str, syncer_type: str, version: str, info: str,
              compression: str, throttle: LogThrottle, now: float,
              resume: str = "") -> None:
    """One line per hello, but at most ``throttle``'s burst per peer host per interval: a
    peer can open syncs as fast as it likes, and the line after a pause counts the rest.
    ``resume`` says how a gRPC stream starts (a snapshot, or a resume); Typha's protocol
    always starts with a snapshot and leaves it out."""
    held = throttle.allow(peer.rsplit(":", 1)[0], now)
    if held is None:
        return
    logger.info("Received Hello message from client.%s", held_back(held), extra=fields(
        protocol=protocol, client=peer, connID=f"{conn_id:#x}", hostname=hostname,
        syncerType=syncer_type or "felix", clientVersion=version, clientInfo=info,
        compression=compression or "none", **({"start": resume} if resume else {})))
