"""transformers' own decoder families beyond Llama, each loaded tensor parallel with the plan
its config ships (`from_pretrained(..., distributed_config=DistributedConfig(tp_size=2))`)
and proved equivalent to the same checkpoint on one device: biases added after a row-parallel
reduction, q and k gathered for a norm over all heads and split again, parallel blocks,
partial rotary, soft-capping."""

from __future__ import annotations

import pytest
import torch
from real_support import require

require("transformers", "accelerate")

from hf_llama import (  # noqa: E402
    ARCHITECTURES,
    SPLIT_HEAD_ARCHITECTURES,
    VOCAB,
    causal_lm_loss,
    check_training_step,
    load,
    model_class,
    optimizer_step,
    save_tiny,
    token_ids,
)

from scalify.api import check_equivalent  # noqa: E402


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_each_family_with_its_own_plan_is_proved(tmp_path, architecture):
    checkpoint = save_tiny(tmp_path / architecture, architecture)
    baseline, model, mesh = load(checkpoint, 2, f"{architecture}ForCausalLM")
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


@pytest.mark.parametrize("architecture", list(SPLIT_HEAD_ARCHITECTURES))
def test_latent_attention_and_newer_families_with_their_own_plans_are_proved(
    tmp_path, architecture
):
    """MLA split over heads by the plan (MiniCPM3, DeepSeek-V2: the rope key expanded to each
    device's heads and batched with its q), RoPE through `torch.polar` (DeepSeek-V2, Llama
    4), chunked attention and experts (Llama 4), a gated delta rule beside attention
    (Qwen3-Next)."""
    checkpoint = save_tiny(tmp_path / architecture, architecture)
    baseline, model, mesh = load(checkpoint, 2, model_class(architecture))
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def test_latent_attention_split_as_packed_parts_is_caught(tmp_path):
    """One plan entry changed: MiniCPM3's `kv_b_proj` (heads of [k_nope|v] each) split as if
    it were two packed parts, so each device's columns are pieces of every head. Caught
    where the projection is applied (`expand_kv`)."""
    import importlib

    import transformers

    checkpoint = save_tiny(tmp_path / "MiniCPM3", "MiniCPM3")
    plan = {f"model.{k}": v for k, v in transformers.MiniCPM3Config().base_model_tp_plan.items()}
    plan |= {"lm_head": "colwise_gather_output"}
    plan["model.layers.*.self_attn.kv_b_proj"] = "packed_colwise"
    baseline, model, mesh = load(checkpoint, 2, "MiniCPM3ForCausalLM", tp_plan=plan)
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "not_equivalent"
    module = importlib.import_module("transformers.models.minicpm3.modeling_minicpm3")
    lines = open(module.__file__).read().splitlines()
    at = next(i for i, t in enumerate(lines, 1) if "= self.expand_kv(k_pass, k_rot)" in t)
    first = report.suspects[0]
    assert (first.file, first.line) == ("transformers/models/minicpm3/modeling_minicpm3.py", at)


@pytest.mark.parametrize("style", ["packed_colwise", "colwise"])
def test_a_fused_gate_up_weight_split_per_part_or_as_one_block(tmp_path, style):
    """The host-cut fused weight (issue 36) on transformers' own loader, with no relations:
    Phi-3's MLP reads its fused `gate_up_proj` per part (`chunk(2)`). A user's plan that
    keeps the MLP split (`packed_colwise` on it, `rowwise` after: the style transformers
    gives experts' [gate|up]) makes `from_pretrained` cut each rank's rows of gate and of up
    from the checkpoint: proved. The one-entry change to plain `colwise` cuts one block of
    the fused rows (all of gate on rank 0): caught with a counterexample at the `chunk`."""
    import importlib

    import transformers

    checkpoint = save_tiny(tmp_path / "Phi3", "Phi3")
    plan = {f"model.{k}": v for k, v in transformers.Phi3Config().base_model_tp_plan.items()}
    plan |= {"lm_head": "colwise_gather_output", "model.layers.*.mlp.down_proj": "rowwise"}
    plan["model.layers.*.mlp.gate_up_proj"] = style
    baseline, model, mesh = load(checkpoint, 2, "Phi3ForCausalLM", tp_plan=plan)
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    if style == "packed_colwise":
        assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
        fused = [r for r in report.relations["inputs"] if "gate_up_proj" in r]
        assert fused and all("parts=[128, 128]" in r for r in fused), fused
        return
    assert report.verdict == "not_equivalent" and report.counterexample
    module = importlib.import_module("transformers.models.phi3.modeling_phi3")
    lines = open(module.__file__).read().splitlines()
    at = next(i for i, t in enumerate(lines, 1) if "= up_states.chunk(2, dim=-1)" in t)
    first = report.suspects[0]
    assert (first.file, first.line) == ("transformers/models/phi3/modeling_phi3.py", at), (
        first.file,
        first.line,
        first.reason,
    )


@pytest.mark.parametrize("architecture", ["Qwen3", "Olmo2", "Starcoder2", "Phi3"])
def test_each_family_trains_with_its_own_plan(tmp_path, architecture):
    """The loss and every weight's gradient after `loss.backward()`: Qwen3's per-head norms
    (one KV head per device: the gradient of k_norm reduces a unit head dim), Olmo2's
    gathered q and k, Starcoder2's biases, Phi3's fused projections."""
    checkpoint = save_tiny(tmp_path / architecture, architecture)
    report = check_training_step(*load(checkpoint, 2, f"{architecture}ForCausalLM"))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["Qwen3", "Olmo2", "Starcoder2", "Phi3"])
def test_each_family_takes_an_adamw_step_with_its_own_plan(tmp_path, architecture):
    """A training loop's whole step, `torch.optim.AdamW.step()` after `backward()`: every
    weight updated in its own layout, biases, per-head norms and fused projections too."""
    checkpoint = save_tiny(tmp_path / architecture, architecture)
    baseline, model, mesh = load(checkpoint, 2, f"{architecture}ForCausalLM")
    labels = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(3))
    report = check_equivalent(
        optimizer_step(baseline, causal_lm_loss),
        optimizer_step(model, causal_lm_loss),
        mesh=mesh,
        example_inputs=(token_ids(), labels),
    )
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
