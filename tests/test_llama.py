"""The Llama-3.1 decoder stack (examples/llama) under tensor parallelism, exported by JAX in
the run: the correct version verifies at tp = 2 and 4, and every bug is caught at its line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, assert_caught, export_example, line_of
from conftest import bug_line as example_bug_line

pytest.importorskip("jax")

LLAMA = REPO / "examples" / "llama"


def bug_line(name: str) -> int:
    return example_bug_line(name, LLAMA / "model.py")


def export_tiny(out, tp: int, parts: str, *extra: str):
    """The tiny config's decoder stack (`parts`: layers or sp_layers) at this tp."""
    return export_example(
        LLAMA / "export.py", out, "--config", "tiny", "--tp", str(tp), "--parts", parts, *extra
    )


@pytest.fixture(scope="module", params=[2, 4, 8], ids=lambda tp: f"tp{tp}")
def exported(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"llama_tp{request.param}")
    export_tiny(out, request.param, "layers")
    return request.param, out


def verify(cli, out, name):
    result = cli("verify", str(out / "baseline.hlo"), str(out / f"{name}.hlo"), "--format", "json")
    return result.code, json.loads(result.out)


def assert_caught_in(out: Path, name: str, bug: str) -> dict:
    """`out/name.hlo` is not equivalent to `out/baseline.hlo` and the first suspect is the
    line of examples/llama/model.py tagged with `bug`."""
    return assert_caught(out / "baseline.hlo", out / f"{name}.hlo", LLAMA / "model.py", bug)


def test_decoder_stack_verifies(cli, exported):
    _, out = exported
    code, report = verify(cli, out, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]
    assert report["outputs"][0]["proven"] == "replicate"


@pytest.mark.parametrize(
    "bug",
    [
        "bias_before_allreduce",
        "missing_mlp_allreduce",
        "heads_reshape_wrong_factor",
        "wrong_transpose",
    ],
)
def test_bug_is_caught_at_its_line(exported, bug):
    tp, out = exported
    if not (out / f"tp_{bug}.hlo").exists():
        pytest.skip(f"{bug} changes nothing at tp={tp} (one q head per device)")
    assert assert_caught_in(out, f"tp_{bug}", bug)["counterexample"]


def test_identical_layers_share_a_proof_and_a_bad_layer_is_found(cli, tmp_path):
    """Four layers: the correct stack proves one layer and reuses it; with the bug in the
    last layer only, the report still names the bug's line."""
    export_tiny(
        tmp_path,
        2,
        "layers",
        "--layers",
        "4",
        "--bugs",
        "bias_before_allreduce",
        "--bug-layer",
        "3",
    )
    code, good = verify(cli, tmp_path, "tp")
    assert good["verdict"] == "equivalent"
    assert good["stats"]["memo_hits"] >= 2 and good["stats"]["partitions"] >= 6
    code, bad = verify(cli, tmp_path, "tp_bias_before_allreduce")
    assert bad["verdict"] == "not_equivalent"
    first = bad["suspects"][0]
    assert first["line"] == bug_line("bias_before_allreduce")


@pytest.fixture(scope="module", params=[2, 4], ids=lambda tp: f"sp_tp{tp}")
def sequence_parallel(request, tmp_path_factory):
    return export_tiny(
        tmp_path_factory.mktemp(f"llama_sp_tp{request.param}"), request.param, "sp_layers"
    )


def test_sequence_parallel_decoder_stack_verifies(cli, sequence_parallel):
    """Megatron SP: norms and residuals on sequence slices, an all-gather before and a
    reduce-scatter after each tensor-parallel block."""
    code, report = verify(cli, sequence_parallel, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]
    assert report["outputs"][0]["proven"] == "shard(1, tp)"
    assert {"all_gather_of_shard", "reduce_scatter_of_partial"} <= set(
        report["stats"]["rules_fired"]
    )


@pytest.mark.parametrize("bug", ["sp_slice_not_scatter", "heads_reshape_wrong_factor"])
def test_sequence_parallel_bug_is_caught_at_its_line(sequence_parallel, bug):
    assert_caught_in(sequence_parallel, f"tp_{bug}", bug)


