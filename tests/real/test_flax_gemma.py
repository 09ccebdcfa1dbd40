"""Flax's own Gemma example (examples/gemma of flax's source distribution, unchanged),
sharded as its train.py shards it and partitioned by XLA's SPMD partitioner: the per-device
program is proved equivalent to the global one on tensor and fsdp x tensor meshes, and a
reduction removed from the partitioned program is caught."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from real_support import require

require("flax", "jaxtyping")

from scalify.verify import verify_files  # noqa: E402

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "rules"
CASES = {
    "tensor2": ("fsdp=1,tensor=2", []),
    # 4 KV heads: one per device, whose head dim XLA leaves at size 1 (RoPE's cos and sin
    # then meet the keys without the baseline's broadcast across heads)
    "tensor4": ("fsdp=1,tensor=4", []),
    # 4 heads and 4 KV heads: one q head per device
    "tensor4_one_head": ("fsdp=1,tensor=4", ["--heads", "4", "--kv-heads", "4"]),
    # 16 heads and 8 KV heads: two of each per device
    "tensor4_h16": ("fsdp=1,tensor=4", ["--heads", "16", "--kv-heads", "8"]),
    # one KV head (multi-query) read by every device's 2 q heads (fewer KV heads than
    # devices otherwise: the example's own KV cache spec splits the KV heads over tensor,
    # which JAX refuses when they do not divide)
    "tensor4_mqa": ("fsdp=1,tensor=4", ["--heads", "8", "--kv-heads", "1"]),
    # batch over fsdp, heads over tensor: the token ids move from fsdp to tensor devices by
    # a collective permute and are looked up in a vocab-parallel table whose embedding dim
    # is split over fsdp; the batch dim is one entry per device beside the model's own
    # size-1 dims
    "fsdp2_tensor2": ("fsdp=2,tensor=2", []),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    made: dict[str, Path] = {}

    def export(case: str) -> Path:
        if case not in made:
            mesh, options = CASES[case]
            out = tmp_path_factory.mktemp(case)
            command = [sys.executable, str(HERE / "flax_gemma.py"), str(out), "--mesh", mesh]
            subprocess.run(command + options, check=True, capture_output=True)
            made[case] = out
        return made[case]

    return export


@pytest.mark.parametrize("case", list(CASES))
def test_the_partitioned_gemma_is_proved(exported, case):
    out = exported(case)
    mesh = CASES[case][0]
    report = verify_files(str(out / "baseline.hlo"), str(out / "dist.hlo"), RULES, mesh=mesh)
    assert report.verdict == "equivalent", [(s.node, s.reason) for s in report.suspects[:2]]


def test_a_reduction_taken_out_of_the_partitioned_program_is_caught(exported, tmp_path):
    """The all-reduce that completes a sum over the tensor devices (an RMSNorm's mean of
    squares, say) replaced by its operand."""
    out = exported("tensor2")
    text = (out / "dist.hlo").read_text()
    reduction = re.compile(
        r"all-reduce\((%[\w.\-]+)\), channel_id=\d+, replica_groups=[^\n]*?"
        r"to_apply=%[\w.\-]+(?=, metadata=\{op_name=\"[^\"]*reduce_sum)"
    )
    broken = tmp_path / "dist.hlo"
    broken.write_text(reduction.sub(r"copy(\1)", text, count=1))
    assert broken.read_text() != text
    report = verify_files(str(out / "baseline.hlo"), str(broken), RULES, mesh=CASES["tensor2"][0])
    assert report.verdict == "not_equivalent"
    assert "all-reduce over tensor missing" in report.suspects[0].reason


def test_the_embedding_gradient_is_proved(tmp_path):
    """`jax.grad` of Flax's own embedder, partitioned by XLA: both programs' scatter-adds of
    rows are read as one-hot products (`one_hot(ids)^T g`), none stays an opaque scatter; the
    partitioned program's ids, shifted into the device's block behind JAX's negative-index
    wrap and a unit dim, make the device's slice of the one-hot; the gradients of the
    weights the loss never reads are zeros in both."""
    from scalify.frontends import load_graph

    command = [sys.executable, str(HERE / "flax_gemma.py"), str(tmp_path), "--mesh"]
    command += ["fsdp=1,tensor=2", "--part", "embed_grad"]
    subprocess.run(command, check=True, capture_output=True)
    for name in ("baseline.hlo", "dist.hlo"):
        ops = {n.op for n in load_graph(str(tmp_path / name)).nodes.values()}
        assert "scatter" not in ops and "dot" in ops, (name, sorted(ops))
    report = verify_files(
        str(tmp_path / "baseline.hlo"), str(tmp_path / "dist.hlo"), RULES, mesh="tensor=2"
    )
    assert report.verdict == "equivalent", [o for o in report.outputs if not o.ok]
    assert report.outputs[0].proven == "shard(0, tensor)"


def test_an_embedding_gradient_added_at_the_global_rows_is_caught(tmp_path):
    """The partitioned program's shift of the ids into the device's block taken out: every
    device adds the rows of the first block's tokens into its own block."""
    command = [sys.executable, str(HERE / "flax_gemma.py"), str(tmp_path), "--mesh"]
    command += ["fsdp=1,tensor=2", "--part", "embed_grad"]
    subprocess.run(command, check=True, capture_output=True)
    text = (tmp_path / "dist.hlo").read_text()
    shift = re.compile(r"(%[\w.\-]+ = s32\[[\d,]+\]\{[\d,]+\}) subtract\((%[\w.\-]+), %[\w.\-]+\)")
    broken = tmp_path / "broken.hlo"
    broken.write_text(shift.sub(r"\1 copy(\2)", text, count=1))
    assert broken.read_text() != text
    report = verify_files(str(tmp_path / "baseline.hlo"), str(broken), RULES, mesh="tensor=2")
    assert report.verdict == "not_equivalent"
    assert report.suspects[0].op == "one_hot" and report.suspects[0].file.endswith("modules.py")
