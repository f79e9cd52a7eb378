"""gRPC ``typha.v1.Sync`` served directly on h2 (no grpcio in the server).

Layers, bytes-facing first: :mod:`.framing` (5-byte message prefix), :mod:`.metadata`
(request heads, trailers), :mod:`.h2conn` (sans-IO HTTP/2 connection), :mod:`.session`
(sans-IO Sync stream rules), :mod:`.messages` (encode once per breadcrumb), then the trio
shells :mod:`.sync_service` and :mod:`.server` (entry point :func:`serve_h2_connection`).
"""

from .server import GrpcConnection, serve_h2_connection

__all__ = ["GrpcConnection", "serve_h2_connection"]
