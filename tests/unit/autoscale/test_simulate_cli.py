"""``streamscale simulate``: JSON figures, the comparison table, the plot, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from streamscale.cli.main import app

KEYS = {"drain_time_s", "max_lag", "max_time_lag_s", "executor_seconds", "actions", "reversals"}
runner = CliRunner()


def test_json_one_object_per_policy() -> None:
    result = runner.invoke(app, ["simulate", "--trace", "step", "--policy", "fixed:2", "--json"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert figures["policy"] == "fixed:2"
    assert figures.keys() >= KEYS
    assert figures["actions"] == 0


def test_compare_json_and_plot(tmp_path: Path) -> None:
    trace = tmp_path / "short.csv"
    trace.write_text("t_seconds,input_rate\n0,1000\n60,3000\n", encoding="utf-8")
    png = tmp_path / "out" / "plot.png"
    args = ["simulate", "--trace", str(trace), "--compare", "--json", "--plot", str(png)]
    result = runner.invoke(app, [*args, "--max-executors", "4", "--tail", "240"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [r["policy"] for r in rows] == ["rate", "lag", "fixed:1", "fixed:4", "oracle"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_table() -> None:
    result = runner.invoke(
        app, ["simulate", "--trace", "step", "--compare", "--max-executors", "6"]
    )
    assert result.exit_code == 0, result.output
    for name in ("rate", "lag", "fixed:1", "fixed:6", "oracle", "exec-s/oracle"):
        assert name in result.stdout


def test_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("t,rate\n0,1\n", encoding="utf-8")
    for args in (
        ["--trace", str(bad)],
        ["--trace", "nope"],
        ["--policy", "fixed:zero"],
        ["--target-utilization", "0"],
    ):
        result = runner.invoke(app, ["simulate", *args])
        assert result.exit_code == 2, args
        assert result.stderr.startswith("error: ")
        assert result.stderr.count("\n") == 1
