"""Which of `rate`'s SLO violations on the generated family any policy that decides from what it
has seen could have avoided (issue 23).

Run: ``.venv/bin/python benchmarks/information_limit.py`` (the evaluation seeds 1000-1099 on the
generic cluster; ``--scenario stateful``, ``--seeds 2000-2099`` and ``--tuning`` as in
``benchmarks/autoscaler_family.py``, whose oracle cache it reads and fills).

For every seed where `rate` breaks the objective and the oracle does not, it replays `rate`'s
own counts (a :class:`~streamscale.autoscale.simulator.Plan` of them gives `rate`'s run
exactly, checked) and asks, from the first violating second backwards, for the **latest
rescue**: the last control tick at which switching from `rate`'s count to some count (any from
the one running to the usable maximum, held to the end) still keeps the time lag within the
objective everywhere without reversing a change (the family's other check; the latest rescue
with a reversal allowed is shown beside it). A later switch breaks one or the other whatever
count it picks, so the violation was decided by then.

It compares that tick with the **onset** of the input's last change before the violation (the
start of a flash sale, a spike or a ramp, or the end of an outage, from the seed's recipe) and
the first tick that sees it (the first tick after the onset: the observation then holds at
least one second of it — more generous to a policy than any real detector):

- ``before onset``: the latest rescue comes before the first tick that sees the change. Up to
  that tick the trace is identical to the same seed without the change, so every causal policy
  acts on both alike: avoiding the violation needs more executors than `rate` ran before any
  sign of the change, on every trace that looks like this one. That is headroom bought
  everywhere, not a better reaction;
- ``at the first tick that sees it``: only a switch at that tick, seeing 1-10 s of the change
  (its size and length unknown), rescues; the column ``its switch`` gives the counts that do;
- ``N s after``: a rescue was possible for N s after the change could be seen: a faster or
  larger reaction of `rate` would have avoided the violation, with hindsight of how long the
  change lasts (the counts that rescue are those held to the end).

It also gives, for the ``before onset`` seeds, the smallest count that, held from the tick
before the onset, avoids the violation with the best switch at the first tick that sees the
change (``needed``), next to `rate`'s count there.

``--diagnose`` (issue 38) adds, for every seed a switch at or after the first tick that sees
the change could have saved (the avoidable ones), how the latest rescue differs from `rate`
(:func:`streamscale.autoscale.rescues.compare`: *hold* the count `rate` topped up, *no
scale-down*, switch *sooner*, to *more* executors, or to *fewer* than `rate`'s larger step),
and `rate`'s decisions from the tick before the one that sees the change to the first
violation: count, reason, time lag, and the pause of its change (or, held, of a switch to the
rescue's count) as `rate` priced it and as the simulated cluster applies it. ``--no-oracle``
analyses every seed where `rate` breaks the objective without the oracle's search (on the
family's sets the oracle keeps the objective wherever `rate` breaks it, so the split is the
same, in a minute instead of hours).

Deterministic; about 1 s a seed beyond the oracle's search (which the cache spares).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import dataclass, replace

from autoscaler_family import (
    load_oracles,
    oracle_cache,
    oracle_fingerprint,
    parse_seeds,
    save_oracles,
)
from streamscale.autoscale import family, policy, rescues, simulator
from streamscale.autoscale.scale_cost import pause_for


@dataclass(frozen=True)
class Limit:
    """What one violating seed shows."""

    seed: int
    description: str
    violation_s: int
    first_violation: int
    onset: int | None
    """Second of the input's last change before the first violation (None: none in the
    recipe)."""
    onset_kind: str
    seen_at: int | None
    """First control tick after the onset."""
    latest_rescue: int | None
    """Last tick at which a switch from `rate`'s counts still avoids every violation and
    reverses no change (None: not even at the first tick)."""
    latest_rescue_reversing: int | None
    """The same, a reversal allowed."""
    rescue: tuple[int, tuple[int, ...]] | None
    """At the latest rescue: `rate`'s count then, and the counts that rescue (held to the
    end)."""
    rate_count: int | None
    """`rate`'s count at the tick before the onset."""
    needed: int | None
    """Smallest count held from the tick before the onset that, with the best switch at
    ``seen_at``, avoids every violation without a reversal (None: not computed or none up
    to the maximum)."""

    @property
    def before_onset(self) -> bool:
        return self.seen_at is not None and (
            self.latest_rescue is None or self.latest_rescue < self.seen_at
        )

    def verdict(self) -> str:
        if self.onset is None or self.seen_at is None:
            return "no change in the recipe"
        if self.before_onset:
            return "before onset"
        assert self.latest_rescue is not None
        if self.latest_rescue == self.seen_at:
            return "at the first tick that sees it"
        return f"{self.latest_rescue - self.seen_at} s after"


