"""Enrichment with a large referential, changing every batch: throughput, driver time, state.

    flock /tmp/streamscale-bench.lock env PYTHONPATH=src STREAMSCALE_JARS_DIR=jvm/lib \\
        .venv/bin/python benchmarks/table_state.py --products 1000,100000,1000000

For each size P, on the embedded Apache Kafka and Spark ``local[*]`` (the pipeline's own
settings: the table operator's state in RocksDB with changelog checkpointing,
``spark.sql.shuffle.partitions`` state partitions):

1. **fill**: P referential records (one per product) are read by the pipeline, which then
   holds P table entries in Spark's state store;
2. **steady**: the query is stopped and started again from its checkpoint (the restart is
   timed to its first batch) and reads ``--steady`` purchases of products drawn at random
   among the P, in batches of ``--batch`` (``maxOffsetsPerTrigger``), while a producer
   renames random products at ``--renames-per-s`` with timestamps inside the purchases' event
   time (some behind the fold point, some ahead): the table changes in every batch, and each
   batch reads and updates entries spread over the whole store. The renames start when the
   restart's batch is done (those produced while the stores load would make the next batch
   a backlog of them, a cost of the restart, which is timed on its own).

Printed per size: steady purchases/s (purchases over the batches' trigger time, the
restart's batch left out) and the same with the restart's batch, the steady seconds, the
CPU per purchase of this run's own processes (broker, Spark JVM, Python workers, this
process with the renamer) and the classes Spark generated during the steady batches, the
median batch's trigger time and its part outside ``addBatch``
(what the driver does per batch besides waiting for the job: planning, offsets, state store
bookkeeping, commits), state bytes written per steady batch (growth of the checkpoint's
``state/``), the restart to the first batch, the peak resident memory of the Spark JVM (driver
and executors: local mode; sampled, per part, and its ``VmHWM``, the kernel's high-water mark)
with its committed heap and RocksDB's own estimate of its memory after the fill and at the end,
the peak of the Python workers, and the batches whose table changed.
Every purchase is checked: written once, never ``REF INCONNUE`` (every product exists), and
named by a version whose timestamp is at or before its own (a name carries its version's
timestamp), never by a later one. ``--event-log DIR`` keeps Spark's event log (stage and
task times, Python and RocksDB metrics of every batch); ``--conf KEY=VALUE`` sets a Spark
setting for a comparison. The output topics are stamped by the broker (``LogAppendTime``):
p50/p99 latency is an output record's append time minus the start of the restart (every
purchase is in Kafka before it: a backlog, so this is the time a purchase waits from the
restart to its output).

With ``--kstreams`` the same data also goes through ``benchmarks/kstreams``' enrichment
application (``benchmarks/kstreams.py`` starts, restarts and stops it), on the same broker,
with its own copy of the referential topic (the renames of each engine's steady part go to
its own copy), the same purchases topic and its own output topic:

1. **fill**, before Spark's: the application reads the P products into its KTable (RocksDB
   with its changelog topic) and is stopped (SIGTERM: a clean close); fill time = first
   product processed to the P-th counted;
2. **steady**, after Spark's session is stopped: the application is started again with the
   same ``application.id`` and state directory (a restart), reads the purchases, and the
   same renamer (same seed, same rate) starts when the first enriched purchase is out, as it
   starts after Spark's restart batch (it renames at a rate until the purchases are done: an
   engine that is faster sees fewer renames, about rate × its steady seconds; Spark's are
   counted per batch, Kafka Streams' printed). Steady purchases/s: the purchases appended after that
   moment over the time to the last one; with the restart: all purchases over process start
   to the last output; restart: process start (JVM start included) to the first output;
   latency: output append time minus the process start; CPU per purchase over the steady
   span, of the same process tree as Spark's (broker, Kafka Streams JVM, this process with
   the renamer); peak RSS: the larger ``VmHWM`` of the two application processes.

Kafka Streams' output is checked as Spark's (every purchase written once, never unknown), but
a purchase named by a version later than itself is counted, not an error: its KTable join
looks up the latest version at processing time (no as-of by timestamp), so the count says how
often its semantics differ from the project's under renames.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpu_use
import kstreams as ks
from kafka_fill import LOG_APPEND, create, create_topics, produce_all
from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import KafkaAdmin
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.purchase_batches import REF_UNKNOWN
from streamscale.pipelines.query import stop_between_batches
from streamscale.settings import Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

T0 = (int(time.time()) // 3600 - 1) * 3_600_000  # an hour ago: within the topics' retention
SPAN_MS = 120_000  # event time of the steady purchases


def product(topic: str, pid: int, ts: int) -> tuple[str, str, str, int, bool]:
    """A referential record whose name carries its version's timestamp."""
    return topic, str(pid), json.dumps({"id": pid, "name": f"P{pid} @{ts}"}), ts, False


