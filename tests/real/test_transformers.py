"""transformers' own LlamaForCausalLM, loaded tensor parallel the way its users load it
(`from_pretrained(..., distributed_config=DistributedConfig(tp_size=...))`), traced as it
is (a `ModelOutput`, with and without gradients), proved equivalent to the same checkpoint
on one device; and one-entry changes of a tensor-parallel plan caught at transformers'
lines."""

from __future__ import annotations

import importlib

import pytest
import torch
from real_support import require

require("transformers", "accelerate")

from hf_llama import load, save_tiny_llama, token_ids  # noqa: E402

from scalify.api import check_equivalent  # noqa: E402

# Llama's own plan, written out as a user passes one, with the embedding vocab-parallel
PLAN = {
    "model.embed_tokens": "embedding_rowwise",
    "model.layers.*.self_attn.q_proj": "colwise",
    "model.layers.*.self_attn.k_proj": "colwise",
    "model.layers.*.self_attn.v_proj": "colwise",
    "model.layers.*.self_attn.o_proj": "rowwise",
    "model.layers.*.mlp.gate_proj": "colwise",
    "model.layers.*.mlp.up_proj": "colwise",
    "model.layers.*.mlp.down_proj": "rowwise",
    "lm_head": "colwise_gather_output",
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_llama_with_its_own_plan_is_proved(checkpoint, grad):
    baseline, model, mesh = load(checkpoint)
    with torch.set_grad_enabled(grad):
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def test_a_user_plan_with_a_vocab_parallel_embedding_is_proved(checkpoint):
    baseline, model, mesh = load(checkpoint, tp_plan=PLAN)
    report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def _line(module: str, text: str) -> int:
    path = importlib.import_module(module).__file__
    lines = open(path).read().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


LLAMA = "transformers.models.llama.modeling_llama"


@pytest.mark.parametrize(
    "entry, style, line_text",
    [
        # the logits left split over the vocabulary: the gather forgotten
        ("lm_head", "colwise", "logits = self.lm_head(hidden_states"),
        # the MLP's output all-reduced again after its row-parallel projection did it
        ("model.layers.*.mlp", "all_reduce", "hidden_states = self.mlp(hidden_states)"),
    ],
)
def test_plan_entry_bugs_are_caught_at_transformers_lines(checkpoint, entry, style, line_text):
    baseline, model, mesh = load(checkpoint, tp_plan={**PLAN, entry: style})
    report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    expected = ("transformers/models/llama/modeling_llama.py", _line(LLAMA, line_text))
    assert (first.file, first.line) == expected, (first.file, first.line, first.reason)
