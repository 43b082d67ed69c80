"""Building the SparkSession: this project's configuration and the venv's Python for workers."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from streamscale import class_archives
from streamscale.errors import PipelineError
from streamscale.network import driver_addresses, on_this_machine
from streamscale.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


QUIET_LOGGERS = (
    "org.apache.spark.scheduler.TaskSchedulerImpl",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.scheduler.cluster.StandaloneSchedulerBackend",
    "org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend$DriverEndpoint",
    "org.apache.spark.deploy.client.StandaloneAppClient$ClientEndpoint",
    "org.apache.spark.storage.BlockManagerMasterEndpoint",
    "org.apache.spark.storage.BlockManagerMaster",
    "org.apache.spark.network.server.TransportChannelHandler",
    "org.apache.spark.network.client.TransportResponseHandler",
    "org.apache.spark.network.client.TransportClient",
    "org.apache.spark.rpc.netty.NettyRpcEnv",
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    "org.apache.spark.scheduler.DAGScheduler",
)
"""Loggers that report executors going away — the autoscaler removes them on purpose, and
Spark then logs "Lost an executor", lost tasks and closed connections, some with stack traces
— a batch longer than the trigger interval ("falling behind", once a batch while behind: the
lag says it better), and a stopped query's job group with no job left to cancel. They go to
the log file only, never to the console."""

DEFAULT_LOG_FILE = Path(".streamscale") / "logs" / "spark-driver.log"
LOCAL_FILES = "io.streamscale.operators.LocalFiles"
"""Hadoop's local file system with modes set through java.nio (``jvm/operators``)."""


def log4j_properties(log_file: Path) -> str:
    """A log4j2 configuration for the driver: WARN and above on the console, as Spark's
    default, except :data:`QUIET_LOGGERS`, which go (INFO and above) to ``log_file`` only."""
    lines = [
        "status = error",
        "rootLogger.level = warn",
        "rootLogger.appenderRef.console.ref = console",
        "rootLogger.appenderRef.file.ref = file",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
        "appender.file.type = File",
        "appender.file.name = file",
        f"appender.file.fileName = {log_file}",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c: %m%n%ex",
    ]
    for i, name in enumerate(QUIET_LOGGERS):
        lines += [
            f"logger.quiet{i}.name = {name}",
            f"logger.quiet{i}.level = info",
            f"logger.quiet{i}.additivity = false",
            f"logger.quiet{i}.appenderRef.file.ref = file",
        ]
    return "\n".join(lines) + "\n"


