"""The driver-side state of both seed pipelines as it grows (issue 14, deliverable 3).

    .venv/bin/python benchmarks/driver_state.py                       # both, defaults
    .venv/bin/python benchmarks/driver_state.py --skip-enrichment --sessions 100,10000
    .venv/bin/python benchmarks/driver_state.py --skip-games --products 1000,1000000

Calls the project's own functions directly, on one core, with no Spark and no Kafka:

**Game sessions** (``pipelines/game_sessions.py``, ``sessions.py``, ``frame_batches.py``).
A state holding N open sessions (one per machine, all within the gap) is built, then
``--reps`` + 1 micro-batches of ``--batch`` input records (frames and their approvals from
``generate.game_frames`` over the same N machines, ``--frame-rate`` frames/s of event time)
are run in a chain, the first as warm-up:

- executor side: :class:`.game_sessions.BatchTask` (the function ``mapInArrow`` runs) on
  each task's Arrow batch, tasks one after the other on this core. ``copartitioned``: 4
  tasks, each reading partition p of both topics (``streamscale-kafka``, the pipeline's
  default); ``connector``: 8 tasks of one topic-partition each (Spark's connector, the
  demo's reader), so every header is paired on the driver;
- driver side: the tasks' rows as one Arrow table (what ``toArrow()`` collects) through
  ``_split``, :func:`.sessions.advance`, :meth:`.sessions.State.to_bytes` (saved to the
  checkpoint every batch), and at the end :meth:`.sessions.State.from_bytes` (restart).

**Enrichment** (``pipelines/enrichment.py``, ``purchase_batches.py``). A referential of P
products (+5 % renames, +1 % tombstones, as in ``benchmarks/pipelines.py``):

- restart (``Enrichment._rebuild``): :func:`.enrichment.read_referential` over the whole
  compacted topic with Kafka's fetch and Spark SQL's parse stubbed out (they hand it the
  parsed Arrow rows; their own cost is NOT in these figures), :meth:`.enrichment.Table.apply`,
  then the first batch's :meth:`.purchase_batches.NameTable.of` and broadcast (``pickle.dump``
  to a file, what ``SparkContext.broadcast`` does on the driver);
- each batch whose previous batch changed the table (``--ref-updates`` renames a batch):
  ``read_referential`` of those records, ``group_versions``, ``NameTable.of`` over the whole
  table and its broadcast dump, ``Table.apply``; a batch after an unchanged table does none;
- executor side: :func:`.purchase_batches.enrich` over the batch's purchases in 4 tasks
  (output not produced to Kafka), and the ``pickle.load`` of the broadcast each Python worker
  does once per table version.

Then a fit: driver ms per batch = a + b·N + c·records (least squares over the measured
points) and executor records/s per core; from it the driver's share of a batch
``D / (D + records / (executors × rate))`` for 1, 2, 8, 32 executors, measured points marked.
Figures are medians of ``--reps`` runs (wall time of this process, one core).
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamscale.generate import referential as refgen
from streamscale.generate.game_frames import GameFrames, Machine
from streamscale.generate.profiles import make_schedule
from streamscale.generate.purchases import purchase_records
from streamscale.kafka import source as kafka_source
from streamscale.pipelines import enrichment as en
from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import game_sessions as gs
from streamscale.pipelines import hits as codec
from streamscale.pipelines import purchase_batches as pb
from streamscale.pipelines import sessions as driver
from streamscale.settings import Settings

REQUESTS, APPROVALS = "GAME-FRAME-RQ", "GAME-FRAME-RS"
PARTITIONS = 4
GAP_MS, WINDOW_MS, DELAY_MS = 30_000, 3_000, 10_000  # the settings' defaults
START_MS = 1_767_225_600_000
RENAME_FRACTION, DELETE_FRACTION = 0.05, 0.01
EXECUTORS = (1, 2, 8, 32)
MODEL_SESSIONS = (10**2, 10**3, 10**4, 10**5, 10**6, 10**7)
MODEL_PRODUCTS = (10**3, 10**4, 10**5, 10**6, 10**7)


def ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def ms(seconds: float) -> float:
    return seconds * 1000.0


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def table_md(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) < 1e5 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def arrow_batch(
    records: Sequence[tuple[str, bytes | None, bytes | None, int, int, int]],
) -> pa.RecordBatch:
    """Rows ``(topic, key, value, partition, offset, timestamp_ms)`` in the source's columns."""
    return pa.RecordBatch.from_pydict(
        {
            "key": [r[1] for r in records],
            "value": [r[2] for r in records],
            "topic": [r[0] for r in records],
            "partition": [r[3] for r in records],
            "offset": [r[4] for r in records],
            "timestamp": [r[5] * 1000 for r in records],
        },
        schema=pa.schema(
            [
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("timestamp", pa.timestamp("us")),
            ]
        ),
    )


