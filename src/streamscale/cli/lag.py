"""``streamscale lag``: the lag table of a pipeline, like ``kafka-consumer-groups --describe``.

Two sources of truth:

- a running pipeline: its ``/metrics`` (``--metrics-url``), which has end and processed
  offsets, records lag and time lag per partition;
- a stopped one: its checkpoint (``--checkpoint``), whose newest committed batch gives the
  processed offsets, and the broker (``--bootstrap``) for the end offsets. Time lag is unknown
  there (no history), shown as ``-``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from prometheus_client.parser import text_string_to_metric_families

from streamscale.errors import Error
from streamscale.lag.model import TopicPartition, merge_offsets, parse_offsets, records_lag
from streamscale.settings import Settings


class CheckpointError(Error, RuntimeError):
    """The checkpoint has no committed batch, or its offsets cannot be read."""


@dataclass(frozen=True)
class LagRow:
    """One line of the table."""

    query: str
    topic: str
    partition: int
    end_offset: int | None
    processed_offset: int | None
    lag: int | None
    time_lag_s: float | None


# ------------------------------------------------------------------------------- metrics
def rows_from_metrics(text: str) -> tuple[list[LagRow], dict[str, float]]:
    """Rows from a ``/metrics`` text, and the sample age of each query."""
    wanted = {
        "streamscale_end_offset": "end",
        "streamscale_processed_offset": "processed",
        "streamscale_records_lag": "lag",
        "streamscale_time_lag_seconds": "time",
    }
    values: dict[tuple[str, str, int], dict[str, float]] = {}
    ages: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "streamscale_sample_age_seconds":
                ages[labels.get("query", "")] = sample.value
            elif sample.name in wanted:
                try:
                    key = (labels["query"], labels["topic"], int(labels["partition"]))
                except (KeyError, ValueError):
                    continue
                values.setdefault(key, {})[wanted[sample.name]] = sample.value

    def as_int(v: float | None) -> int | None:
        return None if v is None else int(v)

    rows = [
        LagRow(
            q,
            t,
            p,
            as_int(v.get("end")),
            as_int(v.get("processed")),
            as_int(v.get("lag")),
            v.get("time"),
        )
        for (q, t, p), v in sorted(values.items())
    ]
    return rows, ages


def fetch_metrics(url: str, timeout_s: float = 5.0) -> str:
    """GET ``url`` (a ``/metrics`` endpoint) as text."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return str(response.read().decode())


# ---------------------------------------------------------------------------- checkpoint
def committed_offsets(checkpoint: Path) -> tuple[int, dict[TopicPartition, int]]:
    """The newest committed batch id of a Spark checkpoint and its Kafka offsets.

    ``commits/<n>`` marks batch n as committed; ``offsets/<n>`` holds a version line
    (``v1``), a metadata line and one line per source (JSON offsets, ``-`` when none).
    Sources whose offsets are not Kafka-shaped are skipped.
    """
    commits = checkpoint / "commits"
    if not commits.is_dir():
        raise CheckpointError(f"{checkpoint} is not a streaming checkpoint (no commits/)")
    batches = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
    if not batches:
        raise CheckpointError(f"{checkpoint} has no committed batch yet")
    batch = max(batches)
    path = checkpoint / "offsets" / str(batch)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror}") from None
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise CheckpointError(f"{path} is not an offset log entry (expected v1, metadata)")
    offsets: dict[TopicPartition, int] = {}
    for line in lines[2:]:
        parsed = parse_offsets(line)
        for tp, off in (parsed or {}).items():
            offsets[tp] = min(off, offsets.get(tp, off))
    if not offsets:
        raise CheckpointError(f"{path} has no Kafka offsets")
    return batch, offsets


