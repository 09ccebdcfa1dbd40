"""The op registry: every canonical op, declared once (`OpSpec`) in the module of its
family, and the tables derived from those declarations.

Adding an op is one entry in a family module (and its frontend mappings): the compiler's
op tables (`compiler/signatures.py`), the signature keys and dim maps
(`scalify/engine/signature.py`), the simulator (`scalify/simulate/kernels.py`) and the
fuzzer (`scalify/soundness/fuzz.py`) read it from here.
"""

from __future__ import annotations

from scalify.ops import collectives, elementwise, indexing, structural
from scalify.ops.spec import KeyInput, OpSpec, registry

OPS: dict[str, OpSpec] = registry(elementwise.OPS, structural.OPS, indexing.OPS, collectives.OPS)


def spec_of(op: str) -> OpSpec | None:
    """The declaration of `op`, or None for a name no frontend should produce."""
    return OPS.get(op)


CANONICAL_OPS = frozenset(OPS)
# every op that maps its operands element by element (same shapes in, that shape out)
ELEMENTWISE = frozenset(name for name, s in OPS.items() if s.elementwise)
# the elementwise ops that take no attributes: a frontend may map an op of the same name
PLAIN_ELEMENTWISE = frozenset(n for n in ELEMENTWISE if not OPS[n].attrs)
COLLECTIVES = frozenset(name for name, s in OPS.items() if s.collective)
NOT_PURE = frozenset(name for name, s in OPS.items() if not s.pure)
# ops whose first operand's sizes rules may read (`size(X, d)`)
SIZED_OPERAND = frozenset(name for name, s in OPS.items() if s.sized_operand)

__all__ = [
    "CANONICAL_OPS",
    "COLLECTIVES",
    "ELEMENTWISE",
    "NOT_PURE",
    "OPS",
    "PLAIN_ELEMENTWISE",
    "SIZED_OPERAND",
    "KeyInput",
    "OpSpec",
    "spec_of",
]
