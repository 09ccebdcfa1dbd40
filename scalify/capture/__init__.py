"""Capture graphs for `scalify verify`: `export` writes a `.pt2` of a PyTorch callable traced
in this process; `torch_xla` runs a model under torch-xla (in its own interpreter) and writes
baseline and distributed HLO with a relations file; `trace_per_device` traces code that reads
its rank when it builds a module (Megatron-core) as each device in turn.

Attributes load lazily so that importing this package pulls in neither torch nor the engine.
"""

from __future__ import annotations

from typing import Any

__all__ = ["export", "torch_xla", "trace_per_device"]


def __getattr__(name: str) -> Any:
    if name == "export":
        from scalify.capture.pt2 import export

        return export
    if name == "trace_per_device":
        from scalify.capture.device_probe import trace_per_device

        return trace_per_device
    if name == "torch_xla":
        from scalify.capture.xla import torch_xla

        return torch_xla
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
