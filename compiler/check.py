"""Semantic checks of a parsed rule set: every name resolves, every clause is where it belongs.

Checks give each variable a role (distributed term, baseline term, op, dim, axis), so that
lowering can be a plain translation. All problems are ScalifyErrors pointing at a span.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalify.errors import ScalifyError, line_of
from scalify.frontends.custom_calls import EXPRESSION_OPS, MEANINGS, REFERENCES, CustomCall, Term

from .ast import (
    App,
    Comparison,
    CustomCallDecl,
    DecimalLit,
    Equation,
    Family,
    IntLit,
    Membership,
    Relation,
    Rule,
    RuleFile,
    Span,
    StrLit,
    Value,
    Var,
    leaves,
)
from .signatures import (
    ARITH_FUNCTIONS,
    AXIS_FREE,
    CONSTANT_NAMES,
    COORD,
    DIM_FUNCTIONS,
    DIM_MAPPED,
    LAYOUTS,
    OP_ARITY,
    PARTIAL_LIKE,
    RESCALED,
    SIZE,
    SPLAT,
    VALUE_FUNCTIONS,
    VALUE_LAYOUTS,
    WHERE_ONLY_SPREADS,
    attr_kinds,
    binds_axis,
)

DIST, BASE, OP, DIM, AXIS, SCALAR, STR = "dist", "base", "op", "dim", "axis", "scalar", "str"
# Patterns that are not ops: a scalar fill `splat(c)`, a device coordinate `coord(a)`.
SPECIAL = {SPLAT: SCALAR, COORD: AXIS}


@dataclass
class RuleInfo:
    """What checking learned about one rule: the role of each variable."""

    rule: Rule
    roles: dict[str, str] = field(default_factory=dict)
    op_vars: dict[str, str] = field(default_factory=dict)  # op variable -> family


def error_at(span: Span, text: str, message: str, *notes: str) -> ScalifyError:
    return ScalifyError(
        message, span.path, span.line, span.column, line_of(text, span.line), list(notes)
    )


class RuleChecker:
    """Checks one file against the families known across the whole rule set."""

    def __init__(
        self,
        rule_file: RuleFile,
        families: dict[str, Family],
        layouts: frozenset[str] = frozenset(),
    ) -> None:
        self.file = rule_file
        self.families = families
        self.layouts = layouts  # the layout kinds the rule set declares, each (dim, axis)

    def fail(self, span: Span, message: str, *notes: str) -> ScalifyError:
        return error_at(span, self.file.text, message, *notes)

    def check_rule(self, rule: Rule) -> RuleInfo:
        info = RuleInfo(rule)
        for clause in (rule.match, *rule.where, rule.rewrite):
            for decimal in _decimals_in(clause):
                raise self.fail(
                    decimal.span,
                    "a number with a point is a literal of a custom-call expression, not of a rule",
                    "a rule compares literals as text: `splat(c)` with `litint(c) == 2`",
                )
        if not isinstance(rule.match, App):
            raise self.fail(
                _span(rule.match),
                "`match` takes one op pattern such as `dot(X, W)`",
                "layout clauses (`X ~ x @ ...`) belong in `where`",
            )
        for clause in rule.where:
            if binds_axis(clause):
                self._bind(Var(clause.var, clause.span), AXIS, info)
            elif isinstance(clause, Membership):
                info.op_vars[clause.var] = self._family(clause)
        self._bind_pattern(rule.match, info, top=True)
        for clause in rule.where:
            self._check_where(clause, info)
        self._check_rewrite(rule, info)
        return info

    def _family(self, clause: Membership) -> str:
        if clause.family not in self.families:
            known = ", ".join(sorted(self.families)) or "none"
            raise self.fail(
                clause.span, f"unknown op family `{clause.family}`", f"families: {known}"
            )
        return clause.family

    def _op_name(self, app: App, info: RuleInfo) -> str:
        if app.name in info.op_vars or app.name in OP_ARITY or app.name in SPECIAL:
            return app.name
        raise self.fail(
            app.span,
            f"unknown op `{app.name}`",
            "declare an op variable with `where f in FAMILY`, or use a canonical op "
            "(declared in scalify/ops/)",
        )

    def _check_arity(self, app: App, info: RuleInfo) -> None:
        name = self._op_name(app, info)
        if name in SPECIAL:
            if len(app.args) != 1 or not isinstance(app.args[0], Var):
                raise self.fail(app.span, f"`{name}` takes one {SPECIAL[name]} variable")
            return
        if name in info.op_vars:
            members = self.families[info.op_vars[name]].members
            arities = {a for m in members for a in OP_ARITY.get(m, ())}
        else:
            arities = set(OP_ARITY[name])
        if len(app.args) not in arities:
            raise self.fail(
                app.span,
                f"`{app.name}` takes {_arity_text(arities)} operands, found {len(app.args)}",
            )
        allowed = attr_kinds(name)
        for attr, _ in app.attrs:
            if attr not in allowed:
                raise self.fail(
                    app.span,
                    f"`{app.name}` has no attribute `{attr}`",
                    f"attributes: {', '.join(allowed) or 'none'}",
                )

    def _bind_pattern(self, app: App, info: RuleInfo, top: bool) -> None:
        self._check_arity(app, info)
        if app.name in SPECIAL:
            self._bind(app.args[0], SPECIAL[app.name], info)
            return
        for attr, value in app.attrs:
            kind = attr_kinds(app.name)[attr]
            self._bind(value, DIM if kind == "I" else AXIS if attr == "axes" else STR, info)
        for arg in app.args:
            if isinstance(arg, App):
                self._bind_pattern(arg, info, top=False)
            elif isinstance(arg, Var):
                self._bind(arg, DIST, info)
            else:
                raise self.fail(_span(arg), "an operand pattern is a variable or an op")

    def _bind(self, value: Value, role: str, info: RuleInfo) -> None:
        if isinstance(value, Var) and value.name not in CONSTANT_NAMES:
            previous = info.roles.setdefault(value.name, role)
            if previous != role:
                raise self.fail(
                    value.span,
                    f"`{value.name}` is used as {_article(role)} here but as "
                    f"{_article(previous)} before",
                )

    def _check_where(self, clause, info: RuleInfo) -> None:
        if binds_axis(clause):
            return
        if isinstance(clause, Membership):
            if clause.var not in info.roles and clause.var not in _ops_in(info.rule.match):
                raise self.fail(clause.span, f"op variable `{clause.var}` is not in the match")
            return
        if isinstance(clause, Relation):
            if not isinstance(clause.dist, Var) or info.roles.get(clause.dist.name) != DIST:
                raise self.fail(
                    _span(clause.dist), "the left of `~` must be an operand variable of the match"
                )
            if not isinstance(clause.base, Var):
                raise self.fail(
                    _span(clause.base),
                    "the middle of `X ~ x @ layout` must be a new baseline variable",
                )
            self._bind(clause.base, BASE, info)
            self._check_chain(clause.inner, info, binding=True)
            self._check_layout(clause.layout, info, binding=True)
            return
        if isinstance(clause, Comparison | Equation):
            for side in (clause.lhs, clause.rhs):
                self._check_dim_expr(side, info)
            return
        raise self.fail(
            _span(clause), "a `where` clause is `X ~ x @ layout`, `f in family` or a comparison"
        )

    def _check_layout(self, layout: Value, info: RuleInfo, binding: bool) -> None:
        if isinstance(layout, Var) and layout.name == "replicate":
            return
        if isinstance(layout, App) and layout.name in self.layouts:
            if len(layout.args) != 2:
                raise self.fail(layout.span, f"`{layout.name}` takes 2 arguments: (dim, axis)")
            self._dim_arg(layout.args[0], info, binding)
            if binding:
                self._bind(layout.args[1], AXIS, info)
            else:
                self._require_bound(layout.args[1], info, AXIS)
            return
        if not isinstance(layout, App) or layout.name not in LAYOUTS:
            declared = "".join(f", {name}(dim, a)" for name in sorted(self.layouts))
            raise self.fail(
                _span(layout),
                "expected a layout: replicate, invariant(a), spread(dim, a), shard(dim, a), "
                "partial(op, a), padded(dim, m, n, zero|any|lowest), repeated(dim, k, u)"
                f"{declared} or a kind a `layout` declaration names",
            )
        if len(layout.args) != LAYOUTS[layout.name]:
            raise self.fail(layout.span, f"`{layout.name}` takes {LAYOUTS[layout.name]} arguments")
        args = layout.args
        if layout.name == "invariant" and not binding:
            raise self.fail(
                layout.span,
                "`invariant` only constrains operands in `where`; a "
                "rewrite states replicate, shard(d, a) or partial(op, a)",
            )
        if layout.name == "spread" and not binding:
            raise self.fail(
                layout.span,
                "`spread` only constrains operands in `where`; a rewrite states `shard(d, a)`",
            )
        if layout.name in WHERE_ONLY_SPREADS and not binding:
            raise self.fail(
                layout.span,
                f"`{layout.name}` only constrains operands in `where`; a rewrite states "
                "`padded(d, m, n, any)` or `repeated(d, k, u)`",
            )
        if layout.name in AXIS_FREE:
            for arg in args[:3] if layout.name == "padded" else args:
                self._dim_arg(arg, info, binding)
            if layout.name == "padded":
                self._content_arg(args[3], info, binding)
            return
        if layout.name in ("shard", "spread", "rescaled_shard"):
            self._dim_arg(args[0], info, binding)
        if layout.name in PARTIAL_LIKE:
            self._string_arg(args[0], info, binding)
        if layout.name in RESCALED:
            self._rescale_args(args[2:], info, binding)
        if layout.name == "rescaled":
            self._rescale_args(args, info, binding)
            return
        if layout.name in ("log_partial", "normalised_partial"):
            self._base_arg(args[2], info, binding)
        if layout.name == "normalised_partial":
            self._string_arg(args[3], info, binding)
        if layout.name != "replicate":
            axis = args[1] if layout.name in RESCALED | PARTIAL_LIKE else args[-1]
            if binding:
                self._bind(axis, AXIS, info)
            else:
                self._require_bound(axis, info, AXIS)

    def _check_chain(self, inner: tuple[Value, ...], info: RuleInfo, binding: bool) -> None:
        """The layouts before the last of a chain `x @ L1 @ L2`: values of the baseline side
        (a padded or repeated one) that the last layout places."""
        for layout in inner:
            if not isinstance(layout, App) or layout.name not in VALUE_LAYOUTS:
                raise self.fail(
                    _span(layout),
                    "a layout before the last of a chain is `padded(d, m, n, zero|any|lowest)` "
                    "or `repeated(d, k, u)`: a value the last layout places",
                )
            self._check_layout(layout, info, binding)

    def _base_arg(self, value: Value, info: RuleInfo, binding: bool) -> None:
        """A baseline variable inside a layout (the shift g, the divisor y)."""
        if not isinstance(value, Var):
            raise self.fail(_span(value), "expected a baseline variable")
        if binding:
            self._bind(value, BASE, info)
        else:
            self._require_bound(value, info, BASE)

    def _rescale_args(self, args: list[Value], info: RuleInfo, binding: bool) -> None:
        """`g, f, dims` of a rescaled layout: a baseline variable, a distributed one (the
        per-device shift), and the dims string."""
        shift, local, dims = args
        for value, role in ((shift, BASE), (local, DIST)):
            if not isinstance(value, Var):
                raise self.fail(_span(value), f"expected {_article(role)} variable")
            if binding:
                self._bind(value, role, info)
            else:
                self._require_bound(value, info, role)
        self._string_arg(dims, info, binding)

    def _dim_arg(self, value: Value, info: RuleInfo, binding: bool) -> None:
        if binding and isinstance(value, Var):
            self._bind(value, DIM, info)
        else:
            self._check_dim_expr(value, info)

    def _content_arg(self, value: Value, info: RuleInfo, binding: bool) -> None:
        """What a padding holds: `zero`, `any`, `lowest`, or a variable bound to one."""
        if isinstance(value, Var) and value.name in CONSTANT_NAMES - {"zero", "any", "lowest"}:
            raise self.fail(value.span, "a padding holds `zero`, `any` or `lowest`")
        if isinstance(value, App | IntLit | StrLit):
            raise self.fail(_span(value), "a padding holds `zero`, `any` or `lowest`")
        self._string_arg(value, info, binding)

    def _string_arg(self, value: Value, info: RuleInfo, binding: bool) -> None:
        if isinstance(value, Var) and value.name not in CONSTANT_NAMES:
            if binding:
                self._bind(value, STR, info)
            else:
                self._require_bound(value, info, STR)

    def _check_dim_expr(self, value: Value, info: RuleInfo) -> None:
        if isinstance(value, IntLit | StrLit):
            return
        if isinstance(value, Var):
            self._require_bound(value, info, DIM)
            return
        if isinstance(value, App) and value.name in VALUE_FUNCTIONS:
            _, role = VALUE_FUNCTIONS[value.name]
            if len(value.args) != 1 or not isinstance(value.args[0], Var):
                raise self.fail(value.span, f"`{value.name}` takes one {role} variable")
            self._require_bound(value.args[0], info, role)
            return
        if isinstance(value, App) and value.name in ARITH_FUNCTIONS:
            if len(value.args) != 2:
                raise self.fail(value.span, f"`{value.name}` takes two dim expressions")
            for arg in value.args:
                self._check_dim_expr(arg, info)
            return
        if isinstance(value, App) and value.name == SIZE:
            if len(value.args) != 2 or not isinstance(value.args[0], Var):
                raise self.fail(value.span, "`size` takes (operand variable, dim)")
            self._require_bound(value.args[0], info, DIST)
            self._check_dim_expr(value.args[1], info)
            return
        if isinstance(value, App) and value.name in DIM_FUNCTIONS:
            args = value.args
            target = info.rule.match
            if len(args) == 3:
                target = self._matched_op(args[0], info)
                args = args[1:]
            if len(args) != 2:
                raise self.fail(value.span, f"`{value.name}` takes ([op,] operand, dim)")
            self._check_dim_mapped(value, target, info)
            operand = args[0]
            arity = len(target.args)
            if not isinstance(operand, IntLit) or not 0 <= operand.value < arity:
                raise self.fail(
                    _span(operand),
                    f"`{value.name}` needs an operand index 0..{arity - 1} of `{target.name}`",
                )
            self._check_dim_expr(args[1], info)
            return
        raise self.fail(
            _span(value),
            "expected a dim expression: an integer, a bound variable or outdim(operand, dim)",
        )

    def _check_dim_mapped(self, call: App, target: App, info: RuleInfo) -> None:
        """`outdim`/`indim` read the op's dim map: an op the registry gives none would leave
        the rule silently never matching."""
        if target.name in info.op_vars:
            family = info.op_vars[target.name]
            unmapped = [m for m in self.families[family].members if m not in DIM_MAPPED]
            needs = f"a dim map for every op of family `{family}`"
        else:
            unmapped = [target.name] if target.name not in DIM_MAPPED else []
            needs = f"the dim map of `{target.name}`"
        if unmapped:
            raise self.fail(
                call.span,
                f"`{call.name}` needs {needs}; the op registry declares none for "
                + ", ".join(f"`{m}`" for m in unmapped),
                "declare a `dim_map` in the op's OpSpec (scalify/ops/)",
            )

    def _require_bound(self, value: Value, info: RuleInfo, role: str | None = None) -> None:
        if not isinstance(value, Var) or value.name in CONSTANT_NAMES:
            return
        if value.name not in info.roles:
            raise self.fail(
                value.span,
                f"unbound variable `{value.name}`",
                "bind it in `match` or in a `where` layout clause",
            )
        if role is not None and info.roles[value.name] != role:
            raise self.fail(
                value.span,
                f"`{value.name}` is {_article(info.roles[value.name])} here, where "
                f"{_article(role)} is expected",
            )

    def _check_rewrite(self, rule: Rule, info: RuleInfo) -> None:
        clause = rule.rewrite
        if isinstance(clause, Relation):
            if clause.dist != rule.match and not _same_term(clause.dist, rule.match):
                raise self.fail(
                    _span(clause.dist), "the left of the rewrite must repeat the matched term"
                )
            self._check_base_term(clause.base, info)
            self._check_chain(clause.inner, info, binding=False)
            self._check_layout(clause.layout, info, binding=False)
            return
        if isinstance(clause, Equation):
            if not _same_term(clause.lhs, rule.match):
                raise self.fail(_span(clause.lhs), "the left of `==` must repeat the matched term")
            self._check_base_term(clause.rhs, info, allow_dist=True)
            return
        raise self.fail(
            _span(clause),
            "a rewrite is `TERM ~ term @ layout` or `TERM == term`",
            "layout clauses (`X ~ x @ ...`) that constrain operands belong in `where`",
        )

    def _check_base_term(self, value: Value, info: RuleInfo, allow_dist: bool = False) -> None:
        if isinstance(value, Var):
            role = info.roles.get(value.name)
            if role is None:
                raise self.fail(
                    value.span,
                    f"unbound variable `{value.name}` in the rewrite",
                    "every variable of the rewrite must be bound by `match` or a "
                    "`where` layout clause",
                )
            if role == DIST and not allow_dist:
                raise self.fail(
                    value.span,
                    f"`{value.name}` is a distributed term; the "
                    "rewrite builds the baseline side from baseline variables",
                )
            return
        if isinstance(value, App):
            self._check_arity(value, info)
            if value.name not in SPECIAL and value.name not in _ops_in(info.rule.match):
                raise self.fail(
                    value.span,
                    f"`{value.name}` does not occur in the match",
                    "the rewrite rebuilds matched ops (with their attributes) on baseline operands",
                )
            if value.name not in SPECIAL:
                self._check_rebuilt_attrs(value, info)
            for arg in value.args:
                if value.name in SPECIAL:
                    self._require_bound(arg, info)
                else:
                    self._check_base_term(arg, info, allow_dist)
            return
        raise self.fail(_span(value), "expected a term")

    def _check_rebuilt_attrs(self, app: App, info: RuleInfo) -> None:
        """A rebuilt op takes the matched op's signature key whole, so an attribute written
        on it only documents that key: it must be bound, and say what the match says (an
        attribute the match leaves open, such as `reduce[op=sum]` over a matched `reduce`,
        would state an identity for ops the rule also matches with another value)."""
        matched = next(a for a in _apps_in(info.rule.match) if a.name == app.name)
        said = dict(matched.attrs)
        for name, value in app.attrs:
            if isinstance(value, Var) and value.name not in CONSTANT_NAMES:
                if value.name not in info.roles:
                    raise self.fail(
                        value.span,
                        f"unbound variable `{value.name}` in the rewrite",
                        "every variable of the rewrite must be bound by `match` or a "
                        "`where` layout clause",
                    )
            if name not in said or not _same_term(said[name], value):
                raise self.fail(
                    _span(value),
                    f"the rebuilt `{app.name}` takes the matched op's attributes, and the "
                    f"match does not fix `{name}={_text(value)}`",
                    f"write `{name}=...` on the matched `{app.name}`, or leave it off the rewrite",
                )

    def _matched_op(self, value: Value, info: RuleInfo) -> App:
        apps = [
            a for a in _apps_in(info.rule.match) if isinstance(value, Var) and a.name == value.name
        ]
        if len(apps) != 1:
            raise self.fail(
                _span(value), "the first argument of a dim function names one op of the match"
            )
        return apps[0]


def check_custom_calls(files: list[RuleFile]) -> dict[str, CustomCall]:
    """Each `custom_call` declaration names a known meaning with one operand position per
    argument it takes, or is an expression over its named operands; each target is declared
    once across the rule set."""
    declared: dict[str, CustomCall] = {}
    for rule_file in files:
        text = rule_file.text
        for decl in rule_file.custom_calls:
            meaning = decl.meaning
            where = f"{decl.span.path}:{decl.span.line}"

            def fail(span: Span, message: str, *notes: str, text: str = text) -> ScalifyError:
                return error_at(span, text, message, *notes)

            if decl.target in declared:
                raise fail(
                    decl.span,
                    f"custom call `{decl.target}` is declared twice",
                    f"first declared at {declared[decl.target].where}",
                )
            if decl.params is not None:
                declared[decl.target] = ExpressionChecker(decl, fail).declaration(where)
                continue
            if decl.reference is not None:
                raise fail(
                    decl.reference.span,
                    "a reference checks an expression; a fixed meaning is checked by its tests",
                )
            if not isinstance(meaning, App):
                raise fail(
                    _span(meaning),
                    "a meaning is a fixed one over operand positions (`operand(0)`), or an "
                    "expression over named operands",
                    f'name the operands to write an expression: custom_call "{decl.target}"'
                    "(x) = ...",
                )
            if meaning.name not in MEANINGS:
                known = ", ".join(f"{n}({', '.join(m.operands)})" for n, m in MEANINGS.items())
                raise fail(
                    meaning.span,
                    f"unknown custom-call meaning `{meaning.name}`",
                    f"expected one of: {known}",
                    f'or name the operands to write an expression: custom_call "{decl.target}"'
                    f"(x) = {meaning.name}(...)",
                )
            wanted = MEANINGS[meaning.name].operands
            allowed = dict(MEANINGS[meaning.name].attrs)
            for name, value in meaning.attrs:
                if name not in allowed:
                    takes = ", ".join(allowed) or "no attributes"
                    raise fail(
                        meaning.span,
                        f"`{meaning.name}` has no attribute `{name}`",
                        f"it takes: {takes}",
                    )
                if not isinstance(value, IntLit):
                    raise fail(
                        getattr(value, "span", meaning.span),
                        f"`{meaning.name}`'s attribute `{name}` is an integer",
                    )
            if len(meaning.args) != len(wanted):
                raise fail(
                    meaning.span,
                    f"`{meaning.name}` takes {len(wanted)} operand position(s) "
                    f"({', '.join(wanted)}), not {len(meaning.args)}",
                )
            for arg in meaning.args:
                if not isinstance(arg, IntLit) or arg.value < 0:
                    raise fail(
                        getattr(arg, "span", meaning.span),
                        f"`{meaning.name}`'s arguments are operand positions of the call "
                        "(0, 1, ...)",
                    )
            positions = tuple(arg.value for arg in meaning.args)
            attrs = tuple((name, value.value) for name, value in meaning.attrs)
            declared[decl.target] = CustomCall(decl.target, meaning.name, positions, where, attrs)
    return declared


class ExpressionChecker:
    """Checks `custom_call "T"(x, y) = EXPR [reference NAME]`: the operands are distinct
    names, EXPR is built from them, numbers and the elementwise ops an expression may use
    (EXPRESSION_OPS in scalify/frontends/custom_calls.py), and the reference is a known
    function of as many operands."""

    def __init__(self, decl: CustomCallDecl, fail) -> None:
        self.decl = decl
        self.fail = fail
        self.names: tuple[str, ...] = ()

    def declaration(self, where: str) -> CustomCall:
        params = self.decl.params or ()
        for index, param in enumerate(params):
            if param.name in (p.name for p in params[:index]):
                raise self.fail(param.span, f"operand `{param.name}` is named twice")
        self.names = tuple(p.name for p in params)
        term = self.term(self.decl.meaning)
        reference = self.reference()
        positions = tuple(range(len(params)))
        return CustomCall(
            self.decl.target,
            "expression",
            positions,
            where,
            expression=term,
            names=self.names,
            reference=reference,
        )

    def term(self, value: Value) -> Term:
        if isinstance(value, Var):
            if value.name not in self.names:
                raise self.fail(
                    value.span,
                    f"`{value.name}` is not an operand of the call",
                    f"its operands: {', '.join(self.names)}",
                )
            return Term(position=self.names.index(value.name))
        if isinstance(value, IntLit):
            return Term(literal=str(value.value))
        if isinstance(value, DecimalLit):
            return Term(literal=value.text)
        if isinstance(value, StrLit):
            raise self.fail(value.span, "an expression's literals are numbers")
        if value.name not in EXPRESSION_OPS:
            raise self.fail(
                value.span,
                f"`{value.name}` is not an op a custom-call expression may use",
                f"elementwise ops without attributes: {', '.join(EXPRESSION_OPS)}",
            )
        arity = EXPRESSION_OPS[value.name]
        if value.attrs:
            raise self.fail(value.span, f"`{value.name}` takes no attributes in an expression")
        if len(value.args) != arity:
            raise self.fail(
                value.span, f"`{value.name}` takes {arity} operand(s), not {len(value.args)}"
            )
        return Term(value.name, tuple(self.term(arg) for arg in value.args))

    def reference(self) -> str:
        ref = self.decl.reference
        if ref is None:
            return ""
        if ref.name not in REFERENCES:
            raise self.fail(
                ref.span,
                f"unknown reference `{ref.name}`",
                f"references: {', '.join(f'{n}/{a}' for n, (a, _) in REFERENCES.items())}",
            )
        arity = REFERENCES[ref.name][0]
        if arity != len(self.names):
            raise self.fail(
                ref.span,
                f"reference `{ref.name}` takes {arity} operand(s); the call names "
                f"{len(self.names)}",
            )
        return ref.name


def _decimals_in(node) -> list[DecimalLit]:
    """The decimal literals written anywhere in a clause."""
    return [leaf for leaf in leaves(node) if isinstance(leaf, DecimalLit)]


def check_rule_set(
    files: list[RuleFile], layouts: frozenset[str] = frozenset()
) -> dict[str, list[RuleInfo]]:
    """Check every file; families and declared layout kinds are shared across files.
    Returns infos per file path."""
    families: dict[str, Family] = {}
    for rule_file in files:
        for family in rule_file.families:
            if family.name in families:
                raise error_at(
                    family.span, rule_file.text, f"family `{family.name}` is declared twice"
                )
            for member in family.members:
                if member not in OP_ARITY:
                    raise error_at(
                        family.span,
                        rule_file.text,
                        f"family `{family.name}` names unknown op `{member}`",
                    )
            families[family.name] = family
    seen: dict[str, Rule] = {}
    result: dict[str, list[RuleInfo]] = {}
    for rule_file in files:
        checker = RuleChecker(rule_file, families, layouts)
        infos = []
        for rule in rule_file.rules:
            if rule.name in seen:
                other = seen[rule.name].span
                raise error_at(
                    rule.span,
                    rule_file.text,
                    f"duplicate rule name `{rule.name}`",
                    f"first defined at {other.path}:{other.line}",
                )
            seen[rule.name] = rule
            infos.append(checker.check_rule(rule))
        result[rule_file.path] = infos
    return result


def _apps_in(app: Value) -> list[App]:
    if not isinstance(app, App):
        return []
    return [app] + [sub for arg in app.args for sub in _apps_in(arg)]


def _ops_in(app: Value) -> set[str]:
    if not isinstance(app, App):
        return set()
    names = {app.name}
    for arg in app.args:
        names |= _ops_in(arg)
    return names


def _same_term(a: Value, b: Value) -> bool:
    """Structural equality ignoring spans."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Var):
        return a.name == b.name
    if isinstance(a, IntLit | StrLit):
        return a.value == b.value
    if isinstance(a, App):
        return (
            a.name == b.name
            and len(a.args) == len(b.args)
            and len(a.attrs) == len(b.attrs)
            and all(
                x[0] == y[0] and _same_term(x[1], y[1])
                for x, y in zip(a.attrs, b.attrs, strict=True)
            )
            and all(_same_term(x, y) for x, y in zip(a.args, b.args, strict=True))
        )
    return False


def _text(value: Value) -> str:
    """A value as the rule file writes it, for messages."""
    if isinstance(value, Var):
        return value.name
    if isinstance(value, StrLit):
        return f'"{value.value}"'
    if isinstance(value, IntLit):
        return str(value.value)
    return f"{value.name}(...)"


def _span(value) -> Span:
    return value.span


def _arity_text(arities: set[int]) -> str:
    return " or ".join(str(a) for a in sorted(arities))


def _article(role: str) -> str:
    return ("an " if role[0] in "aeiou" else "a ") + role
