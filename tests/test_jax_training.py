"""Gradients from JAX's own autograd: a tensor-parallel training step partitioned by XLA
and written by hand in `shard_map` is proved; `shard_map` with `check_vma=False` (where the
transpose of `psum` is a `psum` again) doubles every gradient and is caught at the `psum`."""

from __future__ import annotations

import pytest
from conftest import REPO, assert_proved, exported_programs, run_cli, verify_json

pytest.importorskip("jax")


programs = exported_programs("jax_training")


def test_the_partitioned_training_step_is_proved(programs):
    report = assert_proved(programs / "annotated_baseline.hlo", programs / "partitioned.hlo")
    assert [o["proven"] for o in report["outputs"]] == ["replicate", "shard(1, tp)", "shard(0, tp)"]


def test_gradients_whose_layout_nothing_states_are_asked_for(programs):
    result = run_cli("verify", str(programs / "baseline.hlo"), str(programs / "partitioned.hlo"))
    assert result.code == 2
    assert "output 1 has local shape [16, 16] where the baseline's is [16, 32]" in result.err
    assert '["shard(1, tp)"]' in result.err


def test_a_shard_map_training_step_is_proved(programs):
    assert_proved(programs / "baseline.hlo", programs / "shard_map.hlo")


def test_the_doubled_gradients_of_an_unchecked_psum_are_caught(programs):
    code, report = verify_json(programs / "baseline.hlo", programs / "shard_map_unchecked.hlo")
    assert (code, report["verdict"]) == (1, "not_equivalent")
    first = report["suspects"][0]
    assert first["op"] == "all_reduce" and "2x too large" in first["reason"], first
    line = next(
        i
        for i, text in enumerate(
            (REPO / "tests/jax_training/export.py").read_text().splitlines(), 1
        )
        if "jax.lax.psum(" in text
    )
    assert (first["file"].endswith("export.py"), first["line"]) == (True, line)
    assert report["counterexample"]


def test_a_data_parallel_step_averaging_local_means_is_proved(programs):
    """Each device's mean over its own rows (a literal 1/64 where the baseline has 1/128),
    the gradients averaged by `pmean`: the division by dp's size meets the baseline's 1/128."""
    code, report = verify_json(programs / "baseline_mean.hlo", programs / "data_parallel.hlo")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]


@pytest.mark.parametrize("program", ["data_parallel_summed.hlo", "data_parallel_checked.hlo"])
def test_gradients_left_dp_times_too_large_are_caught(programs, program):
    """Summed where an average was meant, or averaged after autodiff already summed them
    (`check_vma=True`): each weight's gradient is twice the baseline's."""
    code, report = verify_json(programs / "baseline_mean.hlo", programs / program)
    assert (code, report["verdict"]) == (1, "not_equivalent")
    assert report["counterexample"]
    first = report["suspects"][0]
    assert first["op"] == "all_reduce", first  # the reduce that averages, at its line
    assert first["line"] == _line_of("jax.tree.map(lambda g: reduce(g,"), first
    if program == "data_parallel_summed.hlo":
        assert "exactly 2x the baseline's" in first["reason"], first
    else:  # the pmean of a gradient autodiff already summed over dp
        assert "already summed over dp: the result is 2x too large" in first["reason"], first


def _line_of(text: str) -> int:
    lines = (REPO / "tests/jax_training/export.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)
