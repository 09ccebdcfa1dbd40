"""Flash decoding across devices (examples/flash_decoding), exported by JAX in the run: a max
all-reduce and sum all-reduces over a sequence-split KV cache verify, and each bug is caught
at its line."""

from __future__ import annotations

import pytest
from conftest import REPO, assert_caught, assert_proved, exported_at, verify_json

pytest.importorskip("jax")

FD = REPO / "examples" / "flash_decoding"


exported = exported_at("flash_decoding", "tp")


def test_flash_decoding_verifies(exported):
    report = assert_proved(
        exported / "baseline.hlo",
        exported / "fd.hlo",
        {"reduce_over_shard", "all_reduce_completes_partial", "reshaping_partial"},
    )
    assert report["outputs"][0]["proven"] == "replicate"


@pytest.mark.parametrize("bug", ["local_max_only", "denominator_not_reduced"])
def test_bug_is_caught_at_its_line(exported, bug):
    base, dist = exported / "baseline.hlo", exported / f"fd_{bug}.hlo"
    report = assert_caught(base, dist, FD / "model.py", bug)
    assert "missing" in report["suspects"][0]["reason"]


def test_split_kv_combine_verifies(exported):
    """Each device's chunk shifted by its own max, rescaled to the global max, then summed."""
    code, report = verify_json(exported / "split_baseline.hlo", exported / "split.hlo")
    assert (code, report["verdict"]) == (0, "equivalent")
    assert {"chunk_shift", "rescaled_dot", "rescaled_sum", "rescale_to_global_max"} <= set(
        report["stats"]["rules_fired"]
    )


def test_split_kv_combine_with_keepdims_verifies(exported):
    """keepdims=True puts unit-dim reshapes between the max and its uses; they are moved
    through the elementwise ops and the all-reduce, and the same rules apply."""
    code, report = verify_json(exported / "split_baseline.hlo", exported / "split_keepdims.hlo")
    assert (code, report["verdict"]) == (0, "equivalent")
    assert "rescale_to_global_max_same_shape" in report["stats"]["rules_fired"]


@pytest.mark.parametrize("bug", ["base2_weights", "max_scaled_twice", "rescale_numerator_only"])
def test_split_kv_bug_is_caught_at_its_line(exported, bug):
    base, dist = exported / "split_baseline.hlo", exported / f"split_{bug}.hlo"
    assert_caught(base, dist, FD / "model.py", bug)


def test_log_sum_exp_merge_verifies(exported):
    """Each device returns its output normalised by its own sum and its log-sum-exp; the
    merge weighs them by exp(lse - max lse) (vLLM's merge_attn_states)."""
    fired = {"normalise_part", "part_lse", "lse_weight", "reweight_part", "rescaled_ratio"}
    assert_proved(exported / "split_baseline.hlo", exported / "lse.hlo", fired)


@pytest.mark.parametrize("bug", ["base2_lse", "lse_scaled_twice"])
def test_log_sum_exp_bug_is_caught_at_its_line(exported, bug):
    base, dist = exported / "split_baseline.hlo", exported / f"lse_{bug}.hlo"
    assert_caught(base, dist, FD / "model.py", bug)
