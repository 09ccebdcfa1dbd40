"""Silent-bug corpus (tests/corpus): published distributed-LLM bugs, each a baseline, a fixed
body and a one-line buggy body. Every fixed body verifies, every buggy body is caught, and the
first suspect is the line tagged `# BUG: <id>` (`# GRADIENT: <id>` for a gradient left
unreduced: the forward line autograd transposed)."""

from __future__ import annotations

import json
import time

import pytest
from conftest import REPO, export_example, run_cli
from conftest import bug_line as example_bug_line

pytest.importorskip("jax")

CORPUS = REPO / "tests" / "corpus"
BUGS = CORPUS / "bugs.py"


def bug_line(bug_id: str) -> int:
    """The line the first suspect must be on: the one tagged `# BUG: <id>`, or for a gradient
    left unreduced, the line tagged `# GRADIENT: <id>`, whose forward op autograd transposed
    into it (JAX puts a transposed op at its forward op's line; the bug line itself, a
    `return` without its collective, runs no op)."""
    for number, line in enumerate(BUGS.read_text().splitlines(), 1):
        if f"# GRADIENT: {bug_id}" in line:
            return number
    return example_bug_line(bug_id, BUGS)


def verify(folder, variant: str) -> dict:
    result = run_cli(
        "verify", str(folder / "baseline.hlo"), str(folder / f"{variant}.hlo"), "--format", "json"
    )
    report = json.loads(result.out)
    report["exit_code"] = result.code
    return report


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = export_example(CORPUS / "export.py", tmp_path_factory.mktemp("corpus"))
    manifest = json.loads((out / "manifest.json").read_text())
    results, start = {}, time.perf_counter()
    for entry in manifest:
        folder = out / entry["id"]
        results[entry["id"]] = (entry, verify(folder, "fixed"), verify(folder, "buggy"))
    per_case = (time.perf_counter() - start) / max(1, 2 * len(manifest))
    return results, per_case


def first_suspect(report: dict) -> tuple[str | None, int | None]:
    suspects = report.get("suspects") or [{}]
    return suspects[0].get("file"), suspects[0].get("line")


def test_fixed_bodies_verify(corpus):
    results, _ = corpus
    got = {i: fixed["verdict"] for i, (_, fixed, _) in results.items()}
    want = {i: entry["expected_fixed"] for i, (entry, _, _) in results.items()}
    assert got == want


def names_the_line(report: dict, bug_id: str) -> bool:
    """The first suspect is where the values part; when the one-line bug sits upstream (a
    weight sharded as one block, a value completed by a gather), its reason names it."""
    suspects = report.get("suspects") or [{}]
    return f"tests/corpus/bugs.py:{bug_line(bug_id)}" in suspects[0].get("reason", "")


def test_buggy_bodies_are_caught_at_their_line(corpus, capsys):
    results, per_case = corpus
    m = len(results)
    detected = localised = via_origin = 0
    wrong = {}
    for bug_id, (entry, _, buggy) in results.items():
        caught = buggy["verdict"] != "equivalent"
        at_suspect = first_suspect(buggy) == ("tests/corpus/bugs.py", bug_line(bug_id))
        at_line = at_suspect or names_the_line(buggy, bug_id)
        detected += caught
        localised += caught and at_line
        via_origin += caught and at_line and not at_suspect
        expected_caught = entry.get("expected_buggy", "caught") != "equivalent"
        if caught != expected_caught or (caught and not at_line):
            wrong[bug_id] = (buggy["verdict"], first_suspect(buggy), bug_line(bug_id))
    missed = sorted(i for i, (e, _, _) in results.items() if "expected_buggy" in e)
    line = (
        f"corpus: detected {detected}/{m}, localised at the line {localised}/{m} "
        f"({via_origin} through the origin the first suspect names), "
        f"{per_case:.1f} s per case" + (f" (known misses: {', '.join(missed)})" if missed else "")
    )
    with capsys.disabled():
        print(f"\n{line}", flush=True)
    assert not wrong
    assert detected == m - len(missed)


def test_b21_bf16_allreduce_is_caught(corpus):
    """A narrowing cast of partial sums rounds every part: not linear, never proved."""
    results, _ = corpus
    assert results["B21"][2]["verdict"] == "not_equivalent"
