"""The experiment, apart from the library: the one-command demo (:mod:`.demo`), its live view
and report (:mod:`.report`), and the independent verification of the pipelines' output
(:mod:`.verify`).

The library never imports this package (a unit test reads the import graph); the CLI's
``demo`` command does, when it runs. Its plots need the ``demo`` extra (matplotlib, plotly):
``pip install 'streamscale[demo]'``, which ``make setup`` installs. The terminal view uses
rich, which every install has (the CLI's typer depends on it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from streamscale.errors import LaunchError

EXTRA = "demo"
EXTRA_MODULES = ("matplotlib", "plotly")
"""What ``pip install 'streamscale[demo]'`` adds to the library's dependencies."""


class ExtraMissingError(LaunchError):
    """A command needs a module of the ``demo`` extra that is not installed."""


def require_extra(what: str, modules: Sequence[str] = EXTRA_MODULES) -> None:
    """Refuse at once, in one line, when ``modules`` of the extra are missing: ``what`` would
    otherwise fail only when it draws its first plot, at the end of a run."""
    missing = [name for name in modules if not _installed(name)]
    if missing:
        raise ExtraMissingError(
            f"{what} needs the {EXTRA} extra ({', '.join(missing)} not installed): "
            f"pip install 'streamscale[{EXTRA}]'"
        )


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a finder that refuses the name
        return False
