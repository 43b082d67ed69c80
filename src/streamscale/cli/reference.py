"""The documentation site's reference pages, generated from the code so that they cannot
drift: every ``STREAMSCALE_*`` setting (the settings model), every command and option (the
typer app), every metric of ``/metrics`` (the collector's families) and every field and
reason of the decision log (:class:`~streamscale.autoscale.controller.DecisionRecord`,
:class:`~streamscale.autoscale.policy.Reason`).

Called by the MkDocs hook ``docs/hooks/reference.py`` at build time; ``pages()`` returns
each page's path under ``docs/`` and its Markdown.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
from typing import Any

STUDY_OPTIONS = frozenset(
    {
        "--surge-share",
        "--reverse-for-slo",
        "--calibrate",
        "--fixed-cost",
        "--executor-rate",
        "--scenario",
        "--compare",
        "--actions",
    }
)
"""Options that exist to study the policy (offline, or its trade-offs on a real query): the
reference marks them so; a user running a job needs none of them."""

REASONS: dict[str, str] = {
    "scale_up_backlog": "more executors: the backlog cannot be drained in time with the count",
    "scale_up_rate": "more executors: the input rate outgrows what the count carries",
    "scale_up_urgent": "more executors at once, reversing a recent scale-down: the time lag "
    "is past the objective, or with --reverse-for-slo predicted to pass it",
    "scale_down_idle": "fewer executors: no backlog for a whole stabilization window, and "
    "fewer carry the input",
    "bounded_min": "brought back up to --min-executors",
    "bounded_max": "brought back down to the upper bound (--max-executors, or the usable "
    "parallelism: input partitions and state partitions)",
    "hold_missing_metrics": "no lag sample yet: an outage is never read as zero lag",
    "hold_stale_metrics": "the newest lag sample is too old to act on",
    "hold_unmeasured_rate": "the capacity of an executor cannot be fitted yet (too few "
    "batches, all of about one size)",
    "hold_scaling_in_progress": "executors requested are not running yet",
    "hold_warming_up": "too few batches since the start or the last change",
    "hold_within_tolerance": "the change would be within the tolerance (10 %)",
    "hold_backlog_draining": "the backlog drains with the count running",
    "hold_within_budget": "rate: the count is short of the input, but the time lag stays "
    "within the objective until a scale-up at the next decision",
    "hold_stabilizing": "no scale-in before a whole window without backlog",
    "hold_reversal": "no change that would reverse the last one within the window",
    "hold_steady": "the count is right",
    "hold_pause_cost": "rate: the change is not worth the pause it costs (its state reload, "
    "as measured), or would leave no way back to the last scale-up's input",
}
"""What each :class:`~streamscale.autoscale.policy.Reason` means, in a line."""

FIELDS: dict[str, str] = {
    "time": "when the step ran (seconds since the epoch)",
    "running": "executors running",
    "pending": "executors requested and not yet running",
    "desired": "the count the policy asked for",
    "reason": "why (see the reasons below)",
    "direction": "up, down or none",
    "total_lag": "records lag summed over the partitions (null: no sample)",
    "max_time_lag_s": "the largest time lag of a partition (seconds)",
    "input_rate": "records/s arriving",
    "processed_rate": "records/s processed",
    "metrics_age_s": "age of the lag sample the step used (seconds)",
    "policy_target": "the policy's count before bounds and rules (a fraction)",
    "killed": "executors removed by this step",
    "error": "the cluster manager's error, when a request failed",
}
"""Descriptions of the :class:`DecisionRecord` fields that have no docstring of their own."""


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a dataclass's fields (read from its source)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type_name(annotation: Any) -> str:
    """A setting's type for a reader: ``str``, ``one of: a, b``; an optional's ``None``
    left out (the default column says unset)."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is typing.Literal:
        return "one of: " + ", ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _type_name(args[0])
    if isinstance(annotation, type):
        return f"`{annotation.__name__}`"
    return f"`{_cell(annotation)}`"


def settings_page() -> str:
    """Every setting: its variable, type, default and description."""
    from streamscale.settings import Settings

    lines = [
        "# Settings",
        "",
        "Every setting is an environment variable `STREAMSCALE_<NAME>` (or a line of the file "
        "given to `--config`). Generated from the settings model "
        "(`streamscale.settings.Settings`).",
        "",
        "| variable | type | default | what |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=False)
        if field.default_factory is not None:
            shown = "computed (see what)"
        elif default is None:
            shown = "unset"
        else:
            shown = f"`{default}`"
        kind = _type_name(field.annotation)
        lines.append(
            f"| `STREAMSCALE_{name.upper()}` | {kind} | {shown} | {_cell(field.description)} |"
        )
    return "\n".join(lines) + "\n"


def _commands() -> list[tuple[str, Any]]:
    """Every command of the CLI as (full name, click command), groups walked."""
    import typer

    from streamscale.cli.main import app

    root = typer.main.get_command(app)
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, command: Any) -> None:
        if hasattr(command, "commands"):  # a group (typer's own click)
            for name in sorted(command.commands):
                walk(f"{prefix} {name}", command.commands[name])
        else:
            out.append((prefix, command))

    walk("streamscale", root)
    return out


