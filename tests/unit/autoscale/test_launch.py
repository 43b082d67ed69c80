"""The plan of ``streamscale attach``: what a command sets, what is refused, what is added
(pure: no process is started)."""

from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale import hook
from streamscale.autoscale.launch import (
    CONF_ENV,
    ENV,
    AttachOptions,
    contradiction,
    join_jars,
    merge_jars,
    parse_submit,
    plan,
    submit_settings,
)
from streamscale.errors import ConfigError

MASTER = "spark://127.0.0.1:7077"
JARS = ["/j/spark-sql-kafka-0-10_2.13-4.2.0.jar", "/j/kafka-clients.jar"]
OPTIONS = AttachOptions(min_executors=1, max_executors=3)


@pytest.mark.parametrize(
    ("argv", "conf", "app"),
    [
        ([], {}, 0),
        (["pyspark-shell"], {}, 0),
        (
            ["--master", "spark://h:1", "job.py", "--master", "x"],
            {"spark.master": "spark://h:1"},
            2,
        ),
        (["--master=k8s://h", "job.py"], {"spark.master": "k8s://h"}, 1),
        (["--conf", "spark.a=1=2", "-c", "b=c", "job.py"], {"spark.a": "1=2", "b": "c"}, 4),
        (["--verbose", "--name", "x", "--jars", "a.jar", "job.py"], {"spark.jars": "a.jar"}, 5),
        (
            ["--packages", "g:spark-sql-kafka:1", "pyspark-shell"],
            {"spark.jars.packages": "g:spark-sql-kafka:1"},
            2,
        ),
        (
            ["--total-executor-cores", "4", "--executor-cores", "1"],
            {"spark.cores.max": "4", "spark.executor.cores": "1"},
            4,
        ),
    ],
)
def test_parse_submit(argv: list[str], conf: dict[str, str], app: int) -> None:
    parsed = parse_submit(argv)
    assert (parsed.conf, parsed.app) == (conf, app)


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ({}, None),
        ({"spark.master": MASTER}, None),
        ({"spark.master": "local[*]"}, "sets spark.master=local[*] in here"),
        ({"spark.dynamicAllocation.enabled": "true"}, "dynamicAllocation.enabled=true in here"),
        ({"spark.dynamicAllocation.enabled": "False"}, None),
        ({"spark.executor.cores": "4", "spark.cores.max": "1"}, None),  # defaults, not required
    ],
)
def test_only_the_required_settings_are_refused(
    given: dict[str, str], fragment: str | None
) -> None:
    needed = {"spark.master": MASTER, "spark.dynamicAllocation.enabled": "false"}
    problem = contradiction(needed, given, "here")
    assert (problem is None) == (fragment is None), problem
    if fragment:
        assert fragment in str(problem) and "\n" not in str(problem)


def test_a_python_job_gets_its_settings_in_pyspark_submit_args() -> None:
    launch = plan(
        ["python", "job.py", "a"], MASTER, OPTIONS, jars=JARS, environ={}, python="/v/python"
    )
    assert launch.argv == ["python", "job.py", "a"]
    submit = shlex.split(launch.env["PYSPARK_SUBMIT_ARGS"])
    assert submit[-1] == "pyspark-shell"
    conf = parse_submit(submit).conf
    assert conf["spark.master"] == MASTER
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    assert conf["spark.cores.max"] == "3" and conf["spark.executor.cores"] == "1"
    assert conf["spark.locality.wait"] == "0s"
    assert conf["spark.jars"] == ",".join(JARS)
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == "/v/python"
    assert launch.env["PYTHONPATH"].endswith("bootstrap")
    assert AttachOptions.from_json(launch.env[ENV]) == OPTIONS
    assert json.loads(launch.env[CONF_ENV]) == launch.needed


def test_a_python_job_keeps_its_own_submit_args_and_jars() -> None:
    environ = {"PYSPARK_SUBMIT_ARGS": "--jars /mine.jar --conf spark.cores.max=1 pyspark-shell"}
    launch = plan(["python", "job.py"], MASTER, OPTIONS, jars=JARS, environ=environ)
    conf = parse_submit(shlex.split(launch.env["PYSPARK_SUBMIT_ARGS"])).conf
    assert conf["spark.cores.max"] == "1"  # the job's own wins
    assert conf["spark.jars"] == ",".join(["/mine.jar", *JARS])


