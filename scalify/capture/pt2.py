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
    files decompose composite ops the same way. A DTensor program is traced on several
    devices (device_probe.py), and each DTensor output's placement is recorded as the
    layout `verify` requires of it (the mesh's dim names are its axis names), and each
    DTensor weight's placement as its stated layout; an output that
    is a weight's gradient (or the weight after an optimizer step) is recorded as such, and
    takes that weight's layout.
    """
    from scalify.capture.fx_trace import as_exported, trace
    from scalify.capture.placements import placement_text
    from scalify.frontends.fx import save_exported

    inputs = tuple(example_inputs)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    gm = trace(fn, inputs, across_devices=True)
    shapes = [tuple(getattr(o, "shape", ())) for o in _output_values(gm)]
    placed = gm.meta["output_placements"]
    layouts = [placement_text(p, shape) for p, shape in zip(placed, shapes, strict=False)]
    weights = {  # each DTensor weight's layout and global shape, as the API reads them
        name: (placement_text(placed, local), list(global_shape))
        for name, (placed, local, global_shape) in gm.meta.get("input_placements", {}).items()
    }
    weights = {name: entry for name, entry in weights.items() if entry[0]}
    save_exported(as_exported(gm, inputs), target, layouts, gm.meta["output_inputs"], weights)
    return target


def _output_values(gm: Any) -> list[Any]:
    """The traced values of the graph's outputs, in order."""
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    args = output.args[0]
    return [a.meta.get("val") for a in (args if isinstance(args, (list, tuple)) else [args])]
