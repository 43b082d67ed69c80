"""The referential's compact form, read without Spark; everything else is left to Spark SQL."""

from __future__ import annotations

import json

import pytest

from streamscale.generate.referential import product_json
from streamscale.pipelines.products import compact_product


def test_the_generators_records_and_tombstones_are_read() -> None:
    assert compact_product(b"42", product_json(42, "Amber Kettle 42").encode()) == (
        42,
        "Amber Kettle 42",
    )
    assert compact_product(b"42", None) == (42, None)
    assert compact_product(b"-3", b'{"id":-3,"name":"minus"}') == (-3, "minus")
    name = 'Caf\u00e9 "13"\t'
    raw = json.dumps({"id": 13, "name": name}, ensure_ascii=False, separators=(",", ":"))
    assert compact_product(b"13", raw.encode()) == (13, name)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b'{"id":1,"name":"x"}'),  # no key
        (b"abc", b'{"id":1,"name":"x"}'),
        (b"007", b'{"id":7,"name":"x"}'),  # Spark's TRY_CAST decides
        (b" 7", None),
        (b"9", b'{"id":10,"name":"Wrong"}'),  # id differs from the key
        (b"8", b'{"id":8}'),
        (b"12", b'{"id":12,"name":5}'),
        (b"11", b'{"id":"11","name":"x"}'),
        (b"7", b"not json"),
        (b"7", b'{"id": 7, "name": "spaced"}'),  # another form: Spark SQL reads it
        (b"7", b'{"name":"x","id":7}'),
        (b"7", b'{"id":7,"name":"\\u2603"}'),  # \u escapes go to Spark
        (b"7", b'{"id":7,"name":"\xff"}'),  # not UTF-8
        (b"99999999999999999999", None),  # beyond a BIGINT
    ],
)
def test_anything_else_is_left_to_spark_sql(key: bytes | None, value: bytes | None) -> None:
    assert compact_product(key, value) is None
