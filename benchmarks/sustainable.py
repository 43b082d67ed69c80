"""Sustainable throughput within a latency bound, Spark and Kafka Streams side by side.

    .venv/bin/python benchmarks/sustainable.py [--pipeline enrichment|game-sessions]
        [--engine spark-connector --engine spark-streamscale-kafka --engine kstreams]
        [--bound 5,30] [--products 10000] [--renames-per-s 0] [--driver-memory 2g|4g]
        [--machines 1000] [--start 10000] [--factor 2]
        [--precision 0.15] [--max-steps 6] [--warmup-s 20] [--steady-s 60] [--drain-s 300]
        [--runs 1] [--generators 1] [--master local[4]] [--shuffle-partitions N]
        [--threads 2] [--log-dir DIR] [--engine-warmup-s 0] [--log-batches]

For each engine, the highest input rate it *sustains*: over at least ``--steady-s`` seconds
of steady input (and at least 24 of its batch cycles: Spark within 30 s, 7.5 s triggers,
180 s; :func:`streamscale.experiment.sustainable.steady_window_s`) after ``--warmup-s`` of
warm-up, its backlog does not grow and the p99 of its event-time latency (output record's
append time minus its input record's append time) stays within the bound: Karimov et al.,
ICDE 2018; the verdict and the rate search are :mod:`streamscale.experiment.sustainable`
(pure, unit-tested), which states the criteria precisely. The rate is stepped up
×``--factor`` from ``--start`` until a step fails (down when the start fails), then bisected
until the bracket is within ``--precision``, at most ``--max-steps`` steps per engine and
bound. Rates are input records per second (game
sessions: frames and their approvals).

One invocation, one embedded Apache Kafka broker, the engines one after the other, each on
its own copy of the input topics (the enrichment's referential filled from the same seed;
its purchases topic stamped by the broker, ``LogAppendTime``, as the outputs are):

- **the input** is the project's own open-loop generator, ``streamscale generate purchases``
  or ``game-frames`` with ``--rate R --duration D`` (a subprocess, stopped by PID), a new
  seed per step: it produces at the schedule's pace whatever the engine does; a step whose
  input fell below 95 % of R (the generator shares the machine's 2 cores) does not count as
  sustained. Game frames come from ``--machines`` machines (a machine's frames are at least
  1 ms apart in event time, so fewer machines than the frame rate / 1000 would run event
  time ahead of the clock). With ``--renames-per-s`` a third generator,
  ``streamscale generate referential --renames-of``, renames random products of the
  enrichment's referential meanwhile (the referential changing in every batch, as at 10⁷
  products in ``benchmarks/table_state.py``);
- **the lag** is sampled every ``--sample-s``, the same measure for every engine
  (:class:`Pipe`): enrichment, purchases appended minus outputs and dead letters appended
  (one record out per purchase), read from the broker; game sessions, frames and approvals
  appended minus the records the engine has taken in (its own counts: a session is written
  only after a 30 s gap, so no output tells when a frame was done);
- **the latency**: enrichment, each purchase appended during the steady window paired with
  its output by key (the transaction id), read back after the step; game sessions, the time
  from a record's append to the engine's count of records taken in reaching it (first in,
  first done; :func:`streamscale.experiment.sustainable.curve_latencies`), which leaves out
  the 30 s a session waits for its gap by definition, the same for both engines;
- **CPU** per input record over the steady window, from ``/proc`` (``cpu_use``): Spark = its
  JVM (driver and executors, ``local[N]``), its Python workers and this process (the PySpark
  driver, whose ``foreachBatch`` runs here; it also runs the lag sampler, whose cost is the
  "benchmark process" CPU of the Kafka Streams steps); Kafka Streams = its JVM. The broker's
  and the generator's CPU are printed apart. **Peak RSS** over the window (sampled every
  0.25 s, each address space once): Spark's JVM and Python workers; Kafka Streams' JVM;
- between steps the engine drains its backlog (bounded by ``--drain-s``; an engine that does
  not is stopped and its search ends there). A step whose lag passes
  ``rate × (2 × bound + 10 s)`` after the warm-up is cut short (failed) so that it leaves a
  backlog that drains.

**Spark's trigger and batch limit per bound** (as a user sizes them, not tuned per engine:
:func:`streamscale.experiment.sustainable.spark_batching`): a processing-time trigger of a
quarter of the bound (1 s → 250 ms, 5 s → 1.25 s, 30 s → 7.5 s) and ``maxOffsetsPerTrigger``
of two triggers' worth of input at the step's rate; the query is started again for each step
from its checkpoint with those settings (its start falls in the warm-up). The rest is the
pipeline's defaults (RocksDB state store, ``--shuffle-partitions`` state partitions, Spark's
connector or ``streamscale-kafka``). **Kafka Streams** (``benchmarks/kstreams``, ``--threads``
stream threads, at-least-once, ``-Xmx1g``) runs at its defaults for every bound: one process
for the whole search, and a step at a rate already measured serves every bound.

Printed: every step (offered rate, lag slope, end lag, p99, CPU by process kind, peak RSS,
verdict and why), then one table: engine, bound, sustained records/s, p99 at that rate,
CPU µs per input record and peak RSS at it, and the ratio to Kafka Streams at the same bound;
with ``--runs N`` the median of the runs (a fresh broker per run). Nothing is checked record
by record beyond the pairing (every purchase of the window must have its output; every
frame and approval must be taken in): ``benchmarks/pipelines.py`` checks the same pipelines'
output byte for byte.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpu_use
import kstreams as ks
import spark_conf
from kafka_fill import LOG_APPEND, PARTITIONS, SEED, create_topics, produce_all
from streamscale import processes
from streamscale.autoscale import capacity
from streamscale.autoscale.capacity import BatchSample
from streamscale.experiment import sustainable as ss
from streamscale.generate import game_frames, referential
from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.offsets import TopicPartition
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.game_sessions import GameSessions, GameTopics
from streamscale.pipelines.topics import suffixed
from streamscale.progress_events import JsonProgressListener
from streamscale.settings import KafkaSource, Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

ROOT = ks.ROOT
ENGINES = ("spark-connector", "spark-streamscale-kafka", "kstreams")
SPARK_SOURCES: dict[str, KafkaSource] = {
    "spark-connector": "kafka",
    "spark-streamscale-kafka": "streamscale-kafka",
}
SPARK_KINDS = ("spark jvm", "python workers", "benchmark process")
SPARK_RSS_KINDS = ("spark jvm", "python workers")
KS_KINDS = ("kafka streams jvm",)
ABORT_SLACK_S = 10.0
RESTART_WAIT_S = 300.0
"""The longest an engine started again for a step may take to its first batch with input
(Spark at 10⁷ products: 25-30 s, its state stores loaded from the checkpoint)."""
CATCH_UP_S = 120.0
"""How much longer than ``--warmup-s`` a step's warm-up may last while the engine's lag is
above :data:`SETTLED_LAG_SHARE` of ``rate × bound`` (the backlog of its start for the step,
not yet absorbed)."""
SETTLED_LAG_SHARE = 0.5
"""The warm-up ends once the lag is at most this share of ``rate × bound``. At the whole
bound a window began while Spark was still draining its restart's backlog: on 2026-12-07,
game sessions at 20,000/s within 5 s began at a lag trough under 100,000 with batches still
at their 50,000 limit, the lag fell by 1,408/s through the whole window and its first
records waited about 5 s (p99 6.5 s); at steady state its batches held 25,000-33,000. At
half the bound a trough is what one batch's input leaves, not a backlog."""
TAIL_S = 5.0
"""The generators run this long past the steady window, sampled: a record of the window's end
is done when a sample sees it (:func:`ss.curve_latencies`)."""


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} (1/5 min)"


