"""Table tests of Kubernetes quantity parsing."""

from fractions import Fraction

import pytest

from edgelet.api.quantity import QuantityError, milli_value, parse_quantity, value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("2", Fraction(2)),
        ("128Mi", Fraction(128 * 2**20)),
        ("1Ki", Fraction(1024)),
        ("1Gi", Fraction(2**30)),
        ("1G", Fraction(10**9)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1E", Fraction(10**18)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("5e-1", Fraction(1, 2)),
        ("1500u", Fraction(15, 10000)),
        ("+3", Fraction(3)),
        ("-1", Fraction(-1)),
        (" 250m ", Fraction(1, 4)),
        (2, Fraction(2)),
        (0.1, Fraction(1, 10)),
        (1.5, Fraction(3, 2)),
    ],
)
def test_parse_quantity(raw, expected):
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize("raw", ["", "m", "1.2.3", "1Mib", "abc", "1 Gi", "1e", "0x10", True, None, float("nan")])
def test_parse_quantity_rejects(raw):
    with pytest.raises(QuantityError):
        parse_quantity(raw)


@pytest.mark.parametrize(
    ("raw", "milli", "whole"),
    [("100m", 100, 1), ("1", 1000, 1), ("1.0001", 1001, 2), ("1n", 1, 1), ("128Mi", 134217728000, 134217728)],
)
def test_values_round_up(raw, milli, whole):
    assert milli_value(raw) == milli
    assert value(raw) == whole
