"""The purchase enrichment in Quix Streams, for ``benchmarks/pipelines.py`` (run in ``.venv-quix``).

Quix Streams' own way: purchases re-keyed by product id through a repartition topic
(``group_by``), then ``join_asof`` (how="left") with the referential, whose latest value per
key (at or before the purchase's timestamp) lives in Quix's RocksDB state with a changelog
topic. Prints one JSON line: ``{"records": n, "seconds": s, "rate": r}``, the rate over the
purchases, from the first one processed to the last.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

from quixstreams import Application  # type: ignore[import-not-found]

UNKNOWN = "REF INCONNUE"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--purchases", required=True)
    parser.add_argument("--referential", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--expected", type=int, required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=f"bench-quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    purchases = app.topic(args.purchases, key_deserializer="str", value_deserializer="json")
    referential = app.topic(args.referential, key_deserializer="str", value_deserializer="json")
    output = app.topic(args.output, key_serializer="str", value_serializer="json")

    table = app.dataframe(referential)
    sdf = app.dataframe(purchases)
    sdf = sdf.apply(lambda value, key, ts, headers: {**value, "_key": key}, metadata=True)
    sdf = sdf.group_by(
        lambda value: str(value["id"]), name="by-product", key_serializer="str",
        key_deserializer="str",
    )  # fmt: skip

    def merge(left: dict[str, Any], right: dict[str, Any] | None) -> dict[str, Any]:
        name = right["name"] if right else UNKNOWN
        return {"id": left["id"], "name": name, "price": left["price"], "_key": left["_key"]}

    sdf = sdf.join_asof(table, how="left", on_merge=merge)
    marks: dict[str, float] = {}
    seen = [0]

    def count(value: Any) -> None:
        if not seen[0]:
            marks["first"] = time.perf_counter()
        seen[0] += 1
        if seen[0] >= args.expected:
            marks["last"] = time.perf_counter()
            app.stop()

    sdf = sdf.update(count)
    sdf.to_topic(output, key=lambda value: value["_key"])
    app.run()
    seconds = marks["last"] - marks["first"]
    print(json.dumps({"records": seen[0], "seconds": seconds, "rate": seen[0] / seconds}))


if __name__ == "__main__":
    main()
