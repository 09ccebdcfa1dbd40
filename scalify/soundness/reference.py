"""What the docs state that the code already knows, made from the code: the op tables of the
references from the op registry (`scalify/ops/`) and the frontends' maps, the families from
the rule files, and the counts (rule files, rules, cases, ops, the corpus's bugs).

A page holds each generated part between `<!-- generated: NAME -->` and
`<!-- end generated -->`; a count in running text is found by the phrase around it
(`STATED`). `tests/test_docs_reference.py` compares every page with `regenerated(page)`, and
`SCALIFY_BLESS=1` writes them, as `tests/test_cli_reference.py` does for the CLI reference.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scalify.compiler.compile import compile_rule_dir, compile_texts, rule_files_in
from scalify.compiler.parse import parse_rule_text
from scalify.frontends.custom_calls import EXPRESSION_OPS
from scalify.frontends.fx import _BINARY as FX_BINARY
from scalify.frontends.fx import _UNARY as FX_UNARY
from scalify.frontends.hlo import _RENAMED_ELEMENTWISE as HLO_RENAMED
from scalify.ops import OPS, PLAIN_ELEMENTWISE, collectives, elementwise, indexing, structural
from scalify.ops.spec import OpSpec
from scalify.soundness.cases import case_files
from scalify.soundness.extern_fuzz import EXTERNS, SCALE
from scalify.soundness.lint import MUST_FIRE_BUDGET, _source_rules, golden_path
from scalify.soundness.prelude_fuzz import PRELUDE_RULES

REGION = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S
)
FAMILIES = {"elementwise": elementwise, "structural": structural}
FAMILIES |= {"indexing": indexing, "collectives": collectives}


# ---- counts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """How many of each thing the rule folder of a checkout (`root`), its corpus and the
    registry hold."""

    root: Path
    rule_files: int
    rules: int  # equality rules, one per `.srl` rule
    canon_rules: int
    custom_calls: int
    cases: int
    ops: int
    corpus: int

    @property
    def fuzzed(self) -> int:
        """What `scalify rules lint` fuzzes: every rule of the folder and the prelude's."""
        return self.rules + self.canon_rules + len(PRELUDE_RULES)

    @property
    def rules_dir(self) -> Path:
        return self.root / "rules"


def counts(root: Path) -> Counts:
    """The counts of the checkout at `root`."""
    rules_dir = root / "rules"
    rules = compile_rule_dir(rules_dir)
    files = rule_files_in(rules_dir)
    bugs = (root / "tests" / "corpus" / "bugs.py").read_text()
    return Counts(
        root=root,
        rule_files=len(files),
        rules=sum(len(_source_rules(f.rules)) for f in rules.files),
        canon_rules=len(rules.canon_rules),
        custom_calls=len(rules.custom_calls),
        cases=sum(len(case_files(rules_dir, f)) for f in files),
        ops=len(OPS),
        corpus=len(set(re.findall(r'"id": "(B\d+)"', bugs))),
    )


# ---- op tables -------------------------------------------------------------------------------


def _ops(names) -> str:
    return " ".join(f"`{n}`" for n in names)


def _in_registry_order(names) -> list[str]:
    return [n for n in OPS if n in set(names)]


def _family(spec: OpSpec) -> str:
    return next(f for f, module in FAMILIES.items() if spec in module.OPS)


def _arity(spec: OpSpec) -> str:
    return " or ".join(map(str, spec.arity)) if spec.arity else "none: no rule names it"


def _notes(spec: OpSpec) -> str:
    notes = []
    if spec.collective:
        notes.append("collective")
    if not spec.pure:
        notes.append("not pure")
    if spec.sized_operand:
        notes.append("`size(X, d)` reads its operand")
    if spec.kernel is None:
        notes.append("no numpy kernel")
    return ", ".join(notes)


def op_table() -> str:
    """Every op of the registry, by family module; ops that agree in every column share a
    row."""
    rows: dict[tuple, list[str]] = {}
    for name, spec in OPS.items():
        attrs = ", ".join(f"`{a}`" for a in spec.attrs)
        key = (_family(spec), _arity(spec), attrs, _notes(spec))
        rows.setdefault(key, []).append(name)
    lines = [
        "| family (`scalify/ops/`) | ops | operands a pattern matches | attributes rules read | |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {family} | {_ops(names)} | {arity} | {attrs} | {notes} |"
        for (family, arity, attrs, notes), names in rows.items()
    ]
    return "\n".join(lines)


def hlo_elementwise_table() -> str:
    renamed = sorted(HLO_RENAMED.items(), key=lambda kv: list(OPS).index(kv[1]))
    same = _in_registry_order(PLAIN_ELEMENTWISE - set(HLO_RENAMED.values()))
    return "\n".join(
        [
            "| HLO | canonical |",
            "|---|---|",
            *(f"| `{hlo}` | `{op}` |" for hlo, op in renamed),
            f"| {', '.join(f'`{n}`' for n in same)} | same names |",
        ]
    )


