"""Rule cases: small baseline/distributed HLO pairs with the verdict a rule file promises.

A case file (`rules/tests/<rule file>/*.case`) has `# key: value` header lines, then a
`--- baseline` and a `--- distributed` section of HLO text:

    # expect: equivalent            (or not_equivalent, unknown, or "not equivalent" for either)
    # mesh: tp=4
    # fires: dot_shard_rhs          (rules that must have matched; comma separated)
    # suspect: add.1                (the node the report must name first)
    # outputs: shard(1, tp)         (required output layouts, `;`-separated; default replicate)
    # inputs: w: padded(1, 6) shard(1, tp); v: ...   (stated input layouts; the others are
                                      inferred from shapes)
    # near-miss: dot_shard_rhs      (rules this case tempts but must not prove; the case
                                      must then expect a verdict other than equivalent)

Each rule has a case that must be proved and a near-miss that must not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scalify.compiler.compile import CompiledRuleSet
from scalify.compiler.lower import rule_name
from scalify.errors import ScalifyError
from scalify.frontends import parse_graph_text
from scalify.mesh import parse_mesh
from scalify.relations import RelationsFile
from scalify.report.model import EQUIVALENT, Report
from scalify.verify import verify_graphs

VERDICTS = ("equivalent", "not_equivalent", "unknown", "not equivalent")


@dataclass
class Case:
    path: str
    header: dict[str, str]
    baseline: str
    distributed: str
    fires: list[str] = field(default_factory=list)
    near_misses: list[str] = field(default_factory=list)


def read_case(path: Path) -> Case:
    text = path.read_text()
    header: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current = None
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if line.startswith("--- "):
            current = line[4:].strip()
            # Pad so HLO errors point at the case file's own line numbers.
            sections[current] = [""] * number
        elif current is not None:
            sections[current].append(line)
        elif line.startswith("#") and ":" in line:
            key, _, value = line[1:].partition(":")
            header[key.strip()] = value.strip()
    for name in ("baseline", "distributed"):
        if name not in sections:
            raise ScalifyError(f"case has no `--- {name}` section", str(path))
    if header.get("expect") not in VERDICTS:
        raise ScalifyError(f"case needs `# expect:` one of {', '.join(VERDICTS)}", str(path), 1)
    near_misses = _names(header.get("near-miss", ""))
    if near_misses and header["expect"] == "equivalent":
        raise ScalifyError(
            "a `near-miss:` case must expect a verdict other than equivalent", str(path), 1
        )
    return Case(
        str(path),
        header,
        "\n".join(sections["baseline"]),
        "\n".join(sections["distributed"]),
        _names(header.get("fires", "")),
        near_misses,
    )


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def case_relations(case: Case) -> RelationsFile | None:
    """The `# inputs:` and `# outputs:` headers as a relations file (inputs not named there
    are inferred from shapes)."""
    if "outputs" not in case.header and "inputs" not in case.header:
        return None
    layouts = [t.strip() for t in case.header.get("outputs", "").split(";") if t.strip()]
    inputs = {}
    for entry in filter(str.strip, case.header.get("inputs", "").split(";")):
        name, colon, layout = entry.partition(":")
        if not colon:
            raise ScalifyError(
                f"`# inputs:` entry {entry.strip()!r} is not NAME: LAYOUT", case.path, 1
            )
        inputs[name.strip()] = layout.strip()
    return RelationsFile(case.path, None, inputs, layouts or None)


def run_case(case: Case, rules: CompiledRuleSet) -> tuple[Report, list[str]]:
    """Verify a case; returns the report and the list of broken promises (empty = pass)."""
    # declared custom calls expand as in `verify`, so a case exercises their declarations
    base = parse_graph_text(case.baseline, case.path, rules.custom_calls)
    dist = parse_graph_text(case.distributed, case.path, rules.custom_calls)
    mesh = parse_mesh(case.header.get("mesh", "tp=4"))
    report = verify_graphs(base, dist, rules, mesh, case_relations(case))
    problems = []
    expect = case.header["expect"]
    if expect == "not equivalent":
        if report.verdict == EQUIVALENT:
            problems.append("expected a verdict other than equivalent, got equivalent")
    elif report.verdict != expect:
        problems.append(f"expected {expect}, got {report.verdict}")
    fired = report.stats["rules_fired"]
    problems += [f"rule `{r}` did not fire" for r in case.fires if r not in fired]
    known = {rule_name(r.name) for r in rules.rules} | {r.name for r in rules.canon_rules}
    problems += [
        f"names unknown rule `{r}`" for r in case.fires + case.near_misses if r not in known
    ]
    wanted = case.header.get("suspect")
    if wanted and (not report.suspects or report.suspects[0].node != wanted):
        got = report.suspects[0].node if report.suspects else "none"
        problems.append(f"expected first suspect `{wanted}`, got `{got}`")
    return report, problems


def case_files(rules_dir: Path, rule_file: Path) -> list[Path]:
    return sorted((rules_dir / "tests" / rule_file.stem).glob("*.case"))
