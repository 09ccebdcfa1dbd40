"""The term rewriter that runs canonical rules (`canon` in `.srl`) over a graph.

A canonical rule is directed: where its match pattern matches a node (and its guards hold),
the node becomes the rewrite's term. The term is either a value the match bound (the node
*is* that value: applied only when the value has the node's shape and dtype, so a rule can
never change a type) or a tree of ops over bound values, whose attributes the rule computes
with the declared functions of `functions.py`. The tree's top op keeps the node's id, shape,
dtype and source location, so its users and the report see the same value; an op nested
under it is a new node at the same source location, its shape and dtype inferred
(`shapes.py`), and is itself canonicalised as it is made.

Nodes are visited in topological order, so a pattern's operands are already canonical when
the pattern is tried; a rewritten node is tried again until no rule applies (a bounded number
of times). Rules are keyed by the op at the root of their pattern (each op of an op
variable's family).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from scalify.canon.functions import call
from scalify.canon.shapes import NotBuilt, built_dtype, built_shape
from scalify.compiler import ast
from scalify.ir import Graph, Node

MAX_STEPS_PER_NODE = 16  # a rule set that cycles is refused here, not left to spin


class RewriteFailed(Exception):
    """A rule's guard or attribute function raised on a node it matched."""


@dataclass(frozen=True)
class NodeRef:
    """A match variable bound to a node (as opposed to an attribute value)."""

    id: int


Binding = dict[str, object]


class CanonRules:
    """A set of canonical rules, indexed by the op at the root of each pattern."""

    def __init__(self, rules: Iterable[ast.CanonRule]) -> None:
        self.rules = tuple(rules)
        self.by_root: dict[str, list[ast.CanonRule]] = defaultdict(list)
        for rule in self.rules:
            for op in dict(rule.ops).get(rule.match.name, (rule.match.name,)):
                self.by_root[op].append(rule)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rewrite(
        self,
        node: Node,
        nodes: dict[int, Node],
        fired: dict[str, int],
        new_id: Callable[[], int],
        strict: bool = False,
    ) -> int | None:
        """Apply rules to `node` until none applies. Returns the id of the value the node
        turned out to be (its users should read that instead), or None when the node stays
        (possibly rewritten in place). Ops a rewrite nests are added to `nodes` (ids from
        `new_id`), before `node` where the caller adds it after. A guard or attribute
        function that fails on the match leaves the node as it is (`strict`, for the
        fuzzer: raises RewriteFailed)."""
        for _ in range(MAX_STEPS_PER_NODE):
            for rule in self.by_root.get(node.op, ()):
                binding = match(rule, node, nodes)
                try:
                    if binding is None or not guards_hold(rule.where, binding, nodes):
                        continue
                    outcome = self.apply(rule.rewrite, binding, node, nodes, fired, new_id)
                except (IndexError, KeyError, TypeError, ValueError) as err:
                    if strict:
                        raise RewriteFailed(f"rule `{rule.name}` fails on a match: {err}") from err
                    continue
                if outcome is False:
                    continue
                fired[rule.name] = fired.get(rule.name, 0) + 1
                if outcome is not True:
                    return outcome  # the node is a value it matched
                break  # rewritten in place: try every rule again on the new node
            else:
                return None
        raise RuntimeError(f"canonical rules do not terminate on node `{node.name}`")

    def apply(
        self,
        rewrite: ast.Value,
        binding: Binding,
        node: Node,
        nodes: dict[int, Node],
        fired: dict[str, int],
        new_id: Callable[[], int],
    ):
        """Make `node` the rewrite's term. Returns the id of a bound value the node is (its
        users read that instead), True when the node was rewritten in place, False when the
        rewrite does not apply (a value of another shape or dtype, nested ops whose operands
        do not fit them)."""
        if isinstance(rewrite, ast.Var):
            target = nodes[binding[rewrite.name].id]
            if (target.shape, target.dtype) != (node.shape, node.dtype):
                return False
            return target.id
        made: list[Node] = []
        try:
            operands = _operands(rewrite, node.dtype, binding, node, nodes, made, new_id)
        except NotBuilt:
            return False  # nested ops whose operands do not fit: the rule does not apply
        attrs = dict(node.attrs) if rewrite.name == node.op else {}
        attrs.update({k: evaluate(v, binding, nodes) for k, v in rewrite.attrs})
        alias: dict[int, int] = {}
        for new in made:  # operands first: each made op canonical before its user
            new.operands = tuple(alias.get(o, o) for o in new.operands)
            same = self.rewrite(new, nodes, fired, new_id)  # adds what it nests first
            if same is not None:
                alias[new.id] = same
            else:
                nodes[new.id] = new
        node.op, node.attrs = rewrite.name, attrs
        node.operands = tuple(alias.get(o, o) for o in operands)
        return True


