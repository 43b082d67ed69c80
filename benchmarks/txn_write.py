"""One task's write to Kafka at-least-once and exactly-once, without Spark (issue 25).

Starts an embedded broker in a temporary directory, then per repetition: 8 writes of ``--rows``
records with the sink's kept producer (at-least-once); one transactional write with a new
producer (``init_transactions``, the marker read, the first transaction), 8 with the kept
one; and a new producer alone (``init_transactions`` and the marker read). Prints the mean
time per write. Everything started is stopped by PID.

    flock /tmp/streamscale-bench.lock .venv/bin/python benchmarks/txn_write.py [--rows 9400]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from streamscale.kafka import broker as embedded
from streamscale.kafka import transactions as tx
from streamscale.kafka.admin import KafkaAdmin, TopicSpec
from streamscale.kafka.options import MARKER_TOPIC
from streamscale.kafka.sink import close_kept_producers, produce_rows, write_rows

VALUE = b'{"id":1,"name":"x","price":1.5}'


def rows(topic: str, n: int, first: int) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(
        {
            "key": [str(first + i).encode() for i in range(n)],
            "value": [VALUE] * n,
            "topic": [topic] * n,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=9_400, help="records per write (task)")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    n, writes = args.rows, 8
    with tempfile.TemporaryDirectory() as tmp, embedded.embedded_broker(Path(tmp) / "b") as b:
        kafka = {"bootstrap.servers": b.bootstrap}
        admin = KafkaAdmin(kafka)
        admin.apply([TopicSpec("out", 4, 1)])
        admin.close()
        for rep in range(args.repeat):
            began = time.perf_counter()
            for i in range(writes):
                write_rows({"kafka.bootstrap.servers": b.bootstrap}, [rows("out", n, i * n)])
            alos = (time.perf_counter() - began) / writes
            unit = tx.Unit(f"q{uuid.uuid4().hex[:6]}", "tasks", "out-0")
            began = time.perf_counter()
            tx.write_transactional(kafka, iter([rows("out", n, 0)]), None, unit, 0, produce_rows)
            first = time.perf_counter() - began
            began = time.perf_counter()
            for i in range(1, writes + 1):
                batch = iter([rows("out", n, i * n)])
                tx.write_transactional(kafka, batch, None, unit, i, produce_rows)
            kept = (time.perf_counter() - began) / writes
            began = time.perf_counter()
            holder = tx.open_producer(kafka, unit.transactional_id + "-new", MARKER_TOPIC)
            tx.close_kept()
            holder.producer.close()
            opened = time.perf_counter() - began
            print(
                f"repetition {rep}: per write of {n:,} records: at-least-once, kept producer "
                f"{alos * 1000:.0f} ms; exactly-once, new producer {first * 1000:.0f} ms, kept "
                f"producer {kept * 1000:.0f} ms; a new producer alone (init + marker read) "
                f"{opened * 1000:.0f} ms",
                flush=True,
            )
        close_kept_producers()


if __name__ == "__main__":
    main()
