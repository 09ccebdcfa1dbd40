"""Per-part shards: a fused [Wq | Wk | Wv] weight whose device holds its block of every part
(`shard(1, tp, parts=[8, 4, 4])`), stated in a relations file or inferred from how both
programs cut it; the slice at a wrong offset and the weight cut as one block are caught."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scalify.cli import main
from scalify.errors import ScalifyError
from scalify.layout import Placement, layout_str, parse_layout
from scalify.mesh import parse_mesh
from scalify.report.text import render_text
from scalify.simulate.spmd import distribute
from scalify.verify import verify_files

HERE = Path(__file__).resolve().parent / "part_layouts"
RULES = Path(__file__).resolve().parents[1] / "rules"
MESH = parse_mesh("tp=2")


def _verify(distributed: str, relations: dict | None = None, tmp_path: Path | None = None):
    path = None
    if relations is not None:
        path = tmp_path / "relations.json"
        path.write_text(json.dumps(relations))
    return verify_files(
        str(HERE / "base.hlo"), str(HERE / distributed), RULES, relations=path and str(path)
    )


def test_a_layout_with_parts_reads_and_prints_back():
    layout = parse_layout("shard(1, tp, parts=[8, 4, 4])", MESH)
    assert layout == (Placement("shard", "tp", dim=1, parts=(8, 4, 4)),)
    assert layout_str(layout) == "shard(1, tp, parts=[8, 4, 4])"


@pytest.mark.parametrize(
    "text, words",
    [
        ("shard(1, tp, parts=[8])", "two or more positive sizes"),
        ("shard(1, tp, parts=[8, x])", "two or more positive sizes"),
        ("partial(sum, tp, parts=[8, 8])", "only a shard has parts"),
    ],
)
def test_bad_parts_are_refused(text, words):
    with pytest.raises(ScalifyError, match=words):
        parse_layout(text, MESH)


def test_each_device_holds_its_block_of_every_part():
    fused = np.arange(16).reshape(1, 16)  # parts [0..7], [8..11], [12..15]
    layout = parse_layout("shard(1, tp, parts=[8, 4, 4])", MESH)
    first, second = distribute(fused, layout, MESH, np.random.default_rng(0))
    assert first.tolist() == [[0, 1, 2, 3, 8, 9, 12, 13]]
    assert second.tolist() == [[4, 5, 6, 7, 10, 11, 14, 15]]


def test_stated_parts_prove_the_fused_projection(tmp_path):
    report = _verify("tp.hlo", {"inputs": {"wqkv": "shard(1, tp, parts=[8, 4, 4])"}}, tmp_path)
    assert report.verdict == "equivalent", render_text(report)
    assert "wqkv: shard(1, tp, parts=[8, 4, 4]) (relations file)" in report.relations["inputs"]


def test_parts_are_inferred_from_the_cuts_both_programs_make():
    report = _verify("tp.hlo")
    assert report.verdict == "equivalent", render_text(report)
    inferred = "wqkv: shard(1, tp, parts=[8, 4, 4]) (inferred from how both graphs cut it)"
    assert inferred in report.relations["inputs"]


@pytest.mark.parametrize("parts", ["shard(1, tp)", "shard(1, tp, parts=[4, 8, 4])"])
def test_other_layouts_of_the_same_weight_are_refuted(parts, tmp_path):
    report = _verify("tp.hlo", {"inputs": {"wqkv": parts}}, tmp_path)
    assert report.verdict == "not_equivalent", render_text(report)
    assert report.counterexample


def test_a_slice_at_the_wrong_offset_is_caught_at_its_line():
    """The k slice starts at 0 instead of at its part: the parts still follow from the
    cuts the two programs share, and the odd cut is the suspect."""
    report = _verify("tp_k_at_zero.hlo")
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert (first.file, first.line, first.node) == ("attn.py", 12, "k")


@pytest.mark.parametrize(
    "parts, words",
    [
        ("[8, 4, 2]", "the parts add up to 14, but dim 1"),
        ("[9, 3, 4]", "does not divide every part"),
    ],
)
def test_parts_that_do_not_fit_the_shapes_are_an_input_error(parts, words, tmp_path, capsys):
    path = tmp_path / "relations.json"
    path.write_text(json.dumps({"inputs": {"wqkv": f"shard(1, tp, parts={parts})"}}))
    code = main(["verify", str(HERE / "base.hlo"), str(HERE / "tp.hlo"), "--relations", str(path)])
    assert code == 2
    assert words in capsys.readouterr().err


def _verify_fused_output(tmp_path, weight: str, output: str):
    path = tmp_path / "relations.json"
    path.write_text(json.dumps({"inputs": {"wqkv": weight}, "outputs": [output]}))
    return verify_files(
        str(HERE / "fused_base.hlo"),
        str(HERE / "fused_tp.hlo"),
        RULES,
        mesh="tp=2",
        relations=str(path),
    )


def test_an_output_with_parts_is_checked_part_by_part(tmp_path):
    """The fused product returned as it is: each device holds its block of q, k and v."""
    parts = "shard(1, tp, parts=[8, 4, 4])"
    report = _verify_fused_output(tmp_path, parts, parts)
    assert report.verdict == "equivalent", render_text(report)
    assert [o.node for o in report.outputs] == ["h part 0", "h part 1", "h part 2"]


@pytest.mark.parametrize(
    "weight, output",
    [
        ("shard(1, tp, parts=[8, 4, 4])", "shard(1, tp)"),
        ("shard(1, tp)", "shard(1, tp, parts=[8, 4, 4])"),
    ],
    ids=["output_said_plain", "weight_plain"],
)
def test_an_output_whose_parts_do_not_match_is_refuted(tmp_path, weight, output):
    report = _verify_fused_output(tmp_path, weight, output)
    assert report.verdict == "not_equivalent"
    assert report.counterexample