ROOT = "$root"  # the matched node, for functions `of_root` (no `.srl` variable is so spelled)


def match(rule: ast.CanonRule, node: Node, nodes: dict[int, Node]) -> Binding | None:
    """The variables `rule`'s pattern binds at `node` (and ROOT, the node itself), or None
    when it does not match."""
    binding: Binding = {ROOT: node}
    return binding if _match(rule.match, node, nodes, binding, dict(rule.ops)) else None


def _bind(binding: Binding, name: str, value: object) -> bool:
    if name in binding:
        return binding[name] == value
    binding[name] = value
    return True


def _match(
    pattern: ast.App,
    node: Node,
    nodes: dict[int, Node],
    binding: Binding,
    ops: dict[str, tuple[str, ...]],
) -> bool:
    if pattern.name in ops:  # an op variable: any op of its family, the same one each time
        if node.op not in ops[pattern.name] or not _bind(binding, pattern.name, node.op):
            return False
    elif pattern.name != node.op:
        return False
    if len(pattern.args) != len(node.operands):
        return False
    for key, wanted in pattern.attrs:
        if key not in node.attrs:
            return False
        have = node.attrs[key]
        if isinstance(wanted, ast.Var):
            if not _bind(binding, wanted.name, have):
                return False
        elif have != evaluate(wanted, binding, nodes):
            return False
    for arg, operand in zip(pattern.args, node.operands, strict=True):
        if isinstance(arg, ast.Var):
            if not _bind(binding, arg.name, NodeRef(operand)):
                return False
        elif isinstance(arg, ast.App):
            if not _match(arg, nodes[operand], nodes, binding, ops):
                return False
        else:
            return False  # the compiler refuses literals in operand position
    return True


def evaluate(value: ast.Value, binding: Binding, nodes: dict[int, Node]) -> object:
    """An attribute expression's value: a bound attribute (or value, as a function's
    argument), a literal, or a function call."""
    if isinstance(value, ast.Var):
        return binding[value.name]
    if isinstance(value, ast.IntLit | ast.StrLit):
        return value.value
    if isinstance(value, ast.App):
        args = [evaluate(a, binding, nodes) for a in value.args]
        return call(value.name, args, nodes, binding[ROOT])
    raise TypeError(f"not an attribute expression: {value!r}")


def guards_hold(clauses: tuple, binding: Binding, nodes: dict[int, Node]) -> bool:
    for clause in clauses:
        if isinstance(clause, ast.Membership):
            continue  # an op variable's family: the match checked it
        if isinstance(clause, ast.App):
            if not evaluate(clause, binding, nodes):
                return False
        elif isinstance(clause, ast.Equation):
            if evaluate(clause.lhs, binding, nodes) != evaluate(clause.rhs, binding, nodes):
                return False
        elif isinstance(clause, ast.Comparison):
            lhs = evaluate(clause.lhs, binding, nodes)
            rhs = evaluate(clause.rhs, binding, nodes)
            if not _compare(lhs, clause.op, rhs):
                return False
    return True


def _compare(lhs, op: str, rhs) -> bool:
    return {
        "!=": lhs != rhs,
        "<": lhs < rhs,
        "<=": lhs <= rhs,
        ">": lhs > rhs,
        ">=": lhs >= rhs,
    }[op]


