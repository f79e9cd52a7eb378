"""Typha's own wire protocol: Go encoding/gob values, snappy-compressed after the handshake.

Pure: ``codec`` (gob: ``codec_types``, ``codec_encode``, ``codec_decode``), ``gotime``,
``snappy`` (framing), ``messages`` (the eight syncproto message types), ``encode_once`` (the
bytes of every breadcrumb, encoded once for all clients), ``session`` / ``client_session``
(sans-IO state machines).  The trio shell is ``shell`` (:func:`~.shell.serve_gob_connection`).
"""
