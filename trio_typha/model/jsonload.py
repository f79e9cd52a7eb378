"""JSON decoding: ``json.loads``'s result, faster for small texts (pure).

Every list page, watch event and validated value is decoded here.  For small texts (watch
events, each value validated at start-up) orjson is several times faster than the standard
library and yields the same Python values.  Texts over :data:`LARGE` go to ``json.loads``:
with the garbage collector paused (as it is while the initial lists load,
:mod:`..syncer.gcpause`) both decode a large list page equally fast, and orjson's result
takes more memory, which raises the start-up's peak RSS (docs/performance.md).  Where the
two could differ orjson is not used either:

* input orjson refuses (NaN and Infinity, numbers beyond float64, lone surrogates, a byte
  order mark, UTF-16/32, nesting past 1024 levels) goes to ``json.loads``, which accepts or
  refuses it with its own error;
* orjson turns integers outside [-2**63, 2**64) into floats, where ``json`` keeps them
  exact: a text with a run of 19 or more digits anywhere (a conservative test, done at C
  speed) goes to ``json.loads`` as well.

``tests/unit/model/test_jsonload.py`` checks the equivalence, types and key order included.
"""

from __future__ import annotations

__sans_io__ = True

import json
from typing import Any

import orjson

#: Texts longer than this are decoded by json (see above).
LARGE = 1 << 20

_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN = b"0" * 19


def _long_digit_run(data: bytes | str) -> bool:
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data
    return _LONG_RUN in raw.translate(_DIGITS_TO_ZERO)


class JSONTooDeep(ValueError):
    """A text nested deeper than the decoder's recursion allows (``json.loads`` raises
    RecursionError, which is no decoding error to its callers)."""


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``json.loads(data)``: the same value or the same exception, faster; a text nested
    too deeply for ``json.loads`` raises :class:`JSONTooDeep`."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if len(data) <= LARGE and not _long_digit_run(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(data)
    except RecursionError:
        raise JSONTooDeep("JSON nested too deeply to decode") from None
