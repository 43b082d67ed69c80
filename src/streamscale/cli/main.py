"""Entry point: ``streamscale --help`` lists the command groups and every environment variable."""

from __future__ import annotations

import typer

from streamscale.cli import (
    attach,
    broker,
    cluster,
    demo,
    generate,
    kube,
    lag,
    run,
    simulate,
    topics,
)
from streamscale.settings import env_help

app = typer.Typer(
    name="streamscale",
    help="Elastic PySpark Structured Streaming on Kafka.\n\n"
    "Settings come from environment variables:\n\n" + env_help().replace("\n", "\n\n"),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(broker.app, name="broker")
app.add_typer(topics.app, name="topics")
app.command("lag")(lag.lag)
app.add_typer(cluster.app, name="cluster")
app.add_typer(kube.app, name="kube")
app.add_typer(generate.app, name="generate")
app.command("simulate")(simulate.simulate)
app.command("run")(run.run)
app.command("demo")(demo.demo)
app.command("attach", context_settings={"allow_interspersed_args": False})(attach.attach)


if __name__ == "__main__":
    app()
