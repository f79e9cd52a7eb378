"""gRPC ``typha.v1.Sync`` served directly on h2 (no grpcio in the server).

Layers, bytes-facing first: :mod:`trio_typha.grpcwire` (the 5-byte message prefix,
status codes), :mod:`.metadata` (request heads, trailers), :mod:`.h2conn` (sans-IO HTTP/2 connection), :mod:`.session`
(sans-IO Sync stream rules), :mod:`.encode_once` (responses encoded once per breadcrumb),
then the trio shells :mod:`.sync_service` and :mod:`.shell` (entry point
:func:`~.shell.serve_h2_connection`).  Nothing is re-exported here, so importing a pure
layer never imports trio.
"""
