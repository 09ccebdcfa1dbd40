"""The translation check of the canonical folds (scalify/canon/translation.py) over every
stored graph: as canonicalisation leaves it, each computes what it computed as loaded, on
random inputs, on every device. A planted wrong fold is caught, so the check can fail."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from conftest import REPO
from scalify.compiler.compile import compile_rule_dir

from scalify.canon import translation
from scalify.canon.canonicalize import canonicalize
from scalify.frontends.custom_calls import expand_custom_calls
from scalify.frontends.hlo import parse_hlo

STORED = sorted(
    p.relative_to(REPO)
    for pattern in ("tests/**/*.hlo", "tests/**/*.hlo.gz", "examples/mlp/hlo/*.hlo")
    for p in REPO.glob(pattern)
)


@pytest.fixture(scope="module")
def custom_calls():
    return compile_rule_dir(REPO / "rules").custom_calls


def _loaded(path: Path, custom_calls):
    data = (REPO / path).read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
    graph = parse_hlo(text, str(path))
    expand_custom_calls(graph, custom_calls)
    return graph


@pytest.mark.parametrize("path", STORED, ids=str)
def test_canonicalisation_keeps_what_a_stored_graph_computes(path: Path, custom_calls) -> None:
    graph = _loaded(path, custom_calls)
    loaded = translation.snapshot(graph)
    found = translation.departures(loaded, canonicalize(graph), seeds=(0,))
    if found is None:
        pytest.skip("not runnable here (an op without numeric semantics, or too large)")
    assert not found, [d.describe() for d in found[:3]]


def test_a_wrong_fold_is_caught(custom_calls) -> None:
    graph = _loaded(Path("examples/mlp/hlo/tp.hlo"), custom_calls)
    loaded = translation.snapshot(graph)
    canonical = canonicalize(graph)
    add = next(n for n in canonical.nodes.values() if n.op == "add")
    add.op = "sub"
    found = translation.departures(loaded, canonical)
    assert found, "a fold that turned an add into a sub went unseen"
    assert "after canonicalisation" in found[0].describe()


def test_the_cli_runs_the_check_on_request() -> None:
    from conftest import run_cli

    mlp = REPO / "examples" / "mlp" / "hlo"
    result = run_cli("verify", str(mlp / "baseline.hlo"), str(mlp / "tp.hlo"), "--check-canon")
    assert result.code == 0 and "verdict: equivalent" in result.out, result.err
