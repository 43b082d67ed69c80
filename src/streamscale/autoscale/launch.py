"""``streamscale attach -- python job.py``: the autoscaler on an unmodified PySpark job.

The launcher runs the job as a child process with two things added, the way
``opentelemetry-instrument`` and ``ddtrace-run`` instrument a program they do not edit:

- the Spark settings the autoscaler needs, given at launch: for ``python job.py`` in
  ``PYSPARK_SUBMIT_ARGS`` (what pyspark passes to the ``spark-submit`` it starts), for
  ``spark-submit ... job.py`` as options inserted into its command line. A setting the job
  itself makes in its code wins over them (pyspark applies the builder's settings last),
  except the two the autoscaler cannot work without, the master and dynamic allocation off:
  a job whose own settings contradict those is refused in one line before its session starts;
- a ``sitecustomize`` module on the child's ``PYTHONPATH``
  (``streamscale/autoscale/bootstrap``) that, when the job builds its SparkSession, attaches
  :func:`streamscale.attach` to it (:mod:`streamscale.autoscale.hook`).

This module is the plan, pure: which form the command has, what the job's own settings say,
what to add. :func:`run` is the I/O: it starts a local standalone cluster when no master is
given, runs the child by PID, and stops everything when the child exits.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from streamscale.autoscale.policy import PolicyKind
from streamscale.autoscale.runtime import AutoscaleOptions, elastic_conf
from streamscale.errors import ConfigError
from streamscale.settings import LOCALITY_WAIT

__all__ = [
    "CONF_ENV",
    "ENV",
    "AttachOptions",
    "Launch",
    "contradiction",
    "plan",
    "submit_settings",
]

ENV = "_STREAMSCALE_ATTACH"
"""The environment variable that carries :class:`AttachOptions` (JSON) to the job's process;
the bootstrap does nothing without it. Not a ``STREAMSCALE_*`` setting: internal."""

PREFIX = "streamscale attach"
"""How the launcher and the hook start their lines."""

CONF_ENV = "_STREAMSCALE_ATTACH_CONF"
"""The settings given at launch (JSON), for the job's process to check its own against."""

BOOTSTRAP_DIR = Path(__file__).parent / "bootstrap"
"""Holds the ``sitecustomize`` module put first on the child's ``PYTHONPATH``."""

REQUIRED = ("spark.master", "spark.dynamicAllocation.enabled")
"""Settings the autoscaler cannot work without: a job whose own settings differ is refused.
Every other setting of :func:`needed_conf` is a default the job may override."""

CONNECTOR = "spark-sql-kafka"
"""The name of Spark's Kafka connector artifact: a job that brings its own is given none."""


