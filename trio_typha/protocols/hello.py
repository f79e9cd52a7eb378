"""The INFO line both protocols log when a client says hello, with what Go Typha logs.

Go Typha logs its connection's context (the client's address, the connection id) with the
whole hello message: hostname, syncer type, client version and info; the compression the
server then picks goes into the same line here, so one line says who connected and how.
"""

from __future__ import annotations

__sans_io__ = True

import logging


def log_hello(logger: logging.Logger, protocol: str, peer: str, conn_id: int, *,
              hostname: str, syncer_type: str, version: str, info: str,
              compression: str) -> None:
    logger.info("Received Hello message from client. protocol=%s client=%s connID=%#x "
                "hostname=%r syncerType=%s clientVersion=%r clientInfo=%r compression=%s",
                protocol, peer, conn_id, hostname, syncer_type or "felix", version, info,
                compression or "none")
