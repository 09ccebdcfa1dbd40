"""Lower a checked rule to egglog query atoms and actions.

Terms in the e-graph: `(Op1|Op2|Op3 name key args...)` for every op, where `key` is the op's
attribute signature (the same string in both graphs when the attributes agree), `(Splat c
dtype)` for a scalar fill, and the layout constructors `(Shard t dim axis)` and
`(Partial t op axis)`. `(OutDim key operand dim)`, `(AttrS key name)` and `(AttrI key name)`
are facts about op signatures that the engine states before running the rules.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace

from .ast import App, Comparison, Equation, IntLit, Membership, Relation, StrLit, Value, Var, leaves
from .check import RuleInfo
from .signatures import (
    ARITH_FUNCTIONS,
    AXIS_FREE,
    CONSTANT_NAMES,
    COORD,
    DIM_FUNCTIONS,
    LAYOUTS,
    RESCALED,
    SIZE,
    SPLAT,
    VALUE_FUNCTIONS,
    WHERE_ONLY_SPREADS,
    attr_kinds,
    binds_axis,
)


@dataclass
class EggRule:
    """One egglog rule, ready for emission."""

    name: str
    doc: str
    source: str
    query: list[str]
    actions: list[str]
    ruleset: str = "layout"
    unfuzzed: str = ""  # the rule file's reason random instances never make it fire
    # variables of the rule that this expansion uses but its query does not bind (egglog
    # would refuse the rule), and which `spread` alternatives the expansion took
    unbound: tuple[Var, ...] = ()
    cases: tuple[str, ...] = ()


@dataclass
class _Lowering:
    info: RuleInfo
    query: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    in_query: set[str] = field(default_factory=set)  # baseline variables already in the query
    keys: dict[int, str] = field(default_factory=dict)  # id(App) -> key var
    key_of_op: dict[str, str] = field(default_factory=dict)  # op name -> key var
    counter: int = 0
    bound: dict[str, str] = field(default_factory=dict)
    choices: dict[int, str] = field(default_factory=dict)  # id(spread clause) -> alternative

    def spread_choice(self, clause: Relation) -> str:
        return self.choices[id(clause)]

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"?_{stem}{self.counter}"

    def var(self, name: str) -> str:
        return self.aliases.get(name, f"?{name}")

    def string(self, value: Value) -> str:
        if isinstance(value, IntLit):
            return f'"{value.value}"'
        if isinstance(value, StrLit):
            return f'"{value.value}"'
        if isinstance(value, Var) and value.name in CONSTANT_NAMES:
            return f'"{value.name}"'
        return self.var(value.name)

    def dim(self, value: Value) -> str:
        if isinstance(value, IntLit):
            return str(value.value)
        if isinstance(value, StrLit):
            return f'"{value.value}"'
        if isinstance(value, Var):
            return self.string(value)
        args = value.args
        if value.name in ARITH_FUNCTIONS:
            lhs, rhs = self.dim(args[0]), self.dim(args[1])
            if value.name == "quot":  # exact: no match where it leaves a remainder
                self.query.append(f"(= (% {lhs} {rhs}) 0)")
            return f"({ARITH_FUNCTIONS[value.name]} {lhs} {rhs})"
        if value.name == SIZE:
            size = self.fresh("size")
            self.query.append(f"(HasSize {self.var(args[0].name)} {self.dim(args[1])} {size})")
            return size
        if value.name in VALUE_FUNCTIONS:
            lookup = f"({VALUE_FUNCTIONS[value.name][0]} {self.string(args[0])})"
            if lookup not in self.bound:
                self.bound[lookup] = self.fresh("v")
                self.query.append(f"(= {self.bound[lookup]} {lookup})")
            return self.bound[lookup]
        key = self.key_of_op[self.info.rule.match.name]
        if len(args) == 3:
            key = self.key_of_op[args[0].name]
            args = args[1:]
        lookup = f"({DIM_FUNCTIONS[value.name]} {key} {args[0].value} {self.dim(args[1])})"
        if lookup not in self.bound:
            self.bound[lookup] = self.fresh("dim")
            self.query.append(f"(= {self.bound[lookup]} {lookup})")
        return self.bound[lookup]

    def pattern(self, app: App, target: str) -> None:
        """Query atoms binding `target` to an instance of `app`."""
        if app.name == SPLAT:
            self.query.append(f"(= {target} (Splat {self.string(app.args[0])} {self.fresh('dt')}))")
            return
        if app.name == COORD:
            self.query.append(f"(= {target} (Coord {self.string(app.args[0])}))")
            return
        key = self.fresh("k")
        self.key_of_op.setdefault(app.name, key)
        op = self.var(app.name) if app.name in self.info.op_vars else f'"{app.name}"'
        args = []
        for arg in app.args:
            if isinstance(arg, App):
                sub = self.fresh("t")
                self.pattern(arg, sub)
                args.append(sub)
            else:
                args.append(self.var(arg.name))
        self.query.append(f"(= {target} (Op{len(args)} {op} {key} {' '.join(args)}))")
        for attr, value in app.attrs:
            kind = attr_kinds(app.name)[attr]
            rendered = self.dim(value) if kind == "I" else self.string(value)
            self.query.append(f'(= (Attr{kind} {key} "{attr}") {rendered})')

    def where(self, clause) -> None:
        if binds_axis(clause):
            self.query.append(f"(Axis {self.var(clause.var)})")
        elif isinstance(clause, Membership):
            self.query.append(f'(InFamily {self.var(clause.var)} "{clause.family}")')
        elif isinstance(clause, Relation):
            self.relation(clause)
        elif isinstance(clause, Comparison):
            self.query.append(f"({clause.op} {self.dim(clause.lhs)} {self.dim(clause.rhs)})")
        elif isinstance(clause, Equation):
            self.query.append(f"(= {self.dim(clause.lhs)} {self.dim(clause.rhs)})")

    def alias(self, base: str, dist: str) -> None:
        """`base` is `dist` itself; when `base` is already bound, say that they are equal."""
        if base in self.aliases or base in self.in_query:
            self.query.append(f"(= {dist} {self.var(base)})")
        else:
            self.aliases[base] = dist

    def relation(self, clause: Relation) -> None:
        if clause.inner:  # X ~ x @ L1 @ L2: X ~ v @ L2 with v the term L1(x)
            placed = self.fresh("placed").removeprefix("?")
            outer = replace(clause, base=Var(placed, clause.span), inner=())
            if id(clause) in self.choices:  # a spread's way of meeting it, chosen for clause
                self.choices[id(outer)] = self.choices[id(clause)]
            self.relation(outer)
            term = self.var(clause.base.name)
            for layout in clause.inner:
                term = self.layout_term(term, layout)
            self.query.append(f"(= {self.var(placed)} {term})")
            self.in_query.add(clause.base.name)
            return
        dist = self.var(clause.dist.name)
        layout = clause.layout
        if isinstance(layout, Var):  # replicate
            self.query.append(f"(Base {dist})")
            self.alias(clause.base.name, dist)
        elif layout.name == "invariant":
            self.query.append(f"(Inv {dist} {self.string(layout.args[0])})")
            self.alias(clause.base.name, dist)
        elif layout.name in RESCALED | SHIFTED:
            self.query.append(f"(= {dist} {self.layout_term(self.var(clause.base.name), layout)})")
            shift = layout.args[0 if layout.name == "rescaled" else 2]
            self.in_query.update({clause.base.name, shift.name})
        elif layout.name == "spread_padded" and self.spread_choice(clause) == "padded":
            d, m, n = (self.dim(arg) for arg in layout.args)
            padded = f'(Padded {self.var(clause.base.name)} {d} {m} {n} "any")'
            self.query.append(f"(= {dist} {padded})")
            self.in_query.add(clause.base.name)
        elif layout.name == "spread_repeated" and self.spread_choice(clause) == "repeated":
            d, k, u = (self.dim(arg) for arg in layout.args)
            self.query.append(f"(= {dist} (Repeated {self.var(clause.base.name)} {d} {k} {u}))")
            self.in_query.add(clause.base.name)
        elif layout.name in WHERE_ONLY_SPREADS and self.spread_choice(clause) == "free":
            self.query.append(f"(NewDim {dist} {self.dim(layout.args[0])})")
            self.alias(clause.base.name, dist)
        elif layout.name in AXIS_FREE - WHERE_ONLY_SPREADS:
            term = self.layout_term(self.var(clause.base.name), layout)
            self.query.append(f"(= {dist} {term})")
            self.in_query.add(clause.base.name)
        elif layout.name == "shard" or (
            layout.name == "spread" and self.spread_choice(clause) == "shard"
        ):
            d, a = layout.args
            self.query.append(
                f"(= {dist} (Shard {self.var(clause.base.name)} {self.dim(d)} {self.string(a)}))"
            )
            self.in_query.add(clause.base.name)
        elif layout.name == "spread" and self.spread_choice(clause) == "free":
            d, a = layout.args
            self.query.append(f"(FreeAlong {dist} {self.dim(d)} {self.string(a)})")
            self.alias(clause.base.name, dist)
        elif layout.name in SPREAD_ALTERNATIVES:  # a scalar fill is the same along every dim
            self.query.append(f"(= {dist} (Splat {self.fresh('c')} {self.fresh('dt')}))")
            self.alias(clause.base.name, dist)
        elif layout.name not in LAYOUTS:  # a kind a `layout` declaration names
            term = self.layout_term(self.var(clause.base.name), layout)
            self.query.append(f"(= {dist} {term})")
            self.in_query.add(clause.base.name)
        else:
            op, a = layout.args
            self.query.append(
                f"(= {dist} (Partial {self.var(clause.base.name)} {self.string(op)} "
                f"{self.string(a)}))"
            )
            self.in_query.add(clause.base.name)

    def build(self, value: Value) -> str:
        """An action expression building `value` (baseline side of a rewrite)."""
        if isinstance(value, Var):
            return self.var(value.name)
        if value.name == COORD:
            return f"(Coord {self.string(value.args[0])})"
        if value.name == SPLAT:
            return f"(Splat {self.string(value.args[0])} {self.splat_dtype()})"
        op = self.var(value.name) if value.name in self.info.op_vars else f'"{value.name}"'
        args = " ".join(self.build(arg) for arg in value.args)
        return f"(Op{len(value.args)} {op} {self.key_of_op[value.name]} {args})"

    def splat_dtype(self) -> str:
        for atom in self.query:
            if atom.startswith("(= ") and "(Splat " in atom:
                return atom.rsplit(" ", 1)[1].rstrip(")")
        raise AssertionError("checked rules only rebuild splats they matched")

    def layout_term(self, inner: str, layout: Value) -> str:
        if isinstance(layout, Var):
            return inner
        if layout.name == "shard":
            d, a = layout.args
            return f"(Shard {inner} {self.dim(d)} {self.string(a)})"
        if layout.name == "partial":
            op, a = layout.args
            return f"(Partial {inner} {self.string(op)} {self.string(a)})"
        if layout.name == "padded":
            d, m, n, content = layout.args
            sizes = f"{self.dim(d)} {self.dim(m)} {self.dim(n)}"
            return f"(Padded {inner} {sizes} {self.string(content)})"
        if layout.name == "repeated":
            d, k, u = layout.args
            return f"(Repeated {inner} {self.dim(d)} {self.dim(k)} {self.dim(u)})"
        if layout.name in RESCALED:
            first, a, shift, local, dims = layout.args
            kind = "shard" if layout.name == "rescaled_shard" else "partial"
            placed = self.layout_term(inner, App(kind, (), (first, a), layout.span))
            factor = f"{self.var(shift.name)} {self.var(local.name)} {self.string(dims)}"
            return f"(Rescaled {placed} {factor})"
        if layout.name == "rescaled":
            shift, local, dims = layout.args
            factor = f"{self.var(shift.name)} {self.var(local.name)} {self.string(dims)}"
            return f"(Rescaled {inner} {factor})"
        if layout.name in ("log_partial", "normalised_partial"):
            op, a, base = layout.args[:3]
            placed = self.layout_term(inner, App("partial", (), (op, a), layout.span))
            if layout.name == "log_partial":
                return f"(LogOf {placed} {self.var(base.name)})"
            return f"(Ratio {placed} {self.var(base.name)} {self.string(layout.args[3])})"
        if layout.name not in LAYOUTS:  # declared: (Laid kind term dim axis)
            d, a = layout.args
            return f'(Laid "{layout.name}" {inner} {self.dim(d)} {self.string(a)})'
        raise AssertionError(f"layout {layout.name} is only valid in `where`")


# layouts built over a baseline term and a baseline shift or divisor
SHIFTED = frozenset({"rescaled", "log_partial", "normalised_partial"})

# the ways of meeting each spread-like clause; the first is the real layout, which at least
# one clause of a rule must take
SPREAD_ALTERNATIVES = {
    "spread": ("shard", "free", "splat"),
    "spread_padded": ("padded", "free", "splat"),
    "spread_repeated": ("repeated", "free", "splat"),
}


def _dim_name(clause: Relation) -> str | None:
    dim = clause.layout.args[0]
    return dim.name if isinstance(dim, Var) else None


def lower_rule(info: RuleInfo, ruleset: str = "layout") -> list[EggRule]:
    """Translate one checked rule. A rule with `spread(d, a)` clauses becomes one egglog rule
    per way of meeting them (a real shard, a broadcast constant along d, a scalar fill),
    keeping only the ways where at least one operand is a real shard (that binds d)."""
    rule = info.rule
    spreads = [
        c
        for c in rule.where
        if isinstance(c, Relation)
        and isinstance(c.layout, App)
        and c.layout.name in SPREAD_ALTERNATIVES
    ]
    real = {alternatives[0] for alternatives in SPREAD_ALTERNATIVES.values()}
    # the spreads' dim is bound by another clause's real layout: no spread need be real
    bound = any(
        isinstance(c, Relation)
        and isinstance(c.layout, App)
        and c.layout.name not in SPREAD_ALTERNATIVES
        and c.layout.args
        and isinstance(c.layout.args[0], Var)
        and any(c.layout.args[0].name == _dim_name(s) for s in spreads)
        for c in rule.where
    )
    combos = [
        dict(zip((id(c) for c in spreads), combo, strict=True))
        for combo in itertools.product(*(SPREAD_ALTERNATIVES[c.layout.name] for c in spreads))
        if not spreads or bound or real & set(combo)
    ]
    lowered = []
    for index, choices in enumerate(combos):
        name = rule.name if len(combos) == 1 else f"{rule.name}#{index + 1}"
        lowered.append(_lower_one(info, ruleset, name, choices))
    return lowered


def _lower_one(info: RuleInfo, ruleset: str, name: str, choices: dict[int, str]) -> EggRule:
    rule = info.rule
    low = _Lowering(info, choices=choices)
    low.pattern(rule.match, "?n0")
    for clause in rule.where:
        low.where(clause)
    rewrite = rule.rewrite
    if isinstance(rewrite, Relation):
        target = low.build(rewrite.base)
        for layout in (*rewrite.inner, rewrite.layout):
            target = low.layout_term(target, layout)
    else:
        assert isinstance(rewrite, Equation)
        target = low.build(rewrite.rhs)
    source = f"{rule.span.path}:{rule.span.line}"
    actions = [f"(union ?n0 {target})"]
    unbound = _unbound_variables(low, actions)
    cases = tuple(
        f"`{c.dist.name}` is {_ALTERNATIVE_TEXT[choice]}"
        for c in rule.where
        if (choice := choices.get(id(c))) in _ALTERNATIVE_TEXT
    )
    return EggRule(
        name, rule.doc, source, low.query, actions, ruleset, rule.unfuzzed, unbound, cases
    )


# what a `spread`-like clause's operand is when the clause is met without its real layout
_ALTERNATIVE_TEXT = {
    "free": "a broadcast along a dim it creates",
    "splat": "a scalar fill",
}

# egglog primitives that test values and bind none
_TESTS = frozenset({"<", ">", "<=", ">=", "!="})
_TOKEN = re.compile(r'"[^"]*"|[()]|[^\s()]+')


def _unbound_variables(low: _Lowering, actions: list[str]) -> tuple[Var, ...]:
    """The rule's variables (rewrite first, then `where`) whose egglog variable this
    expansion uses but does not bind: a `spread` met by a fill binds no dim, and a rewrite
    or a comparison that reads such a dim would make egglog refuse the whole program."""
    bound = bound_in_query(low.query)
    used = set(_VARIABLE.findall(" ".join(low.query + actions)))
    rule = low.info.rule
    candidates = [*_vars_in(rule.rewrite), *(v for c in rule.where for v in _vars_in(c))]
    seen: set[str] = set()
    unbound = []
    for var in candidates:
        egg = low.var(var.name)
        if egg in used and egg not in bound and egg not in seen:
            seen.add(egg)
            unbound.append(var)
    return tuple(unbound)


_VARIABLE = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*")


def bound_in_query(query: list[str]) -> set[str]:
    """The egglog variables a query binds: every variable of an atom that reads a table (a
    constructor, function or relation: capitalised in Scalify's prelude), then, to a fixed
    point, `?v` of `(= ?v e)` with `e` a primitive expression over bound variables. A
    comparison binds nothing."""
    atoms = [_sexp(_TOKEN.findall(atom)) for atom in query]
    bound: set[str] = set()
    changed = True
    while changed:
        changed = False
        for atom in atoms:
            for var in _binds(atom, bound) - bound:
                bound.add(var)
                changed = True
    return bound


def _binds(atom, bound: set[str]) -> set[str]:
    if not isinstance(atom, list) or not atom or atom[0] in _TESTS:
        return set()
    if _reads_table(atom):
        return _atom_vars(atom)
    if atom[0] == "=" and len(atom) == 3:
        lhs, rhs = atom[1:]
        for var, other in ((lhs, rhs), (rhs, lhs)):
            if isinstance(var, str) and var.startswith("?") and _atom_vars(other) <= bound:
                return {var}
    return set()


def _reads_table(expr) -> bool:
    if not isinstance(expr, list):
        return False
    head = expr[0] if expr else ""
    return (isinstance(head, str) and head[:1].isupper()) or any(map(_reads_table, expr[1:]))


def _atom_vars(expr) -> set[str]:
    if isinstance(expr, list):
        return set().union(*map(_atom_vars, expr)) if expr else set()
    return {expr} if expr.startswith("?") else set()


def _sexp(tokens: list[str]):
    """A parsed s-expression (nested lists of tokens) from its tokens."""
    stack: list[list] = [[]]
    for token in tokens:
        if token == "(":
            stack.append([])
        elif token == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token)
    return stack[0][0] if stack[0] else []


def _vars_in(node) -> list[Var]:
    """The variables written in a clause or value, in source order (constants and
    `replicate` excluded)."""
    return [
        leaf
        for leaf in leaves(node)
        if isinstance(leaf, Var) and leaf.name not in CONSTANT_NAMES and leaf.name != "replicate"
    ]


def rule_name(egg_rule_name: str) -> str:
    """The `.srl` rule an egglog rule came from (expansions are named `rule#k`)."""
    return egg_rule_name.split("#", 1)[0]
