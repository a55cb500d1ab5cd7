"""Exact parsing of Kubernetes resource quantities (`100m`, `0.5`, `128Mi`, `1G`, `1e3`) into numbers.

Values are kept as `fractions.Fraction` so that comparisons (QoS: request ==
limit) and sums are exact, as with apimachinery's `resource.Quantity`.
`value()` and `milli_value()` round up, as `Quantity.Value()` and
`Quantity.MilliValue()` do.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

from edgelet.api.errors import ApiError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}

# <signedNumber><suffix>, suffix one of binarySI, decimalSI or e<signedInt>
# (apimachinery pkg/api/resource/quantity.go). "1E" is exa, "1E3" an exponent.
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ApiError):
    """A string that is not a Kubernetes quantity."""


Quantity = str | int | float | Fraction


def parse_quantity(q: Quantity) -> Fraction:
    """The exact numeric value of a quantity; raises QuantityError when malformed."""
    if isinstance(q, bool):
        raise QuantityError(f"quantity {q!r} is a boolean, not a number")
    if isinstance(q, (int, Fraction)):
        return Fraction(q)
    if isinstance(q, float):
        if not math.isfinite(q):
            raise QuantityError(f"quantity {q!r} is not finite")
        # repr() is the shortest decimal that round-trips, so 0.1 means 1/10.
        return Fraction(Decimal(repr(q)))
    if not isinstance(q, str):
        raise QuantityError(f"quantity {q!r} has type {type(q).__name__}")
    m = _QUANTITY.match(q.strip())
    if m is None:
        raise QuantityError(f"quantity {q!r} does not match <number><suffix> (e.g. 100m, 128Mi, 1e3)")
    number = Fraction(Decimal(m.group("num")))
    if m.group("exp"):
        return number * Fraction(10) ** int(m.group("exp")[1:])
    suffix = m.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * _DECIMAL[suffix]


def value(q: Quantity) -> int:
    """The quantity as a whole number, rounded up (bytes for memory)."""
    return math.ceil(parse_quantity(q))


def milli_value(q: Quantity) -> int:
    """The quantity in thousandths, rounded up (millicores for cpu)."""
    return math.ceil(parse_quantity(q) * 1000)
