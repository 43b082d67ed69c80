"""``streamscale simulate``: replay an input-rate trace against the autoscaling policies."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from streamscale.autoscale import policy, simulator, traces


def simulate(
    trace: str = typer.Option(
        "step", "--trace", help=f"Built-in trace ({', '.join(traces.BUILTIN)}) or CSV file"
    ),
    policy_name: str = typer.Option(
        "rate", "--policy", help="rate, lag, fixed:N or oracle (ignored with --compare)"
    ),
    compare: bool = typer.Option(
        False, "--compare", help="Run rate, lag, fixed at min and max, and the oracle"
    ),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of the time series"),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per policy and line"),
    min_executors: int = typer.Option(1, help="Policy lower bound"),
    max_executors: int = typer.Option(8, help="Policy upper bound"),
    window: float = typer.Option(60.0, "--window", help="Stabilization window (s)"),
    tolerance: float = typer.Option(0.1, help="No change within this relative distance"),
    lag_threshold: float = typer.Option(10_000.0, help="lag policy: records per executor"),
    target_utilization: float = typer.Option(0.7, help="rate policy: target busy fraction"),
    catch_up: float = typer.Option(300.0, "--catch-up", help="rate policy: backlog drain (s)"),
    max_up_factor: float = typer.Option(4.0, help="One scale-up multiplies by at most this"),
    scale_down_max_factor: float = typer.Option(
        0.6, help="Fraction of executors one scale-down may remove"
    ),
    partitions: int = typer.Option(8, help="Input partitions"),
    splits: int = typer.Option(1, help="Spark tasks per partition (minPartitions split)"),
    executor_rate: float = typer.Option(1000.0, help="Records/s per executor"),
    start_delay: int = typer.Option(13, help="Executor request → first task (s)"),
    stop_delay: int = typer.Option(5, help="Executor kill → released (s)"),
    rescale_pause: int = typer.Option(5, help="Processing pause on rescale (s)"),
    control_interval: int = typer.Option(10, help="Seconds between decisions"),
    jitter: float = typer.Option(0.05, help="Per-second throughput spread (±fraction)"),
    seed: int = typer.Option(0, help="Jitter seed"),
    target_time_lag: float = typer.Option(30.0, help="Oracle: time lag to stay under (s)"),
    caught_up: float = typer.Option(5.0, help="Time lag above this counts as drain time (s)"),
    tail: int = typer.Option(300, help="CSV traces: seconds the last rate holds"),
) -> None:
    """Replay a trace on a simulated cluster with the production policy code."""
    try:
        loaded = traces.load(trace, tail)
        model = simulator.ClusterModel(
            executor_rate=executor_rate,
            partitions=partitions,
            splits_per_partition=splits,
            start_delay_s=start_delay,
            stop_delay_s=stop_delay,
            rescale_pause_s=rescale_pause,
            control_interval_s=control_interval,
            rate_jitter=jitter,
            seed=seed,
            caught_up_s=caught_up,
            target_time_lag_s=target_time_lag,
            reversal_window_s=window,
        )
        config = policy.PolicyConfig(
            min_executors=min_executors,
            max_executors=max_executors,
            stabilization_window_s=window,
            tolerance=tolerance,
            lag_threshold=lag_threshold,
            target_utilization=target_utilization,
            catch_up_s=catch_up,
            max_up_factor=max_up_factor,
            scale_down_max_factor=scale_down_max_factor,
            scale_up_delay_s=start_delay,
            restart_pause_s=rescale_pause,
        )
        names = simulator.comparison_names(config) if compare else (policy_name,)
        results = [
            simulator.simulate(loaded, model, simulator.resolve(name, config, loaded, model))
            for name in names
        ]
    except ValueError as exc:  # TraceError included
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    if as_json:
        for result in results:
            typer.echo(json.dumps({"policy": result.strategy, **result.summary.as_dict()}))
    else:
        _print_table(loaded.name, results)
    if plot is not None:
        write_plot(plot, loaded.name, results)
        if not as_json:
            typer.echo(f"plot written to {plot}")


def _print_table(trace_name: str, results: list[simulator.SimResult]) -> None:
    reference = next((r.summary for r in results if r.strategy == "oracle"), None)
    table = Table(title=f"trace {trace_name}")
    for column in (
        "policy",
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
        console = Console(width=132)
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
