"""The seed pipelines end to end on the embedded broker, side by side in one run.

    .venv/bin/python benchmarks/pipelines.py [--purchases 1000000] [--frames 500000]
        [--products 100000] [--batch N] [--game-batch N] [--skip-quix]
        [--source auto|kafka|streamscale-kafka] [--kstreams] [--threads 2] [--runs 1]
        [--delivery at-least-once|exactly-once|both] [--guarantee exactly_once_v2]
        [--grace-ms MS] [--retention-margin-ms MS] [--app-opt=--NAME=VALUE] [--jvm-opt OPT]
        [--log-dir DIR] [--timeout 300]

Fills the topics first (the generators' record builders, seeded), then measures, each
reading everything from the earliest offset and writing its output to its own Kafka topics
(stamped by the broker: ``LogAppendTime``):

- enrichment in Spark (``streamscale run enrichment``'s query, ``availableNow``);
- game sessions in Spark over about ``2 × frames`` records (frames and approvals);
- (a) the same enrichment as a plain single-process confluent-kafka loop;
- (b) the same enrichment in Quix Streams (its own venv ``.venv-quix``, created on first use
  with ``quixstreams==3.28.1``: it pins confluent-kafka and pydantic below this project's);
- with ``--kstreams``, both pipelines on Kafka Streams (``benchmarks/kstreams.py``'s apps and
  checks), last, on the same broker and topics: the sentinel frames that close its last
  sessions are appended only after every other engine has read the frames. Spark's game
  sessions then read the same sentinels in a restart of each query from its checkpoint, so
  that their output, too, is complete and checked in full.

The Kafka Streams options (``--threads``, ``--guarantee``, ``--grace-ms``,
``--retention-margin-ms``, ``--app-opt``, ``--jvm-opt``, ``--log-dir``) are
``benchmarks/kstreams.py``'s (``kstreams.add_app_arguments``): the same meaning in both.

``--delivery both`` runs each Spark pipeline at-least-once and exactly-once (Kafka
transactions, outputs read back ``read_committed``) side by side in one session;
``--guarantee exactly_once_v2`` sets Kafka Streams' ``processing.guarantee``. With
exactly-once, the latency read from the output's ``LogAppendTime`` is the append's, and a
record becomes visible at its transaction's commit, right after its task's last append.

``--source`` chooses how both Spark pipelines read Kafka (``auto``: each pipeline's default);
repeated (``--source kafka --source streamscale-kafka``), each pipeline runs once per value
in one Spark session, on the same records, so that the readers compare side by side.

Every Spark and Kafka Streams output is checked against the reference (the project's pure
functions on the records read back, as ``benchmarks/kstreams.py`` builds it) before its
figures count. Spark figures: "steady" = input rows / trigger time over the batches after the
first (which pays for Python worker start; the default batch sizes give 5+ of them), "end to
end" = input rows / wall time of the whole query. The enrichment restart cost (rebuilding the
table from the compacted topic) is measured too. ``--runs N``: a fresh broker and the same
seeded data per run, the table of each run, then the median of the runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP

import cpu_use
import kstreams as ks
from kafka_fill import FRAME_RATE, LOG_APPEND, PARTITIONS, SEED, create, create_topics, produce_all
from streamscale.experiment import verify
from streamscale.generate import game_frames, referential
from streamscale.generate.profiles import make_schedule
from streamscale.generate.purchases import purchase_records
from streamscale.kafka import broker as embedded
from streamscale.kafka import transactions as tx
from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.client import producer_config
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.pipelines.purchase_batches import REF_UNKNOWN
from streamscale.settings import KafkaSource, Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

ROOT = ks.ROOT
QUIX_VENV = ROOT / ".venv-quix"
QUIX_VERSION = "quixstreams==3.28.1"
STEADY_BATCHES = 5  # Spark batches after the first that a steady figure needs
# --source: the Spark pipelines' Kafka reader (auto: each pipeline's default).
SOURCES: dict[str, KafkaSource | None] = {
    "auto": None,
    "kafka": "kafka",
    "streamscale-kafka": "streamscale-kafka",
}


def spark_rates(query: Any, wall_s: float) -> dict[str, float]:
    progress = [p for p in query.recentProgress if p.numInputRows]
    steady = progress[1:] or progress
    rows = sum(p.numInputRows for p in steady)
    seconds = sum(p.durationMs["triggerExecution"] for p in steady) / 1000
    total = sum(p.numInputRows for p in progress)
    return {
        "steady": rows / seconds if seconds else 0.0,
        "end_to_end": total / wall_s,
        "rows": float(total),
        "batches": float(len(progress)),
        "first_batch_s": progress[0].durationMs["triggerExecution"] / 1000 if progress else 0.0,
    }


SPARK_KINDS = ("spark jvm", "python workers", "benchmark process")


@dataclasses.dataclass
class SparkRun:
    """What one Spark query cost: wall time, start (epoch ms), steady CPU by kind, peak RSS."""

    wall_s: float
    started_ms: float
    steady_records: int
    cpu: dict[str, float]
    peak_rss_mb: float


def run_spark(spark: Any, pipeline: Any) -> tuple[Any, SparkRun]:
    # This run's processes only (the machine is shared): this process and those below it,
    # the Spark JVM, its Python workers and the embedded broker (started by this process).
    cpu = cpu_use.BatchCpu(spark, root=os.getpid())
    # The PySpark driver is this process, which also holds the benchmark's reference records:
    # only its growth during the query counts.
    driver_before = cpu_use.rss_mb(["benchmark process"])
    rss = cpu_use.RssPeak(["spark jvm", "python workers"], root=os.getpid())
    driver_rss = cpu_use.RssPeak(["benchmark process"])
    started_ms = time.time() * 1000
    began = time.perf_counter()
    try:
        query = pipeline.start(spark, {"availableNow": True})
        query.awaitTermination()
    finally:
        peak = rss.stop() + max(0.0, driver_rss.stop() - driver_before)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    wall = time.perf_counter() - began
    print(f"  {pipeline.name} steady {cpu.steady()}", flush=True)
    records, spent = cpu.steady_spent()
    for p in query.recentProgress:
        if p.numInputRows:
            print(
                f"  {pipeline.name} batch {p.batchId}: {p.numInputRows:,} rows in "
                f"{p.durationMs['triggerExecution'] / 1000:.1f} s "
                f"(addBatch {p.durationMs.get('addBatch', 0) / 1000:.1f} s, "
                f"latestOffset {p.durationMs.get('latestOffset', 0) / 1000:.1f} s)",
                flush=True,
            )
    return query, SparkRun(wall, started_ms, records, spent, peak)


def final_watermark_ms(query: Any) -> int:
    """The event-time watermark of the query's last batch, epoch ms (0 before any)."""
    from datetime import datetime

    text = ((query.lastProgress or {}).get("eventTime") or {}).get("watermark")
    return (
        int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000) if text else 0
    )


