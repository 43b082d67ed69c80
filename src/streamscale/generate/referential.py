"""Referential records: products ``{"id": int, "name": str}`` keyed by ``str(id)`` (pure).

The referential is a table (compacted topic ``referentiel``): the latest value per key is the
product's current name, a tombstone (value None) deletes it. A run publishes products
``1..products`` once each, in id order, then a seeded shuffle of updates:
``round(products * rename_fraction)`` renames (distinct products, new name ending in
`` v2``) and ``round(products * delete_fraction)`` tombstones (distinct products; a product
may be both renamed and deleted, in either order). Value example:
``{"id":17,"name":"Amber Kettle 17"}``. :func:`renames` are the changes of a referential
already published (``--renames-of``): products drawn at random, each rename a new name.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from streamscale.errors import ConfigError
from streamscale.generate import Record

ADJECTIVES: tuple[str, ...] = (
    "Amber",
    "Brisk",
    "Cobalt",
    "Dusty",
    "Elder",
    "Frosty",
    "Golden",
    "Hazel",
    "Ivory",
    "Jade",
    "Lunar",
    "Misty",
    "Noble",
    "Olive",
    "Rusty",
    "Silver",
)
NOUNS: tuple[str, ...] = (
    "Anvil",
    "Basket",
    "Candle",
    "Drum",
    "Easel",
    "Flask",
    "Globe",
    "Hammock",
    "Kettle",
    "Lantern",
    "Mirror",
    "Needle",
    "Oar",
    "Pillow",
    "Quill",
    "Teapot",
)


@dataclass(frozen=True)
class ReferentialPlan:
    """How many products, renames and tombstones one run publishes."""

    products: int
    renames: int
    deletes: int

    @property
    def total(self) -> int:
        return self.products + self.renames + self.deletes


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be within 0-1, got {value}")


def plan_for_products(
    products: int, rename_fraction: float = 0.0, delete_fraction: float = 0.0
) -> ReferentialPlan:
    """The plan for ``products`` products (``--count``)."""
    _check_fraction("--rename-fraction", rename_fraction)
    _check_fraction("--delete-fraction", delete_fraction)
    if products < 0:
        raise ConfigError(f"products must be >= 0, got {products}")
    return ReferentialPlan(
        products, round(products * rename_fraction), round(products * delete_fraction)
    )


def plan_for_records(
    records: int, rename_fraction: float = 0.0, delete_fraction: float = 0.0
) -> ReferentialPlan:
    """The largest plan of at most ``records`` records (``--duration``: what the rate allows)."""
    products = int(records / (1.0 + rename_fraction + delete_fraction))
    # Rounding makes the estimate off by a few either way; totals grow with products.
    while (
        products > 0
        and plan_for_products(products, rename_fraction, delete_fraction).total > records
    ):
        products -= 1
    while plan_for_products(products + 1, rename_fraction, delete_fraction).total <= records:
        products += 1
    return plan_for_products(products, rename_fraction, delete_fraction)


def _name(rng: random.Random, product_id: int) -> str:
    adjective = ADJECTIVES[int(rng.random() * len(ADJECTIVES))]
    noun = NOUNS[int(rng.random() * len(NOUNS))]
    return f"{adjective} {noun} {product_id}"


def product_json(product_id: int, name: str) -> str:
    """The compact JSON value of a product (names never need escaping)."""
    return f'{{"id":{product_id},"name":"{name}"}}'


def referential_records(rng: random.Random, plan: ReferentialPlan, topic: str) -> Iterator[Record]:
    """The records of ``plan``: every product once, then renames and tombstones shuffled."""
    for product_id in range(1, plan.products + 1):
        yield (topic, str(product_id), product_json(product_id, _name(rng, product_id)), 0, True)
    ids = range(1, plan.products + 1)
    updates = [(pid, True) for pid in rng.sample(ids, plan.renames)]
    updates += [(pid, False) for pid in rng.sample(ids, plan.deletes)]
    rng.shuffle(updates)
    for product_id, rename in updates:
        if rename:
            value = product_json(product_id, _name(rng, product_id) + " v2")
            yield (topic, str(product_id), value, 0, True)
        else:
            yield (topic, str(product_id), None, 0, True)


def renames(rng: random.Random, products: int, count: int, topic: str) -> Iterator[Record]:
    """``count`` renames of products drawn uniformly from ``1..products`` (with repeats), the
    ``i``-th named ``"<name> r<i>"``: a published referential changing while it is used."""
    if products < 1:
        raise ConfigError(f"--renames-of must be >= 1, got {products}")
    return _renames(rng, products, count, topic)


def _renames(rng: random.Random, products: int, count: int, topic: str) -> Iterator[Record]:
    for i in range(count):
        product_id = 1 + int(rng.random() * products)
        name = f"{_name(rng, product_id)} r{i}"
        yield (topic, str(product_id), product_json(product_id, name), 0, True)
