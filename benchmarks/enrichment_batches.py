"""Where an enrichment micro-batch's wall time goes, batch by batch.

    .venv/bin/python benchmarks/enrichment_batches.py [--purchases 300000] [--products 10000]
        [--batch 20000 --batch 100000] [--runs 1] [--conf KEY=VALUE]

On the embedded broker, fills the referential and the purchases once (seeded, as
``benchmarks/pipelines.py``), then runs the production enrichment query (``availableNow``)
once per ``--batch`` value, alternating, in one warm Spark session, and prints for every
batch after the first:

- Spark's progress ``durationMs`` (latestOffset, queryPlanning, walCommit, addBatch,
  commitOffsets, triggerExecution; "other" is the rest of triggerExecution);
- inside ``addBatch`` (the ``foreachBatch`` call), the driver's own code: reading the offset
  log, the referential read and check, the table broadcast, and the purchases job (the
  ``collect`` of the tasks' counts); what is left is PySpark's ``foreachBatch`` round trip;
- the Spark jobs of the batch from Spark's status store: their stages' task run time
  summed over tasks, executor CPU, deserialisation, and the job's wall time from
  submission to completion;

then the median of each column over the steady batches, per batch size.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines import PARTITIONS, create, produce_all
from streamscale.generate import referential
from streamscale.generate.purchases import purchase_records
from streamscale.kafka import broker as embedded
from streamscale.pipelines import enrichment as en
from streamscale.settings import Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

SEED = 42
PROGRESS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
DRIVER = ("offset log", "referential", "broadcast", "purchases job")


class Timer:
    """Seconds spent in wrapped driver functions, per batch."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - began

        return timed

    def take(self) -> dict[str, float]:
        out, self.spent = self.spent, {}
        return out


def instrument(timer: Timer) -> None:
    """Time the driver's parts of :meth:`Enrichment.process_batch` (class and module
    attributes: every pipeline built afterwards is timed)."""
    en.read_referential = timer.wrap("referential", en.read_referential)  # type: ignore[assignment]
    # (_ref_offsets: the offset-log reader's name before 2026-11-24, to profile older code)
    for attr, name in (
        ("_topic_offsets", "offset log"),
        ("_ref_offsets", "offset log"),
        ("_names", "broadcast"),
    ):
        if hasattr(en.Enrichment, attr):
            setattr(en.Enrichment, attr, timer.wrap(name, getattr(en.Enrichment, attr)))
    process = en.Enrichment.process_batch

    def process_batch(self: Any, batch: Any, batch_id: int) -> None:
        began = time.perf_counter()
        process(self, batch, batch_id)
        timer.spent["process_batch"] = time.perf_counter() - began

    en.Enrichment.process_batch = process_batch  # type: ignore[method-assign]
    en.EnrichTask = TimedTask  # type: ignore[misc]


TASK_LOG = Path(tempfile.gettempdir()) / "enrichment-batches-tasks.jsonl"


class TimedTask(en.EnrichTask):
    """The production task, timed from inside the Python worker (pickled by value from this
    script): call → first Arrow batch (the JVM's Kafka read and Arrow hand-over), → done
    (enrich, produce, flush), whether the worker was new, appended to :data:`TASK_LOG`."""

    fresh_producer = False  # True: drop the worker's kept producer first (the old behaviour)

    def __call__(self, batches: Any) -> Any:
        import json as js
        import os
        import sys
        import time as clock

        began = clock.time()
        warm = "streamscale.kafka.sink" in sys.modules
        if self.fresh_producer:
            from streamscale.kafka import sink

            getattr(sink, "_kept", {}).clear()
        first: list[float] = []

        def timed() -> Any:
            for b in batches:
                if not first:
                    first.append(clock.time())
                yield b

        yield from super().__call__(timed())
        done = clock.time()
        with open(TASK_LOG, "a") as f:
            f.write(
                js.dumps(
                    {
                        "pid": os.getpid(),
                        "warm": warm,
                        "began": began,
                        "first_batch_s": (first[0] if first else done) - began,
                        "after_s": done - (first[0] if first else done),
                        "total_s": done - began,
                    }
                )
                + "\n"
            )


def task_figures() -> dict[str, float]:
    """The tasks logged since the last call: medians and counts."""
    if not TASK_LOG.exists():
        return {}
    rows = [json.loads(line) for line in TASK_LOG.read_text().splitlines() if line]
    TASK_LOG.unlink()
    if not rows:
        return {}
    return {
        "task to 1st batch": statistics.median(r["first_batch_s"] for r in rows),
        "task after 1st": statistics.median(r["after_s"] for r in rows),
        "task total": statistics.median(r["total_s"] for r in rows),
        "new workers": float(sum(not r["warm"] for r in rows)),
        "task start spread": max(r["began"] for r in rows) - min(r["began"] for r in rows),
    }