# --- (a) plain confluent-kafka loop ---------------------------------------------------------


def plain_enrichment(settings: Settings, topics: EnrichmentTopics, out_topic: str) -> float:
    """Load the whole referential, then enrich every purchase; purchases/s over the loop."""
    conf = {**settings.kafka_config(), "enable.auto.commit": False, "enable.partition.eof": True}
    consumer = Consumer({**conf, "group.id": "bench-plain"})
    names: dict[int, str] = {}

    def drain(topic: str, handle: Any) -> int:
        consumer.assign([CTP(topic, p, 0) for p in range(PARTITIONS)])
        done: set[int] = set()
        seen = 0
        while len(done) < PARTITIONS:
            for msg in consumer.consume(10_000, 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(msg.partition())
                        continue
                    raise RuntimeError(err.str())
                handle(msg)
                seen += 1
        return seen

    def table(msg: Any) -> None:
        value = msg.value()
        if value is None:
            names.pop(int(msg.key()), None)
        else:
            names[int(msg.key())] = json.loads(value)["name"]

    drain(topics.referential, table)
    producer = Producer(producer_config(settings.kafka_config(), **{"linger.ms": 50}))
    produce = producer.produce
    dumps, loads = json.dumps, json.loads

    def enrich(msg: Any) -> None:
        purchase = loads(msg.value())
        pid = purchase["id"]
        value = dumps({"id": pid, "name": names.get(pid, REF_UNKNOWN), "price": purchase["price"]})
        while True:
            try:
                produce(out_topic, value, msg.key())
                return
            except BufferError:
                producer.poll(0.01)

    began = time.perf_counter()
    count = drain(topics.purchases, enrich)
    producer.flush(120)
    elapsed = time.perf_counter() - began
    consumer.close()
    return count / elapsed


# --- (b) Quix Streams, in its own venv ------------------------------------------------------


def quix_python() -> Path:
    """The Quix venv's interpreter, creating the venv on first use."""
    python = QUIX_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {QUIX_VENV} with {QUIX_VERSION} (first use)...", flush=True)
        subprocess.run(["python3.11", "-m", "venv", str(QUIX_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", QUIX_VERSION], check=True)
    return python


def quix_enrichment(settings: Settings, topics: EnrichmentTopics, out_topic: str, n: int) -> float:
    script = Path(__file__).with_name("quix_enrichment.py")
    state = tempfile.mkdtemp(prefix="bench-quix-")
    try:
        result = subprocess.run(
            [
                str(quix_python()),
                str(script),
                "--bootstrap",
                settings.bootstrap_servers,
                "--purchases",
                topics.purchases,
                "--referential",
                topics.referential,
                "--output",
                out_topic,
                "--expected",
                str(n),
                "--state-dir",
                state,
            ],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
    finally:
        shutil.rmtree(state, ignore_errors=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"quix run failed ({result.returncode}): {result.stderr[-2000:]}")
    return float(json.loads(lines[-1])["rate"])


# --- one table ----------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    """One engine's figures in the side-by-side table (nan: not measured for it)."""

    rate: float  # records/s, steady
    rate_e2e: float = math.nan  # records/s, start included
    cpu_us: float = math.nan  # the engine's processes, per input record, steady span
    broker_us: float = math.nan
    p50_ms: float = math.nan  # output timestamp - input timestamp
    p99_ms: float = math.nan
    p50_start_ms: float = math.nan  # output timestamp - max(input timestamp, engine start)
    p99_start_ms: float = math.nan
    rss_mb: float = math.nan
    close_ms: float = math.nan  # game sessions: last session out, after the sentinels
    check: str = "not checked"
    note: str = ""


def spark_row(rates: dict[str, float], run: SparkRun, note: str) -> Row:
    engine = sum(run.cpu.get(k, 0.0) for k in SPARK_KINDS)
    n = max(1, run.steady_records)
    return Row(
        rate=rates["steady"],
        rate_e2e=rates["end_to_end"],
        cpu_us=engine / n * 1e6 if run.steady_records else math.nan,
        broker_us=run.cpu.get("broker", math.nan) / n * 1e6,
        rss_mb=run.peak_rss_mb,
        note=note,
    )


def latencies(row: Row, pairs: Sequence[tuple[float, float]], started_ms: float) -> None:
    """``pairs``: (output timestamp, input timestamp) in epoch ms."""
    row.p50_ms = ks.percentile([o - i for o, i in pairs], 50)
    row.p99_ms = ks.percentile([o - i for o, i in pairs], 99)
    since = [o - max(i, started_ms) for o, i in pairs]
    row.p50_start_ms = ks.percentile(since, 50)
    row.p99_start_ms = ks.percentile(since, 99)


def check_sessions(
    admin: KafkaAdmin,
    topics: GameTopics,
    ref: ks.SessionsReference,
    watermark_ms: int,
    name: str,
) -> tuple[ks.Check, list[ks.Rec]]:
    """Spark's game sessions against the reference. The reference closes every session (it
    includes Kafka Streams' sentinels, which Spark never reads): the sessions that end after
    Spark's last watermark (still open in its state store) are the only ones allowed to be
    missing, and every session it wrote must be a reference session, byte for byte."""
    written = ks.read_back(admin, topics.output)
    dead = ks.read_back(admin, topics.dlq)
    check = ks.Check(name)
    actual = Counter((r.key, r.value) for r in written)
    still_open = {
        item
        for item, n in ref.output.items()
        if actual.get(item, 0) < n and json.loads(item[1])["end"] > watermark_ms
    }
    expected = Counter({i: n for i, n in ref.output.items() if i not in still_open})
    check.compare("session", expected, actual)
    if still_open:
        check.notes.append(
            f"{len(still_open):,} reference sessions not closed: they end after Spark's last "
            "watermark (no sentinel), so they are still open in its state store"
        )
    check.compare("dead letter", ref.dead, Counter(ks.dead_of(r) for r in dead))
    return check, written


def one_run(run: int, args: argparse.Namespace) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    jar = ks.ensure_jar() if args.kstreams else None
    with tempfile.TemporaryDirectory() as tmp, embedded.embedded_broker(Path(tmp) / "b") as b:
        settings = Settings(
            bootstrap_servers=b.bootstrap,
            max_offsets_per_trigger=args.batch,
            spark_master=args.master,
            shuffle_partitions=args.shuffle_partitions,
            state_store=args.state_store,
            driver_memory="2g",
        )
        et = EnrichmentTopics()
        gt = GameTopics()
        outputs = ["plain-enrichis", "quix-enrichis"]
        create(
            settings,
            [et.purchases, et.referential, *outputs, gt.requests, gt.approvals],
            compact=[et.referential],
        )
        # Each Spark pipeline runs once per (source, delivery), in one Spark session.
        combos = [(src, d) for src in (args.source or ["auto"]) for d in args.deliveries]
        # Every engine writes its own output topics, stamped by the broker (LogAppendTime), so
        # that each output can be checked alone and its latency read from its timestamps.
        spark_et = [
            dataclasses.replace(et, output=f"{et.output}-{i}", dlq=f"{et.dlq}-{i}")
            for i in range(len(combos))
        ]
        spark_gt = [
            dataclasses.replace(gt, output=f"{gt.output}-{i}", dlq=f"{gt.dlq}-{i}")
            for i in range(len(combos))
        ]
        ks_et = dataclasses.replace(et, output=f"ks-{et.output}", dlq=f"ks-{et.dlq}")
        ks_gt = dataclasses.replace(gt, output=f"ks-{gt.output}", dlq=f"ks-{gt.dlq}")
        out_topics: list[EnrichmentTopics | GameTopics] = [*spark_et, *spark_gt, ks_et, ks_gt]
        create_topics(settings, {t: LOG_APPEND for x in out_topics for t in (x.output, x.dlq)})

        rng = random.Random(SEED)
        plan = referential.plan_for_products(args.products, 0.05, 0.01)
        n_ref, _ = produce_all(settings, referential.referential_records(rng, plan, et.referential))
        n_pur, s_pur = produce_all(
            settings, purchase_records(rng, args.purchases, et.purchases, products=args.products)
        )
        schedule = make_schedule("steady", rate=FRAME_RATE, count=args.frames)
        frames = game_frames.GameFrames(
            rng,
            schedule,
            start_ms=int(time.time() * 1000),
            request_topic=gt.requests,
            approval_topic=gt.approvals,
        )
        scatter = gt.approvals if args.scatter_approvals else None
        n_frm, _ = produce_all(settings, frames.records(), scatter)
        print(
            f"run {run}: filled: {n_ref:,} referential, {n_pur:,} purchases "
            f"({n_pur / s_pur:,.0f}/s), {n_frm:,} frame records ({frames.stats.frames:,} frames, "
            f"{frames.stats.approvals:,} approvals)",
            flush=True,
        )
        steady_e = math.ceil(args.purchases / args.batch) - 1
        steady_g = math.ceil(n_frm / args.game_batch) - 1
        for what, n in (("enrichment", steady_e), ("game sessions", steady_g)):
            if n < STEADY_BATCHES:
                print(f"  WARNING: {what} gets only about {n} steady batch(es)", flush=True)

        # The references, from the records read back (before any engine runs).
        ref_e: ks.EnrichmentReference | None = None
        ref_s: ks.SessionsReference | None = None
        read: dict[str, list[ks.Rec]] = {}
        admin = KafkaAdmin(settings.kafka_config(), 30.0)
        began = time.perf_counter()
        if not args.skip_enrichment:
            read["products"] = ks.read_back(admin, et.referential)
            read["purchases"] = ks.read_back(admin, et.purchases)
            ref_e = ks.enrichment_reference(ks_et, read["purchases"], read["products"])
        if not args.skip_games:
            read["requests"] = ks.read_back(admin, gt.requests)
            read["approvals"] = ks.read_back(admin, gt.approvals)
            taken = {m.id for m in frames.machines}
            ref_s = ks.sessions_reference(
                ks_gt,
                settings,
                read["requests"],
                read["approvals"],
                taken,
                ks.grace_ms(args, settings),
            )
        print(f"  references built in {time.perf_counter() - began:.1f} s", flush=True)
        created = {r.key: r.ts for r in read.get("purchases", [])}

        try:
            extra = dict(item.split("=", 1) for item in args.conf)
            spark = session(settings, app_name="bench-pipelines", extra_conf=extra)
            ckpt = Path(tmp) / "ckpt"
            closing: list[tuple[int, KafkaSource | None, str, str]] = []
            for i, (choice, delivery) in enumerate([] if args.skip_enrichment else combos):
                assert ref_e is not None  # built unless --skip-enrichment
                source = SOURCES[choice]
                et_i = spark_et[i]
                settings_i = settings.model_copy(update={"delivery": delivery})
                enrichment = Enrichment(settings_i, str(ckpt / f"enrichment-{i}"), et_i, source)
                print(f"enrichment reads with {enrichment.source}", flush=True)
                before = tx.jvm_writer_stats(spark)
                query, sr = run_spark(spark, enrichment)
                en = spark_rates(query, sr.wall_s)
                if delivery == "exactly-once":  # the JVM writer's work in this run (local master)
                    after = tx.jvm_writer_stats(spark)
                    done = {k: v - before.get(k, 0) for k, v in after.items()}
                    print(f"  exactly-once writer (driver JVM): {done}", flush=True)
                # The table is in Spark's state store: a restart is Spark's restart from the
                # checkpoint (measured by benchmarks/table_state.py).
                print(
                    f"  enrichment: first batch {en['first_batch_s']:.1f} s, "
                    f"{int(en['batches'])} batches",
                    flush=True,
                )
                name = f"enrichment, Spark {enrichment.source}, {delivery} #{i}"
                row = spark_row(en, sr, f"{int(en['batches']) - 1} steady batches")
                check, written, _ = ks.check_enrichment(admin, et_i, ref_e, name)
                print(f"  {check.summary()}", flush=True)
                pairs = [(r.ts, created[r.key]) for r in written if r.key in created]
                latencies(row, pairs, sr.started_ms)
                row.check = "ok" if check.ok else "FAILED"
                rows[name] = row

            game_settings = settings.model_copy(update={"max_offsets_per_trigger": args.game_batch})
            for i, (choice, delivery) in enumerate([] if args.skip_games else combos):
                assert ref_s is not None  # built unless --skip-games
                source = SOURCES[choice]
                gt_i = spark_gt[i]
                game_i = game_settings.model_copy(update={"delivery": delivery})
                pipeline = GameSessions(game_i, str(ckpt / f"sessions-{i}"), gt_i, source)
                print(f"game sessions read with {pipeline.source}", flush=True)
                games, sr = run_spark(spark, pipeline)
                gs = spark_rates(games, sr.wall_s)
                totals: dict[str, int] = {}
                for progress in games.recentProgress:
                    for key, n in pipeline.batch_counts(progress).items():
                        totals[key] = totals.get(key, 0) + n
                watermark_ms = final_watermark_ms(games)
                read_frames = totals.get("frames.records", 0)
                approved = totals.get("join.approved", 0)
                print(
                    f"  game-sessions frames {read_frames:,}: approved {approved:,}, "
                    f"unapproved {totals.get('join.unapproved', 0):,}, "
                    f"late rows {totals.get('late.rows', 0):,}, the rest in open windows;"
                    f" sessions closed {totals.get('sessions.closed', 0)}",
                    flush=True,
                )
                name = f"game sessions, Spark {pipeline.source}, {delivery} #{i}"
                row = spark_row(gs, sr, f"{int(gs['batches']) - 1} steady batches")
                check, written = check_sessions(admin, gt_i, ref_s, watermark_ms, name)
                print(f"  {check.summary()}", flush=True)
                row.check = "ok (closed ones)" if check.ok else "FAILED"
                rows[name] = row
                closing.append((i, source, name, delivery))
            stop_session(spark)

            if not args.skip_enrichment:
                plain = plain_enrichment(settings, et, outputs[0])
                rows["(a) enrichment, plain confluent-kafka"] = Row(
                    plain, note="purchases/s, table load excluded"
                )
                if not args.skip_quix:
                    quix = quix_enrichment(settings, et, outputs[1], n_pur)
                    rows["(b) enrichment, Quix Streams"] = Row(quix, note=QUIX_VERSION)

            if jar is not None:  # --kstreams
                # Last, on the same topics: the sentinel frames it needs to close its last
                # sessions are appended after every other engine has read the frames.
                tmp_ks = Path(tmp) / "kstreams"
                tmp_ks.mkdir()
                for name, result in ks_runs(
                    jar,
                    settings,
                    admin,
                    (ks_et, ks_gt),
                    read,
                    (ref_e, ref_s),
                    tmp_ks,
                    args,
                    b.pid,
                ):
                    rows[name] = result

            if closing:
                # Spark's sessions close the same way, after every engine has read the frames:
                # the sentinel frames (Kafka Streams already appended them; else here), read by
                # a restart of each Spark query from its checkpoint. Its output is then checked
                # in full against the reference; the steady figures above are unchanged.
                assert ref_s is not None  # closing holds game-session runs
                if not args.kstreams:
                    produce_all(settings, ref_s.sentinels_at(0))
                spark = session(settings, app_name="bench-pipelines-close", extra_conf=extra)
                for i, source, name, delivery in closing:
                    gt_i = spark_gt[i]
                    game_i = game_settings.model_copy(update={"delivery": delivery})
                    pipeline = GameSessions(game_i, str(ckpt / f"sessions-{i}"), gt_i, source)
                    print(f"game sessions, closing run ({pipeline.source})", flush=True)
                    _, sr = run_spark(spark, pipeline)
                    check, written = check_sessions(admin, gt_i, ref_s, 0, name)
                    independent = verify.compare_sessions(
                        ref_s.expected,
                        verify.actual_sessions([(r.key, r.value, r.ts) for r in written]),
                    )
                    check.notes.append(
                        f"streamscale.experiment.verify.compare_sessions: {independent.summary()}"
                    )
                    if not independent.ok:
                        check.missing.append(independent.summary())
                    print(f"  after the sentinels: {check.summary()}", flush=True)
                    row = rows[name]
                    pairs = [(r.ts, json.loads(r.value or b"{}")["lastTs"]) for r in written]
                    latencies(row, pairs, sr.started_ms)
                    row.p50_start_ms = row.p99_start_ms = math.nan
                    close_ms = max((r.ts for r in written), default=math.nan) - sr.started_ms
                    row.check = f"{row.check}, all {len(written):,} after sentinel " + (
                        "ok" if check.ok else "FAILED"
                    )
                    row.close_ms = close_ms
                    row.note += "; last session out ms after the closing start:"
                stop_session(spark)
        finally:
            admin.close()
    return rows


def ks_runs(
    jar: Path,
    settings: Settings,
    admin: KafkaAdmin,
    topics: tuple[EnrichmentTopics, GameTopics],
    read: dict[str, list[ks.Rec]],
    refs: tuple[ks.EnrichmentReference | None, ks.SessionsReference | None],
    tmp: Path,
    args: argparse.Namespace,
    broker_pid: int,
) -> Iterable[tuple[str, Row]]:
    results = []
    if refs[0] is not None:
        results.append(
            (
                "enrichment, Kafka Streams",
                ks.run_enrichment(jar, settings, admin, topics[0], refs[0], tmp, args, broker_pid),
            )
        )
    if refs[1] is not None:
        inputs = (len(read["requests"]), len(read["approvals"]))
        results.append(
            (
                "game sessions, Kafka Streams",
                ks.run_sessions(
                    jar, settings, admin, topics[1], refs[1], inputs, tmp, args, broker_pid
                ),
            )
        )
    for name, (check, f) in results:
        print(f"  {check.summary()}", flush=True)
        if f is None:
            yield name, Row(math.nan, check="FAILED")
            continue
        threads = ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(f.threads.items(), key=lambda kv: -kv[1])
        )
        print(
            f"  {name}: {f.records:,} records in {f.seconds:.2f} s; CPU {f.cpu_us:.1f} µs/record "
            f"({f.cpu_us_total:.1f} with JVM start); start-up {f.extra['startup_ms']:,.0f} ms; "
            f"Java CPU s by thread: {threads}",
            flush=True,
        )
        row = Row(
            rate=f.rate,
            rate_e2e=f.records / (f.seconds + f.extra["startup_ms"] / 1000),
            cpu_us=f.cpu_us,
            broker_us=f.broker_cpu_us,
            p50_ms=f.p50_ms,
            p99_ms=f.p99_ms,
            p50_start_ms=f.extra["p50_start_ms"],
            p99_start_ms=f.extra["p99_start_ms"],
            rss_mb=f.peak_rss_mb,
            check="ok" if check.ok else "FAILED",
            note=f"{args.threads} stream threads, JVM start excluded",
        )
        if "closing_ms" in f.extra:
            row.p50_start_ms = row.p99_start_ms = math.nan
            row.close_ms = f.extra["closing_ms"]
            row.note += "; last session out ms after the sentinel:"
        yield name, row


def median_row(rows: Sequence[Row]) -> Row:
    def med(values: Iterable[float]) -> float:
        finite = [v for v in values if not math.isnan(v)]
        return statistics.median(finite) if finite else math.nan

    out = Row(math.nan, check="/".join(sorted({r.check for r in rows})), note=rows[-1].note)
    for f in dataclasses.fields(Row):
        if f.name not in ("check", "note"):
            setattr(out, f.name, med(getattr(r, f.name) for r in rows))
    return out


def show_table(per_run: Sequence[dict[str, Row]]) -> None:
    names = list(dict.fromkeys(n for run in per_run for n in run))

    def fmt(v: float, spec: str) -> str:
        return "-" if math.isnan(v) else format(v, spec)

    print(
        f"\n{'engine':<44}{'rec/s':>9}{'e2e/s':>9}{'CPU µs':>8}{'broker':>8}{'p50 ms':>9}"
        f"{'p99 ms':>9}{'p50 st':>8}{'p99 st':>8}{'RSS MB':>8}  check; note"
    )
    for name in names:
        r = median_row([run[name] for run in per_run if name in run])
        print(
            f"{name:<44}{fmt(r.rate, ',.0f'):>9}{fmt(r.rate_e2e, ',.0f'):>9}"
            f"{fmt(r.cpu_us, '.1f'):>8}{fmt(r.broker_us, '.1f'):>8}{fmt(r.p50_ms, ',.0f'):>9}"
            f"{fmt(r.p99_ms, ',.0f'):>9}{fmt(r.p50_start_ms, ',.0f'):>8}"
            f"{fmt(r.p99_start_ms, ',.0f'):>8}{fmt(r.rss_mb, ',.0f'):>8}  {r.check}; {r.note}"
            + ("" if math.isnan(r.close_ms) else f" {r.close_ms:,.0f}")
        )
    print(
        f"median of {len(per_run)} run(s). rec/s: input records per second, steady (Spark: "
        "batches 2+ over their trigger time; Kafka Streams: first record processed -> last "
        "output, game sessions -> last frame aggregated, JVM start excluded; plain/Quix: their "
        "own loop). e2e/s: with start-up (Spark: query start -> end; Kafka Streams: JVM "
        "launch). CPU µs: per input record over the steady span, the engine's processes of this "
        "run (Spark: driver JVM + Python workers + the PySpark driver process; Kafka Streams: "
        "its JVM); broker: this run's broker over the same span. p50/p99: output append time - "
        "input timestamp (enrichment: purchase CreateTime; sessions: last frame's event time): "
        "on a backlog filled before any engine starts, so it grows with how long the engine "
        "waited its turn. p50/p99 st: output append time - max(input timestamp, engine start), the "
        "same latency counted from the engine's start (Spark: query start; Kafka Streams: JVM "
        "launch); not for game sessions, whose sessions all close on the sentinel frames "
        "(event time here spans less than the 30 s gap): Kafka Streams gets them once it has "
        "aggregated every frame, Spark in a restart of its query from the checkpoint after "
        "every engine has run; the note says how long after that each emitted its last "
        "session. RSS: peak (Spark: driver JVM + Python workers, sampled every 0.25 s, plus "
        "what the PySpark driver process grew during the query; Kafka Streams: the JVM's "
        "VmHWM)."
    )


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--purchases", type=int, default=1_000_000)
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--frames", type=int, default=500_000, help="frames (x2 records)")
    parser.add_argument(
        "--batch",
        type=int,
        help="enrichment: maxOffsetsPerTrigger of the purchases (the referential is read whole); "
        f"default: purchases / {STEADY_BATCHES + 3}, so that {STEADY_BATCHES}+ batches follow "
        "the first",
    )
    parser.add_argument(
        "--game-batch",
        type=int,
        help="game sessions: records per micro-batch (both topics, one source); default: "
        f"2 x frames / {STEADY_BATCHES + 3}",
    )
    parser.add_argument(
        "--source",
        choices=tuple(SOURCES),
        action="append",
        help="Kafka reader of both Spark pipelines (auto, the default: each pipeline's own); "
        "repeat it to run each pipeline once per value, in order, in one Spark session",
    )
    parser.add_argument(
        "--delivery",
        choices=("at-least-once", "exactly-once", "both"),
        action="append",
        help="output delivery of both Spark pipelines (default at-least-once); both, or "
        "repeated: each pipeline runs once per value, side by side in one Spark session",
    )
    parser.add_argument("--skip-quix", action="store_true")
    parser.add_argument(
        "--kstreams",
        action="store_true",
        help="also run both pipelines on Kafka Streams (benchmarks/kstreams), last, on the same "
        "broker and topics",
    )
    # With --kstreams: the Kafka Streams applications' options (--threads, --guarantee...).
    ks.add_app_arguments(parser)
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="Kafka Streams: seconds per wait"
    )
    parser.add_argument("--runs", type=int, default=1, help="median of this many runs")
    parser.add_argument(
        "--scatter-approvals",
        action="store_true",
        help="approvals round-robin over partitions: not co-partitioned, every pair on the driver",
    )
    parser.add_argument("--skip-enrichment", action="store_true", help="game sessions only")
    parser.add_argument("--skip-games", action="store_true", help="enrichment only")
    parser.add_argument("--state-store", choices=("rocksdb", "hdfs"), default="rocksdb")
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--master", default="local[4]", help="Spark master (task slots)")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    args = parser.parse_args()
    # In the order given ("both": at-least-once then exactly-once), repeats kept: alternating
    # runs in one session show the order's effect (the first query warms the JVM).
    args.deliveries = []
    for d in args.delivery or ["at-least-once"]:
        args.deliveries += ["at-least-once", "exactly-once"] if d == "both" else [d]
    args.batch = args.batch or math.ceil(args.purchases / (STEADY_BATCHES + 3))
    args.game_batch = args.game_batch or max(1, math.ceil(2 * args.frames / (STEADY_BATCHES + 3)))

    per_run = []
    for run in range(1, args.runs + 1):
        per_run.append(one_run(run, args))
        show_table(per_run[-1:])
    if args.runs > 1:
        show_table(per_run)
    print(f"command: {' '.join([os.path.relpath(sys.executable, ROOT), *sys.argv])}")


if __name__ == "__main__":
    main()
