"""Quantities as the API server prints them.

The expected strings are those of `k8s.io/apimachinery/pkg/api/resource` (`quantity_test.go`:
`TestQuantityString`, `TestQuantityParseEmit`, `TestQuantityParse`), plus every kind of value
we render, written down from the same rules.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.quantity import Format, QuantityError, canonical, parse


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        # What we render and what the server gives back for it.
        pytest.param(8, "8", id="a GPU count sent as a number comes back as a string"),
        pytest.param(48, "48", id="a CPU quota keeps its digits"),
        pytest.param(1000, "1k", id="a thousand is 1k"),
        pytest.param(1152, "1152", id="a number not divisible by 1000 keeps its digits"),
        pytest.param(0, "0", id="zero"),
        pytest.param("0Gi", "0", id="zero has no suffix"),
        pytest.param("4096Gi", "4Ti", id="4096Gi is 4Ti"),
        pytest.param("4Ti", "4Ti", id="4Ti stays 4Ti"),
        pytest.param("8960Gi", "8960Gi", id="8960Gi is not a whole number of Ti"),
        pytest.param("2240Gi", "2240Gi", id="2240Gi stays"),
        pytest.param("0.5", "500m", id="a weight of 0.5 is 500m"),
        pytest.param(0.5, "500m", id="a weight sent as the number 0.5 is 500m"),
        pytest.param("1000m", "1", id="1000m is 1"),
        pytest.param("8000m", "8", id="8000m is 8"),
        pytest.param("1.5Gi", "1536Mi", id="1.5Gi is 1536Mi"),
        # apimachinery TestQuantityString: the alternate spelling prints as the canonical one.
        pytest.param("1024Mi", "1Gi", id="1024Mi is 1Gi"),
        pytest.param("307200Ki", "300Mi", id="307200Ki is 300Mi"),
        pytest.param("1025024Mi", "1001Gi", id="1025024Mi is 1001Gi"),
        pytest.param("1024Gi", "1Ti", id="1024Gi is 1Ti"),
        pytest.param("5000m", "5", id="5000m is 5"),
        pytest.param("1000M", "1G", id="1000M is 1G"),
        pytest.param("0.001T", "1G", id="0.001T is 1G"),
        pytest.param("1000u", "1m", id="1000u is 1m"),
        pytest.param("1.08", "1080m", id="1.08 is 1080m"),
        pytest.param("1080000000n", "1080m", id="1080000000n is 1080m"),
        pytest.param("1000E", "1e21", id="past E, decimal SI falls back to an exponent"),
        pytest.param(".001e12", "1e9", id="an exponent stays an exponent"),
        pytest.param("1000e-12", "1e-9", id="a negative exponent"),
        pytest.param("1e3", "1e3", id="1e3 stays 1e3"),
        pytest.param("00", "0", id="00 is 0"),
        pytest.param("1025", "1025", id="1025 stays"),
        pytest.param("3k", "3k", id="3k stays"),
        # apimachinery TestQuantityParseEmit: binary below 1 prints as decimal.
        pytest.param(".001Ki", "1024m", id="a fraction of a Ki is printed as decimal"),
        pytest.param(".000001Ki", "1024u", id="a millionth of a Ki is 1024u"),
        pytest.param(".000000000001Ki", "2n", id="below a nano rounds up to 2n"),
        # apimachinery TestQuantityParse: rounding and caps.
        pytest.param("0.9n", "1n", id="less than a nano rounds up to one"),
        pytest.param("3.001n", "4n", id="a fraction of a nano rounds up"),
        pytest.param("9Ei", "9223372036854775807", id="binary SI is capped at 2^63-1"),
        pytest.param("1.1Ki", "1126400m", id="a binary value that is not whole is decimal"),
        pytest.param("0.5Ki", "512", id="a binary value under 1024 is decimal"),
        pytest.param("-1.5", "-1500m", id="negative values keep their sign"),
        pytest.param("1.3E+6", "1300e3", id="an exponent with a plus sign"),
        pytest.param(" 1", "1", id="JSON decoding trims spaces"),
    ],
)
def test_canonical_form(raw: Any, want: str) -> None:
    assert canonical(raw) == want


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        pytest.param(8, "8", True, id="8 and '8' are equal"),
        pytest.param("8", "8000m", True, id="'8' and '8000m' are equal"),
        pytest.param("4096Gi", "4Ti", True, id="4096Gi and 4Ti are equal"),
        pytest.param("1Ki", 1024, True, id="the same value in binary and decimal is equal"),
        pytest.param(48, 64, False, id="48 and 64 differ"),
        pytest.param("1Gi", "1G", False, id="1Gi and 1G differ"),
    ],
)
def test_quantities_are_equal_by_value(a: Any, b: Any, equal: bool) -> None:
    assert (parse(a) == parse(b)) is equal
    if equal:
        assert hash(parse(a)) == hash(parse(b))


def test_the_suffix_family_is_kept() -> None:
    assert [parse(x).format for x in ("8", "8Gi", "8e3")] == [
        Format.DECIMAL_SI,
        Format.BINARY_SI,
        Format.DECIMAL_EXPONENT,
    ]


def test_a_quantity_is_not_equal_to_its_string() -> None:
    """Comparisons put quantities on both sides; a raw value on one side is a difference."""
    assert parse("8") != "8"
    assert parse("8") != 8


@pytest.mark.parametrize(
    "raw",
    # apimachinery TestQuantityParse's invalid inputs, and values JSON can hold but a quantity
    # cannot.
    ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", "", True, None],
)
def test_not_a_quantity(raw: Any) -> None:
    with pytest.raises(QuantityError):
        parse(raw)
