"""Broker faults on the three-node cluster during a real enrichment run under load: nothing
acknowledged is lost, every purchase is in the output or the dead letters, duplicates stay
within the interrupted micro-batch, and every error is one clear line (issue 13). A
partition leader SIGKILLed mid-run is the exactly-once module's, with the stricter check (no
duplicate but the generator's own retried input)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenarios import FaultResult, two_brokers_down

from streamscale.kafka import broker as embedded

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def check(result: FaultResult) -> None:
    r = result.reconciliation
    assert r.lost == 0, f"lost {r.lost} purchases, e.g. {r.lost_keys}"
    assert result.acked_missing == 0, "acknowledged records missing from the input topic"
    # A producer may write a record it reported as failed (even twice, after its epoch bump),
    # never one it reported acknowledged twice.
    assert result.input_duplicated_acked == 0
    assert r.unexpected == 0
    assert r.records_in == r.out + r.dead_lettered - r.duplicated
    assert r.dead_lettered > 0  # the spoiled purchases
    assert r.duplicated <= result.duplicate_bound


def test_two_brokers_down_fail_in_one_line_and_recover_when_one_returns(
    cluster3: embedded.Broker, tmp_path: Path
) -> None:
    result = two_brokers_down(cluster3, tmp_path)
    result.report()
    check(result)
    assert result.duplicate_bound > 0  # a batch was interrupted and replayed
    # The project's generator and the pipeline's sink: one line each, naming the cause.
    cli = result.errors["generator CLI"]
    assert result.cli_returncode == 1
    assert len(cli.splitlines()) == 1 and cli.startswith("error: NOT_ENOUGH_REPLICAS: "), cli
    sink = result.errors["pipeline"]
    assert "\n" not in sink and "NOT_ENOUGH_REPLICAS: " in sink, sink
    assert "restarted pipeline" not in result.errors
