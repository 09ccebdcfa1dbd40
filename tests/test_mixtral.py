"""Mixtral (examples/mixtral), exported by JAX in the run: expert parallelism over "ep" with
tensor parallelism inside every expert over "tp" verifies, with one expert per device too,
and each bug is caught at its line."""

from __future__ import annotations

import pytest
from conftest import REPO, assert_caught, assert_proved, export_example, verify_json

pytest.importorskip("jax")

MIXTRAL = REPO / "examples" / "mixtral"
BUGS = (
    "expert_reduce_over_tp_only",
    "global_expert_ids_as_local",
    "renormalised_over_local_experts",
)


@pytest.fixture(scope="module", params=[(2, 2), (4, 2)], ids=lambda m: f"ep{m[0]}_tp{m[1]}")
def exported(request, tmp_path_factory):
    ep, tp = request.param
    out = tmp_path_factory.mktemp(f"mixtral_ep{ep}_tp{tp}")
    export_example(MIXTRAL / "export.py", out, "--ep", str(ep), "--tp", str(tp))
    return out


def test_expert_parallel_decoder_verifies(exported):
    code, report = verify_json(exported / "baseline.hlo", exported / "ep.hlo")
    assert (code, report["verdict"]) == (0, "equivalent")
    fired = report["stats"]["rules_fired"]
    assert {"dot_contracted_shards", "all_reduce_completes_partial"} <= set(fired)
    assert "slice_at_coordinate" in fired or "slice_at_coordinate_unit" in fired


@pytest.mark.parametrize("bug", BUGS)
def test_bug_is_caught_at_its_line(exported, bug):
    assert_caught(exported / "baseline.hlo", exported / f"ep_{bug}.hlo", MIXTRAL / "model.py", bug)


@pytest.fixture(scope="module")
def with_shared_expert(tmp_path_factory):
    """One layer with a shared expert beside the routed ones (DeepSeek/Qwen-MoE style)."""
    out = tmp_path_factory.mktemp("mixtral_shared")
    export_example(MIXTRAL / "export.py", out, "--layers", "1", "--shared-expert", "32")
    return out


def test_shared_expert_verifies(with_shared_expert):
    """The routed experts' partial sum is reduced over ep and tp, the shared expert's over tp."""
    assert_proved(with_shared_expert / "baseline.hlo", with_shared_expert / "ep.hlo")


@pytest.mark.parametrize("bug", ["shared_expert_not_reduced", "shared_expert_reduced_over_ep"])
def test_shared_expert_bug_is_caught_at_its_line(with_shared_expert, bug):
    out = with_shared_expert
    report = assert_caught(out / "baseline.hlo", out / f"ep_{bug}.hlo", MIXTRAL / "model.py", bug)
    if bug == "shared_expert_reduced_over_ep":
        assert "counts it 2 times" in report["suspects"][0]["reason"]
