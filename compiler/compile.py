"""The rule compiler, top to bottom: read, parse, check, lower, emit, shadow check."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from scalify.errors import ScalifyError, line_of
from scalify.frontends.custom_calls import CustomCall
from scalify.layout import IndexMap, index_map_text

from .ast import CanonRule
from .cache import cached
from .canon import canon_text, check_canon_rules
from .check import check_custom_calls, check_rule_set, error_at
from .emit import emit_families, emit_rules
from .layouts import check_layout_decls
from .lower import EggRule, lower_rule
from .parse import parse_rule_text


@dataclass
class CompiledRuleFile:
    path: str
    rules: list[EggRule]
    egglog: str


@dataclass
class CompiledRuleSet:
    files: list[CompiledRuleFile]
    families: dict[str, tuple[str, ...]]
    # what each declared custom-call target means (scalify/frontends/custom_calls.py)
    custom_calls: dict[str, CustomCall] = field(default_factory=dict)
    # the directed rewrites run before saturation (scalify/canon/rewriter.py)
    canon_rules: list[CanonRule] = field(default_factory=list)
    # the layout kinds the rule files declare, by name: their index maps (scalify/layout.py)
    layouts: dict[str, IndexMap] = field(default_factory=dict)

    @property
    def rules(self) -> list[EggRule]:
        return [rule for f in self.files for rule in f.rules]

    def program(self) -> str:
        """Family facts and every rule, in file order."""
        return "\n".join([emit_families(self.families)] + [f.egglog for f in self.files])

    def source_of(self, rule_name: str) -> str:
        return next((r.source for r in self.rules if r.name == rule_name), "")


def rule_files_in(directory: str | Path) -> list[Path]:
    """The `.srl` files of a rules folder, `core.srl` first, then by name."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ScalifyError(f"rules folder not found: {folder}", str(folder))
    files = sorted(folder.glob("*.srl"), key=lambda p: (p.name != "core.srl", p.name))
    if not files:
        raise ScalifyError(f"no .srl files in {folder}", str(folder))
    return files


def compile_texts(sources: list[tuple[str, str]]) -> CompiledRuleSet:
    """Compile (path, text) pairs as one rule set (from the on-disk store, `cache.py`, when
    the same texts were compiled by the same code before)."""
    return cached(sources, lambda: _compile(sources))


def _compile(sources: list[tuple[str, str]]) -> CompiledRuleSet:
    parsed = [parse_rule_text(text, path) for path, text in sources]
    layouts = check_layout_decls(parsed)
    infos = check_rule_set(parsed, frozenset(layouts))
    custom_calls = check_custom_calls(parsed)
    taken = {rule.name for p in parsed for rule in p.rules}
    canon_rules = check_canon_rules(parsed, taken)
    families = {f.name: f.members for p in parsed for f in p.families}
    files = []
    for rule_file in parsed:
        lowered = [egg for info in infos[rule_file.path] for egg in lower_rule(info)]
        _refuse_unbound(lowered, rule_file.text)
        text = (
            emit_rules(rule_file.path, lowered)
            + canon_text(rule_file)
            + _declarations_text(rule_file, custom_calls)
            + "".join(
                f";; layout {d.name}(d, a): device r of n holds place "
                f"{index_map_text(d.index)} at its place i\n"
                for d in rule_file.layouts
            )
        )
        files.append(CompiledRuleFile(rule_file.path, lowered, text))
    _refuse_shadowed(files, dict(sources))
    return CompiledRuleSet(files, families, custom_calls, canon_rules, layouts)


def _declarations_text(rule_file, custom_calls: dict[str, CustomCall]) -> str:
    """A file's custom-call declarations as they compiled, as comments of its egglog text (no
    egglog rule: they are expanded before the e-graph), so its golden file shows them."""
    lines = [_declaration_text(custom_calls[decl.target]) for decl in rule_file.custom_calls]
    return "".join(line + "\n" for line in lines)


def _declaration_text(c: CustomCall) -> str:
    """One declaration as a comment: a fixed meaning with its positions, or an expression."""
    if c.expression is not None:
        reference = f" reference {c.reference}" if c.reference else ""
        return (
            f";; custom call {c.target!r}({', '.join(c.names)}) = "
            f"{c.expression.text(c.names)}{reference}"
        )
    return (
        f";; custom call {c.target!r} = {c.meaning}"
        + (f"[{', '.join(f'{k}={v}' for k, v in c.attrs)}]" if c.attrs else "")
        + f"({', '.join(map(str, c.operands))})"
    )


def compile_rule_dir(directory: str | Path) -> CompiledRuleSet:
    """Compile every `.srl` file of a folder. Raises ScalifyError on the first problem."""
    sources = []
    for path in rule_files_in(directory):
        try:
            sources.append((str(path), path.read_text()))
        except OSError as err:
            raise ScalifyError(f"cannot read rule file: {err.strerror}", str(path)) from None
    return compile_texts(sources)


def _refuse_unbound(lowered: list[EggRule], text: str) -> None:
    """A variable the rewrite (or a comparison) reads must be bound in every egglog rule the
    `.srl` rule expands to: otherwise egglog refuses the whole program at verification time,
    far from the line at fault, and a rule that fired could not say which value it means."""
    for rule in lowered:
        if not rule.unbound:
            continue
        var = rule.unbound[0]
        where = " and ".join(rule.cases)
        message = f"`{var.name}` is not bound by the match and the `where` clauses"
        notes = ["bind it by a layout clause that holds in every case, or by a dim function"]
        if where:
            message = f"`{var.name}` is not bound when {where}"
            notes = [
                "a `spread` clause met by a scalar fill or a broadcast along a new dim binds "
                "no dim",
                *notes,
            ]
        raise error_at(var.span, text, message, *notes)


def _refuse_shadowed(files: list[CompiledRuleFile], texts: dict[str, str]) -> None:
    """Two rules with the same query (up to variable names) and the same action: the second
    can never add anything, which is almost always a copy-paste mistake."""
    seen: dict[str, EggRule] = {}
    for compiled in files:
        for rule in compiled.rules:
            shape = _canonical(" ".join(rule.query) + " => " + " ".join(rule.actions))
            if shape in seen:
                first = seen[shape]
                path, line = rule.source.rsplit(":", 1)
                raise ScalifyError(
                    f"rule `{rule.name}` is shadowed by `{first.name}`: same match, conditions "
                    "and rewrite",
                    path,
                    int(line),
                    1,
                    line_of(texts[path], int(line)),
                    [f"`{first.name}` is at {first.source}"],
                )
            seen[shape] = rule


def _canonical(text: str) -> str:
    names: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        return names.setdefault(match.group(0), f"?v{len(names)}")

    return re.sub(r"\?[A-Za-z_][A-Za-z0-9_]*", rename, text)


__all__ = ["CompiledRuleSet", "compile_rule_dir", "compile_texts", "error_at"]
