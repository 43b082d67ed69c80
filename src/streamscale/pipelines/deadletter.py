"""Dead-lettering: bad records go to ``<pipeline>-dlq`` with their original bytes and a reason.

A record that a pipeline cannot use (not JSON, wrong types, missing fields, a null key where
one is needed, an undecodable hit) is never dropped silently and never stops the pipeline:
it is written to the pipeline's dead-letter topic with the original key and value bytes and
Kafka headers naming what went wrong and where it came from:

    error             one of :data:`ERRORS` (stable, for routing and counting)
    error.detail      a human-readable sentence (which field, which hit)
    source.topic      the topic the record was read from
    source.partition  its partition (decimal text)
    source.offset     its offset (decimal text)

The error codes and the checks of a JSON record are Spark SQL (the enrichment checks both
its topics' records with them); the dead letters themselves are built as Arrow rows
(:func:`dead_letter_batch`) or as Spark SQL (:func:`headers_sql`, the enrichment's purchases)
by whoever found the record, and written with the Kafka sink's producer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from streamscale.errors import RecordError
from streamscale.kafka.options import headers_arrow_type

NOT_JSON: Final = "not_json"
WRONG_TYPE: Final = "wrong_type"
MISSING_FIELD: Final = "missing_field"
INVALID_VALUE: Final = "invalid_value"
NULL_KEY: Final = "null_key"
NULL_VALUE: Final = "null_value"
UNDECODABLE_HIT: Final = "undecodable_hit"
ERRORS: Final = (
    NOT_JSON,
    WRONG_TYPE,
    MISSING_FIELD,
    INVALID_VALUE,
    NULL_KEY,
    NULL_VALUE,
    UNDECODABLE_HIT,
)

HEADER_ERROR: Final = "error"
HEADER_DETAIL: Final = "error.detail"
HEADER_TOPIC: Final = "source.topic"
HEADER_PARTITION: Final = "source.partition"
HEADER_OFFSET: Final = "source.offset"


def dlq_topic(pipeline: str) -> str:
    """The dead-letter topic of ``pipeline`` (``enrichment`` → ``enrichment-dlq``)."""
    return f"{pipeline}-dlq"


SOURCE_COLUMNS: Final = ("key", "value", "topic", "partition", "offset")
"""The source columns a dead letter is made of: the original bytes and where they came from."""


def sql_str(value: str) -> str:
    """``value`` as a Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _string_check(text: str, field: str) -> str:
    """SQL: the raw JSON of ``field`` in ``text`` is a string (Spark reads any token into a
    STRING field, an array as its JSON text; only a strict check on the text tells)."""
    pattern = '"' + field + r'"\s*:\s*"'
    return f"({text} RLIKE {sql_str(pattern)})"


def _json_case(
    text: str,
    parsed: str,
    required: Mapping[str, str],
    strings: tuple[str, ...],
    *,
    is_null: str,
    not_json: str,
    wrong_type: str,
    missing: Mapping[str, str],
) -> str:
    """The CASE that :func:`json_error_sql` and :func:`json_detail_sql` share; the outcomes
    are SQL expressions (``missing`` one per required field).

    A text that is not UTF-8 is not JSON (RFC 8259): Spark's cast of the bytes keeps them,
    but ``from_json`` reads a bad byte as U+FFFD and parses the rest, so the fast path
    requires valid UTF-8 and such a text is ``not_json``."""
    present = " AND ".join(f"{parsed}.`{f}` IS NOT NULL" for f in required)
    strict = "".join(f" AND {_string_check(text, f)}" for f in strings)
    wrong = " OR ".join(
        f"({parsed}.`{f}` IS NULL AND get_json_object({text}, '$.{f}') IS NOT NULL)"
        for f in required
    )
    not_strings = " OR ".join(f"NOT {_string_check(text, f)}" for f in strings) or "FALSE"
    absent = " ".join(f"WHEN {parsed}.`{f}` IS NULL THEN {missing[f]}" for f in required)
    return (
        f"CASE WHEN {parsed}._corrupt IS NULL AND {present}{strict} "
        f"AND is_valid_utf8({text}) THEN NULL "
        f"WHEN {text} IS NULL THEN {is_null} "
        f"WHEN NOT is_valid_utf8({text}) THEN {not_json} "
        f"WHEN json_object_keys({text}) IS NULL THEN {not_json} "
        f"WHEN {parsed}._corrupt IS NOT NULL OR {wrong} THEN {wrong_type} "
        f"{absent} "
        f"WHEN {not_strings} THEN {wrong_type} END"
    )