# --- game sessions -------------------------------------------------------------------------


def machines(n: int, rng: random.Random) -> list[Machine]:
    """``n`` machines with distinct 6-digit ids (000000-999999 past 900,000 machines)."""
    base = 100_000 if n <= 900_000 else 0
    return [
        Machine(f"{base + i:06d}", rng.choice(codec.ZONES), rng.choice(codec.GAMES))
        for i in range(n)
    ]


def open_state(fleet: Sequence[Machine]) -> driver.State:
    """One open session per machine, its last frame 1 s before the batches start."""
    counters = tuple(
        {"frames": 3, "approvals": 3, "n_hits": 7, "impact_sum": 812}.get(name, 1)
        for name in fb.SUMMED
    )
    sessions = tuple(
        driver.Session(m.id, m.zone, m.game, START_MS - 20_000, START_MS - 1_000, counters, 201)
        for m in fleet
    )
    return driver.State(open=sessions, max_ts={"frames": START_MS - 1, "approvals": START_MS - 1})


def frame_batches(
    fleet: list[Machine], batch: int, count: int, frame_rate: float, seed: int
) -> list[list[tuple[str, bytes | None, bytes | None, int, int, int]]]:
    """``count`` micro-batches of ``batch`` records (frames and approvals, in produce order)
    with Kafka partition (crc32 of the key, the same on both topics) and offsets."""
    frames = int(batch * count / 1.98) + int(3 * frame_rate) + 100
    gen = GameFrames(
        random.Random(seed),
        make_schedule("steady", rate=frame_rate, count=frames),
        start_ms=START_MS,
        request_topic=REQUESTS,
        approval_topic=APPROVALS,
        machines=fleet,
    )
    offsets: dict[tuple[str, int], int] = {}
    out: list[list[tuple[str, bytes | None, bytes | None, int, int, int]]] = [[]]
    for topic, key, value, ts, _ in gen.records():
        k = key.encode() if key is not None else None
        p = zlib.crc32(k or b"") % PARTITIONS
        o = offsets.get((topic, p), 0)
        offsets[(topic, p)] = o + 1
        out[-1].append((topic, k, value.encode() if value is not None else None, p, o, ts))
        if len(out[-1]) == batch:
            if len(out) == count:
                break
            out.append([])
    if len(out) < count or len(out[-1]) < batch:
        raise RuntimeError("generator ran short: raise the frame count")
    return out


def tasks_of(
    records: Sequence[tuple[str, bytes | None, bytes | None, int, int, int]], mode: str
) -> list[pa.RecordBatch]:
    """The batch as its tasks read it: one per partition (both topics) or per topic-partition."""
    groups: dict[Any, list[Any]] = {}
    for r in records:
        group = r[3] if mode == "copartitioned" else (r[0], r[3])
        groups.setdefault(group, []).append(r)
    return [arrow_batch(groups[g]) for g in sorted(groups)]


@dataclass
class GameRun:
    mode: str
    sessions: int
    batch: int
    exec_s: list[float]
    split_s: list[float]
    advance_s: list[float]
    to_bytes_s: list[float]
    from_bytes_s: list[float]
    driver_rows: list[int]
    span_sessions: list[int]
    pending: list[int]
    open_sessions: list[int]
    closed: list[int]
    state_bytes: int
    state_mb: float

    @property
    def driver_s(self) -> list[float]:
        return [
            a + b + c for a, b, c in zip(self.split_s, self.advance_s, self.to_bytes_s, strict=True)
        ]


