"""Class-data sharing archives (AppCDS) of the project's JVMs.

A Kafka node or a Spark JVM spends most of its start loading, parsing and verifying the same
few thousand classes. ``make setup`` records them once per class path into an archive (a Kafka
node's into ``kafka.jsa``; a Spark driver's into ``spark.jsa``, which its executors, Master
and Workers share: they run with the same class path). A JVM started with the archive maps
those classes instead, on about a third less CPU (docs/benchmarks.md). The archive is an
optimisation only: a JVM whose archive is missing or stale (other jars, another JDK) starts as
it would without one, silently; ``make setup`` records it again when its stamp changes.

    python -m streamscale.class_archives        # what `make setup` runs
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from streamscale import jars
from streamscale.errors import LaunchError

KAFKA = "kafka"
SPARK = "spark"
NAMES = (KAFKA, SPARK)

QUIET = "-Xlog:cds*=off"
"""A stale archive is not worth a warning on every JVM's console: it is only slower."""


class ArchiveError(LaunchError):
    """An archive could not be recorded; one line saying why."""


def archive_dir() -> Path:
    return jars.lib_dir() / "cds"


def archive_path(name: str) -> Path:
    return archive_dir() / f"{name}.jsa"


def use_options(name: str) -> list[str]:
    """JVM options that map the archive ``name``; none if it was never recorded (the option
    on a missing file would turn off the JDK's own archive too)."""
    path = archive_path(name)
    return [f"-XX:SharedArchiveFile={path}", QUIET] if path.is_file() else []


def spark_jars() -> list[Path]:
    """The jars of the class path every Spark JVM here runs with (its SPARK_HOME's)."""
    return sorted((jars.spark_home() / "jars").glob("*.jar"))


def class_path_jars(name: str) -> list[Path]:
    return jars.jars(jars.BROKER) if name == KAFKA else spark_jars()


def stamp(name: str, java_version: str) -> str:
    """What the archive depends on: the JDK and every jar of the class path (the JVM checks
    each jar's size and time when it maps the archive)."""
    digest = hashlib.sha256(java_version.encode())
    for jar in class_path_jars(name):
        info = jar.stat()
        digest.update(f"{jar}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def java_version() -> str:
    done = subprocess.run([jars.java(), "-version"], capture_output=True, text=True, check=True)
    return done.stderr.strip()


def _stamp_path(name: str) -> Path:
    return archive_dir() / f"{name}.stamp"


def is_current(name: str, version: str) -> bool:
    path, stamp_path = archive_path(name), _stamp_path(name)
    return (
        path.is_file() and stamp_path.is_file() and stamp_path.read_text() == stamp(name, version)
    )


def record(
    name: str, workload: Callable[[str], None] | None = None, version: str | None = None
) -> Path:
    """Record the archive ``name``: run its workload with ``-XX:ArchiveClassesAtExit`` (the
    JVM writes the archive as it exits), then put it in place with its stamp (``version``:
    the JDK's, asked of it when not given)."""
    version = version if version is not None else java_version()
    archive_dir().mkdir(parents=True, exist_ok=True)
    final = archive_path(name)
    partial = final.with_suffix(".partial.jsa")
    partial.unlink(missing_ok=True)
    final.unlink(missing_ok=True)  # the workload's JVM must not map the old one
    _stamp_path(name).unlink(missing_ok=True)
    (workload or WORKLOADS[name])(f"-XX:ArchiveClassesAtExit={partial}")
    if not partial.is_file():
        raise ArchiveError(f"the {name} JVM wrote no class archive to {partial}")
    partial.rename(final)
    _stamp_path(name).write_text(stamp(name, version))
    return final


KAFKA_WORKLOAD = """
import sys
from pathlib import Path
from streamscale.kafka import broker
broker.start(None, Path(sys.argv[2]), java_options=[sys.argv[1]])
broker.stop(Path(sys.argv[2]))
"""


SPARK_WORKLOAD = """
import sys, time
from streamscale.settings import Settings
from streamscale.spark import session, stop
spark = session(Settings(spark_master="local[2]", shuffle_partitions=2),
                app_name="streamscale-class-archive",
                extra_conf={"spark.driver.extraJavaOptions": sys.argv[1],
                            "spark.ui.enabled": "false",
                            "spark.sql.warehouse.dir": sys.argv[2]},
                log_file=__import__("pathlib").Path(sys.argv[2]) / "driver.log")
spark.range(10_000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
query = spark.readStream.format("rate").load().writeStream.format("noop").start()
time.sleep(3)
query.stop()
stop(spark)
"""


def _child_workload(name: str, code: str, option: str) -> None:
    """Run a workload in a child Python process (so that this module, which the launchers of
    those JVMs import, imports none of them back); its JVM exits, writing the archive, when
    the workload ends."""
    with tempfile.TemporaryDirectory(prefix="streamscale-cds-") as tmp:
        done = subprocess.run(
            [sys.executable, "-c", code, option, tmp],
            capture_output=True,
            text=True,
            timeout=300,
        )
    if done.returncode != 0:
        raise ArchiveError(f"the {name} workload failed: {done.stderr.strip()[-500:]}")


def _kafka_workload(option: str) -> None:
    """One Kafka node started, answering, then stopped (a controlled shutdown: the JVM exits
    normally, which is when it writes the archive)."""
    _child_workload("Kafka", KAFKA_WORKLOAD, option)


def _spark_workload(option: str) -> None:
    """A local Spark driver that runs a batch job and a short streaming query."""
    _child_workload("Spark", SPARK_WORKLOAD, option)


WORKLOADS: dict[str, Callable[[str], None]] = {KAFKA: _kafka_workload, SPARK: _spark_workload}


def main(argv: Sequence[str] = ()) -> int:
    """Record each archive whose stamp changed (``--force``: all); a second run is instant."""
    force = "--force" in argv
    version = java_version()
    for name in NAMES:
        if not force and is_current(name, version):
            continue
        began = time.monotonic()
        print(f"setup: recording the {name} class archive (once per set of jars)", flush=True)
        try:
            path = record(name, version=version)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # a broker error too
            # Only slower without it: the set-up goes on.
            print(f"setup: no {name} class archive ({exc}); its JVMs start without", flush=True)
            continue
        size = path.stat().st_size / 2**20
        print(f"setup: {path} ({size:.0f} MB) in {time.monotonic() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