def test_spark_submit_gets_options_before_its_application() -> None:
    command = ["spark-submit", "--name", "n", "job.py", "--master", "arg-of-the-job"]
    launch = plan(command, MASTER, OPTIONS, jars=JARS, environ={})
    assert launch.argv[0] == "spark-submit"
    assert launch.argv[-4:] == ["n", "job.py", "--master", "arg-of-the-job"]
    conf = parse_submit(launch.argv[1:]).conf
    assert conf["spark.master"] == MASTER and conf["spark.jars"] == ",".join(JARS)
    assert "PYSPARK_SUBMIT_ARGS" not in launch.env


def test_spark_submit_with_its_own_jars_gets_ours_joined_to_them() -> None:
    command = ["spark-submit", "--jars", "/mine.jar", "job.py"]
    launch = plan(command, MASTER, OPTIONS, jars=JARS, environ={})
    assert parse_submit(launch.argv[1:]).conf["spark.jars"] == ",".join(["/mine.jar", *JARS])
    assert launch.argv.count("--jars") == 1


def test_a_job_bringing_the_connector_gets_no_second_one() -> None:
    given_ = {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"}
    args = submit_settings({"spark.jars": "x.jar", "spark.master": MASTER}, given_)
    assert args == ["--conf", f"spark.master={MASTER}"]


def test_spark_submit_on_another_master_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"spark.master=local\[2\] in its spark-submit options"):
        plan(["spark-submit", "--master", "local[2]", "j.py"], MASTER, OPTIONS, jars=[], environ={})


def test_local_mode_is_refused_as_a_master() -> None:
    with pytest.raises(ConfigError, match="spark://, k8s://"):
        plan(["python", "j.py"], "local[2]", OPTIONS, jars=[], environ={})


def test_no_command_is_refused() -> None:
    with pytest.raises(ConfigError, match="no job to run"):
        plan([], MASTER, OPTIONS, jars=[], environ={})


def test_options_are_checked_as_everywhere() -> None:
    with pytest.raises(ConfigError, match="--max-executors"):
        AttachOptions(min_executors=3, max_executors=2)


def test_join_jars_forms() -> None:
    assert join_jars(["--jars=a.jar", "--conf", "spark.jars=b.jar"], "o.jar") == [
        "--jars=a.jar,o.jar",
        "--conf",
        "spark.jars=b.jar,o.jar",
    ]


jar = st.from_regex(r"/[a-z]{1,5}\.jar", fullmatch=True)


@given(st.lists(jar, max_size=4), st.lists(jar, max_size=4))
def test_merge_jars_keeps_theirs_first_and_every_jar_once(
    ours: list[str], theirs: list[str]
) -> None:
    merged = merge_jars(",".join(ours) or None, ",".join(theirs) or None)
    parts = merged.split(",") if merged else []
    assert parts == list(dict.fromkeys([*theirs, *ours]))


def test_the_hook_refuses_a_contradicting_builder_and_joins_jars() -> None:
    state = hook._State(OPTIONS, {"spark.master": MASTER, "spark.jars": "o.jar"})
    options: dict[str, object] = {"spark.jars": "mine.jar", "spark.app.name": "x"}
    hook.check_builder(state, options)
    assert options["spark.jars"] == "mine.jar,o.jar"
    with pytest.raises(SystemExit, match="^streamscale attach: the job sets spark.master"):
        hook.check_builder(state, {"spark.master": "local[*]"})


def test_the_hook_does_nothing_unless_asked() -> None:
    assert hook.install({}) is False


def test_the_driver_addresses_are_defaults_and_bind_the_jvm() -> None:
    addresses = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    launch = plan(["python", "j.py"], MASTER, OPTIONS, jars=[], environ={}, addresses=addresses)
    conf = parse_submit(shlex.split(launch.env["PYSPARK_SUBMIT_ARGS"])).conf
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert launch.env["SPARK_LOCAL_IP"] == "127.0.0.1"
    mine = {"SPARK_LOCAL_IP": "127.0.0.2"}
    assert (
        "SPARK_LOCAL_IP"
        not in plan(
            ["python", "j.py"], MASTER, OPTIONS, jars=[], environ=mine, addresses=addresses
        ).env
    )
