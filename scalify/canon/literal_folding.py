"""Arithmetic on literals, done once: `1 / 128` is the fill 0.0078125.

A training step's constants come out of autograd in whatever order its formulas run: the
gradient of `x.sum() / n` divides the scalar seed by n and then broadcasts it, the gradient
of `x.mean()` broadcasts the seed and then divides. Both are the same fill, and once both
are folded to it they are the same term; the rules never see the arithmetic. Only exact
arithmetic is folded (add, sub, mul, div, neg, max, min and casts of fills, sums, maxima
and minima over a fill, and a pad of nothing), in the simulator's number representation, so
a folded literal is the value both programs compute.
"""

from __future__ import annotations

import numpy as np

from scalify.ir import Graph, Node, fill_value, is_zero_fill
from scalify.ops import OPS
from scalify.values import NotSimulable, host

FOLDED = frozenset({"add", "sub", "mul", "div", "neg", "max", "min", "convert", "not", "and", "or"})


def fold_literals(graph: Graph) -> None:
    """Each node that is exact arithmetic on fills becomes the fill it makes (a scalar
    constant, broadcast to the node's shape), and a select on a literal predicate is the
    branch it picks. Nodes that already have an equal form keep theirs (a graph
    canonicalised again)."""
    paired = {n for pair in graph.equalities for n in pair}
    nodes: dict[int, Node] = {}
    alias: dict[int, int] = {}
    next_id = max(graph.nodes, default=-1) + 1
    for node in list(graph.nodes.values()):
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        if node.id in paired:
            nodes[node.id] = node
            continue
        if node.op == "select" and node.shape == nodes[node.operands[1]].shape:
            test = fill_value(nodes[node.operands[0]], nodes)
            if test in ("true", "false"):
                alias[node.id] = node.operands[1] if test == "true" else node.operands[2]
                continue
        if node.op in ("add", "sub") and (kept := _added_to_zero(node, nodes)) is not None:
            alias[node.id] = kept  # x + 0 (a gradient accumulated into fresh zeros), x - 0
            continue
        literal = folded_literal(node, nodes)
        if literal is None:
            nodes[node.id] = node
            continue
        const = Node(
            next_id,
            "constant",
            (),
            (),
            node.dtype,
            {"value": literal},
            node.loc,
            f"{node.name}.folded",
            node.framework_op,
        )
        next_id += 1
        nodes[const.id] = const
        if not node.shape:
            alias[node.id] = const.id
            continue
        node.op, node.operands, node.attrs = "broadcast", (const.id,), {"dims": ()}
        nodes[node.id] = node
    graph.nodes = nodes
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}


def _added_to_zero(node: Node, nodes: dict[int, Node]) -> int | None:
    """The operand of `x + 0` (or `0 + x`, `x - 0`: a vocabulary block starting at 0) that
    is x, when x has the result's shape and type."""
    pairs = [node.operands[::-1]] if node.op == "sub" else [node.operands, node.operands[::-1]]
    for zero, other in pairs:
        kept = nodes[other]
        if kept.shape == node.shape and kept.dtype == node.dtype and is_zero_fill(zero, nodes):
            return other
    return None


def folded_literal(node: Node, nodes: dict[int, Node]) -> str | None:
    """The literal `node` computes when it is exact arithmetic on fills; None otherwise."""
    if not node.operands or node.dtype in ("bf16", "f16"):
        return None
    if node.op == "reduce":
        return _reduced_fill(node, nodes)
    if node.op == "pad" and 0 in nodes[node.operands[0]].shape:
        # all padding: the gradient of a slice that took nothing (RoPE on no dims)
        return fill_value(nodes[node.operands[1]], nodes)
    if node.op not in FOLDED:
        return None
    texts = [fill_value(nodes[o], nodes) for o in node.operands]
    if None in texts:
        return None
    if node.op == "div" and not node.dtype.startswith("f"):
        return None  # integer division rounds; left to the rules
    spec = OPS[node.op]
    try:
        args = [
            host(float(t) if t not in ("true", "false") else t == "true", nodes[o].dtype)
            for t, o in zip(texts, node.operands, strict=True)
        ]
        with np.errstate(all="ignore"):
            value = np.asarray(spec.kernel(_scalar(node), args)).reshape(())
    except (ValueError, TypeError, NotSimulable, ZeroDivisionError):
        return None
    if not np.isfinite(value) if value.dtype.kind == "f" else False:
        return None
    if node.dtype == "pred":
        return "true" if bool(value) else "false"
    if node.dtype.startswith("f"):
        return repr(float(value))
    return _int_text(int(value), node.dtype)


def _int_text(value: int, dtype: str) -> str | None:
    """The integer literal, or None when it does not fit the dtype (wrap-around is left to
    the simulator, which models it)."""
    kind = {"s": "int", "u": "uint"}.get(dtype[:1])
    if kind is None or not dtype[1:].isdigit():
        return None
    info = np.iinfo(f"{kind}{dtype[1:]}")
    return str(value) if info.min <= value <= info.max else None


def _reduced_fill(node: Node, nodes: dict[int, Node]) -> str | None:
    """A sum, max or min over a fill (a count of tokens taken over an all-true mask): the fill
    times the number of elements reduced, or the fill itself."""
    operand = nodes[node.operands[0]]
    text = fill_value(operand, nodes)
    if text is None or len(node.operands) != 1 or node.dtype != operand.dtype:
        return None
    op = node.attrs.get("op")
    count = 1
    for d in node.attrs.get("dims", ()):
        count *= operand.shape[d]
    if op in ("max", "min"):
        return text
    if op != "sum" or text in ("true", "false"):
        return None
    total = float(text) * count
    return repr(total) if node.dtype.startswith("f") else _int_text(int(total), node.dtype)


def _scalar(node: Node) -> Node:
    """`node` as an op on scalars (kernels read attributes such as a cast's dtype)."""
    return Node(node.id, node.op, node.operands, (), node.dtype, dict(node.attrs))