def onsets(recipe: family.Recipe) -> list[tuple[int, str]]:
    """Every abrupt change of the recipe's input: ``(second, kind)``."""
    found = [(f.start_s, "flash sale") for f in recipe.flash_sales]
    found += [(s.start_s, "spike") for s in recipe.spikes]
    found += [(r.start_s, "ramp" if r.delta > 0 else "ramp down") for r in recipe.ramps]
    found += [(o.start_s + o.length_s, "outage end") for o in recipe.outages]
    return sorted(found)


def _clean(
    trace: simulator.Trace, model: simulator.ClusterModel, plan: tuple[int, ...], reversals: bool
) -> bool:
    """Whether ``plan`` keeps the objective everywhere (and, unless ``reversals``, reverses
    no change)."""
    summary = simulator.simulate(trace, model, simulator.Plan(plan, "rescue")).summary
    return summary.slo_violation_s == 0 and (reversals or summary.reversals == 0)


def _rescues(
    trace: simulator.Trace,
    model: simulator.ClusterModel,
    prefix: tuple[int, ...],
    ticks: int,
    top: int,
    reversals: bool,
) -> list[int]:
    """The counts which, switched to after ``prefix`` and held, keep the objective (and,
    unless ``reversals``, reverse no change)."""
    low = prefix[-1] if prefix else 1
    return [
        n
        for n in range(low, top + 1)
        if _clean(trace, model, prefix + (n,) * (ticks - len(prefix)), reversals)
    ]


