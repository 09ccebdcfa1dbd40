"""Training steps as frameworks' own autograd records them: the forward, the loss and the
backward traced together, every weight's gradient an output held to that weight's layout.

transformers' LlamaForCausalLM under its own tensor-parallel plan and a module parallelised
with PyTorch's `parallelize_module` are proved whole; a Megatron-style block written with
functional collectives (sequence parallel, the norm weight's gradient all-reduced by hand, as
Megatron's `finalize_model_grads` does) is proved, and the published bug of leaving that
all-reduce out (Megatron-LM #1446) is caught at the line that returns the gradient."""

from __future__ import annotations

import copy

import pytest
import torch
from hf_llama import train_step
from real_support import require

from scalify.api import check_equivalent, fake_mesh


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32, bias=False)
        self.down = torch.nn.Linear(32, 16, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def squared(model, x):
    return model(x).square().sum()


def _column_then_row_parallel() -> tuple[MLP, MLP, object]:
    """(baseline, the same MLP parallelised by `parallelize_module`, the mesh)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    baseline = MLP()
    model = copy.deepcopy(baseline)
    mesh = fake_mesh("tp=2")
    parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    return baseline, model, mesh


def test_a_parallelize_module_training_step_is_proved():
    baseline, model, mesh = _column_then_row_parallel()
    x = torch.randn(4, 16)
    report = check_equivalent(
        train_step(baseline, squared), train_step(model, squared), mesh=mesh, example_inputs=(x,)
    )
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    layouts = [(o.expected, o.proven) for o in report.outputs]
    assert layouts == [("replicate",) * 2, ("shard(0, tp)",) * 2, ("shard(1, tp)",) * 2]


@pytest.mark.parametrize("optimizer_class", ["SGD", "AdamW"])
def test_an_optimizer_step_leaves_each_weight_in_its_layout(optimizer_class):
    """One optimizer step: the weights `step()` updates in place are the outputs (AdamW's
    moments are made in the step and written back with `copy_`)."""
    baseline, model, mesh = _column_then_row_parallel()

    def sgd_step(m):
        weights = list(m.parameters())
        optimizer = getattr(torch.optim, optimizer_class)(weights, lr=0.1)

        def step(x):
            loss = squared(m, x)
            loss.backward()
            optimizer.step()
            return loss, weights

        return step

    x = torch.randn(4, 16)
    report = check_equivalent(sgd_step(baseline), sgd_step(model), mesh=mesh, example_inputs=(x,))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    assert [o.proven for o in report.outputs] == ["replicate", "shard(0, tp)", "shard(1, tp)"]


@pytest.mark.slow
def test_llama_training_step_with_its_own_plan_is_proved(tmp_path):
    require("transformers", "accelerate")
    from hf_llama import check_training_step, load, save_tiny_llama

    baseline, model, mesh = load(save_tiny_llama(tmp_path / "tiny-llama"))
    report = check_training_step(baseline, model, mesh)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    weights = [n for n, p in baseline.named_parameters() if p.requires_grad]
    assert len(report.outputs) == 1 + len(weights)
    assert all(o.ok for o in report.outputs)
    assert {o.expected for o in report.outputs} == {"replicate", "shard(0, tp)", "shard(1, tp)"}


@pytest.mark.slow
@pytest.mark.parametrize("clip", ["", "whole"], ids=["no_clip", "clip_by_whole_norm"])
def test_llama_optimizer_step_with_torch_adamw_is_proved(tmp_path, clip):
    """transformers' Llama with its own TP plan, a whole step of a training loop: loss,
    backward, a hand-written clip by the norm of every whole gradient, and
    `torch.optim.AdamW.step()` (foreach, over DTensor shards); every updated weight proved
    in its layout."""
    require("transformers", "accelerate")
    from hf_llama import load, save_tiny_llama

    baseline, model, mesh = load(save_tiny_llama(tmp_path / "tiny-llama"))
    report = _optimizer_step_report(baseline, model, mesh, clip, clip)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


@pytest.mark.slow
def test_gradients_clipped_by_each_devices_own_norm_are_caught(tmp_path):
    """The same loop whose clip sums the norms of each device's shards (`to_local()`): right
    on one device, wrong under TP, where a sharded gradient's norm is only a part. Caught
    at the line that adds the norms: a partial sum over tp added to complete ones."""
    require("transformers", "accelerate")
    from hf_llama import load, save_tiny_llama

    baseline, model, mesh = load(save_tiny_llama(tmp_path / "tiny-llama"))
    report = _optimizer_step_report(baseline, model, mesh, "local", "local")
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert first.file.endswith("hf_llama.py") and "partial sum over tp" in first.reason, (
        first.file,
        first.reason,
    )


def _optimizer_step_report(baseline, model, mesh, base_clip: str, dist_clip: str):
    from hf_llama import VOCAB, causal_lm_loss, optimizer_step, token_ids

    from scalify.api import check_equivalent

    labels = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(3))
    return check_equivalent(
        optimizer_step(baseline, causal_lm_loss, base_clip),
        optimizer_step(model, causal_lm_loss, dist_clip),
        mesh=mesh,
        example_inputs=(token_ids(), labels),
    )


# ---- a Megatron-style block written with functional collectives, sequence parallel


class _GatherSequence(torch.autograd.Function):
    """Megatron's gather_from_sequence_parallel_region: all-gather forward, reduce-scatter
    backward."""

    @staticmethod
    def forward(ctx, x, group):
        from torch.distributed import _functional_collectives as funcol

        ctx.group = group
        return funcol.all_gather_tensor(x, 0, group)

    @staticmethod
    def backward(ctx, grad):
        from torch.distributed import _functional_collectives as funcol

        return funcol.reduce_scatter_tensor(grad, "sum", 0, ctx.group), None


class _ScatterSequence(torch.autograd.Function):
    """Megatron's reduce_scatter_to_sequence_parallel_region: reduce-scatter forward,
    all-gather backward."""

    @staticmethod
    def forward(ctx, x, group):
        from torch.distributed import _functional_collectives as funcol

        ctx.group = group
        return funcol.reduce_scatter_tensor(x, "sum", 0, group)

    @staticmethod
    def backward(ctx, grad):
        from torch.distributed import _functional_collectives as funcol

        return funcol.all_gather_tensor(grad, 0, ctx.group), None


class Block(torch.nn.Module):
    """RMSNorm then an MLP; with `group`, sequence parallel around a tensor-parallel MLP
    (each device holds its columns of `up` and rows of `down`)."""

    def __init__(self, width: int = 16, hidden: int = 32, group=None, tp: int = 1) -> None:
        super().__init__()
        self.norm = torch.nn.Parameter(torch.ones(width))
        self.up = torch.nn.Linear(width, hidden // tp, bias=False)
        self.down = torch.nn.Linear(hidden // tp, width, bias=False)
        self.group = group

    def forward(self, x):
        x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * self.norm
        if self.group is not None:
            x = _GatherSequence.apply(x, self.group)
        x = self.down(torch.relu(self.up(x)))
        if self.group is not None:
            x = _ScatterSequence.apply(x, self.group)
        return x


def _megatron_step(model: Block, reduce_norm_grad: bool):
    """A training step as Megatron runs it: backward, then `finalize_model_grads`
    all-reduces the gradients of the weights that sequence parallelism leaves partial
    (the norm's), since each device saw only its part of the sequence."""
    from torch.distributed import _functional_collectives as funcol

    weights = list(model.parameters())

    def step(x):
        loss = model(x).square().sum()
        loss.backward()
        if reduce_norm_grad:
            model.norm.grad = funcol.all_reduce(model.norm.grad, "sum", model.group)
        return loss, [p.grad for p in weights]

    return step


def _check_megatron(reduce_norm_grad: bool):
    tp = 2
    mesh = fake_mesh(f"tp={tp}")
    group = mesh.get_group("tp")
    torch.manual_seed(0)
    baseline = Block()
    model = Block(group=group, tp=tp)
    with torch.no_grad():
        model.up.weight.copy_(baseline.up.weight[: 32 // tp])
        model.down.weight.copy_(baseline.down.weight[:, : 32 // tp])
    x = torch.randn(8, 16)

    def baseline_step(x):
        loss = baseline(x).square().sum()
        loss.backward()
        return loss, [p.grad for p in baseline.parameters()]

    return check_equivalent(
        baseline_step,
        _megatron_step(model, reduce_norm_grad),
        mesh=mesh,
        example_inputs=(x,),
        parallel_inputs=(x[: 8 // tp],),
        relations={
            "inputs": {"x": "shard(0, tp)"},
            "outputs": ["partial(sum, tp)", None, None, None],
        },
    )


def test_a_sequence_parallel_training_step_with_functional_collectives_is_proved():
    report = _check_megatron(reduce_norm_grad=True)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    told = report.relations["outputs"]
    assert told[1:] == [
        "output 1: replicate (the layout of input norm)",
        "output 2: shard(0, tp) (the layout of input up_weight)",
        "output 3: shard(1, tp) (the layout of input down_weight)",
    ], told


def test_the_norm_gradient_left_partial_is_caught():
    """Megatron-LM #1446 (Entangle's bug 9): under sequence parallelism the norm weights'
    gradients were not all-reduced, so each device trained its norm on its own tokens."""
    report = _check_megatron(reduce_norm_grad=False)
    assert report.verdict == "not_equivalent"
    assert report.outputs[1].proven.startswith("partial(sum, tp)"), report.outputs[1]
    assert report.counterexample
    first = report.suspects[0]  # at the line that computed the gradient left unreduced
    assert "an all-reduce over tp is missing" in first.reason, first.reason
    assert (first.file.endswith("test_training.py"), first.line) == (
        True,
        _line("loss.backward()", "_megatron_step"),
    ), first


def _line(text: str, after: str = "") -> int:
    """The line of this file holding `text` (the first one after the line holding `after`)."""
    lines = open(__file__).read().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines[start:], start + 1) if text in line)


# ---- data parallel: gradients all-reduced by hand


def _ddp_check(grad_reduce: str, loss_scale: str = "global", dp: int = 2):
    """Each device's batch shard, its gradients all-reduced with `grad_reduce`. With
    `loss_scale="global"` the loss is summed and divided by the global number of elements
    (torchtitan's `global_valid_tokens`): "sum" is right, "avg" divides by the data-parallel
    size a second time. With "local" the loss is each device's own mean (PyTorch DDP's
    usual step): "avg" is right, "sum" leaves the gradients dp times too large."""
    from torch.distributed import _functional_collectives as funcol

    mesh = fake_mesh(f"dp={dp}")
    group = mesh.get_group("dp")
    torch.manual_seed(0)
    baseline = MLP()
    model = copy.deepcopy(baseline)
    x = torch.randn(4 * dp, 16)

    def baseline_step(x):
        loss = baseline(x).square().mean()
        loss.backward()
        return loss, [p.grad for p in baseline.parameters()]

    def ddp_step(x):
        if loss_scale == "global":
            loss = model(x).square().sum() / x.new_tensor(float(4 * dp * 16))
        else:
            loss = model(x).square().mean()
        loss.backward()
        for weight in model.parameters():
            weight.grad = funcol.all_reduce(weight.grad, grad_reduce, group)
        total = funcol.all_reduce(loss.detach(), "sum" if loss_scale == "global" else "avg", group)
        return total, [p.grad for p in model.parameters()]

    return check_equivalent(
        baseline_step,
        ddp_step,
        mesh=mesh,
        example_inputs=(x,),
        parallel_inputs=(x[:4],),
        relations={"inputs": {"x": "shard(0, dp)"}},
    )


def test_a_data_parallel_step_normalised_by_the_global_count_is_proved():
    report = _ddp_check("sum")
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


@pytest.mark.parametrize("dp", [2, 3])
def test_a_data_parallel_step_averaging_local_means_is_proved(dp):
    """Each device's mean holds 1/(4*16) where the baseline's holds 1/(4*dp*16); the
    average's division by dp meets it (at dp 3 to the nearest float, as the baseline holds
    1/192)."""
    report = _ddp_check("avg", loss_scale="local", dp=dp)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    assert [o.proven for o in report.outputs] == ["replicate"] * 3


def test_gradients_averaged_twice_are_caught():
    report = _ddp_check("avg")
    assert report.verdict == "not_equivalent"
    first = report.suspects[0]
    assert "wrong group size" in first.reason, first.reason
    line = _line("funcol.all_reduce(weight.grad, grad_reduce, group)")
    assert (first.file.endswith("test_training.py"), first.line) == (True, line), first


def test_local_mean_gradients_summed_not_averaged_are_caught():
    """Each gradient is proved to be exactly dp times the baseline's: the report says so at
    the all-reduce that should have averaged."""
    report = _ddp_check("sum", loss_scale="local")
    assert report.verdict == "not_equivalent"
    assert [o.ok for o in report.outputs] == [True, False, False]
    assert report.counterexample
    first = report.suspects[0]
    assert "exactly 2x the baseline's" in first.reason, first.reason
    assert "an average, not a sum, was meant" in first.reason, first.reason
    line = _line("funcol.all_reduce(weight.grad, grad_reduce, group)")
    assert (first.op, first.line) == ("all_reduce", line), first


# ---- a vocab-parallel cross-entropy with its own backward


def test_torchtitans_vocab_parallel_cross_entropy_and_its_backward_are_proved():
    """torchtitan's `_LossParallelCrossEntropy` (three all-reduces forward, a hand-written
    backward putting -1 at each row's target in its vocab block) against autograd's
    `F.cross_entropy` on the whole vocabulary: the loss and the logits' gradient."""
    require("torchtitan", "spmd_types")
    from torchtitan.components.loss import _LossParallelCrossEntropy

    vocab, tp = 256, 2
    mesh = fake_mesh(f"tp={tp}")
    torch.manual_seed(0)
    logits = torch.randn(16, vocab)
    baseline = _Logits(logits)
    model = _Logits(logits[:, : vocab // tp])

    def baseline_step(labels):
        loss = torch.nn.functional.cross_entropy(baseline.z, labels, reduction="sum")
        loss.backward()
        return loss, baseline.z.grad

    def parallel_step(labels):
        loss = _LossParallelCrossEntropy.apply(model.z, labels, mesh.get_group("tp"), vocab)
        loss.backward()
        return loss, model.z.grad

    labels = torch.randint(0, vocab, (16,), generator=torch.Generator().manual_seed(2))
    report = check_equivalent(baseline_step, parallel_step, mesh=mesh, example_inputs=(labels,))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    assert [o.proven for o in report.outputs] == ["replicate", "shard(1, tp)"]
    assert any("assumed: input `labels`" in n for n in report.notes), report.notes


class _Logits(torch.nn.Module):
    def __init__(self, z: torch.Tensor) -> None:
        super().__init__()
        self.z = torch.nn.Parameter(z.clone())


# ---- torchtitan's own Llama3 training step


def _titan_step(tp: int, sp: bool, fuse_qkv: bool = False):
    """torchtitan's model, plan, loss (`CrossEntropyLoss` with the global vocab size, its
    vocab-parallel path) and `loss.backward()`, as its trainer's forward-backward step runs
    them; the baseline is the same model and loss on one device."""
    require("torchtitan", "spmd_types")
    import contextlib

    import spmd_types
    from titan_models import SEQ, VOCAB, build, tokens
    from torchtitan.components.loss import CrossEntropyLoss

    baseline, model, mesh, context = build(tp, sp=sp, fuse_qkv=fuse_qkv)
    loss_fn = CrossEntropyLoss(CrossEntropyLoss.Config(global_vocab_size=VOCAB))

    def step_of(m, run_in=contextlib.nullcontext):
        weights = list(m.parameters())

        def train_step(tokens, labels):
            with run_in():
                loss, _ = loss_fn(m(tokens), labels, torch.tensor(float(labels.numel())))
                with spmd_types.no_typecheck():
                    loss.backward()
                return loss, [p.grad for p in weights]

        return train_step

    labels = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(2))
    names = [n for n, _ in baseline.named_parameters()]
    return baseline, model, mesh, context, step_of, (tokens(), labels), names


@pytest.mark.slow
@pytest.mark.parametrize("fuse_qkv", [False, True], ids=["separate_qkv", "fused_qkv"])
def test_torchtitans_llama3_training_step_is_proved(fuse_qkv):
    """With the fused projection the gradient of each device's [q|k|v] block is the
    `torch.cat` of its three parts' gradients along the head-group dim."""
    baseline, model, mesh, context, step_of, inputs, _ = _titan_step(2, False, fuse_qkv)
    report = check_equivalent(
        step_of(baseline), step_of(model, context), mesh=mesh, example_inputs=inputs
    )
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    told = report.relations["outputs"]
    assert "output 1: shard(0, tp) (the layout of input tok_embeddings_weight)" in told, told[:2]


@pytest.mark.slow
def test_torchtitans_sequence_parallel_norm_gradients_are_left_partial():
    """Under sequence parallelism torchtitan's plan leaves each RMSNorm weight's gradient a
    partial sum over tp after `backward()` (its comment: the all-reduce is left to FSDP);
    Scalify says which gradients they are, and proves the step once they are stated so."""
    baseline, model, mesh, context, step_of, inputs, names = _titan_step(2, sp=True)
    report = check_equivalent(
        step_of(baseline), step_of(model, context), mesh=mesh, example_inputs=inputs
    )
    partial = {names[o.index - 1] for o in report.outputs if o.proven == "partial(sum, tp)"}
    assert partial == {n for n in names if "norm" in n}, partial
    stated = [None] + ["partial(sum, tp)" if "norm" in n else None for n in names]
    report = check_equivalent(
        step_of(baseline),
        step_of(model, context),
        mesh=mesh,
        example_inputs=inputs,
        relations={"outputs": stated},
    )
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


# ---- torchtitan's SimpleFSDP: fully sharded data parallel as its graph trainer captures it


def _titan_fsdp_step(local_token_count: bool, tp: int = 1):
    """torchtitan's Llama3 wrapped as its graph trainer's `apply_simple_fsdp` wraps it
    (SimpleFSDP's `data_parallel(..., "fully_shard")`: each weight a DTensor sharded on dim 0
    over the data-parallel axis (`dp_shard` under the spmd_types backend), all-gathered for the
    forward, its gradient reduce-scattered), one training step with torchtitan's loss divided
    by the number of tokens. The trainer divides by the global count (`global_valid_tokens`,
    all-reduced over the data-parallel devices); `local_token_count` divides each device's
    loss by its own count instead, the sum of the reduce-scatter leaving every gradient fsdp
    times too large."""
    require("torchtitan", "spmd_types")
    import contextlib

    import spmd_types
    from titan_models import SEQ, VOCAB, build
    from torchtitan.components.loss import CrossEntropyLoss

    baseline, model, mesh, context = build(tp, fsdp=2)
    loss_fn = CrossEntropyLoss(CrossEntropyLoss.Config(global_vocab_size=VOCAB))
    batch = 4

    def step_of(m, count, run_in=contextlib.nullcontext):
        weights = list(m.parameters())

        def train_step(tokens, labels):
            with run_in():
                loss, _ = loss_fn(m(tokens), labels, torch.tensor(float(count(labels))))
                with spmd_types.no_typecheck():
                    loss.backward()
            grads = [p.grad for p in weights]
            # with TP the loss is vocab-parallel and returned: its lookup at the labels is
            # what the labels' range is assumed from (the backward's one-hot needs none)
            return (loss, grads) if tp > 1 else grads

        return train_step

    def global_count(labels):
        return batch * SEQ

    def own_count(labels):
        return labels.numel()

    tokens = torch.randint(0, VOCAB, (batch, SEQ), generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, VOCAB, (batch, SEQ), generator=torch.Generator().manual_seed(2))
    relations: dict = {"inputs": {"tokens": "shard(0, dp_shard)", "labels": "shard(0, dp_shard)"}}
    if tp > 1:  # each device's loss is its share of the global sum until the trainer reduces it
        weights = len(list(baseline.parameters()))
        relations["outputs"] = ["partial(sum, dp_shard)"] + [None] * weights
    return check_equivalent(
        step_of(baseline, global_count),
        step_of(model, own_count if local_token_count else global_count, context),
        mesh=mesh,
        example_inputs=(tokens, labels),
        parallel_inputs=(tokens[: batch // 2], labels[: batch // 2]),
        relations=relations,
    )


@pytest.mark.slow
def test_torchtitans_simple_fsdp_training_step_is_proved():
    report = _titan_fsdp_step(local_token_count=False)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    assert {o.proven for o in report.outputs} == {"shard(0, dp_shard)"}


@pytest.mark.slow
def test_torchtitans_simple_fsdp_with_tp_training_step_is_proved():
    """SimpleFSDP over dp_shard of a model TP already split (its graph trainer's 2-D
    composition): each weight's DTensor is FSDP's shard of TP's block, its gradient the
    reduce-scatter of TP's block of the gradient; the collectives are read over the axis of
    each device's own group."""
    report = _titan_fsdp_step(local_token_count=False, tp=2)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    assert report.outputs[0].proven == "partial(sum, dp_shard)"
    layouts = {o.proven for o in report.outputs[1:]}
    assert layouts <= {
        "shard(0, tp) shard(0, dp_shard)",
        "shard(0, dp_shard) shard(1, tp)",
        "shard(0, dp_shard)",
    }, layouts
    assert "shard(0, tp) shard(0, dp_shard)" in layouts


@pytest.mark.slow
def test_a_2d_step_whose_loss_is_divided_by_each_devices_own_count_is_caught():
    report = _titan_fsdp_step(local_token_count=True, tp=2)
    assert report.verdict == "not_equivalent"


@pytest.mark.slow
def test_a_loss_divided_by_each_devices_own_token_count_is_caught():
    report = _titan_fsdp_step(local_token_count=True)
    assert report.verdict == "not_equivalent"
    assert not any(o.ok for o in report.outputs)
    first = report.suspects[0]
    assert first.op == "reduce_scatter", first
    assert "exactly 2x the baseline's" in first.reason, first.reason
