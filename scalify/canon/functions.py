"""The attribute functions and predicates canonical rules may call (`rules/canon.srl`).

A canonical rule rewrites a node into a small tree of ops over values it matched, and the
new ops' attributes are often computed from the matched ones: two transposes' permutations
composed, two broadcasts' dims picked, the literal a sum of two fills makes. These are pure
functions, declared here once with the kind of each argument; the compiler refuses a call
to anything else (or with an argument of the wrong kind), and the canonical rules' fuzzer
checks every rule that uses them numerically.

An argument is an attribute (`a`: a bound attribute, a literal, or another function's
result) or a value (`v`: a value the match binds; the function gets its node). A function
`of_root` also gets the matched node itself (the root of the pattern), before its
arguments: what the node computes, its rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scalify.externs.int_ranges import is_int_dtype
from scalify.ir import Node, fill_value, is_zero_fill
from scalify.ops import OPS
from scalify.values import NotSimulable, host, literal_number


@dataclass(frozen=True)
class Function:
    """A declared function: the kind of each argument (`a` attribute, `v` value), what it
    computes, whether it is a predicate (a guard in `where`) or a value (an attribute of the
    rewrite), and whether it also reads the matched node (`of_root`)."""

    args: str
    compute: Callable[..., object]
    doc: str
    predicate: bool = False
    of_root: bool = False
    reads_graph: bool = False  # also gets the graph's nodes, last (a fill looks through views)
    # the ops the matched node must be, for a function that reads it as one (`whole_but`
    # reads a slice's starts); empty: any op. The compiler refuses a rule matching another.
    roots: frozenset[str] = frozenset()

    @property
    def arity(self) -> int:
        return len(self.args)


def _compose(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(inner[d] for d in outer)


def _pick(outer: tuple[int, ...], inner: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(outer[d] for d in inner)


def _is_identity_perm(perm: tuple[int, ...]) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


def _rank(value: Node) -> int:
    return len(value.shape)


def _is_int(value: Node) -> bool:
    return is_int_dtype(value.dtype)


def _truth(value: Node, nodes: dict[int, Node]) -> bool | None:
    """The truth of a fill of a literal predicate (`true`, `1`), or None."""
    text = fill_value(value, nodes)
    if text in ("true", "false"):
        return text == "true"
    number = literal_number(text) if value.dtype == "pred" else None
    return None if number is None else number != 0


# ---- literals: exact arithmetic on fills, evaluated once

# the ops whose arithmetic on fills is folded (a reduce or pad of a fill as well)
FOLDED = frozenset(
    {"add", "sub", "mul", "div", "neg", "max", "min", "convert", "not", "and", "or", "compare"}
)


def folded_literal(node: Node, nodes: dict[int, Node]) -> str | None:
    """The literal `node` computes when it is exact arithmetic on fills; None otherwise.
    Computed in the simulator's number representation, so the literal is the value both
    programs compute: add, sub, mul, div (floats only: integer division rounds), neg, max,
    min, comparisons, casts and logic of fills; a sum, max or min over a fill; a pad of
    nothing. Not in bf16 or f16 (rounded), nor a result the dtype does not hold."""
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
    if node.op == "compare" and any(nodes[o].dtype in ("bf16", "f16") for o in node.operands):
        return None  # literals that differ in f64 may round to one value in bf16
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


def _whole_but(root: Node, dims: tuple[int, ...], nodes: dict[int, Node]) -> bool:
    """The matched slice takes every dim of its operand but `dims` whole."""
    a, operand = root.attrs, nodes[root.operands[0]]
    return all(
        (a["starts"][d], a["limits"][d], a["strides"][d]) == (0, n, 1)
        for d, n in enumerate(operand.shape)
        if d not in dims
    )


def _product_fits(a: Node, b: Node, nodes: dict[int, Node]) -> bool:
    """The fills a and b are integers whose product the dtype of a holds."""
    texts = [literal_number(fill_value(v, nodes)) for v in (a, b)]
    if None in texts or not is_int_dtype(a.dtype) or any(t != int(t) for t in texts):
        return False
    return _int_text(int(texts[0]) * int(texts[1]), a.dtype) is not None


# ---- views of a broadcast moved inside it (rules/canon_broadcasts.srl): where the dims land


def _view_of_broadcast(root: Node, nodes: dict[int, Node]):
    """(p, its attribute `inner`, the broadcast's dims, the broadcast, x) of the matched
    split or merge of `broadcast(x)`."""
    broadcast = nodes[root.operands[0]]
    x = nodes[broadcast.operands[0]]
    dims = tuple(int(d) for d in broadcast.attrs["dims"])
    if len(dims) != len(x.shape):
        raise ValueError("a broadcast whose dims do not name its operand's")
    return int(root.attrs["dim"]), int(root.attrs["inner"]), dims, broadcast, x


def _split_of_unit(root: Node, nodes: dict[int, Node]) -> bool:
    """The split cuts a dim of x into it and a unit dim (inner 1, or inner its size)."""
    p, inner, dims, _, x = _view_of_broadcast(root, nodes)
    return p in dims and (inner == 1 or x.shape[dims.index(p)] == inner)


def _splits_own_dim(root: Node, nodes: dict[int, Node]) -> bool:
    p, _, dims, _, _ = _view_of_broadcast(root, nodes)
    return p in dims


def _split_unit_dims(root: Node, nodes: dict[int, Node]) -> tuple[int, ...]:
    p, inner, dims, _, _ = _view_of_broadcast(root, nodes)
    k = dims.index(p)
    at = p if inner == 1 else p + 1  # where x's dim lands; the unit dim is a new one
    return tuple(d + (d > p) for d in dims[:k]) + (at,) + tuple(d + 1 for d in dims[k + 1 :])


def _split_dims(root: Node, nodes: dict[int, Node]) -> tuple[int, ...]:
    p, _, dims, _, _ = _view_of_broadcast(root, nodes)
    k = dims.index(p)
    return tuple(d + (d > p) for d in dims[:k]) + (p, p + 1) + tuple(d + 1 for d in dims[k + 1 :])


def _merged_unit(root: Node, nodes: dict[int, Node]) -> int | None:
    """The one of the merged dims p, p+1 that is kept when the other is a new unit dim."""
    p, _, dims, broadcast, _ = _view_of_broadcast(root, nodes)
    for unit, kept in ((p, p + 1), (p + 1, p)):
        if unit not in dims and broadcast.shape[unit] == 1:
            return kept
    return None


def _merge_unit_dims(root: Node, nodes: dict[int, Node]) -> tuple[int, ...]:
    p, _, dims, _, _ = _view_of_broadcast(root, nodes)
    kept = _merged_unit(root, nodes)
    if kept is None:
        raise ValueError("no new unit dim merged")
    return tuple(p if d == kept else d - (d > p) for d in dims)


def _merge_of_own(root: Node, nodes: dict[int, Node]) -> bool:
    """The merged dims p, p+1 are x's dims k, k+1."""
    p, _, dims, _, _ = _view_of_broadcast(root, nodes)
    return p in dims and dims.index(p) + 1 < len(dims) and dims[dims.index(p) + 1] == p + 1


def _merge_dims(root: Node, nodes: dict[int, Node]) -> tuple[int, ...]:
    p, _, dims, _, _ = _view_of_broadcast(root, nodes)
    k = dims.index(p)
    return dims[:k] + (p,) + tuple(d - 1 for d in dims[k + 2 :])


def _literal(root: Node, nodes: dict[int, Node]) -> str:
    text = folded_literal(root, nodes)
    if text is None:
        raise ValueError(f"`{root.name}` is no exact arithmetic on fills")
    return text


FUNCTIONS: dict[str, Function] = {
    "compose": Function(
        "aa",
        _compose,
        "compose(p, q): the permutation of transpose(transpose(x, p), q) as one, p[q[i]]",
    ),
    "pick": Function(
        "aa",
        _pick,
        "pick(o, i): the entries of o at the positions i, o[i[k]] (the dims of "
        "broadcast(broadcast(x, i), o) as one broadcast)",
    ),
    "is_identity_perm": Function(
        "a", _is_identity_perm, "is_identity_perm(p): p is (0, 1, ..., n-1)", predicate=True
    ),
    "empty": Function("", lambda: (), "empty(): no dims, `()` (a broadcast of a scalar)"),
    "rank": Function("v", _rank, "rank(x): how many dims the value x has"),
    "result_rank": Function(
        "", _rank, "result_rank(): how many dims the matched node has", of_root=True
    ),
    "plus": Function("aa", lambda a, b: int(a) + int(b), "plus(a, b): a + b, integers"),
    "minus": Function("aa", lambda a, b: int(a) - int(b), "minus(a, b): a - b, integers"),
    "append_last": Function(
        "aa",
        lambda root, dims, n: tuple(dims) + tuple(range(len(root.shape) - int(n), len(root.shape))),
        "append_last(d, n): the dims d followed by the last n dims of the matched node's "
        "result (where a broadcast lifted out of an op puts the dims the op adds)",
        of_root=True,
    ),
    "is_int": Function("v", _is_int, "is_int(x): x holds integers", predicate=True),
    "is_zero_fill": Function(
        "v",
        lambda value, nodes: is_zero_fill(value.id, nodes),
        "is_zero_fill(x): x is a zero scalar, or views and broadcasts of one",
        predicate=True,
        reads_graph=True,
    ),
    "is_fill": Function(
        "v",
        lambda value, nodes: fill_value(value, nodes) is not None,
        "is_fill(x): x is a scalar literal, or views and broadcasts of one",
        predicate=True,
        reads_graph=True,
    ),
    "product_fits": Function(
        "vv",
        _product_fits,
        "product_fits(a, b): a and b are integer fills whose product their dtype holds",
        predicate=True,
        reads_graph=True,
    ),
    "is_true": Function(
        "v",
        lambda value, nodes: _truth(value, nodes) is True,
        "is_true(p): p is a fill of a true predicate",
        predicate=True,
        reads_graph=True,
    ),
    "is_false": Function(
        "v",
        lambda value, nodes: _truth(value, nodes) is False,
        "is_false(p): p is a fill of a false predicate",
        predicate=True,
        reads_graph=True,
    ),
    "folds_to_literal": Function(
        "",
        lambda root, nodes: folded_literal(root, nodes) is not None,
        "folds_to_literal(): the matched node is exact arithmetic on fills "
        "(`functions.folded_literal`)",
        predicate=True,
        of_root=True,
        reads_graph=True,
    ),
    "whole_but": Function(
        "a",
        _whole_but,
        "whole_but(d): the matched slice takes every dim of its operand but the dims d whole",
        predicate=True,
        of_root=True,
        reads_graph=True,
        roots=frozenset({"slice"}),
    ),
    "position": Function(
        "aa",
        lambda dims, d: tuple(dims).index(d),
        "position(d, p): where p stands in the dims d (fails when it is not among them)",
    ),
    "is_split_of_unit": Function(
        "",
        _split_of_unit,
        "is_split_of_unit(): the matched split of broadcast(x) cuts a dim of x into it and a "
        "unit dim",
        predicate=True,
        of_root=True,
        reads_graph=True,
        roots=frozenset({"split"}),
    ),
    "split_unit_dims": Function(
        "",
        _split_unit_dims,
        "split_unit_dims(): the broadcast's dims after such a split, the unit dim a new one",
        of_root=True,
        reads_graph=True,
        roots=frozenset({"split"}),
    ),
    "splits_own_dim": Function(
        "",
        _splits_own_dim,
        "splits_own_dim(): the matched split of broadcast(x) cuts a dim of x",
        predicate=True,
        of_root=True,
        reads_graph=True,
        roots=frozenset({"split"}),
    ),
    "split_dims": Function(
        "",
        _split_dims,
        "split_dims(): the broadcast's dims after the split of its dim p into p, p+1",
        of_root=True,
        reads_graph=True,
        roots=frozenset({"split"}),
    ),
    "merges_new_unit": Function(
        "",
        lambda root, nodes: _merged_unit(root, nodes) is not None,
        "merges_new_unit(): one of the dims the matched merge of broadcast(x) joins is a new "
        "unit dim",
        predicate=True,
        of_root=True,
        reads_graph=True,
        roots=frozenset({"merge"}),
    ),
    "merge_unit_dims": Function(
        "",
        _merge_unit_dims,
        "merge_unit_dims(): the broadcast's dims once the new unit dim is merged away",
        of_root=True,
        reads_graph=True,
        roots=frozenset({"merge"}),
    ),
    "merges_own_dims": Function(
        "",
        _merge_of_own,
        "merges_own_dims(): the dims the matched merge of broadcast(x) joins are x's k, k+1",
        predicate=True,
        of_root=True,
        reads_graph=True,
        roots=frozenset({"merge"}),
    ),
    "merge_dims": Function(
        "",
        _merge_dims,
        "merge_dims(): the broadcast's dims after its dims p, p+1 are merged",
        of_root=True,
        reads_graph=True,
        roots=frozenset({"merge"}),
    ),
    "literal": Function(
        "",
        _literal,
        "literal(): the literal text the matched node computes from its fills",
        of_root=True,
        reads_graph=True,
    ),
}


def call(name: str, args: list[object], nodes: dict[int, Node], root: Node) -> object:
    """Apply a declared function (the compiler has checked its name and arguments): a value
    argument is given as its node, a function `of_root` gets the matched node first."""
    function = FUNCTIONS[name]
    values = [
        nodes[a.id] if kind == "v" else a for kind, a in zip(function.args, args, strict=True)
    ]
    if function.of_root:
        values.insert(0, root)
    if function.reads_graph:
        values.append(nodes)
    return function.compute(*values)
