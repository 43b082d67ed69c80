"""Autoscaler on a generated trace family (issue 23): `rate` and `lag` against the oracle.

Run: ``.venv/bin/python benchmarks/autoscaler_family.py`` (the 100 evaluation seeds,
1000-1099, about 2 minutes on two cores the first time; exit code 1 while a check fails).
``--tuning`` scores the tuning seeds (0-299) instead, ``--seeds 3,7,20-29`` any others
(2000-2099: the held-out seeds); ``--per-seed`` prints every seed's figures;
``--surge-share 0.5`` scores ``rate`` with that ``PolicyConfig.surge_share`` (a scale-down
keeps the count that rides out a surge of half the input until a scale-up could follow it);
``--reverse-for-slo`` with ``PolicyConfig.reverse_for_slo`` (a scale-up may reverse a recent
scale-down as soon as a rising input is predicted to break the objective).
``--scenario stateful`` runs the same traces on the ``stateful`` trace's cluster
(``simulator.STATEFUL``: 250 bytes of state per record, reloaded at 25 MB/s when it moves), so
that a change for stateful queries is scored on traces it was not tuned on either.
``--late-oracle`` also runs the oracle's plan one decision late (``Plan.delayed``: the same
foresight, each change made one control interval after the oracle's) and counts the seeds
where that breaks the objective: how much of the oracle's clean record is foresight that no
policy deciding from what it has seen can have. It computes every oracle plan (no cache).
``--peers`` also runs every peer (``peers.PEER_NAMES``: Flink's autoscaler, DS2, KEDA with the
HPA, Spark's dynamic allocation and the DStreams rule, at their defaults and tuned) and prints
them beside `rate`, `lag` and the oracle, with issue 38's checks of `rate` against them;
``--fresh`` scores the seeds drawn once for issue 38 (3000-3099, ``family.FRESH_SEEDS``).
One seed's run, its actions and their reasons: ``streamscale simulate --trace gen-N --compare
--actions`` (``--plot gen-N.png`` draws it).

Each seed draws a trace (``family.generate``: base load with noise, daily cycles, ramps, flash
sales, spikes, input outages) and runs it on the generic cluster (1..8 executors) with the
throughput jitter of the same seed. The evaluation seeds are kept out of the tuning set: the
policy was changed looking at the tuning seeds, the built-in traces and the unit test's guard
seeds 5000-5003 only (``family.TUNING_SEEDS``, ``family.EVALUATION_SEEDS``).

The oracle's plan does not depend on the policies and its search takes most of the time: its
figures are kept in ``--oracle-cache`` (default ``.streamscale/family-oracle.json``, ``none``:
not kept), under a fingerprint of the code and model they come from (the simulator, the
family, the traces, the capacity model, the scale cost; not the policy), and computed again
when any of them changes. Seeds run in ``--jobs`` processes (default: one per core).

Checks of ``rate`` (issue 23's done-when), over the seeds scored:

- 0 reversals on every seed;
- no SLO violation on a seed where the oracle has none;
- median executor-seconds ≤ 1.15 × the oracle's.

Percentiles are nearest-rank (p95 of 100 seeds: the 95th smallest).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

from streamscale.autoscale import capacity, family, peers, policy, scale_cost, simulator, traces

MEDIAN_RATIO = 1.15
DOMINATED_SHARE = 0.05
"""Issue 38: a peer may beat `rate` on all three figures together on at most this share of
the seeds."""


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in (0, 1])."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def parse_seeds(text: str) -> list[int]:
    """``"3,7,20-29"`` → [3, 7, 20, ..., 29]."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def report(scores: Sequence[simulator.FamilyScore], per_seed: bool) -> bool:
    """Print the distribution and the checks; True when every check of ``rate`` passes."""
    if per_seed:
        print(
            "| seed | SLO violation s (rate / lag / oracle) | executor-s ×oracle (rate / lag) "
            "| reversals (rate / lag) | actions (rate / oracle) | trace |"
        )
        print("|---:|---|---|---|---|---|")
        for s in scores:
            print(
                f"| {s.seed} | {s.rate.slo_violation_s} / {s.lag.slo_violation_s} / "
                f"{s.oracle.slo_violation_s} | {s.ratio('rate'):.2f} / {s.ratio('lag'):.2f} "
                f"| {s.rate.reversals} / {s.lag.reversals} | {s.rate.actions} / "
                f"{s.oracle.actions} | {s.description} |"
            )
        print()
    feasible = [s for s in scores if s.oracle.slo_violation_s == 0]
    print(
        f"{len(scores)} seeds ({scores[0].seed}-{scores[-1].seed}); the oracle keeps the SLO on "
        f"{len(feasible)}.\n"
    )
    print(
        "| policy | reversals: max per seed | seeds with a reversal | seeds with an SLO "
        "violation the oracle has not | their violation s (total) | executor-s ×oracle: "
        "median | p95 | max |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("rate", "lag"):
        summaries = [getattr(s, name) for s in scores]
        ratios = [s.ratio(name) for s in scores]
        beyond = [s for s in scores if s.violates_beyond_oracle(name)]
        violation = sum(getattr(s, name).slo_violation_s for s in beyond)
        print(
            f"| {name} | {max(x.reversals for x in summaries)} "
            f"| {sum(1 for x in summaries if x.reversals)} | {len(beyond)} | {violation} "
            f"| {statistics.median(ratios):.3f} | {percentile(ratios, 0.95):.3f} "
            f"| {max(ratios):.3f} |"
        )
    rate_ratios = [s.ratio("rate") for s in scores]
    reversing = [s.seed for s in scores if s.rate.reversals]
    violating = [s.seed for s in scores if s.violates_beyond_oracle("rate")]
    median = statistics.median(rate_ratios)
    checks = [
        (f"0 reversals on every seed (seeds with one: {reversing or 'none'})", not reversing),
        (
            f"no SLO violation where the oracle has none (seeds: {violating or 'none'})",
            not violating,
        ),
        (
            f"median executor-s ≤ {MEDIAN_RATIO}× the oracle's ({median:.3f})",
            median <= MEDIAN_RATIO,
        ),
    ]
    print("\n### checks of `rate`\n")
    print("| check | met |")
    print("|---|---|")
    for label, ok in checks:
        print(f"| {label} | {'yes' if ok else '**no**'} |")
    return all(ok for _, ok in checks)


def dominates(peer: simulator.Summary, rate: simulator.Summary) -> bool:
    """``peer`` beats ``rate`` on violation seconds, executor-seconds and reversals together:
    no worse on any of the three, better on at least one."""
    ours = (rate.slo_violation_s, rate.executor_seconds, rate.reversals)
    theirs = (peer.slo_violation_s, peer.executor_seconds, peer.reversals)
    return all(t <= o for t, o in zip(theirs, ours, strict=True)) and theirs != ours


@dataclasses.dataclass(frozen=True)
class Figures:
    """Every policy's figures on one seed; the oracle's when it was run."""

    seed: int
    summaries: dict[str, simulator.Summary]
    oracle: simulator.Summary | None

    @classmethod
    def of(cls, score: simulator.FamilyScore, names: Sequence[str]) -> Figures:
        summaries = {name: score.summary(name) for name in ("rate", "lag", *names)}
        return cls(score.seed, summaries, score.oracle)

    def beyond_oracle(self, name: str) -> bool | None:
        """A violation where the oracle has none (None: the oracle was not run)."""
        if self.oracle is None:
            return None
        return self.oracle.slo_violation_s == 0 and self.summaries[name].slo_violation_s > 0

    def ratio(self, name: str) -> float | None:
        """Executor-seconds over the oracle's (None: the oracle was not run)."""
        if self.oracle is None or self.oracle.executor_seconds <= 0:
            return None
        return self.summaries[name].executor_seconds / self.oracle.executor_seconds


def score_without_oracle(
    seed: int, duration_s: int | None, scenario: simulator.Scenario, names: Sequence[str]
) -> Figures:
    """`rate`, `lag` and ``names`` on the seed's trace, no oracle (its search is most of the
    time; issue 38's checks of `rate` against its peers do not need it)."""
    trace = family.generate(seed, duration_s)
    model = dataclasses.replace(scenario.model, seed=seed)
    config = scenario.policy_config()
    summaries = {
        name: simulator.simulate(
            trace, model, simulator.resolve(name, config, trace, model)
        ).summary
        for name in ("rate", "lag", *names)
    }
    return Figures(seed, summaries, None)


def _cell(values: Sequence[float | None], fmt: str) -> str:
    known = [v for v in values if v is not None]
    return format(statistics.median(known), fmt) if len(known) == len(values) and known else "–"


def report_peers(scores: Sequence[Figures], names: Sequence[str]) -> bool:
    """Every policy side by side (issue 38) and its checks of `rate` against the peers; True
    when they hold."""
    print(
        "\n### every policy side by side\n\n"
        "| policy | seeds with a violation | their violation s (total) | seeds with one the "
        "oracle has not | executor-s median | p95 | ×oracle median | reversals (total) "
        "| seeds with a reversal | rescales (total) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    totals: dict[str, tuple[int, float]] = {}
    rows = ("rate", "lag", *names)
    for name in rows:
        summaries = [s.summaries[name] for s in scores]
        seconds = [x.executor_seconds for x in summaries]
        violation = sum(x.slo_violation_s for x in summaries)
        totals[name] = (violation, sum(seconds))
        beyond = [s.beyond_oracle(name) for s in scores]
        beyond_cell = "–" if None in beyond else str(sum(1 for b in beyond if b))
        print(
            f"| {name} | {sum(1 for x in summaries if x.slo_violation_s)} | {violation} "
            f"| {beyond_cell} | {statistics.median(seconds):,.0f} "
            f"| {percentile(seconds, 0.95):,.0f} | {_cell([s.ratio(name) for s in scores], '.3f')} "
            f"| {sum(x.reversals for x in summaries)} "
            f"| {sum(1 for x in summaries if x.reversals)} | {sum(x.actions for x in summaries)} |"
        )
    oracles = [s.oracle for s in scores if s.oracle is not None]
    if len(oracles) == len(scores):
        seconds = [x.executor_seconds for x in oracles]
        print(
            f"| oracle | {sum(1 for x in oracles if x.slo_violation_s)} "
            f"| {sum(x.slo_violation_s for x in oracles)} | – | {statistics.median(seconds):,.0f} "
            f"| {percentile(seconds, 0.95):,.0f} | 1.000 | {sum(x.reversals for x in oracles)} "
            f"| {sum(1 for x in oracles if x.reversals)} | {sum(x.actions for x in oracles)} |"
        )
    rate_violation, rate_seconds = totals["rate"]
    better_both = [
        n for n in names if totals[n][0] < rate_violation and totals[n][1] < rate_seconds
    ]
    beaten = {
        n: [s.seed for s in scores if dominates(s.summaries[n], s.summaries["rate"])] for n in names
    }
    reversing = [s.seed for s in scores if s.summaries["rate"].reversals]
    allowed = DOMINATED_SHARE * len(scores)
    checks = [
        (
            f"`rate`: 0 reversals on every seed (seeds with one: {reversing or 'none'})",
            not reversing,
        ),
        (
            "in aggregate no peer has both fewer violation seconds and fewer executor-seconds "
            f"than `rate` ({rate_violation} s, {rate_seconds:,.0f} executor-s; peers that do: "
            f"{better_both or 'none'})",
            not better_both,
        ),
    ]
    if names:
        worst = max(names, key=lambda n: len(beaten[n]))
        checks.append(
            (
                f"per seed, no peer beats `rate` on violation s, executor-s and reversals "
                f"together on more than {DOMINATED_SHARE:.0%} of the seeds (most: {worst}, "
                f"{len(beaten[worst])} of {len(scores)}: {beaten[worst] or 'none'})",
                all(len(v) <= allowed for v in beaten.values()),
            )
        )
    print("\n### checks of `rate` against its peers (issue 38)\n")
    print("| check | met |")
    print("|---|---|")
    for label, ok in checks:
        print(f"| {label} | {'yes' if ok else '**no**'} |")
    return all(ok for _, ok in checks)


def oracle_fingerprint(duration_s: int | None, scenario: simulator.Scenario) -> str:
    """What the oracle's figures depend on: the code of the simulator, the family, the traces,
    the capacity model and the scale cost, the scenario, and the trace length."""
    digest = hashlib.sha256()
    for module in (simulator, family, traces, capacity, scale_cost):
        digest.update(Path(str(module.__file__)).read_bytes())
    digest.update(repr((scenario, duration_s)).encode())
    return digest.hexdigest()[:16]


def oracle_cache(scenario: str) -> Path:
    """Where the oracle figures of the cluster named ``scenario`` are kept by default."""
    suffix = "" if scenario == "generic" else f"-{scenario}"
    return Path(f".streamscale/family-oracle{suffix}.json")


def load_oracles(path: Path | None, fingerprint: str) -> dict[int, simulator.Summary]:
    """The oracle figures kept in ``path`` under ``fingerprint`` (none when absent)."""
    if path is None or not path.exists():
        return {}
    kept = json.loads(path.read_text()).get(fingerprint, {})
    return {int(seed): simulator.Summary(**values) for seed, values in kept.items()}


def save_oracles(path: Path, fingerprint: str, oracles: dict[int, simulator.Summary]) -> None:
    """Keep ``oracles`` in ``path`` under ``fingerprint`` (other fingerprints dropped)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    values = {str(seed): dataclasses.asdict(s) for seed, s in sorted(oracles.items())}
    path.write_text(json.dumps({fingerprint: values}))


def _score(
    seed: int,
    duration_s: int | None,
    scenario: simulator.Scenario,
    base: policy.PolicyConfig,
    oracle: simulator.Summary | None,
    late: bool,
    others: Sequence[str] = (),
) -> simulator.FamilyScore:
    return simulator.score_seed(
        seed,
        duration_s,
        scenario,
        base=base,
        oracle_summary=oracle,
        late_oracle=late,
        others=others,
    )


def report_late(scores: Sequence[simulator.FamilyScore]) -> None:
    """How often the oracle's plan, one decision late, breaks the objective where on time it
    does not; and on how many of those seeds ``rate`` breaks it too."""
    clean = [
        (s, s.late_oracle)
        for s in scores
        if s.late_oracle is not None and s.oracle.slo_violation_s == 0
    ]
    broken = [s.seed for s, x in clean if x.slo_violation_s > 0]
    rate = [s.seed for s, _ in clean if s.rate.slo_violation_s > 0]
    both = sorted(set(broken) & set(rate))
    ratios = [
        x.executor_seconds / s.oracle.executor_seconds
        for s, x in clean
        if s.oracle.executor_seconds
    ]
    print(
        f"\nThe oracle's plan one decision late breaks the objective on {len(broken)} of the "
        f"{len(clean)} seeds the oracle keeps it on (their violation s: "
        f"{sum(x.slo_violation_s for _, x in clean)}; executor-s ×oracle median "
        f"{statistics.median(ratios) if ratios else 1.0:.3f}); `rate` breaks it on "
        f"{len(rate)} of them, {len(both)} of which also one decision late ({both or 'none'})."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--seeds", type=parse_seeds, help="e.g. 1000-1099 or 3,7,20-29")
    group.add_argument("--tuning", action="store_true", help="the tuning seeds (0-299)")
    group.add_argument(
        "--fresh", action="store_true", help="the seeds drawn for issue 38 (3000-3099)"
    )
    parser.add_argument("--duration", type=int, default=None, help="trace length, s")
    parser.add_argument("--per-seed", action="store_true", help="print every seed's figures")
    parser.add_argument(
        "--surge-share",
        type=float,
        default=policy.PolicyConfig.surge_share,
        help="rate's surge_share: a scale-down rides out a surge of this share of the input",
    )
    parser.add_argument(
        "--reverse-for-slo",
        action="store_true",
        help="rate's reverse_for_slo: the objective before the no-reversal rule",
    )
    parser.add_argument(
        "--scenario",
        choices=simulator.SCENARIO_NAMES,
        default="generic",
        help="the cluster the traces run on (stateful: the stateful trace's state and reload)",
    )
    parser.add_argument(
        "--oracle-cache",
        default=None,
        help="file keeping the oracle's figures ('none': computed every run; default "
        ".streamscale/family-oracle.json, family-oracle-stateful.json for --scenario stateful)",
    )
    parser.add_argument(
        "--late-oracle",
        action="store_true",
        help="also run the oracle's plan one decision late (computes every oracle plan)",
    )
    parser.add_argument(
        "--peers", action="store_true", help="also run every peer policy (issue 38)"
    )
    parser.add_argument(
        "--no-oracle",
        action="store_true",
        help="with --peers: run no oracle, report issue 38's checks only (minutes, not hours, "
        "on a busy machine)",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    args = parser.parse_args()
    if args.tuning:
        seeds = list(family.TUNING_SEEDS)
    elif args.fresh:
        seeds = list(family.FRESH_SEEDS)
    else:
        seeds = args.seeds or list(family.EVALUATION_SEEDS)
    base = policy.PolicyConfig(surge_share=args.surge_share, reverse_for_slo=args.reverse_for_slo)
    scenario = simulator.scenario_named(args.scenario)
    kept_in = args.oracle_cache or str(oracle_cache(args.scenario))
    cache = None if kept_in == "none" else Path(kept_in)
    fingerprint = oracle_fingerprint(args.duration, scenario)
    oracles = load_oracles(cache, fingerprint)
    started = time.perf_counter()
    others = peers.PEER_NAMES if args.peers else ()
    if args.no_oracle:
        quick = partial(
            score_without_oracle, duration_s=args.duration, scenario=scenario, names=others
        )
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            figures = list(pool.map(quick, seeds))
        print(
            f"every policy on the {args.scenario} cluster, seeds {seeds[0]}-{seeds[-1]}, no oracle"
        )
        ok = report_peers(figures, others)
        print(f"\n({time.perf_counter() - started:.0f} s)")
        return 0 if ok else 1
    score = partial(_score, duration_s=args.duration, scenario=scenario, base=base, others=others)
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        futures = [
            pool.submit(score, seed, oracle=oracles.get(seed), late=args.late_oracle)
            for seed in seeds
        ]
        scores = [f.result() for f in futures]
    if cache is not None:
        save_oracles(cache, fingerprint, {**oracles, **{s.seed: s.oracle for s in scores}})
    print(
        f"`rate` with surge_share {args.surge_share}, reverse_for_slo {args.reverse_for_slo}, "
        f"on the {args.scenario} cluster\n"
    )
    ok = report(scores, args.per_seed)
    if args.peers:
        ok = report_peers([Figures.of(s, others) for s in scores], others) and ok
    if args.late_oracle:
        report_late(scores)
    kept = sum(1 for seed in seeds if seed in oracles)
    print(
        f"\n({time.perf_counter() - started:.0f} s; oracle figures kept from earlier runs: {kept})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
