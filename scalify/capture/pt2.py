"""`scalify.capture.export`: a PyTorch callable traced on one rank, saved as a `.pt2`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["export"]


def export(fn: Callable[..., Any], example_inputs: Sequence[Any], path: str | Path) -> Path:
    """Trace `fn(*example_inputs)` (see `fx_trace.trace`) and save it where `scalify verify`
    reads it, with the size of every process group its collectives use.

    For a distributed `fn`, call it with the process group it needs live in this process
    (`scalify.api.fake_mesh` makes one); export the baseline with `export` too, so that both
    files decompose composite ops the same way.
    """
    from scalify.frontends.fx import save_exported

    from .fx_trace import as_exported, trace

    inputs = tuple(example_inputs)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    save_exported(as_exported(trace(fn, inputs), inputs), target)
    return target
