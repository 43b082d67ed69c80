"""Autoscaler benchmark (issues 5, 12): every built-in trace × every policy, against the oracle.

Run: ``.venv/bin/python benchmarks/autoscaler.py`` (under a minute on 2 cores; exit code 1
while a check fails). Each trace runs in its own scenario (``simulator.scenario_for``: the
generic cluster of 1..8 executors, or the demo's 1..2), with the production policy code, and
every strategy is scored under one rule: the SLO on time lag (30 s), SLO-violation seconds,
executor-seconds, actions, reversals. The oracle is the cheapest plan found with hindsight that
keeps the time lag under the SLO. Checks of the ``rate`` policy, per trace:

- no SLO violation where the oracle has none;
- executor-seconds ≤ 1.25 × the oracle's;
- zero reversals;
- beats ``lag`` on both SLO-violation seconds and executor-seconds (no worse on either,
  better on at least one).

It ends with a real run replayed: the input of a real ``streamscale demo`` run, rebuilt from
its ``decisions.jsonl`` (``--real``, default the committed log of a run at the defaults), on
the demo scenario calibrated from the same log; its actions are checked against the real ones
(same directions, each within one control interval).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from streamscale.autoscale import policy, simulator, traces

COST_RATIO = 1.25
ROOT = Path(__file__).resolve().parent.parent
REAL_DEMO_LOG = ROOT / "tests" / "unit" / "autoscale" / "demo_decisions.jsonl"


def _ratio(value: float, reference: float) -> float:
    if reference == 0:
        return 1.0 if value == 0 else float("inf")
    return value / reference


def _fmt(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.2f}"


def replay_real(path: Path) -> tuple[str, str, bool]:
    """Print a real run's actions beside the simulated ones; the check of the replay."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    replayed = simulator.replay(records, simulator.DEMO)
    capacity = replayed.calibration.capacity
    print(f"\n### a real `streamscale demo` run replayed ({path.name})\n")
    print(
        f"Calibrated on its {replayed.calibration.batches} batches: fixed cost "
        f"{capacity.fixed_cost_s or 0:.2f} s, {capacity.rate or 0:,.0f} records/s per executor "
        f"({capacity.method}); control interval {replayed.model.control_interval_s} s; input "
        f"rebuilt from the log ({len(replayed.trace.points)} steps, "
        f"{replayed.trace.duration_s} s).\n"
    )
    print("| action | real s | simulated s | difference s |")
    print("|---|---:|---:|---:|")
    simulated = replayed.actions
    for i in range(max(len(replayed.real), len(simulated))):
        real = replayed.real[i] if i < len(replayed.real) else None
        sim = simulated[i] if i < len(simulated) else None
        label = next(f"{a.current} → {a.desired} ({a.reason})" for a in (real, sim) if a)
        diff = f"{sim.t - real.t:+.1f}" if real and sim else "–"
        print(f"| {label} | {real.t if real else '–'} | {sim.t if sim else '–'} | {diff} |")
    s = replayed.simulated.summary
    real_max = max((r.get("max_time_lag_s") or 0.0 for r in records), default=0.0)
    print(
        f"\nmax time lag: real {real_max:.1f} s, simulated {s.max_time_lag_s:.1f} s; "
        f"simulated executor-s {s.executor_seconds:,.0f}"
    )
    ok = replayed.matches()
    label = f"real demo run: same actions, each within {replayed.model.control_interval_s} s"
    return ("demo (real)", label, ok)


def run(seed: int, target_utilization: float | None, real: Path | None) -> bool:
    """Run and print everything; True when every check of ``rate`` passes."""
    checks: list[tuple[str, str, bool]] = []
    started = time.perf_counter()
    demo_decisions: list[simulator.SimDecision] = []
    for trace_name, make in traces.BUILTIN.items():
        trace = make()
        scenario = simulator.scenario_for(trace_name)
        model = replace(scenario.model, seed=seed)
        base = policy.PolicyConfig()
        if target_utilization is not None:
            base = replace(base, target_utilization=target_utilization)
        config = scenario.policy_config(base)
        results = {
            name: simulator.simulate(trace, model, simulator.resolve(name, config, trace, model))
            for name in simulator.comparison_names(config)
        }
        oracle = results["oracle"].summary
        print(f"\n### trace `{trace_name}`\n")
        print(
            "| policy | SLO violation s | executor-s | actions | reversals | max time lag s "
            "| drain s | max lag | exec-s ×oracle |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, result in results.items():
            s = result.summary
            print(
                f"| {name} | {s.slo_violation_s} | {s.executor_seconds:,.0f} | {s.actions} "
                f"| {s.reversals} | {s.max_time_lag_s:.1f} | {s.drain_time_s} | {s.max_lag:,.0f} "
                f"| {_fmt(_ratio(s.executor_seconds, oracle.executor_seconds))} |"
            )
        rate = results["rate"].summary
        lag = results["lag"].summary
        cost = _ratio(rate.executor_seconds, oracle.executor_seconds)
        no_worse = (
            rate.slo_violation_s <= lag.slo_violation_s
            and rate.executor_seconds <= lag.executor_seconds
        )
        better = (
            rate.slo_violation_s < lag.slo_violation_s
            or rate.executor_seconds < lag.executor_seconds
        )
        checks += [
            (
                trace_name,
                f"no SLO violation where the oracle has none ({rate.slo_violation_s} s, "
                f"oracle {oracle.slo_violation_s} s)",
                oracle.slo_violation_s > 0 or rate.slo_violation_s == 0,
            ),
            (trace_name, f"executor-s ≤ {COST_RATIO}× oracle ({_fmt(cost)})", cost <= COST_RATIO),
            (trace_name, f"zero reversals ({rate.reversals})", rate.reversals == 0),
            (
                trace_name,
                f"beats lag on SLO violation and executor-s ({rate.slo_violation_s} s vs "
                f"{lag.slo_violation_s} s, {rate.executor_seconds:,.0f} vs "
                f"{lag.executor_seconds:,.0f})",
                no_worse and better,
            ),
        ]
        if trace_name == "demo":
            demo_decisions = list(results["rate"].decisions)
    if real is not None:
        checks.append(replay_real(real))
    print("\n### checks of `rate`\n")
    print("| trace | check | met |")
    print("|---|---|---|")
    for trace_name, label, ok in checks:
        print(f"| {trace_name} | {label} | {'yes' if ok else '**no**'} |")
    if demo_decisions:
        print("\n### `rate` on the demo profile: actions (seconds from the pipeline's start)\n")
        actions = [d for d in demo_decisions if d.desired != d.current]
        for d in actions:
            print(f"- {d.t} s: {d.current} → {d.desired} ({d.reason})")
        if not actions:
            print("- none")
        fitted = next((d for d in reversed(demo_decisions) if d.executor_rate), None)
        if fitted is not None:
            print(
                f"- last capacity seen: fixed cost {fitted.fixed_cost_s:.2f} s, "
                f"{fitted.executor_rate:,.0f} records/s per executor"
            )
    elapsed = time.perf_counter() - started
    print(f"\n({elapsed:.0f} s, seed {seed})")
    return all(ok for _, _, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=0, help="jitter seed")
    parser.add_argument(
        "--target-utilization", type=float, default=None, help="rate policy (sensitivity runs)"
    )
    parser.add_argument(
        "--real",
        type=Path,
        default=REAL_DEMO_LOG,
        help="a real demo run's decisions.jsonl to replay (default: the committed one)",
    )
    args = parser.parse_args()
    return 0 if run(args.seed, args.target_utilization, args.real) else 1


if __name__ == "__main__":
    sys.exit(main())