def purchases(
    topic: str, n: int, products: int, rng: random.Random
) -> Iterator[tuple[str, str, str, int, bool]]:
    for i in range(n):
        pid = rng.randrange(products)
        yield topic, f"t{i}", f'{{"id":{pid},"price":1.00}}', T0 + 1000 + i * SPAN_MS // n, True


def state_bytes(checkpoint: Path) -> int:
    return sum(p.stat().st_size for p in (checkpoint / "state").rglob("*") if p.is_file())


class Renamer(threading.Thread):
    """Renames random products at ``rate``/s until stopped (bounded by ``limit``)."""

    def __init__(self, settings: Settings, topic: str, products: int, rate: int, limit: int):
        super().__init__(daemon=True)
        self.settings, self.topic, self.products, self.rate = settings, topic, products, rate
        self.limit = limit
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from confluent_kafka import Producer

        from streamscale.kafka.client import producer_config

        producer = Producer(producer_config(self.settings.kafka_config(), **{"linger.ms": 20}))
        rng = random.Random(7)
        began = time.perf_counter()
        while not self.stop.is_set() and self.sent < self.limit:
            due = int((time.perf_counter() - began) * self.rate)
            while self.sent < min(due, self.limit):
                pid = rng.randrange(self.products)
                _, key, value, ts, _ = product(self.topic, pid, T0 + 1000 + rng.randrange(SPAN_MS))
                producer.produce(self.topic, value, key, timestamp=ts)
                self.sent += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(60)


def run_until(
    query: Any,
    pipeline: Enrichment,
    wanted: int,
    timeout_s: float,
    on_first: Callable[[], None] = lambda: None,
) -> float:
    """Wait until ``wanted`` purchases are counted in the query's progress; seconds to the
    first progress (``on_first`` is called then)."""
    began = time.perf_counter()
    first = None
    deadline = began + timeout_s
    while time.perf_counter() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        progress = query.recentProgress
        if first is None and progress:
            first = time.perf_counter() - began
            on_first()
        if sum(pipeline.batch_counts(p).get("purchases", 0) for p in progress) >= wanted:
            return first if first is not None else time.perf_counter() - began
        time.sleep(0.1)
    raise RuntimeError(f"{wanted} purchases not processed within {timeout_s:.0f} s")


def compilations(spark: Any) -> int:
    """How many times Spark's code generator has compiled generated code in this JVM."""
    try:
        metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
        return int(metrics.METRIC_COMPILATION_TIME().getCount())
    except Exception:  # a figure to print, not a reason to fail the run
        return -1


def heap_mb(spark: Any) -> float:
    """The Spark JVM's heap as committed now (MB): the part of its resident memory that is
    Java heap; the rest is native (RocksDB, thread stacks, code, metaspace, direct buffers)."""
    try:
        return float(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().totalMemory()) / 2**20
    except Exception:  # a figure to print, not a reason to fail the run
        return -1.0


def state_memory_mb(progress: list[Any]) -> float:
    """The state operators' ``memoryUsedBytes`` in the last batch with input (MB): for RocksDB,
    its own estimate of its memtables, block cache and table readers."""
    batches = [p for p in progress if p.numInputRows]
    if not batches:
        return -1.0
    return float(sum(op.memoryUsedBytes for op in batches[-1].stateOperators or [])) / 2**20


