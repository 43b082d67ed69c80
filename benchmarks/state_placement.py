"""State placement of a stateful query on scale-out and scale-in: reloads per batch.

    PYTHONPATH=src STREAMSCALE_JARS_DIR=jvm/lib .venv/bin/python benchmarks/state_placement.py \\
        [--process-wait 0s] [--spread] [--pipeline game-sessions]

On the embedded Apache Kafka and a local standalone cluster (executors of 1 core), a plain
user query ``groupBy(k).agg(sum(v), count)`` on RocksDB with changelog checkpointing
(``--partitions`` state partitions) reads a keyed backlog ``--batch`` records a batch. It runs
``--steady`` batches on 1 executor, scales out to 2 with the actuator, runs ``--steady``
more, scales in to 1 and runs ``--steady`` more. Printed per batch: its id, duration, the
state stores loaded from the checkpoint (``rocksdbNumLoadedFromDfs``) and their load time
(``rocksdbLoadLatencyMs``) from the progress' ``stateOperators``, and which executor ran each
state partition (the status store's task placement, ``SparkStateReader``): a partition
whose executor changed was moved, a move back is a bounce.

``--process-wait`` sets ``spark.locality.wait.process`` (the wait of a task for the executor
that holds its state, or its Kafka consumer) at launch; ``--spread`` is what the actuator
does by default: it sets that wait (1 s) in the running SparkContext once the stateful query
runs, unless ``--process-wait`` is given, and spreads the state partitions over
the executors once the added one registers (the actuator's spread: :func:`streamscale.
autoscale.state_placement.spread_plan`, reported to Spark's StateStoreCoordinator), polled
after every batch as the controller polls it. ``--pipeline game-sessions`` runs the project's
game-sessions pipeline instead (session windows in the state store; ``--keys`` machines,
their frames and approvals within 14 s of event time, so every session stays open;
``--open-sessions N`` first opens N sessions, one frame each, read in large batches into the
same checkpoint). The last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from streamscale import cluster
from streamscale.kafka import broker as embedded
from streamscale.pipelines.query import stop_between_batches
from streamscale.settings import STATE_LOCALITY_WAIT, Settings
from streamscale.spark import session

TOPIC = "state-placement"
KAFKA_PARTITIONS = 4


def fill(bootstrap: str, records: int, keys: int) -> None:
    """``records`` records ``k,1`` keyed by ``k`` (``i % keys``) on the topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, KAFKA_PARTITIONS, 1)]).values():
        future.result(timeout=15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(records):
        k = str(i % keys).encode()
        while True:
            try:
                producer.produce(TOPIC, key=k, value=k + b",1")
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(30) == 0


def wait_batch(query: Any, after: int, timeout_s: float = 120) -> dict[str, Any]:
    """The progress of batch ``after + 1`` (every batch is seen: recentProgress keeps 100)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for progress in query.recentProgress:
            if progress["batchId"] == after + 1 and progress["numInputRows"]:
                return dict(progress)
        if not query.isActive:
            raise RuntimeError(f"the query stopped: {query.exception()}")
        time.sleep(0.05)
    raise TimeoutError(f"no batch after {after} in {timeout_s} s")


GAME_TOPICS_NAMES = ("rq", "rs", "sessions", "dlq")


def _game_topics() -> Any:
    from streamscale.pipelines.game_sessions import GameTopics

    return GameTopics(*GAME_TOPICS_NAMES)


def fill_open_sessions(settings: Settings, machines: int) -> None:
    """One approved frame for each of ``machines`` machines, all within the first second of
    event time: read first, they leave that many sessions open in the state store."""
    import random

    from kafka_fill import create, produce_all
    from session_state import T0, frame_records

    topics = _game_topics()
    create(settings, [topics.requests, topics.approvals, topics.output, topics.dlq])
    stamps = (T0 + i % 1000 for i in range(machines))
    produce_all(settings, frame_records(topics, iter(range(machines)), stamps, random.Random(7)))


def fill_game(settings: Settings, frames: int, machines: int, *, create: bool = True) -> None:
    """``frames`` approved frames of machines drawn among ``machines``, their event time
    moving on by 14 s over the whole run: every session stays open (the gap is longer)."""
    import random

    import kafka_fill
    from session_state import T0, frame_records

    topics = _game_topics()
    if create:
        kafka_fill.create(settings, [topics.requests, topics.approvals, topics.output, topics.dlq])
    rng = random.Random(42)
    stamps = (T0 + i * 14_000 // frames for i in range(frames))
    picks = (rng.randrange(machines) for _ in range(frames))
    kafka_fill.produce_all(settings, frame_records(topics, picks, stamps, rng))


def user_query(spark: Any, bootstrap: str, args: argparse.Namespace, base: Path) -> Any:
    """The user's ``groupBy(k).agg(sum(v), count)`` on the topic, update mode, noop sink."""
    from pyspark.sql import functions as F

    parsed = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.batch)
        .load()
        .select(F.split(F.col("value").cast("string"), ",").alias("f"))
        .select(F.col("f")[0].cast("int").alias("k"), F.col("f")[1].cast("long").alias("v"))
    )
    return (
        parsed.groupBy("k")
        .agg(F.sum("v").alias("total"), F.count("*").alias("n"))
        .writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(base / "checkpoint"))
        .trigger(processingTime=args.trigger)
        .start()
    )