def run_games(
    mode: str, n: int, batches: list[list[Any]], fleet: list[Machine], reps: int
) -> GameRun:
    state = open_state(fleet)
    tasks = [tasks_of(b, mode) for b in batches]
    run = GameRun(mode, n, len(batches[0]), [], [], [], [], [], [], [], [], [], [], 0, 0.0)
    data = b""
    for i, batch_tasks in enumerate(tasks):
        task = gs.BatchTask(
            requests=REQUESTS,
            window_ms=WINDOW_MS,
            gap_ms=GAP_MS,
            late_before=state.watermark(DELAY_MS),
            dlq="game-sessions-dlq",
            sink_options={},
        )
        outputs: list[pa.RecordBatch] = []
        exec_s = 0.0
        for rb in batch_tasks:
            began = time.perf_counter()
            outputs.extend(task(iter([rb])))
            exec_s += time.perf_counter() - began
        rows = pa.Table.from_batches(outputs)
        (spans, unpaired, _counts, max_ts), split_s = timed(lambda rows=rows: gs._split(rows))
        began = time.perf_counter()
        advanced = driver.advance(state, spans, unpaired, max_ts, gap_ms=GAP_MS, delay_ms=DELAY_MS)
        # The closed sessions would be written as JSON records: part of the driver's time.
        _ = [s.record(GAP_MS) for s in advanced.closed]
        advance_s = time.perf_counter() - began
        data, to_bytes_s = timed(lambda advanced=advanced: advanced.state.to_bytes())
        # Sessions made from spans this batch (Python objects): the tasks' spans and those of
        # the headers the driver paired (recomputed here, outside the timings).
        paired = fb.pair([state.pending, *unpaired]).approved
        made = sum(t.num_rows for t in spans) + fb.spans(paired, GAP_MS).num_rows
        state = advanced.state
        if i == 0:
            continue  # warm-up
        run.exec_s.append(exec_s)
        run.split_s.append(split_s)
        run.advance_s.append(advance_s)
        run.to_bytes_s.append(to_bytes_s)
        run.driver_rows.append(sum(t.num_rows for t in spans) + sum(t.num_rows for t in unpaired))
        run.span_sessions.append(made)
        run.pending.append(state.pending.num_rows)
        run.open_sessions.append(len(state.open))
        run.closed.append(len(advanced.closed))
    run.state_bytes = len(data)
    del state, advanced
    for _ in range(reps):
        gc.collect()
        restored, took = timed(lambda: driver.State.from_bytes(data))
        run.from_bytes_s.append(took)
        del restored
    gc.collect()
    tracemalloc.start()
    restored = driver.State.from_bytes(data)
    run.state_mb = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    del restored
    gc.collect()
    return run


def games(args: argparse.Namespace) -> list[GameRun]:
    runs: list[GameRun] = []
    for n in args.sessions:
        fleet = machines(n, random.Random(args.seed))
        for batch in args.batch if n <= args.all_max else args.batch[:1]:
            (batches, gen_s) = timed(
                lambda fleet=fleet, batch=batch: frame_batches(
                    fleet, batch, args.reps + 1, args.frame_rate, args.seed
                )
            )
            for mode in args.modes if n <= args.all_max else args.modes[:1]:
                began = time.perf_counter()
                reps = args.reps if n <= args.all_max else min(args.reps, 3)
                run = run_games(mode, n, batches[: reps + 1], fleet, reps)
                runs.append(run)
                print(
                    f"  games {mode} sessions={n:,} batch={batch:,}: driver "
                    f"{ms(median(run.driver_s)):.1f} ms, executor {ms(median(run.exec_s)):.1f} ms "
                    f"(generated in {gen_s:.1f} s, ran in {time.perf_counter() - began:.1f} s, "
                    f"RSS {rss_mb():,.0f} MB)",
                    flush=True,
                )
            del batches
        del fleet
        gc.collect()
    return runs


# --- enrichment ----------------------------------------------------------------------------


def referential_log(products: int, seed: int) -> pa.Table:
    """The compacted topic's records as ``parse_referential(...).toArrow()`` gives them:
    every product once (``"Amber Kettle 17"``, the generator's names), then renames
    (`` v2``) and tombstones shuffled, over 4 partitions (by product id)."""
    plan = refgen.plan_for_products(products, RENAME_FRACTION, DELETE_FRACTION)
    rng = np.random.default_rng(seed)
    adjectives = np.array(refgen.ADJECTIVES, dtype=object)
    nouns = np.array(refgen.NOUNS, dtype=object)

    def names(pids: Any, suffix: str) -> pa.Array:
        a = pa.array(adjectives[rng.integers(0, len(adjectives), len(pids))], pa.string())
        n = pa.array(nouns[rng.integers(0, len(nouns), len(pids))], pa.string())
        ids = pc.cast(pa.array(pids), pa.string())
        joined = pc.binary_join_element_wise(a, n, ids, " ")
        return pc.binary_join_element_wise(joined, pa.scalar(suffix), "") if suffix else joined

    pids = np.arange(1, products + 1, dtype=np.int64)
    renamed = rng.choice(pids, plan.renames, replace=False)
    deleted = rng.choice(pids, plan.deletes, replace=False)
    updates = np.concatenate([renamed, deleted])
    order = rng.permutation(len(updates))
    all_pids = np.concatenate([pids, updates[order]])
    all_names = pa.concat_arrays(
        [names(pids, ""), names(renamed, " v2"), pa.nulls(plan.deletes, pa.string())]
    )
    all_names = all_names.take(pa.array(np.concatenate([np.arange(products), products + order])))
    is_deleted = np.concatenate([np.zeros(products, bool), (order >= plan.renames)])
    return parsed_rows(all_pids, all_names, is_deleted, START_MS)


