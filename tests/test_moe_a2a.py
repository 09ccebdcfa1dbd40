"""GShard-style expert parallelism (examples/moe_a2a), exported by JAX in the run: routing
with top-k and capacity slots on each device's group of tokens, an all-to-all to the
experts and back, verifies; each bug is caught at its line."""

from __future__ import annotations

import pytest
from conftest import REPO, assert_caught, assert_proved, exported_at

pytest.importorskip("jax")

MOE = REPO / "examples" / "moe_a2a"


exported = exported_at("moe_a2a", "ep")


def test_all_to_all_moe_verifies(exported):
    fired = {"top_k_keeps_shard", "cumsum_keeps_shard", "all_to_all_moves_shard"}
    report = assert_proved(exported / "baseline.hlo", exported / "ep.hlo", fired)
    assert report["outputs"][0]["proven"] == "shard(0, ep)"


@pytest.mark.parametrize("bug", ["combine_with_dispatch_mask", "outputs_summed_over_groups"])
def test_bug_is_caught_at_its_line(exported, bug):
    assert_caught(exported / "baseline.hlo", exported / f"ep_{bug}.hlo", MOE / "model.py", bug)


def test_gather_scatter_moe_verifies(exported):
    """Dispatch as a scatter-add into capacity slots and combine as a gather, both vmapped
    over the groups (HLO batching dims), with the all-to-alls between."""
    fired = {"scatter_into_fill_keeps_batch_shard", "gather_keeps_batch_shard"}
    report = assert_proved(exported / "scatter_baseline.hlo", exported / "scatter.hlo", fired)
    assert report["outputs"][0]["proven"] == "shard(0, ep)"
    # the bounds check's folded round trip gives values two derivations; injective layouts
    # keep them from multiplying baseline terms (without, over a million nodes)
    assert report["stats"]["egraph_nodes"] < 20_000


@pytest.mark.parametrize("bug", ["combine_with_kept_mask", "slots_counted_over_groups"])
def test_gather_scatter_bug_is_caught_at_its_line(exported, bug):
    base, dist = exported / "scatter_baseline.hlo", exported / f"scatter_{bug}.hlo"
    assert_caught(base, dist, MOE / "model.py", bug)
