"""Op signatures: the attribute key of a node and the facts rules read about it.

A key names an op's meaning independent of which graph it is in: it holds the attributes
that matter and leaves out sizes a layout changes (a column-parallel dot has the same key as
its baseline dot). Dim maps (`OutDim`/`InDim`) say where each operand dim goes, so one rule
covers every rank and every dim numbering. What goes into each op's key and dim map is
declared with the op (`scalify/ops/`); this module assembles them.
"""

from __future__ import annotations

from scalify.ir import Graph, Node
from scalify.mesh import Mesh
from scalify.ops import KeyInput, spec_of
from scalify.ops.spec import Signature, attrs_key
from scalify.values import dtype_class


def node_signature(
    node: Node, graph: Graph, mesh: Mesh, shape_free_broadcast: bool = False
) -> Signature:
    """The signature of `node`. `shape_free_broadcast`: every user of this broadcast is
    elementwise, so the user's other operand fixes the new dims' sizes and the key may omit
    them (they differ between a sharded and a baseline graph)."""
    operands = [graph.node(i) for i in node.operands]
    ranks = [len(o.shape) for o in operands]
    sig = Signature("")
    sig.attrs_s["class"] = dtype_class(node.dtype)
    spec = spec_of(node.op)
    key = spec.key if spec is not None else attrs_key
    extra = key(KeyInput(node, operands, mesh, shape_free_broadcast), sig)
    sig.key = "|".join([node.op, node.dtype, "r=" + ",".join(str(r) for r in ranks), *extra])
    if spec is None or spec.dim_map is None:
        return sig
    for k, dims in enumerate(spec.dim_map(node, [o.shape for o in operands], len(node.shape))):
        for d, e in enumerate(dims):
            sig.out_dims[(k, d)] = e
        for e in range(len(node.shape)):
            sig.in_dims[(k, e)] = dims.index(e) if e in dims else -1
    return sig
