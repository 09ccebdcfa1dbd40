"""Checks and renders canonical rules (`canon` in `.srl`), the directed rewrites that
`scalify/canon/rewriter.py` runs before saturation.

What a canonical rule may say is narrower than an equality rule, because it replaces a node
instead of adding a fact beside it:
- the match is one op pattern; its operands are variables (bound to values) or nested op
  patterns, and its attributes variables (bound to the attribute's value) or literals; an op
  variable (`f(x, y)` with `where f in FAMILY`) matches any op of a declared family;
- `where` holds guards over bound attributes: declared predicates, comparisons, equations
  (and the op variables' families);
- the rewrite is a value the match bound, or a tree of ops (of known arity) over bound
  values: its top op takes the node's place, the ops nested under it are ones whose shape
  the rewriter can infer (`scalify/canon/shapes.py`); attributes are literals, bound
  attributes or declared functions of them;
- every variable the rewrite or a guard reads is bound by the match, a value variable is not
  read as an attribute nor the other way round, and a function gets the kind of argument
  it declares.
Errors point at the file, line and column, as the other compiler errors do.
"""

from __future__ import annotations

from dataclasses import replace

from scalify.canon.functions import FUNCTIONS
from scalify.canon.shapes import BUILT

from .ast import (
    App,
    CanonRule,
    Comparison,
    Equation,
    IntLit,
    Membership,
    RuleFile,
    StrLit,
    Value,
    Var,
)
from .check import error_at
from .signatures import OP_ARITY

# literal ops a rewrite may build (a canonical rule replaces a value it proves constant)
LITERALS = {"constant": (0,)}


class CanonChecker:
    """Checks the canonical rules of one file."""

    def __init__(self, rule_file: RuleFile, families: dict[str, tuple[str, ...]]) -> None:
        self.file = rule_file
        self.families = families
        self.ops: dict[str, tuple[str, ...]] = {}  # the rule's op variables

    def fail(self, node, message: str, *notes: str):
        return error_at(node.span, self.file.text, message, *notes)

    def check(self, rule: CanonRule) -> CanonRule:
        """The rule checked, its op variables resolved to their families' ops."""
        if not rule.doc:
            raise self.fail(rule, f"canonical rule `{rule.name}` has no `#` line stating it")
        if not isinstance(rule.match, App):
            raise self.fail(rule, "a canonical rule matches an op pattern, e.g. `transpose(x)`")
        self.ops = {}
        self.root = rule.match
        for clause in rule.where:
            if isinstance(clause, Membership):
                members = self.families.get(clause.family)
                if members is None:
                    raise self.fail(clause, f"unknown family `{clause.family}`")
                self.ops[clause.var] = members
        values: dict[str, Var] = {}
        attrs: dict[str, Var] = {}
        self._pattern(rule.match, values, attrs)
        for clause in rule.where:
            if not isinstance(clause, Membership):
                self._guard(clause, values, attrs)
        self._rewrite(rule.rewrite, values, attrs)
        return replace(rule, ops=tuple(self.ops.items()))

    def _pattern(self, app: App, values: dict[str, Var], attrs: dict[str, Var]) -> None:
        self._op(app)
        for _, value in app.attrs:
            if isinstance(value, Var):
                if value.name in values:
                    raise self.fail(value, f"`{value.name}` is a value here and an attribute")
                attrs.setdefault(value.name, value)
            elif not isinstance(value, IntLit | StrLit):
                raise self.fail(value, "a matched attribute is a variable or a literal")
        for arg in app.args:
            if isinstance(arg, Var):
                if arg.name in attrs:
                    raise self.fail(arg, f"`{arg.name}` is an attribute here and a value")
                values.setdefault(arg.name, arg)
            elif isinstance(arg, App):
                self._pattern(arg, values, attrs)
            else:
                raise self.fail(arg, "an operand of a matched op is a variable or an op pattern")

    def _op(self, app: App) -> None:
        if app.name in self.ops:  # an op variable: an arity of some op of its family
            arities = {n for op in self.ops[app.name] for n in OP_ARITY.get(op, ())}
        else:
            arities = LITERALS.get(app.name) or OP_ARITY.get(app.name)
        if arities is None:
            raise self.fail(app, f"unknown op `{app.name}`")
        if len(app.args) not in arities:
            wanted = " or ".join(map(str, sorted(arities)))
            raise self.fail(app, f"`{app.name}` takes {wanted} operand(s), not {len(app.args)}")

    def _guard(self, clause, values: dict[str, Var], attrs: dict[str, Var]) -> None:
        if isinstance(clause, App):
            self._function(clause, values, attrs, predicate=True)
        elif isinstance(clause, Comparison | Equation):
            for side in (clause.lhs, clause.rhs):
                self._attribute(side, values, attrs)
        else:
            raise self.fail(
                clause, "a canonical rule's guard is a predicate, a comparison or an equation"
            )

    def _attribute(self, value: Value, values: dict[str, Var], attrs: dict[str, Var]) -> None:
        """An attribute expression: a bound attribute, a literal or a function of them."""
        if isinstance(value, Var):
            if value.name not in attrs:
                raise self.fail(
                    value,
                    f"`{value.name}` is not an attribute the match binds",
                    "bind it in the pattern, e.g. `transpose[perm=p](x)`",
                )
        elif isinstance(value, App):
            self._function(value, values, attrs, predicate=False)
        elif not isinstance(value, IntLit | StrLit):
            raise self.fail(value, "not an attribute expression")

    def _function(
        self, app: App, values: dict[str, Var], attrs: dict[str, Var], predicate: bool
    ) -> None:
        declared = FUNCTIONS.get(app.name)
        if declared is None or declared.predicate != predicate:
            kind = "predicate" if predicate else "function"
            known = sorted(n for n, f in FUNCTIONS.items() if f.predicate == predicate)
            raise self.fail(
                app, f"unknown {kind} `{app.name}`", f"declared: {', '.join(known) or 'none'}"
            )
        if len(app.args) != declared.arity or app.attrs:
            raise self.fail(app, f"`{app.name}` takes {declared.arity} argument(s)")
        matched = set(self.ops.get(self.root.name, (self.root.name,)))
        if declared.roots and not matched <= declared.roots:
            wanted = " or ".join(f"`{op}`" for op in sorted(declared.roots))
            raise self.fail(
                app,
                f"`{app.name}` reads the matched node as a {wanted}; this rule matches "
                f"`{self.root.name}`",
            )
        for kind, arg in zip(declared.args, app.args, strict=True):
            if kind == "a":
                self._attribute(arg, values, attrs)
            elif not isinstance(arg, Var) or arg.name not in values:
                raise self.fail(
                    arg, f"`{app.name}` takes a value the match binds, not an attribute"
                )

    def _rewrite(self, value: Value, values: dict[str, Var], attrs: dict[str, Var]) -> None:
        if isinstance(value, Var):
            if value.name not in values:
                raise self.fail(value, f"`{value.name}` is not a value the match binds")
            return
        if not isinstance(value, App):
            raise self.fail(value, "a canonical rule rewrites to a matched value or an op")
        self._built(value, values, attrs)

    def _built(self, app: App, values: dict[str, Var], attrs: dict[str, Var]) -> None:
        """An op of the rewrite (its top op, or one nested under it), and its operands."""
        if app.name in self.ops:
            raise self.fail(
                app,
                f"the rewrite cannot build the op variable `{app.name}`",
                "name the op it builds: one rule per op of the family",
            )
        self._op(app)
        if app.name == "constant" and [k for k, _ in app.attrs] != ["value"]:
            raise self.fail(app, "a `constant` the rewrite builds is `constant[value=...]()`")
        for arg in app.args:
            if isinstance(arg, Var):
                if arg.name not in values:
                    raise self.fail(arg, f"`{arg.name}` is not a value the match binds")
            elif isinstance(arg, App):
                if arg.name not in BUILT:
                    raise self.fail(
                        arg,
                        f"`{arg.name}` cannot be built inside a rewrite: its shape is not "
                        "inferred from its operands",
                        "nest an op of scalify/canon/shapes.py (`BUILT`), or make this op "
                        "the rewrite's top op",
                    )
                self._built(arg, values, attrs)
            else:
                raise self.fail(arg, "an operand of the rewrite is a matched value or an op")
        for _, attr in app.attrs:
            self._attribute(attr, values, attrs)


