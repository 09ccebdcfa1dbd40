"""Graphs generated in the run by JAX from the example model code, at several meshes.

Verification must not depend on the parallel degree: the same verdicts and lines come out at
tp = 2, 4 and 8 and on a 2-D (dp, tp) mesh.
"""

from __future__ import annotations

import json

import pytest
from conftest import MLP, bug_line, export_example

pytest.importorskip("jax")

MESHES = [(1, 2), (1, 4), (1, 8), (2, 4)]


@pytest.fixture(scope="module", params=MESHES, ids=lambda m: f"dp{m[0]}_tp{m[1]}")
def exported(request, tmp_path_factory):
    dp, tp = request.param
    out = tmp_path_factory.mktemp(f"mlp_dp{dp}_tp{tp}")
    export_example(
        MLP / "export.py", out, "--dp", str(dp), "--tp", str(tp), "--hidden", "32", "--ffn", "64"
    )
    return dp, tp, out


def test_correct_variant_verifies(cli, exported):
    dp, tp, out = exported
    result = cli("verify", str(out / "baseline.hlo"), str(out / "tp.hlo"), "--format", "json")
    report = json.loads(result.out)
    assert result.code == 0, result.out + result.err
    assert report["verdict"] == "equivalent"
    expected_mesh = f"tp={tp}" if dp == 1 else f"dp={dp},tp={tp}"
    assert report["mesh"] == expected_mesh


@pytest.mark.parametrize("bug", ["bias_before_allreduce", "double_allreduce"])
def test_bugs_are_caught_at_every_degree(cli, exported, bug):
    _, tp, out = exported
    result = cli(
        "verify", str(out / "baseline.hlo"), str(out / f"tp_{bug}.hlo"), "--format", "json"
    )
    report = json.loads(result.out)
    assert result.code == 1
    first = report["suspects"][0]
    assert (first["file"], first["line"]) == ("examples/mlp/model.py", bug_line(bug))
    if bug == "bias_before_allreduce":
        assert f"counted {tp} times" in first["reason"]