# --- the pipelines and the engines ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pipe:
    """One pipeline on one engine's own topics: what the lag counts and the generator makes.

    The enrichment's lag is in purchases: appended minus outputs and dead letters appended
    (one record out per purchase). A game session sums frames and is written only after a
    30 s gap (and through Spark's connector a frame meets its approval only then), so its
    lag is in input records (frames and approvals): appended minus the records the engine
    has taken in (Spark: ``numInputRows`` of its finished batches, state committed; Kafka
    Streams: its ``frames`` and ``approvals`` counters, records parsed and joined)."""

    name: str
    topics: Any  # EnrichmentTopics | GameTopics

    @property
    def enrichment(self) -> bool:
        return self.name == "enrichment"

    @property
    def inputs(self) -> tuple[str, ...]:
        t = self.topics
        return (t.purchases,) if self.enrichment else (t.requests, t.approvals)

    @property
    def scale(self) -> float:
        """Input records per record the lag counts."""
        return 1.0


BATCH_PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def batch_line(progress: Any) -> str:
    """One micro-batch as ``--log-batches`` prints it: its id, input rows, the trigger's
    wall time and Spark's phases within it (``durationMs``), ms."""
    durations = dict(progress.durationMs or {})
    total = durations.get("triggerExecution", 0)
    phases = " ".join(f"{k} {durations[k]}" for k in BATCH_PHASES if k in durations)
    return (
        f"batch {progress.batchId}: {progress.numInputRows:,} rows in {total} ms "
        f"({phases}) [{time.strftime('%H:%M:%S')}]"
    )