def check_canon_rules(files: list[RuleFile], taken: set[str]) -> list[CanonRule]:
    """Check every canonical rule; names are unique among all rules (`taken`). Returns the
    rules with their op variables resolved (families are visible in every file)."""
    families = {f.name: f.members for p in files for f in p.families}
    rules: list[CanonRule] = []
    for rule_file in files:
        checker = CanonChecker(rule_file, families)
        for rule in rule_file.canon_rules:
            if rule.name in taken:
                raise checker.fail(rule, f"duplicate rule name `{rule.name}`")
            taken.add(rule.name)
            rules.append(checker.check(rule))
    return rules


def render(value) -> str:
    """A pattern, guard or rewrite as `.srl` text, variables marked `?` as egglog marks them."""
    if isinstance(value, Var):
        return f"?{value.name}"
    if isinstance(value, IntLit):
        return str(value.value)
    if isinstance(value, StrLit):
        return f'"{value.value}"'
    if isinstance(value, Comparison):
        return f"{render(value.lhs)} {value.op} {render(value.rhs)}"
    if isinstance(value, Equation):
        return f"{render(value.lhs)} == {render(value.rhs)}"
    if isinstance(value, Membership):
        return f"{value.var} in {value.family}"
    attrs = ", ".join(f"{k}={render(v)}" for k, v in value.attrs)
    args = ", ".join(render(a) for a in value.args)
    return f"{value.name}{f'[{attrs}]' if attrs else ''}({args})"


def canon_text(rule_file: RuleFile) -> str:
    """A file's canonical rules as comments of its golden egglog text (they run in Python
    before the e-graph, so egglog never sees them; the golden still shows each change)."""
    lines = []
    for rule in rule_file.canon_rules:
        guards = "".join(f" if {render(g)}" for g in rule.where)
        lines.append(f";; {rule.doc}")
        lines.append(
            f";; canon {rule.name}: {render(rule.match)}{guards} => {render(rule.rewrite)}"
        )
    return "".join(line + "\n" for line in lines)