def batch_row(progress: dict[str, Any], placement: dict[int, str], phase: str) -> dict[str, Any]:
    op = (progress.get("stateOperators") or [{}])[0]
    custom = op.get("customMetrics") or {}
    return {
        "batch": progress["batchId"],
        "phase": phase,
        "ms": progress["durationMs"].get("triggerExecution"),
        "loaded": custom.get("rocksdbNumLoadedFromDfs"),  # absent: not reported
        "load_ms": custom.get("rocksdbLoadLatencyMs"),
        "placement": "".join(placement.get(p, "?") for p in sorted(placement)),
    }


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    from streamscale.autoscale.actuator import SparkActuator
    from streamscale.autoscale.state_placement import SparkStateReader

    batches = 3 * args.steady + 6
    with (
        embedded.embedded_broker(base / "broker") as broker,
        cluster.local_cluster(base / "cluster", workers=1, cores=2, memory="2g") as local,
    ):
        settings = Settings(
            spark_master=local.master_url,
            bootstrap_servers=broker.bootstrap,
            executor_memory="512m",
            shuffle_partitions=args.partitions,
            max_offsets_per_trigger=args.batch,
            metrics_port=-1,
        )
        if args.pipeline == "game-sessions":
            if args.open_sessions:
                fill_open_sessions(settings, args.open_sessions)
            else:
                fill_game(settings, args.batch * (batches + 4) // 2, args.keys)
        else:
            fill(broker.bootstrap, args.batch * (batches + 4), args.keys)
        extra = {
            **local.app_conf(2, executor_memory="512m"),
            "spark.driver.extraJavaOptions": cluster.QUICK_JVM,
            "spark.executor.extraJavaOptions": cluster.QUICK_JVM,
        }
        if args.process_wait is not None:
            extra["spark.locality.wait.process"] = args.process_wait
        spark = session(settings, app_name="state-placement", extra_conf=extra)
        rows: list[dict[str, Any]] = []
        try:
            reader = SparkStateReader(spark)
            actuator = SparkActuator(
                spark,
                state_reader=reader,
                spreader=None if args.spread else (lambda hosts: {}),
                process_locality_wait=STATE_LOCALITY_WAIT if args.spread else None,
            )
            actuator.wait_for(2, 60)
            actuator.apply(1)
            actuator.wait_for(1, 30, include_removing=True)
            first_batch = 0  # the batch the measured query starts at (after a fill: later)
            if args.pipeline == "game-sessions":
                from streamscale.pipelines.game_sessions import GameSessions

                checkpoint = str(base / "checkpoint")
                if args.open_sessions:
                    # the open sessions go into the state store in large batches first,
                    # then the backlog is read from the same checkpoint in small ones
                    big = settings.model_copy(update={"max_offsets_per_trigger": 200_000})
                    began = time.perf_counter()
                    filled = GameSessions(big, checkpoint, _game_topics())
                    filling = filled.start(spark, {"availableNow": True})
                    filling.awaitTermination()
                    first_batch = filling.lastProgress["batchId"] + 1
                    print(
                        f"# {args.open_sessions:,} open sessions in the state store in "
                        f"{time.perf_counter() - began:.1f} s",
                        flush=True,
                    )
                    fill_game(settings, args.batch * (batches + 4) // 2, args.keys, create=False)
                pipeline = GameSessions(settings, checkpoint, _game_topics())
                query = pipeline.start(spark, {"processingTime": args.trigger})
            else:
                query = user_query(spark, broker.bootstrap, args, base)
            run_id = str(query.runId)
            last = first_batch - 1

            def step(phase: str) -> dict[str, Any]:
                nonlocal last
                progress = wait_batch(query, last)
                last = progress["batchId"]
                row = batch_row(progress, reader.placement(run_id), phase)
                rows.append(row)
                print(json.dumps(row), flush=True)
                actuator.running()  # as the controller polls it: a due spread runs here
                if args.verbose:
                    print("# " + json.dumps(progress.get("stateOperators")), flush=True)
                return row

            step("first")
            for _ in range(args.steady):
                step("steady-1")
            actuator.apply(2)
            added_s = actuator.wait_for(2, 60)
            print(f"# scaled out: the added executor registered after {added_s:.1f} s", flush=True)
            actuator.running()
            for _ in range(args.steady + 3):
                step("after-out")
            print(f"# spreads: {[dict(m) for m in actuator.spreads]}", flush=True)
            result = actuator.apply(1)
            print(f"# scaled in: killed {list(result.killed)}", flush=True)
            for _ in range(args.steady + 3):
                step("after-in")
            stop_between_batches(query)
        finally:
            spark.stop()
    return summary(rows)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Reloads per phase, and moves: partitions whose executor changed from one batch to the
    next, and bounces: moves back to an executor the partition had left."""
    out: dict[str, Any] = {}
    history: dict[int, list[str]] = {}
    previous = ""
    for row in rows:
        phase = out.setdefault(row["phase"], {"batches": 0, "loaded": 0, "moves": 0, "bounces": 0})
        phase["batches"] += 1
        phase["loaded"] += row["loaded"] or 0
        now = row["placement"]
        for p, executor in enumerate(now):
            seen = history.setdefault(p, [])
            if seen and seen[-1] != executor:
                phase["moves"] += 1
                if executor in seen:
                    phase["bounces"] += 1
            seen.append(executor)
        previous = now
    out["last_placement"] = previous
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", choices=("user", "game-sessions"), default="user")
    parser.add_argument("--partitions", type=int, default=8, help="state partitions")
    parser.add_argument("--batch", type=int, default=4_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument(
        "--open-sessions",
        type=int,
        default=0,
        help="game sessions: this many sessions opened in the state store before the run",
    )
    parser.add_argument("--steady", type=int, default=6, help="batches per phase")
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--process-wait", default=None, help="spark.locality.wait.process")
    parser.add_argument("--spread", action="store_true", help="spread state on scale-out")
    parser.add_argument("--verbose", action="store_true", help="print every stateOperators")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(args, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
