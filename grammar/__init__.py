"""Grammar files shipped as package data (`scalify.grammar`)."""

from __future__ import annotations

import pathlib


def grammar_path(name: str) -> pathlib.Path:
    """Path of the grammar file `name` beside this module, so loaders never depend on the cwd."""
    return pathlib.Path(__file__).with_name(name)
