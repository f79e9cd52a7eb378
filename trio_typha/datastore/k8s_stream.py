"""Decoding a Kubernetes watch stream (sans-IO).

The API server streams one JSON object per line, ``{"type": ..., "object": ...}``, and
HTTP chunking splits those lines wherever it likes.  :class:`LineDecoder` reassembles lines
from arbitrary chunks; :func:`parse_watch_event` checks and decodes one line.  Neither does
I/O, so both are tested without an event loop.
"""

from __future__ import annotations

__sans_io__ = True

from dataclasses import dataclass
from typing import Any

from ..model.jsonload import loads
from .k8s_errors import MalformedResponse

WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

DEFAULT_MAX_LINE = 64 * 1024 * 1024


class LineDecoder:
    """Splits a byte stream into ``\\n``-terminated lines, whatever the chunk boundaries.

    A line longer than ``max_line`` bytes is an error rather than unbounded buffering.
    """

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline: each byte is scanned once

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the lines it completed (without their newline)."""
        self._buf += data
        lines: list[bytes] = []
        start = 0
        search = self._scanned
        while (end := self._buf.find(b"\n", search)) >= 0:
            lines.append(bytes(self._buf[start:end]))
            start = search = end + 1
        if start:
            del self._buf[:start]
        self._scanned = len(self._buf)
        if self._scanned > self.max_line:
            raise MalformedResponse(f"watch stream line exceeds {self.max_line} bytes")
        return lines

    @property
    def pending(self) -> int:
        """Bytes of an incomplete line held back."""
        return len(self._buf)

    def close(self) -> bytes:
        """End of stream: the unterminated tail (normally empty), and reset."""
        tail = bytes(self._buf)
        self._buf.clear()
        self._scanned = 0
        return tail


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # one of WATCH_EVENT_TYPES
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        """The object's ``metadata.resourceVersion`` (``""`` if it has none);
        :func:`parse_watch_event` has checked that both have the right types."""
        md = self.object.get("metadata")
        rv = md.get("resourceVersion") if isinstance(md, dict) else None
        return rv if isinstance(rv, str) else ""


def parse_watch_event(line: bytes) -> WatchEvent | None:
    """One watch-stream line as an event; None for a blank (keep-alive) line."""
    if not line.strip():
        return None
    try:
        doc = loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedResponse(f"watch event is not JSON: {exc}: {line[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise MalformedResponse(f"watch event is not a JSON object: {line[:200]!r}")
    etype, obj = doc.get("type"), doc.get("object")
    if not isinstance(etype, str) or etype not in WATCH_EVENT_TYPES:
        raise MalformedResponse(f"unknown watch event type {etype!r}")
    if not isinstance(obj, dict):
        raise MalformedResponse(f"{etype} watch event has no object")
    if etype != "ERROR":
        # The object's identity and version are read from here on: check their types now.
        md = obj.get("metadata")
        if not isinstance(md, dict):
            raise MalformedResponse(f"{etype} watch event: metadata is not an object: "
                                    f"{line[:200]!r}")
        rv = md.get("resourceVersion")
        if rv is not None and not isinstance(rv, str):
            raise MalformedResponse(f"{etype} watch event: resourceVersion is not a string: "
                                    f"{line[:200]!r}")
    return WatchEvent(etype, obj)
