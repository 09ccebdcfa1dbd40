"""Running the canonical ops one device at a time, with the kernel each op declares
(`scalify/ops/`), and the value representation those kernels share.

Floats are held in float64 so that a different summation order never looks like a bug;
`convert` to a narrower float rounds through that type, so lost precision does show.
Integers are int64 with HLO's truncating division; predicates are bool.
"""

from __future__ import annotations

import numpy as np

from scalify.ir import Node


class NotSimulable(Exception):
    """The op has no numeric semantics here (opaque, pad, ...): the graph is not simulated."""


def dtype_kind(dtype: str) -> str:
    if dtype == "pred":
        return "pred"
    if dtype.startswith(("f", "bf")):
        return "float"
    return "int"


def host(value, dtype: str) -> np.ndarray:
    """A value in the simulator's representation for `dtype`."""
    kind = dtype_kind(dtype)
    array = np.asarray(value)
    if kind == "float":
        return array.astype(np.float64)
    if kind == "pred":
        return array.astype(bool)
    return array.astype(np.int64)


REDUCERS = {
    "sum": np.add,
    "max": np.maximum,
    "min": np.minimum,
    "prod": np.multiply,
    "and": np.logical_and,
    "or": np.logical_or,
}
IDENTITY = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0, "and": True, "or": False}


def apply(node: Node, args: list[np.ndarray], operand_dtypes: list[str]) -> np.ndarray:
    """One op on one device (collectives and rank_index are handled by the SPMD driver)."""
    from scalify.ops import spec_of

    spec = spec_of(node.op)
    if spec is None or spec.kernel is None:
        raise NotSimulable(
            f"no numeric semantics for `{node.op}`"
            + (f" ({node.attrs.get('hlo_op')})" if node.op == "opaque" else "")
        )
    return spec.kernel(node, args)
