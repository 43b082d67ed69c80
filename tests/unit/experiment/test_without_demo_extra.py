"""The library without the ``demo`` extra: with matplotlib and plotly made unimportable,
``import streamscale``, ``streamscale.attach`` and every module outside
``streamscale.experiment`` import, and the demo refuses in one line. In this process: the
package is imported afresh under a finder that refuses the extra's modules, then
``sys.modules`` is put back as it was."""

from __future__ import annotations

import importlib
import importlib.abc
import pkgutil
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import pytest

BLOCKED = ("matplotlib", "plotly")


class RefuseExtra(importlib.abc.MetaPathFinder):
    """Makes the extra's modules look not installed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def without_extra(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(sys.modules)
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top == "streamscale" or top in BLOCKED:
            del sys.modules[name]
    monkeypatch.setattr(sys, "meta_path", [RefuseExtra(), *sys.meta_path])
    try:
        yield
    finally:
        sys.modules.clear()
        sys.modules.update(saved)


def test_the_finder_refuses_the_extra(without_extra: None) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("matplotlib")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("plotly.graph_objects")


def test_the_library_imports_without_the_extra(without_extra: None) -> None:
    streamscale = importlib.import_module("streamscale")
    assert callable(streamscale.attach)
    assert importlib.import_module("streamscale.autoscale.attach").attach is not None
    library = [
        info.name
        for info in pkgutil.walk_packages(streamscale.__path__, prefix="streamscale.")
        if not info.name.startswith("streamscale.experiment")
    ]
    assert len(library) > 50
    for name in library:
        importlib.import_module(name)
    assert not any(name.split(".")[0] in BLOCKED for name in sys.modules)


def test_the_demo_refuses_in_one_line_without_the_extra(without_extra: None) -> None:
    from typer.testing import CliRunner

    app = importlib.import_module("streamscale.cli.main").app
    done = CliRunner().invoke(app, ["demo"])
    assert done.exit_code == 1
    assert done.output.strip().splitlines() == [
        "error: streamscale demo needs the demo extra (matplotlib, plotly not installed): "
        "pip install 'streamscale[demo]'"
    ]
