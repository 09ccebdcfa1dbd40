"""The attribute functions and predicates canonical rules may call (`rules/canon.srl`).

A canonical rule rewrites a node into one op over values it matched, and the new op's
attributes are often computed from the matched ones: two transposes' permutations composed,
two broadcasts' dims picked. These are pure functions of integer tuples, declared here once
with their arity; the compiler refuses a call to anything else, and the canonical rules'
fuzzer checks every rule that uses them numerically.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scalify.externs.int_ranges import is_int_dtype
from scalify.ir import Node, is_zero_fill


@dataclass(frozen=True)
class Function:
    """An attribute function: its arity, what it computes, whether it is a predicate (a
    guard in `where`) or a value (an attribute of the rewrite), and whether its arguments
    are matched values (it is then called with each value's node and the graph's nodes)
    rather than attributes."""

    arity: int
    compute: Callable[..., object]
    doc: str
    predicate: bool = False
    of_values: bool = False


def _compose(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(inner[d] for d in outer)


def _pick(outer: tuple[int, ...], inner: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(outer[d] for d in inner)


def _is_identity_perm(perm: tuple[int, ...]) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


def _rank(value: Node, nodes: dict[int, Node]) -> int:
    return len(value.shape)


def _is_int(value: Node, nodes: dict[int, Node]) -> bool:
    return is_int_dtype(value.dtype)


def _is_zero_fill(value: Node, nodes: dict[int, Node]) -> bool:
    return is_zero_fill(value.id, nodes)


FUNCTIONS: dict[str, Function] = {
    "compose": Function(
        2,
        _compose,
        "compose(p, q): the permutation of transpose(transpose(x, p), q) as one, p[q[i]]",
    ),
    "pick": Function(
        2,
        _pick,
        "pick(o, i): the dims of broadcast(broadcast(x, i), o) as one broadcast, o[i[k]]",
    ),
    "is_identity_perm": Function(
        1, _is_identity_perm, "is_identity_perm(p): p is (0, 1, ..., n-1)", predicate=True
    ),
    "rank": Function(1, _rank, "rank(x): how many dims the value x has", of_values=True),
    "is_int": Function(1, _is_int, "is_int(x): x holds integers", predicate=True, of_values=True),
    "is_zero_fill": Function(
        1,
        _is_zero_fill,
        "is_zero_fill(x): x is a zero scalar, or views and broadcasts of one",
        predicate=True,
        of_values=True,
    ),
}


def call(name: str, args: list[object], nodes: dict[int, Node]) -> object:
    """Apply a declared function (the compiler has checked its name and arity); a function
    of values gets each value's node and the graph's nodes."""
    function = FUNCTIONS[name]
    if function.of_values:
        return function.compute(*(nodes[a.id] for a in args), nodes)
    return function.compute(*args)
