"""Checkpoints written through the operators' LocalFiles (streamscale.spark.use_local_files):
Hadoop's local file system with modes set through java.nio, not a forked ``chmod``. The
checkpoint must be what Hadoop's own would write: the same files, their checksums, the same
modes (files 0666 and directories 0777 under the 022 umask)."""

from __future__ import annotations

import stat
import time
from pathlib import Path
from typing import Any

from streamscale.spark import LOCAL_FILES


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_stateful_query_checkpoints_through_local_files(spark: Any, checkpoint: Path) -> None:
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    assert hadoop.get("fs.AbstractFileSystem.file.impl") == f"{LOCAL_FILES}$Context"
    counts = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 500)
        .load()
        .selectExpr("value % 10 AS k")
        .groupBy("k")
        .count()
    )
    query = (
        counts.writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while not any(
            p["batchId"] >= 3 and p["stateOperators"][0]["numRowsUpdated"] == 10
            for p in query.recentProgress
        ):
            assert time.monotonic() < deadline, "no batch past the third updating 10 keys in 120 s"
            assert query.isActive, query.exception()
            time.sleep(0.2)
    finally:
        query.stop()
    offsets = checkpoint / "offsets"
    for log in (offsets, checkpoint / "commits"):
        assert (log / "0").is_file() and (log / ".0.crc").is_file()
        assert mode(log / "0") == 0o644 and mode(log) == 0o755
    changelogs = list((checkpoint / "state").rglob("*.changelog"))
    assert changelogs and all(mode(p) == 0o644 for p in changelogs)