@dataclass(frozen=True)
class AttachOptions:
    """What ``streamscale attach`` hands to :func:`streamscale.attach` in the job's process."""

    min_executors: int = 1
    max_executors: int = 2
    policy: str = PolicyKind.RATE.value
    metrics_port: int | None = 9464
    interval_s: float = 10.0
    stabilization_window_s: float = 60.0
    decision_log: str | None = None

    def __post_init__(self) -> None:
        AutoscaleOptions(  # the same checks as every other entry point
            policy=PolicyKind(self.policy),
            min_executors=self.min_executors,
            max_executors=self.max_executors,
            interval_s=self.interval_s,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> AttachOptions:
        return cls(**json.loads(raw))

    def autoscale(self) -> AutoscaleOptions:
        return AutoscaleOptions(
            policy=PolicyKind(self.policy),
            min_executors=self.min_executors,
            max_executors=self.max_executors,
            interval_s=self.interval_s,
            stabilization_window_s=self.stabilization_window_s,
        )


@dataclass(frozen=True)
class SubmitArgs:
    """What a ``spark-submit`` command line (or ``PYSPARK_SUBMIT_ARGS``) sets: ``--master``,
    every ``--conf k=v``, ``--jars`` and ``--packages`` (as ``spark.jars`` and
    ``spark.jars.packages``)...; ``app``: the index of the application (the first argument
    that is not an option), ``len(argv)`` when there is none."""

    conf: dict[str, str]
    app: int


OPTION_KEYS = {
    "--master": "spark.master",
    "--jars": "spark.jars",
    "--packages": "spark.jars.packages",
    "--executor-cores": "spark.executor.cores",
    "--total-executor-cores": "spark.cores.max",
    "--executor-memory": "spark.executor.memory",
    "--num-executors": "spark.executor.instances",
}
FLAGS = frozenset({"--verbose", "-v", "--supervise", "--help", "-h", "--version", "--usage-error"})
"""spark-submit's options that take no value; every other option takes one."""


def parse_submit(argv: Sequence[str]) -> SubmitArgs:
    """The settings a ``spark-submit`` argument list makes before its application
    (``--opt value`` and ``--opt=value`` both)."""
    conf: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "pyspark-shell":
            return SubmitArgs(conf, i)
        name, eq, inline = arg.partition("=")
        if name in FLAGS:
            i += 1
            continue
        if eq and name.startswith("--"):
            value = inline
        elif i + 1 < len(argv):
            i += 1
            value = argv[i]
        else:
            break
        if name in ("--conf", "-c"):
            key, _, conf_value = value.partition("=")
            conf[key.strip()] = conf_value
        elif name in OPTION_KEYS:
            conf[OPTION_KEYS[name]] = value
        i += 1
    return SubmitArgs(conf, len(argv))


def is_spark_submit(command: Sequence[str]) -> bool:
    return bool(command) and Path(command[0]).name in ("spark-submit", "spark-submit.sh")


def needed_conf(
    master: str, options: AttachOptions, jars: Sequence[str], python: str
) -> dict[str, str]:
    """The Spark settings the autoscaler needs on ``master`` (:func:`~streamscale.autoscale.
    runtime.elastic_conf`, the same as ``streamscale run --autoscale``), no wait for a busy or
    removed executor's locality, Spark's Kafka connector (``jars``), and ``python`` for the
    executors' Python workers."""
    conf = {
        **elastic_conf(master, options.autoscale()),
        LOCALITY_WAIT: "0s",
        "spark.pyspark.python": python,
        "spark.executorEnv.PYSPARK_PYTHON": python,
    }
    conf["spark.master"] = master
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return conf


def contradiction(needed: Mapping[str, str], given: Mapping[str, str], where: str) -> str | None:
    """One line naming the first required setting (:data:`REQUIRED`) that ``given`` (the
    job's own settings, found ``where``) sets otherwise; None when they agree."""
    for key in REQUIRED:
        want = needed.get(key)
        have = given.get(key)
        if want is None or have is None:
            continue
        if have.strip().lower() != want.strip().lower():
            if key == "spark.master":
                return (
                    f"the job sets spark.master={have} in {where}, but streamscale attach runs "
                    f"it on {want}: remove it there, or pass --master {have} to streamscale "
                    "attach (a cluster manager that takes executor requests: spark://, k8s://)"
                )
            return (
                f"the job sets {key}={have} in {where}: the autoscaler needs {want} "
                "(Spark's dynamic allocation and the autoscaler would fight over executors); "
                "remove it there"
            )
    return None


def merge_jars(ours: str | None, theirs: str | None) -> str | None:
    """``spark.jars`` with the job's own first and ours after (comma-separated, no repeat)."""
    parts = [p for v in (theirs, ours) if v for p in v.split(",") if p.strip()]
    return ",".join(dict.fromkeys(p.strip() for p in parts)) or None


def brings_connector(given: Mapping[str, str]) -> bool:
    """Whether the job's settings already name Spark's Kafka connector."""
    return any(CONNECTOR in given.get(k, "") for k in ("spark.jars", "spark.jars.packages"))


def submit_settings(needed: Mapping[str, str], given: Mapping[str, str]) -> list[str]:
    """``--conf k=v`` arguments for what the job's own settings (``given``) leave unset;
    ``spark.jars`` merged with the job's own."""
    args: list[str] = []
    for key, value in needed.items():
        if key == "spark.jars" and brings_connector(given):
            continue
        if key in given:  # the job's own spark.jars is joined, not replaced (join_jars)
            continue
        args += ["--conf", f"{key}={value}"]
    return args


@dataclass(frozen=True)
class Launch:
    """The child's command and what to add to its environment."""

    argv: list[str]
    env: dict[str, str]
    needed: dict[str, str]


def plan(
    command: Sequence[str],
    master: str,
    options: AttachOptions,
    *,
    jars: Sequence[str],
    environ: Mapping[str, str],
    python: str = sys.executable,
    addresses: Mapping[str, str] | None = None,
) -> Launch:
    """How to run ``command`` (``python job.py ...`` or ``spark-submit ... job.py ...``) with
    the autoscaler attached on ``master``; :class:`~streamscale.errors.ConfigError` when the
    command's own settings contradict what the autoscaler needs. ``addresses``: the driver's
    (``spark.driver.host`` and ``bindAddress``, :func:`streamscale.network.driver_addresses`),
    defaults as the rest; the JVM's own address (``SPARK_LOCAL_IP``) follows the bind address
    unless the environment sets it."""
    if not command:
        raise ConfigError("no job to run: streamscale attach [OPTIONS] -- python job.py ARGS")
    needed = {**(addresses or {}), **needed_conf(master, options, jars, python)}
    env = {
        ENV: options.to_json(),
        CONF_ENV: json.dumps(needed, sort_keys=True),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(BOOTSTRAP_DIR), environ.get("PYTHONPATH", "")) if p
        ),
        "PYSPARK_PYTHON": environ.get("PYSPARK_PYTHON", python),
        "PYSPARK_DRIVER_PYTHON": environ.get("PYSPARK_DRIVER_PYTHON", python),
    }
    bind = needed.get("spark.driver.bindAddress")
    if bind and "SPARK_LOCAL_IP" not in environ:
        env["SPARK_LOCAL_IP"] = bind
    if is_spark_submit(command):
        parsed = parse_submit(command[1:])
        given = parsed.conf
        problem = contradiction(needed, given, "its spark-submit options")
        if problem:
            raise ConfigError(problem)
        options_end = 1 + parsed.app
        own = list(command[1:options_end])
        if "spark.jars" in given and not brings_connector(given) and "spark.jars" in needed:
            own = join_jars(own, needed["spark.jars"])
        argv = [command[0], *submit_settings(needed, given), *own, *command[options_end:]]
        return Launch(argv, env, needed)
    submit = shlex.split(environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    given = parse_submit(submit).conf
    problem = contradiction(needed, given, "PYSPARK_SUBMIT_ARGS")
    if problem:
        raise ConfigError(problem)
    rest = [a for a in submit if a != "pyspark-shell"]
    if "spark.jars" in given and not brings_connector(given) and "spark.jars" in needed:
        rest = join_jars(rest, needed["spark.jars"])
    env["PYSPARK_SUBMIT_ARGS"] = shlex.join(
        [*submit_settings(needed, given), *rest, "pyspark-shell"]
    )
    return Launch(list(command), env, needed)


def join_jars(options: Sequence[str], ours: str) -> list[str]:
    """spark-submit ``options`` with ``ours`` joined to the job's own ``spark.jars`` (the value
    of ``--jars``, or of a ``--conf spark.jars=``): spark-submit's ``--jars`` wins over any
    ``--conf spark.jars``, so ours must join it rather than sit beside it."""
    out = list(options)
    for i, arg in enumerate(out):
        before = out[i - 1] if i else ""
        if before == "--jars":
            out[i] = merge_jars(ours, arg) or arg
        elif arg.startswith("--jars="):
            out[i] = "--jars=" + (merge_jars(ours, arg.partition("=")[2]) or "")
        elif arg.startswith("spark.jars=") and before in ("--conf", "-c"):
            out[i] = "spark.jars=" + (merge_jars(ours, arg.partition("=")[2]) or "")
        elif arg.startswith("--conf=spark.jars="):
            out[i] = "--conf=spark.jars=" + (merge_jars(ours, arg.split("=", 2)[2]) or "")
    return out


# --------------------------------------------------------------------------- I/O: the run


def master_of(command: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The master the command names itself: spark-submit's ``--master``, or
    ``PYSPARK_SUBMIT_ARGS``'s for a Python job."""
    if is_spark_submit(command):
        return parse_submit(command[1:]).conf.get("spark.master")
    submit = shlex.split(environ.get("PYSPARK_SUBMIT_ARGS", ""))
    return parse_submit(submit).conf.get("spark.master")


def run(
    command: Sequence[str],
    options: AttachOptions,
    *,
    master: str | None = None,
    data_dir: Path | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Run ``command`` with the autoscaler attached to the session it builds; return its exit
    code. Without a master (``master``, or the command's own), a local standalone cluster of
    one worker with a core and 1 GB for each of ``max_executors`` executors
    runs for the job's lifetime in ``data_dir`` (default: a temporary directory), stopped
    by PID with the job's leftovers when the job exits."""
    import contextlib
    import tempfile

    from streamscale import cluster, jars, processes
    from streamscale.network import driver_addresses
    from streamscale.settings import Settings

    settings = Settings()
    environ = dict(os.environ)
    own = master_of(command, environ)
    if master is not None and own is not None and own != master:
        raise ConfigError(
            f"the command runs on --master {own}, streamscale attach on --master {master}: give one"
        )
    master = master or own
    connector = [str(p) for p in jars.jars(jars.CONNECTOR)]
    work = data_dir or Path(tempfile.mkdtemp(prefix="streamscale-attach-"))
    with contextlib.ExitStack() as stack:
        if master is None:
            n = options.max_executors
            local = stack.enter_context(
                cluster.local_cluster(work / "cluster", workers=1, cores=n, memory=f"{n}g")
            )
            master = local.master_url
            say(f"{PREFIX}: local Spark cluster at {master} ({n} cores)")
        launch = plan(
            command,
            master,
            options,
            jars=connector,
            environ=environ,
            python=python_of(command),
            addresses=driver_addresses(master, settings.driver_host, settings.driver_bind_address),
        )
        return processes.run_foreground("job", launch.argv, work, env=launch.env)
    raise AssertionError("unreachable")  # pragma: no cover


def python_of(command: Sequence[str]) -> str:
    """The interpreter the job runs with (for the executors' Python workers too, whose
    version must match the driver's): the command's own ``python...``, else this one."""
    import shutil

    if command and Path(command[0]).name.startswith("python"):
        found = shutil.which(command[0])
        if found:
            return found
    return sys.executable
