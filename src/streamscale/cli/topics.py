"""``streamscale topics apply``: create the topics the pipelines need; report drift."""

from __future__ import annotations

import typer

from streamscale.errors import KafkaRequestError
from streamscale.kafka.admin import KafkaAdmin, TopicSpec
from streamscale.pipelines.topics import pipeline_topics
from streamscale.settings import load_settings

app = typer.Typer(help="Kafka topics: create what is missing, report drift, never destroy.")


@app.command()
def apply(
    pipeline: list[str] = typer.Option(
        [], "--pipeline", "-p", help="enrichment, game-sessions (default: both)"
    ),
    partitions: int = typer.Option(4, min=1, help="Partitions of topics that are created"),
    topic: list[str] = typer.Option([], "--topic", help="Extra stream topic(s) to ensure"),
    bootstrap: str | None = typer.Option(None, help="Overrides STREAMSCALE_BOOTSTRAP_SERVERS"),
) -> None:
    """Create missing topics with reliable defaults; existing ones are checked, not altered."""
    settings = load_settings(bootstrap_servers=bootstrap)
    catalog = pipeline_topics(
        partitions, settings.retention_ms, settings.replication_factor, settings.delivery
    )
    unknown = sorted(set(pipeline) - set(catalog))
    if unknown:
        typer.echo(f"error: unknown pipeline(s) {unknown}; choose from {sorted(catalog)}", err=True)
        raise typer.Exit(2)
    specs = [s for name in (pipeline or sorted(catalog)) for s in catalog[name]]
    specs += [
        TopicSpec(t, partitions, settings.replication_factor, retention_ms=settings.retention_ms)
        for t in topic
    ]
    admin = KafkaAdmin(settings.kafka_config(), settings.request_timeout_s)
    try:
        report = admin.apply(specs)
    except KafkaRequestError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        admin.close()
    for name in report.created:
        typer.echo(f"created  {name}")
    for name in report.unchanged:
        typer.echo(f"ok       {name}")
    for line in report.drift:
        typer.echo(f"drift    {line}")
    for line in report.warnings:
        typer.echo(f"warning  {line}", err=True)
