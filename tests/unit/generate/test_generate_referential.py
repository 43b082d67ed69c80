"""Referential records: determinism, products then renames and tombstones, plans."""

from __future__ import annotations

import json
import random

import pytest

from streamscale.generate.referential import (
    plan_for_products,
    plan_for_records,
    referential_records,
    renames,
)


def records(seed: int, products: int, rename: float, delete: float) -> list[tuple[object, ...]]:
    plan = plan_for_products(products, rename, delete)
    return list(referential_records(random.Random(seed), plan, "referentiel"))


def test_same_seed_same_records() -> None:
    assert records(7, 500, 0.2, 0.1) == records(7, 500, 0.2, 0.1)
    assert records(7, 500, 0.2, 0.1) != records(8, 500, 0.2, 0.1)


def test_products_then_renames_and_tombstones() -> None:
    out = records(1, 1000, 0.1, 0.05)
    assert len(out) == 1150
    assert all(r[0] == "referentiel" and r[3] == 0 and r[4] is True for r in out)
    first = out[:1000]
    assert [r[1] for r in first] == [str(i) for i in range(1, 1001)]
    names: dict[str, str] = {}
    for _, key, value, _, _ in first:
        assert isinstance(value, str)
        product = json.loads(value)
        assert list(product) == ["id", "name"]
        assert str(product["id"]) == key
        names[str(key)] = product["name"]
    updates = out[1000:]
    tombstones = [r for r in updates if r[2] is None]
    renames = [r for r in updates if r[2] is not None]
    assert len(tombstones) == 50
    assert len(renames) == 100
    assert len({r[1] for r in tombstones}) == 50
    assert len({r[1] for r in renames}) == 100
    for _, key, value, _, _ in renames:
        assert isinstance(value, str)
        product = json.loads(value)
        assert str(product["id"]) == key
        assert product["name"].endswith(" v2")
        assert product["name"] != names[str(key)]
    # Updates are interleaved, not all renames first.
    kinds = [r[2] is None for r in updates]
    assert kinds != sorted(kinds)


def test_plans() -> None:
    assert plan_for_products(0).total == 0
    plan = plan_for_products(10, 0.25, 0.04)
    assert (plan.products, plan.renames, plan.deletes, plan.total) == (10, 2, 0, 12)
    for records_ in (0, 1, 7, 115, 1150, 99_999):
        plan = plan_for_records(records_, 0.1, 0.05)
        assert plan.total <= records_
        assert plan_for_products(plan.products + 1, 0.1, 0.05).total > records_


@pytest.mark.parametrize(("rename", "delete"), [(-0.1, 0.0), (0.0, 1.5)])
def test_fractions_are_checked(rename: float, delete: float) -> None:
    with pytest.raises(ValueError, match="fraction"):
        plan_for_products(10, rename, delete)


def test_renames_of_a_published_referential() -> None:
    out = list(renames(random.Random(3), 50, 400, "referentiel"))
    assert out == list(renames(random.Random(3), 50, 400, "referentiel"))
    assert len(out) == 400
    ids = set()
    for i, (topic, key, value, ts, counted) in enumerate(out):
        assert (topic, ts, counted) == ("referentiel", 0, True)
        assert isinstance(value, str)
        product = json.loads(value)
        assert str(product["id"]) == key and 1 <= product["id"] <= 50
        assert product["name"].endswith(f" r{i}")
        ids.add(product["id"])
    assert len(ids) > 40  # drawn over the whole range, with repeats
    with pytest.raises(ValueError, match="--renames-of"):
        renames(random.Random(3), 0, 1, "referentiel")
