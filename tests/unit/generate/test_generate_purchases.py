"""Purchase records: determinism, shapes, and the fraction of unknown products."""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import pytest

from streamscale.generate.purchases import id_range, purchase_records

UUID_SHAPE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_same_seed_same_records() -> None:
    def run(seed: int) -> list[tuple[object, ...]]:
        return list(purchase_records(random.Random(seed), 200, "achats", products=50))

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_shapes_and_unknown_fraction() -> None:
    out = list(
        purchase_records(random.Random(11), 20_000, "achats", products=1000, unknown_fraction=0.2)
    )
    assert len(out) == 20_000
    keys = set()
    unknown = 0
    for topic, key, value, timestamp, counted in out:
        assert (topic, timestamp, counted) == ("achats", 0, True)
        assert isinstance(key, str) and UUID_SHAPE.fullmatch(key)
        keys.add(key)
        assert isinstance(value, str)
        purchase = json.loads(value, parse_float=Decimal)
        assert list(purchase) == ["id", "price"]
        assert 1 <= purchase["id"] <= 1250
        unknown += purchase["id"] > 1000
        price = purchase["price"]
        assert isinstance(price, Decimal)
        assert price.as_tuple().exponent == -2
        assert Decimal("0.50") <= price <= Decimal("999.99")
    assert len(keys) == 20_000
    assert unknown / 20_000 == pytest.approx(0.2, abs=0.015)


def test_id_range() -> None:
    assert id_range(1000, 0.0) == 1000
    assert id_range(1000, 0.1) == 1112
    assert id_range(1000, 0.5) == 2000
    with pytest.raises(ValueError):
        id_range(0, 0.1)
    with pytest.raises(ValueError):
        id_range(10, 1.0)
