"""The project image's entrypoint (:mod:`streamscale.kube.entrypoint`): Spark's
``entrypoint.sh`` branches as command lines (nothing is run)."""

from __future__ import annotations

import pytest

from streamscale.errors import ConfigError
from streamscale.kube import entrypoint

EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_APPLICATION_ID": "spark-app-1",
    "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "app-exec-3",
    "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_JAVA_OPT_10": "-Dten",
    "SPARK_JAVA_OPT_2": "-Dtwo",
    "SPARK_JAVA_OPT_0": "-Dzero",
    "SPARK_CONF_DIR": "/opt/spark/conf",
}


def test_executor_branch() -> None:
    argv = entrypoint.command(["executor"], EXECUTOR_ENV, "/jdk/bin/java", "/spark")
    assert argv == [
        "/jdk/bin/java",
        "-Dzero",
        "-Dtwo",
        "-Dten",
        "-Xms512m",
        "-Xmx512m",
        "-cp",
        "/opt/spark/conf:/spark/jars/*:",
        entrypoint.EXECUTOR_BACKEND,
        "--driver-url",
        "spark://CoarseGrainedScheduler@127.0.0.1:7078",
        "--executor-id",
        "3",
        "--cores",
        "1",
        "--app-id",
        "spark-app-1",
        "--hostname",
        "127.0.0.1",
        "--resourceProfileId",
        "0",
        "--podName",
        "app-exec-3",
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "/spark/conf:/spark/jars/*:"),
        ({"SPARK_CONF_DIR": "/c"}, "/c:/spark/jars/*:"),
        ({"SPARK_CONF_DIR": "/c", "HADOOP_CONF_DIR": "/h"}, "/c:/h:/spark/jars/*:"),
        ({"SPARK_CLASSPATH": "/a.jar", "SPARK_EXTRA_CLASSPATH": "/b.jar"},
         "/spark/conf:/a.jar:/spark/jars/*:/b.jar:"),
        ({"SPARK_DIST_CLASSPATH": "/d/*"}, "/spark/conf:/spark/jars/*:/d/*"),
    ],
)  # fmt: skip
def test_classpath(env: dict[str, str], expected: str) -> None:
    assert entrypoint.classpath(env, "/spark") == expected


def test_executor_without_its_variables_is_a_clear_error() -> None:
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != "SPARK_DRIVER_URL"}
    with pytest.raises(ConfigError, match="SPARK_DRIVER_URL"):
        entrypoint.command(["executor"], env, "java", "/spark")


def test_driver_and_pass_through() -> None:
    assert entrypoint.command(["driver", "app.py"], {"SPARK_DRIVER_BIND_ADDRESS": "0.0.0.0"},
                              "java", "/s") == [
        "/s/bin/spark-submit", "--conf", "spark.driver.bindAddress=0.0.0.0",
        "--deploy-mode", "client", "app.py",
    ]  # fmt: skip
    assert entrypoint.command(["echo", "hi"], {}, "java", "/s") == ["echo", "hi"]
    with pytest.raises(ConfigError):
        entrypoint.command([], {}, "java", "/s")