def check_output(
    settings: Settings, output: str, steady: int, strict: bool = True
) -> tuple[dict[str, int], list[int]]:
    """Every purchase written once, never unknown, never named by a later version (with
    ``strict``; else such purchases are counted); the output records' timestamps."""
    admin = KafkaAdmin(settings.kafka_config(), settings.request_timeout_s)
    try:
        records = admin.read_all(output, 4)
    finally:
        admin.close()
    seen: dict[bytes, int] = {}
    future = unknown = 0
    stamps = []
    for m in records:
        key = m.key()
        seen[key] = seen.get(key, 0) + 1
        stamps.append(m.timestamp()[1])
        name = json.loads(m.value())["name"]
        if name == REF_UNKNOWN:
            unknown += 1
            continue
        version_ts = int(name.rsplit("@", 1)[1])
        purchase_ts = T0 + 1000 + int(key[1:]) * SPAN_MS // steady
        if version_ts > purchase_ts:
            future += 1
    missing = steady - len(seen)
    result = {"written": len(records), "missing": missing, "unknown": unknown, "future": future}
    if missing or unknown or (future and strict) or len(records) != len(seen):
        raise RuntimeError(f"output does not match the table semantics: {result}")
    return result, stamps


def ks_start(
    jar: Path,
    settings: Settings,
    topics: EnrichmentTopics,
    tmp: Path,
    args: Any,
    again: ks.StreamsApp | None = None,
) -> ks.StreamsApp:
    """The Kafka Streams enrichment on ``topics`` with the benchmark's options; ``again``
    restarts that (stopped) application on its own state."""
    return ks.start_app(
        jar,
        "enrichment",
        settings,
        ks.enrichment_roles(topics),
        tmp,
        args.threads,
        ks.app_opts(args),
        args.log_dir,
        args.jvm_opt,
        again,
    )


def ks_fill(
    jar: Path, settings: Settings, topics: EnrichmentTopics, n: int, tmp: Path, args: Any
) -> tuple[ks.StreamsApp, float, float]:
    """Kafka Streams reads the ``n`` products into its table and stops: the application (to
    restart), the fill seconds and its peak RSS (MB)."""
    app = ks_start(jar, settings, topics, tmp, args)
    try:
        if not ks.wait_for(app, lambda: app.count("referential") >= n, args.timeout_s, "products"):
            raise RuntimeError(f"Kafka Streams did not read {n:,} products")
        fill_s = (time.time() * 1000 - app.first) / 1000
        rss = app.peak_rss_mb()
    finally:
        app.stop()
    print(f"  Kafka Streams fill: {n:,} products into its table in {fill_s:.1f} s", flush=True)
    return app, fill_s, rss


def ks_steady(
    jar: Path,
    settings: Settings,
    topics: EnrichmentTopics,
    n: int,
    filled: ks.StreamsApp,
    tmp: Path,
    args: Any,
) -> dict[str, float]:
    """Kafka Streams restarted on its filled table, the steady purchases and the renames: its
    figures, measured as Spark's are (see the module's docstring)."""
    admin = KafkaAdmin(settings.kafka_config(), settings.request_timeout_s)
    renamer = Renamer(settings, topics.referential, n, args.renames_per_s, args.steady)
    cpu: list[dict[tuple[str, str], float]] = []
    app = ks_start(jar, settings, topics, tmp, args, again=filled)
    try:

        def out() -> int:
            return ks.end_offsets(admin, topics.output)

        if not ks.wait_for(app, lambda: out() > 0, args.timeout_s, "the first purchase"):
            raise RuntimeError("Kafka Streams wrote no purchase")
        began_ms = time.time() * 1000
        cpu.append(cpu_use.snapshot(root=os.getpid()))
        renamer.start()
        if not ks.wait_for(app, lambda: out() >= args.steady, args.timeout_s, "the purchases"):
            raise RuntimeError(f"Kafka Streams did not write {args.steady:,} purchases")
        cpu.append(cpu_use.snapshot(root=os.getpid()))
        rss = app.peak_rss_mb()
    finally:
        renamer.stop.set()
        if renamer.ident is not None:
            renamer.join(60)
        app.stop()
        admin.close()
    checked, stamps = check_output(settings, topics.output, args.steady, strict=False)
    last = max(stamps)
    after = sum(1 for t in stamps if t > began_ms)
    print(f"  Kafka Streams steady {cpu_use.per_record(cpu[0], cpu[-1], after)}", flush=True)
    print(f"  Kafka Streams output checked: {checked}", flush=True)
    # The renamer runs at a rate: a faster engine's steady part sees fewer renames.
    print(f"  Kafka Streams: {renamer.sent:,} renames during its steady part", flush=True)
    print(f"  Kafka Streams restart: {app.running_s():.1f} s to RUNNING", flush=True)
    since = [t - app.started_ms for t in stamps]
    return {
        "purchases_per_s": after / ((last - began_ms) / 1000),
        "overall_per_s": args.steady / ((last - app.started_ms) / 1000),
        "steady_s": (last - began_ms) / 1000,
        "restart_s": (min(stamps) - app.started_ms) / 1000,
        "running_s": app.running_s(),
        "p50_ms": ks.percentile(since, 50),
        "p99_ms": ks.percentile(since, 99),
        "cpu_us": sum(cpu_use.spent(cpu[0], cpu[-1]).values()) / after * 1e6,
        "rss_mb": rss,
        "future": checked["future"],
        "renames": renamer.sent,
    }