class SparkEngine:
    """A pipeline on Spark, started again for each step with the bound's batching; counts
    the input records of its finished batches (a query listener)."""

    kinds = SPARK_KINDS
    rss_kinds = SPARK_RSS_KINDS

    def __init__(
        self,
        spark: Any,
        settings: Settings,
        pipe: Pipe,
        source: KafkaSource,
        checkpoint: Path,
        log_batches: bool = False,
    ) -> None:
        self.spark, self.settings, self.pipe = spark, settings, pipe
        self.source, self.checkpoint = source, checkpoint
        self.query: Any = None
        self.run_id = ""
        self.current: Any = None
        self.read = 0
        self.log_batches = log_batches
        self.batches: list[tuple[int, dict[str, int]]] = []
        """The step's micro-batches with input: rows and Spark's phases (``durationMs``)."""
        self.samples: list[BatchSample] = []
        """Every micro-batch with input since the start: rows and the trigger's time."""
        engine = self

        class Listener(JsonProgressListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                current = engine.current
                if current is not None and not engine.pipe.enrichment:
                    engine.read += int(event.progress.numInputRows)
                # Events come asynchronously: a batch of the query stopped after the step
                # before may come after this step's query started.
                ours = str(event.progress.runId) == engine.run_id
                if current is not None and ours and int(event.progress.numInputRows):
                    durations = dict(event.progress.durationMs or {})
                    engine.batches.append((int(event.progress.numInputRows), durations))
                    engine.samples.append(
                        BatchSample(
                            int(event.progress.numInputRows),
                            durations.get("triggerExecution", 0) / 1000,
                        )
                    )
                if engine.log_batches:
                    print("    " + batch_line(event.progress), flush=True)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.listener = Listener()
        spark.streams.addListener(self.listener)

    def pipeline(self, max_offsets: int | None) -> Enrichment | GameSessions:
        settings = self.settings.model_copy(update={"max_offsets_per_trigger": max_offsets})
        kind = Enrichment if self.pipe.enrichment else GameSessions
        pipeline = kind(settings, str(self.checkpoint), self.pipe.topics, self.source)
        self.current = pipeline
        return pipeline

    def prime(self) -> None:
        """Read what is there (the referential into the state store) once."""
        query = self.pipeline(None).start(self.spark, {"availableNow": True})
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))

    def started(self) -> bool:
        """Whether the query started for this step has finished a batch with input."""
        return bool(self.batches)

    def cycle_s(self, bound_s: float) -> float:
        """Its batch cycle within ``bound_s``: the bound's trigger interval."""
        return ss.spark_batching(bound_s, 1.0).trigger_s

    def before_step(self, rate: float, bound_s: float) -> str:
        self.batches = []
        batching = ss.spark_batching(bound_s, rate)
        self.query = self.pipeline(batching.max_offsets).start(self.spark, batching.trigger)
        self.run_id = str(self.query.runId)
        return f"trigger {batching.trigger_s:g} s, maxOffsetsPerTrigger {batching.max_offsets:,}"

    def done(self) -> int:
        return self.read

    def check(self) -> None:
        if self.query is not None and self.query.exception() is not None:
            raise RuntimeError(f"the Spark query failed: {self.query.exception()}")

    def after_step(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None

    def batch_summary(self) -> str:
        """The step's micro-batches in one line: how many, rows, and the median of each of
        Spark's phases (ms); ``addBatch`` is the batch's own work, the others its fixed cost."""
        if not self.batches:
            return ""
        rows = [n for n, _ in self.batches]
        med = {
            k: statistics.median(d.get(k, 0) for _, d in self.batches)
            for k in ("triggerExecution", *BATCH_PHASES)
        }
        work_s = sum(d.get("addBatch", 0) for _, d in self.batches) / 1000
        return (
            f"{len(rows)} batches of median {statistics.median(rows):,.0f} rows; median ms: "
            + ", ".join(f"{k} {v:,.0f}" for k, v in med.items())
            + f"; {sum(rows) / work_s:,.0f} rows/s within addBatch"
            if work_s
            else ""
        )

    def capacity_line(self) -> str:
        """The batches' fixed cost and per-record rate, fitted as the autoscaler fits them
        (:func:`streamscale.autoscale.capacity.fit`, the whole ``local[N]`` as one executor)."""
        fitted = capacity.fit(self.samples, executors_now=1, tasks_cap=1)
        if not fitted.known:
            return f"capacity unknown over {fitted.batches} batches ({fitted.note})"
        assert fitted.rate is not None and fitted.fixed_cost_s is not None
        return (
            f"a batch costs {fitted.fixed_cost_s:.2f} s + {1e6 / fitted.rate:.1f} µs per record "
            f"({fitted.rate:,.0f} records/s once the fixed cost is paid; {fitted.note}, "
            f"{fitted.batches} batches)"
        )

    def close(self) -> None:
        self.after_step()
        self.spark.streams.removeListener(self.listener)


class KafkaStreamsEngine:
    """A pipeline on Kafka Streams: one process for every step and bound."""

    kinds = KS_KINDS
    rss_kinds = KS_KINDS

    def __init__(self, app: ks.StreamsApp) -> None:
        self.app = app

    def cycle_s(self, bound_s: float) -> float:
        """No batch cycle: records are processed one at a time."""
        return 0.0

    def before_step(self, rate: float, bound_s: float) -> str:
        return "defaults"

    def started(self) -> bool:
        return True

    def done(self) -> int:
        return self.app.count("frames") + self.app.count("approvals")

    def check(self) -> None:
        self.app.check_alive()

    def after_step(self) -> None:
        pass

    def batch_summary(self) -> str:
        return ""

    def close(self) -> None:
        self.app.stop()


Engine = SparkEngine | KafkaStreamsEngine


# --- one step ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Measured:
    """One step: what the verdict reads, and the costs over its steady window."""

    step: ss.Step
    cpu_us: float
    cpu_by_kind: dict[str, float]
    rss_mb: float
    config: str
    cut_short: str = ""
    duplicates: int = 0
    batches: str = ""  # Spark: its micro-batches over the step (SparkEngine.batch_summary)


class Bench:
    """The broker, its admin client and the options, shared by the steps of one run."""

    def __init__(self, settings: Settings, admin: KafkaAdmin, args: argparse.Namespace) -> None:
        self.settings, self.admin, self.args = settings, admin, args
        self.seed = SEED

    def ends(self, topic: str) -> dict[int, int]:
        got = self.admin.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
        return {tp.partition: n for tp, n in got.items()}

    def progress(
        self, pipe: Pipe, engine: Engine
    ) -> tuple[int, int, dict[str, dict[int, int]], dict[int, int]]:
        """Tracked records appended and done so far, with the inputs' end offsets and the
        enrichment output's. What is done is read first, so that nothing done is counted as
        not yet appended (and no output of an input counted here comes before those ends)."""
        outputs: dict[int, int] = {}
        if pipe.enrichment:
            outputs = self.ends(pipe.topics.output)
            done = sum(outputs.values()) + sum(self.ends(pipe.topics.dlq).values())
        else:
            done = engine.done()
        inputs = {topic: self.ends(topic) for topic in pipe.inputs}
        return sum(sum(ends.values()) for ends in inputs.values()), done, inputs, outputs

    def sample(
        self, pipe: Pipe, engine: Engine, curves: tuple[list[ss.LagPoint], list[ss.LagPoint]]
    ) -> tuple[float, int, int, dict[str, dict[int, int]], dict[int, int]]:
        """One sample: the engine checked, :meth:`progress` taken and added to ``curves``
        (records appended, records done); its time first."""
        engine.check()
        appended, done, in_ends, out_ends = self.progress(pipe, engine)
        now = time.time()
        curves[0].append((now, float(appended)))
        curves[1].append((now, float(done)))
        return now, appended, done, in_ends, out_ends

    def spawn(self, what: list[str], seconds: float) -> Any:
        """``streamscale generate WHAT`` for ``seconds``, a new seed each, as a subprocess."""
        self.seed += 1
        common = ["--duration", f"{seconds:g}", "--seed", str(self.seed)]
        common += ["--bootstrap", self.settings.bootstrap_servers, "--no-progress"]
        argv = [sys.executable, "-m", "streamscale.cli.main", "generate", *what, *common]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        return subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: processes.stop_pid stops it
        )

    def generator(self, pipe: Pipe, rate: float, seconds: float) -> Any:
        """The project's generator at ``rate`` input records/s (game frames: frames and
        their approvals), a new seed per step."""
        t = pipe.topics
        if pipe.enrichment:
            what = ["purchases", "--rate", f"{rate:.0f}", "--topic", t.purchases]
            what += ["--products", str(self.args.products)]
        else:
            frames = rate / (1 + game_frames.APPROVAL_PROBABILITY)
            what = ["game-frames", "--rate", f"{frames:.0f}"]
            what += ["--topic", t.requests, "--approval-topic", t.approvals]
            what += ["--machines", str(self.args.machines)]
        return self.spawn(what, seconds)

    def generators(self, pipe: Pipe, rate: float, seconds: float) -> list[Any]:
        """``--generators`` processes, each at its share of ``rate`` (a new seed each), and
        with ``--renames-per-s`` one more renaming the enrichment's products meanwhile."""
        gens = [
            self.generator(pipe, rate / self.args.generators, seconds)
            for _ in range(self.args.generators)
        ]
        if pipe.enrichment and self.args.renames_per_s > 0:
            gens.append(self.renamer(pipe, seconds))
        return gens

    def renamer(self, pipe: Pipe, seconds: float) -> Any:
        """``streamscale generate referential --renames-of``: random products renamed at
        ``--renames-per-s`` (the referential changing in every batch), a new seed a step."""
        what = ["referential", "--renames-of", str(self.args.products)]
        what += ["--topic", pipe.topics.referential, "--rate", f"{self.args.renames_per_s:g}"]
        return self.spawn(what, seconds)

    def measure(self, engine: Engine, pipe: Pipe, rate: float, bound_s: float) -> Measured:
        """One step at ``rate``; Spark's batching is sized for ``bound_s``, and the step is
        cut short once its lag is far past it. The warm-up starts when the engine, started
        again for the step (Spark: its query with the bound's batching), has finished its
        first batch with input: a restart is the benchmark's, not the engine's steady state
        (at 10⁷ products it loads the state stores for 25-30 s), and the warm-up absorbs the
        backlog it left: it lasts at least ``--warmup-s`` and until the lag is at most
        :data:`SETTLED_LAG_SHARE` of ``rate × bound``, at most :data:`CATCH_UP_S` longer."""
        args = self.args
        steady_s = self.steady_s(engine, bound_s)
        config = engine.before_step(rate, bound_s)
        curves: tuple[list[ss.LagPoint], list[ss.LagPoint]] = ([], [])
        points: list[ss.LagPoint] = []
        cut = ""
        # Stopped by PID after the window's tail; the duration only bounds them.
        gens = self.generators(
            pipe, rate, RESTART_WAIT_S + args.warmup_s + CATCH_UP_S + steady_s + TAIL_S + 5
        )
        began = time.time()
        t0 = start_at = math.inf
        window: dict[str, Any] = {}
        rss: cpu_use.RssPeak | None = None
        try:
            while True:
                now, appended, done, in_ends, out_ends = self.sample(pipe, engine, curves)
                lag = (appended - done) * pipe.scale
                points.append((now, lag))
                if t0 == math.inf:
                    if engine.started():
                        t0 = now
                        start_at = t0 + args.warmup_s
                    elif now - began > RESTART_WAIT_S:
                        engine.after_step()
                        raise EngineStuckError(
                            f"no batch within {RESTART_WAIT_S:.0f} s of its start for the step"
                        )
                if "start" not in window and now >= start_at:
                    settled = lag <= rate * bound_s * SETTLED_LAG_SHARE
                    if not settled and now < t0 + args.warmup_s + CATCH_UP_S:
                        start_at = now + args.sample_s  # the warm-up goes on
                    else:
                        window.update(
                            start=now,
                            cpu0=cpu_use.snapshot(os.getpid()),
                            in0=in_ends,
                            out0=out_ends,
                        )
                        rss = cpu_use.RssPeak(engine.rss_kinds, root=os.getpid())
                if now >= start_at + steady_s:
                    window.update(end=now, cpu1=cpu_use.snapshot(os.getpid()), in1=in_ends)
                    break
                if now > start_at and lag > rate * (2 * bound_s + ABORT_SLACK_S):
                    cut = f"cut short at {now - t0:.0f} s: lag {lag:,.0f} records"
                    window.update(end=now, cpu1=cpu_use.snapshot(os.getpid()), in1=in_ends)
                    break
                for gen in gens:
                    code = gen.poll()
                    if code is not None and code != 0:
                        err = gen.stderr.read().decode()[-2000:] if gen.stderr else ""
                        raise RuntimeError(f"the generator failed ({code}): {err}")
                time.sleep(args.sample_s)
            if not cut:  # its last seconds follow the window: what the engine does after it
                while time.time() < start_at + steady_s + TAIL_S:
                    self.sample(pipe, engine, curves)
                    time.sleep(args.sample_s)
        finally:
            for gen in gens:
                processes.stop_pid(gen.pid)
            peak = rss.stop() if rss is not None else math.nan
        try:
            self.drain(engine, pipe, curves)
        finally:
            engine.after_step()
        batches = engine.batch_summary()
        duplicates = 0
        if pipe.enrichment:
            latencies, unanswered, duplicates = self.latencies(pipe.topics, window)
        else:
            latencies, unanswered = ss.curve_latencies(*curves, window["start"], window["end"])
        spent = cpu_use.spent(window["cpu0"], window["cpu1"])
        offered = sum(
            sum(window["in1"][t].values()) - sum(window["in0"][t].values()) for t in pipe.inputs
        )
        engine_cpu = sum(spent.get(k, 0.0) for k in engine.kinds)
        step = ss.Step(
            rate=rate,
            steady_start_s=window["start"],
            steady_end_s=window["end"],
            lag=points,
            latencies_ms=latencies,
            offered=offered,
            unanswered=unanswered,
        )
        return Measured(
            step,
            engine_cpu / offered * 1e6 if offered else math.nan,
            {k: v / max(offered, 1) * 1e6 for k, v in spent.items() if v >= 0.05},
            peak,
            config,
            cut,
            duplicates,
            batches,
        )

    def steady_s(self, engine: Engine, bound_s: float) -> float:
        """The steady window of ``engine``'s steps within ``bound_s`` (``--steady-s`` and
        at least 24 of its batch cycles: :func:`ss.steady_window_s`)."""
        return ss.steady_window_s(self.args.steady_s, engine.cycle_s(bound_s))

    def warm_up(self, name: str, engine: Engine, pipe: Pipe) -> None:
        """Run the engine at ``--start`` for ``--engine-warmup-s`` before its first step,
        unmeasured, and let it drain: a JVM's first minutes go to its JIT compiler (measured:
        30-36 % of Spark's JVM CPU 2-4 minutes after its start), which no steady state has."""
        seconds = self.args.engine_warmup_s
        if seconds <= 0:
            return
        t0 = time.time()
        rate = self.args.start
        config = engine.before_step(rate, max(self.args.bounds))
        gens = self.generators(pipe, rate, seconds)
        try:
            for gen in gens:
                gen.wait(seconds + 60)
            self.drain(engine, pipe, ([], []))
        finally:
            for gen in gens:
                processes.stop_pid(gen.pid)
            engine.after_step()
        print(
            f"{name}: warmed up at {rate:,.0f}/s for {seconds:g} s ({config}), drained "
            f"after {time.time() - t0:.0f} s [{load()}]",
            flush=True,
        )

    def drain(
        self, engine: Engine, pipe: Pipe, curves: tuple[list[ss.LagPoint], list[ss.LagPoint]]
    ) -> None:
        """Wait until the engine has done everything appended (bounded), sampling on."""
        deadline = time.monotonic() + self.args.drain_s
        lag = 0
        while time.monotonic() < deadline:
            _, appended, done, _, _ = self.sample(pipe, engine, curves)
            lag = appended - done
            if lag <= (0 if pipe.enrichment else self.args.sessions_slack):
                return
            if len(curves[0]) % 40 == 0:
                print(f"  draining: {appended:,} appended, {done:,} done", flush=True)
            time.sleep(self.args.sample_s)
        raise EngineStuckError(
            f"the backlog did not drain within {self.args.drain_s:g} s (lag {lag:,})"
        )

    def latencies(
        self, topics: EnrichmentTopics, window: Mapping[str, Any]
    ) -> tuple[list[float], int, int]:
        """Output append time - input append time of every purchase appended within the
        window (by key, hashed: tens of millions of keys would not fit whole), the purchases
        without output, and the outputs beyond one per purchase (at-least-once replays)."""
        created: dict[int, int] = {}
        for m in self.admin.iter_all(
            topics.purchases,
            PARTITIONS,
            start=window["in0"][topics.purchases],
            end=window["in1"][topics.purchases],
        ):
            created[hash(m.key())] = m.timestamp()[1]
        answered: dict[int, int] = {}
        duplicates = 0
        for m in self.admin.iter_all(topics.output, PARTITIONS, start=window["out0"]):
            key = hash(m.key())
            if key in created:
                ts = m.timestamp()[1]
                if key in answered:
                    duplicates += 1
                    answered[key] = min(answered[key], ts)
                else:
                    answered[key] = ts
        latencies = [float(answered[k] - created[k]) for k in answered]
        return latencies, len(created) - len(answered), duplicates


