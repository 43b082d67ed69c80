"""A foreachBatch query stopped in the middle of a batch stops cleanly: Spark recognizes the
interruption (status "Stopped", no exception) instead of overflowing its stream thread's stack
on the Py4J error's stack trace."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from streamscale.spark import stops_cleanly

BATCH_S = 2.0  # each batch runs a job this long: the stop lands inside one


def _slow_batch(batch: Any, batch_id: int) -> None:
    batch.rdd.map(lambda row: (time.sleep(BATCH_S / 50), row)[1]).count()


def _stop_inside_a_batch(spark: Any, func: Any, checkpoint: Path) -> Any:
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .coalesce(1)
        .writeStream.foreachBatch(func)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    deadline = time.monotonic() + 60
    while query.lastProgress is None and time.monotonic() < deadline:  # one batch done
        time.sleep(0.1)
    while not query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert query.lastProgress is not None and query.status["isTriggerActive"]
    time.sleep(BATCH_S / 4)  # well inside the batch's job
    query.stop()
    return query


def test_a_stop_inside_a_batch_is_a_clean_stop(spark: Any, checkpoint: Path) -> None:
    # Without stops_cleanly (Spark 4.2): the console shows the StackOverflowError, and the
    # status stays at "Processing new data", the stream thread dead before it could change it.
    query = _stop_inside_a_batch(spark, stops_cleanly(_slow_batch), checkpoint)
    assert query.exception() is None
    assert query.status["message"] == "Stopped"
