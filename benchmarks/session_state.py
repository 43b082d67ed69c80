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
peak resident memory of the Spark JVM (driver and executors: local mode; sampled, each address
space once, and its ``VmHWM``, the kernel's high-water mark over the JVM's life, which spans
the sizes run before in the same process) and of the Python workers (this run's processes
only), and the CPU per record over the steady batches (this run's process tree: broker, Spark
JVM, Python workers, this process). Every session the fill
and steady phases close is checked to be none: the output topic must stay empty (no session
ends before the watermark). So there is no output to time: no latency is measured.

With ``--kstreams`` the same records also go through ``benchmarks/kstreams``' game-sessions
application (``benchmarks/kstreams.py`` starts, restarts and stops it; the project's gap,
approval window and watermark delay as its grace), on the same broker and input topics, with
its own output topics:

1. **fill**, before Spark's: the application reads the N frames and approvals (the steady
   records are not produced yet) and is stopped once every frame is aggregated into its
   session (SIGTERM: a clean close); fill time = first record processed to the last frame
   aggregated;
2. **steady**, after Spark's session is stopped: the application is started again with the
   same ``application.id`` and state directory (a restart) and reads the steady records.
   Records/s: the steady records over the first record processed to the last frame
   aggregated; restart: process start (JVM start included) to the first record processed;
   CPU per record over that span, of the same process tree as Spark's (broker, Kafka
   Streams JVM, this process); peak RSS: the larger ``VmHWM`` of the two processes.

Kafka Streams' run is checked by its counters and topics: every steady frame and approval
read, every frame joined and aggregated, no late approval, no dead letter, and its output
topic empty (no session closed). Frames of one machine drawn in the same millisecond share a
header, the records' key: Spark pairs each frame with one approval, Kafka Streams' stream-stream
join pairs each frame with every approval of its key, so its expected joins (and aggregated
frames) are the sum over the keys of their count squared, counted while the frames are
produced (about 0.6 % more than the frames at 10³ machines, none at 10⁶).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpu_use
import kstreams as ks
import spark_conf
from kafka_fill import create, produce_all
from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import KafkaAdmin
from streamscale.pipelines import hits as codec
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.settings import Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