class EngineStuckError(RuntimeError):
    """The engine did not drain its backlog after a step: its search ends there."""


# --- the search per engine and bound -----------------------------------------------------------


@dataclasses.dataclass
class Result:
    """The search of one engine at one bound: the sustained rate and its step."""

    engine: str
    bound_s: float
    sustained: float
    best: Measured | None
    steps: list[tuple[Measured, ss.Verdict]]
    note: str = ""
    stuck: bool = False  # its backlog did not drain: nothing more can run on this engine


def show_step(name: str, bound_s: float, m: Measured, v: ss.Verdict) -> None:
    kinds = ", ".join(
        f"{k} {us:.1f}" for k, us in sorted(m.cpu_by_kind.items(), key=lambda x: -x[1])
    )
    why = "sustained" if v.sustained else "FAILED: " + "; ".join(v.reasons)
    print(
        f"  {name} @{bound_s:g}s {m.step.rate:>9,.0f}/s ({m.config}): offered "
        f"{v.offered_rate:,.0f}/s, lag slope {v.slope:,.0f}/s, end lag {v.end_lag:,.0f}, "
        f"p99 {v.p99_ms:,.0f} ms over {len(m.step.latencies_ms):,}, CPU µs/record "
        f"{m.cpu_us:.1f} (by kind: {kinds}), peak RSS {m.rss_mb:,.0f} MB"
        + (f", {m.duplicates:,} duplicates" if m.duplicates else "")
        + (f"; {m.cut_short}" if m.cut_short else "")
        + f" -> {why} [{load()}]",
        flush=True,
    )


