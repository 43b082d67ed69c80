"""``streamscale simulate``: replay an input-rate trace against the autoscaling policies."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from streamscale.autoscale import family, peers, policy, simulator, traces
from streamscale.autoscale.capacity import Capacity, CapacityMethod
from streamscale.errors import ConfigError


def simulate(
    trace: str = typer.Option(
        "step",
        "--trace",
        help=f"Built-in trace ({', '.join(traces.BUILTIN)}), gen-N (the generated family's "
        "seed N, as benchmarks/autoscaler_family.py scores it), CSV file, or a real run's "
        "decisions.jsonl (its input replayed; with --calibrate on the same file: the run "
        "simulated)",
    ),
    policy_name: str = typer.Option(
        "rate",
        "--policy",
        help=f"rate, lag, a peer ({', '.join(peers.PEER_NAMES)}), fixed:N or oracle (ignored "
        "with --compare)",
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Run rate, lag, every peer, fixed at min and max, and the oracle",
    ),
    calibrate: Path | None = typer.Option(
        None,
        "--calibrate",
        help="A real run's decisions.jsonl: fit fixed cost and records/s per executor on its "
        "batches (and the control interval, scale-up delay) and simulate with them",
    ),
    show_actions: bool = typer.Option(
        False, "--actions", help="List every scaling action of every policy"
    ),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of the time series"),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per policy and line"),
    scenario_name: str | None = typer.Option(
        None,
        "--scenario",
        help="The cluster: generic, demo or stateful (the same input, with state that moves) "
        "[the trace's]",
    ),
    min_executors: int | None = typer.Option(None, help="Policy lower bound [scenario]"),
    max_executors: int | None = typer.Option(None, help="Policy upper bound [scenario]"),
    window: float | None = typer.Option(None, "--window", help="Stabilization window (s)"),
    tolerance: float = typer.Option(0.1, help="No change within this relative distance"),
    lag_threshold: float = typer.Option(10_000.0, help="lag policy: records per executor"),
    target_utilization: float | None = typer.Option(
        None, help="rate policy: target fraction of the fitted rate [policy default]"
    ),
    catch_up: float = typer.Option(300.0, "--catch-up", help="rate policy: backlog drain (s)"),
    max_up_factor: float = typer.Option(4.0, help="One scale-up multiplies by at most this"),
    scale_down_max_factor: float = typer.Option(
        0.6, help="Fraction of executors one scale-down may remove"
    ),
    surge_share: float = typer.Option(
        0.0,
        help="rate policy: a scale-down rides out a surge of this share of the input until "
        "a scale-up could follow it (0: none assumed)",
    ),
    reverse_for_slo: bool = typer.Option(
        False,
        "--reverse-for-slo",
        help="rate policy: a scale-up may reverse a recent scale-down once the time-lag "
        "objective is broken or a rising input is predicted to break it",
    ),
    warmup_batches: int = typer.Option(3, help="Batches after a rescale before deciding"),
    urgent_time_lag: float = typer.Option(
        30.0, help="Time lag (s) past which a backlog overrides the window after a scale-down"
    ),
    partitions: int | None = typer.Option(None, help="Input partitions [scenario]"),
    splits: int | None = typer.Option(None, help="Spark tasks per partition (minPartitions)"),
    executor_rate: float | None = typer.Option(
        None, help="Records/s per executor, net of the fixed cost [scenario]"
    ),
    fixed_cost: float | None = typer.Option(
        None, "--fixed-cost", help="Seconds every micro-batch costs [scenario]"
    ),
    trigger_interval: float | None = typer.Option(
        None, "--trigger-interval", help="Processing-time trigger (s) [scenario]"
    ),
    max_records_per_trigger: int | None = typer.Option(
        None, "--max-records-per-trigger", help="maxOffsetsPerTrigger (0: unlimited) [scenario]"
    ),
    start_delay: int | None = typer.Option(None, help="Executor request → first task (s)"),
    stop_delay: int | None = typer.Option(None, help="Executor kill → released (s)"),
    rescale_pause: int | None = typer.Option(None, help="No batch for this long on rescale (s)"),
    warmup: float | None = typer.Option(None, help="First batch after executors join: extra s"),
    control_interval: int | None = typer.Option(None, help="Seconds between decisions"),
    jitter: float | None = typer.Option(None, help="Per-second throughput spread (±fraction)"),
    seed: int | None = typer.Option(None, help="Jitter seed [0; a generated trace's own seed]"),
    target_time_lag: float | None = typer.Option(
        None, "--slo", "--target-time-lag", help="SLO on time lag (s): scoring and the oracle"
    ),
    caught_up: float | None = typer.Option(None, help="Time lag above this is drain time (s)"),
    tail: int = typer.Option(300, help="CSV traces: seconds the last rate holds"),
) -> None:
    """Replay a trace on a simulated micro-batch cluster with the production policy code.

    Options marked [scenario] default to the trace's scenario (the demo's cluster for
    ``--trace demo``, the stateful one for ``--trace stateful``, the generic one otherwise, or
    the one ``--scenario`` names); ``--calibrate`` replaces what a real run measured.
    """
    try:
        generated = family.seed_of(trace)
        loaded = traces.load(trace, tail) if generated is None else family.generate(generated)
        if seed is None:
            seed = 0 if generated is None else generated
        scenario = (
            simulator.scenario_for(loaded.name if trace in traces.BUILTIN else "")
            if scenario_name is None
            else simulator.scenario_named(scenario_name)
        )
        overrides: dict[str, Any] = {
            "executor_rate": executor_rate,
            "fixed_cost_s": fixed_cost,
            "trigger_interval_s": trigger_interval,
            "partitions": partitions,
            "splits_per_partition": splits,
            "start_delay_s": start_delay,
            "stop_delay_s": stop_delay,
            "rescale_pause_s": rescale_pause,
            "warmup_s": warmup,
            "control_interval_s": control_interval,
            "rate_jitter": jitter,
            "caught_up_s": caught_up,
            "target_time_lag_s": target_time_lag,
        }
        model = replace(
            scenario.model, seed=seed, **{k: v for k, v in overrides.items() if v is not None}
        )
        if max_records_per_trigger is not None:
            limit = max_records_per_trigger or None
            model = replace(model, max_records_per_trigger=limit)
        calibration = None
        if calibrate is not None:
            calibration = _calibration(_read_log(calibrate), fixed_cost, executor_rate)
            model = calibration.apply(model)
        scenario = replace(
            scenario,
            model=model,
            min_executors=scenario.min_executors if min_executors is None else min_executors,
            max_executors=scenario.max_executors if max_executors is None else max_executors,
            stabilization_window_s=(scenario.stabilization_window_s if window is None else window),
        )
        model = replace(model, reversal_window_s=scenario.stabilization_window_s)
        base = policy.PolicyConfig(
            tolerance=tolerance,
            lag_threshold=lag_threshold,
            catch_up_s=catch_up,
            max_up_factor=max_up_factor,
            scale_down_max_factor=scale_down_max_factor,
            warmup_batches=warmup_batches,
            urgent_time_lag_s=urgent_time_lag,
            surge_share=surge_share,
            reverse_for_slo=reverse_for_slo,
        )
        if target_utilization is not None:
            base = replace(base, target_utilization=target_utilization)
        config = scenario.policy_config(base)
        names = simulator.comparison_names(config) if compare else (policy_name,)
        results = [
            simulator.simulate(loaded, model, simulator.resolve(name, config, loaded, model))
            for name in names
        ]
    except ValueError as exc:  # TraceError included
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if plot is not None:
        from streamscale.experiment import ExtraMissingError, require_extra

        try:
            require_extra("--plot", ("matplotlib",))
        except ExtraMissingError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None

    if as_json:
        if calibration is not None:
            typer.echo(json.dumps({"calibration": _calibration_dict(calibration)}))
        for result in results:
            typer.echo(json.dumps({"policy": result.strategy, **result.summary.as_dict()}))
    else:
        if calibration is not None:
            _print_calibration(calibration, model)
        _print_table(loaded.name, results)
    if show_actions and not as_json:
        for result in results:
            moves = [d for d in result.decisions if d.desired != d.current]
            steps = ", ".join(f"{d.t} s {d.current}→{d.desired} ({d.reason})" for d in moves)
            typer.echo(f"{result.strategy}: {steps or 'no action'}")
    if plot is not None:
        write_plot(plot, loaded.name, results)
        if not as_json:
            typer.echo(f"plot written to {plot}")


def _read_log(path: Path) -> list[dict[str, Any]]:
    """The records of a decision log (a ValueError naming the file and line otherwise)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from None
    return traces.parse_decision_log(text, str(path))


