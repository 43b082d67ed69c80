"""``--spark-conf KEY=VALUE``: Spark settings a benchmark run sets on top of the project's
(:meth:`streamscale.settings.Settings.spark_conf`), to measure one setting against its
default in the same benchmark, for instance a state store's block cache."""

from __future__ import annotations

import argparse


def parse(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a pair; a clear error for anything else."""
    key, sep, value = item.partition("=")
    if not sep or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"--spark-conf wants spark.KEY=VALUE, got {item!r}")
    return key, value


def add_argument(parser: argparse.ArgumentParser) -> None:
    """A repeatable ``--spark-conf``; ``args.spark_conf`` is a dict (empty by default)."""
    parser.add_argument(
        "--spark-conf",
        type=parse,
        action="append",
        default=[],
        metavar="spark.KEY=VALUE",
        help="a Spark setting on top of the project's (repeatable)",
    )


def of(args: argparse.Namespace) -> dict[str, str]:
    """The settings given with ``--spark-conf``, later ones winning."""
    return dict(args.spark_conf)