def run_search(
    name: str,
    bound_s: float,
    measure: Callable[[float], Measured],
    plan: ss.SearchPlan,
    args: argparse.Namespace,
    steady_s: float,
    known: Sequence[Measured] = (),
) -> Result:
    """The search of one engine at one bound; ``steady_s``: its steps' steady window
    (:meth:`Bench.steady_s`); ``known``: steps already measured that are judged against
    this bound too (Kafka Streams' one process serves every bound)."""
    criteria = ss.Criteria(bound_s=bound_s, min_steady_s=steady_s * 0.98)
    steps: list[tuple[Measured, ss.Verdict]] = []
    note = note_stuck = ""
    for m in known:
        v = ss.verdict(m.step, criteria)
        steps.append((m, v))
        show_step(name, bound_s, m, v)

    def sustained(rate: float) -> bool:
        m = measure(rate)
        v = ss.verdict(m.step, criteria)
        steps.append((m, v))
        show_step(name, bound_s, m, v)
        if m.batches:
            print(f"    micro-batches: {m.batches}", flush=True)
        return v.sustained

    try:
        result = ss.search(sustained, plan, [(v.rate, v.sustained) for _, v in steps])
        rate = result.sustained
    except EngineStuckError as exc:
        note = note_stuck = str(exc)
        print(f"  {name} @{bound_s:g}s: {note}; its search ends here", flush=True)
        rate = max((v.rate for _, v in steps if v.sustained), default=0.0)
    best = next((m for m, v in steps if v.sustained and v.rate == rate), None)
    above = [v for _, v in steps if not v.sustained and v.rate > rate]
    if above and all("generator fell behind" in r for v in above for r in v.reasons):
        note = (note + "; " if note else "") + "a lower bound: the generator fell behind above it"
    elif rate and not above:
        note = (note + "; " if note else "") + "a lower bound: no step above it failed"
    return Result(name, bound_s, rate, best, steps, note, stuck=bool(note_stuck))