def json_error_sql(
    text: str,
    parsed: str,
    required: dict[str, str],
    *,
    null_error: str = NULL_VALUE,
    strings: tuple[str, ...] = (),
) -> str:
    """Spark SQL: the error code of a JSON text, NULL when it parsed into every required field.

    ``text`` is the STRING expression that was parsed, ``parsed`` the ``from_json`` struct
    (its schema carries a ``_corrupt`` string column), ``required`` maps each required field
    to a description for the detail, ``strings`` names fields that must be JSON strings.
    Checks in order: null text, not UTF-8 or not a JSON object, a field of the wrong type
    (unparsable, or present but unreadable as its type), a missing (or null) field. The fast
    path (everything present) is tested first, so a good record costs one parse.
    """
    return _json_case(
        text,
        parsed,
        required,
        strings,
        is_null=f"'{null_error}'",
        not_json=f"'{NOT_JSON}'",
        wrong_type=f"'{WRONG_TYPE}'",
        missing={f: f"'{MISSING_FIELD}'" for f in required},
    )


def json_detail_sql(
    text: str, parsed: str, required: dict[str, str], what: str, strings: tuple[str, ...] = ()
) -> str:
    """Spark SQL: the ``error.detail`` sentence matching :func:`json_error_sql`."""
    types = ", ".join(f"{f} {desc}" for f, desc in required.items())
    return _json_case(
        text,
        parsed,
        required,
        strings,
        is_null=sql_str(f"{what} is null"),
        not_json=sql_str(f"{what} is not a JSON object"),
        wrong_type=sql_str(f"{what} has a field of the wrong type (expected {types})"),
        missing={f: sql_str(f"{what} has no {f} ({desc})") for f, desc in required.items()},
    )


def headers_sql(error: str, detail: str, topic: str, partition: str, offset: str) -> str:
    """Spark SQL: a dead letter's headers (the ones above, in :func:`dead_letter_batch`'s
    order) from SQL expressions of its error code, detail, source topic, partition and
    offset."""
    pairs = (
        (HEADER_ERROR, error),
        (HEADER_DETAIL, detail),
        (HEADER_TOPIC, topic),
        (HEADER_PARTITION, f"CAST({partition} AS STRING)"),
        (HEADER_OFFSET, f"CAST({offset} AS STRING)"),
    )
    items = ", ".join(
        f"named_struct('key', {sql_str(name)}, 'value', CAST({value} AS BINARY))"
        for name, value in pairs
    )
    return f"array({items})"


# --- dead letters built in Python (Arrow rows for the sink) --------------------------------


@dataclass(frozen=True)
class DeadLetter:
    """A record for the dead-letter topic: original bytes, why, and where it came from."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    error: str
    detail: str


def dead_letter_batch(letters: Sequence[DeadLetter], dlq_topic: str) -> Any:
    """An Arrow batch of sink rows ``key, value, topic, headers`` (the headers above)."""
    import pyarrow as pa

    headers = [
        [
            {"key": HEADER_ERROR, "value": d.error.encode()},
            {"key": HEADER_DETAIL, "value": d.detail.encode()},
            {"key": HEADER_TOPIC, "value": d.topic.encode()},
            {"key": HEADER_PARTITION, "value": str(d.partition).encode()},
            {"key": HEADER_OFFSET, "value": str(d.offset).encode()},
        ]
        for d in letters
    ]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([d.key for d in letters], pa.binary()),
            pa.array([d.value for d in letters], pa.binary()),
            pa.array([dlq_topic] * len(letters), pa.string()),
            pa.array(headers, headers_arrow_type()),
        ],
        names=["key", "value", "topic", "headers"],
    )


class Refused(RecordError):
    """A key or body that cannot be used: :mod:`.deadletter` error code and a sentence."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail
