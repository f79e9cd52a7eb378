"""JSON lines over trio streams: how the test bed's child processes talk to their parent."""

from __future__ import annotations

import json
from typing import Any

import trio


class JsonLines:
    """Reads one JSON object per newline-terminated line from a trio receive stream."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buf = bytearray()

    async def next(self) -> Any:
        """The next object, or None once the stream has ended."""
        while b"\n" not in self.buf:
            chunk = await self.stream.receive_some(1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        return json.loads(line)

    async def json(self) -> Any:
        """The next object; :class:`EOFError` if the stream has ended."""
        obj = await self.next()
        if obj is None:
            raise EOFError("the other side closed the stream")
        return obj


async def send_json(stream: trio.abc.SendStream, obj: Any) -> None:
    await stream.send_all(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
