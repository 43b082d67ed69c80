"""``streamscale topics apply``: declarative topics (filled in with the admin module)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Kafka topics: create what is missing, report drift.")