def stage_figures(spark: Any, after_stage: int) -> tuple[int, dict[str, float]]:
    """Task time of the stages completed since ``after_stage`` (Spark's status store)."""
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    jvm, gateway = sc._jvm, sc._gateway
    empty = jvm.java.util.ArrayList()
    stages = store.stageList(empty, False, False, gateway.new_array(jvm.double, 0), empty)
    out = {"jobs": 0.0, "tasks": 0.0, "task run s": 0.0, "task cpu s": 0.0, "deser s": 0.0}
    top = after_stage
    for i in range(stages.size()):
        s = stages.apply(i)
        sid = int(s.stageId())
        if sid <= after_stage or str(s.status()) != "COMPLETE":
            continue
        top = max(top, sid)
        out["jobs"] += 1
        out["tasks"] += int(s.numTasks())
        out["task run s"] += int(s.executorRunTime()) / 1000
        out["task cpu s"] += int(s.executorCpuTime()) / 1e9
        out["deser s"] += int(s.executorDeserializeTime()) / 1000
    return top, out


def run_one(
    spark: Any, settings: Settings, ckpt: str, timer: Timer, fresh: bool
) -> list[dict[str, float]]:
    """One availableNow run; per batch figures (seconds)."""
    TimedTask.fresh_producer = fresh
    pipeline = en.Enrichment(settings, ckpt)
    rows: list[dict[str, float]] = []
    last_stage, _ = stage_figures(spark, -1)
    seen = -1
    query = pipeline.start(spark, {"availableNow": True})
    while query.isActive or seen < (query.lastProgress or {}).get("batchId", -1):
        for p in query.recentProgress:
            if p.batchId <= seen:
                continue
            seen = p.batchId
            if not p.numInputRows:
                continue
            d = dict(p.durationMs)
            row = {k: d.get(k, 0) / 1000 for k in (*PROGRESS, "triggerExecution")}
            row["rows"] = p.numInputRows
            row["other"] = row["triggerExecution"] - sum(row[k] for k in PROGRESS)
            driver = timer.take()
            for k in DRIVER:
                row[k] = driver.get(k, 0.0)
            row["process_batch"] = driver.get("process_batch", 0.0)
            row["purchases job"] = row["process_batch"] - sum(
                row[k] for k in ("offset log", "referential", "broadcast")
            )
            row["foreachBatch round trip"] = row["addBatch"] - row["process_batch"]
            last_stage, stages = stage_figures(spark, last_stage)
            row.update(stages)
            row.update(task_figures())
            rows.append(row)
        if not query.isActive:
            break
        time.sleep(0.05)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return rows


COLUMNS = (
    "rows",
    "triggerExecution",
    *PROGRESS,
    "other",
    "foreachBatch round trip",
    *DRIVER,
    "jobs",
    "tasks",
    "task run s",
    "task cpu s",
    "deser s",
    "task to 1st batch",
    "task after 1st",
    "task total",
    "task start spread",
    "new workers",
)


def show(title: str, rows: list[dict[str, float]]) -> None:
    print(f"\n{title}: {len(rows)} batches (first excluded below)")
    head = "".join(f"{c[:12]:>13}" for c in COLUMNS)
    print(f"{'batch':>5}{head}")
    for i, r in enumerate(rows):
        print(f"{i:>5}" + "".join(f"{r.get(c, 0):>13.3f}" for c in COLUMNS))
    steady = rows[1:] or rows
    med = {c: statistics.median(r.get(c, 0) for r in steady) for c in COLUMNS}
    print(f"{'med':>5}" + "".join(f"{med[c]:>13.3f}" for c in COLUMNS))
    rate = sum(r["rows"] for r in steady) / sum(r["triggerExecution"] for r in steady)
    print(f"steady: {rate:,.0f} records/s over {len(steady)} batches")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--purchases", type=int, default=300_000)
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--master", default=None)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--compare-producer",
        action="store_true",
        help="each batch size twice: a new producer per task (as before 2026-11-24) and the "
        "worker's kept one",
    )
    args = parser.parse_args()
    batches = args.batch or [20_000, 100_000]
    timer = Timer()
    instrument(timer)
    with tempfile.TemporaryDirectory() as tmp, embedded.embedded_broker(Path(tmp) / "b") as b:
        base = Settings(bootstrap_servers=b.bootstrap, driver_memory="2g")
        if args.master:
            base = base.model_copy(update={"spark_master": args.master})
        topics = en.EnrichmentTopics()
        create(base, [topics.purchases, topics.referential], compact=[topics.referential])
        create(base, [topics.output, topics.dlq])
        rng = random.Random(SEED)
        plan = referential.plan_for_products(args.products, 0.05, 0.01)
        n_ref, _ = produce_all(base, referential.referential_records(rng, plan, topics.referential))
        n_pur, _ = produce_all(
            base, purchase_records(rng, args.purchases, topics.purchases, products=args.products)
        )
        print(f"filled: {n_ref:,} referential, {n_pur:,} purchases, {PARTITIONS} partitions")
        extra = dict(item.split("=", 1) for item in args.conf)
        spark = session(base, app_name="bench-enrichment-batches", extra_conf=extra)
        try:
            for run in range(args.runs):
                for size in batches:
                    for fresh in (True, False) if args.compare_producer else (False,):
                        settings = base.model_copy(update={"max_offsets_per_trigger": size})
                        ckpt = str(Path(tmp) / f"ckpt-{run}-{size}-{fresh}")
                        rows = run_one(spark, settings, ckpt, timer, fresh)
                        producer = "new producer per task" if fresh else "kept producer"
                        show(f"run {run + 1}, batch {size:,}, {producer}", rows)
        finally:
            stop_session(spark)


if __name__ == "__main__":
    main()
