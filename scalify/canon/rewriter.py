"""The term rewriter that runs canonical rules (`canon` in `.srl`) over a graph.

A canonical rule is directed: where its match pattern matches a node (and its guards hold),
the node becomes the rewrite's term. The term is either a value the match bound (the node
*is* that value: applied only when the value has the node's shape and dtype, so a rule can
never change a type) or one op over bound values, whose attributes the rule computes with
the declared functions of `functions.py`; it keeps the node's id, shape, dtype and source
location, so its users and the report see the same value.

Nodes are visited in topological order, so a pattern's operands are already canonical when
the pattern is tried; a rewritten node is tried again until no rule applies (a bounded number
of times). Rules are keyed by the op at the root of their pattern.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from scalify.canon.functions import call
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
            self.by_root[rule.match.name].append(rule)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rewrite(
        self, node: Node, nodes: dict[int, Node], fired: dict[str, int], strict: bool = False
    ) -> int | None:
        """Apply rules to `node` until none applies. Returns the id of the value the node
        turned out to be (its users should read that instead), or None when the node stays
        (possibly rewritten in place). A guard or attribute function that fails on the
        match leaves the node as it is (`strict`, for the fuzzer: raises RewriteFailed)."""
        for _ in range(MAX_STEPS_PER_NODE):
            for rule in self.by_root.get(node.op, ()):
                binding = match(rule.match, node, nodes)
                try:
                    if binding is None or not guards_hold(rule.where, binding, nodes):
                        continue
                    outcome = apply(rule.rewrite, binding, node, nodes)
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


def match(pattern: ast.App, node: Node, nodes: dict[int, Node]) -> Binding | None:
    """The variables `pattern` binds at `node`, or None when it does not match."""
    binding: Binding = {}
    return binding if _match(pattern, node, nodes, binding) else None


def _bind(binding: Binding, name: str, value: object) -> bool:
    if name in binding:
        return binding[name] == value
    binding[name] = value
    return True


def _match(pattern: ast.App, node: Node, nodes: dict[int, Node], binding: Binding) -> bool:
    if pattern.name != node.op or len(pattern.args) != len(node.operands):
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
            if not _match(arg, nodes[operand], nodes, binding):
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
        return call(value.name, [evaluate(a, binding, nodes) for a in value.args], nodes)
    raise TypeError(f"not an attribute expression: {value!r}")


def guards_hold(clauses: tuple, binding: Binding, nodes: dict[int, Node]) -> bool:
    for clause in clauses:
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


def apply(rewrite: ast.Value, binding: Binding, node: Node, nodes: dict[int, Node]):
    """Make `node` the rewrite's term. Returns the id of a bound value the node is (its
    users read that instead), True when the node was rewritten in place, False when the
    rewrite does not apply (a value of another shape or dtype)."""
    if isinstance(rewrite, ast.Var):
        target = nodes[binding[rewrite.name].id]
        if (target.shape, target.dtype) != (node.shape, node.dtype):
            return False
        return target.id
    operands = tuple(binding[a.name].id for a in rewrite.args)
    attrs = dict(node.attrs) if rewrite.name == node.op else {}
    attrs.update({key: evaluate(value, binding, nodes) for key, value in rewrite.attrs})
    node.op, node.operands, node.attrs = rewrite.name, operands, attrs
    return True


@cache
def builtin_rules() -> CanonRules:
    """The canonical rules shipped with Scalify (`rules/canon.srl`), compiled once."""
    from scalify.compiler.compile import compile_texts

    source = resources.files("scalify.rules").joinpath("canon.srl")
    return CanonRules(compile_texts([("rules/canon.srl", source.read_text())]).canon_rules)


def run(graph: Graph, rules: CanonRules) -> dict[str, int]:
    """Rewrite every node of `graph` to its canonical form (in place), and let users read
    through nodes that turned out to be another value. Returns how often each rule fired.
    Nodes no output reads any more are left for the caller's pruning."""
    fired: dict[str, int] = {}
    alias: dict[int, int] = {}
    for node in graph.nodes.values():
        node.operands = tuple(alias.get(o, o) for o in node.operands)
        if node.op == "parameter":
            continue
        same = rules.rewrite(node, graph.nodes, fired)
        if same is not None:
            alias[node.id] = alias.get(same, same)
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
    return fired
