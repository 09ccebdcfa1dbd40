"""Compiled rule sets kept on disk, keyed by the rule texts and the code that compiles them.

Parsing and checking the shipped rules costs about as much as proving a small graph, and
every `scalify verify` compiles them again. A rule set compiled once is stored under
`$SCALIFY_CACHE` (default `~/.cache/scalify`) by a hash of its files' paths and texts and of
every source the compiled form depends on (the compiler, the grammar, the op registry, the
canonical functions, the layout module), so an edit to any of them misses the cache. Only
successful compiles are stored: an error is always reported from the text. `SCALIFY_CACHE=off`
turns it off; a store that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_PACKAGE = Path(__file__).resolve().parent
_SCALIFY = Path(__import__("scalify").__file__).resolve().parent
# the sources a compiled rule set is made by: a change to any of them is a new key
_DEPENDS = (
    *sorted(_PACKAGE.glob("*.py")),
    *sorted(_PACKAGE.parent.joinpath("grammar").glob("*.lark")),
    *sorted(_SCALIFY.joinpath("ops").glob("*.py")),
    _SCALIFY / "canon" / "functions.py",
    _SCALIFY / "frontends" / "custom_calls.py",
    _SCALIFY / "layout.py",
)


def _code_hash() -> str:
    digest = hashlib.sha256()
    for path in _DEPENDS:
        if path.exists():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


# read once, as the compiler is imported: a source edited while a process runs must not
# file that process's (older) compiled form under the edited source's key
_CODE = _code_hash()


def _folder() -> Path | None:
    setting = os.environ.get("SCALIFY_CACHE", "")
    if setting.lower() in ("off", "0", "no"):
        return None
    return Path(setting) if setting else Path.home() / ".cache" / "scalify"


def cached(sources: list[tuple[str, str]], compile_: Callable[[], T]) -> T:
    """`compile_()`'s result for these (path, text) sources, from the store when it holds
    them, else compiled and stored."""
    folder = _folder()
    if folder is None:
        return compile_()
    digest = hashlib.sha256(_CODE.encode())
    for path, text in sources:
        digest.update(b"\0" + path.encode() + b"\0" + text.encode())
    entry = folder / f"rules-{digest.hexdigest()[:32]}.pickle"
    try:
        return pickle.loads(entry.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass
    result = compile_()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(pickle.dumps(result))
        partial.replace(entry)  # whole or absent, for a concurrent reader
    except OSError:
        pass
    return result
