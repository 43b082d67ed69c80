"""Where the JVM jars that ``make setup`` resolves with Maven live.

``jvm/broker/pom.xml`` gives the Apache Kafka broker (``jvm/lib/broker``) and
``jvm/connector/pom.xml`` Spark's Kafka connector with what Spark does not ship
(``jvm/lib/connector``); the project's own JVM operators (``jvm/operators/src``, Spark state
functions and the exactly-once writer the pipelines call through py4j) are compiled against
pyspark's and the connector's jars into
``jvm/lib/operators``. ``STREAMSCALE_JARS_DIR`` points elsewhere (an image that copies them).
"""

from __future__ import annotations

import os
from pathlib import Path

from streamscale.errors import LaunchError

BROKER = "broker"
CONNECTOR = "connector"
OPERATORS = "operators"


class JarsMissingError(LaunchError):
    """The jars have not been resolved: ``make setup`` has not run."""


def lib_dir() -> Path:
    """``STREAMSCALE_JARS_DIR``, else ``jvm/lib`` of the source tree this package runs from."""
    given = os.environ.get("STREAMSCALE_JARS_DIR")
    if given:
        return Path(given)
    return Path(__file__).resolve().parents[2] / "jvm" / "lib"


def jars(kind: str) -> list[Path]:
    """The jars of ``kind`` (:data:`BROKER`, :data:`CONNECTOR` or :data:`OPERATORS`), sorted;
    a clear error if none."""
    folder = lib_dir() / kind
    found = sorted(folder.glob("*.jar"))
    if not found:
        raise JarsMissingError(
            f"no {kind} jars in {folder}: run `make setup` (it resolves them with Maven and "
            "compiles the operators), or set STREAMSCALE_JARS_DIR to a folder holding broker/, "
            "connector/ and operators/"
        )
    return found


def classpath(kind: str) -> str:
    """A Java class path of the jars of ``kind``."""
    return os.pathsep.join(str(p) for p in jars(kind))


def java() -> str:
    """The ``java`` launcher: ``$JAVA_HOME/bin/java`` when set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return "java"


def spark_home() -> Path:
    """SPARK_HOME of the pip-installed pyspark (the package directory): the jars and the
    launcher every Spark JVM here runs with."""
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise JarsMissingError("pyspark is not installed: run `make setup`") from exc
    return Path(_find_spark_home())
