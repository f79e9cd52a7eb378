"""Go's ``time.Time`` as gob carries it: the bytes of ``Time.MarshalBinary``.

Typha's MsgPing / MsgPong timestamps are time.Time, a GobEncoder, so on the wire they are a
length-prefixed blob in one of two layouts (Go's src/time/time.go, MarshalBinary):

* version 1, 15 bytes: ``01``, int64 seconds since 0001-01-01T00:00:00Z, int32 nanoseconds,
  int16 zone offset in minutes east of UTC, where -1 means UTC;
* version 2, 16 bytes: the same plus an int8 of leftover offset seconds (historic LMT zones).

All integers are big-endian two's complement.  Go's decoder adds the version-2 seconds byte
as an *unsigned* value, so a negative leftover does not round-trip in Go; we decode the same
way so that our reading of a Go peer's bytes matches Go's.
"""

from __future__ import annotations

__sans_io__ = True

from dataclasses import dataclass

#: Seconds from 0001-01-01T00:00:00Z (Go's internal epoch) to the Unix epoch.
UNIX_TO_INTERNAL = 62135596800

_V1 = 1
_V2 = 2


class TimeFormatError(ValueError):
    """Bytes that Go's Time.UnmarshalBinary would reject (or a time Go cannot marshal)."""


@dataclass(frozen=True, slots=True)
class GoTime:
    """An instant plus the zone offset it was expressed in, exactly as Go marshals it.

    ``offset`` is seconds east of UTC, or ``None`` for Go's UTC location (marker -1 on the
    wire).  A Local zone that happens to be UTC has offset 0, which is *not* the same bytes.
    ``nanos`` is kept as sent (Go does not range-check it), so re-marshalling a decoded value
    reproduces the peer's bytes.
    """

    seconds: int
    nanos: int = 0
    offset: int | None = None

    @classmethod
    def from_unix_ns(cls, unix_ns: int, offset: int | None = None) -> GoTime:
        sec, nsec = divmod(unix_ns, 1_000_000_000)
        return cls(sec + UNIX_TO_INTERNAL, nsec, offset)

    @property
    def unix_ns(self) -> int:
        return (self.seconds - UNIX_TO_INTERNAL) * 1_000_000_000 + self.nanos

    @property
    def is_zero(self) -> bool:
        """True for Go's ``time.Time{}``, the only time gob omits from a struct."""
        return self.seconds == 0 and self.nanos == 0 and self.offset is None

    def marshal_binary(self) -> bytes:
        if self.offset is None:
            minutes, extra, version = -1, 0, _V1
        else:
            # Go divides with truncation toward zero.
            mag_min, mag_sec = divmod(abs(self.offset), 60)
            sign = -1 if self.offset < 0 else 1
            minutes, extra = sign * mag_min, sign * mag_sec
            version = _V2 if extra else _V1
            if minutes == -1 or not -32768 <= minutes <= 32767:
                raise TimeFormatError(f"unexpected zone offset {self.offset}s")
        try:
            out = (bytes((version,)) + self.seconds.to_bytes(8, "big", signed=True)
                   + self.nanos.to_bytes(4, "big", signed=True)
                   + minutes.to_bytes(2, "big", signed=True))
        except OverflowError as exc:
            raise TimeFormatError(f"time out of range: {self!r}") from exc
        if version == _V2:
            out += extra.to_bytes(1, "big", signed=True)
        return out

    @classmethod
    def unmarshal_binary(cls, data: bytes) -> GoTime:
        if not data:
            raise TimeFormatError("Time.UnmarshalBinary: no data")
        version = data[0]
        if version not in (_V1, _V2):
            raise TimeFormatError(f"Time.UnmarshalBinary: unsupported version {version}")
        want = 15 if version == _V1 else 16
        if len(data) != want:
            raise TimeFormatError(f"Time.UnmarshalBinary: invalid length {len(data)}")
        seconds = int.from_bytes(data[1:9], "big", signed=True)
        nanos = int.from_bytes(data[9:13], "big", signed=True)
        offset = int.from_bytes(data[13:15], "big", signed=True) * 60
        if version == _V2:
            offset += data[15]  # unsigned, as Go adds it
        return cls(seconds, nanos, None if offset == -60 else offset)


#: Go's zero time.Time{} (omitted from structs by gob).
ZERO_TIME = GoTime(0, 0, None)
