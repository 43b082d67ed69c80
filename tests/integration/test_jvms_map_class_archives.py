"""The class archives `make setup` records are mapped by the JVMs the project starts: a Kafka
node and a Spark driver (the Master and Workers: tests/integration/test_local_cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamscale import class_archives
from streamscale.kafka import broker as embedded

pytestmark = pytest.mark.integration


def mapped_archives(pid: int) -> set[str]:
    """The class-data archives process ``pid`` has mapped (the JDK's own and any other)."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")}


def test_setup_recorded_both_archives_and_a_second_run_keeps_them() -> None:
    version = class_archives.java_version()
    for name in class_archives.NAMES:
        assert class_archives.is_current(name, version), f"{name}: run `make setup`"
    before = {n: class_archives.archive_path(n).stat().st_mtime_ns for n in class_archives.NAMES}
    assert class_archives.main([]) == 0
    after = {n: class_archives.archive_path(n).stat().st_mtime_ns for n in class_archives.NAMES}
    assert after == before


def test_a_kafka_node_maps_the_kafka_archive(broker: embedded.Broker) -> None:
    archive = class_archives.archive_path(class_archives.KAFKA)
    assert str(archive) in mapped_archives(broker.pid)


def test_the_spark_driver_maps_the_spark_archive(spark: Any) -> None:
    driver = spark.sparkContext._gateway.proc.pid
    archive = class_archives.archive_path(class_archives.SPARK)
    assert str(archive) in mapped_archives(driver)


def test_a_stale_archive_is_ignored_without_a_word(tmp_path: Path) -> None:
    """Another class path than the archive's: the JVM runs without it, and says nothing."""
    import subprocess

    from streamscale import jars

    argv = [jars.java(), *class_archives.use_options(class_archives.KAFKA)]
    argv += ["-cp", str(tmp_path), "-version"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout == ""
    assert "cds" not in done.stderr and "archive" not in done.stderr, done.stderr
