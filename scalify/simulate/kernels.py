"""Running the canonical ops one device at a time, with the kernel each op declares
(`scalify/ops/`), on values held as `scalify/values.py` says."""

from __future__ import annotations

import numpy as np

from scalify.ir import Node
from scalify.ops import spec_of
from scalify.values import NotSimulable


def apply(node: Node, args: list[np.ndarray], operand_dtypes: list[str]) -> np.ndarray:
    """One op on one device (collectives and rank_index are handled by the SPMD driver)."""
    spec = spec_of(node.op)
    if spec is None or spec.kernel is None:
        raise NotSimulable(
            f"no numeric semantics for `{node.op}`"
            + (f" ({node.attrs.get('hlo_op')})" if node.op == "opaque" else "")
        )
    return spec.kernel(node, args)
