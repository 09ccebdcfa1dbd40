"""What a framework's custom call means, as a rule file declares it.

Vendors lower their kernels to `custom-call`s with a target name (`AwsNeuronRmsNorm`,
`AwsNeuronTransferWithStaticRing`). An undeclared one stays opaque and the report names its
target; a rule file gives it a meaning, one line per target:

    custom_call "AwsNeuronTransferWithStaticRing" = operand(0)
    custom_call "AwsNeuronRmsNorm" = rms_norm(0, 1, 2)

A meaning is one of the small set below, each an expression of canonical ops built where
the call stands, with the call's own location and name, before canonicalisation: the rules
then see only canonical ops. The arguments are operand positions of the call; a meaning may
take integer attributes (`scatter_add[dim=0](0, 1, 2)`).

Both frontends make custom calls: HLO's `custom-call` by its target, and the FX frontend
each op of a framework's own library (`torch.library.custom_op`, outside ATen and prims)
by its qualified name (`torchtitan::deterministic_scatter_add`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scalify.ir import Graph, NewNodes, Node, replace_nodes
from scalify.ops.one_hot_forms import rows_added


@dataclass(frozen=True)
class Built:
    """Where a meaning is built: the call, its operands as the declaration orders them, the
    nodes to add, the declaration's attributes, and the graph (to read an operand's
    producers)."""

    call: Node
    args: list[Node]
    new: NewNodes
    attrs: dict[str, int]
    graph: Graph


@dataclass(frozen=True)
class Meaning:
    """A meaning a declaration may name: how many operand positions it takes, what they are,
    the attributes it takes (with their defaults), and how it is built (False when the
    call's operands do not fit it)."""

    operands: tuple[str, ...]
    doc: str
    build: Callable[[Built], bool]
    attrs: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class CustomCall:
    """One declaration: the target, the meaning's name, the operand positions it reads, its
    attributes, and where it is written (`file:line`)."""

    target: str
    meaning: str
    operands: tuple[int, ...]
    where: str
    attrs: tuple[tuple[str, int], ...] = ()


def _operand(at: Built) -> bool:
    call, new, (x,) = at.call, at.new, at.args
    if x.shape != call.shape:
        return False
    if x.dtype != call.dtype:
        new.add("convert", (x.id,), call.shape, call.dtype, {"dtype": call.dtype})
    else:  # a reshape to its own shape: canonicalisation folds it to the operand itself
        new.add("reshape", (x.id,), call.shape, call.dtype, {})
    return True


def _rms_norm(at: Built) -> bool:
    """x * rsqrt(mean(x^2 over d) + eps) * w, in x's dtype, then the call's: d is the one
    dim of x as long as the weight (the call names no dim; two such dims leave it opaque)."""
    call, new, (x, weight, eps) = at.call, at.new, at.args
    if x.shape != call.shape or len(weight.shape) != 1 or eps.shape != ():
        return False
    dims = [d for d, n in enumerate(x.shape) if n == weight.shape[0]]
    if len(dims) != 1:
        return False
    (dim,) = dims
    shape, dtype = x.shape, x.dtype
    rest = tuple(d for d in range(len(shape)) if d != dim)
    reduced = tuple(shape[d] for d in rest)
    square = new.add("mul", (x.id, x.id), shape, dtype, {})
    total = new.add("reduce", (square,), reduced, dtype, {"dims": (dim,), "op": "sum"})
    count = new.add("constant", (), (), dtype, {"value": str(shape[dim])})
    count = new.add("broadcast", (count,), reduced, dtype, {"dims": ()})
    mean = new.add("div", (total, count), reduced, dtype, {})
    eps_id = eps.id
    if eps.dtype != dtype:
        eps_id = new.add("convert", (eps_id,), (), dtype, {"dtype": dtype})
    eps_fill = new.add("broadcast", (eps_id,), reduced, dtype, {"dims": ()})
    scale = new.add(
        "rsqrt", (new.add("add", (mean, eps_fill), reduced, dtype, {}),), reduced, dtype, {}
    )
    spread = new.add("broadcast", (scale,), shape, dtype, {"dims": rest})
    normed = new.add("mul", (x.id, spread), shape, dtype, {})
    w = (
        weight.id
        if weight.dtype == dtype
        else new.add("convert", (weight.id,), weight.shape, dtype, {})
    )
    w = new.add("broadcast", (w,), shape, dtype, {"dims": (dim,)})
    out = new.add("mul", (normed, w), shape, dtype, {})
    if call.dtype != dtype:
        new.add("convert", (out,), shape, call.dtype, {"dtype": call.dtype})
    return True


def _scatter_add(at: Built) -> bool:
    """`x.scatter_add(d, index, src)` (PyTorch's) where the index names one slice of x along
    d per slice of src, the same across src's other dims (an expanded column, as MoE token
    combines write it): each slice of src added into the slice of x its index names. Built
    as `x + one_hot(index)^T src` with d moved first; any other index stays opaque."""
    call, new = at.call, at.new
    x, index, src = at.args
    rank, d = len(x.shape), at.attrs["dim"]
    if not 0 <= d < rank or src.shape != index.shape or len(src.shape) != rank:
        return False
    if any(src.shape[k] != x.shape[k] for k in range(rank) if k != d) or x.shape != call.shape:
        return False
    column = _column(index, d, at.graph)
    if column is None:
        return False
    if len(column.shape) != 1:
        column_id = new.add("reshape", (column.id,), (src.shape[d],), column.dtype, {})
    else:
        column_id = column.id
    perm = (d, *(k for k in range(rank) if k != d))
    moved = tuple(x.shape[k] for k in perm)
    x_id, src_id = x.id, src.id
    if d:
        x_id = new.add("transpose", (x_id,), moved, x.dtype, {"perm": perm})
        src_moved = tuple(src.shape[k] for k in perm)
        src_id = new.add("transpose", (src_id,), src_moved, src.dtype, {"perm": perm})
    out = rows_added(
        new.add, x_id, column_id, (src.shape[d],), column.dtype, src_id, moved, x.dtype
    )
    if d:
        back = tuple(perm.index(k) for k in range(rank))
        new.add("transpose", (out,), x.shape, x.dtype, {"perm": back})
    return True


def _column(index: Node, d: int, graph: Graph) -> Node | None:
    """The value c with index[p] == c[p[d]] at every position p: the index itself when its
    every dim but d has size 1, or what it broadcasts along d; None when it varies along
    another dim."""
    if all(n == 1 for k, n in enumerate(index.shape) if k != d):
        return index
    if index.op == "broadcast" and d in index.attrs["dims"]:
        operand = graph.nodes[index.operands[0]]
        kept = index.attrs["dims"].index(d)
        if all(n == 1 for k, n in enumerate(operand.shape) if k != kept):
            return operand
    return None


MEANINGS: dict[str, Meaning] = {
    "operand": Meaning(("value",), "the call returns its operand as it is", _operand),
    "rms_norm": Meaning(
        ("input", "weight", "epsilon"),
        "RMSNorm of the input over the dim as long as the weight, scaled by the weight",
        _rms_norm,
    ),
    "scatter_add": Meaning(
        ("input", "index", "src"),
        "PyTorch's input.scatter_add(dim, index, src) with one index per slice along dim",
        _scatter_add,
        attrs=(("dim", 0),),
    ),
}


def target_of(node: Node) -> str | None:
    """The custom-call target of an opaque node, else None."""
    if node.op != "opaque" or node.attrs.get("hlo_op") != "custom-call":
        return None
    return node.attrs.get("target")


def expand_custom_calls(graph: Graph, declared: dict[str, CustomCall]) -> None:
    """Put each declared custom call's meaning in its place. A call whose operands do not fit
    its meaning stays opaque, marked with why (the report says so)."""
    if not declared:
        return

    def rewrite(node: Node, next_id: int) -> list[Node]:
        target = target_of(node)
        if target is None or target not in declared:
            return []
        declaration = declared[target]
        if "tuple_index" in node.attrs:  # one result of several: a meaning has one
            node.attrs["declared_but_unfit"] = declaration.where
            node.attrs["unfit_because"] = "it returns several results and a meaning has one"
            return []
        if max(declaration.operands, default=-1) >= len(node.operands):
            node.attrs["declared_but_unfit"] = declaration.where
            return []
        args = [graph.nodes[node.operands[i]] for i in declaration.operands]
        new = NewNodes(node, next_id)
        meaning = MEANINGS[declaration.meaning]
        attrs = dict(meaning.attrs) | dict(declaration.attrs)
        if not meaning.build(Built(node, args, new, attrs, graph)):
            node.attrs["declared_but_unfit"] = declaration.where
            return []
        new.nodes[-1].name = node.name
        return new.nodes

    replace_nodes(graph, rewrite)


def undeclared_note(graph_nodes: list[Node]) -> str:
    """The report's note on custom calls that stayed opaque: their targets, and the line to
    write (or why the declaration did not fit)."""
    lines = []
    for target in sorted({t for n in graph_nodes if (t := target_of(n))}):
        marked = next(
            (n for n in graph_nodes if target_of(n) == target and "declared_but_unfit" in n.attrs),
            None,
        )
        unfit = marked.attrs["declared_but_unfit"] if marked else None
        because = marked.attrs.get("unfit_because") if marked else None
        if unfit and because:
            lines.append(f"custom call `{target}`: {because} (declared at {unfit})")
        elif unfit:
            lines.append(
                f"custom call `{target}`: its operands do not fit the meaning declared at {unfit}"
            )
        else:
            lines.append(
                f"custom call `{target}` has no declared meaning; a rule file can give it "
                f'one: custom_call "{target}" = operand(0) | '
                + " | ".join(
                    f"{name}({', '.join(m.operands)})"
                    for name, m in MEANINGS.items()
                    if name != "operand"
                )
            )
    return "; ".join(lines)