def _calibration(
    records: list[dict[str, Any]], fixed_cost: float | None, executor_rate: float | None
) -> simulator.Calibration:
    """The log's calibration; ``--fixed-cost`` and ``--executor-rate``, when given, stand in
    for the capacity it fits (the rest is calibrated): a run whose batches all ran at one size
    (at the batch limit, or all small) cannot tell the fixed cost from the rate."""
    calibration = simulator.calibrate(records)
    fitted = calibration.capacity
    if not fitted.known and (fixed_cost is None or executor_rate is None):
        raise ConfigError(
            f"the decision log does not measure the capacity ({fitted.note}): give both "
            "--fixed-cost and --executor-rate"
        )
    if fixed_cost is None and executor_rate is None:
        return calibration
    note = "given on the command line"
    given = Capacity(
        fitted.fixed_cost_s if fixed_cost is None else fixed_cost,
        fitted.rate if executor_rate is None else executor_rate,
        CapacityMethod.FIT,
        fitted.batches,
        note if fitted.known else f"{note}; {fitted.note}",
    )
    return replace(calibration, capacity=given)


def _calibration_dict(calibration: simulator.Calibration) -> dict[str, Any]:
    capacity = calibration.capacity
    return {
        "batches": calibration.batches,
        "fixed_cost_s": capacity.fixed_cost_s,
        "executor_rate": capacity.rate,
        "method": str(capacity.method),
        "note": capacity.note,
        "control_interval_s": calibration.control_interval_s,
        "start_delay_s": calibration.start_delay_s,
    }


