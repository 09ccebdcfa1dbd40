"""Scalify: prove a distributed ML graph equivalent to its single-device baseline.

`assert_equivalent` (see `scalify.api`) loads lazily: `import scalify` stays light for the CLI.
"""

from __future__ import annotations

from typing import Any

__all__ = ["assert_equivalent", "capture"]


def __getattr__(name: str) -> Any:
    if name == "assert_equivalent":
        from scalify.api import assert_equivalent

        return assert_equivalent
    if name == "capture":  # `scalify.capture.export(...)` after a bare `import scalify`
        import importlib

        return importlib.import_module(".capture", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
