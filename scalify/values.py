"""The simulator's value representation, shared by the op declarations and every module that
evaluates them.

Floats are held in float64 (complex numbers in complex128) so that a different summation
order never looks like a bug; `convert` to a narrower float rounds through that type, so lost
precision does show.
Integers are int64 with HLO's truncating division; predicates are bool. This module imports
nothing of Scalify's: the op registry (`scalify/ops/`) reads it, and the modules that read
the registry may read it too without a circle.
"""

from __future__ import annotations

import numpy as np


class NotSimulable(Exception):
    """The op has no numeric semantics here (opaque, pad, ...): the graph is not simulated."""


def literal_number(text: object) -> float | None:
    """The number a scalar literal's text spells (`4`, `-1.0`, `inf`), or None for one that
    is not a number (`true`, an elided `{...}`, a tuple): frontends spell numbers differently."""
    try:
        return float(str(text))
    except ValueError:
        return None


def dtype_class(dtype: str) -> str:
    """float, int or pred: how a value of `dtype` is held, and what identities over the reals
    may assume about it."""
    if dtype == "pred":
        return "pred"
    if dtype.startswith(("f", "bf", "c")):
        return "float"
    return "int"


def host(value, dtype: str) -> np.ndarray:
    """A value in the simulator's representation for `dtype`."""
    kind = dtype_class(dtype)
    array = np.asarray(value)
    if dtype.startswith("c"):  # complex: both parts kept
        return array.astype(np.complex128)
    if kind == "float":
        return array.astype(np.float64)
    if kind == "pred":
        return array.astype(bool)
    with np.errstate(invalid="ignore"):  # a float's -inf or nan cast to an integer: no value
        # the program may rely on (a masked padding cast to int is never read)
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
