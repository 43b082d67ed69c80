"""Game sessions with a large state: throughput, the driver's time, state written and restart.

    .venv/bin/python benchmarks/session_state.py --sessions 1000,100000,1000000

For each size N, on the embedded Apache Kafka and Spark ``local[*]`` (the pipeline's own
settings: RocksDB state store with changelog checkpointing, ``spark.sql.shuffle.partitions``
state partitions):

1. **fill**: one approved frame for each of N machines (all within one second of event time)
   is read by the pipeline, which then holds N open sessions in Spark's state store;
2. **steady**: the query is stopped and started again from its checkpoint (the restart is
   timed to its first batch) and reads ``--steady`` more frames and approvals of machines
   drawn at random among the N, in batches of ``--batch`` records, their event time moving
   on by less than the gap, so that every session stays open and each batch reads and
   updates state of sessions spread over the whole store.

Printed per size: steady records/s (records over the batches' trigger time, the restart's
batch left out), the median batch's trigger time and its parts outside ``addBatch`` (what the
driver does per batch: planning, offsets, commits), state bytes written per steady batch
(growth of the checkpoint's ``state/`` directory), the restart to the first batch, and the
peak resident memory of the Spark JVM (driver and executors: local mode) and of the Python
workers. Every session the fill and steady phases close is checked to be none: the output
topic must stay empty (no session ends before the watermark).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpu_use
from pipelines import create, produce_all
from streamscale.kafka import broker as embedded
from streamscale.pipelines import hits as codec
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.settings import Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

T0 = (int(time.time()) // 3600 - 1) * 3_600_000  # an hour ago: within the topics' retention
ZONES = ("EU", "US", "ZG", "AU")


def frame_records(
    topics: GameTopics, machines: Iterator[int], stamps: Iterator[int], rng: random.Random
) -> Iterator[tuple[str, str, str, int, bool]]:
    """A frame and its approval (50 ms later) per machine id, at the given event times."""
    for machine, ts in zip(machines, stamps, strict=False):
        mid = f"{machine:06d}"
        key = codec.header_json(codec.FrameHeader(ts, mid, ZONES[machine % 4]))
        hit = codec.encode_hit(
            codec.Hit(rng.randint(42, 209), "X", "UP", "Direct", "Pro", codec.GAMES[0])
        )
        body = codec.body_json(codec.FrameBody(codec.GAMES[0], (hit,)))
        yield topics.requests, key, body, ts, True
        yield topics.approvals, key, body, ts + 50, False


def state_bytes(checkpoint: Path) -> int:
    return sum(p.stat().st_size for p in (checkpoint / "state").rglob("*") if p.is_file())


def run(spark: Any, pipeline: GameSessions) -> tuple[Any, float]:
    """Run ``pipeline`` over what is in its topics; the query and the seconds to its first
    batch's progress."""
    began = time.perf_counter()
    query = pipeline.start(spark, {"availableNow": True})
    first = None
    while query.isActive:
        query.awaitTermination(0.05)
        if first is None and query.recentProgress:
            first = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return query, first if first is not None else time.perf_counter() - began


def one_size(n: int, args: argparse.Namespace, base: Path) -> dict[str, float]:
    rng = random.Random(n)
    with embedded.embedded_broker(base / f"broker-{n}") as b:
        settings = Settings(
            bootstrap_servers=b.bootstrap,
            max_offsets_per_trigger=args.batch,
            shuffle_partitions=args.state_partitions,
            metrics_port=-1,
        )
        topics = GameTopics(
            requests=f"rq-{n}", approvals=f"rs-{n}", output=f"out-{n}", dlq=f"dlq-{n}"
        )
        create(settings, [topics.requests, topics.approvals, topics.output, topics.dlq])
        fill = frame_records(topics, iter(range(n)), (T0 + i % 1000 for i in range(n)), rng)
        produced, took = produce_all(settings, fill)
        print(f"sessions={n:,}: {produced:,} fill records produced in {took:.0f} s", flush=True)
        spark = session(settings, app_name=f"session-state-{n}")
        checkpoint = base / f"ckpt-{n}"
        rss = cpu_use.RssPeak(["spark jvm"])
        workers = cpu_use.RssPeak(["python workers"])
        try:
            query, _ = run(spark, GameSessions(settings, str(checkpoint), topics))
            fill_s = sum(p.durationMs["triggerExecution"] for p in query.recentProgress) / 1000
            print(f"  fill: {n:,} sessions into the state store in {fill_s:.1f} s", flush=True)
            steady = args.steady // 2
            span = 14_000  # event time of the steady frames: less than gap - delay
            stamps = (T0 + 1000 + i * span // steady for i in range(steady))
            machines = (rng.randrange(n) for _ in range(steady))
            produce_all(settings, frame_records(topics, machines, stamps, rng))
            before = state_bytes(checkpoint)
            pipeline = GameSessions(settings, str(checkpoint), topics)
            query, restart_s = run(spark, pipeline)
            written = state_bytes(checkpoint) - before
        finally:
            jvm_mb, workers_mb = rss.stop(), workers.stop()
            stop_session(spark)
        batches = [p for p in query.recentProgress if p.numInputRows]
        steady_batches = batches[1:]
        if len(steady_batches) < args.min_batches:
            raise RuntimeError(f"only {len(steady_batches)} steady batches: raise --steady")
        rows = sum(p.numInputRows for p in steady_batches)
        trigger = [p.durationMs["triggerExecution"] / 1000 for p in steady_batches]
        outside = [
            (p.durationMs["triggerExecution"] - p.durationMs.get("addBatch", 0)) / 1000
            for p in steady_batches
        ]
        counts: dict[str, int] = {}
        for p in query.recentProgress:
            for k, v in pipeline.batch_counts(p).items():
                counts[k] = counts.get(k, 0) + v
        if counts.get("sessions.closed", 0) or counts.get("late.rows", 0):
            raise RuntimeError(f"sessions closed or rows late during the run: {counts}")
        if counts.get("join.approved", 0) != steady:
            raise RuntimeError(f"{counts.get('join.approved')} frames approved, not {steady}")
        figures = {
            "sessions": n,
            "records_per_s": rows / sum(trigger),
            "batch_s": statistics.median(trigger),
            "driver_s": statistics.median(outside),
            "state_mb_per_batch": written / len(batches) / 1e6,
            "restart_s": restart_s,
            "fill_s": fill_s,
            "jvm_mb": jvm_mb,
            "workers_mb": workers_mb,
            "batches": len(steady_batches),
        }
        print(
            "  steady: {records_per_s:,.0f} records/s, batch {batch_s:.2f} s (driver outside "
            "addBatch {driver_s:.2f} s), state written {state_mb_per_batch:.1f} MB/batch, "
            "restart to first batch {restart_s:.1f} s, peak RSS Spark JVM {jvm_mb:,.0f} MB, "
            "Python workers {workers_mb:,.0f} MB ({batches} batches)".format(**figures),
            flush=True,
        )
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1000,100000,1000000")
    parser.add_argument("--steady", type=int, default=400_000, help="steady records (both topics)")
    parser.add_argument("--batch", type=int, default=40_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--state-partitions", type=int, default=4)
    parser.add_argument("--min-batches", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sessions.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        results = [one_size(n, args, Path(tmp)) for n in sizes]
    print("\n| open sessions | records/s | batch s | driver s | state MB/batch | restart s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['sessions']:,.0f} | {r['records_per_s']:,.0f} | {r['batch_s']:.2f} | "
            f"{r['driver_s']:.2f} | {r['state_mb_per_batch']:.1f} | {r['restart_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
