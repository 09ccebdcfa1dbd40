"""EasyDeL's Llama (a JAX LLM library from the package index), sharded by its own partition
rules and partitioned by XLA's SPMD partitioner: the per-device program proved equivalent to
the global one at tensor 2 and 4 and on meshes of up to three axes (and Qwen3, Gemma2,
Mistral, Phi, Phi-3, OPT, Cohere2 and DeepSeek-V2 on three), and an all-reduce taken out
of the partitioned program caught. The programs are the `easydel/*.hlo.gz` pairs that
`easydel/export.py` dumps (EasyDeL needs a venv of its own; see there): the default
forward, whose positions come from a scan that stacks its outputs with a
dynamic-update-slice, and one given a mask and positions."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from scalify.verify import verify_files

HERE = Path(__file__).resolve().parent / "easydel"
RULES = Path(__file__).resolve().parents[2] / "rules"


CASES = {  # the stored pair -> EasyDeL's mesh (dp, fsdp, ep, tp, sp)
    "tp2": "dp=1,fsdp=1,ep=1,tp=2,sp=1",
    "tp4": "dp=1,fsdp=1,ep=1,tp=4,sp=1",
    "tp2_mask": "dp=1,fsdp=1,ep=1,tp=2,sp=1",
    "tp4_mask": "dp=1,fsdp=1,ep=1,tp=4,sp=1",
    # the batch over fsdp, the weights over fsdp and tp
    "fsdp2_tp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=1",
    # no mask: the positions come out of a scan over an all-ones mask at each program's own
    # batch size (a count per row, read as its value) and index RoPE's tables
    "fsdp2": "dp=1,fsdp=2,ep=1,tp=1,sp=1",  # EasyDeL's default mesh: fsdp over every device
    "fsdp2_tp2": "dp=1,fsdp=2,ep=1,tp=2,sp=1",
    "dp2": "dp=2,fsdp=1,ep=1,tp=1,sp=1",
    # sequence parallelism: the tokens split over sp, the weights over sp as well (EasyDeL's
    # rules), the keys and values gathered for attention; without a mask each device counts
    # its own positions in its share of the scan XLA split (a count from an offset picked on
    # the device's id, evaluated per device: its block of the whole count)
    "sp2": "dp=1,fsdp=1,ep=1,tp=1,sp=2",
    "sp4": "dp=1,fsdp=1,ep=1,tp=1,sp=4",
    "sp2_mask": "dp=1,fsdp=1,ep=1,tp=1,sp=2",
    "tp2_sp2": "dp=1,fsdp=1,ep=1,tp=2,sp=2",
    "tp2_sp2_mask": "dp=1,fsdp=1,ep=1,tp=2,sp=2",
    # the weights split over fsdp and sp at once (one dim over two axes), gathered over both
    "fsdp2_sp2": "dp=1,fsdp=2,ep=1,tp=1,sp=2",
    # three axes: the vocab split over fsdp and sp, which tp separates in the device order
    # (each device's offset into it is a table over the device id, 64 * (2 c_fsdp + c_sp));
    # the ids exchanged between the tp and sp devices by a collective-permute, and the
    # local index and its mask computed on the tp block of the sequence, then all-gathered
    "fsdp2_tp2_sp2": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    "fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # the same over dp: the offset is a table indexed by another table of the device id
    "dp2_tp2_sp2": "dp=2,fsdp=1,ep=1,tp=2,sp=2",
    "dp2_tp2_sp2_mask": "dp=2,fsdp=1,ep=1,tp=2,sp=2",
    # fewer KV heads than tensor devices (`--config '{"num_key_value_heads": 2}'`): each KV
    # head held by a group of tp / 2 devices (a table over the device id picks the group's
    # head), the query heads grouped by KV head split over the two sub-axes of tp (which
    # group, where in it); at tp 8 one query head a device
    "kv2_tp4_mask": "dp=1,fsdp=1,ep=1,tp=4,sp=1",
    "kv2_tp8_mask": "dp=1,fsdp=1,ep=1,tp=8,sp=1",
    "kv2_fsdp2_tp4_mask": "dp=1,fsdp=2,ep=1,tp=4,sp=1",
    # other families on three axes (`export.py --family`): Qwen3's RMSNorm on each head's q
    # and k, Gemma2's logit soft-capping, sandwich norms and scaled embedding, Mistral
    "qwen3_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    "gemma2_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    "mistral_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # ... and with its sliding window (`--config '{"sliding_window": 4}'`): the window's
    # positions broadcast to the device's one row of the batch, split over fsdp, where the
    # baseline broadcasts them to both rows
    "mistral_sw4_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # Phi-3's fused [q | k | v] and [gate | up] products split over tp as one block: XLA
    # reshards each part with windows handed between the tp devices (device_windows.py)
    "phi3_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # ... and at tp 4 (`--dims 1,1,1,4,1`): q's half of the fused product is two devices'
    # blocks, so each device's quarter of q is a window of one of them: XLA hands whole
    # blocks and a window padded back to a block's width between devices, and picks among
    # them by tables over the device id
    "phi3_tp4_mask": "dp=1,fsdp=1,ep=1,tp=4,sp=1",
    # Gemma 4 at tp 4 (its own config, below): each layer's input taken at a constant layer
    # index of a dim split over a sub-axis of tp, as XLA writes it (one device of each group
    # keeps its block, maybe handed on by a permute, the others zeros, an all-reduce over
    # the group), and norms completed by an all-reduce over the sub-axis's groups
    "gemma4_tp4_mask": "dp=1,fsdp=1,ep=1,tp=4,sp=1",
    # Mixtral's experts computed densely (`--config '{"num_local_experts": 4,
    # "num_experts_per_tok": 2, "moe_method": "dense_moe"}'`): the tokens' rows, split over
    # fsdp and sp as one, split back into a device's one row of the batch and its block of
    # the sequence
    "mixtral_dense_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # ... and its routed experts at tp 4 (`"moe_method": "standard_moe"`): tokens argsorted
    # by expert (a sort), then ejkernel's grouped matmul over each expert's run of rows
    "mixtral_routed_tp4_mask": "dp=1,fsdp=1,ep=1,tp=4,sp=1",
    # Phi's LayerNorm on activations split over tp along the hidden dim: `rsqrt` times the
    # scale, both broadcast, sized only by the centred input they multiply
    "phi_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # DeepSeek-V2's latent attention (`--config '{"first_k_dense_replace": 2}'`: its dense
    # layers; the MoE ones dispatch with ragged-all-to-all): the latent `[kv | rope]`
    # product cut where no device's block ends (windows handed over, a span of two blocks),
    # each head written into zeros part by part, YaRN's float position counts, the RoPE
    # table resharded from columns to rows by all-to-all, and a causal mask whose two
    # broadcast counts meet only each other
    "deepseekv2_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # OPT (LayerNorm, learned positions): its MLP merges batch x sequence into rows, a
    # device's one row of the batch (fsdp) and its block of positions (sp) merged being its
    # block of the baseline's rows over fsdp, then sp
    "opt_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    # Cohere2's interleaved RoPE: cos and sin broadcast across each device's heads, then
    # stacked with a unit dim (its moved form broadcasts to the stacked shape directly)
    "cohere2_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_partitioned_llama_is_proved(case):
    """`_mask`: given an attention mask and positions, as training batches pass them; the
    mask is broadcast to each device's KV heads and then to the query heads of each."""
    report = verify_files(
        str(HERE / f"{case}_baseline.hlo.gz"),
        str(HERE / f"{case}_dist.hlo.gz"),
        RULES,
        mesh=CASES[case],
    )
    assert report.verdict == "equivalent", [(s.node, s.reason) for s in report.suspects[:2]]