@pytest.fixture(scope="module", params=[2, 4, 8], ids=lambda tp: f"full_tp{tp}")
def full_model(request, tmp_path_factory):
    """The whole model, tokens to mean loss: vocab-parallel embedding and cross-entropy."""
    out = tmp_path_factory.mktemp(f"llama_full_tp{request.param}")
    return request.param, export_tiny(out, request.param, "full")


def test_full_model_verifies(cli, full_model):
    _, out = full_model
    code, report = verify(cli, out, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]
    fired = report["stats"]["rules_fired"]
    assert {"block_take", "block_take_along", "all_reduce_completes_partial"} <= set(fired)
    assumed = [n for n in report["notes"] if n.startswith("assumed:")]
    assert any("`tokens` lies in [0, 512)" in n for n in assumed), report["notes"]
    assert any("`targets` lies in [0, 512)" in n for n in assumed), report["notes"]


@pytest.mark.parametrize(
    "bug", ["bias_before_allreduce", "missing_mlp_allreduce", "heads_reshape_wrong_factor"]
)
def test_full_model_bug_is_caught_at_its_line(full_model, bug):
    tp, out = full_model
    if not (out / f"tp_{bug}.hlo").exists():
        pytest.skip(f"{bug} changes nothing at tp={tp}")
    assert_caught_in(out, f"tp_{bug}", bug)


def test_cross_entropy_on_gathered_logits_names_the_gather(cli, full_model):
    """The loss's exp-sum all-reduce adds a value the all-gather already completed: the first
    suspect is the root cause, that gather (the one-line bug), and its reason says where the
    graphs part (the all-reduce)."""
    _, out = full_model
    code, report = verify(cli, out, "tp_vocab_ce_on_gathered_logits")
    assert (code, report["verdict"]) == (1, "not_equivalent")
    first = report["suspects"][0]
    line = bug_line("vocab_ce_on_gathered_logits")
    assert (first["op"], first["file"], first["line"]) == (
        "all_gather",
        "examples/llama/model.py",
        line,
    )
    assert f"all_gather at examples/llama/model.py:{line}" in first["reason"]
    assert (first["second"]["role"], first["second"]["op"]) == ("shows at", "all_reduce")


@pytest.fixture(scope="module", params=[2, 4, 8], ids=lambda tp: f"fused_tp{tp}")
def fused(request, tmp_path_factory):
    """Fused [Q|K|V] and [gate|up] weights: each device cuts its block of every part."""
    out = tmp_path_factory.mktemp(f"llama_fused_tp{request.param}")
    return export_tiny(out, request.param, "layers", "--fused")


def test_fused_projections_with_a_per_part_layout_verify(cli, fused):
    code, report = verify(cli, fused, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]


@pytest.mark.parametrize("bug", ["fused_qkv_one_block", "fused_gate_up_one_block"])
def test_fused_weight_cut_as_one_block_is_traced_to_its_line(cli, fused, bug):
    """The values part at the local split (a slice of a dim split over tp); the first suspect
    is the root cause, the one-block cut at the BUG line where that shard came from, and its
    reason says where the values part."""
    code, report = verify(cli, fused, f"tp_{bug}")
    assert (code, report["verdict"]) == (1, "not_equivalent")
    first = report["suspects"][0]
    assert (first["op"], first["line"]) == ("slice_at", bug_line(bug))
    assert f"slice_at at examples/llama/model.py:{bug_line(bug)}" in first["reason"]
    assert (first["second"]["role"], first["second"]["op"]) == ("shows at", "slice")


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_fused_weight_re_laid_out_by_views_verifies(cli, tmp_path, tp):
    """Each device takes one block of the whole [gate|up] re-laid out by
    `reshape(d, 2, tp, f / tp).transpose(0, 2, 1, 3).reshape(d, 2 f)`: the view chain run on
    the cut dim's positions shows the block is [gate_r | up_r] (view_blocks.py). Laid out
    without the transpose, the block is one contiguous block of [gate|up]: caught, at the
    block the re-laid-out weight gives."""
    export_tiny(tmp_path, tp, "layers", "--fused", "--fused-cut", "relaid")
    code, report = verify(cli, tmp_path, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]
    code, report = verify(cli, tmp_path, "tp_relaid_wrong_order")
    assert (code, report["verdict"]) == (1, "not_equivalent")
    first = report["suspects"][0]
    relaid_call = line_of("w = one_block(relaid(", LLAMA / "model.py")
    assert (first["op"], first["caller"]) == ("slice_at", ["examples/llama/model.py", relaid_call])


