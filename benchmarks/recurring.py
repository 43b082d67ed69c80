"""`rate` with and without its forecast on loads that repeat, against the oracle (issue 38).

Run: ``.venv/bin/python benchmarks/recurring.py`` (the recurring traces
``recurring.RECURRING_SEEDS``, 4000-4011: daily cycles, sales every 5-10 min, both, with
noise, some with a sale that does not happen; exit code 1 while a check fails).
``--scenario stateful`` runs them on the stateful cluster; ``--peers`` adds every peer.

Each trace runs `rate` as it is (``PolicyConfig.forecast`` off), `rate` with its forecast
(``forecast`` on: the period found from its own input history, :mod:`streamscale.autoscale.
forecast`), and the oracle (kept in ``--oracle-cache``, default
``.streamscale/recurring-oracle[-stateful].json``, under a fingerprint of the code it comes
from). Checks of `rate` with its forecast (issue 38's done-when), per trace: no SLO
violation where the oracle has none; executor-seconds ≤ 1.15 × the oracle's.
``--family 1000-1099`` gives the third check instead, on the generated family's seeds (no
oracle): `rate` with its forecast no worse than without it by more than 2 % of
executor-seconds, and with no more violation seconds, on every seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from autoscaler_family import load_oracles, parse_seeds, save_oracles
from streamscale.autoscale import (
    capacity,
    family,
    peers,
    recurring,
    scale_cost,
    simulator,
    traces,
)

COST_RATIO = 1.15
ELSEWHERE = 0.02
"""Elsewhere, the forecast may cost at most this share of executor-seconds more on a seed."""


def with_and_without(
    seed: int, scenario: simulator.Scenario
) -> tuple[int, simulator.Summary, simulator.Summary]:
    """`rate` without and with its forecast on the family's trace of ``seed``."""
    trace = family.generate(seed)
    model = dataclasses.replace(scenario.model, seed=seed)
    config = scenario.policy_config()
    off = simulator.simulate(trace, model, config).summary
    on = simulator.simulate(trace, model, dataclasses.replace(config, forecast=True)).summary
    return seed, off, on


def elsewhere(seeds: list[int], scenario: simulator.Scenario, jobs: int) -> bool:
    """The third check on the family's seeds; True when it holds on every one."""
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        pairs = list(pool.map(with_and_without, seeds, [scenario] * len(seeds)))
    changed = [(s, off, on) for s, off, on in pairs if off != on]
    worse = [
        (s, off, on)
        for s, off, on in pairs
        if on.executor_seconds > off.executor_seconds * (1 + ELSEWHERE)
        or on.slo_violation_s > off.slo_violation_s
    ]
    print(
        f"family seeds {seeds[0]}-{seeds[-1]}: the forecast changes `rate`'s figures on "
        f"{len(changed)} of {len(seeds)} seeds, makes them worse (more than {ELSEWHERE:.0%} "
        f"executor-s, or more violation s) on {len(worse)}\n"
    )
    print("| seed | violation s without / with | executor-s without / with |")
    print("|---:|---|---|")
    for s, off, on in changed:
        print(
            f"| {s} | {off.slo_violation_s} / {on.slo_violation_s} "
            f"| {off.executor_seconds:,.0f} / {on.executor_seconds:,.0f} |"
        )
    return not worse


def fingerprint(scenario: simulator.Scenario) -> str:
    """What the oracle's figures depend on (as ``autoscaler_family.oracle_fingerprint``, and
    the recurring traces' module)."""
    digest = hashlib.sha256()
    for module in (simulator, family, traces, capacity, scale_cost, recurring):
        digest.update(Path(str(module.__file__)).read_bytes())
    digest.update(repr(scenario).encode())
    return digest.hexdigest()[:16]


def score(
    seed: int, scenario: simulator.Scenario, names: tuple[str, ...], known: simulator.Summary | None
) -> dict[str, simulator.Summary]:
    """Every strategy's figures on the recurring trace of ``seed``."""
    trace = recurring.generate(seed)
    model = dataclasses.replace(scenario.model, seed=seed)
    config = scenario.policy_config()
    out = {
        "rate": simulator.simulate(trace, model, config).summary,
        "rate+forecast": simulator.simulate(
            trace, model, dataclasses.replace(config, forecast=True)
        ).summary,
    }
    for name in names:
        out[name] = simulator.simulate(
            trace, model, simulator.resolve(name, config, trace, model)
        ).summary
    if known is None:
        plan = simulator.oracle(trace, model, config.min_executors, config.max_executors)
        known = simulator.simulate(trace, model, plan).summary
    out["oracle"] = known
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scenario", choices=simulator.SCENARIO_NAMES, default="generic")
    parser.add_argument("--peers", action="store_true", help="also run every peer")
    parser.add_argument("--oracle-cache", default=None, help="file keeping the oracle's figures")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--family", type=parse_seeds, default=None, help="the check elsewhere, on these seeds"
    )
    args = parser.parse_args()
    scenario = simulator.scenario_named(args.scenario)
    if args.family:
        return 0 if elsewhere(args.family, scenario, args.jobs) else 1
    suffix = "" if args.scenario == "generic" else f"-{args.scenario}"
    cache = Path(args.oracle_cache or f".streamscale/recurring-oracle{suffix}.json")
    key = fingerprint(scenario)
    oracles = load_oracles(cache, key)
    kept = len(oracles)
    names = peers.PEER_NAMES if args.peers else ()
    seeds = list(recurring.RECURRING_SEEDS)
    started = time.perf_counter()
    results: dict[int, dict[str, simulator.Summary]] = {}
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        futures = {pool.submit(score, s, scenario, names, oracles.get(s)): s for s in seeds}
        for future in as_completed(futures):  # each oracle kept as soon as it is known
            results[futures[future]] = future.result()
            oracles[futures[future]] = results[futures[future]]["oracle"]
            save_oracles(cache, key, oracles)
    results = dict(sorted(results.items()))
    print(f"recurring traces on the {args.scenario} cluster\n")
    columns = ("rate", "rate+forecast", *names, "oracle")
    print(
        "| seed | trace | " + " | ".join(f"{c}: violation s / executor-s" for c in columns) + " |"
    )
    print("|---:|---|" + "---|" * len(columns))
    checks: list[tuple[str, bool]] = []
    for seed, result in results.items():
        oracle = result["oracle"]
        cells = [
            f"{result[c].slo_violation_s} / {result[c].executor_seconds:,.0f}" for c in columns
        ]
        print(f"| {seed} | {recurring.draw(seed).describe()[:60]}… | " + " | ".join(cells) + " |")
        with_it = result["rate+forecast"]
        ratio = with_it.executor_seconds / oracle.executor_seconds
        before = result["rate"].executor_seconds / oracle.executor_seconds
        clean = oracle.slo_violation_s > 0 or with_it.slo_violation_s == 0
        checks.append(
            (
                f"{seed}: no violation where the oracle has none ({with_it.slo_violation_s} s, "
                f"oracle {oracle.slo_violation_s} s), executor-s {ratio:.3f}× the oracle's "
                f"(without the forecast {before:.3f}×)",
                clean and ratio <= COST_RATIO,
            )
        )
    print("\n### checks of `rate` with its forecast\n")
    print("| check | met |")
    print("|---|---|")
    for label, ok in checks:
        print(f"| {label} | {'yes' if ok else '**no**'} |")
    print(
        f"\n({time.perf_counter() - started:.0f} s; oracle figures kept from earlier runs: {kept})"
    )
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