def fx_elementwise() -> str:
    pairs = {**FX_UNARY, **FX_BINARY}
    same = [aten for aten, op in pairs.items() if aten == op]
    other = [f"`{aten}` to `{op}`" for aten, op in pairs.items() if aten != op]
    return (
        f"- elementwise ATen ops become the canonical op of the same name ({_ops(same)}) "
        f"or map as {', '.join(other)};"
    )


def expression_ops() -> str:
    by_arity: dict[int, list[str]] = {}
    for op, arity in EXPRESSION_OPS.items():
        by_arity.setdefault(arity, []).append(op)
    listed = ", ".join(f"{' '.join(ops)} ({n})" for n, ops in sorted(by_arity.items()))
    return (
        "- The ops are the elementwise canonical ops that take no attribute and keep their "
        f"operands'\n  dtype, by operand count: {listed}; `clamp`'s are low, value, high. "
        "A comparison, a\n  cast or a select is refused "
        "(`scalify/frontends/custom_calls.py`'s `EXPRESSION_OPS`)."
    )


def arity_table() -> str:
    by_arity: dict[tuple[int, ...], list[str]] = {}
    for name, spec in OPS.items():
        by_arity.setdefault(spec.arity, []).append(name)
    unnamed = by_arity.pop((), [])
    lines = ["| operands | ops |", "|---|---|"]
    lines += [
        f"| {' or '.join(map(str, arity))} | {_ops(names)} |"
        for arity, names in sorted(by_arity.items())
    ]
    lines += ["", f"{_ops(unnamed)} cannot be named."]
    return "\n".join(lines)


def family_table(rules_dir: Path) -> str:
    lines = ["| family | declared in | members |", "|---|---|---|"]
    for path in rule_files_in(rules_dir):
        for family in parse_rule_text(path.read_text(), str(path)).families:
            lines.append(f"| `{family.name}` | `rules/{path.name}` | {_ops(family.members)} |")
    return "\n".join(lines)


# ---- the rule author's console, as lint prints it on the shipped rules ------------------------

# the worked example of docs/how-to/write-a-rule.md, appended to rules/core.srl
MAX_PARTIAL = """
# ---- partial maxima --------------------------------------------------------------------------

# max(max_r x_r, max_r y_r) == max_r max(x_r, y_r)
rule max_partial:
  match   max(X, Y)
  where   X ~ x @ partial(max, a)
          Y ~ y @ partial(max, a)
  rewrite max(X, Y) ~ max(x, y) @ partial(max, a)
"""


def _summary(c: Counts, problems: int = 0, cases: int = 0, rules: int = 0) -> str:
    state = f"{problems} problem(s)" if problems else "ok"
    return (
        f"rules: {state}; {c.cases + cases} case(s) run, {c.fuzzed + rules} rule(s) fuzzed "
        f"on up to {MUST_FIRE_BUDGET} instances each and {len(EXTERNS)} extern(s) on "
        f"{SCALE * MUST_FIRE_BUDGET}"
    )


def lint_ok(c: Counts) -> str:
    return f"```console\n$ scalify rules lint\n{_summary(c)}\n```"


def lint_max_partial(c: Counts) -> str:
    """Lint's answer once `max_partial` is appended to core.srl: the golden diff (compiled
    here, as lint compiles it) and the two missing cases."""
    rules_dir = c.rules_dir
    core = rules_dir / "core.srl"
    text = core.read_text() + MAX_PARTIAL
    sources = [(str(p), text if p == core else p.read_text()) for p in rule_files_in(rules_dir)]
    compiled = compile_texts(sources).files[0]
    golden = golden_path(rules_dir, core)
    diff = "".join(  # as lint writes it (`_check_golden`): paths relative to the folder
        difflib.unified_diff(
            golden.read_text().splitlines(True),
            compiled.egglog.replace(str(rules_dir) + os.sep, "").splitlines(True),
            "rules/tests/core.golden.egg",
            "compiled",
        )
    )
    line = _max_partial_line(rules_dir)
    return "\n".join(
        [
            "```console",
            "$ scalify rules lint",
            "rules/tests/core.golden.egg: error: compiled egglog differs from the golden file "
            "(SCALIFY_BLESS=1 to accept)",
            diff.rstrip("\n"),
            "",
            f"rules/core.srl:{line}: error: rule `max_partial` has no case that must fire "
            "(add one under rules/tests/core)",
            f"rules/core.srl:{line}: error: rule `max_partial` has no near-miss case "
            "(`# near-miss:`) that must not be proved",
            _summary(c, problems=3, rules=1),
            "$ echo $?",
            "1",
            "```",
        ]
    )


