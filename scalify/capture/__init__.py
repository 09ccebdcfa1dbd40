"""Capture graphs for `scalify verify`: `export` writes a `.pt2` of a PyTorch callable traced
in this process; `torch_xla` runs a model under torch-xla (in its own interpreter) and writes
baseline and distributed HLO with a relations file.

Attributes load lazily so that importing this package pulls in neither torch nor the engine.
"""

from __future__ import annotations

from typing import Any

__all__ = ["export", "torch_xla"]


def __getattr__(name: str) -> Any:
    if name == "export":
        from .pt2 import export

        return export
    if name == "torch_xla":
        from .xla import torch_xla

        return torch_xla
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
