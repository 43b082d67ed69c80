"""Autoscaler benchmark (issue 5): every built-in trace × every policy, against the oracle.

Run: ``.venv/bin/python benchmarks/autoscaler.py`` (about a minute on 2 cores). Prints one
Markdown table per trace, ratios against the oracle (the cheapest plan found with hindsight
that keeps time lag under 30 s), the executor-seconds ratio against a strict oracle (time lag
under the 5 s caught-up threshold), then a check of the ``rate`` policy's targets:

- drain time ≤ 1.2 × the oracle's and executor-seconds ≤ 1.2 × the oracle's;
- zero reversals; at most 2 scaling actions per step change of the input rate;
- a better (lower) product of the two ratios than the ``lag`` policy.

The scenario is the simulator's default (see ``ClusterModel``): 8 partitions, 1..8 executors
of 1 000 records/s each, 13 s executor start, 5 s kill, 5 s rescale pause, 10 s control
interval — larger than the 2-core local cluster (1..2 executors) so that policies differ.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from streamscale.autoscale import policy, simulator, traces

TARGET_RATIO = 1.2
MAX_ACTIONS_PER_STEP = 2


def _ratio(value: float, reference: float) -> float:
    if reference == 0:
        return 1.0 if value == 0 else float("inf")
    return value / reference


def _fmt(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.2f}"


def run(seed: int, target_utilization: float) -> bool:
    """Run and print everything; True when every target of ``rate`` is met."""
    model = simulator.ClusterModel(seed=seed)
    strict = replace(model, target_time_lag_s=model.caught_up_s)
    config = policy.PolicyConfig(
        min_executors=1,
        max_executors=8,
        scale_up_delay_s=model.start_delay_s,
        restart_pause_s=model.rescale_pause_s,
        target_utilization=target_utilization,
    )
    names = simulator.comparison_names(config)
    checks: list[tuple[str, str, bool]] = []
    started = time.perf_counter()
    for trace_name, make in traces.BUILTIN.items():
        trace = make()
        results = {
            name: simulator.simulate(trace, model, simulator.resolve(name, config, trace, model))
            for name in names
        }
        strict_plan = simulator.oracle(trace, strict, config.min_executors, config.max_executors)
        strict_cost = simulator.simulate(trace, strict, strict_plan).summary.executor_seconds
        oracle = results["oracle"].summary
        print(f"\n### trace `{trace_name}`\n")
        print(
            "| policy | drain s | max lag | max time lag s | executor-s | actions | reversals "
            "| drain ×oracle | exec-s ×oracle | product | exec-s ×strict |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        products: dict[str, float] = {}
        for name, result in results.items():
            s = result.summary
            drain_r = _ratio(s.drain_time_s, oracle.drain_time_s)
            cost_r = _ratio(s.executor_seconds, oracle.executor_seconds)
            products[name] = drain_r * cost_r
            print(
                f"| {name} | {s.drain_time_s} | {s.max_lag:,.0f} | {s.max_time_lag_s:.1f} "
                f"| {s.executor_seconds:,.0f} | {s.actions} | {s.reversals} | {_fmt(drain_r)} "
                f"| {_fmt(cost_r)} | {_fmt(products[name])} "
                f"| {_fmt(_ratio(s.executor_seconds, strict_cost))} |"
            )
        rate = results["rate"].summary
        checks += [
            (
                trace_name,
                f"drain ≤ {TARGET_RATIO}× oracle",
                rate.drain_time_s <= TARGET_RATIO * oracle.drain_time_s,
            ),
            (
                trace_name,
                f"executor-s ≤ {TARGET_RATIO}× oracle",
                rate.executor_seconds <= TARGET_RATIO * oracle.executor_seconds,
            ),
            (trace_name, "zero reversals", rate.reversals == 0),
            (trace_name, "product better than lag", products["rate"] < products["lag"]),
        ]
        if trace.step_changes:
            budget = MAX_ACTIONS_PER_STEP * trace.step_changes
            checks.append(
                (
                    trace_name,
                    f"actions ≤ {MAX_ACTIONS_PER_STEP}/step change ({rate.actions}/{budget})",
                    rate.actions <= budget,
                )
            )
    print("\n### targets of `rate`\n")
    print("| trace | target | met |")
    print("|---|---|---|")
    for trace_name, label, ok in checks:
        print(f"| {trace_name} | {label} | {'yes' if ok else '**no**'} |")
    elapsed = time.perf_counter() - started
    print(f"\n({elapsed:.0f} s, seed {seed}, rate target utilization {target_utilization})")
    return all(ok for _, _, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=0, help="jitter seed")
    parser.add_argument(
        "--target-utilization", type=float, default=0.7, help="rate policy (sensitivity runs)"
    )
    args = parser.parse_args()
    return 0 if run(args.seed, args.target_utilization) else 1


if __name__ == "__main__":
    sys.exit(main())
