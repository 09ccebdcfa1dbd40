"""Ulysses sequence parallelism (examples/ulysses), exported by JAX in the run: the tiled
all-to-alls between sequence and heads shards verify, and a wrong reshape of the all-to-all's
output is caught at its line."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, export_example
from conftest import bug_line as example_bug_line

pytest.importorskip("jax")

ULYSSES = REPO / "examples" / "ulysses"


@pytest.fixture(scope="module", params=[2, 4], ids=lambda sp: f"sp{sp}")
def exported(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"ulysses_sp{request.param}")
    export_example(ULYSSES / "export.py", out, "--sp", str(request.param))
    return out


def verify(cli, out, name: str) -> tuple[int, dict]:
    result = cli("verify", str(out / "baseline.hlo"), str(out / f"{name}.hlo"), "--format", "json")
    return result.code, json.loads(result.out)


def test_ulysses_block_verifies(cli, exported):
    code, report = verify(cli, exported, "ulysses")
    assert (code, report["verdict"]) == (0, "equivalent")
    assert report["outputs"][0]["proven"] == "shard(0, sp)"
    assert report["stats"]["rules_fired"]["all_to_all_moves_shard"] >= 4


def test_wrong_reshape_after_all_to_all_is_caught_at_its_line(cli, exported):
    code, report = verify(cli, exported, "ulysses_wrong_reshape_after_all_to_all")
    assert code == 1 and report["verdict"] == "not_equivalent"
    first = report["suspects"][0]
    line = example_bug_line("wrong_reshape_after_all_to_all", ULYSSES / "model.py")
    assert (first["file"], first["line"]) == ("examples/ulysses/model.py", line)