def test_interleaved_rope_verifies(cli, tmp_path):
    """Meta's complex-form RoPE (dims 2i and 2i+1 paired): strided views of the head dim,
    which no layout touches, so the column-parallel heads go through unchanged."""
    out = export_tiny(tmp_path, 4, "layers", "--rope", "interleaved", "--bugs", "none")
    code, report = verify(cli, out, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]


@pytest.mark.parametrize("tp", [2, 8])
def test_qk_norm_over_all_heads(cli, tmp_path, tp):
    """OLMo-2 style QK-norm spans all heads: the sum of squares is all-reduced over tp. The
    variant that normalises over the local heads only is caught at its line (B29's
    mechanism inside the full model)."""
    out = export_tiny(tmp_path, tp, "full", "--qk-norm", "--bugs", "qk_norm_local_heads")
    code, report = verify(cli, out, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]
    assert_caught_in(out, "tp_qk_norm_local_heads", "qk_norm_local_heads")


@pytest.mark.parametrize("tp", [2, 8])
def test_one_hot_lookups(cli, tmp_path, tp):
    """Embedding and target logit by one-hot contractions (T5X/Flax style): a device's
    one-hot of its local ids over its block is its slice of the whole vocabulary's one-hot.
    Out-of-range ids give zero rows on both sides, so nothing is assumed about them."""
    out = export_tiny(
        tmp_path, tp, "full", "--lookup", "one_hot", "--bugs", "vocab_ce_on_gathered_logits"
    )
    code, report = verify(cli, out, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]
    assert not [n for n in report["notes"] if n.startswith("assumed:")]
    code, report = verify(cli, out, "tp_vocab_ce_on_gathered_logits")
    assert (code, report["verdict"]) == (1, "not_equivalent")
    gather = f"all_gather at examples/llama/model.py:{bug_line('vocab_ce_on_gathered_logits')}"
    assert gather in report["suspects"][0]["reason"]