T0 = (int(time.time()) // 3600 - 1) * 3_600_000  # an hour ago: within the topics' retention
ZONES: tuple[codec.Zone, ...] = ("EU", "US", "ZG", "AU")


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


def ks_start(
    jar: Path,
    settings: Settings,
    topics: GameTopics,
    base: Path,
    args: argparse.Namespace,
    again: ks.StreamsApp | None = None,
) -> ks.StreamsApp:
    return ks.start_app(
        jar,
        "game-sessions",
        settings,
        ks.sessions_roles(topics),
        base,
        args.threads,
        ks.sessions_opts(args, settings),
        args.log_dir,
        args.jvm_opt,
        again,
    )


def ks_fill(
    jar: Path, settings: Settings, topics: GameTopics, n: int, base: Path, args: argparse.Namespace
) -> tuple[ks.StreamsApp, float, float]:
    """Kafka Streams opens the ``n`` sessions and stops: the application (to restart), the
    fill seconds and its peak RSS (MB)."""
    app = ks_start(jar, settings, topics, base, args)
    try:
        if not ks.wait_for(app, lambda: app.count("aggregated") >= n, args.timeout, "sessions"):
            raise RuntimeError(f"Kafka Streams did not open {n:,} sessions")
        fill_s = (app.last("aggregated") - app.first) / 1000
        rss = app.peak_rss_mb()
    finally:
        app.stop()
    print(f"  Kafka Streams fill: {n:,} sessions into its store in {fill_s:.1f} s", flush=True)
    return app, fill_s, rss


def ks_steady(
    jar: Path,
    settings: Settings,
    topics: GameTopics,
    steady: int,
    joins: int,
    filled: ks.StreamsApp,
    base: Path,
    args: argparse.Namespace,
) -> dict[str, float]:
    """Kafka Streams restarted on its open sessions, through the steady records: its figures
    and checks (see the module's docstring)."""
    cpu: list[dict[tuple[str, str], float]] = []
    app = ks_start(jar, settings, topics, base, args, again=filled)
    try:
        if not ks.wait_for(app, lambda: app.first > 0, args.timeout, "the first record"):
            raise RuntimeError("Kafka Streams read no record")
        cpu.append(cpu_use.snapshot(root=os.getpid()))

        def done() -> bool:
            read = app.count("frames") >= steady and app.count("approvals") >= steady
            return read and app.count("aggregated") >= joins

        if not ks.wait_for(app, done, args.timeout, "every steady frame aggregated"):
            raise RuntimeError(f"Kafka Streams did not aggregate {steady:,} frames")
        cpu.append(cpu_use.snapshot(root=os.getpid()))
        time.sleep(1.0)  # anything more it would aggregate or write
        rss = app.peak_rss_mb()
    finally:
        app.stop()
    admin = KafkaAdmin(settings.kafka_config(), settings.request_timeout_s)
    try:
        written = ks.end_offsets(admin, topics.output) + ks.end_offsets(admin, topics.dlq)
    finally:
        admin.close()
    counts = app.stats.get("counts", {})
    wanted = {"frames": steady, "approvals": steady, "joined": joins, "aggregated": joins}
    wrong = {k: counts.get(k, 0) for k, v in wanted.items() if counts.get(k, 0) != v}
    refused = {k: v for k, v in counts.items() if k.endswith("_dlq") or k.startswith("late")}
    if wrong or refused or written:
        raise RuntimeError(
            f"Kafka Streams: counts {wrong} (expected {wanted}), late or refused "
            f"{refused}, {written} records written (expected none): {counts}"
        )
    print(f"  Kafka Streams checked: {counts}, nothing written", flush=True)
    print(f"  Kafka Streams restart: {app.running_s():.1f} s to RUNNING", flush=True)
    end = app.last("aggregated")
    print(f"  Kafka Streams steady {cpu_use.per_record(cpu[0], cpu[-1], 2 * steady)}", flush=True)
    return {
        "records_per_s": 2 * steady / ((end - app.first) / 1000),
        "restart_s": (app.first - app.started_ms) / 1000,
        "running_s": app.running_s(),
        "cpu_us": sum(cpu_use.spent(cpu[0], cpu[-1]).values()) / (2 * steady) * 1e6,
        "rss_mb": rss,
    }


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
        # Kafka Streams (--kstreams): the same input topics, its own outputs; its fill before
        # Spark's session starts, its steady part after it stops.
        kst = GameTopics(
            requests=topics.requests,
            approvals=topics.approvals,
            output=f"{topics.output}-ks",
            dlq=f"{topics.dlq}-ks",
        )
        ks_figures: dict[str, float] = {}
        if args.kstreams:
            create(settings, [kst.output, kst.dlq])
            jar = ks.ensure_jar()
            filled, ks_figures["fill_s"], fill_rss = ks_fill(jar, settings, kst, n, base, args)
        spark = session(settings, app_name=f"session-state-{n}", extra_conf=spark_conf.of(args))
        checkpoint = base / f"ckpt-{n}"
        # This run's processes only: the machine is shared.
        rss = cpu_use.RssPeak(["spark jvm"], root=os.getpid())
        workers = cpu_use.RssPeak(["python workers"], root=os.getpid())
        try:
            query, _ = run(spark, GameSessions(settings, str(checkpoint), topics))
            fill_s = sum(p.durationMs["triggerExecution"] for p in query.recentProgress) / 1000
            print(f"  fill: {n:,} sessions into the state store in {fill_s:.1f} s", flush=True)
            steady = args.steady // 2
            span = 14_000  # event time of the steady frames: less than gap - delay
            stamps = (T0 + 1000 + i * span // steady for i in range(steady))
            machines = (rng.randrange(n) for _ in range(steady))
            # Frames of one machine in the same millisecond share a header (their key): Spark
            # pairs each frame with one approval, Kafka Streams' join pairs every frame of a
            # key with every approval of it, so it joins sum(count²) over the keys.
            keys: Counter[str] = Counter()

            def noting(records: Iterator[Any]) -> Iterator[Any]:
                for record in records:
                    if record[0] == topics.requests:
                        keys[record[1]] += 1
                    yield record

            produce_all(settings, noting(frame_records(topics, machines, stamps, rng)))
            joins = sum(c * c for c in keys.values())
            before = state_bytes(checkpoint)
            pipeline = GameSessions(settings, str(checkpoint), topics)
            cpu = cpu_use.BatchCpu(spark, root=os.getpid())
            query, restart_s = run(spark, pipeline)
            print(f"  steady {cpu.steady()}", flush=True)
            cpu_records, cpu_spent = cpu.steady_spent()
            written = state_bytes(checkpoint) - before
        finally:
            jvm_mb, workers_mb = rss.stop(), workers.stop()
            # The kernel's high-water mark, nothing missed between samples: the cross-check of
            # the sampled peak (over the JVM's life: PySpark keeps one JVM for every size).
            jvm_hwm_mb = cpu_use.hwm_mb(["spark jvm"], root=os.getpid())
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
            "jvm_hwm_mb": jvm_hwm_mb,
            "workers_mb": workers_mb,
            "batches": len(steady_batches),
            "cpu_us": sum(cpu_spent.values()) / max(cpu_records, 1) * 1e6,
        }
        print(
            "  steady: {records_per_s:,.0f} records/s, batch {batch_s:.2f} s (driver outside "
            "addBatch {driver_s:.2f} s), state written {state_mb_per_batch:.1f} MB/batch, "
            "restart to first batch {restart_s:.1f} s, peak RSS Spark JVM {jvm_mb:,.0f} MB "
            "(its VmHWM over its life {jvm_hwm_mb:,.0f} MB), Python workers {workers_mb:,.0f} MB "
            "({batches} batches)".format(**figures),
            flush=True,
        )
        if args.kstreams:
            ks_figures |= ks_steady(jar, settings, kst, steady, joins, filled, base, args)
            ks_figures["rss_mb"] = max(ks_figures["rss_mb"], fill_rss)
            figures |= {f"ks_{k}": v for k, v in ks_figures.items()}
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1000,100000,1000000")
    parser.add_argument("--steady", type=int, default=400_000, help="steady records (both topics)")
    parser.add_argument("--batch", type=int, default=40_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--state-partitions", type=int, default=4)
    parser.add_argument("--min-batches", type=int, default=5)
    parser.add_argument(
        "--kstreams",
        action="store_true",
        help="the same records through benchmarks/kstreams' game-sessions application too",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="Kafka Streams: s per wait")
    spark_conf.add_argument(parser)
    ks.add_app_arguments(parser)
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
    print(
        "\nSide by side (CPU: broker, engine, this process, over the steady span; no latency: "
        "no session closes, nothing is written):\n"
        "| open sessions | engine | records/s | restart s | fill s | peak RSS MB | CPU µs/record |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in results:
        engines = [("Spark", ""), *([("Kafka Streams", "ks_")] if args.kstreams else [])]
        for engine, k in engines:
            rss = r[f"{k}rss_mb"] if k else r["jvm_mb"] + r["workers_mb"]
            print(
                f"| {r['sessions']:,.0f} | {engine} | {r[k + 'records_per_s']:,.0f} | "
                f"{r[k + 'restart_s']:.1f} | {r[k + 'fill_s']:.0f} | {rss:,.0f} | "
                f"{r[k + 'cpu_us']:.0f} |"
            )
        if args.kstreams:
            print(
                f"| {r['sessions']:,.0f} | Spark / Kafka Streams | "
                f"{r['records_per_s'] / r['ks_records_per_s']:.2f}x | | | | |"
            )


if __name__ == "__main__":
    main()
