"""Kubernetes resource quantities (`8`, `"500m"`, `"4Ti"`), parsed exactly and printed the way
the API server prints them.

The API server keeps a `resource.Quantity` field in its canonical form: a built-in kind on
every write, and a custom resource whenever a webhook round-trips it through Go types (Kueue's
ClusterQueue defaulting webhook does, on create). So `8` comes back as `"8"`, `"4096Gi"` as
`"4Ti"`, `0.5` as `"500m"` and `"1000m"` as `"1"`, and a comparison of what we send with what
is stored must go by value. This module mirrors `k8s.io/apimachinery/pkg/api/resource`
(`quantity.go`: `ParseQuantity`, `CanonicalizeBytes`; `amount.go`: `AsCanonicalBytes`,
`AsCanonicalBase1024Bytes`):

- parsing keeps the kind of suffix written: decimal SI (`m`, `k`, `M`, ... or none), binary SI
  (`Ki` ... `Ei`) or a decimal exponent (`e3`); values are exact and rounded up (away from
  zero) to whole nanos, binary SI capped at 2^63-1;
- a decimal value prints as the smallest integer mantissa whose exponent is a multiple of 3
  (`1500m`, `48`, `1k`, `12M`);
- a binary SI value prints with the largest power of 1024 that divides it (`4Ti`, `1536Mi`),
  unless it lies strictly between -1024 and 1024 or is not whole: then it prints as decimal
  (`0.5Ki` is `512`);
- zero is `0`.

The parser's fast path keeps a few non-canonical spellings as written (`+8`, `08`); we never
send those, and equality here is by value, so they compare equal all the same.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from functools import lru_cache
from typing import Any

_NUMBER = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?\d+)$")
_DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = {v: k for k, v in _BINARY_SUFFIXES.items()}
_NANO = 10**9
_MAX_BINARY = 2**63 - 1


class Format(StrEnum):
    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


class QuantityError(ValueError):
    """Not a quantity: the API server would refuse it."""


@dataclass(frozen=True, eq=False)
class Quantity:
    """An exact quantity and the suffix family it was written in. Equal when equal in value."""

    value: Fraction
    format: Format

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return canonical_string(self)

    def __repr__(self) -> str:
        return f"Quantity({canonical_string(self)!r})"


def parse(raw: Any) -> Quantity:
    """A quantity from its JSON form: a string, or a number (which the server reads as text)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise QuantityError(f"not a quantity: {raw!r}")
    return _parse_text(str(raw).strip() if isinstance(raw, str) else repr(raw), raw)


@lru_cache(maxsize=4096)
def _parse_text(text: str, raw: Any) -> Quantity:
    """Remembered: a pass compares thousands of quantities, nearly all of a few dozen
    spellings, and exact arithmetic on fractions is slow (a Quantity is immutable: sharing one
    is safe)."""
    match = _NUMBER.match(text)
    if not match:
        raise QuantityError(f"not a quantity: {raw!r}")
    sign, digits, suffix = match.groups()
    number = Fraction(digits)
    if suffix in _DECIMAL_SUFFIXES:
        value, format_ = number * Fraction(10) ** _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    elif suffix in _BINARY_SUFFIXES:
        value, format_ = number * 1024 ** _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    elif exponent := _EXPONENT.match(suffix):
        value, format_ = number * Fraction(10) ** int(exponent.group(1)), Format.DECIMAL_EXPONENT
    else:
        raise QuantityError(f"not a quantity: {raw!r} (unknown suffix {suffix!r})")
    # Any non-zero amount rounds up to at least one nano: asking for some means getting some.
    value = Fraction(math.ceil(value * _NANO), _NANO)
    if format_ is Format.BINARY_SI:
        value = min(value, Fraction(_MAX_BINARY))
        if 0 < value < 1:
            format_ = Format.DECIMAL_SI
    return Quantity(-value if sign == "-" else value, format_)


def canonical_string(quantity: Quantity) -> str:
    """The string the API server stores for `quantity`."""
    value = quantity.value
    if value == 0:
        return "0"
    format_ = quantity.format
    if format_ is Format.BINARY_SI and (-1024 < value < 1024 or value.denominator != 1):
        format_ = Format.DECIMAL_SI
    if format_ is Format.BINARY_SI:
        mantissa, power = int(value), 0
        while abs(mantissa) >= 1024 and mantissa % 1024 == 0 and power < 6:
            mantissa, power = mantissa // 1024, power + 1
        return f"{mantissa}{_BINARY_BY_POWER.get(power, '')}"
    mantissa, exponent = int(value * _NANO), -9
    while mantissa % 10 == 0:
        mantissa, exponent = mantissa // 10, exponent + 1
    while exponent % 3:
        mantissa, exponent = mantissa * 10, exponent - 1
    if format_ is Format.DECIMAL_SI and exponent in _DECIMAL_BY_EXPONENT:
        return f"{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)


def canonical(raw: Any) -> str:
    """`raw` as the API server stores it: `canonical(8) == "8"`, `canonical("4096Gi") == "4Ti"`."""
    return canonical_string(parse(raw))