def _latest(
    trace: simulator.Trace,
    model: simulator.ClusterModel,
    counts: tuple[int, ...],
    first: int,
    top: int,
    reversals: bool,
) -> tuple[int | None, list[int]]:
    """The last tick before ``first`` at which a switch keeps the objective, and the counts
    that do (None, []: none)."""
    interval = model.control_interval_s
    for k in range(first // interval, 0, -1):
        found = _rescues(trace, model, counts[:k], len(counts), top, reversals)
        if found:
            return k * interval, found
    return None, []


@dataclass(frozen=True)
class RateRun:
    """`rate`'s run on a seed of the family, and what it ran on."""

    recipe: family.Recipe
    trace: simulator.Trace
    model: simulator.ClusterModel
    config: policy.PolicyConfig
    run: simulator.SimResult
    counts: tuple[int, ...]
    """Its count at each control tick."""


@functools.cache
def rate_run(seed: int, scenario: simulator.Scenario, duration_s: int | None) -> RateRun:
    """`rate` on ``seed`` (simulated once a seed: the split, ``--no-oracle`` and
    ``--diagnose`` all read it)."""
    recipe = family.draw(seed, duration_s)
    trace = family.render(recipe)
    model = replace(scenario.model, seed=seed)
    config = scenario.policy_config(None)
    run = simulator.simulate(trace, model, config)
    return RateRun(recipe, trace, model, config, run, run.tick_counts(model.control_interval_s))


def analyse(seed: int, scenario: simulator.Scenario, duration_s: int | None) -> Limit:
    """The latest rescues of `rate`'s run on ``seed`` and the onset before its violation."""
    r = rate_run(seed, scenario, duration_s)
    recipe, trace, model, config, run, counts = (
        r.recipe,
        r.trace,
        r.model,
        r.config,
        r.run,
        r.counts,
    )
    interval = model.control_interval_s
    ticks = len(counts)
    replayed = simulator.simulate(trace, model, simulator.Plan(counts, "rate")).summary
    if replayed != run.summary:
        raise RuntimeError(f"seed {seed}: the plan of rate's counts does not replay its run")
    first = next(t for t, lag in enumerate(run.time_lag_s) if lag > model.target_time_lag_s)
    top = min(config.max_executors, model.usable_executors)
    latest_any, _ = _latest(trace, model, counts, first, top, reversals=True)
    latest, rescue_counts = _latest(trace, model, counts, first, top, reversals=False)
    before = [(t, kind) for t, kind in onsets(recipe) if t <= first]
    onset, kind = before[-1] if before else (None, "")
    seen = None if onset is None else (onset // interval + 1) * interval
    rate_count = needed = None
    if onset is not None and seen is not None:
        held_from = onset // interval  # the tick before the onset
        rate_count = counts[held_from]
        if latest is None or latest < seen:
            for n in range(rate_count + 1, top + 1):
                prefix = counts[:held_from] + (n,) * (seen // interval - held_from)
                if _rescues(trace, model, prefix, ticks, top, reversals=False):
                    needed = n
                    break
    return Limit(
        seed,
        recipe.describe(),
        run.summary.slo_violation_s,
        first,
        onset,
        kind,
        seen,
        latest,
        latest_any,
        (counts[latest // interval - 1], tuple(rescue_counts)) if latest is not None else None,
        rate_count,
        needed,
    )


@dataclass(frozen=True)
class Step:
    """One of `rate`'s decisions on the way to its first violation."""

    t: int
    current: int
    desired: int
    reason: str
    time_lag_s: float
    priced_pause_s: float | None
    """The pause `rate` priced a change to ``desired`` (or, held, to the rescue's smallest
    count) with: the base pause plus its priced reload of the state share it moves."""
    true_pause_s: float | None
    """The pause the simulated cluster would apply to that change at ``t`` (the state it
    holds then)."""


@dataclass(frozen=True)
class Diagnosis:
    """What the latest rescue of an avoidable violation does that `rate` did not, and
    `rate`'s decisions from the first tick that sees the change to its first violation."""

    limit: Limit
    difference: rescues.Difference
    steps: tuple[Step, ...]
    interval_s: int


def diagnose(
    limit: Limit, scenario: simulator.Scenario, duration_s: int | None
) -> Diagnosis | None:
    """The diagnosis of an avoidable violation (None for a seed decided before the change
    could be seen)."""
    if limit.rescue is None or limit.latest_rescue is None or limit.before_onset:
        return None
    r = rate_run(limit.seed, scenario, duration_s)
    model, config, run = r.model, r.config, r.run
    interval = model.control_interval_s
    difference = rescues.compare(
        r.counts,
        limit.latest_rescue // interval,
        limit.rescue[1],
        limit.first_violation // interval,
    )
    steps = []
    processed = list(run.processed)
    for d in run.decisions:
        if d.t > limit.first_violation:
            break
        if d.t < max(limit.seen_at or 0, limit.latest_rescue - 3 * interval) - interval:
            continue
        done = sum(processed[: d.t])
        to = d.desired if d.desired != d.current else max(d.current, difference.least)
        priced = (
            None
            if d.reload_s is None or to == d.current
            else pause_for(config.restart_pause_s, d.reload_s, d.current, to)
        )
        true = None if to == d.current else model.pause_s(d.current, to, done)
        steps.append(
            Step(d.t, d.current, d.desired, d.reason, run.time_lag_s[d.t - 1], priced, true)
        )
    return Diagnosis(limit, difference, tuple(steps), interval)


def _step(s: Step) -> str:
    move = f"{s.current}→{s.desired}" if s.desired != s.current else f"{s.current}"
    pause = (
        ""
        if s.priced_pause_s is None or s.true_pause_s is None
        else f", pause {s.priced_pause_s:.0f}/{s.true_pause_s:.0f} s"
    )
    return f"{s.t}: {move} {s.reason} τ {s.time_lag_s:.0f}{pause}"


def print_diagnoses(found: list[Diagnosis]) -> None:
    """One row per avoidable seed, then the tally by kind and by the reasons `rate` gave at
    the ticks where the rescue differs from it."""
    print(
        "\n| seed | verdict | latest rescue | kind | `rate`'s decisions from the tick before the "
        "first that sees the change to the first violation (t: count reason τ, pause priced / "
        "true for the change or the rescue's count) |"
    )
    print("|---:|---|---|---|---|")
    kinds: dict[str, list[int]] = {}
    reasons: dict[str, int] = {}
    underpriced: list[int] = []
    for x in found:
        d = x.difference
        tick = d.tick * x.interval_s
        rescue = f"{x.limit.latest_rescue} s: {d.was} → ≥ {d.least}"
        print(
            f"| {x.limit.seed} | {x.limit.verdict()} | {rescue} | {d.kind.value} | "
            + "; ".join(_step(s) for s in x.steps)
            + " |"
        )
        kinds.setdefault(d.kind.value, []).append(x.limit.seed)
        # the decisions that stood in the way: from the rescue's tick to the change it avoids
        # (hold, no scale-down) or to the tick that reached the rescuing count (sooner)
        last = tick if d.change_tick is None else d.change_tick * x.interval_s
        between = [s for s in x.steps if tick <= s.t <= max(tick, last)]
        for s in between:
            reasons[s.reason] = reasons.get(s.reason, 0) + 1
        if any(
            s.priced_pause_s is not None
            and s.true_pause_s is not None
            and s.priced_pause_s < s.true_pause_s - 1
            for s in between
        ):
            underpriced.append(x.limit.seed)
    print(
        "\nBy kind: "
        + "; ".join(f"{k} {len(v)} ({', '.join(map(str, v))})" for k, v in kinds.items())
    )
    print(
        "`rate`'s reasons from the rescue's tick to the change it avoids or the tick that "
        "reached a rescuing count: "
        + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items(), key=lambda i: -i[1]))
    )
    print(
        "Seeds where a pause there was priced more than 1 s below the cluster's: "
        f"{len(underpriced)} ({', '.join(map(str, underpriced)) or 'none'})"
    )


def _switch(x: Limit) -> str:
    """``from → counts`` at the latest rescue (``held``: keeping rate's count rescues)."""
    if x.rescue is None:
        return "—"
    was, counts = x.rescue
    shown = ", ".join(str(n) for n in counts[:3]) + ("…" if len(counts) > 3 else "")
    return f"{was} → {shown}" + (" (held)" if counts[0] == was else "")


def _tick(t: int | None) -> str:
    return "none" if t is None else str(t)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=parse_seeds, default=None)
    parser.add_argument("--tuning", action="store_true")
    parser.add_argument("--scenario", default="generic", choices=simulator.SCENARIO_NAMES)
    parser.add_argument("--duration", type=int, default=None)
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="for every avoidable violation, what its latest rescue does that rate did not, "
        "and rate's decisions from the change to the violation",
    )
    parser.add_argument(
        "--no-oracle",
        action="store_true",
        help="analyse every seed where rate breaks the objective, without the oracle's search "
        "(a seed the oracle cannot keep either has no rescue: it reads 'before onset')",
    )
    args = parser.parse_args()
    seeds = (
        list(family.TUNING_SEEDS) if args.tuning else args.seeds or list(family.EVALUATION_SEEDS)
    )
    scenario = simulator.scenario_named(args.scenario)
    cache = oracle_cache(args.scenario)
    fingerprint = oracle_fingerprint(args.duration, scenario)
    oracles = load_oracles(cache, fingerprint)
    started = time.perf_counter()
    limits = []
    for seed in seeds:
        if args.no_oracle:
            if rate_run(seed, scenario, args.duration).run.summary.slo_violation_s > 0:
                limits.append(analyse(seed, scenario, args.duration))
            continue
        score = simulator.score_seed(
            seed, args.duration, scenario, oracle_summary=oracles.get(seed)
        )
        oracles[seed] = score.oracle
        if score.violates_beyond_oracle("rate"):
            limits.append(analyse(seed, scenario, args.duration))
    if not args.no_oracle:
        save_oracles(cache, fingerprint, oracles)
    print(f"`rate` on the {args.scenario} cluster, {len(seeds)} seeds: {len(limits)} break the")
    print(
        "objective (the oracle not searched).\n"
        if args.no_oracle
        else "objective where the oracle does not.\n"
    )
    print(
        "| seed | violation s | first violating s | last change before it | first tick that "
        "sees it | latest rescue (a reversal allowed) | its switch | verdict | rate's count / "
        "needed before the change |"
    )
    print("|---:|---:|---:|---|---:|---|---|---|---|")
    for x in limits:
        change = "—" if x.onset is None else f"{x.onset_kind} at {x.onset} s"
        counts = "" if x.rate_count is None else f"{x.rate_count} / {x.needed or '—'}"
        print(
            f"| {x.seed} | {x.violation_s} | {x.first_violation} | {change} | "
            f"{x.seen_at if x.seen_at is not None else '—'} | "
            f"{_tick(x.latest_rescue)} ({_tick(x.latest_rescue_reversing)}) | {_switch(x)} | "
            f"{x.verdict()} | "
            f"{counts} |"
        )
    early = [x for x in limits if x.before_onset]
    first = [x for x in limits if not x.before_onset and x.latest_rescue == x.seen_at]
    print(
        f"\n{len(early)} of {len(limits)}: no switch from the first tick that sees the change on "
        "keeps the objective without a reversal (an information limit of any causal policy "
        f"that ran rate's counts until then); {len(first)}: only a switch at that first tick "
        f"does; {len(limits) - len(early) - len(first)}: a later one could "
        f"({time.perf_counter() - started:.0f} s)."
    )
    if args.diagnose:
        found = [diagnose(x, scenario, args.duration) for x in limits]
        print_diagnoses([x for x in found if x is not None])
    return 0


if __name__ == "__main__":
    sys.exit(main())