def one_size(n: int, args: argparse.Namespace, base: Path) -> dict[str, float]:
    rng = random.Random(n)
    with embedded.embedded_broker(base / f"broker-{n}") as b:
        settings = Settings(
            bootstrap_servers=b.bootstrap,
            max_offsets_per_trigger=args.batch,
            shuffle_partitions=args.state_partitions,
            driver_memory=args.driver_memory,
            metrics_port=-1,
        )
        topics = EnrichmentTopics(
            purchases=f"achats-{n}",
            referential=f"referentiel-{n}",
            output=f"enrichis-{n}",
            dlq=f"dlq-{n}",
        )
        create(settings, [topics.purchases, topics.referential, topics.dlq], [topics.referential])
        # Stamped by the broker: the latency of a purchase is read from its output record.
        create_topics(settings, {topics.output: LOG_APPEND})
        # Kafka Streams: its own copy of the referential (each engine's renames go to its
        # own), the same purchases, its own outputs.
        kst = EnrichmentTopics(
            purchases=topics.purchases,
            referential=f"{topics.referential}-ks",
            output=f"{topics.output}-ks",
            dlq=f"{topics.dlq}-ks",
        )
        referentials = [topics.referential]
        if args.kstreams:
            referentials.append(kst.referential)
            specs = {kst.referential: {"cleanup.policy": "compact"}, kst.output: LOG_APPEND}
            create_topics(settings, {**specs, kst.dlq: LOG_APPEND})
        produced, took = produce_all(
            settings, (product(t, i, T0) for i in range(n) for t in referentials)
        )
        print(f"products={n:,}: {produced:,} referential records produced in {took:.0f} s")
        ks_figures: dict[str, float] = {}
        if args.kstreams:
            jar = ks.ensure_jar()
            filled, ks_figures["fill_s"], fill_rss = ks_fill(jar, settings, kst, n, base, args)
        extra = dict(kv.split("=", 1) for kv in args.conf)
        if args.event_log:
            Path(args.event_log).mkdir(parents=True, exist_ok=True)
            extra |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": args.event_log}
        spark = session(settings, app_name=f"table-state-{n}", extra_conf=extra)
        checkpoint = base / f"ckpt-{n}"
        # This process's JVM (driver and executors) and Python workers only: the machine is
        # shared.
        rss = cpu_use.RssPeak(["spark jvm"], root=os.getpid())
        workers = cpu_use.RssPeak(["python workers"], root=os.getpid())
        # The JVM's peak in each part (fill; restart and steady batches), and its heap as
        # committed at the end of each: what the rest of its resident memory is native.
        phase = cpu_use.RssPeak(["spark jvm"], root=os.getpid())
        renamer = None
        try:
            fill = Enrichment(settings, str(checkpoint), topics)
            query = fill.start(spark, {"availableNow": True})
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            fill_s = sum(p.durationMs["triggerExecution"] for p in query.recentProgress) / 1000
            fill_state_mb = state_memory_mb(query.recentProgress)
            fill_jvm_mb, fill_heap_mb = phase.stop(), heap_mb(spark)
            print(
                f"  fill: {n:,} products into the state store in {fill_s:.1f} s; Spark JVM "
                f"peak RSS {fill_jvm_mb:,.0f} MB, heap committed {fill_heap_mb:,.0f} MB, "
                f"RocksDB's own estimate {fill_state_mb:,.0f} MB",
                flush=True,
            )
            phase = cpu_use.RssPeak(["spark jvm"], root=os.getpid())
            produce_all(settings, purchases(topics.purchases, args.steady, n, rng))
            before = state_bytes(checkpoint)
            pipeline = Enrichment(settings, str(checkpoint), topics)
            renamer = Renamer(settings, topics.referential, n, args.renames_per_s, args.steady)
            restarted_ms = time.time() * 1000
            query = pipeline.start(spark, {"processingTime": "0 seconds"})
            # The renames start once the restart's batch is done: renames produced while the
            # stores load would come as one backlog batch, a cost of the restart (timed
            # above), not of steady processing.
            cpu: list[dict[tuple[str, str], float]] = []

            compiled: list[int] = []

            def steady_begins() -> None:
                cpu.append(cpu_use.snapshot(root=os.getpid()))
                compiled.append(compilations(spark))
                renamer.start()

            restart_s = run_until(query, pipeline, args.steady, args.timeout_s, steady_begins)
            cpu.append(cpu_use.snapshot(root=os.getpid()))
            compiled.append(compilations(spark))
            stop_between_batches(query)
            written = state_bytes(checkpoint) - before
            steady_jvm_mb, steady_heap_mb = phase.stop(), heap_mb(spark)
            steady_state_mb = state_memory_mb(query.recentProgress)
        finally:
            if renamer is not None and renamer.ident is not None:
                renamer.stop.set()
                renamer.join(60)
            phase.stop()
            jvm_mb, workers_mb = rss.stop(), workers.stop()
            jvm_hwm_mb = cpu_use.hwm_mb(["spark jvm"], root=os.getpid())
            stop_session(spark)
        print(
            f"  restart and steady: Spark JVM peak RSS {steady_jvm_mb:,.0f} MB, heap committed "
            f"{steady_heap_mb:,.0f} MB, RocksDB's own estimate {steady_state_mb:,.0f} MB; "
            f"the JVM's VmHWM over its life {jvm_hwm_mb:,.0f} MB",
            flush=True,
        )
        batches = [p for p in query.recentProgress if p.numInputRows]
        counts = [pipeline.batch_counts(p) for p in batches]
        steady_batches = batches[1:]
        if len(steady_batches) < args.min_batches:
            raise RuntimeError(f"only {len(steady_batches)} steady batches: raise --steady")
        purchased = sum(c.get("purchases", 0) for c in counts[1:])
        changed = sum(1 for c in counts[1:] if c.get("referential_applied", 0))
        renames = [c.get("referential_applied", 0) for c in counts[1:]]
        trigger = [p.durationMs["triggerExecution"] / 1000 for p in steady_batches]
        outside = [
            (p.durationMs["triggerExecution"] - p.durationMs.get("addBatch", 0)) / 1000
            for p in steady_batches
        ]
        if args.verbose:
            for p, c in zip(batches, counts, strict=True):
                ops = p.stateOperators or []
                print(
                    f"    batch {p.batchId}: {c.get('purchases', 0):,} purchases, "
                    f"{c.get('referential', 0):,} versions, {dict(p.durationMs)}, state "
                    f"{[(op.numRowsUpdated, op.commitTimeMs, op.allUpdatesTimeMs) for op in ops]}",
                    flush=True,
                )
        # CPU of this process's tree (broker, Spark JVM, Python workers, this process with
        # the renamer's producer) over the steady batches, per purchase.
        print(f"  steady {cpu_use.per_record(cpu[0], cpu[-1], purchased)}", flush=True)
        print(f"  steady: {compiled[-1] - compiled[0]} classes generated and compiled by Spark")
        checked, stamps = check_output(settings, topics.output, args.steady)
        since = [t - restarted_ms for t in stamps]
        figures = {
            "products": n,
            "purchases_per_s": purchased / sum(trigger),
            "overall_per_s": sum(c.get("purchases", 0) for c in counts)
            / sum(p.durationMs["triggerExecution"] / 1000 for p in batches),
            "steady_s": sum(trigger),
            "batch_s": statistics.median(trigger),
            "driver_s": statistics.median(outside),
            "state_mb_per_batch": written / len(batches) / 1e6,
            "restart_s": restart_s,
            "fill_s": fill_s,
            "jvm_mb": jvm_mb,
            "jvm_hwm_mb": jvm_hwm_mb,
            "fill_jvm_mb": fill_jvm_mb,
            "steady_jvm_mb": steady_jvm_mb,
            "workers_mb": workers_mb,
            "batches": len(steady_batches),
            "changed": changed,
            "renames_per_batch": statistics.median(renames),
            "p50_ms": ks.percentile(since, 50),
            "p99_ms": ks.percentile(since, 99),
            "cpu_us": sum(cpu_use.spent(cpu[0], cpu[-1]).values()) / purchased * 1e6,
        }
        print(
            "  steady: {purchases_per_s:,.0f} purchases/s over {steady_s:.0f} s (with the "
            "restart's batch {overall_per_s:,.0f}/s), batch {batch_s:.2f} s (driver outside "
            "addBatch {driver_s:.3f} s), state written {state_mb_per_batch:.1f} MB/batch, "
            "restart to first batch {restart_s:.1f} s, peak RSS Spark JVM {jvm_mb:,.0f} MB, "
            "Python workers {workers_mb:,.0f} MB ({batches} batches, {changed} with table "
            "changes, median {renames_per_batch:,.0f} versions a batch)".format(**figures),
            flush=True,
        )
        print(f"  output checked: {checked}", flush=True)
        if args.kstreams:
            ks_figures |= ks_steady(jar, settings, kst, n, filled, base, args)
            ks_figures["rss_mb"] = max(ks_figures["rss_mb"], fill_rss)
            figures |= {f"ks_{k}": v for k, v in ks_figures.items()}
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--products", default="1000,100000,1000000")
    parser.add_argument("--steady", type=int, default=400_000, help="steady purchases")
    parser.add_argument("--batch", type=int, default=20_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--renames-per-s", type=int, default=2_000)
    parser.add_argument("--state-partitions", type=int, default=4)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--min-batches", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--verbose", action="store_true", help="each batch's durations")
    parser.add_argument(
        "--conf", action="append", default=[], help="KEY=VALUE: a Spark setting (repeatable)"
    )
    parser.add_argument(
        "--event-log", default="", help="write Spark's event log here (stage and task times)"
    )
    parser.add_argument(
        "--kstreams",
        action="store_true",
        help="the same data through benchmarks/kstreams' enrichment application, side by side",
    )
    ks.add_app_arguments(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.products.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        results = [one_size(n, args, Path(tmp)) for n in sizes]
    print(
        "\n| products | purchases/s | with restart batch | batch s | driver s | state MB/batch "
        "| restart s | fill s | peak RSS JVM MB | workers MB | batches changed |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['products']:,.0f} | {r['purchases_per_s']:,.0f} | {r['overall_per_s']:,.0f} | "
            f"{r['batch_s']:.2f} | "
            f"{r['driver_s']:.3f} | {r['state_mb_per_batch']:.1f} | {r['restart_s']:.1f} | "
            f"{r['fill_s']:.0f} | {r['jvm_mb']:,.0f} | {r['workers_mb']:,.0f} | "
            f"{r['changed']:.0f}/{r['batches']:.0f} |"
        )
    print(
        "\nSide by side (latency: output append time - the restart's start; CPU: broker, engine,"
        " this process with the renamer, over the steady span):\n"
        "| products | engine | purchases/s steady | with restart | p50 ms | p99 ms | restart s "
        "| fill s | peak RSS MB | CPU µs/purchase | later version named |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        engines = [("Spark", ""), *([("Kafka Streams", "ks_")] if args.kstreams else [])]
        for engine, k in engines:
            rss = r[f"{k}rss_mb"] if k else r["jvm_mb"] + r["workers_mb"]
            print(
                f"| {r['products']:,.0f} | {engine} | {r[k + 'purchases_per_s']:,.0f} | "
                f"{r[k + 'overall_per_s']:,.0f} | {r[k + 'p50_ms']:,.0f} | {r[k + 'p99_ms']:,.0f} "
                f"| {r[k + 'restart_s']:.1f} | {r[k + 'fill_s']:.0f} | {rss:,.0f} | "
                f"{r[k + 'cpu_us']:.0f} | {r.get(k + 'future', 0):,.0f} |"
            )
        if args.kstreams:
            print(
                f"| {r['products']:,.0f} | Spark / Kafka Streams | "
                f"{r['purchases_per_s'] / r['ks_purchases_per_s']:.2f}x | "
                f"{r['overall_per_s'] / r['ks_overall_per_s']:.2f}x | | "
                f"{r['p99_ms'] / r['ks_p99_ms']:.2f}x | | | | | |"
            )


if __name__ == "__main__":
    main()
