"""Referential records in the compact form producers write, read without Spark (pure).

The enrichment's driver checks each batch's referential records (:mod:`.enrichment`).
A record whose key is a plain integer and whose value is exactly ``{"id":<the key>,"name":
"<a JSON string without \\u escapes>"}``, or null (a tombstone), is read here, with no Spark
job; anything else (other spacing or field order, \\u escapes, keys such as ``007``, every
bad record) returns None and is checked by Spark SQL (``enrichment.parse_referential``),
whose reading is the definition. The form accepted here reads the same both ways.
"""

from __future__ import annotations

import json
import re
from typing import Final

_ID: Final = rb"(0|-?[1-9][0-9]{0,17})"
KEY_PATTERN: Final = re.compile(_ID + rb"\Z")
VALUE_PATTERN: Final = re.compile(
    rb'\{"id":' + _ID + rb',"name":("(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*")\}\Z'
)
"""The compact value; a name may hold raw UTF-8 and simple escapes, never ``\\u``."""


def compact_product(key: bytes | None, value: bytes | None) -> tuple[int, str | None] | None:
    """``(product id, name)`` of a referential record in the compact form (name None: a
    tombstone), or None when Spark SQL must read it."""
    if key is None or KEY_PATTERN.match(key) is None:
        return None
    pid = int(key)
    if value is None:
        return pid, None
    found = VALUE_PATTERN.match(value)
    if found is None or int(found[1]) != pid:
        return None
    try:
        name = json.loads(found[2])
    except ValueError:  # not UTF-8
        return None
    return pid, name if isinstance(name, str) else None
