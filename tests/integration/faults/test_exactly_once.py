"""Exactly-once output (issue 25) under faults: a zombie task still writing when its retry
starts, a micro-batch replayed after its transactions committed but before Spark committed
it (users' foreachBatch writer), the driver SIGKILLed at points of a batch, an executor
SIGKILLed mid-task, the partitions' leader SIGKILLed. Read with read_committed: 0
duplicates and 0 lost; records of aborted transactions (read_uncommitted) are counted."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scenarios import FaultResult, leader_killed
from spark_scenarios import driver_kills, executor_faults

from streamscale import cluster as standalone
from streamscale.kafka import broker as embedded
from streamscale.kafka import transactions as tx
from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.exactly_once import ExactlyOnceWriter, check_deterministic
from streamscale.kafka.sink import produce_rows
from streamscale.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def rows(topic: str, keys: range) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(
        {
            "key": [str(k).encode() for k in keys],
            "value": [b"v" for _ in keys],
            "topic": [topic] * len(keys),
        }
    )


def read(bootstrap: str, topic: str, isolation: str) -> list[Any]:
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=30)
    try:
        return admin.read_all(topic, isolation=isolation)
    finally:
        admin.close()


ZOMBIE = """
import sys
import pyarrow as pa
from streamscale.kafka import transactions as tx
from streamscale.kafka.sink import produce_rows

bootstrap, topic, query = sys.argv[1:4]

def rows(keys):
    return pa.RecordBatch.from_pydict(
        {"key": [str(k).encode() for k in keys], "value": [b"v" for _ in keys],
         "topic": [topic] * len(keys)})

def slow():
    yield rows(range(0, 500))
    print("open", flush=True)
    sys.stdin.readline()  # stalls mid-task, its transaction open, until told
    yield rows(range(500, 1000))

try:
    n = tx.write_transactional(
        {"bootstrap.servers": bootstrap}, slow(), None, tx.Unit(query, "out", 0), 0,
        produce_rows)
    print(f"committed {n}", flush=True)
