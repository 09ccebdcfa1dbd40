"""Typed AST of `.srl` files: frozen dataclasses, each carrying the span it came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A position in a rule file, for error messages."""

    path: str
    line: int
    column: int


@dataclass(frozen=True)
class Var:
    name: str
    span: Span


@dataclass(frozen=True)
class IntLit:
    value: int
    span: Span


@dataclass(frozen=True)
class DecimalLit:
    """A number with a point or an exponent, kept as written (a literal of a custom-call
    expression)."""

    text: str
    span: Span


@dataclass(frozen=True)
class StrLit:
    value: str
    span: Span


@dataclass(frozen=True)
class App:
    """An application `op[attr=v, ...](args)`: an op, a layout, or a dim function."""

    name: str
    attrs: tuple[tuple[str, Value], ...]
    args: tuple[Value, ...]
    span: Span


Value = Var | IntLit | DecimalLit | StrLit | App


@dataclass(frozen=True)
class Relation:
    """`X ~ x @ layout`: distributed term X relates to baseline term x by layout; in a
    chain `x @ inner... @ layout`, the inner layouts (a repeated or padded value) apply to x
    first."""

    dist: Value
    base: Value
    layout: Value
    span: Span
    inner: tuple[Value, ...] = ()


@dataclass(frozen=True)
class Membership:
    """`f in family`: an op variable ranges over a family of ops."""

    var: str
    family: str
    span: Span


@dataclass(frozen=True)
class Comparison:
    lhs: Value
    op: str
    rhs: Value
    span: Span


@dataclass(frozen=True)
class Equation:
    """`lhs == rhs`: a plain algebraic identity (no layouts)."""

    lhs: Value
    rhs: Value
    span: Span


Clause = Relation | Membership | Comparison | Equation | Value


@dataclass(frozen=True)
class Family:
    name: str
    members: tuple[str, ...]
    span: Span


@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    match: Clause
    where: tuple[Clause, ...]
    rewrite: Clause
    span: Span
    unfuzzed: str = ""  # why random instances cannot make it fire, when they cannot


@dataclass(frozen=True)
class CustomCallDecl:
    """`custom_call "Target" = meaning(0, 1)`: what a custom-call target computes; or
    `custom_call "Target"(x, y) = EXPR reference NAME`, an expression over the named
    operands (`params`), with an optional reference function lint compares it with."""

    target: str
    meaning: Value
    span: Span
    params: tuple[Var, ...] | None = None
    reference: Var | None = None


@dataclass(frozen=True)
class CanonRule:
    """`canon name: match P where G rewrite T`: a directed rewrite of one graph. Where P
    matches a node and the guards G hold, the node becomes T: a value P bound, or a tree of
    ops over bound values with attributes computed from bound attributes. `ops`: each op
    variable of P (`where f in FAMILY`) with the ops it ranges over (the checker fills it)."""

    name: str
    doc: str
    match: App
    where: tuple[Clause, ...]
    rewrite: Value
    span: Span
    unfuzzed: str = ""
    ops: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class LayoutDecl:
    """`layout NAME(d, a) = INDEX`: a layout kind; device r of the n along axis a holds, at
    its place i along dim d, the baseline's place INDEX (an index map over i, r, n and size,
    nested (op, lhs, rhs) tuples as `scalify.layout.IndexMap`)."""

    name: str
    params: tuple[Var, Var]
    index: object
    span: Span
    names: tuple[Var, ...] = ()  # the names the index map reads, for errors at their column


@dataclass(frozen=True)
class RuleFile:
    path: str
    text: str
    families: tuple[Family, ...]
    rules: tuple[Rule, ...]
    custom_calls: tuple[CustomCallDecl, ...] = ()
    canon_rules: tuple[CanonRule, ...] = ()
    layouts: tuple[LayoutDecl, ...] = ()


def leaves(node) -> list:
    """The variables and literals written in a clause or value, in source order: what the
    checks that look for one kind of leaf (decimals, unbound variables) walk."""
    if isinstance(node, App):
        return [x for _, value in node.attrs for x in leaves(value)] + [
            x for arg in node.args for x in leaves(arg)
        ]
    if isinstance(node, Relation):
        return [
            x for part in (node.dist, node.base, *node.inner, node.layout) for x in leaves(part)
        ]
    if isinstance(node, Comparison | Equation):
        return leaves(node.lhs) + leaves(node.rhs)
    return [node] if isinstance(node, Var | IntLit | StrLit | DecimalLit) else []
