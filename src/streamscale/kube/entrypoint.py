"""The project image's entrypoint, as the node agent runs it for a container without a
``command``: the equivalent of Spark's ``entrypoint.sh`` (resource-managers/kubernetes/docker,
the entrypoint of the ``spark`` images deploy/docker/Dockerfile builds on), run on this
checkout's install (pyspark's jars, this Python) instead of an image's.

- ``executor``: the JVM of Spark's Kubernetes executor (``KubernetesExecutorBackend``) with
  the options and identity Spark's executor pod gives in its environment (``SPARK_JAVA_OPT_n``
  in order, ``SPARK_EXECUTOR_MEMORY`` as heap, ``SPARK_DRIVER_URL``, ``SPARK_EXECUTOR_ID``,
  ``SPARK_EXECUTOR_CORES``, ``SPARK_APPLICATION_ID``, ``SPARK_EXECUTOR_POD_IP``,
  ``SPARK_RESOURCE_PROFILE_ID``, ``SPARK_EXECUTOR_POD_NAME``), the class path
  ``SPARK_CONF_DIR`` (or ``HADOOP_CONF_DIR``) then ``SPARK_CLASSPATH``, the jars and
  ``SPARK_EXTRA_CLASSPATH``;
- ``driver``: ``spark-submit --deploy-mode client`` with the driver's bind address;
- anything else: run as given (pass-through).

Not done: the passwd entry for an anonymous UID, tini, ``K8S_SPARK_LOG_PATH``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence

from streamscale.errors import ConfigError

EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
_REQUIRED = (
    "SPARK_DRIVER_URL",
    "SPARK_EXECUTOR_ID",
    "SPARK_EXECUTOR_CORES",
    "SPARK_APPLICATION_ID",
    "SPARK_EXECUTOR_POD_IP",
    "SPARK_RESOURCE_PROFILE_ID",
    "SPARK_EXECUTOR_POD_NAME",
    "SPARK_EXECUTOR_MEMORY",
)


def java_options(env: Mapping[str, str]) -> list[str]:
    """``SPARK_JAVA_OPT_0``, ``SPARK_JAVA_OPT_1``... in numeric order."""
    found = []
    for key, value in env.items():
        match = re.fullmatch(r"SPARK_JAVA_OPT_(\d+)", key)
        if match:
            found.append((int(match.group(1)), value))
    return [value for _, value in sorted(found)]


def classpath(env: Mapping[str, str], spark_home: str) -> str:
    """The class path ``entrypoint.sh`` builds, then ``SPARK_DIST_CLASSPATH``."""
    parts = [p for p in env.get("SPARK_CLASSPATH", "").split(":") if p]
    parts.append(f"{spark_home}/jars/*")
    if env.get("SPARK_EXTRA_CLASSPATH"):
        parts.append(env["SPARK_EXTRA_CLASSPATH"])
    if "HADOOP_CONF_DIR" in env:
        parts.insert(0, env["HADOOP_CONF_DIR"])
    if "SPARK_CONF_DIR" in env:
        parts.insert(0, env["SPARK_CONF_DIR"])
    else:
        parts.insert(0, f"{spark_home}/conf")
    return ":".join(parts) + ":" + env.get("SPARK_DIST_CLASSPATH", "")


def executor_argv(env: Mapping[str, str], java: str, spark_home: str) -> list[str]:
    """The executor branch's command line; a clear error naming a missing variable."""
    missing = [k for k in _REQUIRED if not env.get(k)]
    if missing:
        raise ConfigError(
            f"executor: {', '.join(missing)} not set (Spark's executor pod sets them)"
        )
    memory = env["SPARK_EXECUTOR_MEMORY"]
    return [
        java,
        *java_options(env),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        classpath(env, spark_home),
        EXECUTOR_BACKEND,
        "--driver-url",
        env["SPARK_DRIVER_URL"],
        "--executor-id",
        env["SPARK_EXECUTOR_ID"],
        "--cores",
        env["SPARK_EXECUTOR_CORES"],
        "--app-id",
        env["SPARK_APPLICATION_ID"],
        "--hostname",
        env["SPARK_EXECUTOR_POD_IP"],
        "--resourceProfileId",
        env["SPARK_RESOURCE_PROFILE_ID"],
        "--podName",
        env["SPARK_EXECUTOR_POD_NAME"],
    ]


def command(args: Sequence[str], env: Mapping[str, str], java: str, spark_home: str) -> list[str]:
    """What the entrypoint runs for the container's ``args``."""
    if args and args[0] == "executor":
        return executor_argv(env, java, spark_home)
    if args and args[0] == "driver":
        bind = env.get("SPARK_DRIVER_BIND_ADDRESS", "")
        return [
            f"{spark_home}/bin/spark-submit",
            "--conf",
            f"spark.driver.bindAddress={bind}",
            "--deploy-mode",
            "client",
            *args[1:],
        ]
    if not args:
        raise ConfigError("the entrypoint needs a command: executor, driver, or one to run")
    return list(args)


def main() -> None:
    from streamscale.jars import java, spark_home

    home = str(spark_home())
    env = dict(os.environ)
    env.setdefault("SPARK_HOME", home)
    argv = command(sys.argv[1:], env, java(), home)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