def rows_from_offsets(
    query: str, processed: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[LagRow]:
    """Rows from processed and end offsets (no time lag), paired as the lag model pairs them
    (:func:`~streamscale.lag.model.merge_offsets`): a partition the checkpoint has not reached
    yet shows its whole log as lag."""
    rows = []
    for p in merge_offsets(end, processed):
        if (p.topic, p.partition) in end:
            lag = records_lag(p.end_offset, p.processed_offset)
            rows.append(
                LagRow(query, p.topic, p.partition, p.end_offset, p.processed_offset, lag, None)
            )
        else:  # the broker did not report it (the partition is gone): unknown, not zero
            rows.append(LagRow(query, p.topic, p.partition, None, p.processed_offset, None, None))
    return rows


def end_offsets(settings: Settings, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """True end offsets from the broker (through the Kafka admin module) of every partition of
    the topics of ``tps`` (so that one added since the last batch counts too)."""
    from streamscale.kafka.admin import KafkaAdmin
    from streamscale.kafka.offsets import TopicPartition as KTP

    tps = list(tps)
    admin = KafkaAdmin(settings.kafka_config(), settings.request_timeout_s)
    try:
        topics = admin.topics()
        wanted = {KTP(t, p) for t, p in tps}
        for topic in {t for t, _ in tps}:
            wanted |= {KTP(topic, p) for p in range(topics.get(topic, 0))}
        found = admin.end_offsets(sorted(wanted))
    finally:
        admin.close()
    return {(tp[0], tp[1]): int(off) for tp, off in found.items()}


# ------------------------------------------------------------------------------- display
HEADER = ("QUERY", "TOPIC", "PARTITION", "END-OFFSET", "PROCESSED-OFFSET", "LAG", "TIME-LAG")


def format_table(rows: Iterable[LagRow]) -> str:
    """Aligned columns; unknown values as ``-``, time lag in seconds."""

    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.1f}s"
        return str(value)

    table = [HEADER] + [
        (
            r.query,
            r.topic,
            str(r.partition),
            cell(r.end_offset),
            cell(r.processed_offset),
            cell(r.lag),
            cell(r.time_lag_s),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table
    )


def lag(
    metrics_url: str | None = typer.Option(
        None, "--metrics-url", help="/metrics of a running pipeline, http://127.0.0.1:PORT/metrics"
    ),
    checkpoint: Path | None = typer.Option(
        None, "--checkpoint", help="Checkpoint directory of a stopped query"
    ),
    bootstrap: str | None = typer.Option(
        None, "--bootstrap", help="With --checkpoint: overrides STREAMSCALE_BOOTSTRAP_SERVERS"
    ),
    query: str | None = typer.Option(None, "--query", help="Only this query (metrics mode)"),
) -> None:
    """Print per-partition end offset, processed offset, lag and time lag of a pipeline."""
    if (metrics_url is None) == (checkpoint is None):
        typer.echo("error: give exactly one of --metrics-url or --checkpoint", err=True)
        raise typer.Exit(2)
    if metrics_url is not None:
        try:
            rows, ages = rows_from_metrics(fetch_metrics(metrics_url))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            typer.echo(f"error: cannot read {metrics_url}: {exc}", err=True)
            raise typer.Exit(1) from None
        if query is not None:
            rows = [r for r in rows if r.query == query]
            ages = {q: a for q, a in ages.items() if q == query}
        if not rows:
            typer.echo("no lag reported (no query running, or none reads Kafka yet)")
            return
        typer.echo(format_table(rows))
        for name, age in sorted(ages.items()):
            typer.echo(f"\n{name}: newest sample {age:.1f}s old")
        return
    assert checkpoint is not None
    try:
        overrides: dict[str, Any] = {"bootstrap_servers": bootstrap} if bootstrap else {}
        settings = Settings(**overrides)
        batch, processed = committed_offsets(checkpoint)
        end = end_offsets(settings, processed)
    except Exception as exc:  # Kafka, checkpoint or settings: say it and exit 1
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(format_table(rows_from_offsets(checkpoint.name, processed, end)))
    typer.echo(f"\ncheckpoint {checkpoint}: last committed batch {batch}")