def engine_pipe(pipeline: str, name: str) -> Pipe:
    """The pipeline on the engine's own topics."""
    tag = name.replace("spark-", "")
    if pipeline == "enrichment":
        return Pipe(pipeline, suffixed(EnrichmentTopics(), tag))
    return Pipe(pipeline, suffixed(GameTopics(), tag))


def prepare(bench: Bench, pipe: Pipe) -> int:
    """Create the engine's topics and fill its referential (seeded: the same for every
    engine); the referential's record count (0 for game sessions)."""
    t = pipe.topics
    outputs = {t.output: LOG_APPEND, t.dlq: LOG_APPEND}
    if not pipe.enrichment:
        # A frame's Kafka timestamp is its event time: stamped by the generator (paced, so
        # within milliseconds of its append).
        inputs = {
            t.requests: {"cleanup.policy": "delete"},
            t.approvals: {"cleanup.policy": "delete"},
        }
        create_topics(bench.settings, {**inputs, **outputs})
        return 0
    inputs = {
        t.purchases: {"cleanup.policy": "delete", **LOG_APPEND},
        t.referential: {"cleanup.policy": "compact"},
    }
    create_topics(bench.settings, {**inputs, **outputs})
    plan = referential.plan_for_products(bench.args.products, 0.05, 0.01)
    records = referential.referential_records(random.Random(SEED), plan, t.referential)
    count, _ = produce_all(bench.settings, records)
    return count


