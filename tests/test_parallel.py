"""`--jobs N`: distinct segments proved ahead in other processes give the verdicts, output
relations and suspects of the ordered walk (tiny Llama decoder stack, exported in the run)."""

from __future__ import annotations

import pytest
from conftest import REPO, export_example

import scalify.verify as verify_module
from scalify.verify import Limits, verify_files

pytest.importorskip("jax")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama_layers")
    export_example(
        REPO / "examples" / "llama" / "export.py",
        out,
        "--parts",
        "layers",
        "--layers",
        "4",
        "--tp",
        "2",
        "--bugs",
        "missing_mlp_allreduce",
    )
    return out


def test_prefetched_proofs_change_nothing_but_who_proves(exported, monkeypatch):
    prefetched = []
    original = verify_module.prefetch_segments

    def spy(*args, **kwargs):
        proofs = original(*args, **kwargs)
        prefetched.append(len(proofs))
        return proofs

    monkeypatch.setattr(verify_module, "prefetch_segments", spy)
    for name in ("tp", "tp_missing_mlp_allreduce"):
        args = (str(exported / "baseline.hlo"), str(exported / f"{name}.hlo"), REPO / "rules")
        one = verify_files(*args, limits=Limits(jobs=1, simulate=False))
        two = verify_files(*args, limits=Limits(jobs=2, simulate=False))
        assert (two.verdict, two.outputs, two.stats["partitions"]) == (
            one.verdict,
            one.outputs,
            one.stats["partitions"],
        )
        assert [(s.file, s.line) for s in two.suspects] == [(s.file, s.line) for s in one.suspects]
    assert prefetched and max(prefetched) >= 2  # the pool really proved segments
