"""The storm's baseline: a minimal trio server writing precomputed snapshot bytes (gob).

No cache, no sessions, no registry: per connection it reads the hello, writes the same
precomputed ServerHello + restart, waits for the ACK, writes the same precomputed snappy
snapshot, waits for the second ACK, writes the second stream's start and InSync, then only
reads.  What a Typha-protocol storm costs when the server does nothing but the socket work
the protocol requires; ``python -m bench storm`` reports trio-typha's ratio to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.protocols.gob import encode_once
from trio_typha.protocols.gob.messages import MsgServerHello


class RawBlast:
    def __init__(self, snapshot: Sequence[SerializedUpdate], syncer: str = "felix") -> None:
        hello = encode_once.encode(MsgServerHello("raw-blast", syncer, True, 1))
        self.first = encode_once.STREAM_PREFIX + hello + encode_once.RESTART_FOR_SNAPSHOT
        self.snapshot = encode_once.build_compressed_snapshot(snapshot)
        self.last = encode_once.SNAPPY_STREAM_START + encode_once.STATUS_CHUNKS[SyncStatus.IN_SYNC]
        self.in_sync = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            for reply in (self.first, self.snapshot, self.last):
                if not await stream.receive_some(65536):  # hello, ACK, ACK
                    return
                await stream.send_all(reply)
            self.in_sync += 1
            while await stream.receive_some(65536):  # pongs
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)