except Exception as exc:
    print(f"failed {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
"""


def test_a_zombie_task_is_fenced_by_its_retry_and_its_records_aborted(
    broker: embedded.Broker, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    kafka = {"bootstrap.servers": broker.bootstrap}
    query = f"q{uuid.uuid4().hex[:8]}"
    unit = tx.Unit(query, "out", 0)
    # The zombie: another process, same transactional id, stalled with an open transaction.
    zombie = subprocess.Popen(
        [sys.executable, "-c", ZOMBIE, broker.bootstrap, topic, query],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert zombie.stdout is not None and zombie.stdin is not None
        assert zombie.stdout.readline().strip() == "open"
        time.sleep(1)  # its first 500 records are sent within its open transaction
        # The retry fences it (init_transactions) and writes the whole batch.
        retried = tx.write_transactional(
            kafka, iter([rows(topic, range(0, 1000))]), None, unit, 0, produce_rows
        )
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        said = zombie.stdout.readline().strip()
        zombie.wait(60)
    finally:
        if zombie.poll() is None:
            zombie.kill()
            zombie.wait(10)
    assert retried == 1000
    # The zombie learns it is fenced; or, its first producer fenced, it opens a new one,
    # finds batch 0 committed by the marker and writes nothing.
    assert said.startswith("failed DeliveryError") or said == "committed 0", said
    # The same batch again (a replay): skipped by the marker.
    again = tx.write_transactional(
        kafka, iter([rows(topic, range(0, 1000))]), None, unit, 0, produce_rows
    )
    assert again == 0
    committed = Counter(m.key() for m in read(broker.bootstrap, topic, "read_committed"))
    uncommitted = read(broker.bootstrap, topic, "read_uncommitted")
    print(
        f"\nzombie: {said}; committed {sum(committed.values())} distinct {len(committed)}; "
        f"read_uncommitted {len(uncommitted)} (aborted {len(uncommitted) - 1000})"
    )
    assert len(committed) == 1000 and set(committed.values()) == {1}
    assert len(uncommitted) - 1000 >= 500  # the zombie's records, aborted
    tx.close_kept()


def test_foreach_batch_writer_skips_a_batch_replayed_after_its_commit(
    spark: Any, settings: Settings, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    from streamscale.generate.producer import produce
    from streamscale.generate.profiles import make_schedule

    source = topic_factory(partitions=3)
    out = topic_factory(partitions=2)
    n = 3000
    records = ((source, str(i), f'{{"i":{i}}}', 0, True) for i in range(n))
    produce(settings, records, make_schedule("steady", rate=1e9, count=n), [source], progress=False)
    writer_options = {"kafka.bootstrap.servers": settings.bootstrap_servers, "topic": out}
    checkpoint = tmp_path / "cp"

    def run(max_offsets: int) -> None:
        df = (
            spark.readStream.format("kafka")
            .options(**settings.kafka_options())
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .load()
            .select("key", F.upper(F.col("value").cast("string")).alias("value"))
        )
        query = (
            df.writeStream.foreachBatch(ExactlyOnceWriter(writer_options))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()

    run(1000)
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert len(commits) >= 2
    # The driver died after the last batch's transactions committed, before Spark's commit:
    # the batch is replayed on restart.
    for name in (str(commits[-1]), f".{commits[-1]}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    shutil.rmtree(checkpoint / "state", ignore_errors=True)
    run(1000)
    committed = Counter(m.key() for m in read(settings.bootstrap_servers, out, "read_committed"))
    print(f"\nforeachBatch writer, batch {commits[-1]} replayed: {sum(committed.values())} out")
    assert len(committed) == n and set(committed.values()) == {1}

    # What cannot be exact is refused in one line.
    with pytest.raises(tx.NotExactError, match="minPartitions"):
        ExactlyOnceWriter(writer_options, source_options={"minPartitions": "8"})
    with pytest.raises(tx.NotExactError, match="non-deterministic"):
        check_deterministic(spark.range(3).withColumn("r", F.rand()))
    check_deterministic(spark.range(3).repartition(2, "id"))


def check_exact(result: FaultResult) -> None:
    r = result.reconciliation
    assert r.lost == 0 and result.acked_missing == 0, f"lost {r.lost}, e.g. {r.lost_keys}"
    assert r.duplicated == 0, f"{r.duplicated} duplicated with exactly-once"
    assert r.unexpected == 0
    assert r.records_in == r.out + r.dead_lettered
    assert r.dead_lettered > 0  # the spoiled purchases
    assert "pipeline" not in result.errors and "load" not in result.errors


def test_exactly_once_driver_sigkilled_at_points_of_a_batch(
    cluster3: embedded.Broker, tmp_path: Path
) -> None:
    run = driver_kills(cluster3, tmp_path, plan=("before-commit", "tasks"), delivery="exactly-once")
    run.result.report()
    for kill in run.kills:
        print(f"  killed at {kill.point} in batch {kill.batch}, in flight {sorted(kill.in_flight)}")
    check_exact(run.result)
    assert run.result.duplicate_bound > 0  # batches were in flight at the kills
    assert run.reference is not None and run.reference.ok, run.reference.summary()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[standalone.Cluster]:
    data_dir = tmp_path_factory.mktemp("spark-cluster-eos")
    with standalone.local_cluster(data_dir, workers=1, cores=2, memory="1g") as running:
        yield running


def test_exactly_once_executor_sigkilled_mid_task(
    cluster3: embedded.Broker, spark_cluster: standalone.Cluster, tmp_path: Path
) -> None:
    # The actuator's removal is the same event to the writer: at-least-once runs it.
    results = executor_faults(
        cluster3, spark_cluster, tmp_path, delivery="exactly-once", faults=("sigkill",)
    )
    for result in results:
        result.report()
        check_exact(result)
        assert result.duplicate_bound > 0  # the fault struck a batch in flight
        assert "lost" not in result.errors, result.errors["lost"]  # named lost, Spark's reason


def test_exactly_once_partition_leader_sigkilled(cluster3: embedded.Broker, tmp_path: Path) -> None:
    result = leader_killed(cluster3, tmp_path, delivery="exactly-once")
    result.report()
    r = result.reconciliation
    assert r.lost == 0 and result.acked_missing == 0
    assert result.input_duplicated_acked == 0
    assert r.unexpected == 0
    # Duplicates in the OUTPUT are the pipeline's; a generator's own retried input record
    # (a key twice in the input, not acknowledged twice) is counted apart.
    assert r.duplicated == result.input_duplicated, (r.duplicated, result.input_duplicated)
    assert r.records_in == r.out + r.dead_lettered - r.duplicated
