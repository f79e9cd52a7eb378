"""Typha's own wire protocol: Go encoding/gob values, snappy-compressed after the handshake.

``codec`` (gob), ``snappy`` (framing), ``messages`` (the eight syncproto messages),
``shared`` (bytes encoded once for all clients), ``session`` / ``client_session`` (sans-IO
state machines) and ``server`` (the trio shell, :func:`serve_gob_connection`).
"""
