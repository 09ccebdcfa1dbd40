"""A layout kind declared in a rule file (`layout cyclic(d, a) = i * n + r`) is a layout like
the built-in ones: in rules, relations files, case headers, the simulator, the fuzzer and
reports, with nothing added to the engine. `rules/striped.srl` declares the cyclic cut of a
dim that Striped Attention deals tokens with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, run_cli
from scalify.compiler.compile import compile_rule_dir, compile_texts

from scalify.layout import held_places
from scalify.soundness.cases import case_files, read_case, run_case
from scalify.soundness.fuzz import fuzz_rules

STRIPED = REPO / "rules" / "striped.srl"

BASELINE = """HloModule base
ENTRY main {
  x = f32[16,8] parameter(0)
  w = f32[8,6] parameter(1)
  t = f32[16,8] tanh(x)
  ROOT y = f32[16,6] dot(t, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
DISTRIBUTED = BASELINE.replace("f32[16,", "f32[4,")


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "base.hlo").write_text(BASELINE)
    (tmp_path / "dist.hlo").write_text(DISTRIBUTED)
    return tmp_path / "base.hlo", tmp_path / "dist.hlo"


def _relations(folder: Path, x: str, out: str) -> Path:
    path = folder / "relations.json"
    path.write_text(json.dumps({"mesh": "sp=4", "inputs": {"x": x}, "outputs": [out]}))
    return path


def _verify(pair, rules: Path, relations: Path, *options: str):
    return run_cli(
        "verify", *map(str, pair), "--rules", str(rules), "--relations", str(relations), *options
    )


def _scratch(folder: Path, with_striped: bool) -> Path:
    """The shipped rules, with or without the striped scheme, in a folder of their own."""
    shutil.copytree(REPO / "rules", folder, ignore=shutil.ignore_patterns("tests", "striped.srl"))
    if with_striped:
        shutil.copy(STRIPED, folder / STRIPED.name)
        shutil.copytree(REPO / "rules" / "tests" / "striped", folder / "tests" / "striped")
    return folder


def test_an_index_map_names_the_places_a_device_holds():
    cyclic, block = ("+", ("*", "i", "n"), "r"), ("+", ("*", "r", ("/", "size", "n")), "i")
    assert held_places(cyclic, 1, 4, 12).tolist() == [1, 5, 9]
    assert held_places(block, 1, 4, 12).tolist() == [3, 4, 5]
    assert held_places("i", 0, 1, 5).tolist() == list(range(5))


def test_a_cyclic_cut_is_proved_with_the_scheme_that_declares_it(pair, tmp_path):
    rules = _scratch(tmp_path / "rules", with_striped=True)
    relations = _relations(tmp_path, "cyclic(0, sp)", "cyclic(0, sp)")
    result = run_cli(
        "verify", *map(str, pair), "--rules", str(rules), "--relations", str(relations)
    )
    assert result.code == 0 and "equivalent" in result.out, result.out + result.err
    assert "x: cyclic(0, sp)" in result.out


def test_a_kind_no_rule_file_declares_is_an_error_naming_the_relations_file(pair, tmp_path):
    rules = _scratch(tmp_path / "rules", with_striped=False)
    relations = _relations(tmp_path, "cyclic(0, sp)", "cyclic(0, sp)")
    result = run_cli(
        "verify", *map(str, pair), "--rules", str(rules), "--relations", str(relations)
    )
    assert result.code == 2
    assert "relations.json" in result.err and "layout kind `cyclic` is not declared" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    ("x", "out"),
    [
        ("cyclic(0, sp)", "shard(0, sp)"),  # tokens dealt cyclically, read back as blocks
        ("shard(0, sp)", "cyclic(0, sp)"),  # blocks read back as dealt cyclically
    ],
)
def test_a_block_cut_taken_for_a_cyclic_one_is_caught_with_a_counterexample(pair, tmp_path, x, out):
    relations = _relations(tmp_path, x, out)
    result = _verify(pair, REPO / "rules", relations, "--format", "json")
    report = json.loads(result.out)
    assert result.code == 1 and report["verdict"] == "not_equivalent", report["verdict"]
    assert report["counterexample"]


def test_a_new_layout_kind_lands_as_a_rule_file_with_its_cases(tmp_path):
    """What a rule author adds for a new kind (one `.srl` file, its cases) compiles, proves
    its cases, refuses its near-misses, and is fuzzed numerically over the declared cut."""
    folder = _scratch(tmp_path / "rules", with_striped=True)
    rules = compile_rule_dir(folder)
    assert set(rules.layouts) == {"cyclic"}
    paths = case_files(folder, folder / STRIPED.name)
    assert len(paths) >= 5
    for path in paths:
        _, problems = run_case(read_case(path), rules)
        assert problems == [], (path.name, problems)
    rules.files = [f for f in rules.files if f.path.endswith(STRIPED.name)]
    reports = fuzz_rules(rules, budget=30, seed=0)
    assert {r.name for r in reports} == {
        "elementwise_cyclic_unary",
        "elementwise_cyclic_binary",
        "dot_cyclic_lhs",
    }
    for report in reports:
        assert report.fired and not report.unsound, (report.name, report.unsound)


PLANTED = {
    # a device's rows dealt cyclically read as its block of rows
    "cyclic_read_as_shard": """
# tanh(x[r::n]) == tanh(x)[blk]  (false)
rule cyclic_read_as_shard:
  match   tanh(X)
  where   X ~ x @ cyclic(d, a)
  rewrite tanh(X) ~ tanh(x) @ shard(d, a)
""",
    # gathering what devices hold dealt cyclically gives the rows out of order, not the value
    "gather_of_cyclic": """
# all_gather(x[r::n]) == x  (false: the rows come back grouped by device)
rule gather_of_cyclic:
  match   all_gather[dim=d, axes=a](X)
  where   X ~ x @ cyclic(d, a)
  rewrite all_gather[dim=d, axes=a](X) ~ x @ replicate
""",
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_an_unsound_rule_over_a_declared_kind_is_refuted(name):
    core = (REPO / "rules" / "core.srl").read_text()
    declaration = "layout cyclic(d, a) = i * n + r\n"
    rules = compile_texts([("core.srl", core), ("planted.srl", declaration + PLANTED[name])])
    rules.files = [f for f in rules.files if f.path == "planted.srl"]
    (report,) = fuzz_rules(rules, budget=40, seed=0)
    assert report.unsound, f"{name} was not refuted ({report.instances} instances)"


def test_an_unsound_declaration_never_reaches_the_engine():
    from scalify.errors import ScalifyError

    with pytest.raises(ScalifyError, match="is not a layout"):
        compile_texts([("bad.srl", "layout halves(d, a) = i % (size / n)\n")])
    assert np.array_equal(held_places(("%", "i", 3), 0, 1, 3), [0, 1, 2])