def one_run(run: int, args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    plan = ss.SearchPlan(args.start, args.factor, args.precision, args.max_steps, args.floor)
    print(f"run {run}: {load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, embedded.embedded_broker(Path(tmp) / "b") as b:
        overrides: dict[str, Any] = {}
        if args.shuffle_partitions is not None:
            overrides["shuffle_partitions"] = args.shuffle_partitions
        settings = Settings(
            bootstrap_servers=b.bootstrap,
            spark_master=args.master,
            state_store="rocksdb",
            driver_memory=args.driver_memory or ("4g" if args.products >= 10**6 else "2g"),
            **overrides,
        )
        admin = KafkaAdmin(settings.kafka_config(), 30.0)
        bench = Bench(settings, admin, args)
        try:
            spark_engines = [e for e in args.engines if e in SPARK_SOURCES]
            if spark_engines:
                results += spark_searches(bench, spark_engines, plan, Path(tmp))
            if "kstreams" in args.engines:
                results += kstreams_searches(bench, plan, Path(tmp))
        finally:
            admin.close()
    show_table(results, f"run {run}")
    return results


def spark_searches(
    bench: Bench, names: Sequence[str], plan: ss.SearchPlan, tmp: Path
) -> list[Result]:
    """Each Spark engine's search at every bound, in one Spark session."""
    results = []
    spark = session(
        bench.settings, app_name="bench-sustainable", extra_conf=spark_conf.of(bench.args)
    )
    try:
        for name in names:
            pipe = engine_pipe(bench.args.pipeline, name)
            n_ref = prepare(bench, pipe)
            print(f"{name}: {n_ref:,} referential records", flush=True)
            # One checkpoint for every bound: each step starts the query again with its own
            # trigger and batch limit.
            engine = SparkEngine(
                spark,
                bench.settings,
                pipe,
                SPARK_SOURCES[name],
                tmp / f"ckpt-{name}",
                bench.args.log_batches,
            )
            try:
                engine.prime()
                bench.warm_up(name, engine, pipe)
                for bound in bench.args.bounds:
                    measure = functools.partial(bench.measure, engine, pipe, bound_s=bound)
                    results.append(
                        run_search(
                            name, bound, measure, plan, bench.args, bench.steady_s(engine, bound)
                        )
                    )
                    if results[-1].stuck:  # a backlog left behind: no other bound on it
                        break
            finally:
                print(f"{name}: {engine.capacity_line()}", flush=True)
                engine.close()
    finally:
        stop_session(spark)
    return results


def kstreams_searches(bench: Bench, plan: ss.SearchPlan, tmp: Path) -> list[Result]:
    args = bench.args
    pipe = engine_pipe(args.pipeline, "kstreams")
    n_ref = prepare(bench, pipe)
    jar = ks.ensure_jar()
    if pipe.enrichment:
        roles, opts = ks.enrichment_roles(pipe.topics), ks.app_opts(args)
    else:
        roles, opts = ks.sessions_roles(pipe.topics), ks.sessions_opts(args, bench.settings)
    app = ks.start_app(
        jar,
        args.pipeline,
        bench.settings,
        roles,
        tmp,
        args.threads,
        opts,
        args.log_dir,
        args.jvm_opt,
    )
    engine = KafkaStreamsEngine(app)
    results = []
    try:
        if not ks.wait_for(
            app,
            lambda: "RUNNING" in app.states and app.count("referential") >= n_ref,
            args.drain_s,
            f"Kafka Streams running with {n_ref:,} referential records read",
        ):
            raise EngineStuckError("Kafka Streams did not start")
        print(f"kstreams: running, {app.count('referential'):,} referential records", flush=True)
        bench.warm_up("kstreams", engine, pipe)
        cache: dict[float, Measured] = {}
        widest = max(args.bounds)

        def measure(rate: float) -> Measured:
            # The same process for every bound: a rate measured once serves them all.
            if rate not in cache:
                cache[rate] = bench.measure(engine, pipe, rate, widest)  # cut by the widest
            return cache[rate]

        for bound in sorted(args.bounds, reverse=True):
            known = list(cache.values())  # in the order measured
            results.append(
                run_search(
                    "kstreams", bound, measure, plan, args, bench.steady_s(engine, bound), known
                )
            )
            if results[-1].stuck:  # a backlog left behind: no other bound on it
                break
    finally:
        engine.close()
    return results


# --- the table ---------------------------------------------------------------------------------


def show_table(results: Sequence[Result], title: str) -> None:
    ks_rate = {r.bound_s: r.sustained for r in results if r.engine == "kstreams"}
    print(f"\n{title}")
    print(
        f"{'engine':<26}{'bound':>6}{'sustained/s':>13}{'p99 ms':>9}{'CPU µs':>8}"
        f"{'RSS MB':>8}{'vs KS':>7}{'steps':>6}  note"
    )
    for r in sorted(results, key=lambda r: (r.bound_s, r.engine)):
        v = next((v for m, v in r.steps if m is r.best), None)
        ratio = r.sustained / ks_rate[r.bound_s] if ks_rate.get(r.bound_s) else math.nan
        print(
            f"{r.engine:<26}{r.bound_s:>5g}s{r.sustained:>13,.0f}"
            f"{(v.p99_ms if v else math.nan):>9,.0f}"
            f"{(r.best.cpu_us if r.best else math.nan):>8.1f}"
            f"{(r.best.rss_mb if r.best else math.nan):>8,.0f}{ratio:>7.2f}"
            f"{len(r.steps):>6}  {r.note}"
        )


def show_median(per_run: Sequence[Sequence[Result]]) -> None:
    keys = sorted({(r.engine, r.bound_s) for run in per_run for r in run}, key=lambda k: k[::-1])
    print(f"\nmedian of {len(per_run)} runs")
    print(f"{'engine':<26}{'bound':>6}{'sustained/s':>13}{'CPU µs':>8}{'vs KS':>7}  per run")

    def med(values: Sequence[float]) -> float:
        finite = [v for v in values if not math.isnan(v)]
        return statistics.median(finite) if finite else math.nan

    for engine, bound in keys:
        rows = [r for run in per_run for r in run if (r.engine, r.bound_s) == (engine, bound)]
        ratios = []
        for run in per_run:
            mine = [r.sustained for r in run if (r.engine, r.bound_s) == (engine, bound)]
            theirs = [r.sustained for r in run if (r.engine, r.bound_s) == ("kstreams", bound)]
            if mine and theirs and theirs[0]:
                ratios.append(mine[0] / theirs[0])
        print(
            f"{engine:<26}{bound:>5g}s{med([r.sustained for r in rows]):>13,.0f}"
            f"{med([r.best.cpu_us if r.best else math.nan for r in rows]):>8.1f}"
            f"{med(ratios):>7.2f}  " + ", ".join(f"{r.sustained:,.0f}" for r in rows)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pipeline", choices=("enrichment", "game-sessions"), default="enrichment")
    parser.add_argument(
        "--machines",
        type=int,
        default=1000,
        help="game sessions: the generator's machines (a machine's frames are 1 ms apart at "
        "least: fewer machines than rate/1000 would run event time ahead of the clock)",
    )
    parser.add_argument(
        "--sessions-slack",
        type=int,
        default=1000,
        help="game sessions: approvals appended minus frames aggregated that counts as drained",
    )
    parser.add_argument(
        "--engine", dest="engines", action="append", choices=ENGINES, help="repeatable"
    )
    parser.add_argument("--bound", default="5,30", help="latency bounds, seconds, comma-separated")
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument(
        "--renames-per-s",
        type=float,
        default=0.0,
        help="enrichment: random products renamed per second during every step (the "
        "referential changing in every batch; 0: a referential that does not change)",
    )
    parser.add_argument(
        "--driver-memory",
        default=None,
        help="Spark's driver (and local executors') memory (default: 2g, and 4g from 10^6 "
        "products, whose whole referential comes in the first batch)",
    )
    parser.add_argument("--start", type=float, default=10_000.0, help="first rate, records/s")
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--precision", type=float, default=0.15)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--floor", type=float, default=500.0, help="lowest rate tried")
    parser.add_argument("--warmup-s", type=float, default=20.0)
    parser.add_argument(
        "--engine-warmup-s",
        type=float,
        default=0.0,
        help="run each engine at --start for this long before its first step, unmeasured "
        "(its JVM's JIT warm-up)",
    )
    parser.add_argument(
        "--steady-s",
        type=float,
        default=60.0,
        help="the shortest steady window; an engine's is also at least 24 of its batch cycles",
    )
    parser.add_argument("--sample-s", type=float, default=0.5)
    parser.add_argument(
        "--generators",
        type=int,
        default=1,
        help="generator processes, each at rate / N (one Python producer costs about 4-8 µs "
        "of CPU per purchase: it shares the engine's cores)",
    )
    parser.add_argument("--drain-s", type=float, default=300.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--master", default="local[4]")
    parser.add_argument(
        "--shuffle-partitions", type=int, help="state partitions (default: the pipeline's)"
    )
    parser.add_argument(
        "--log-batches",
        action="store_true",
        help="print each Spark micro-batch: rows, trigger time and Spark's phases (durationMs)",
    )
    spark_conf.add_argument(parser)
    ks.add_app_arguments(parser)
    args = parser.parse_args()
    args.engines = args.engines or list(ENGINES)
    args.bounds = [float(b) for b in args.bound.split(",")]
    if shutil.which("java") is None:
        raise SystemExit("java is not on PATH: run make setup")
    per_run = [one_run(run, args) for run in range(1, args.runs + 1)]
    if args.runs > 1:
        show_median(per_run)
    print(f"command: {' '.join([os.path.relpath(sys.executable, ROOT), *sys.argv])}; {load()}")


if __name__ == "__main__":
    main()