def _is_option(param: Any) -> bool:
    return bool(param.param_type_name == "option")


def cli_options() -> dict[str, list[str]]:
    """Command → its options' names (what the reference must list)."""
    return {
        name: [opt for p in cmd.params if _is_option(p) for opt in p.opts]
        for name, cmd in _commands()
    }


def cli_page() -> str:
    """Every command, its arguments and options with their defaults and help."""
    lines = [
        "# Command line",
        "",
        "Every command of `streamscale` and every option, generated from the CLI itself. "
        "Options marked *study* exist to study the policy; running a job needs none of them.",
        "",
    ]
    for name, cmd in _commands():
        lines += [f"## `{name}`", "", _cell((cmd.help or "").split("\n\n")[0]), ""]
        args = [p for p in cmd.params if not _is_option(p)]
        if args:
            lines.append(
                "Arguments: " + ", ".join(f"`{a.metavar or a.name.upper()}`" for a in args)
            )
            lines.append("")
        options = [p for p in cmd.params if _is_option(p)]
        if options:
            lines += ["| option | default | what |", "|---|---|---|"]
            for opt in options:
                names = " / ".join(f"`{o}`" for o in [*opt.opts, *opt.secondary_opts])
                if opt.is_flag:
                    default = "off" if not opt.default else "on"
                elif opt.default is None:
                    default = ""
                else:
                    default = f"`{_cell(opt.default)}`"
                study = "*study*: " if set(opt.opts) & STUDY_OPTIONS else ""
                lines.append(f"| {names} | {default} | {study}{_cell(opt.help or '')} |")
            lines.append("")
    return "\n".join(lines)


def metric_families() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Every family ``/metrics`` exports: name → (type, help, labels)."""
    from streamscale.lag.metrics import _families

    return {
        name: (m.type, m.documentation, tuple(getattr(m, "_labelnames", ())))
        for name, m in _families().items()
    }


def metrics_page() -> str:
    lines = [
        "# Metrics",
        "",
        "Every metric family on `/metrics` (the driver's endpoint, `--metrics-port`, 9464 by "
        "default), generated from the collector. `streamscale_*` carry the query's name; "
        "`kafka_consumergroup_*` are named and labelled as kafka-lag-exporter's, so that its "
        "dashboards and alerts work unchanged (`group` is the consumer group the query's "
        "offsets are committed to).",
        "",
        "| metric | type | labels | what |",
        "|---|---|---|---|",
    ]
    for name, (kind, doc, labels) in metric_families().items():
        shown = f"{name}_total" if kind == "counter" else name
        label_text = ", ".join(f"`{x}`" for x in labels) or "none"
        lines.append(f"| `{shown}` | {kind} | {label_text} | {_cell(doc)} |")
    return "\n".join(lines) + "\n"


def decision_fields() -> dict[str, str]:
    """Every field of a decision record → its description."""
    from streamscale.autoscale.controller import DecisionRecord

    docs = _attribute_docs(DecisionRecord)
    return {
        f.name: docs.get(f.name) or FIELDS.get(f.name, "")
        for f in dataclasses.fields(DecisionRecord)
    }


def decisions_page() -> str:
    from streamscale.autoscale.policy import Reason

    lines = [
        "# Decision log",
        "",
        "`--decision-log FILE` (or `decision_log=` of `streamscale.attach`) writes one JSON "
        "object per control step, holds included. Generated from "
        "`streamscale.autoscale.controller.DecisionRecord`.",
        "",
        "| field | what |",
        "|---|---|",
    ]
    for name, doc in decision_fields().items():
        lines.append(f"| `{name}` | {_cell(doc)} |")
    lines += [
        "",
        "## Reasons",
        "",
        "`reason` is one of these (also the `reason` label of "
        "`streamscale_scaling_decisions_total`):",
        "",
        "| reason | what |",
        "|---|---|",
    ]
    for reason in Reason:
        lines.append(f"| `{reason.value}` | {_cell(REASONS.get(reason.value, ''))} |")
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """Path under ``docs/`` → Markdown, for every generated page."""
    return {
        "reference/settings.md": settings_page(),
        "reference/cli.md": cli_page(),
        "reference/metrics.md": metrics_page(),
        "reference/decision-log.md": decisions_page(),
    }
