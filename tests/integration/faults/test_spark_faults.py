"""Spark-side faults during real enrichment runs under load (issue 13): an executor removed
by the actuator mid-batch (its JVM SIGKILLed mid-batch is the exactly-once module's), the
driver SIGKILLed at points of a batch and restarted from its checkpoint, the autoscaler's
cluster manager refusing or losing requests. Nothing is lost; duplicates come only from the
interrupted micro-batches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scenarios import FaultResult
from spark_scenarios import driver_kills, executor_faults

from streamscale import cluster as standalone
from streamscale.kafka import broker as embedded

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[standalone.Cluster]:
    """A standalone cluster with room for two executors of one core."""
    data_dir = tmp_path_factory.mktemp("spark-cluster")
    with standalone.local_cluster(data_dir, workers=1, cores=2, memory="1g") as running:
        yield running


def check(result: FaultResult) -> None:
    r = result.reconciliation
    assert r.lost == 0, f"lost {r.lost} purchases, e.g. {r.lost_keys}"
    assert result.acked_missing == 0
    assert r.unexpected == 0
    assert r.records_in == result.acked  # every record of the phase's load, once
    assert r.records_in == r.out + r.dead_lettered - r.duplicated
    assert r.dead_lettered > 0  # the spoiled purchases
    assert r.duplicated <= result.duplicate_bound
    assert "outside" not in result.errors  # every duplicate from an interrupted batch
    assert "pipeline" not in result.errors and "load" not in result.errors
    assert "lost" not in result.errors, result.errors["lost"]


def test_an_executor_removed_by_the_actuator_mid_batch(
    cluster3: embedded.Broker, spark_cluster: standalone.Cluster, tmp_path: Path
) -> None:
    # An executor's JVM SIGKILLed mid-batch is the exactly-once run's (test_exactly_once.py),
    # with the stricter check; the actuator must not report the executor it removed as lost.
    (removed,) = executor_faults(cluster3, spark_cluster, tmp_path, faults=("removal",))
    removed.report()
    check(removed)
    assert removed.duplicate_bound > 0  # the fault struck a batch in flight


def test_driver_sigkilled_at_points_of_a_batch_restarts_from_its_checkpoint(
    cluster3: embedded.Broker, tmp_path: Path
) -> None:
    run = driver_kills(cluster3, tmp_path)
    run.result.report()
    for kill in run.kills:
        print(
            f"  killed at {kill.point} in batch {kill.batch} {kill.restart_s:.0f} s after its "
            f"start, in flight {sorted(kill.in_flight)}"
        )
    check(run.result)
    assert [k.point for k in run.kills] == ["random", "state"]
    state = run.kills[1]  # killed while its state stage ran, on the replay of a batch
    assert state.batch is not None and state.batch in state.in_flight
    assert run.reference is not None and run.reference.ok, run.reference.summary()
    assert run.differing_copies == 0  # a replayed batch writes what it wrote before


def decisions(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