def test_an_all_reduce_taken_out_is_caught(tmp_path):
    """The first all-reduce of the program (completing an RMSNorm's sum of squares over the
    tensor devices) replaced by its operand."""
    text = gzip.decompress((HERE / "tp2_dist.hlo.gz").read_bytes()).decode()
    reduction = re.compile(r"all-reduce\((%[\w.\-]+)\), channel_id=\d+, replica_groups=[^\n]*?")
    first = reduction.search(text)
    assert first is not None
    line_end = text.index("\n", first.start())
    line = text[first.start() : line_end]
    broken_line = re.sub(r"all-reduce\((%[\w.\-]+)\).*?(?=, metadata=)", r"copy(\1)", line)
    broken = tmp_path / "dist.hlo"
    broken.write_text(text[: first.start()] + broken_line + text[line_end:])
    report = verify_files(
        str(HERE / "tp2_baseline.hlo.gz"), str(broken), RULES, mesh="dp=1,fsdp=1,ep=1,tp=2,sp=1"
    )
    assert report.verdict == "not_equivalent"
    assert "all-reduce over tp missing" in report.suspects[0].reason, report.suspects[0].reason


def test_a_lookup_reduced_over_one_of_its_two_axes_is_caught(tmp_path):
    """fsdp 2 x sp 2: the embedding is split over both axes at once, so each device's lookup
    is a partial sum over the two (read one axis after the other); its all-reduce narrowed
    to the sp devices only leaves it partial over fsdp."""
    text = gzip.decompress((HERE / "fsdp2_sp2_dist.hlo.gz").read_bytes()).decode()
    whole = "replica_groups=mesh['axis_0'=4,'axis_1'=1] {'axis_0'}"
    first = text.index("all-reduce(")
    line_end = text.index("\n", first)
    assert whole in text[first:line_end]  # the lookup's all-reduce, over all four devices
    narrowed = text[first:line_end].replace(whole, "replica_groups={{0,1},{2,3}}")
    broken = tmp_path / "dist.hlo"
    broken.write_text(text[:first] + narrowed + text[line_end:])
    mesh = CASES["fsdp2_sp2"]
    report = verify_files(str(HERE / "fsdp2_sp2_baseline.hlo.gz"), str(broken), RULES, mesh=mesh)
    assert report.verdict == "not_equivalent"
    assert "fsdp" in report.suspects[0].reason, report.suspects[0].reason