def _operands(
    app: ast.App,
    dtype: str | None,
    binding: Binding,
    node: Node,
    nodes: dict[int, Node],
    made: list[Node],
    new_id: Callable[[], int],
) -> tuple[int, ...]:
    """The ids of `app`'s operands: bound values, and the nested ops built (appended to
    `made`, operands first; not yet in `nodes`). `dtype`: what `app` computes in."""
    ids: list[int | None] = [None] * len(app.args)
    for k, arg in enumerate(app.args):  # values and ops first: they fix a constant's dtype
        if isinstance(arg, ast.Var):
            ids[k] = binding[arg.name].id
        elif arg.name != "constant":
            wanted = dtype if _passes_dtype(app.name, k) else None
            ids[k] = _build(arg, wanted, binding, node, nodes, made, new_id)
    skip = 0 if app.name == "select" else None  # a select's data, not its predicate
    data = [_node(i, made, nodes) for k, i in enumerate(ids) if i is not None and k != skip]
    for k, arg in enumerate(app.args):
        if ids[k] is None:  # a constant: in its siblings' dtype, or its user's
            wanted = "pred" if (app.name, k) == ("select", 0) else None
            wanted = wanted or (data[0].dtype if data else dtype)
            ids[k] = _build(arg, wanted, binding, node, nodes, made, new_id)
    return tuple(i for i in ids if i is not None)


def _node(node_id: int, made: list[Node], nodes: dict[int, Node]) -> Node:
    """A node by id: one this rewrite built (not yet in `nodes`), or one of the graph's."""
    return next((n for n in made if n.id == node_id), None) or nodes[node_id]


def _passes_dtype(op: str, k: int) -> bool:
    """Whether operand k of `op` computes in the op's own dtype (an op nested there without
    a dtype of its own, a cast, takes it): not a comparison's or a cast's operands, a
    select's predicate or a lookup's index."""
    return op not in ("compare", "convert") and (op, k) not in (("select", 0), ("take", 1))


def _build(
    app: ast.App,
    wanted: str | None,
    binding: Binding,
    node: Node,
    nodes: dict[int, Node],
    made: list[Node],
    new_id: Callable[[], int],
) -> int:
    """A nested op of a rewrite as a new node (appended to `made`), placed and named after
    `node`; NotBuilt when its operands do not fit it."""
    operands = _operands(app, wanted, binding, node, nodes, made, new_id)
    args = [_node(o, made, nodes) for o in operands]
    attrs = {k: evaluate(v, binding, nodes) for k, v in app.attrs}
    dtype = built_dtype(app.name, args, wanted)
    if app.name == "convert":
        attrs.setdefault("dtype", dtype)
    shape = built_shape(app.name, attrs, args)
    new = Node(
        new_id(),
        app.name,
        operands,
        tuple(shape),
        dtype,
        attrs,
        node.loc,
        f"{node.name}.{app.name}",
        node.framework_op,
    )
    made.append(new)
    return new.id


@cache
def builtin_rules(*files: str) -> CanonRules:
    """The canonical rules shipped with Scalify in these files of `rules/` (`canon.srl`
    when none is named), compiled once."""
    from scalify.compiler.compile import compile_texts

    folder = resources.files("scalify.rules")
    names = files or ("canon.srl",)
    sources = [(f"rules/{name}", folder.joinpath(name).read_text()) for name in names]
    return CanonRules(compile_texts(sources).canon_rules)


# the rules that lift a broadcast out of the op reading it, run after canon.srl's
WITH_BROADCASTS = ("canon.srl", "canon_broadcasts.srl")


def counter(graph_ids: Iterable[int]) -> Callable[[], int]:
    """Fresh node ids, above every id of the graph."""
    ids = itertools.count(max(graph_ids, default=-1) + 1)
    return lambda: next(ids)


def run(graph: Graph, rules: CanonRules, fired: dict[str, int] | None = None) -> dict[str, int]:
    """Rewrite every node of `graph` to its canonical form, ops a rewrite nests placed
    before their user, and let users read through nodes that turned out to be another
    value. Returns how often each rule fired (counted into `fired`). Nodes no output reads
    any more are left for the caller's pruning."""
    fired = {} if fired is None else fired
    alias: dict[int, int] = {}
    nodes: dict[int, Node] = {}
    new_id = counter(graph.nodes)
    for node in list(graph.nodes.values()):
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        if node.op != "parameter":
            same = rules.rewrite(node, nodes, fired, new_id)
            if same is not None:
                alias[node.id] = alias.get(same, same)
                continue
        nodes[node.id] = node
    graph.nodes = nodes
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}
    return fired