def lint_blessed(c: Counts) -> str:
    blessed = [f"blessed rules/tests/{p.stem}.golden.egg" for p in rule_files_in(c.rules_dir)]
    after = _summary(c, cases=2, rules=1)
    return "\n".join(
        [
            "```console",
            "$ SCALIFY_BLESS=1 scalify rules lint",
            *blessed,
            after,
            "$ scalify rules lint",
            after,
            "$ scalify verify gap/base.hlo gap/dist.hlo --mesh tp=4",
            "verdict: equivalent",
            "mesh: tp=4",
            "outputs:",
            "  [ok] output 0 (r): proven replicate; required replicate",
            "...",
            "```",
        ]
    )


def lint_unsound(c: Counts) -> str:
    """Lint's answer to `max_partial` generalised to any partial op (unsound)."""
    line = _max_partial_line(c.rules_dir)
    return "\n".join(
        [
            "```console",
            "$ scalify rules lint",
            "...",
            "rules/tests/core/max_partial_of_sums_near_miss.case: error: expected "
            "not_equivalent, got equivalent",
            "rules/tests/core/max_partial_of_sums_near_miss.case: error: expected first "
            "suspect `m`, got `none`",
            f"rules/core.srl:{line}: error: rule `max_partial` is UNSOUND: a relation it proves "
            "is false numerically",
            "  seed 0: n2 ~ n2 @ partial(sum, tp) is false: node 2 on device 0 at [0]: "
            "expected 0.640423, found 1.9654 (max |difference| 1.32)",
            "    instance: mesh tp=2: n0: f32[2] ~ partial(sum, tp); n1: f32[2] ~ "
            "partial(sum, tp); n2 = max(n0, n1)",
            _summary(c, problems=4, cases=2, rules=1),
            "```",
        ]
    )


def _max_partial_line(rules_dir: Path) -> int:
    text = (rules_dir / "core.srl").read_text() + MAX_PARTIAL
    return text.splitlines().index("rule max_partial:") + 1


def lint_new_scheme(c: Counts) -> str:
    """Lint on the shipped rules plus `extrema.srl` (`tests/rule_additions/extrema/`) before
    its cases and golden file exist."""
    scheme = (c.root / "tests" / "rule_additions" / "extrema" / "extrema.srl").read_text()
    line = scheme.splitlines().index("rule min_partial:") + 1
    return "\n".join(
        [
            "```console",
            "$ scalify rules lint --fuzz 0",
            "rules/tests/extrema.golden.egg: error: no golden file; run with SCALIFY_BLESS=1 "
            "to create it",
            f"rules/extrema.srl:{line}: error: rule `min_partial` has no case that must fire "
            "(add one under rules/tests/extrema)",
            f"rules/extrema.srl:{line}: error: rule `min_partial` has no near-miss case "
            "(`# near-miss:`) that must not be proved",
            f"rules: 3 problem(s); {c.cases} case(s) run",
            "```",
        ]
    )


def rule_set(c: Counts) -> str:
    return (
        f"The shipped rule set (`rules/`) is {c.rule_files} files: {c.rules} equality rules, "
        f"{c.canon_rules} canonical rules and {c.custom_calls} custom-call declarations, "
        f"checked by {c.cases} cases (every rule has one that must fire and one near-miss); "
        f"`scalify rules lint` fuzzes those rules and the engine's own, {c.fuzzed} in all, "
        f"and the {len(EXTERNS)} externs. "
        f"The op registry declares {c.ops} canonical ops "
        "([canonical ops](reference/canonical-ops.md))."
    )


# ---- pages -----------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[Counts], str]] = {
    "ops": lambda c: op_table(),
    "hlo-elementwise": lambda c: hlo_elementwise_table(),
    "fx-elementwise": lambda c: fx_elementwise(),
    "expression-ops": lambda c: expression_ops(),
    "arity": lambda c: arity_table(),
    "families": lambda c: family_table(c.rules_dir),
    "lint-ok": lint_ok,
    "lint-max-partial": lint_max_partial,
    "lint-blessed": lint_blessed,
    "lint-unsound": lint_unsound,
    "lint-new-scheme": lint_new_scheme,
    "rule-set": rule_set,
}

# counts in running text: a phrase whose one group is the number
STATED: list[tuple[re.Pattern, Callable[[Counts], int]]] = [
    (re.compile(r"(\d+)(\s+published silent bugs)"), lambda c: c.corpus),
]

PAGES = [
    "README.md",
    "docs/coverage.md",
    "docs/tutorial.md",
    "docs/reference/canonical-ops.md",
    "docs/reference/srl.md",
    "docs/how-to/write-a-rule.md",
]


def regenerated(text: str, c: Counts) -> str:
    """`text` with every generated region and stated count made again."""

    def region(match: re.Match) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise KeyError(f"no generator for region `{name}`")
        return f"{match[1]}{GENERATORS[name](c)}\n{match[4]}"

    text = REGION.sub(region, text)
    for pattern, value in STATED:
        text = pattern.sub(lambda m, value=value: f"{value(c)}{m[2]}", text)
    return text
