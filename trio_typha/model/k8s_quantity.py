"""Kubernetes resource quantities ("1M", "4Gi", "1.5k", "2e3") reduced to integers.

Calico reads the QoS annotations of a pod with apimachinery's ``resource.ParseQuantity``
and takes ``Value()``: the quantity rounded up, away from zero, to a whole number.  This
module does the same on exact rationals.  (Go's ``Value()`` overflows silently beyond
int64; the only consumer clamps to ranges far below that, so exact arithmetic gives the
answer Go would give for every quantity that does not overflow.)
"""

from __future__ import annotations

__sans_io__ = True

import re
from fractions import Fraction

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12,
                     "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)", re.ASCII)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)
_INT64_MAX = (1 << 63) - 1
# Beyond these decimal exponents any non-zero mantissa is already far outside every range
# Calico clamps to; computing 10**exponent exactly would only cost time.
_EXPONENT_CAP = 400


def quantity_value(text: str) -> int:
    """``resource.MustParse(text).Value()``; raises ``ValueError`` where Go's parser fails."""
    if text == "":
        raise ValueError("quantities must match the regular expression")
    if text == "0":
        return 0
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    mantissa = Fraction(int(whole + frac or "0"), 10 ** len(frac))
    if suffix in _DECIMAL_SUFFIXES:
        scale = Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        scale = Fraction(2 ** _BINARY_SUFFIXES[suffix])
    else:
        e = _EXPONENT.fullmatch(suffix)
        if e is None:
            raise ValueError(f"unable to parse quantity's suffix: {text!r}")
        exponent = int(e.group(1))
        if not -(1 << 63) <= exponent <= _INT64_MAX:
            raise ValueError(f"unable to parse quantity's suffix: {text!r}")
        exponent = (exponent + (1 << 31)) % (1 << 32) - (1 << 31)  # Go's int32() conversion
        if mantissa and exponent > _EXPONENT_CAP:
            cap = int(10 ** _EXPONENT_CAP)
            return -cap if sign == "-" else cap
        scale = Fraction(10) ** max(exponent, -_EXPONENT_CAP)
    value = mantissa * scale
    whole_part = -((-value.numerator) // value.denominator)  # ceiling of the magnitude
    return -whole_part if sign == "-" else whole_part


def clamp_quantity(text: str, minimum: int, maximum: int) -> tuple[int, bool]:
    """Calico's ``parseAndValidateQty``: (value, ok).

    An unparsable quantity gives 0; one outside [minimum, maximum] is pinned to the
    nearer bound.  ``ok`` is False in both cases (Calico logs them and carries on).
    """
    try:
        value = quantity_value(text)
    except ValueError:
        return 0, False
    if value < minimum:
        return minimum, False
    if value > maximum:
        return maximum, False
    return value, True
