"""A foreachBatch function stopped mid-batch: the interruption is told from other errors and
raised again in the one-line form Spark recognizes as a stop."""

from __future__ import annotations

import re
from typing import Any

import pytest

from streamscale.errors import PipelineError
from streamscale.spark import JVM_INTERRUPTIONS, BatchInterrupted, interruption, stops_cleanly

PROXY_ERROR = re.compile(
    r"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)("
    + "|".join(JVM_INTERRUPTIONS)
    + ")"
)
"""Spark 4.2's ``StreamExecution.PROXY_ERROR``, read from its class file: what a Py4J error
must match to count as a stop."""


class JavaThrowable:
    """A Py4J handle on a JVM throwable: its class name and its cause."""

    def __init__(self, name: str, cause: JavaThrowable | None = None, message: str = "") -> None:
        self.name, self.cause, self.message = name, cause, message

    def getClass(self) -> Any:
        return self

    def getName(self) -> str:
        return self.name

    def getCause(self) -> JavaThrowable | None:
        return self.cause

    def getMessage(self) -> str:
        return self.message


class GoneJvm:
    def getClass(self) -> Any:
        raise ConnectionError("Answer from Java side is empty")


class Py4JJavaError(Exception):
    def __init__(self, java: Any) -> None:
        super().__init__("An error occurred while calling o44.count.\n" + "\tat x\n" * 2000)
        self.java_exception = java


class CapturedException(Exception):
    def __init__(self, origin: Any) -> None:
        super().__init__("converted")
        self._origin = origin


SPARK = "org.apache.spark.SparkException"
CANCELLED = "[SPARK_JOB_CANCELLED] Job 5 cancelled Query [id = 1, runId = 2] was stopped"


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (Py4JJavaError(JavaThrowable("java.lang.InterruptedException")), JVM_INTERRUPTIONS[0]),
        (
            Py4JJavaError(JavaThrowable(SPARK, JavaThrowable("java.io.InterruptedIOException"))),
            "java.io.InterruptedIOException",
        ),
        (
            CapturedException(JavaThrowable("java.nio.channels.ClosedByInterruptException")),
            "java.nio.channels.ClosedByInterruptException",
        ),
        (Py4JJavaError(JavaThrowable(SPARK, JavaThrowable("java.io.IOException"))), None),
        (Py4JJavaError(JavaThrowable(SPARK, message=CANCELLED)), "SPARK_JOB_CANCELLED"),
        (
            Py4JJavaError(JavaThrowable(SPARK, message="[SPARK_JOB_CANCELLED] Job 5 cancelled")),
            None,
        ),
        (Py4JJavaError(GoneJvm()), None),
        (ValueError("a bad record"), None),
    ],
)
def test_interruption_is_found_along_the_cause_chain_and_only_there(
    error: Exception, name: str | None
) -> None:
    assert interruption(error) == name


def test_a_cause_chain_that_loops_is_not_followed_forever() -> None:
    looped = JavaThrowable(SPARK)
    looped.cause = looped
    assert interruption(Py4JJavaError(looped)) is None


@pytest.mark.parametrize(
    "java",
    [
        JavaThrowable(SPARK, JavaThrowable("java.lang.InterruptedException")),
        JavaThrowable(SPARK, message=CANCELLED),  # the stop cancelled the batch's job first
    ],
)
def test_an_interrupted_batch_is_raised_as_one_line_spark_reads_as_a_stop(
    java: JavaThrowable,
) -> None:
    def batch(df: Any, batch_id: int) -> None:
        raise Py4JJavaError(java)

    with pytest.raises(BatchInterrupted) as raised:
        stops_cleanly(batch)(None, 7)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "\n" not in message and message.startswith("batch 7 interrupted by the query's stop")
    assert PROXY_ERROR.search(message)
    assert raised.value.__suppress_context__  # the long original is not in the traceback
    assert isinstance(raised.value, PipelineError)


@pytest.mark.parametrize(
    "error",
    [ValueError("a bad record"), Py4JJavaError(JavaThrowable("java.lang.OutOfMemoryError"))],
)
def test_any_other_error_is_raised_as_it_is(error: Exception) -> None:
    def batch(df: Any, batch_id: int) -> None:
        raise error

    with pytest.raises(type(error)) as raised:
        stops_cleanly(batch)(None, 1)  # type: ignore[arg-type]
    assert raised.value is error


def test_a_batch_that_succeeds_runs_once_and_keeps_its_name() -> None:
    seen: list[int] = []

    def write_batch(df: Any, batch_id: int) -> None:
        seen.append(batch_id)

    wrapped = stops_cleanly(write_batch)
    assert wrapped(None, 3) is None  # type: ignore[arg-type,func-returns-value]
    assert seen == [3] and wrapped.__name__ == "write_batch"
