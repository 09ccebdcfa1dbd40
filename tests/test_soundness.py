"""Soundness: the simulator as ground truth for verdicts, mutants and refinement."""

from __future__ import annotations

import json

import pytest
from conftest import MLP, REPO
from scalify.compiler.compile import compile_rule_dir

from scalify.frontends import load_graph
from scalify.mesh import parse_mesh
from scalify.relations import input_relations, output_relations
from scalify.simulate import simulate
from scalify.soundness.mutate import MutationScore, score
from scalify.soundness.mutation_corpus import case_pairs, hlo_pairs

HLO = MLP / "hlo"


def test_no_differing_mutant_is_proved_equivalent(capsys):
    rules = compile_rule_dir(REPO / "rules")
    total = MutationScore()
    for _, base, dist, mesh, given in [*case_pairs(REPO / "rules"), *hlo_pairs(HLO)]:
        total.add(score(base, dist, rules, mesh, given))
    with capsys.disabled():  # the localisation share, printed in CI's log
        print(f"\nmutation: {total.line()}", flush=True)
    assert total.wrongly_proved == []
    assert total.differing >= 100
    assert total.caught == total.differing
    # the MLP's mutants carry source lines: the first suspect is on the mutated op's line
    # (its own, or its second site); `bench/mutation.py --jax` measures the other examples
    assert total.located >= 10
    assert total.first_at_line * 100 >= total.located * 95
    assert total.top3_at_line == total.located


@pytest.mark.parametrize(
    "variant",
    [
        "tp",
        "tp_bias_before_allreduce",
        "tp_wrong_groups",
        "tp_missing_allreduce",
        "tp_double_allreduce",
    ],
)
def test_verdict_agrees_with_simulation(cli, variant):
    base = load_graph(str(HLO / "baseline.hlo"))
    dist = load_graph(str(HLO / f"{variant}.hlo"))
    mesh = parse_mesh("dp=2,tp=4")
    mismatch = simulate(
        base,
        dist,
        mesh,
        input_relations(base, dist, mesh, None),
        output_relations(base, dist, mesh, None),
    )
    report = json.loads(
        cli(
            "verify", str(HLO / "baseline.hlo"), str(HLO / f"{variant}.hlo"), "--format", "json"
        ).out
    )
    if mismatch is None:
        assert report["verdict"] == "equivalent"
    else:
        assert report["verdict"] == "not_equivalent"
        assert report["counterexample"].startswith("output 0 on device")


UNPROVED_BUT_RIGHT = """\
# The distributed graph doubles with an add where the baseline multiplies by 2: right, but no
# rule says x + x == 2x.
--- baseline
HloModule b
ENTRY main {
  x = f32[8,4] parameter(0)
  two = f32[] constant(2)
  t = f32[8,4] broadcast(two), dimensions={}
  ROOT y = f32[8,4] multiply(x, t)
}
--- distributed
HloModule d
ENTRY main {
  x = f32[8,4] parameter(0)
  ROOT y = f32[8,4] add(x, x)
}
"""


def test_unproved_but_numerically_equal_is_unknown(cli, tmp_path):
    base_text, dist_text = UNPROVED_BUT_RIGHT.split("--- distributed\n")
    (tmp_path / "b.hlo").write_text(base_text.split("--- baseline\n")[1])
    (tmp_path / "d.hlo").write_text(dist_text)
    result = cli(
        "verify",
        str(tmp_path / "b.hlo"),
        str(tmp_path / "d.hlo"),
        "--mesh",
        "tp=2",
        "--format",
        "json",
    )
    report = json.loads(result.out)
    assert result.code == 1
    assert report["verdict"] == "unknown"
    assert report["counterexample"] == ""
    assert any("agree numerically" in note for note in report["notes"])
    assert report["suspects"][0]["node"] == "y"


def test_simulate_command(cli):
    good = cli("simulate", str(HLO / "baseline.hlo"), str(HLO / "tp.hlo"))
    assert good.code == 0 and "outputs agree" in good.out
    bad = cli("simulate", str(HLO / "baseline.hlo"), str(HLO / "tp_double_allreduce.hlo"))
    assert bad.code == 1 and "outputs differ" in bad.out


def test_collective_over_devices_outside_the_mesh_is_not_simulated():
    from scalify.ir import Node
    from scalify.simulate import NotSimulable
    from scalify.simulate.spmd import _groups

    node = Node(0, "all_reduce", (), (4,), "f32", {"groups": ((0, 1, 2, 3, 4, 5, 6, 7),)})
    with pytest.raises(NotSimulable, match="beyond the mesh"):
        _groups(node, parse_mesh("tp=4"))


@pytest.mark.parametrize(
    ("script", "args", "files"),
    [
        ("flash_decoding", ["--tp", "2"], ("split_baseline.hlo", "split_keepdims.hlo")),
        ("sp", ["--tp", "2"], ("baseline.hlo", "sp.hlo")),
    ],
    ids=["split_kv_keepdims", "megatron_sp"],
)
def test_no_mutant_of_an_exported_example_is_proved(tmp_path, script, args, files):
    """Mutants of JAX-exported examples (norms with keepdims, split-KV rescales): the
    alternative forms the engine derives must follow every mutation."""
    pytest.importorskip("jax")
    from conftest import export_example

    out = export_example(REPO / "examples" / script / "export.py", tmp_path, *args)
    rules = compile_rule_dir(REPO / "rules")
    total = MutationScore()
    for _, base, dist, mesh, given in hlo_pairs(out, *files):
        total.add(score(base, dist, rules, mesh, given))
    assert total.wrongly_proved == []
    assert total.differing >= 5
