"""Scale-in on a real local standalone cluster removes the executor holding the least state.

A stateful query (rate source, ``groupBy(key).count()`` on RocksDB with changelog
checkpointing, 4 state partitions) runs on 2 executors of 1 core. Its keys are skewed: every
row whose ``pmod(hash(value), 4)`` is 0 is its own key, so state partition 0 grows with every
batch while the others keep 8 keys at most. Right after a batch, the reader's view (which
executor holds which partition, and its bytes in the checkpoint) is checked against Spark's
StateStoreCoordinator (where the next batch will run each partition), then the actuator
scales in by one: the executor it removes is the one the reader says holds least.

The scenario runs in a child Python process (one SparkContext per process). Run directly, it
prints its measurements as JSON:

    PYTHONPATH=src STREAMSCALE_JARS_DIR=jvm/lib \\
        .venv/bin/python tests/integration/autoscale/test_scale_in_state.py [DATA_DIR]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from child_run import run_child

from streamscale import cluster

pytestmark = pytest.mark.integration

TIMEOUT_S = 180  # about 25 s on an idle 2-core machine
PARTITIONS = 4


def _wait_batch(query: Any, after: int, timeout_s: float = 60) -> dict[str, Any]:
    """The progress of the first batch with an id above ``after``, as soon as it is reported."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] > after:
            return dict(progress)
        time.sleep(0.05)
    raise TimeoutError(f"no batch after {after} in {timeout_s} s")


def _wait_batch_started_after(query: Any, wall_s: float, timeout_s: float = 60) -> dict[str, Any]:
    """The progress of the first batch whose trigger began after ``wall_s`` (epoch seconds):
    a batch already running then may have run tasks on an executor since removed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress is not None and _started(progress) > wall_s:
            return dict(progress)
        time.sleep(0.05)
    raise TimeoutError(f"no batch started after {wall_s} in {timeout_s} s")


def _started(progress: dict[str, Any]) -> float:
    """A progress' trigger time (``timestamp``, ISO 8601 in UTC) in epoch seconds."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def _coordinator_placement(spark: Any, query: Any, partitions: int) -> dict[int, str | None]:
    """Partition → executor id the StateStoreCoordinator has for operator 0 of ``query``:
    where the next batch prefers to run it (py4j, Spark 4.2 class names)."""
    jvm = spark.sparkContext._jvm
    pkg = jvm.org.apache.spark.sql.execution.streaming.state
    coordinator = spark._jsparkSession.streams().stateStoreCoordinator()
    root = str(query._jsq.streamingQuery().resolvedCheckpointRoot()) + "/state"
    run_id = jvm.java.util.UUID.fromString(str(query.runId))
    out: dict[int, str | None] = {}
    for p in range(partitions):
        provider = pkg.StateStoreProviderId(pkg.StateStoreId(root, 0, p, "default"), run_id)
        location = coordinator.getLocation(provider)
        # ExecutorCacheTaskLocation prints as executor_<host>_<executor id>
        out[p] = str(location.get()).rsplit("_", 1)[-1] if location.isDefined() else None
    return out


