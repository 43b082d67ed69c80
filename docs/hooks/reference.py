"""MkDocs hook: the reference pages, generated from the code at every build
(:mod:`streamscale.cli.reference`), so that they cannot drift from it."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    from streamscale.cli.reference import pages

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files