def test_vocab_offsets_counted_over_the_axes_in_the_wrong_order_are_caught(tmp_path):
    """fsdp 2 x tp 2 x sp 2: each device's offset into the vocab is 64 * (2 c_fsdp + c_sp),
    a table over the device id. Counted with sp the more significant axis (each device then
    looks up another device's block of the table) the lookup is wrong, and caught there."""
    right = "constant({0, 64, 0, 64, 128, 192, 128, 192})"
    wrong = "constant({0, 128, 0, 128, 64, 192, 64, 192})"
    report = _verify_edited("fsdp2_tp2_sp2", right, wrong, tmp_path)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.file.startswith("easydel/layers/embeddings/"), (first.file, first.reason)


@pytest.mark.parametrize(
    "right, wrong",
    [
        # v's first window sent from tp 0 to tp 1 instead of from tp 1 to tp 0
        (
            "collective-permute(%slice.12), channel_id=23, "
            "source_target_pairs={{2,0},{3,1},{6,4},{7,5}}",
            "collective-permute(%slice.12), channel_id=23, "
            "source_target_pairs={{0,2},{1,3},{4,6},{5,7}}",
        ),
        # k's offset into the joined windows: 96 - 96 c_tp counted as 96 + 96 c_tp
        (
            "multiply(%reshape.135, %constant.115)",
            "multiply(%reshape.135, %constant.116)",
        ),
    ],
    ids=["permute_reversed", "offset_sign"],
)
def test_a_wrong_reshard_of_the_fused_parts_is_caught_at_the_cut(tmp_path, right, wrong):
    """One edit to how XLA hands Phi-3's q, k, v windows between the tp devices: caught at
    the model's line that cuts the fused product."""
    text = gzip.decompress((HERE / "phi3_fsdp2_tp2_sp2_mask_dist.hlo.gz").read_bytes()).decode()
    assert text.count(right) == 1
    broken = tmp_path / "dist.hlo"
    broken.write_text(text.replace(right, wrong))
    mesh = CASES["phi3_fsdp2_tp2_sp2_mask"]
    baseline = str(HERE / "phi3_fsdp2_tp2_sp2_mask_baseline.hlo.gz")
    report = verify_files(baseline, str(broken), RULES, mesh=mesh)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.file == "easydel/modules/phi3/modeling_phi3.py", (first.file, first.reason)


