"""Dividing by a group's size passes through linear ops: the averaging of data parallelism.

A data-parallel step takes each device's mean over its own batch (a literal 1/64 where the
baseline has 1/128), sums the devices' gradients and divides by the group's size n. Whether
that is the baseline's gradient is a fact about the baseline's own terms: the division by n
has to travel down through the dots, sums and selects autograd made until it meets a literal
it can fold into (1/64 / 2 is the baseline's 1/128). Rules over layouts cannot see it.

So a division by a group's size (`x / n`, `x * (1/n)`, n a product of mesh axis sizes, over
floats) also becomes `(Push n x)`, a demand for x / n, and a push moves into the operands of
an op through which a positive factor passes (each op's `Scaling` in `scalify/ops/`): into
one of a dot's operands, both of an add's. It stops at a literal that divided by n is another
literal of the graphs (`(Splat c)` becomes `(Splat c2)`), or at a division by a literal
(`a / c` becomes `a / (c * n)`). Every union is an identity over the reals, so a push that
finds nothing leaves terms no one else uses. A push only enters operands that can take it
(`Scalable`: a literal, or a homogeneous op over such operands), so it follows the gradient's
chain down to its seed, not every forward activation. The cost is one pushed copy of the
terms between the division and its literal, the same at any tensor size or group size.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from scalify.engine.encode import egg_string, literal_key, node_ref
from scalify.ir import Graph
from scalify.mesh import Mesh
from scalify.ops import OPS
from scalify.ops.spec import Scaling
from scalify.values import dtype_class, literal_number

if TYPE_CHECKING:
    from scalify.engine.egraph import EGraphSession


@cache
def scaling_rules() -> str:
    """The egglog program: the demand's origins, its moves through each homogeneous op of the
    registry, and where it stops."""
    lines = [
        "(relation Scalable (T))",
        "(relation GroupDivisor (String String))  ; literal n, the group size n",
        "(relation GroupInverse (String String String))  ; 1/n literal, dtype, the size n",
        "(relation LitDivided (String String String String))  ; c, dtype, n, c/n",
        "(relation LitTimes (String String String String))  ; c, dtype, n, c*n",
        '(rule ((= ?s (Splat ?c ?t))) ((Scalable ?s)) :ruleset analysis :name "scalable-fill")',
        _rule(
            "scalable-divided",
            '(= ?e (Op2 "div" ?k ?a (Splat ?c ?t))) (= (AttrS ?k "class") "float")',
            "(Scalable ?e)",
        ),
        _rule(
            "push-origin-div",
            '(= ?d (Op2 "div" ?k ?x (Splat ?n ?t))) (= (AttrS ?k "class") "float") '
            "(GroupDivisor ?n ?g) (Base ?x) (Scalable ?x)",
            "(union ?d (Push ?g ?x))",
        ),
        *(
            _rule(
                f"push-origin-mul-{side}",
                f'(= ?d (Op2 "mul" ?k {operands})) (GroupInverse ?r ?t ?n) (Base ?x) (Scalable ?x)',
                "(union ?d (Push ?n ?x))",
            )
            for side, operands in (("right", "?x (Splat ?r ?t)"), ("left", "(Splat ?r ?t) ?x"))
        ),
        _rule(
            "push-fill",
            "(= ?p (Push ?n (Splat ?c ?t))) (LitDivided ?c ?t ?n ?c2)",
            "(union ?p (Splat ?c2 ?t))",
        ),
        _rule(
            "push-divisor",
            '(= ?p (Push ?n ?e)) (= ?e (Op2 "div" ?k ?a (Splat ?c ?t))) '
            '(= (AttrS ?k "class") "float") (LitTimes ?c ?t ?n ?c2)',
            '(union ?p (Op2 "div" ?k ?a (Splat ?c2 ?t)))',
        ),
        # a block, or a part of a sum, of x / n is that of x, divided by n
        _rule(
            "push-shard",
            "(= ?p (Push ?n ?s)) (= ?s (Shard ?t ?d ?a))",
            "(union ?p (Shard (Push ?n ?t) ?d ?a))",
        ),
        _rule(
            "push-partial",
            '(= ?p (Push ?n ?s)) (= ?s (Partial ?t "sum" ?a))',
            '(union ?p (Partial (Push ?n ?t) "sum" ?a))',
        ),
    ]
    for name, spec in sorted(OPS.items()):
        if spec.scaling is not None:
            for arity in spec.arity:
                lines += _op_rules(name, arity, spec.scaling)
    return "\n".join(lines)


def _rule(name: str, query: str, action: str) -> str:
    return f"(rule ({query}) ({action}) :ruleset analysis :name {egg_string(name)})"


def _op_rules(op: str, arity: int, scaling: Scaling) -> list[str]:
    """Scalable and Push rules for one op at one arity."""
    operands = [f"?a{i}" for i in range(arity)]
    positions = [i for i in (scaling.operands or range(arity)) if i < arity]
    term = f"(Op{arity} {egg_string(op)} ?k {' '.join(operands)})"
    guards = [""]
    if scaling.when:
        attr, values = scaling.when
        guards = [f" (= (AttrS ?k {egg_string(attr)}) {egg_string(v)})" for v in values]
    groups = [[i] for i in positions] if scaling.mode == "each" else [positions]
    rules = []
    for (g, guard), group in itertools.product(enumerate(guards), groups):
        scalable = " ".join(f"(Scalable ?a{i})" for i in group)
        pushed = [f"(Push ?n ?a{i})" if i in group else f"?a{i}" for i in range(arity)]
        suffix = f"{op}-{arity}-{'-'.join(map(str, group))}-{g}"
        query = f"(= ?e {term}) {scalable}{guard}"
        rules.append(_rule(f"scalable-{suffix}", query, "(Scalable ?e)"))
        rules.append(
            _rule(
                f"push-{suffix}",
                f"(= ?p (Push ?n ?e)) (= ?e {term}) (Base ?e) {scalable}{guard}",
                f"(union ?p (Op{arity} {egg_string(op)} ?k {' '.join(pushed)}))",
            )
        )
    return rules


def scaled_outputs(session: EGraphSession, wanted: dict[int, str], mesh: Mesh) -> dict[int, int]:
    """For each distributed output not proved to have its required layout (`wanted`: its
    id -> the e-graph term of that layout over its baseline node), the group size n for
    which it is proved to be n times that (a sum over the group where the baseline's mean
    needed it divided by n), if any. Runs on the proof's e-graph: the push from the output
    down to its literals is the only new work."""
    sizes = sorted(group_sizes(mesh))
    probes = {(d, n): f'(Push "{n}" {node_ref("d", d)})' for d in wanted for n in sizes}
    session.feed(list(probes.values()))
    session.run_analysis()
    found: dict[int, int] = {}
    for d, term in wanted.items():
        for n in sizes:
            if d not in found and session.holds(f"(= {probes[d, n]} {term})"):
                found[d] = n
    return found


def scaling_facts(mesh: Mesh, graphs: list[Graph]) -> list[str]:
    """The group sizes a division may undo, and the literals a push may fold into: `c / n`
    and `c * n` where that is (to the dtype's rounding) another literal of the graphs."""
    sizes = group_sizes(mesh)
    if not sizes:
        return []
    literals: dict[str, set[str]] = {}  # key -> dtypes
    for graph in graphs:
        for node in graph.nodes.values():
            if node.op == "constant" and node.shape == ():
                key = literal_key(node.attrs.get("value"), node.dtype)
                literals.setdefault(key, set()).add(node.dtype)
    values = {key: value for key in literals if (value := _value(key)) is not None}
    facts = [
        f"(GroupDivisor {egg_string(key)} {egg_string(str(int(v)))})"
        for key, v in sorted(values.items())
        if v in sizes
    ]
    floats = [(k, t) for k, dtypes in literals.items() for t in dtypes if dtype_class(t) == "float"]
    for (key, dtype), n in itertools.product(sorted(floats), sorted(sizes)):
        c = values.get(key)
        if c is None:
            continue
        n_key = str(n)
        if c * n == 1 or _rounded(c, dtype) == _rounded(Fraction(1, n), dtype):
            inverse = (key, dtype, n_key)
            facts.append(f"(GroupInverse {' '.join(egg_string(s) for s in inverse)})")
        for relation, target in (("LitDivided", c / n), ("LitTimes", c * n)):
            for other in _same_value(target, dtype, values, literals):
                facts.append(
                    f"({relation} {egg_string(key)} {egg_string(dtype)} {egg_string(n_key)} "
                    f"{egg_string(other)})"
                )
    return facts


def group_sizes(mesh: Mesh) -> set[int]:
    """The sizes of the device groups an all-reduce can span: products of axis sizes."""
    sizes = set()
    for count in range(1, len(mesh.axes) + 1):
        for chosen in itertools.combinations([n for _, n in mesh.axes], count):
            size = int(np.prod(chosen))
            if size > 1:
                sizes.add(size)
    return sizes


def _value(key: str) -> Fraction | None:
    value = literal_number(key)
    return Fraction(value) if value is not None and np.isfinite(value) else None


def _same_value(
    target: Fraction, dtype: str, values: dict[str, Fraction], literals: dict[str, set[str]]
) -> list[str]:
    """The literals of `dtype` equal to `target`, exactly or once both are rounded to it: a
    literal is the value the program holds, and 1/12 is held as its nearest float."""
    rounded = _rounded(target, dtype)
    return [
        key
        for key, value in values.items()
        if dtype in literals[key] and (value == target or _rounded(value, dtype) == rounded)
    ]


def _rounded(value: Fraction, dtype: str) -> float:
    if dtype in ("f64", "float64"):  # numpy's and HLO's spellings
        return float(value)
    with np.errstate(over="ignore"):  # a literal beyond float32 (a mask's -3.4e38) is inf
        return float(np.float32(float(value)))
