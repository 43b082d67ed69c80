"""The documentation's reference pages list everything the code defines (they are generated
from it at build time: this holds the generator to the code)."""

from __future__ import annotations

import dataclasses

import pytest

from streamscale.autoscale.controller import DecisionRecord
from streamscale.autoscale.policy import Reason
from streamscale.cli import reference
from streamscale.settings import Settings


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return reference.pages()


def test_every_setting_is_listed_with_its_description(pages: dict[str, str]) -> None:
    page = pages["reference/settings.md"]
    for name, field in Settings.model_fields.items():
        row = next(x for x in page.splitlines() if f"`STREAMSCALE_{name.upper()}`" in x)
        assert field.description and " ".join(field.description.split())[:40] in row, name


def test_every_command_and_option_is_listed(pages: dict[str, str]) -> None:
    page = pages["reference/cli.md"]
    options = reference.cli_options()
    assert {"streamscale attach", "streamscale run", "streamscale demo"} <= set(options)
    for command, names in options.items():
        section = page.split(f"## `{command}`", 1)[1].split("\n## ", 1)[0]
        for name in names:
            assert f"`{name}`" in section, (command, name)


def test_study_options_exist_and_are_marked(pages: dict[str, str]) -> None:
    every = {name for names in reference.cli_options().values() for name in names}
    assert every >= reference.STUDY_OPTIONS, reference.STUDY_OPTIONS - every
    rows = [x for x in pages["reference/cli.md"].splitlines() if "`--surge-share`" in x]
    assert rows and all("*study*" in row for row in rows)


def test_every_metric_is_listed_with_its_labels(pages: dict[str, str]) -> None:
    from streamscale.lag.metrics import _families

    page = pages["reference/metrics.md"]
    families = _families()
    assert len(families) >= 30
    for name, family in families.items():
        shown = f"{name}_total" if family.type == "counter" else name
        row = next(x for x in page.splitlines() if x.startswith(f"| `{shown}` |"))
        for label in getattr(family, "_labelnames", ()):
            assert f"`{label}`" in row, (name, label)


def test_every_decision_field_and_reason_is_described(pages: dict[str, str]) -> None:
    page = pages["reference/decision-log.md"]
    described = reference.decision_fields()
    for field in dataclasses.fields(DecisionRecord):
        assert described[field.name], f"{field.name} has no description"
        assert f"| `{field.name}` |" in page
    assert set(reference.REASONS) == {r.value for r in Reason}
    for reason in Reason:
        assert f"| `{reason.value}` | {reference.REASONS[reason.value]}"[:60] in page