PHI3 = "easydel/modules/phi3/modeling_phi3.py"
GEMMA4 = "easydel/modules/gemma4/modeling_gemma4.py"
WINDOW = "easydel/layers/attention/_flexible.py"
# (case, the text in its partitioned module, its replacement, the file and line (None: any
# line) the first suspect must name)
EDITS = {
    # Phi-3 at tp 4: q's window handed to device 3 from device 0 instead of device 1
    "window_from_wrong_device": (
        "phi3_tp4_mask",
        "collective-permute(%slice.22), channel_id=10, source_target_pairs={{1,3}}",
        "collective-permute(%slice.22), channel_id=10, source_target_pairs={{0,3}}",
        (PHI3, 287),
    ),
    # ... and device 2 cutting its window at the second half of the block it received
    "window_offset": (
        "phi3_tp4_mask",
        "s32[4]{0} constant({0, 32, 0, 32})",
        "s32[4]{0} constant({0, 32, 32, 32})",
        (PHI3, 287),
    ),
    # Gemma 4's `per_layer_inputs[:, :, idx, :]`: layer 1's input handed from the devices
    # of group 0 instead of group 1
    "block_from_wrong_group": (
        "gemma4_tp4_mask",
        "collective-permute(%mul.606), channel_id=24, source_target_pairs={{2,0},{3,1}}",
        "collective-permute(%mul.606), channel_id=24, source_target_pairs={{0,2},{1,3}}",
        (GEMMA4, 2574),
    ),
    # ... and the kept device chosen by its place in the group, not by its group
    "kept_by_wrong_sub_axis": (
        "gemma4_tp4_mask",
        "u32[4]{0} constant({0, 0, 1, 1})",
        "u32[4]{0} constant({0, 1, 0, 1})",
        (GEMMA4, 2574),
    ),
    # Mistral's sliding window of 4 made 3 on the devices, and the device's first query
    # position counted in blocks of 4 instead of its block of 8
    "window_narrowed": (
        "mistral_sw4_fsdp2_tp2_sp2_mask",
        "%constant.48.clone = s32[] constant(4)",
        "%constant.48.clone = s32[] constant(3)",
        (WINDOW, 1052),
    ),
    "window_positions_offset": (
        "mistral_sw4_fsdp2_tp2_sp2_mask",
        "%constant.98 = s32[] constant(8), metadata",
        "%constant.98 = s32[] constant(4), metadata",
        (WINDOW, 1052),
    ),
    # Mixtral's routed experts: the all-reduce completing a grouped product taken out,
    # caught with a counterexample now that the routing's argsort is simulated
    "routed_experts_unreduced": (
        "mixtral_routed_tp4_mask",
        "%all-reduce.3 = bf16[64,128]{1,0} all-reduce(%dot.10), channel_id=9, "
        "replica_groups=mesh['axis_0'=1,'axis_1'=4] {'axis_1'}, use_global_device_ids=true, "
        "to_apply=%add.1.clone",
        "%all-reduce.3 = bf16[64,128]{1,0} copy(%dot.10)",
        ("ejkernel/kernels/_xla/grouped_matmul/_xla_impl_fwd.py", 128),
    ),
    # Mixtral's dense experts: the all-reduce completing their down projection taken out
    "experts_unreduced": (
        "mixtral_dense_fsdp2_tp2_sp2_mask",
        "%all-reduce.6 = f32[8,2,128]{2,1,0} all-reduce(%dot.10), channel_id=45, "
        "replica_groups=[4,2]<=[2,2,2]T(0,2,1), use_global_device_ids=true, to_apply=%add.3.clone",
        "%all-reduce.6 = f32[8,2,128]{2,1,0} copy(%dot.10)",
        ("easydel/layers/moe/_moe_module.py", None),
    ),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_one_line_edit_is_caught_at_the_librarys_line(tmp_path, edit):
    case, right, wrong, (file, line) = EDITS[edit]
    report = _verify_edited(case, right, wrong, tmp_path)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.file == file and line in (None, first.line), first


@pytest.mark.parametrize("case", ["phi_fsdp2_tp2_sp2_mask", "opt_fsdp2_tp2_sp2_mask"])
def test_a_layernorm_scale_cut_on_the_wrong_axis_is_caught(tmp_path, case):
    """Phi's and OPT's LayerNorm scale, replicated, cut per device by an offset table that
    follows sp instead of tp: caught at the norm's line, whose two broadcast factors carry
    different layouts."""
    right = "u32[8]{0} constant({0, 0, 1, 1, 0, 0, 1, 1})"
    wrong = "u32[8]{0} constant({0, 1, 0, 1, 0, 1, 0, 1})"
    report = _verify_edited(case, right, wrong, tmp_path)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert (first.file, first.line) == ("easydel/layers/norms/_norms.py", 708), first.reason


def _verify_edited(case: str, right: str, wrong: str, tmp_path):
    """The stored pair `case` verified with the one occurrence of `right` in its partitioned
    module replaced by `wrong`."""
    text = gzip.decompress((HERE / f"{case}_dist.hlo.gz").read_bytes()).decode()
    assert text.count(right) == 1
    broken = tmp_path / "dist.hlo"
    broken.write_text(text.replace(right, wrong))
    baseline = str(HERE / f"{case}_baseline.hlo.gz")
    return verify_files(baseline, str(broken), RULES, mesh=CASES[case])


@pytest.mark.parametrize(
    "right, wrong, line",
    [
        # the rope part of each key written at another offset of the head
        ("s32[1]{0} constant({128})", "s32[1]{0} constant({96})", 1384),
        # the latent product's window handed the other way between the tp devices
        (
            "collective-permute(%slice.24), channel_id=23, source_target_pairs={{0,2},{1,3},"
            "{4,6},{5,7}}",
            "collective-permute(%slice.24), channel_id=23, source_target_pairs={{2,0},{3,1},"
            "{6,4},{7,5}}",
            1233,
        ),
    ],
    ids=["rope_part_offset", "window_reversed"],
)
def test_a_wrong_write_or_window_of_deepseek_attention_is_caught(tmp_path, right, wrong, line):
    report = _verify_edited("deepseekv2_fsdp2_tp2_sp2_mask", right, wrong, tmp_path)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert (first.file, first.line) == ("easydel/layers/attention/_unified.py", line), first.reason


@pytest.mark.parametrize("case", ["kv2_tp4_mask", "kv2_tp8_mask"])
def test_a_kv_head_read_by_the_wrong_group_is_caught(tmp_path, case):
    """The table that gives each device its group's KV head counted by the device's place
    in its group instead (r % g for r // g): caught in the attention that reads it."""
    right, wrong = {
        "kv2_tp4_mask": ("constant({0, 0, 1, 1})", "constant({0, 1, 0, 1})"),
        "kv2_tp8_mask": (
            "constant({0, 0, 0, 0, 1, 1, 1, 1})",
            "constant({0, 1, 0, 1, 0, 1, 0, 1})",
        ),
    }[case]
    report = _verify_edited(case, right, wrong, tmp_path)
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.file == "ejkernel/kernels/_xla/attention/_xla_impl_fwd.py", first.reason
