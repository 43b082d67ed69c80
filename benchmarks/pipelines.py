"""The seed pipelines end to end on the embedded broker, side by side in one run.

    .venv/bin/python benchmarks/pipelines.py [--purchases 1000000] [--frames 500000]
        [--products 100000] [--batch 500000] [--game-batch 500000] [--skip-quix]
        [--source auto|kafka|streamscale-kafka]

Fills the topics first (the generators' record builders, seeded), then measures, each
reading everything from the earliest offset and writing its output to Kafka:

- enrichment in Spark (``streamscale run enrichment``'s query, ``availableNow``);
- (a) the same enrichment as a plain single-process confluent-kafka loop;
- (b) the same enrichment in Quix Streams (its own venv ``.venv-quix``, created on first use
  with ``quixstreams==3.28.1``: it pins confluent-kafka and pydantic below this project's);
- game sessions in Spark over about ``2 × frames`` records (frames and approvals).

``--source`` chooses how both Spark pipelines read Kafka (``auto``: each pipeline's default);
repeated (``--source kafka --source streamscale-kafka``), each pipeline runs once per value
in one Spark session, on the same records, so that the readers compare side by side.

Spark figures: "steady" = input rows / trigger time over the batches after the first (which
pays for Python worker start), "end to end" = input rows / wall time of the whole run. The
enrichment restart cost (rebuilding the table from the compacted topic) is measured too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

import cpu_use
from streamscale.generate import game_frames, referential
from streamscale.generate.profiles import make_schedule
from streamscale.generate.purchases import purchase_records
from streamscale.kafka import broker as embedded
from streamscale.kafka.client import producer_config
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.pipelines.purchase_batches import REF_UNKNOWN
from streamscale.settings import Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

ROOT = Path(__file__).resolve().parent.parent
QUIX_VENV = ROOT / ".venv-quix"
QUIX_VERSION = "quixstreams==3.28.1"
PARTITIONS = 4
SEED = 42
# Quix reads topic configs back and needs these explicitly (the embedded broker reports
# only explicit configs); harmless for the others.
EXPLICIT = {"retention.ms": str(7 * 24 * 3600 * 1000), "retention.bytes": "-1"}


def create(settings: Settings, names: Iterable[str], compact: Iterable[str] = ()) -> None:
    admin = AdminClient(settings.kafka_config())
    tables = set(compact)
    topics = [
        NewTopic(
            n,
            PARTITIONS,
            1,
            config={**EXPLICIT, "cleanup.policy": "compact" if n in tables else "delete"},
        )
        for n in names
    ]
    for future in admin.create_topics(topics).values():
        future.result(timeout=15)


def produce_all(
    settings: Settings, records: Iterable[tuple[Any, ...]], scatter: str | None = None
) -> tuple[int, float]:
    """Produce generator records ``(topic, key, value, ts, counted)`` as fast as possible;
    records of topic ``scatter`` go round-robin over the partitions instead of by key."""
    producer = Producer(
        producer_config(
            settings.kafka_config(),
            **{"linger.ms": 50, "queue.buffering.max.messages": 500_000},
        )
    )
    began = time.perf_counter()
    count = 0
    for topic, key, value, ts, _ in records:
        kwargs = {"timestamp": ts} if ts else {}
        if topic == scatter:
            kwargs["partition"] = count % PARTITIONS
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                producer.poll(0.01)
        count += 1
    if producer.flush(120) != 0:
        raise RuntimeError("records still unacknowledged after 120 s")
    return count, time.perf_counter() - began


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


def run_spark(spark: Any, pipeline: Any) -> tuple[Any, float]:
    cpu = cpu_use.BatchCpu(spark)
    began = time.perf_counter()
    query = pipeline.start(spark, {"availableNow": True})
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    wall = time.perf_counter() - began
    print(f"  {pipeline.name} steady {cpu.steady()}", flush=True)
    for p in query.recentProgress:
        if p.numInputRows:
            print(
                f"  {pipeline.name} batch {p.batchId}: {p.numInputRows:,} rows in "
                f"{p.durationMs['triggerExecution'] / 1000:.1f} s "
                f"(addBatch {p.durationMs.get('addBatch', 0) / 1000:.1f} s, "
                f"latestOffset {p.durationMs.get('latestOffset', 0) / 1000:.1f} s)",
                flush=True,
            )
    return query, wall


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


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--purchases", type=int, default=1_000_000)
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--frames", type=int, default=500_000, help="frames (x2 records)")
    parser.add_argument(
        "--batch",
        type=int,
        default=500_000,
        help="enrichment: maxOffsetsPerTrigger of each source (purchases, referential)",
    )
    parser.add_argument(
        "--game-batch",
        type=int,
        default=500_000,
        help="game sessions: records per micro-batch (both topics, one source)",
    )
    parser.add_argument(
        "--source",
        choices=("auto", "kafka", "streamscale-kafka"),
        action="append",
        help="Kafka reader of both Spark pipelines (auto, the default: each pipeline's own); "
        "repeat it to run each pipeline once per value, in order, in one Spark session",
    )
    parser.add_argument("--skip-quix", action="store_true")
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

    rows: list[tuple[str, float, str]] = []
    game_rows: list[tuple[str, float, str]] = []
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
            [et.purchases, et.referential, et.output, et.dlq, *outputs, *gt.__dict__.values()],
            compact=[et.referential],
        )

        rng = random.Random(SEED)
        plan = referential.plan_for_products(args.products, 0.05, 0.01)
        n_ref, _ = produce_all(settings, referential.referential_records(rng, plan, et.referential))
        n_pur, s_pur = produce_all(
            settings, purchase_records(rng, args.purchases, et.purchases, products=args.products)
        )
        schedule = make_schedule("steady", rate=20_000, count=args.frames)
        frames = game_frames.GameFrames(
            rng,
            schedule,
            start_ms=int(time.time() * 1000),
            request_topic=gt.requests,
            approval_topic=gt.approvals,
        )
        scatter = gt.approvals if args.scatter_approvals else None
        n_frm, _ = produce_all(settings, frames.records(), scatter)
        n_frm_frames = frames.stats.frames
        print(
            f"filled: {n_ref:,} referential, {n_pur:,} purchases ({n_pur / s_pur:,.0f}/s), "
            f"{n_frm:,} frame records ({frames.stats.frames:,} frames, "
            f"{frames.stats.approvals:,} approvals)",
            flush=True,
        )

        extra = dict(item.split("=", 1) for item in args.conf)
        spark = session(settings, app_name="bench-pipelines", extra_conf=extra)
        ckpt = Path(tmp) / "ckpt"
        en: dict[str, float] = {}
        sources = args.source or ["auto"]
        for i, choice in enumerate([] if args.skip_enrichment else sources):
            source = None if choice == "auto" else choice
            enrichment = Enrichment(settings, str(ckpt / f"enrichment-{i}"), et, source)
            print(f"enrichment reads with {enrichment.source}", flush=True)
            query, wall = run_spark(spark, enrichment)
            en = spark_rates(query, wall)
            # Restart cost: a fresh pipeline object rebuilds the table from the compacted topic.
            began = time.perf_counter()
            again = Enrichment(settings, str(ckpt / f"enrichment-{i}"), et, source)
            again._rebuild(spark, int(query.lastProgress.batchId) + 1)
            en["rebuild_s"] = time.perf_counter() - began
            en["products"] = len(again.table.names)
            # After the first batch (which holds the whole referential) batches are purchases.
            rows.append(
                (
                    "enrichment, Spark (steady)",
                    en["steady"],
                    f"purchases/s, batches 2+, {enrichment.source}",
                )
            )
            rows.append(
                (
                    "enrichment, Spark (end to end)",
                    en["end_to_end"],
                    f"{wall:.1f} s wall, {enrichment.source}",
                )
            )

        gs: dict[str, float] = {}
        game_settings = settings.model_copy(update={"max_offsets_per_trigger": args.game_batch})
        for i, choice in enumerate([] if args.skip_games else sources):
            source = None if choice == "auto" else choice
            pipeline = GameSessions(game_settings, str(ckpt / f"sessions-{i}"), gt, source)
            print(f"game sessions read with {pipeline.source}", flush=True)
            games, wall_g = run_spark(spark, pipeline)
            gs = spark_rates(games, wall_g)
            totals: dict[str, int] = {}
            for counts in pipeline.counts.values():
                for name, n in counts.items():
                    totals[name] = totals.get(name, 0) + n
            last = pipeline.counts[max(pipeline.counts)]
            pending = last["now.pending_frames"]
            settled = totals["join.approved"] + totals["join.unapproved"] + pending
            print(
                f"  game-sessions frames {totals['frames.records']:,} = approved "
                f"{totals['join.approved']:,} + unapproved {totals['join.unapproved']:,} + "
                f"pending {pending:,} ({'ok' if settled == n_frm_frames else 'NO'});"
                f" sessions closed {totals['sessions.closed']}, open {last['now.open_sessions']}",
                flush=True,
            )
            game_rows.append(
                ("game sessions, Spark (steady)", gs["steady"], f"records/s, {pipeline.source}")
            )
            game_rows.append(
                (
                    "game sessions, Spark (end to end)",
                    gs["end_to_end"],
                    f"{wall_g:.1f} s wall, {pipeline.source}",
                )
            )
        stop_session(spark)

        quix = None
        if not args.skip_enrichment:
            plain = plain_enrichment(settings, et, outputs[0])
            rows.append(("(a) enrichment, plain confluent-kafka", plain, "1 process"))
            if not args.skip_quix:
                quix = quix_enrichment(settings, et, outputs[1], n_pur)
                rows.append(("(b) enrichment, Quix Streams", quix, QUIX_VERSION))
        frame_share = frames.stats.frames / max(1, n_frm)
        rows.extend(game_rows)

    print(f"\n{'path':<42}{'records/s':>12}  note")
    for name, rate, note in rows:
        print(f"{name:<42}{rate:>12,.0f}  {note}")
    if en:
        print(
            f"\nenrichment: {en['steady']:,.0f} purchases/s steady; first batch "
            f"{en['first_batch_s']:.1f} s; table rebuild on restart {en['rebuild_s']:.1f} s "
            f"({int(en['products']):,} products)"
        )
    if quix:
        print(f"enrichment Spark steady / Quix: {en['steady'] / quix:.1f}x")
    if gs:
        print(
            f"game sessions: {gs['steady'] * frame_share:,.0f} frames/s steady "
            f"({gs['end_to_end'] * frame_share:,.0f} end to end)"
        )
    print(f"command: {' '.join([os.path.relpath(sys.executable, ROOT), *sys.argv])}")


if __name__ == "__main__":
    main()