def python_env() -> dict[str, str]:
    """Spark's Python workers must run this interpreter (the venv's), or pyarrow is missing."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def session(
    settings: Settings | None = None,
    app_name: str = "streamscale",
    extra_conf: Mapping[str, str] | None = None,
    *,
    log_file: Path = DEFAULT_LOG_FILE,
) -> SparkSession:
    """A SparkSession configured from ``settings``, with Spark's Kafka connector on the class
    path, the ``streamscale-kafka`` data source registered, and the processed offsets of every
    streaming query committed to its Kafka consumer group (:func:`~streamscale.kafka.commits.
    commit_offsets`, with ``settings``' connection for sources on that cluster).

    The driver logs WARN and above to the console, except the executor-loss reports that
    scaling in causes, which go to ``log_file`` (:func:`log4j_properties`)."""
    from pyspark.sql import SparkSession

    from streamscale import jars

    settings = settings or Settings()
    os.environ.update(python_env())
    builder = SparkSession.builder.appName(app_name)
    conf = {
        **settings.spark_conf(),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.sql.session.timeZone": "UTC",
        # Spark's own Kafka connector (format("kafka")), resolved by `make setup`, and the
        # project's JVM operators (the enrichment's table in the state store), built by it.
        "spark.jars": ",".join(
            str(p) for p in jars.jars(jars.CONNECTOR) + jars.jars(jars.OPERATORS)
        ),
        # With a byte cap, Spark sizes the Arrow batch it is building after every row, and
        # sizing a list column (the sink's ``headers``) walks the whole batch: quadratic, 80%
        # of the enrichment's JVM time. Batches are capped at maxRecordsPerBatch rows anyway.
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
        **(extra_conf or {}),
    }
    log_file = log_file.absolute()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_conf = log_file.with_suffix(".log4j2.properties")
    log_conf.write_text(log4j_properties(log_file))
    driver_opts = f"-Dlog4j2.configurationFile=file:{log_conf}"
    if conf.get("spark.driver.extraJavaOptions"):
        driver_opts = f"{conf['spark.driver.extraJavaOptions']} {driver_opts}"
    conf["spark.driver.extraJavaOptions"] = driver_opts
    # Where executors call the driver back: STREAMSCALE_DRIVER_HOST, loopback when everything
    # runs here, else this host's address on the route to the master (streamscale.network);
    # keys given in ``extra_conf`` win.
    master = conf.get("spark.master", settings.spark_master)
    conf = {
        **driver_addresses(master, settings.driver_host, settings.driver_bind_address),
        **conf,
    }
    bind = conf.get("spark.driver.bindAddress")
    if bind:
        # The driver JVM's own idea of this host's address (Spark's ``localIpAddress``, for
        # what no driver setting names): the bind address, not the first interface's, and
        # no "hostname resolves to a loopback address" warning. A user's SPARK_LOCAL_IP wins.
        os.environ.setdefault("SPARK_LOCAL_IP", bind)
    if on_this_machine(master):
        # A local or loopback cluster: its JVMs (driver, executors) can map the class archive
        # `make setup` recorded here.
        archive = class_archives.use_options(class_archives.SPARK)
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            options = " ".join([*archive, conf.get(key, "")]).strip()
            if options:
                conf[key] = options
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    use_local_files(spark)
    from streamscale.kafka import register
    from streamscale.kafka.commits import commit_offsets

    register(spark)
    commit_offsets(spark, settings.kafka_config())
    return spark


def use_local_files(spark: SparkSession) -> None:
    """Write checkpoints through the operators' :data:`LOCAL_FILES`, unless the session's
    configuration names a local file system (``spark.hadoop.fs.AbstractFileSystem.file.impl``,
    Hadoop's own ``org.apache.hadoop.fs.local.LocalFs`` included).

    Without Hadoop's native library (pyspark from PyPI has none), Hadoop's local file system
    forks ``chmod`` for every file it creates: 20-45 ms for each checkpoint file of every
    micro-batch (offset and commit logs, each state partition's changelog). Spark writes
    checkpoints through Hadoop's FileContext API, whose local file system this replaces for
    the driver and, through the Hadoop configuration each job ships, for the executors. Set
    on the running session: spark-submit reads local files before the project's jar is on
    its class path, so a ``spark.hadoop.*`` setting would fail the launch."""
    key = "fs.AbstractFileSystem.file.impl"
    if spark.sparkContext.getConf().get(f"spark.hadoop.{key}") is None:
        spark.sparkContext._jsc.hadoopConfiguration().set(key, f"{LOCAL_FILES}$Context")


def stop(spark: SparkSession) -> None:
    """Stop ``spark`` after its group committer has committed what its queries processed
    (bounded wait) and closed its Kafka clients, and after the transactional producers its JVM
    keeps (the exactly-once writer's, with a local master) are closed; then close the
    producers the sink kept in this process (the driver's writes), so that no Kafka client
    of the session outlives it."""
    from streamscale.kafka.commits import group_committer
    from streamscale.kafka.sink import close_kept_producers
    from streamscale.kafka.transactions import close_jvm_kept

    committer = group_committer(spark)
    try:
        if committer is not None:
            committer.close()
        close_jvm_kept(spark)
    finally:
        try:
            spark.stop()
        finally:
            close_kept_producers()


JVM_INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)
"""The JVM exceptions by which ``StreamingQuery.stop()`` interrupts a batch (the ones Spark's
``StreamExecution.isInterruptionException`` takes for a stop)."""


JOB_CANCELLED_BY_STOP = "SPARK_JOB_CANCELLED"
"""The other way ``StreamingQuery.stop()`` ends a batch: Spark cancels the query's jobs ("Job 5
cancelled Query [id = ...] was stopped", a ``SparkException`` without a cause) before the
thread waiting on them is interrupted. Spark takes it for a stop as well."""


class BatchInterrupted(PipelineError):
    """A ``foreachBatch`` function interrupted by its query's stop (:func:`stops_cleanly`)."""


def interruption(error: BaseException) -> str | None:
    """The JVM interruption behind ``error`` (a Py4J error, or PySpark's conversion of one),
    by class name from :data:`JVM_INTERRUPTIONS`, or :data:`JOB_CANCELLED_BY_STOP`; None for
    any other error, or when the JVM cannot be asked."""
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    try:
        for _ in range(32):  # a cause chain, bounded
            if java is None:
                return None
            name = str(java.getClass().getName())
            if name in JVM_INTERRUPTIONS:
                return name
            cause = java.getCause()
            if name == "org.apache.spark.SparkException" and cause is None:
                message = str(java.getMessage())
                if JOB_CANCELLED_BY_STOP in message and "was stopped" in message:
                    return JOB_CANCELLED_BY_STOP
            java = cause
    except Exception:  # the JVM's answer is not to be had: not known to be a stop
        return None
    return None


def stops_cleanly(
    func: Callable[[DataFrame, int], None],
) -> Callable[[DataFrame, int], None]:
    """``func`` as a ``foreachBatch`` function that ``StreamingQuery.stop()`` ends cleanly.

    A stop during a batch interrupts the JVM call ``func`` waits on, and ``func`` fails with a
    Py4J error whose message holds the JVM's whole stack trace. Spark 4.2 recognizes a stop in
    it with a regex that recurses once per character after its start
    (``StreamExecution.PROXY_ERROR``): a trace of a few thousand characters overflows the
    stream thread's stack, and the console shows a ``StackOverflowError`` where the query
    should have said "Stopped". Raised again as :class:`BatchInterrupted`, a one-line message
    that still reads as Py4J's report of the interruption, the stop is recognized and clean.
    Any other error is raised as it is: the batch fails, and is not committed, either way."""

    @functools.wraps(func)
    def run(batch: DataFrame, batch_id: int) -> None:
        try:
            func(batch, batch_id)
        except Exception as error:
            name = interruption(error)
            if name is None:
                raise
            # Spark reads a stop from the name of a JVM interruption in the message.
            seen, stop = (
                ("", name) if name in JVM_INTERRUPTIONS else (f"{name}, ", JVM_INTERRUPTIONS[0])
            )
            raise BatchInterrupted(
                f"batch {batch_id} interrupted by the query's stop ({seen}"
                f"py4j.protocol.Py4JJavaError: An error occurred while calling foreachBatch: "
                f"{stop})"
            ) from None

    return run
