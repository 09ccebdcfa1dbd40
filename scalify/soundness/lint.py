"""`scalify rules lint`: compile every rule file, compare golden egglog text, run the cases."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from scalify.compiler.compile import compile_rule_dir, rule_files_in
from scalify.compiler.lower import rule_name
from scalify.errors import ScalifyError
from scalify.frontends import parse_graph_text
from scalify.frontends.custom_calls import REFERENCES, CustomCall
from scalify.simulate.spmd import run_baseline
from scalify.soundness.canon_fuzz import fuzz_canon_rules
from scalify.soundness.cases import case_files, read_case, run_case
from scalify.soundness.extern_fuzz import EXTERN_FUZZ, fuzz_externs
from scalify.soundness.fuzz import fuzz_rules
from scalify.soundness.prelude_fuzz import PRELUDE, fuzz_prelude


@dataclass
class LintResult:
    messages: list[str] = field(default_factory=list)
    failures: int = 0
    cases: int = 0
    fuzzed: list[str] = field(default_factory=list)
    externs: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.failures += 1
        self.messages.append(message)


def _source_rules(egg_rules):
    """One entry per `.srl` rule (a rule with `spread` clauses lowers to several)."""
    seen: dict[str, object] = {}
    for rule in egg_rules:
        name = rule_name(rule.name)
        if name not in seen:
            seen[name] = replace(rule, name=name)
    return list(seen.values())


@dataclass(frozen=True)
class _CanonSource:
    """A canonical rule as the case check names it."""

    name: str
    source: str


def golden_path(rules_dir: Path, rule_file: Path) -> Path:
    return rules_dir / "tests" / f"{rule_file.stem}.golden.egg"


def lint_rules(
    rules_dir: str | Path, bless: bool | None = None, fuzz: int = 0, seed: int = 0
) -> LintResult:
    """Everything a rule author must keep green. `bless` (or SCALIFY_BLESS=1) rewrites the
    golden files instead of comparing them; `fuzz` is the number of random instances each rule
    is checked on numerically."""
    folder = Path(rules_dir)
    bless = os.environ.get("SCALIFY_BLESS") == "1" if bless is None else bless
    result = LintResult()
    try:
        rules = compile_rule_dir(folder)
    except ScalifyError as err:
        result.fail(err.render())
        return result
    for call in rules.custom_calls.values():
        problem = expression_problem(call) if call.expression is not None else None
        if problem:
            result.fail(f"{call.where}: error: custom call `{call.target}`: {problem}")
    for rule_file in rule_files_in(folder):
        compiled = next(f for f in rules.files if Path(f.path).name == rule_file.name)
        undocumented = [r.name for r in _source_rules(compiled.rules) if not r.doc]
        for name in undocumented:
            result.fail(f"{rule_file}: error: rule `{name}` has no `#` line stating its identity")
        _check_golden(result, golden_path(folder, rule_file), compiled.egglog, bless)
        _check_cases(result, folder, rule_file, compiled, rules)
    if fuzz:
        _fuzz(result, rules, fuzz, seed)
    return result


# the shape and scale of the random operands an expression declaration is evaluated on
CHECK_SHAPE = (4, 64)
CHECK_SCALE = 3.0


def expression_problem(call: CustomCall, seed: int = 0) -> str | None:
    """What is wrong with an expression declaration, numerically: it must expand (in f32),
    evaluate with the simulator's kernels on random operands to a value of the call's
    shape, and agree with its reference function where it names one. None when all hold."""
    dims = ",".join(map(str, CHECK_SHAPE))
    params = [f"  p{i} = f32[{dims}] parameter({i})" for i in range(len(call.names))]
    operands = ", ".join(f"p{i}" for i in range(len(call.names)))
    text = "\n".join(
        ["HloModule check", "ENTRY main {", *params]
        + [f'  ROOT c = f32[{dims}] custom-call({operands}), custom_call_target="{call.target}"']
        + ["}", ""]
    )
    try:
        graph = parse_graph_text(text, call.where, {call.target: call})
    except ScalifyError as err:
        return f"its expansion does not load: {err.message}"
    if graph.opaque_nodes():
        return f"it does not expand on {len(call.names)} operand(s) of shape {CHECK_SHAPE}"
    rng = np.random.default_rng(seed)
    inputs = {i: CHECK_SCALE * rng.standard_normal(CHECK_SHAPE) for i in graph.inputs}
    value = np.asarray(run_baseline(graph, inputs)[graph.outputs[0]])
    if value.shape != CHECK_SHAPE:
        return f"it evaluates to shape {value.shape}, not the call's {CHECK_SHAPE}"
    if not call.reference:
        return None
    expected = REFERENCES[call.reference][1](*(inputs[i] for i in graph.inputs))
    if np.allclose(value, expected, rtol=1e-4, atol=1e-5, equal_nan=True):
        return None
    where = np.unravel_index(np.argmax(np.abs(value - expected)), CHECK_SHAPE)
    args = ", ".join(f"{inputs[i][where]:.6g}" for i in graph.inputs)
    return (
        f"it differs from its reference `{call.reference}`: at ({args}) it gives "
        f"{value[where]:.6g}, the reference {expected[where]:.6g}"
    )


# From this many instances per rule on (the default, and CI's 60), a rule that never fires
# fails lint.
MUST_FIRE_BUDGET = 25


def _fuzz(result: LintResult, rules, budget: int, seed: int) -> None:
    """Every rule must fire on random instances and stay sound there, unless its file says
    why instances cannot make it fire (`unfuzzed "..."`: its cases are then all there is);
    so must the prelude's rules over sub-axes and masks (`prelude_fuzz.py`), and each
    extern must make every kind of claim it makes and keep it (`extern_fuzz.py`)."""
    unfuzzed = {rule_name(r.name): r.unfuzzed for r in rules.rules}
    unfuzzed |= {r.name: r.unfuzzed for r in rules.canon_rules}
    reports = fuzz_rules(rules, budget, seed) + fuzz_prelude(rules, budget, seed)
    for report in reports + fuzz_canon_rules(rules.canon_rules, budget, seed):
        reason = unfuzzed.get(report.name, "")
        if report.unsound:
            result.fail(
                f"{report.source}: error: rule `{report.name}` is UNSOUND: a relation "
                f"it proves is false numerically\n  " + "\n  ".join(report.unsound[:1])
            )
        elif not report.fired and not reason:
            teach = (
                "its generator in scalify/soundness/prelude_fuzz.py"
                if report.source.startswith(PRELUDE)
                else "its op's instance generator the pattern (scalify/ops/), "
                'or say why it cannot with `unfuzzed "..."`'
            )
            message = (
                f"fuzzing never made rule `{report.name}` fire ({report.instances} "
                f"instances): teach {teach}"
            )
            if budget >= MUST_FIRE_BUDGET:
                result.fail(f"{report.source}: error: {message}")
            else:  # a handful of instances may miss a rule by chance
                result.messages.append(f"{report.source}: warning: {message}")
        elif report.fired and reason:
            result.messages.append(
                f"{report.source}: warning: rule `{report.name}` fires on random instances: "
                "its `unfuzzed` reason no longer holds"
            )
        result.fuzzed.append(
            f"{report.name}: {report.instances} instances, fired on {report.fired}"
        )
    _fuzz_externs(result, budget, seed)


def _fuzz_externs(result: LintResult, budget: int, seed: int) -> None:
    """Each extern numerically, like a rule: a false claim fails lint, and so does a kind of
    claim its instances never made (at the must-fire budget)."""
    for report in fuzz_externs(budget, seed):
        missing = [kind for kind in report.kinds if not report.claims[kind]]
        if report.unsound:
            result.fail(
                f"{report.source}: error: extern `{report.name}` is UNSOUND: a claim it makes "
                "is false numerically\n  " + "\n  ".join(report.unsound[:1])
            )
        elif missing:
            message = (
                f"fuzzing never made extern `{report.name}` claim {', '.join(missing)} "
                f"({report.instances} instances): teach its generator in {EXTERN_FUZZ}"
            )
            if budget >= MUST_FIRE_BUDGET:
                result.fail(f"{report.source}: error: {message}")
            else:
                result.messages.append(f"{report.source}: warning: {message}")
        result.externs.append(report.summary())


def _check_golden(result: LintResult, golden: Path, text: str, bless: bool) -> None:
    normalized = text.replace(str(golden.parent.parent) + os.sep, "")
    if bless:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(normalized)
        result.messages.append(f"blessed {golden}")
        return
    if not golden.exists():
        result.fail(f"{golden}: error: no golden file; run with SCALIFY_BLESS=1 to create it")
        return
    expected = golden.read_text()
    if expected != normalized:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), normalized.splitlines(True), str(golden), "compiled"
            )
        )
        result.fail(
            f"{golden}: error: compiled egglog differs from the golden file "
            f"(SCALIFY_BLESS=1 to accept)\n{diff}"
        )


def _check_cases(result: LintResult, folder: Path, rule_file: Path, compiled, rules) -> None:
    paths = case_files(folder, rule_file)
    covered: set[str] = set()
    tempted: set[str] = set()
    for path in paths:
        result.cases += 1
        try:
            case = read_case(path)
            _, problems = run_case(case, rules)
        except ScalifyError as err:
            result.fail(err.render())
            continue
        covered |= set(case.fires)
        tempted |= set(case.near_misses)
        for problem in problems:
            result.fail(f"{path}: error: {problem}")
    canon = [
        _CanonSource(r.name, f"{r.span.path}:{r.span.line}")
        for r in rules.canon_rules
        if r.span.path == compiled.path
    ]
    for rule in _source_rules(compiled.rules) + canon:
        if rule.name not in covered:
            result.fail(
                f"{rule.source}: error: rule `{rule.name}` has no case that must fire "
                f"(add one under {folder / 'tests' / rule_file.stem})"
            )
        if rule.name not in tempted:
            result.fail(
                f"{rule.source}: error: rule `{rule.name}` has no near-miss case "
                "(`# near-miss:`) that must not be proved"
            )
