"""Trace a PyTorch callable (plain, functional collectives or DTensor) on one rank.

Both sides of a comparison go through the same tracer, `make_fx`, so that composite ops
(`matmul`, `linear`, `softmax`) decompose into the same ATen chains in the baseline and the
distributed program; otherwise the two could reach one layout through different
reshape/transpose chains, which the rules do not relate. `make_fx` holds a module's weights
as anonymous constants, so they are renamed back to the module's parameter names (`fc1.weight`
becomes input `fc1_weight`, as `torch.export` names it) and the placeholders get the names
of the function's arguments: the baseline and the distributed program then pair by name.
"""

from __future__ import annotations

import functools
import inspect
import logging
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["as_exported", "fake_process_group", "refold_batched_matmuls", "trace"]

_VIEWS = ("view", "_unsafe_view", "reshape")


def fake_process_group(world: int) -> Any:
    """The default group of a fake `world`-rank job, this process being rank 0 (no launcher:
    collectives are recorded, never run). Reuses a live group of the same size and replaces
    a fake one of another size (the meshes made over it are then stale)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_world_size() == world:
            return dist.group.WORLD
        if dist.get_backend() != "fake":
            raise RuntimeError(
                f"a process group of {dist.get_world_size()} ranks already exists; "
                f"the mesh needs {world}"
            )
        dist.destroy_process_group()  # a fake job of another size: start a new one
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    return dist.group.WORLD


def _argument_names(fn: Callable[..., Any], count: int) -> list[str]:
    """The names of `fn`'s first `count` positional parameters (`input{i}` when unknown)."""
    target = fn.forward if isinstance(fn, nn.Module) else fn
    try:
        params = [
            p.name
            for p in inspect.signature(target).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    if len(params) < count:
        params += [f"input{i}" for i in range(len(params), count)]
    return params[:count]


def _name_placeholders(
    gm: torch.fx.GraphModule, placeholders: list[torch.fx.Node], names: list[str]
) -> None:
    """Name each input after the traced function's argument, so inputs pair by name.

    An argument may be called what make_fx already called another node (`t`, `mm`, `add`,
    or another placeholder's `args_1`): that node takes a fresh name first, since two nodes
    of one name fail FX's lint. Every name set is reserved in the graph's namespace, so the
    nodes later passes add cannot take one."""
    taken = {n.name for n in gm.graph.nodes} | set(names)
    for node, name in zip(placeholders, names, strict=True):
        for other in gm.graph.nodes:
            if other is not node and other.name == name:
                other.name = _fresh_name(name, taken)
                gm.graph._graph_namespace.create_name(other.name, None)
        node.name = node.target = name
        gm.graph._graph_namespace.create_name(name, None)


def _fresh_name(base: str, taken: set[str]) -> str:
    """`base_1`, `base_2`, ...: the first not in `taken`, which it joins."""
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    taken.add(f"{base}_{i}")
    return f"{base}_{i}"


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


TRACING_MODES = ("auto", "real", "fake")


def trace(
    fn: Callable[..., Any],
    example_inputs: Sequence[Any],
    *,
    across_devices: bool = False,
    tracing_mode: str = "auto",
) -> torch.fx.GraphModule:
    """`fn(*example_inputs)` traced with `make_fx` (stack traces kept), weights as named
    parameters, placeholders named after `fn`'s arguments, returning the tensor leaves of
    what `fn` returns (DTensors as local tensors; their placements in
    `gm.meta["output_placements"]`, see placements.py). `across_devices`: the program is
    one rank's of a DTensor job; numbers it computed from the rank become expressions over
    the device's coordinates (device_probe.py).

    `tracing_mode`: "real" runs the program on the example inputs; "fake" on fake tensors
    of their shapes, which gets through framework code that branches on data when it sees a
    tracer (transformers' mask helpers); "auto" tries real, then fake when the program
    reads a value from a traced tensor."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from scalify.capture.device_probe import trace_on_devices
    from scalify.capture.placements import Placed, tensor_leaves

    if tracing_mode not in TRACING_MODES:
        raise ValueError(f"tracing_mode must be one of {TRACING_MODES}, not {tracing_mode!r}")
    inputs = tuple(example_inputs)
    placed: list[Placed] = []
    modules, optimizers = _modules_of(fn), _optimizers_of(fn)
    followed: dict[int, str] = {}  # output index -> the weight it is the gradient of, or is

    def leaves(*args: Any) -> tuple[torch.Tensor, ...]:
        placed.clear()
        followed.clear()
        with _fresh_training_state(modules, optimizers):
            value = fn(*args)
            return tensor_leaves(value, placed, _weights_and_gradients(modules), followed)

    def make_in(mode: str) -> torch.fx.GraphModule:
        options = {"tracing_mode": "fake", "_allow_non_fake_inputs": True} if mode == "fake" else {}
        with (
            _quiet("torch._subclasses.fake_tensor"),
            _stack_traces_from_the_program(),
        ):
            return make_fx(
                leaves,
                decomposition_table=foreign_decompositions(),
                record_stack_traces=True,
                **options,
            )(*inputs)

    modes = ("real", "fake") if tracing_mode == "auto" else (tracing_mode,)
    for mode in modes:
        try:
            gm = make_in(mode)
            break
        except Exception as exc:  # noqa: BLE001 - a framework's error, reported with its line
            if mode != modes[-1] and _reads_traced_data(exc):
                continue
            raise tracing_error(fn, exc) from exc

    def make() -> torch.fx.GraphModule:
        try:
            return make_in(mode)
        except Exception as exc:  # noqa: BLE001 - as above, for the other devices' traces
            raise tracing_error(fn, exc) from exc

    if across_devices:
        gm = trace_on_devices(make, gm)
    gm.meta["output_placements"] = list(placed)
    gm.meta["input_placements"] = _weight_placements(modules)
    gm.meta["tracing_mode"] = mode
    gm.meta["output_inputs"] = dict(followed)
    names: dict[int, str] = {}
    for name, tensor in _weight_names(modules, buffers=True):
        names.setdefault(_local(tensor).data_ptr(), name)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if all(isinstance(x, torch.Tensor) for x in inputs) and len(placeholders) == len(inputs):
        _name_placeholders(gm, placeholders, _argument_names(fn, len(inputs)))
    renamed: dict[str, str] = {}  # make_fx's attribute -> the weight's name
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        if node.target in renamed:  # a backward pass reads the same weight again
            node.target = renamed[node.target]
            continue
        tensor = getattr(gm, node.target)
        name = names.get(tensor.data_ptr()) if isinstance(tensor, torch.Tensor) else None
        if name is None:
            continue  # a constant the program made itself: a literal or an anonymous input
        held = getattr(gm, name, None)
        if held is None:
            gm.register_parameter(name, nn.Parameter(tensor.detach().clone(), requires_grad=False))
        elif (held.shape, held.dtype) != (tensor.shape, tensor.dtype):
            continue  # another view of the weight's memory: keep it as its own input
        renamed[node.target] = name
        delattr(gm, node.target)
        node.target = name
    _merge_repeated_reads(gm)
    refold_batched_matmuls(gm)
    gm.graph.lint()
    gm.recompile()
    return gm


@contextmanager
def _stack_traces_from_the_program() -> Iterator[None]:
    """Stack traces that keep the frames of the user's own code, not only `forward`'s.

    make_fx keeps only the frames named `forward`, and none when there is no such frame. So
    an op in a user's helper function or forward hook (an all-reduce a hook runs on the
    module's output) was placed at the `forward` line that called the module, and the ops a
    training step runs itself (an all-reduce of gradients, the optimizer) and those autograd
    runs for `loss.backward()` had no line. Every op keeps, from the traced callable on, the
    frames of code outside installed packages (the hook's line, the helper's, the step's)
    and, inside them, the `forward` frames FX keeps: a library's own hooks and helpers
    (transformers' tensor-parallel hooks) stay out, the model code's line stays the one
    reported. A stack through no `forward` keeps every frame outside the tracer (the line in
    a custom autograd function's `backward`)."""
    from torch.fx.proxy import TracerBase

    from scalify.frontends.frames import is_installed, is_machinery

    original = TracerBase._filter_traceback_frames

    def kept(self, summary):
        frames = list(summary)
        start = next(
            (i for i, f in enumerate(frames) if f.name == "leaves" and f.filename == __file__),
            None,
        )
        outside = frames[start + 1 :] if start is not None else []
        program = [f for f in outside if not is_machinery(f.filename)]
        if not program:
            return original(self, summary)  # only torch's own frames: no line to give
        if any(f.name == "forward" for f in frames):
            program = [f for f in program if f.name == "forward" or not is_installed(f.filename)]
        return traceback.StackSummary.from_list(program)

    TracerBase._filter_traceback_frames = kept
    try:
        yield
    finally:
        TracerBase._filter_traceback_frames = original


def _merge_repeated_reads(gm: torch.fx.GraphModule) -> None:
    """One node per weight: a backward pass reads a weight again, under another attribute
    that now carries the same name; two inputs of one name could not be paired."""
    first: dict[str, torch.fx.Node] = {}
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        if node.target not in first:
            first[node.target] = node
            continue
        node.replace_all_uses_with(first[node.target])
        gm.graph.erase_node(node)


@functools.cache
def foreign_decompositions() -> dict[Any, Callable[..., Any]]:
    """PyTorch's decompositions of the ATen ops the FX frontend has no semantics for: the
    backward kernels autograd records (`threshold_backward`, `_softmax_backward_data`,
    `native_layer_norm_backward`, `embedding_dense_backward`...) and the rarer forward ones,
    so that a training step lowers to ops that rules relate instead of opaque ones. Ops the
    frontend reads itself keep their own spelling (a softmax stays one op)."""
    from torch._decomp import decomposition_table
    from torch._ops import OpOverload

    from scalify.frontends.fx import lowers_natively

    return {
        op: decompose
        for op, decompose in decomposition_table.items()
        if isinstance(op, OpOverload) and op.namespace == "aten" and not lowers_natively(op._opname)
    }


def _weight_names(
    modules: list[tuple[str, nn.Module]], buffers: bool = False
) -> Iterator[tuple[str, torch.Tensor]]:
    """Each weight of `modules` (and with `buffers`, each buffer) under the input name the
    trace gives it: the module's path with dots as underscores, after the prefix."""
    for prefix, module in modules:
        held = [*module.named_parameters(), *(module.named_buffers() if buffers else ())]
        for name, tensor in held:
            yield prefix + name.replace(".", "_"), tensor


def _weight_placements(modules: list[tuple[str, nn.Module]]) -> dict[str, tuple[Any, Any, Any]]:
    """Input name -> (placement, local shape, global shape) of each weight that is a DTensor
    (SimpleFSDP's and FSDP2's shards), for the inputs no relation states."""
    from scalify.capture.placements import tensor_leaves

    found: dict[str, tuple[Any, Any, Any]] = {}
    for name, weight in _weight_names(modules):
        if hasattr(weight, "placements") and hasattr(weight, "to_local"):
            placed: list[Any] = []
            (local,) = tensor_leaves(weight, placed)
            found[name] = (placed[0], tuple(local.shape), tuple(weight.shape))
    return found


def _weights_and_gradients(modules: list[tuple[str, nn.Module]]) -> dict[int, str]:
    """`id` of each weight and of its gradient -> the weight's input name: an output that is
    one of them (a training step returning gradients or updated weights) must have the
    layout of that weight."""
    known: dict[int, str] = {}
    for name, weight in _weight_names(modules):
        known.setdefault(id(weight), name)
        if weight.grad is not None:
            known.setdefault(id(weight.grad), name)
    return known


@contextmanager
def _fresh_training_state(
    modules: list[tuple[str, nn.Module]], optimizers: list[torch.optim.Optimizer]
) -> Iterator[None]:
    """Each trace starts with no gradients and no optimizer state, and leaves them as they
    were: `backward()` accumulates into `.grad` and `step()` into the optimizer's moments and
    step count, so a second trace (another device's) would otherwise start from the first
    trace's traced values."""
    weights = [w for _, w in _weight_names(modules)]
    kept = [w.grad for w in weights]
    states = [opt.state for opt in optimizers]
    for weight in weights:
        weight.grad = None
    for opt in optimizers:
        opt.state = type(opt.state)(dict)
    try:
        yield
    finally:
        for weight, grad in zip(weights, kept, strict=True):
            weight.grad = grad
        for opt, state in zip(optimizers, states, strict=True):
            opt.state = state


def _modules_of(fn: Callable[..., Any]) -> list[tuple[str, nn.Module]]:
    """The modules whose weights `fn` computes with, each with the prefix its weights' input
    names take: `fn` itself, the module a bound method belongs to, or the modules a plain
    function (a training step) reaches through its closure, defaults and referenced globals.
    One module names its weights bare (`up_weight`); several are told apart by the variable
    that holds them (`model_up_weight`)."""
    if isinstance(fn, nn.Module):
        return [("", fn)]
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, nn.Module):
        return [("", owner)]
    found: dict[int, tuple[str, nn.Module]] = {}
    for name, value in _reached(fn).items():
        if isinstance(value, nn.Module):
            found.setdefault(id(value), (name, value))
    if len(found) == 1:
        return [("", module) for _, module in found.values()]
    return [(f"{name}_", module) for name, module in found.values()]


def _optimizers_of(fn: Callable[..., Any]) -> list[torch.optim.Optimizer]:
    """The optimizers a training step reaches (their state is made afresh by each trace)."""
    found = {id(v): v for v in _reached(fn).values() if isinstance(v, torch.optim.Optimizer)}
    return list(found.values())


def _reached(fn: Callable[..., Any]) -> dict[str, Any]:
    """What a plain function reaches by name: its closure, the globals it reads, and the
    arguments a `functools.partial` binds."""
    target = getattr(fn, "func", fn)  # functools.partial
    try:
        reached = inspect.getclosurevars(target)
        named = {**reached.globals, **reached.nonlocals}
    except (TypeError, ValueError):
        named = {}
    for i, arg in enumerate(getattr(fn, "args", ())):
        named[f"arg{i}"] = arg
    return named


@contextmanager
def _quiet(logger: str) -> Iterator[None]:
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _reads_traced_data(exc: BaseException) -> bool:
    """Whether tracing stopped because the program read a value out of a traced tensor (a
    Python branch on data), which fake tensors get through where frameworks check for them."""
    text = f"{type(exc).__name__}: {exc}"
    return any(
        marker in text
        for marker in ("_local_scalar_dense", "data-dependent", "DataDependent", "item()")
    )


def tracing_error(fn: Callable[..., Any], exc: BaseException) -> Exception:
    """A `ScalifyError` saying where in the model tracing stopped and why."""

    from scalify.errors import ScalifyError
    from scalify.frontends.frames import is_machinery, pick_location
    from scalify.ir import SourceLoc

    chain: list[BaseException] = []  # the error and what it was raised from, outermost first
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    loc = None
    for error in chain:  # the deepest report of a frame in model code wins
        frames = [
            SourceLoc(f.filename, f.lineno or 0, f.name)
            for f in reversed(traceback.extract_tb(error.__traceback__))
        ]
        if any(not is_machinery(f.file) for f in frames):
            loc = pick_location(frames)
    where = f" in {loc.function}" if loc and loc.function else ""
    if loc is not None and loc.call_site is not None:
        where += f" (called from {loc.call_site})"
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return ScalifyError(
        f"cannot trace {name}{where}: {type(exc).__name__}: {first}",
        loc.file if loc else "",
        loc.line if loc else 0,
        notes=[
            "Scalify traces the program with make_fx; code that branches on tensor values "
            "or calls ops make_fx cannot record stops here (tracing_mode='fake' gets "
            "through framework code that checks for tracing)"
        ],
    )


def _aten(node: Any, *names: str) -> bool:
    if not isinstance(node, torch.fx.Node):
        return False
    packet = getattr(node.target, "overloadpacket", None)
    return node.op == "call_function" and getattr(packet, "__name__", "") in names


def _unmerged(node: Any) -> Any:
    """The tensor a `bmm` operand was merged from: `view(clone(expand(x)))` with the expand
    and the clone optional and the expand changing no size; None for any other form."""
    if not _aten(node, *_VIEWS):
        return None
    source = node.args[0]
    if _aten(source, "clone"):
        source = source.args[0]
    if _aten(source, "expand"):
        if list(source.args[0].meta["val"].shape) != list(source.meta["val"].shape):
            return None  # a real broadcast (e.g. shared key/value heads): keep it as traced
        source = source.args[0]
    return source


def _unmerged_operand(node: Any) -> tuple[Any, bool]:
    """(the tensor a `bmm` operand was merged from, whether the operand is its transpose):
    a backward pass multiplies by the transpose of a merged forward operand,
    `transpose(view(x), 1, 2)`. (None, False) for any other form."""
    if _aten(node, "transpose") and sorted(int(d) % 3 for d in node.args[1:3]) == [1, 2]:
        return _unmerged(node.args[0]), True
    return _unmerged(node), False


def _swapped_last(gm: torch.fx.GraphModule, x: Any) -> Any:
    """`x.transpose(-2, -1)` as a traced node."""
    node = gm.graph.call_function(torch.ops.aten.transpose.int, (x, -2, -1))
    node.meta = {**x.meta, "val": x.meta["val"].transpose(-2, -1)}
    return node


def refold_batched_matmuls(gm: torch.fx.GraphModule) -> int:
    """Put back the `torch.matmul` of operands with two or more batch dims that `make_fx`
    decomposed into `view(bmm(view(a), view(b)))`, the batch dims merged into one.

    The merge is the problem: with the heads of attention sharded, heads are the inner factor
    of the merged batch dim, which no layout describes, so the rules cannot follow q @ k^T
    through it even though the result is split back at once. One dot with several batch
    dims is what XLA and `torch.export` produce for the same code. Returns how many were
    refolded; the graph still computes the same values."""
    count = 0
    for node in list(gm.graph.nodes):
        if not _aten(node, "bmm") or len(node.users) != 1:
            continue
        (out,) = node.users
        if not _aten(out, *_VIEWS) or "val" not in out.meta:
            continue
        (lhs, lhs_t), (rhs, rhs_t) = (
            _unmerged_operand(node.args[0]),
            _unmerged_operand(node.args[1]),
        )
        shape = list(out.meta["val"].shape)
        if lhs is None or rhs is None or len(shape) < 4:
            continue
        a, b = list(lhs.meta["val"].shape), list(rhs.meta["val"].shape)
        if not (len(a) == len(b) == len(shape) and a[:-2] == b[:-2] == shape[:-2]):
            continue
        with gm.graph.inserting_before(out):
            lhs, rhs = (_swapped_last(gm, x) if t else x for x, t in ((lhs, lhs_t), (rhs, rhs_t)))
            matmul = gm.graph.call_function(torch.ops.aten.matmul.default, (lhs, rhs))
        matmul.meta = dict(out.meta)
        out.replace_all_uses_with(matmul)
        count += 1
    if count:
        gm.graph.eliminate_dead_code()
    return count


def as_exported(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    """A traced graph module as an ExportedProgram (what `torch.export.save` writes)."""
    return torch.export.export(gm, tuple(example_inputs))
