"""What a framework's custom call means, as a rule file declares it.

Vendors lower their kernels to `custom-call`s with a target name (`AwsNeuronRmsNorm`,
`AwsNeuronTransferWithStaticRing`). An undeclared one stays opaque and the report names its
target; a rule file gives it a meaning, one line per target:

    custom_call "AwsNeuronTransferWithStaticRing" = operand(0)
    custom_call "AwsNeuronRmsNorm" = rms_norm(0, 1, 2)

A meaning is one of the small set below, each an expression of canonical ops built where
the call stands, with the call's own location and name, before canonicalisation: the rules
then see only canonical ops. The arguments are operand positions of the call; a meaning may
take integer attributes (`scatter_add[dim=0](0, 1, 2)`). An elementwise meaning may instead
be written in the rule file as an expression over the named operands, with numeric literals
(`Term`), and a reference function lint checks it against (`REFERENCES`):

    custom_call "VendorSwiGlu"(a, b) = mul(mul(a, logistic(a)), b)  reference swiglu

Both frontends make custom calls: HLO's `custom-call` by its target, and the FX frontend
each op of a framework's own library (`torch.library.custom_op`, outside ATen and prims)
by its qualified name (`torchtitan::deterministic_scatter_add`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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
class Term:
    """A node of a declared expression: an op over terms (`op`, `args`), an operand of the
    call (`position`), or a numeric literal (`literal`, its text as written)."""

    op: str = ""
    args: tuple[Term, ...] = ()
    position: int = -1
    literal: str = ""

    def text(self, names: tuple[str, ...]) -> str:
        """The term as a rule file writes it, operands by their declared names."""
        if self.op:
            return f"{self.op}({', '.join(a.text(names) for a in self.args)})"
        return names[self.position] if self.position >= 0 else self.literal


@dataclass(frozen=True)
class CustomCall:
    """One declaration: the target, the meaning's name, the operand positions it reads, its
    attributes, and where it is written (`file:line`); for an expression, the expression,
    its operands' names and the reference function lint compares it with."""

    target: str
    meaning: str
    operands: tuple[int, ...]
    where: str
    attrs: tuple[tuple[str, int], ...] = ()
    expression: Term | None = None
    names: tuple[str, ...] = ()
    reference: str = ""


# The ops an expression may use: elementwise, the result in the operands' dtype, no
# attributes (a comparison needs a direction, a cast a dtype).
EXPRESSION_OPS: dict[str, int] = {
    **dict.fromkeys(
        "neg exp log tanh rsqrt sqrt abs erf logistic sign floor ceil exponential_minus_one "
        "log_plus_one cos sin".split(),
        1,
    ),
    **dict.fromkeys("add sub mul div max min pow rem mod atan2".split(), 2),
    "clamp": 3,
}


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


# Functions an expression declaration may name as its reference: lint evaluates both on
# random inputs and compares them (float64 numpy, written independently of the kernels).
REFERENCES: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "gelu": (1, _gelu_erf),
    "gelu_tanh": (1, _gelu_tanh),
    "silu": (1, _silu),
    "swiglu": (2, lambda a, b: _silu(a) * b),
    "sigmoid": (1, lambda x: 1.0 / (1.0 + np.exp(-x))),
    "relu": (1, lambda x: np.maximum(x, 0.0)),
    "identity": (1, lambda x: x),
}


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


def _expression(at: Built, term: Term) -> bool:
    """A declared expression, elementwise in the call's shape and dtype: operands of that
    shape (or scalars, broadcast), cast to the call's dtype where theirs differs; literals
    are scalar constants broadcast to the shape, as a splat is."""
    call, new = at.call, at.new
    shape, dtype = call.shape, call.dtype
    if len(call.operands) != len(at.args) or any(a.shape not in (shape, ()) for a in at.args):
        return False  # an operand the declaration does not name might change the result
    made: dict[int, int] = {}

    def operand(position: int) -> int:
        if position not in made:
            x = at.args[position]
            x_id = x.id
            if x.dtype != dtype:
                x_id = new.add("convert", (x_id,), x.shape, dtype, {"dtype": dtype})
            if x.shape != shape:
                x_id = new.add("broadcast", (x_id,), shape, dtype, {"dims": ()})
            made[position] = x_id
        return made[position]

    def build(t: Term) -> int:
        if t.op:
            args = tuple(build(a) for a in t.args)
            return new.add(t.op, args, shape, dtype, {})
        if t.position >= 0:
            return operand(t.position)
        literal = new.add("constant", (), (), dtype, {"value": t.literal})
        return new.add("broadcast", (literal,), shape, dtype, {"dims": ()})

    out = build(term)
    if not new.nodes or new.nodes[-1].id != out:  # the call is a bare operand
        new.add("reshape", (out,), shape, dtype, {})  # folded to the operand itself
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
        expression = declaration.expression
        defaults = () if expression is not None else MEANINGS[declaration.meaning].attrs
        built = Built(node, args, new, dict(defaults) | dict(declaration.attrs), graph)
        if expression is not None:
            fits = _expression(built, expression)
        else:
            fits = MEANINGS[declaration.meaning].build(built)
        if not fits:
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
                + f', or an elementwise expression: custom_call "{target}"(x) = EXPRESSION'
            )
    return "; ".join(lines)