@pytest.mark.parametrize(("tp", "side"), [(2, "tp"), (8, "tp"), (4, "baseline")])
def test_heads_projected_straight_from_a_viewed_weight(cli, tmp_path, tp, side):
    """One side projects into heads with the weights viewed as (hidden, heads, head_dim)
    (Flax DenseGeneral), the other reshapes after the matmul: they meet through the view
    moved into or out of the matmul. RoPE then slices those heads; such a slice must not be
    moved in the distributed graph, where it related one value to two unjoined baseline
    terms and the e-graph doubled at every op after it (a million nodes for one layer)."""
    out = export_tiny(tmp_path, tp, "full", "--heads-view", side, "--bugs", "none")
    code, report = verify(cli, out, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"]
    assert report["stats"]["egraph_nodes"] < 20_000


def test_a_training_step_with_one_kv_head_per_device_verifies(cli, tmp_path):
    """`--parts train_layers` at tp=8 over 8 KV heads: the gradient of `jnp.repeat` over a
    device's one KV head sums over its unit head dim and the repeats together, a reduce
    Scalify reads as one over the repeats alone."""
    export_tiny(tmp_path, 8, "train_layers", "--bugs", "none")
    code, report = verify(cli, tmp_path, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]
    weights = [o["proven"] for o in report["outputs"][1:]]
    assert weights and set(weights) <= {"replicate", "shard(0, tp)", "shard(1, tp)"}


@pytest.mark.parametrize(
    "tp, heads",
    [(16, 32), (32, 64), (16, 16), (32, 32), (64, 64)],
    ids=["tp16", "tp32", "tp16-one-q-head", "tp32-one-q-head", "tp64-one-q-head"],
)
def test_fewer_kv_heads_than_devices_verify_and_a_wrong_split_is_caught(cli, tmp_path, tp, heads):
    """8 KV heads at tp 16 to 64 (Llama-3.1 8B/70B/405B at tp 16 and 32 have 1 to 8 q heads
    per device): each device slices the one KV head its q heads read from the whole wk and
    wv, at `(r // q) * head_dim` written as JAX's floor division and slice-start wrap. That
    is block r of the weight with each KV head repeated q times. With one q head per device
    XLA squeezes the head dim away; the dots are proved with it kept (unit_dots.py), at one
    e-graph size for every degree. The wrong split (`r * 2 % 8`)
    is caught at the slice that takes the wrong block with it (the start is read as the
    arithmetic it is on every device, so no line of its spelling is singled out)."""
    export_tiny(tmp_path, tp, "layers", "--heads", str(heads), "--kv-heads", "8",
                "--bugs", "kv_heads_wrong_split")  # fmt: skip
    code, report = verify(cli, tmp_path, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]
    assert report["stats"]["rules_fired"].get("slice_at_group_coordinate")
    # bounded the same at every degree (where a device's q heads are part of one KV head's
    # group, tp 16 here, the sub-axes of tp add a second reading, and a unit beside the
    # head split down to one a device a third: about 8,100 nodes)
    assert report["stats"]["egraph_nodes"] < 8_500
    code, report = verify(cli, tmp_path, "tp_kv_heads_wrong_split")
    assert (code, report["verdict"]) == (1, "not_equivalent")
    first = report["suspects"][0]
    assert (first["op"], first["function"]) == ("slice_at", "slice_kv_head"), first
    start = next(o for o in first["operands"] if "computed from the device id" in o)
    local = heads // tp  # the wrong start, (r * local % 8) * head_dim, on devices 0..5
    assert ": " + ", ".join(str(r * local % 8 * 8) for r in range(6)) in start, start
    assert report["counterexample"]


@pytest.mark.slow
@pytest.mark.parametrize("config, tp", [("8b", 32), ("70b", 16), ("405b", 32)])
def test_published_configs_with_fewer_kv_heads_than_devices_verify(cli, tmp_path, config, tp):
    """Llama-3.1 8B at tp 32 (one q head per device), 70B at tp 16 and 405B at tp 32, two
    layers at their real shapes: 8 KV heads, each shared by 2 to 4 devices."""
    export_example(
        LLAMA / "export.py", tmp_path, "--config", config, "--tp", str(tp), "--layers", "2",
        "--parts", "layers", "--bugs", "none",
    )  # fmt: skip
    code, report = verify(cli, tmp_path, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    """The tiny config at tp 6, which divides neither its 16 q heads, nor its 8 KV heads,
    nor its MLP width of 256: the converter (examples/llama/padding.py) pads the q heads to
    18, repeats each KV head for its 2 q heads and pads to 18, and pads the width to 258."""
    out = tmp_path_factory.mktemp("llama_tp6")
    export_tiny(out, 6, "layers")
    return out


def test_padded_heads_and_widths_verify_with_the_repeat_unit_inferred(cli, padded):
    code, report = verify(cli, padded, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]
    inputs = "\n".join(report["relations"]["inputs"])
    padding = "its padding assumed to hold zeros"
    assert f"wq__: padded(1, 144) shard(1, tp) (annotation; {padding})" in inputs
    assert f"w_up__: padded(1, 258) shard(1, tp) (annotation; {padding})" in inputs
    # each KV head of 8 columns repeated, read from how both programs split the projection
    unit = "each run of 8 repeated: the size both graphs split it by"
    kv = f"wk__: repeated(1, 2, 8) padded(1, 144) shard(1, tp) (annotation; {padding}; {unit})"
    assert kv in inputs, inputs
    assert inputs.count(unit) == 4, inputs  # wk and wv of both layers


def test_a_kv_repeat_stated_per_column_is_refuted(cli, padded, tmp_path):
    """The near-miss of the inferred unit: each column repeated twice (what a converter
    that forgot the head size would write) is stated in a relations file, which comes
    before inference, and the program is not equivalent under it."""
    per_column = "repeated(1, 2) padded(1, 144) shard(1, tp)"
    names = [f"params__layers___{i}___{w}__" for i in (0, 1) for w in ("wk", "wv")]
    relations = tmp_path / "relations.json"
    relations.write_text(json.dumps({"inputs": dict.fromkeys(names, per_column)}))
    result = cli("verify", str(padded / "baseline.hlo"), str(padded / "tp.hlo"),
                 "--relations", str(relations), "--format", "json")  # fmt: skip
    report = json.loads(result.out)
    assert (result.code, report["verdict"]) == (1, "not_equivalent")
    assert report["counterexample"]


@pytest.mark.parametrize(
    "bug",
    ["bias_before_allreduce", "missing_mlp_allreduce", "heads_reshape_wrong_factor",
     "wrong_transpose"],
)  # fmt: skip
def test_padded_layout_bugs_are_caught_at_their_line(padded, bug):
    assert assert_caught_in(padded, f"tp_{bug}", bug)["counterexample"]


def test_a_padded_vocabulary_masked_before_the_softmax_verifies(cli, tmp_path):
    """The whole tiny model at tp 6: its vocabulary of 512 padded to 516, the LM head's
    padded columns zero, the vocab-parallel loss masking the padded logits with -inf (the
    prelude's mask-fills-padding) before its max, exp and sum. Left in (the bug), the
    padded logits enter the softmax: not proved, and reported in the loss."""
    out = export_tiny(tmp_path, 6, "full", "--bugs", "padded_logits_in_softmax")
    code, report = verify(cli, out, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]
    fired = report["stats"]["rules_fired"]
    for rule in ("lowest_padding_maxed", "lowest_padding_exp", "zero_padding_summed"):
        assert fired.get(rule), (rule, fired)
    code, report = verify(cli, out, "tp_padded_logits_in_softmax")
    assert code == 1 and report["verdict"] != "equivalent"
    assert report["suspects"][0]["function"] == "tp_cross_entropy", report["suspects"][0]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["8b", "70b", "405b"])
def test_published_configs_padded_at_tp6_verify(cli, tmp_path, config):
    """Llama-3.1 8B, 70B and 405B at tp 6, two layers at their real shapes: q heads padded
    to 36, 66 and 132, each of the 8 KV heads repeated for its q heads and padded alike, the
    MLP width padded to a multiple of 6; one e-graph size for all three. A reshape on the
    wrong factor is caught at its line."""
    export_example(
        LLAMA / "export.py", tmp_path, "--config", config, "--tp", "6", "--layers", "2",
        "--parts", "layers", "--bugs", "heads_reshape_wrong_factor",
    )  # fmt: skip
    code, report = verify(cli, tmp_path, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]
    assert report["stats"]["egraph_nodes"] < 5_000
    assert_caught_in(tmp_path, "tp_heads_reshape_wrong_factor", "heads_reshape_wrong_factor")


@pytest.mark.slow
def test_the_whole_8b_model_padded_at_tp6_verifies(cli, tmp_path):
    """Embedding, two padded layers, LM head and vocab-parallel loss: the vocabulary of
    128,256 divides by 6, the heads and the MLP width are padded."""
    export_example(
        LLAMA / "export.py", tmp_path, "--config", "8b", "--tp", "6", "--layers", "2",
        "--parts", "full", "--bugs", "none",
    )  # fmt: skip
    code, report = verify(cli, tmp_path, "tp")
    assert (code, report["verdict"]) == (0, "equivalent"), report["suspects"][:1]


def test_the_padded_program_computes_the_baseline(tmp_path):
    """The ground truth under the tp 6 proof: on real arrays, the converter's padded weights
    through the tensor-parallel body give the baseline's hidden states, and every exported
    bug changes them (examples/llama/check.py)."""
    result = subprocess.run(
        [sys.executable, str(LLAMA / "check.py"), "--tp", "6", "--parts", "full,layers"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0 and "all OK" in result.stdout, result.stdout + result.stderr


def test_padding_a_fused_weight_is_refused_with_a_message(tmp_path):
    """tp 6 would pad the heads, which the fused weights do not support: exit 2, saying so."""
    result = subprocess.run(
        [sys.executable, str(LLAMA / "export.py"), "--out", str(tmp_path), "--tp", "6",
         "--fused"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=6"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--fused, --qk-norm and --lookup one_hot need no padding" in result.stderr
    assert "Traceback" not in result.stderr
