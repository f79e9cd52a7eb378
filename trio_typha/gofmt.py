"""Go's text forms (strconv.Quote, FormatFloat, fmt's ``%v`` of a float) and, built on them,
log fields as Calico's formatter writes them after the message: `` k1="v" k2=5``.

Fields are sorted by key; strings in Go's strconv.Quote form, errors and other objects as their string,
numbers, booleans and None as Go's ``%#v`` prints them (libcalico-go/lib/logutils/logformat
``appendKVsAndNewLine``).  Pure, so sans-IO modules can attach fields to their log calls.
"""

from __future__ import annotations

__sans_io__ = True

import decimal
import math
import unicodedata
from collections.abc import Mapping
from typing import Any

#: The attribute of a LogRecord that carries its fields.
FIELDS = "typha_fields"


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call whose record carries these key=value fields."""
    return {FIELDS: values}


_SHORT = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
          "\v": "\\v", '"': '\\"', "\\": "\\\\"}


def go_quote(text: str) -> str:
    """``text`` in double quotes with Go's strconv.Quote escapes: the short escapes, \\xNN
    for other ASCII controls, \\uNNNN / \\UNNNNNNNN for other unprintable characters,
    printable non-ASCII as it is."""
    out = ['"']
    for ch in text:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ch == " " or (ch.isprintable() and not _unprintable_in_go(ch)):
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("\\ufffd")  # a lone surrogate is invalid UTF-8: Go sees U+FFFD
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _unprintable_in_go(ch: str) -> bool:
    # Go's unicode.IsPrint is letters, marks, numbers, punctuation, symbols and U+0020;
    # Python's isprintable also admits nothing else, but says so by exclusion.
    return unicodedata.category(ch)[0] not in "LMNPS"


def _shortest_digits(x: float) -> tuple[bool, str, int]:
    """(negative, digits, point) with value = 0.digits * 10**point, digits shortest."""
    sign, digits, exp = decimal.Decimal(repr(float(x))).as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits)).lstrip("0")
    if not ds:
        return bool(sign), "0", 1
    stripped = ds.rstrip("0")
    exp += len(ds) - len(stripped)
    return bool(sign), stripped, len(stripped) + exp


def format_float(x: float, fmt: str) -> str:
    """``strconv.FormatFloat(x, fmt, -1, 64)`` for ``fmt`` ``'e'`` or ``'f'``."""
    neg, ds, point = _shortest_digits(x)
    sgn = "-" if neg else ""
    if fmt == "e":
        e = point - 1 if ds != "0" else 0
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{sgn}{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{sgn}0.{'0' * -point}{ds}"
    if point >= len(ds):
        return f"{sgn}{ds}{'0' * (point - len(ds))}"
    return f"{sgn}{ds[:point]}.{ds[point:]}"


def format_v(x: float) -> str:
    """``fmt.Sprintf("%v", x)`` for a float64: strconv ``'g'`` with the shortest digits,
    in exponent form when the decimal exponent is below -4 or at least 6."""
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if math.isnan(x):
        return "NaN"
    _, ds, point = _shortest_digits(x)
    exp = point - 1 if ds != "0" else 0
    return format_float(x, "e" if exp < -4 or exp >= 6 else "f")


def field_value(value: Any) -> str:
    """One field's value as Calico's formatter writes it: strings quoted, errors and
    values with a string form as that form, numbers and booleans as Go prints them."""
    if isinstance(value, str):
        return go_quote(value)
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_v(value)
    return str(value)


def format_fields(values: Mapping[str, Any]) -> str:
    """`` k1=v1 k2=v2`` sorted by key (empty for no fields)."""
    return "".join(f" {k}={field_value(values[k])}" for k in sorted(values))
