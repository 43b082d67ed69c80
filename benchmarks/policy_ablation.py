"""What each rule of `rate` buys: the policy with one rule switched off, on both trace families
and the built-in traces (issue 23: no rule kept that the traces do not need).

    PYTHONPATH=src .venv/bin/python benchmarks/policy_ablation.py [--rules a,b] [--jobs N]

A rule is switched off by replacing its function in the policy module with what the policy
would do without it (``RULES``), in the worker processes only; ``decide`` looks its helpers up
at each call, so the rest of the policy is the code that runs. Each variant runs `rate` on the
tuning seeds (0-299), the evaluation seeds (1000-1099) and the held-out seeds (2000-2099) of
the generated family, on the generic and on the stateful cluster, and on the built-in traces
with their own clusters. It prints, per set, the seeds where `rate` breaks the objective and
the oracle does not, the seeds with a reversal and the median executor-seconds over the
oracle's, then how many of the 2,000 family runs and which built-in traces the switch changes
at all. The oracle's figures come from the family benchmark's caches
(``.streamscale/family-oracle*.json``), computed and kept there when missing (about 25
minutes for all six sets).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from autoscaler_family import load_oracles, oracle_cache, oracle_fingerprint, save_oracles
from streamscale.autoscale import family, simulator, traces
from streamscale.autoscale import policy as P

SETS = {
    "tuning": family.TUNING_SEEDS,
    "evaluation": family.EVALUATION_SEEDS,
    "held-out": range(2000, 2100),
}
SCENARIOS = ("generic", "stateful")
BUILTIN = ("step", "ramp", "spikes", "diurnal", "demo", "stateful")


def _topping_up(always: bool) -> Callable[[], None]:
    """Every scale-up sized as a top-up (``always``: no bet) or as a first step (a bet)."""

    def switch() -> None:
        sized = P._rate_wanted

        def wanted(*args: Any, topping_up: bool = False, **kwargs: Any) -> float:
            return sized(*args, topping_up=always, **kwargs)

        P._rate_wanted = wanted  # type: ignore[assignment]

    return switch


def _off(name: str, value: Callable[..., Any]) -> Callable[[], None]:
    return lambda: setattr(P, name, value)


RULES: dict[str, tuple[str, Callable[[], None]]] = {
    "none": ("the policy as it is", lambda: None),
    "outgrown": (
        "a count the input outgrows is topped up (outgrown_count)",
        _off("outgrown_count", lambda *a: False),
    ),
    "noise": (
        "a scale-down keeps headroom for the input's noise (noisy_rate)",
        _off("noisy_rate", lambda config, state, obs: obs.arrival_rate),
    ),
    "silence": (
        "an outage is not an end (scale_down_rate)",
        _off("scale_down_rate", lambda config, state, obs: obs.arrival_rate),
    ),
    "reserve": (
        "a stateful scale-down keeps a way back (reserve_holds)",
        _off("reserve_holds", lambda *a: True),
    ),
    "pause-cost": (
        "a scale-up is worth its pause (not_worth_its_pause)",
        _off("not_worth_its_pause", lambda *a: False),
    ),
    "budget-hold": (
        "a count short of the target is held within the budget (_budget_holds)",
        _off("_budget_holds", lambda *a: False),
    ),
    "riding": (
        "a scale-down may ride the latency budget (riding_count)",
        _off("riding_count", lambda *a, **k: None),
    ),
    "catch-up": (
        "an urgent backlog shortens the catch-up (catch_up_seconds)",
        _off("catch_up_seconds", lambda config, obs, capacity: config.catch_up_s),
    ),
    "bet-once": ("a top-up sizes for the whole input: the bet every time", _topping_up(False)),
    "bet": ("the first scale-up may bet on a short burst: no bet ever", _topping_up(True)),
}


def _switch_off(rule: str) -> None:
    RULES[rule][1]()


def _family_run(arg: tuple[str, int]) -> tuple[tuple[str, int], tuple[int, float, int]]:
    name, seed = arg
    scenario = simulator.scenario_named(name)
    trace = family.generate(seed)
    model = replace(scenario.model, seed=seed)
    config = scenario.policy_config(None)
    s = simulator.simulate(trace, model, simulator.resolve("rate", config, trace, model)).summary
    return arg, (s.slo_violation_s, s.executor_seconds, s.reversals)


def _builtin_run(name: str) -> tuple[str, tuple[int, float, int]]:
    trace = traces.load(name)
    scenario = simulator.scenario_for(name)
    config = scenario.policy_config(None)
    run = simulator.resolve("rate", config, trace, scenario.model)
    s = simulator.simulate(trace, scenario.model, run).summary
    return name, (s.slo_violation_s, s.executor_seconds, s.reversals)


def _oracles(jobs: int) -> dict[str, dict[int, simulator.Summary]]:
    """The oracle's figures on every seed of every set, per cluster (kept in the caches)."""
    out = {}
    seeds = [s for r in SETS.values() for s in r]
    for name in SCENARIOS:
        scenario = simulator.scenario_named(name)
        cache = oracle_cache(name)
        fingerprint = oracle_fingerprint(None, scenario)
        kept = load_oracles(cache, fingerprint)
        missing = [s for s in seeds if s not in kept]
        if missing:
            print(f"# {len(missing)} oracle plans to search on the {name} cluster", flush=True)
            with ProcessPoolExecutor(jobs) as pool:
                scores = pool.map(
                    simulator.score_seed, missing, [None] * len(missing), [scenario] * len(missing)
                )
                kept |= {s.seed: s.oracle for s in scores}
            save_oracles(cache, fingerprint, kept)
        out[name] = kept
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--rules", default=",".join(RULES), help="rules to switch off, one at a time"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    args = parser.parse_args()
    rules = [r for r in args.rules.split(",") if r]
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        print(f"unknown rule(s) {unknown}: one of {', '.join(RULES)}", file=sys.stderr)
        return 2
    if "none" not in rules:
        rules.insert(0, "none")
    started = time.perf_counter()
    oracles = _oracles(max(1, args.jobs))
    runs = [(name, seed) for name in SCENARIOS for r in SETS.values() for seed in r]
    results = {}
    for rule in rules:
        with ProcessPoolExecutor(
            max(1, args.jobs), initializer=_switch_off, initargs=(rule,)
        ) as pool:
            fam = dict(pool.map(_family_run, runs, chunksize=10))
            builtin = dict(pool.map(_builtin_run, BUILTIN))
        results[rule] = (fam, builtin)
    head = " | ".join(f"{n} {s}" for n in SCENARIOS for s in SETS)
    print(
        "Per set: seeds breaking the objective where the oracle does not / seeds with a "
        "reversal / median executor-s ×oracle.\n"
    )
    print(f"| rule switched off | {head} | family runs changed | built-in traces changed |")
    print("|---" * (3 + len(SCENARIOS) * len(SETS)) + "|")
    base_fam, base_builtin = results["none"]
    for rule in rules:
        fam, builtin = results[rule]
        cells = []
        for name in SCENARIOS:
            for seeds in SETS.values():
                o = oracles[name]
                broken = sum(
                    1 for s in seeds if o[s].slo_violation_s == 0 and fam[(name, s)][0] > 0
                )
                reversed_ = sum(1 for s in seeds if fam[(name, s)][2] > 0)
                ratios = [fam[(name, s)][1] / o[s].executor_seconds for s in seeds]
                cells.append(f"{broken} / {reversed_} / {statistics.median(ratios):.3f}")
        changed = sum(1 for run in runs if fam[run] != base_fam[run])
        traces_changed = [
            f"{n} {v[0]} s, {v[1]:,.0f}" for n, v in builtin.items() if v != base_builtin[n]
        ]
        print(
            f"| {rule}: {RULES[rule][0]} | {' | '.join(cells)} | {changed} of {len(runs)} | "
            f"{'; '.join(traces_changed) or 'none'} |"
        )
    print(f"\nbuilt-in traces with every rule (violation s, executor-s, reversals): {base_builtin}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
