"""transformers' own mixture-of-experts models, loaded tensor parallel with their own plans:
Mixtral with its batched-matmul experts, whose fused [gate | up] weight is `packed_colwise`
(each device holds its block of gate and of up), which Scalify infers from how both programs
cut it; Qwen3-MoE, Qwen2-MoE and gpt-oss with their default grouped-matmul experts; the
experts' output left unreduced is caught."""

from __future__ import annotations

import pytest
import torch
from real_support import require

require("transformers", "accelerate")

from hf_llama import (  # noqa: E402
    MOE_ARCHITECTURES,
    check_training_step,
    load,
    save_tiny,
    save_tiny_mixtral,
    token_ids,
)

from scalify.api import check_equivalent  # noqa: E402

BATCHED = {"experts_implementation": "batched_mm"}
# the packed [gate | up] weight's per-part layout, as its DTensor's `_StridedShard` says
GATE_UP = (
    "model_layers_0_mlp_experts_gate_up_proj: shard(1, tp, parts=[128, 128]) (DTensor placement)"
)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {
        kv: save_tiny_mixtral(tmp_path_factory.mktemp(f"tiny-mixtral-{kv}"), kv_heads=kv)
        for kv in (2, 4)
    }


@pytest.mark.parametrize("tp", [2, 4])
def test_mixtral_with_its_own_plan_is_proved(checkpoints, tp):
    baseline, model, mesh = load(checkpoints[tp], tp, "MixtralForCausalLM", BATCHED)
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    assert GATE_UP in report.relations["inputs"]


def test_experts_left_unreduced_are_caught(checkpoints):
    """`local_params` for the experts module where its plan says `moe_tp_experts`: each
    device keeps its partial sum of the experts' output."""
    from transformers import MixtralConfig

    plan = {f"model.{k}": v for k, v in MixtralConfig().base_model_tp_plan.items()}
    plan["model.layers.*.mlp.experts"] = "local_params"
    baseline, model, mesh = load(checkpoints[2], 2, "MixtralForCausalLM", BATCHED, tp_plan=plan)
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert "all-reduce over tp missing" in first.reason
    assert "transformers/integrations/moe.py" in first.reason


@pytest.mark.parametrize("architecture", list(MOE_ARCHITECTURES))
def test_grouped_experts_with_their_own_plan_are_proved(tmp_path, architecture):
    """The default experts: tokens sorted by expert (`sort`, `histc`, `cumsum`), each
    projection one `_grouped_mm` over the sorted rows, the sort undone by scattering into
    `torch.empty`. The grouped matmul reads as a per-row lookup of the expert's weight, so a
    weight split over its columns or rows keeps its layout; the scatter of a sort's
    permutation writes every entry, so the uninitialised memory is never read."""
    checkpoint = save_tiny(tmp_path / architecture, architecture)
    baseline, model, mesh = load(checkpoint, 2, f"{architecture}ForCausalLM")
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def test_a_training_step_through_grouped_experts_is_proved(tmp_path):
    """Qwen3-MoE's loss and every gradient: the backward of each grouped matmul (the
    weight's gradient per expert, the input's through the packed [gate | up] weight, whose
    gradient is the concatenation of the two parts' gradients) and of the routing."""
    checkpoint = save_tiny(tmp_path / "Qwen3Moe", "Qwen3Moe")
    report = check_training_step(*load(checkpoint, 2, "Qwen3MoeForCausalLM"))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