def scenario(data_dir: Path) -> dict[str, Any]:
    """Start a 1-worker, 2-core cluster, the skewed stateful query on 2 executors; after a
    few batches, read the state placement and scale in by one; stop everything by PID."""
    from pyspark.sql import functions as F

    from streamscale.autoscale.actuator import SparkActuator
    from streamscale.autoscale.state_placement import SparkStateReader, loaded_by_executor
    from streamscale.settings import Settings
    from streamscale.spark import session

    out: dict[str, Any] = {}
    with cluster.local_cluster(data_dir, workers=1, cores=2, memory="2g") as local:
        settings = Settings(
            spark_master=local.master_url, executor_memory="512m", shuffle_partitions=PARTITIONS
        )
        spark = session(
            settings,
            app_name="streamscale-scale-in-state-test",
            extra_conf={
                **local.app_conf(2, executor_memory="512m"),
                "spark.sql.warehouse.dir": str(data_dir / "warehouse"),
                "spark.driver.extraJavaOptions": cluster.QUICK_JVM,
                "spark.executor.extraJavaOptions": cluster.QUICK_JVM,
            },
        )
        try:
            reader = SparkStateReader(spark)
            actuator = SparkActuator(spark, state_reader=reader)
            actuator.wait_for(2, timeout_s=60)
            rows = spark.readStream.format("rate").option("rowsPerSecond", 500).load()
            hot = F.expr(f"pmod(hash(value), {PARTITIONS}) = 0")
            key = F.when(hot, F.col("value")).otherwise(F.col("value") % 8)
            counts = rows.groupBy(key.alias("k")).agg(F.count("*").alias("n"))
            query = (
                counts.writeStream.outputMode("update")
                .format("noop")
                .option("checkpointLocation", str(data_dir / "checkpoint"))
                .trigger(processingTime="4 seconds")  # a gap between batches, also when busy
                .start()
            )
            try:
                progress = _wait_batch(query, 3)
                progress = _wait_batch(query, progress["batchId"])  # apply right after a batch
                t0 = time.monotonic()
                view = reader.partitions()
                out["read_s"] = time.monotonic() - t0
                out["view"] = [[p.partition, p.executor, p.bytes] for p in view]
                out["loaded"] = {
                    e: [s.partitions, s.bytes] for e, s in loaded_by_executor(view).items()
                }
                out["coordinator"] = _coordinator_placement(spark, query, PARTITIONS)
                executors = actuator.executors()
                out["executors"] = {e.id: e.active_tasks for e in executors}
                result = actuator.apply(1)
                out["down"] = {
                    "ok": result.ok,
                    "killed": list(result.killed),
                    "removed": [list(r.as_tuple()) for r in result.removed],
                }
                out["newest_first"] = max(e.id for e in executors if e.id.isdigit())
                out["batches_before_apply"] = [progress["batchId"], query.lastProgress["batchId"]]
                actuator.wait_for(1, 30, include_removing=True)
                after = _wait_batch_started_after(query, time.time())  # reloads what was removed
                state_op = after["stateOperators"][0]
                out["after_batch"] = {
                    "batch": after["batchId"],
                    "ms": after["durationMs"].get("triggerExecution"),
                    "load_ms": state_op["customMetrics"].get("rocksdbLoadLatencyMs"),
                }
                later = reader.partitions()
                out["after_view"] = [[p.partition, p.executor, p.bytes] for p in later]
            finally:
                query.stop()
        finally:
            spark.stop()
    return out


def test_scale_in_removes_the_executor_holding_least_state(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    result = run_child(__file__, [str(data_dir)], data_dir, TIMEOUT_S)

    view = {p: (executor, size) for p, executor, size in result["view"]}
    assert sorted(view) == list(range(PARTITIONS)), "every state partition is placed"
    assert all(size is not None and size > 0 for _, size in view.values())
    hot_size = view[0][1]
    assert all(hot_size > 2 * size for p, (_, size) in view.items() if p != 0), "skew"
    coordinator = {int(p): e for p, e in result["coordinator"].items()}
    assert coordinator == {p: executor for p, (executor, _) in view.items()}, (
        "the reader's placement is where Spark's coordinator has the partitions loaded"
    )

    loaded = result["loaded"]
    executors = result["executors"]
    assert all(active == 0 for active in executors.values()), "applied between batches"

    def cost(executor: str) -> tuple[int, int, int]:
        partitions, size = loaded.get(executor, [0, 0])
        return (size, partitions, -int(executor))

    cheapest = min(executors, key=cost)
    assert cheapest != view[0][0], "the executor holding the hot partition is kept"
    assert result["down"]["ok"]
    assert result["down"]["killed"] == [cheapest]
    partitions, size = loaded.get(cheapest, [0, 0])
    [(victim, running, removed_partitions, removed_size)] = result["down"]["removed"]
    assert (victim, running, removed_partitions) == (cheapest, 0, partitions)
    # the apply reads the sizes again: the same unless a batch committed since the view
    assert removed_size > 0
    if len(set(result["batches_before_apply"])) == 1:
        assert removed_size == size, result

    kept = next(e for e in executors if e != cheapest)
    assert {executor for _, executor, _ in result["after_view"]} == {kept}, (
        "the next batch runs every state partition on the executor kept"
    )


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "cluster"
    print(json.dumps(scenario(target)))