def _print_calibration(calibration: simulator.Calibration, model: simulator.ClusterModel) -> None:
    capacity = calibration.capacity
    assert capacity.fixed_cost_s is not None and capacity.rate is not None
    typer.echo(
        f"calibrated on {calibration.batches} batches: fixed cost {capacity.fixed_cost_s:.3f} s, "
        f"{capacity.rate:,.0f} records/s per executor ({capacity.note}); control interval "
        f"{model.control_interval_s} s, start delay {model.start_delay_s} s"
    )


def _print_table(trace_name: str, results: list[simulator.SimResult]) -> None:
    reference = next((r.summary for r in results if r.strategy == "oracle"), None)
    table = Table(title=f"trace {trace_name}")
    for column in (
        "policy",
        "SLO violation s",
        "drain s",
        "max lag",
        "max time lag s",
        "executor-s",
        "actions",
        "reversals",
    ):
        table.add_column(column, justify="left" if column == "policy" else "right")
    if reference is not None:
        table.add_column("drain/oracle", justify="right")
        table.add_column("exec-s/oracle", justify="right")
    for result in results:
        s = result.summary
        row = [
            result.strategy,
            str(s.slo_violation_s),
            str(s.drain_time_s),
            f"{s.max_lag:,.0f}",
            f"{s.max_time_lag_s:.1f}",
            f"{s.executor_seconds:,.0f}",
            str(s.actions),
            str(s.reversals),
        ]
        if reference is not None:
            row += [
                ratio(s.drain_time_s, reference.drain_time_s),
                ratio(s.executor_seconds, reference.executor_seconds),
            ]
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    console.print(table)


def ratio(value: float, reference: float) -> str:
    """``value / reference`` for a table cell (``n/a`` when the reference is 0)."""
    if reference == 0:
        return "n/a" if value else "1.00"
    return f"{value / reference:.2f}"


def write_plot(path: Path, trace_name: str, results: list[simulator.SimResult]) -> None:
    """Input rate, time lag and requested executors of every result, stacked, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, lag_ax, exec_ax) = plt.subplots(3, 1, sharex=True, figsize=(11, 8))
    seconds = range(len(results[0].input_rate))
    rate_ax.plot(seconds, results[0].input_rate, color="black", label="input")
    for result in results:
        rate_ax.plot(seconds, result.processed, linewidth=0.6, label=result.strategy)
        lag_ax.plot(seconds, result.time_lag_s, label=result.strategy)
        exec_ax.step(seconds, result.requested, where="post", label=result.strategy)
    # A fixed count too small for the trace diverges: keep the axis on the others.
    bounded = [max(r.time_lag_s) for r in results if not r.strategy.startswith("fixed:")]
    if bounded and max(bounded) > 0:
        lag_ax.set_ylim(0, 1.5 * max(bounded))
    rate_ax.set_ylabel("records/s")
    lag_ax.set_ylabel("time lag (s, clipped)")
    exec_ax.set_ylabel("executors")
    exec_ax.set_xlabel("seconds")
    rate_ax.set_title(f"streamscale simulate — trace {trace_name}")
    for ax in (rate_ax, lag_ax, exec_ax):
        ax.grid(alpha=0.3)
    exec_ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
