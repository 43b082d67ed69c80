"""The enrichment pipeline as its own process, for fault runs: the library equivalent of
``streamscale run enrichment`` on topics named ``<prefix>-achats`` etc., with the sink's
``delivery.timeout.ms`` settable (a broker outage then fails the sink within the test's time).

Prints one line per micro-batch (:func:`streamscale.pipelines.runner.drive`), then
``stopped`` on SIGTERM/SIGINT (after the batch in flight commits), or ``error: <one line>``
and exit status 1 if the query fails.

    python enrichment_proc.py BOOTSTRAP CHECKPOINT PREFIX [--max-offsets N]
        [--trigger-ms MS] [--delivery-timeout-ms MS]
"""

from __future__ import annotations

import argparse
import sys

from streamscale.kafka.client import first_error_line
from streamscale.pipelines.enrichment import Enrichment, EnrichmentTopics
from streamscale.pipelines.runner import StopRequest, drive
from streamscale.settings import Settings


class FaultSettings(Settings):
    """The project's settings with the sink producer's delivery timeout set."""

    delivery_timeout_ms: int = 120_000

    def source_options(self) -> dict[str, str]:
        return {
            **super().source_options(),
            "kafka.delivery.timeout.ms": str(self.delivery_timeout_ms),
        }


def topics(prefix: str) -> EnrichmentTopics:
    return EnrichmentTopics(
        purchases=f"{prefix}-achats",
        referential=f"{prefix}-referentiel",
        output=f"{prefix}-achats-enrichis",
        dlq=f"{prefix}-enrichment-dlq",
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("checkpoint")
    parser.add_argument("prefix")
    parser.add_argument("--max-offsets", type=int, default=20_000)
    parser.add_argument("--trigger-ms", type=int, default=500)
    parser.add_argument("--delivery-timeout-ms", type=int, default=120_000)
    args = parser.parse_args()

    from streamscale.spark import session, stop

    settings = FaultSettings(
        bootstrap_servers=args.bootstrap,
        spark_master="local[2]",
        shuffle_partitions=2,
        max_offsets_per_trigger=args.max_offsets,
        starting_offsets="earliest",
        metrics_port=-1,
        delivery_timeout_ms=args.delivery_timeout_ms,
    )
    spark = session(settings, app_name="streamscale-faults")
    try:
        pipeline = Enrichment(settings, args.checkpoint, topics(args.prefix))
        trigger = {"processingTime": f"{args.trigger_ms} milliseconds"}
        with StopRequest() as stop_request:
            query = pipeline.start(spark, trigger)
            print(f"started {query.id}", flush=True)
            try:
                drive(query, pipeline, stop_request.event, lambda line: print(line, flush=True))
            except Exception as exc:  # awaitTermination raises the query's failure
                print(f"error: {first_error_line(str(exc))}", flush=True)
                return 1
        error = query.exception()
        if error is not None:
            print(f"error: {first_error_line(str(error))}", flush=True)
            return 1
        print("stopped", flush=True)
        return 0
    finally:
        stop(spark)


if __name__ == "__main__":
    sys.exit(main())
