"""Purchase records: ``{"id": product id, "price": decimal}`` keyed by a transaction id (pure).

- key: a UUID-shaped transaction id drawn from the seeded RNG,
  e.g. ``3f2a9c1e-07b4-4d21-9e8a-b1c2d3e4f5a6`` (unique in practice, not an RFC 4122 UUID).
- value: ``{"id":1234,"price":57.30}`` — ``price`` a JSON number with exactly two decimals
  within 0.50-999.99 (reads as DECIMAL(10,2)).

Product ids are uniform over ``1..id_range`` where ``id_range = ceil(products / (1 -
unknown_fraction))``: ids above ``products`` (the referential's ``1..products``) are
unknown, about ``unknown_fraction`` of purchases.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from streamscale.errors import ConfigError
from streamscale.generate import Record

PRICE_MIN_CENTS = 50
PRICE_MAX_CENTS = 99_999


def id_range(products: int, unknown_fraction: float) -> int:
    """The largest product id drawn, so that about ``unknown_fraction`` ids exceed ``products``."""
    if products < 1:
        raise ConfigError(f"--products must be >= 1, got {products}")
    if not 0.0 <= unknown_fraction < 1.0:
        raise ConfigError(f"--unknown-fraction must be within [0, 1), got {unknown_fraction}")
    return max(products, math.ceil(products / (1.0 - unknown_fraction) - 1e-9))


def purchase_records(
    rng: random.Random,
    count: int,
    topic: str,
    *,
    products: int,
    unknown_fraction: float = 0.1,
) -> Iterator[Record]:
    """``count`` purchases of products drawn from ``1..id_range(products, unknown_fraction)``."""
    top = id_range(products, unknown_fraction)
    price_span = PRICE_MAX_CENTS - PRICE_MIN_CENTS + 1
    rand = rng.random
    randbytes = rng.randbytes
    for _ in range(count):
        h = randbytes(16).hex()
        key = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        cents = PRICE_MIN_CENTS + int(rand() * price_span)
        value = f'{{"id":{int(rand() * top) + 1},"price":{cents // 100}.{cents % 100:02d}}}'
        yield (topic, key, value, 0, True)