def parsed_rows(pids: Any, names: pa.Array, deleted: Any, first_ts: int) -> pa.Table:
    n = len(pids)
    partition = (pids % PARTITIONS).astype(np.int32)
    offset = np.zeros(n, np.int64)
    for p in range(PARTITIONS):
        at = np.flatnonzero(partition == p)
        offset[at] = np.arange(len(at))
    return pa.table(
        {
            "pid": pa.array(pids, pa.int64()),
            "ts_ms": pa.array(first_ts + np.arange(n, dtype=np.int64) // 1000),
            "name": names,
            "deleted": pa.array(deleted),
            "error": pa.nulls(n, pa.string()),
            "detail": pa.nulls(n, pa.string()),
            "key": pa.nulls(n, pa.binary()),
            "value": pa.nulls(n, pa.binary()),
            "topic": pa.nulls(n, pa.string()),
            "partition": pa.array(partition),
            "offset": pa.array(offset),
        }
    )


class _Parsed:
    """What Spark SQL hands back in ``read_referential``: ``.select(...).toArrow()``."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def select(self, *columns: str) -> _Parsed:
        return _Parsed(self.table.select(list(columns)))

    def toArrow(self) -> pa.Table:
        return self.table


class _Spark:
    def createDataFrame(self, data: Any, schema: Any) -> Any:
        return data


def read_referential(rows: pa.Table) -> list[tuple[int, en.Version]]:
    """:func:`.enrichment.read_referential` over ``rows``, Kafka's fetch and Spark's parse
    stubbed (they return ``rows``)."""
    counts = {
        p: int(n)
        for p, n in enumerate(
            np.bincount(rows.column("partition").to_numpy(), minlength=PARTITIONS)
        )
    }

    def fetch(options: Any, part: Any, include_headers: bool) -> Iterator[pa.RecordBatch]:
        n = part.end - part.start
        yield pa.RecordBatch.from_arrays([pa.nulls(n, pa.int8())], ["x"])

    saved = (kafka_source.read_range, en.parse_referential)
    kafka_source.read_range = fetch  # type: ignore[assignment]
    en.parse_referential = lambda df: _Parsed(rows)  # type: ignore[assignment,return-value]
    try:
        good, read, bad = en.read_referential(
            _Spark(),  # type: ignore[arg-type]
            SETTINGS,
            "referentiel",
            {p: n for p, n in counts.items() if n},
            dict.fromkeys(counts, 0),
        )
    finally:
        kafka_source.read_range, en.parse_referential = saved
    assert read == rows.num_rows and not bad
    return good


SETTINGS = Settings()


def dict_bytes(names: dict[int, str]) -> int:
    size = sys.getsizeof(names)
    for k, v in names.items():
        size += sys.getsizeof(k) + sys.getsizeof(v)
    return size


def broadcast_dump(value: Any, path: str) -> int:
    """What ``SparkContext.broadcast`` does on the driver: pickle the value to a file."""
    with open(path, "wb") as f:
        pickle.dump(value, f, pickle.HIGHEST_PROTOCOL)
    return os.path.getsize(path)


def broadcast_load(path: str) -> Any:
    """What each Python worker does once per broadcast: unpickle it from the file."""
    with open(path, "rb") as f:
        return pickle.load(f)


def purchase_batch(products: int, batch: int, seed: int, ts_ms: int) -> list[pa.RecordBatch]:
    """``batch`` purchases (the generator's, 10 % unknown products) in 4 tasks."""
    records = list(purchase_records(random.Random(seed), batch, "achats", products=products))
    rows = [
        ("achats", key.encode(), value.encode(), i % PARTITIONS, i // PARTITIONS, ts_ms)
        for i, (_, key, value, _, _) in enumerate(records)
        if key is not None and value is not None
    ]
    return [arrow_batch(rows[p::PARTITIONS]) for p in range(PARTITIONS)]


@dataclass
class Restart:
    products: int
    records: int
    read_s: list[float]
    apply_s: list[float]
    names_s: list[float]
    dump_s: list[float]
    peak_rss_mb: float

    @property
    def total_s(self) -> list[float]:
        return [
            a + b + c + d
            for a, b, c, d in zip(self.read_s, self.apply_s, self.names_s, self.dump_s, strict=True)
        ]


@dataclass
class EnrichBatch:
    products: int
    batch: int
    live: int
    dict_mb: float
    name_table_mb: float
    broadcast_mb: float
    changed_s: list[float]
    names_s: list[float]
    dump_s: list[float]
    unchanged_s: list[float]
    exec_s: list[float]
    load_s: list[float]


def restart(products: int, log: pa.Table, reps: int, path: str) -> tuple[Restart, en.Table]:
    out = Restart(products, log.num_rows, [], [], [], [], 0.0)
    table = en.Table()
    for _ in range(reps):
        del table
        gc.collect()
        table = en.Table()
        t0 = time.perf_counter()
        rows = read_referential(log)
        t1 = time.perf_counter()
        table.apply(rows)
        t2 = time.perf_counter()
        del rows
        t3 = time.perf_counter()
        names = pb.NameTable.of(table.names)
        t4 = time.perf_counter()
        broadcast_dump(names, path)
        t5 = time.perf_counter()
        del names
        read_s, apply_s, names_s, dump_s = t1 - t0, t2 - t1, t4 - t3, t5 - t4
        out.read_s.append(read_s)
        out.apply_s.append(apply_s)
        out.names_s.append(names_s)
        out.dump_s.append(dump_s)
    out.peak_rss_mb = peak_rss_mb()
    return out, table


def table_directly(log: pa.Table) -> en.Table:
    """The table a rebuild gives, made from the log without the per-row Python of a restart."""
    live = (
        log.select(["pid", "name", "deleted"])
        .group_by("pid", use_threads=False)
        .aggregate([("name", "last"), ("deleted", "last")])
    )
    live = live.filter(pc.invert(live.column("deleted_last")))
    table = en.Table()
    table.names = dict(
        zip(live.column("pid").to_pylist(), live.column("name_last").to_pylist(), strict=True)
    )
    table.version = 1
    return table


def enrich_batches(
    products: int, table: en.Table, batch: int, args: argparse.Namespace, path: str, reps: int
) -> EnrichBatch:
    live = len(table.names)
    out = EnrichBatch(
        products, batch, live, dict_bytes(table.names) / 1e6, 0.0, 0.0, [], [], [], [], [], []
    )
    rng = np.random.default_rng(args.seed)
    for i in range(reps + 1):
        ts = START_MS + 10_000_000 + i * 10_000
        tasks = purchase_batch(products, batch, args.seed + i, ts)
        pids = rng.choice(np.fromiter(table.names, np.int64, count=live), args.ref_updates)
        names = pc.binary_join_element_wise(
            pc.cast(pa.array(pids), pa.string()), pa.scalar(f"renamed {i}"), " "
        )
        batch_log = parsed_rows(pids, names, np.zeros(len(pids), bool), ts - 1)
        # process_batch, in its order: the batch's referential records, the table as a
        # broadcast (made anew: the previous batch changed it), the job, then the apply.
        began = time.perf_counter()
        good = read_referential(batch_log)
        versions = {
            pid: [(t, None if deleted else name) for _, _, t, name, deleted in vs]
            for pid, vs in en.group_versions(good).items()
        }
        name_table, names_s = timed(lambda: pb.NameTable.of(table.names))
        size, dump_s = timed(lambda name_table=name_table: broadcast_dump(name_table, path))
        task_pickle = pickle.dumps(
            en.EnrichTask(en.EnrichmentTopics(), SETTINGS.source_options(), None, versions)
        )
        before_job = time.perf_counter() - began
        loaded, load_s = timed(lambda: broadcast_load(path))
        exec_s = 0.0
        for rb in tasks:
            result = pb.Enriched()
            began = time.perf_counter()
            pb.enrich(rb, loaded, versions, "achats-enrichis", result)
            exec_s += time.perf_counter() - began
            assert result.counts["enriched"] == rb.num_rows, result.counts
        _, apply_s = timed(lambda good=good: table.apply(good))
        # A batch after an unchanged table: the version check, the task, nothing else.
        began = time.perf_counter()
        _ = pickle.dumps(en.EnrichTask(en.EnrichmentTopics(), SETTINGS.source_options(), None, {}))
        unchanged_s = time.perf_counter() - began
        if i == 0:
            continue
        out.changed_s.append(before_job + apply_s)
        out.names_s.append(names_s)
        out.dump_s.append(dump_s)
        out.unchanged_s.append(unchanged_s)
        out.exec_s.append(exec_s)
        out.load_s.append(load_s)
        out.broadcast_mb = size / 1e6
        out.name_table_mb = (name_table.ids.nbytes + name_table.names.nbytes) / 1e6
        del task_pickle
    return out


def enrichment(args: argparse.Namespace) -> tuple[list[Restart], list[EnrichBatch]]:
    restarts: list[Restart] = []
    batches: list[EnrichBatch] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "broadcast.pickle")
        for p in args.products:
            began = time.perf_counter()
            log = referential_log(p, args.seed)
            if p <= args.restart_max:
                r, table = restart(p, log, args.reps, path)
                restarts.append(r)
            else:
                table = table_directly(log)
            del log
            gc.collect()
            for batch in args.batch if p <= args.all_max else args.batch[:1]:
                reps = args.reps if p <= args.all_max else min(args.reps, 3)
                b = enrich_batches(p, table, batch, args, path, reps)
                batches.append(b)
                print(
                    f"  enrichment products={p:,} batch={batch:,}: driver (table changed) "
                    f"{ms(median(b.changed_s)):.1f} ms, executor {ms(median(b.exec_s)):.1f} ms "
                    f"(RSS {rss_mb():,.0f} MB, {time.perf_counter() - began:.1f} s so far)",
                    flush=True,
                )
            del table
            gc.collect()
    return restarts, batches


# --- the model -----------------------------------------------------------------------------


def fit(features: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Non-negative least squares of ``y = a + Σ coef·feature``, relative errors (the points
    span orders of magnitude): the best fit over the subsets of terms whose coefficients
    are all >= 0. Returns ``[a, *coefs]``."""
    x = np.array([[1.0, *f] for f in features])
    yy = np.array(y)
    w = 1.0 / np.maximum(yy, 1e-3)
    k = x.shape[1]
    best: tuple[float, Any] = (float("inf"), np.zeros(k))
    for mask in range(1, 2**k):
        cols = [i for i in range(k) if mask >> i & 1]
        coef, *_ = np.linalg.lstsq(x[:, cols] * w[:, None], yy * w, rcond=None)
        if (coef < 0).any():
            continue
        full = np.zeros(k)
        full[cols] = coef
        err = float(np.sum(((x @ full - yy) * w) ** 2))
        if err < best[0]:
            best = (err, full)
    return [float(v) for v in best[1]]


def span_sessions(sessions: float, records: float, tasks: int) -> float:
    """Expected sessions made from spans in a batch: the distinct machines among the frames
    (half the records) each span-making party pairs. ``tasks`` 1 (connector): the driver
    pairs every frame; ``tasks`` > 1 (co-partitioned): assume half the frames pair in their
    task (the ``tasks`` tasks each make spans of their share) and half on the driver (their
    approval in a later batch: a batch of 20,000 records spans about 1 s of event time here,
    the approval delay is 0-2 s)."""
    frames = records / 2

    def distinct(n: float, k: float) -> float:
        return n * -float(np.expm1(-k / n))

    if tasks == 1:
        return distinct(sessions, frames)
    return tasks * distinct(sessions, frames / 2 / tasks) + distinct(sessions, frames / 2)


def model(
    title: str,
    what: str,
    sizes: Sequence[int],
    driver_ms: Callable[[float, float], float],
    rates: Sequence[tuple[str, float]],
    batches: Sequence[int],
    measured: set[int],
    extra_exec: Callable[[float], float] = lambda size: 0.0,
) -> None:
    """Print the driver's share of a batch and records/s for 1, 2, 8, 32 executors, and
    where the share passes 50 %. A batch is the driver's work then the executors' (they do
    not overlap in ``foreachBatch``); executor time = records / (executors × rate) +
    ``extra_exec(size)`` (the broadcast load, once per executor)."""

    def share(size: float, batch: float, e: int, rate: float) -> tuple[float, float]:
        d = driver_ms(size, batch)
        x = 1000.0 * batch / (e * rate) + extra_exec(size)
        return d / (d + x), batch / ((d + x) / 1000)

    for label, rate in rates:
        batch = batches[0]
        rows = []
        for size in sizes:
            name = f"{size:.0e}".replace("e+0", "e") + (" (m)" if size in measured else "")
            row: list[Any] = [name, driver_ms(size, batch)]
            for e in EXECUTORS:
                part, throughput = share(size, batch, e, rate)
                row.append(f"{100 * part:.0f} % / {throughput:,.0f}")
            rows.append(row)
        header = [what, "driver ms/batch", *(f"{e} exec: share / rec/s" for e in EXECUTORS)]
        print(
            f"\n### {title}, executors at {rate:,.0f} records/s each ({label}), "
            f"{batch:,} records a batch (modelled; (m): size measured)\n"
        )
        print(table_md(header, rows))
        for batch in batches:
            crossing = []
            for e in EXECUTORS:
                lo, hi = 1.0, 1e10
                if share(lo, batch, e, rate)[0] >= 0.5:
                    crossing.append(f"{e}: below 1")
                    continue
                if share(hi, batch, e, rate)[0] < 0.5:
                    crossing.append(f"{e}: never")
                    continue
                for _ in range(100):
                    mid = (lo * hi) ** 0.5
                    lo, hi = (mid, hi) if share(mid, batch, e, rate)[0] < 0.5 else (lo, mid)
                crossing.append(f"{e}: {lo:,.0f}")
            print(
                f"\ndriver share passes 50 % ({batch:,} records a batch) at {what} = "
                + "; ".join(crossing)
                + " (executors: size)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=ints, default=ints("100,10000,1000000"))
    parser.add_argument("--products", type=ints, default=ints("1e3,1e4,1e5,1e6,1e7"))
    parser.add_argument(
        "--batch", type=ints, default=ints("20000,100000"), help="input records per batch"
    )
    parser.add_argument("--modes", default="copartitioned,connector")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--frame-rate", type=float, default=10_000.0, help="event-time frames/s")
    parser.add_argument("--ref-updates", type=int, default=100, help="renames per batch")
    parser.add_argument(
        "--restart-max", type=int, default=1_000_000, help="largest table rebuilt as on restart"
    )
    parser.add_argument(
        "--model-batch", type=ints, default=ints("20000,100000"), help="records a batch, model"
    )
    parser.add_argument(
        "--all-max",
        type=int,
        default=1_000_000,
        help="larger sizes run only the first --batch and mode, with at most 3 reps: they "
        "take long",
    )
    parser.add_argument(
        "--games-exec-us",
        type=lambda t: {k: float(v) for k, v in (x.split("=") for x in t.split(","))},
        default={},
        help="also model with this executor CPU per record, per mode (µs, e.g. from "
        "docs/benchmarks.md): copartitioned=3.4,connector=7.8",
    )
    parser.add_argument("--enrich-exec-us", type=float, help="the same for the enrichment")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--skip-games", action="store_true")
    parser.add_argument("--skip-enrichment", action="store_true")
    args = parser.parse_args()
    args.modes = args.modes.split(",")
    print("$ " + " ".join([".venv/bin/python", *sys.argv]))
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load average "
        f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} cores; medians of {args.reps} runs\n",
        flush=True,
    )
    # A task's first call freezes what the process holds (as in a fresh Python worker): make
    # it now, before any driver state exists, so the driver's collector sees all of it.
    list(gs.BatchTask(REQUESTS, WINDOW_MS, GAP_MS, None, "dlq", {})(iter([])))

    if not args.skip_games:
        runs = games(args)
        rows = [
            [
                r.mode,
                r.sessions,
                r.batch,
                median(r.driver_rows),
                median(r.span_sessions),
                median(r.pending),
                median(r.open_sessions),
                ms(median(r.exec_s)),
                r.batch / median(r.exec_s),
                ms(median(r.split_s)),
                ms(median(r.advance_s)),
                ms(median(r.to_bytes_s)),
                ms(median(r.driver_s)),
                100 * median(r.driver_s) / (median(r.driver_s) + median(r.exec_s)),
                r.state_bytes / 1e6,
                ms(median(r.from_bytes_s)),
                r.state_mb,
            ]
            for r in runs
        ]
        header = [
            "mode",
            "open sessions",
            "records/batch",
            "rows to driver",
            "sessions from spans",
            "pending headers",
            "open after",
            "executor ms (1 core)",
            "exec rec/s/core",
            "_split ms",
            "advance ms",
            "to_bytes ms",
            "driver ms",
            "driver % (1 exec)",
            "state MB (bytes)",
            "from_bytes ms",
            "state MB (memory)",
        ]
        print("\n## Game sessions: driver and executor per micro-batch (measured)\n")
        print(table_md(header, rows))
        for mode in args.modes:
            mine = [r for r in runs if r.mode == mode]
            tasks = PARTITIONS if mode == "copartitioned" else 1
            a0, b1, c1, d1 = fit(
                [(r.sessions, median(r.span_sessions), r.batch) for r in mine],
                [ms(median(r.driver_s)) for r in mine],
            )
            rate = median([r.batch / median(r.exec_s) for r in mine])

            def driver_ms(
                n: float, records: float, a0=a0, b1=b1, c1=c1, d1=d1, tasks=tasks
            ) -> float:
                return a0 + b1 * n + c1 * span_sessions(n, records, tasks) + d1 * records

            print(
                f"\nfit ({mode}): driver ms = {a0:.2f} + {b1 * 1000:.2f} µs × open sessions + "
                f"{c1 * 1000:.2f} µs × sessions made from spans + {d1 * 1000:.3f} µs × records; "
                f"executor task {rate:,.0f} records/s per core (median over the points)"
            )
            print(
                "point (sessions/records): driver ms measured vs fitted (span sessions "
                "measured vs expected): "
                + ", ".join(
                    f"{r.sessions:,}/{r.batch:,}: {ms(median(r.driver_s)):.0f} vs "
                    f"{driver_ms(r.sessions, r.batch):.0f} ({median(r.span_sessions):,.0f} vs "
                    f"{span_sessions(r.sessions, r.batch, tasks):,.0f})"
                    for r in mine
                )
            )
            rates = [("task function measured here", rate)]
            if mode in args.games_exec_us:
                rates.append(("--games-exec-us", 1e6 / args.games_exec_us[mode]))
            model(
                f"Driver share, game sessions ({mode})",
                "sessions",
                MODEL_SESSIONS,
                driver_ms,
                rates,
                args.model_batch,
                {r.sessions for r in mine},
            )
            per = [(r.sessions, median(r.from_bytes_s)) for r in mine if r.sessions >= 10**4]
            print(
                "\nrestart (from_bytes), µs per open session: "
                + ", ".join(f"{n:,}: {1e6 * t / n:.1f}" for n, t in per)
            )
        sys.stdout.flush()

    if not args.skip_enrichment:
        restarts, batches = enrichment(args)
        if restarts:
            print("\n## Enrichment: table rebuild on restart (measured, Kafka and Spark SQL not)\n")
            header = [
                "products",
                "referential records",
                "read_referential ms (Python part)",
                "Table.apply ms",
                "NameTable.of ms",
                "broadcast dump ms",
                "restart total ms",
                "peak RSS of this process MB",
            ]
            rows = [
                [
                    r.products,
                    r.records,
                    ms(median(r.read_s)),
                    ms(median(r.apply_s)),
                    ms(median(r.names_s)),
                    ms(median(r.dump_s)),
                    ms(median(r.total_s)),
                    r.peak_rss_mb,
                ]
                for r in restarts
            ]
            print(table_md(header, rows))
            per = [median(r.total_s) / r.records * 1e6 for r in restarts if r.products >= 10**5]
            if per:
                print(
                    "\nrestart, µs per referential record at >= 1e5 products: "
                    + ", ".join(f"{x:.2f}" for x in per)
                )
        print(
            f"\n## Enrichment: per micro-batch, {args.ref_updates} referential updates a batch "
            "(measured)\n"
        )
        header = [
            "products",
            "live",
            "records/batch",
            "dict MB (driver)",
            "NameTable MB",
            "broadcast MB",
            "NameTable.of ms",
            "broadcast dump ms",
            "driver ms, table changed",
            "driver ms, unchanged",
            "executor ms (1 core)",
            "exec rec/s/core",
            "broadcast load ms (per worker)",
            "driver % (1 exec, changed)",
        ]
        rows = [
            [
                b.products,
                b.live,
                b.batch,
                b.dict_mb,
                b.name_table_mb,
                b.broadcast_mb,
                ms(median(b.names_s)),
                ms(median(b.dump_s)),
                ms(median(b.changed_s)),
                ms(median(b.unchanged_s)),
                ms(median(b.exec_s)),
                b.batch / median(b.exec_s),
                ms(median(b.load_s)),
                100 * median(b.changed_s) / (median(b.changed_s) + median(b.exec_s)),
            ]
            for b in batches
        ]
        print(table_md(header, rows))
        a0, b1, c1 = fit(
            [(b.products, b.batch) for b in batches], [ms(median(b.changed_s)) for b in batches]
        )
        rate = median([b.batch / median(b.exec_s) for b in batches])
        l0, l1, _ = fit(
            [(b.products, b.batch) for b in batches], [ms(median(b.load_s)) for b in batches]
        )

        def enrich_ms(p: float, records: float) -> float:
            return a0 + b1 * p + c1 * records

        print(
            f"\nfit (table changed every batch): driver ms = {a0:.2f} + {b1 * 1000:.3f} µs × "
            f"products + {c1 * 1000:.3f} µs × records; executor task {rate:,.0f} records/s per "
            f"core (median); broadcast load per worker ms = {l0:.2f} + {l1 * 1000:.4f} µs × "
            "products"
        )
        print(
            "point (products/records): driver ms measured vs fitted: "
            + ", ".join(
                f"{b.products:,}/{b.batch:,}: {ms(median(b.changed_s)):.0f} vs "
                f"{enrich_ms(b.products, b.batch):.0f}"
                for b in batches
            )
        )
        rates = [("task function measured here", rate)]
        if args.enrich_exec_us:
            rates.append(("--enrich-exec-us", 1e6 / args.enrich_exec_us))
        model(
            "Driver share, enrichment, table changed every batch (executor time includes one "
            "broadcast load per executor)",
            "products",
            MODEL_PRODUCTS,
            enrich_ms,
            rates,
            args.model_batch,
            {b.products for b in batches},
            lambda p: l0 + l1 * p,
        )
        if restarts:
            big = restarts[-1]
            per_record = median(big.total_s) / big.records
            target = refgen.plan_for_products(10**7, RENAME_FRACTION, DELETE_FRACTION).total
            line = (
                f"\nrestart at 1e7 products ({target:,} records), extrapolated linearly from "
                f"{big.products:,} ({1e6 * per_record:.2f} µs a record): "
                f"{per_record * target:.1f} s (Python part)"
            )
            if len(restarts) > 1:
                prev = restarts[-2]
                growth = (big.peak_rss_mb - prev.peak_rss_mb) / (big.records - prev.records)
                line += (
                    f"; peak RSS {big.peak_rss_mb + growth * (target - big.records):,.0f} MB "
                    f"({1e3 * growth:.2f} KB a record between {prev.products:,} and "
                    f"{big.products:,} products)"
                )
            print(line)
        print(
            "\n(with an unchanged table the enrichment driver does "
            + ", ".join(
                f"{ms(median(b.unchanged_s)):.2f} ms" for b in batches if b.batch == args.batch[0]
            )
            + " a batch: no share to speak of)"
        )


if __name__ == "__main__":
    main()
