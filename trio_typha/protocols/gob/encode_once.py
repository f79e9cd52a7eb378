"""Server output encoded once and written to every client ("encode once, send many").

Every server gob stream, on every connection, starts with the same :data:`STREAM_PREFIX`:
standalone definitions of all the types the server ever sends (Go's decoder accepts
definitions ahead of the values that use them).  After it, every message's bytes depend on
the message alone, so one encoding of a breadcrumb's deltas serves every client, whether its
stream is the plain one or the second snappy stream (each of those starts with the prefix).

Type ids follow Go's numbering in a fresh process (Envelope 64, MsgServerHello 65, ...), so
the value messages are byte-identical to what Typha would send on a stream where it had
numbered its types the same way.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Sequence

from ...cache.core import Breadcrumb
from ...model.kv import SerializedUpdate, SyncStatus
from . import snappy
from .codec import Encoder, TypeIds
from .messages import (
    COMPRESSION_SNAPPY,
    ENVELOPE,
    MSG_DECODER_RESTART,
    MSG_KVS,
    MSG_PING,
    MSG_SERVER_HELLO,
    MSG_SYNC_STATUS,
    REGISTRY,
    Envelope,
    Message,
    MsgDecoderRestart,
    MsgKVs,
    MsgSyncStatus,
)

#: KVs per MsgKVs inside the pre-built compressed snapshot (Typha's fixed value).
COMPRESSED_SNAPSHOT_BATCH = 1000

_ENCODER = Encoder(REGISTRY, TypeIds())
#: Type definitions that open every server gob stream.
STREAM_PREFIX = _ENCODER.define(
    [ENVELOPE, MSG_SERVER_HELLO, MSG_DECODER_RESTART, MSG_KVS, MSG_SYNC_STATUS, MSG_PING])
_ENCODER.freeze()


def encode(message: Message) -> bytes:
    """One server message as a gob message for a stream that began with STREAM_PREFIX.

    Thread-safe: the frozen encoder keeps no per-call state.
    """
    return _ENCODER.encode(Envelope(message), ENVELOPE)


RESTART_FOR_SNAPSHOT = encode(MsgDecoderRestart(
    "enable compression: snappy;send binary snapshot", COMPRESSION_SNAPPY))
END_OF_SNAPSHOT = encode(MsgDecoderRestart("End of compressed snapshot.", COMPRESSION_SNAPPY))
#: The start of the second snappy stream (after ACK#2): identifier, then fresh definitions.
SNAPPY_STREAM_START = snappy.STREAM_IDENTIFIER + snappy.chunks(STREAM_PREFIX)

STATUS: dict[SyncStatus, bytes] = {s: encode(MsgSyncStatus(s)) for s in SyncStatus}
# Compile MsgKVs' encoder now, before worker threads build snapshots with it.
encode(MsgKVs(()))
STATUS_CHUNKS: dict[SyncStatus, bytes] = {s: snappy.chunks(b) for s, b in STATUS.items()}


def kvs_messages(updates: Sequence[SerializedUpdate], per_message: int) -> bytes:
    """``updates`` as consecutive MsgKVs of at most ``per_message`` entries (none if empty)."""
    return b"".join(encode(MsgKVs(tuple(updates[i:i + per_message])))
                    for i in range(0, len(updates), per_message))


#: Memo keys of a breadcrumb's gob encodings (a ServerWorkers worker is handed them).
DELTAS_KEY = ("gob", "deltas")
DELTAS_CHUNKS_KEY = ("gob", "deltas", "snappy")


def deltas(crumb: Breadcrumb) -> bytes:
    """The breadcrumb's updates as one MsgKVs (empty for a status-only breadcrumb)."""
    return crumb.memo(DELTAS_KEY,
                      lambda c: encode(MsgKVs(c.updates)) if c.updates else b"")


def deltas_chunks(crumb: Breadcrumb) -> bytes:
    """:func:`deltas` as snappy data chunks, complete in themselves (Typha's per-message flush)."""
    return crumb.memo(DELTAS_CHUNKS_KEY, lambda c: snappy.chunks(deltas(c)))


def build_streamed_snapshot(snapshot: Sequence[SerializedUpdate], per_message: int) -> bytes:
    """Snapshot for a plain stream: MsgKVs of ``per_message`` entries (max_message_size)."""
    return kvs_messages(snapshot, per_message)


def build_compressed_snapshot(snapshot: Sequence[SerializedUpdate]) -> bytes:
    """The pre-built snapshot: one whole snappy stream holding a fresh gob stream.

    Definitions, MsgKVs of up to 1000 entries, then MsgDecoderRestart("End of compressed
    snapshot."); the last chunk ends exactly after it, so nothing else belongs to this stream.
    """
    gob = STREAM_PREFIX + kvs_messages(snapshot, COMPRESSED_SNAPSHOT_BATCH) + END_OF_SNAPSHOT
    return snappy.stream(gob)
