"""PyTorch FX frontend: turns `torch.export` programs (`.pt2` files) and in-memory
`make_fx`/`torch.export` graph modules into Scalify's graph IR.

Each FX `call_function` node is one ATen op (or a functional collective) with its output
shape and dtype in `node.meta["val"]` (or `tensor_meta`). Ops are mapped to the canonical
vocabulary of `scalify.ir` the way XLA would lower them, so a PyTorch pair is checked by the
same rules as an HLO pair:

- matmul family (`mm`, `bmm`, `matmul`, `addmm`, `linear`) -> `dot` with explicit
  contracting/batch dims, plus a broadcast `add` for a bias. `linear` is `dot(x, W)`
  contracting x's last dim with W's dim 1; a `transpose` feeding a dot is folded into its
  dims when that keeps the free-dim order (as XLA's simplifier does), so `x @ w.t()`,
  `addmm(b, x, w.t())` and `linear(x, w, b)` all give the same dot;
- composite activations and normalisers (`gelu`, `silu`, `relu`, `softmax`, `mean`,
  `native_layer_norm`) -> the elementwise/reduce nodes HLO would hold (`gelu` tanh form:
  mul, add, tanh, constants; layer norm: mean, centre, mean of squares, rsqrt, scale);
- an in-place op (`add_`, which `make_fx` keeps in RMSNorm) -> its functional form when it
  mutates a fresh tensor that no later node reads; otherwise it stays opaque;
- implicit broadcasting and Python scalars -> explicit `broadcast` nodes (a scalar is a
  rank-0 `constant` broadcast with dims=()), dtype promotion -> explicit `convert` nodes;
- views (`view`, `reshape`, `unsqueeze`, `squeeze`, `flatten`, ...) -> `reshape`, which
  `canonicalize` splits into merge/split steps.

Functional collectives (`_c10d_functional.all_reduce` / `all_gather_into_tensor` /
`reduce_scatter_tensor` / `all_to_all_single`, each followed by an identity `wait_tensor`)
become `all_reduce` / `all_gather` (dim 0) / `reduce_scatter` (dim 0) / `all_to_all` (dim 0).
funcol (and so DTensor) gathers or scatters along another dim d with a dim-0 collective plus
chunks and a cat (a view for a gather when the dims before d are 1); those forms become one
`all_gather` / `reduce_scatter` along d, as XLA would hold it.

**Replica groups.** An FX graph is traced on one rank and names its process group only by a
string (`"0"`). The frontend assumes the group is *all devices of a 1-D mesh of the group's
size*: `groups = (tuple(range(size)),)`. The size is the op's own `group_size` argument when
it has one; otherwise it is read from the group sizes `save_exported` records inside the
`.pt2` file, or from a live process group of that name in this process. A collective whose
group size cannot be found becomes an `opaque` op (never proved). On a 2-D mesh the groups
of one traced rank do not cover every device, so such collectives match no mesh axis and
stay unproved rather than being assumed right.

Placeholders become parameters named by the placeholder's name, with the `p_` / `b_` /
`c_` prefixes of `torch.export` stripped so that a baseline and a distributed program of
modules with the same parameter names pair up. Source locations come from
`node.meta["stack_trace"]`, the frame chosen by `frames.pick_location`. An op with no
mapping becomes `opaque` with `hlo_op` = `aten.<name>`.
"""

from __future__ import annotations

import json
import logging
import math
import operator
import os
import re
import zipfile
from functools import partial, partialmethod
from pathlib import Path
from typing import Any

from scalify.errors import ScalifyError
from scalify.frontends.common import prune_and_renumber
from scalify.frontends.frames import pick_location
from scalify.ir import Graph, Node, SourceLoc, at_line
from scalify.ops.coordinate_form import device_coordinate
from scalify.ops.one_hot_forms import one_hot_of

# the namespace of the ops that name device-dependent values (scalify/capture/device_ops.py)
DEVICE_NAMESPACE = "scalify"

__all__ = ["GROUPS_FILE", "graph_from_fx", "load_fx", "save_exported"]

# The extra file `save_exported` writes into a `.pt2`: {"groups": {name: size}, "world_size": n}.
GROUPS_FILE = "scalify_groups.json"

_DTYPES = {
    "float32": "f32",
    "float64": "f64",
    "bfloat16": "bf16",
    "float16": "f16",
    "int64": "s64",
    "int32": "s32",
    "int16": "s16",
    "int8": "s8",
    "uint8": "u8",
    "bool": "pred",
    "complex64": "c64",
    "complex128": "c128",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2",
}

_UNARY = {
    "neg": "neg",
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "rsqrt": "rsqrt",
    "sqrt": "sqrt",
    "abs": "abs",
    "erf": "erf",
    "sigmoid": "logistic",
    "sign": "sign",
    "floor": "floor",
    "ceil": "ceil",
    "cos": "cos",
    "sin": "sin",
    "tan": "tan",
    "expm1": "exponential_minus_one",
    "log1p": "log_plus_one",
    "logical_not": "not",
    "bitwise_not": "not",
}
_BINARY = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "div",
    "maximum": "max",
    "minimum": "min",
    "pow": "pow",
    "remainder": "mod",  # floored (the divisor's sign), as Python's %
    "fmod": "rem",  # truncated (the dividend's sign)
    "atan2": "atan2",
    "logical_and": "and",
    "logical_or": "or",
    "logical_xor": "xor",
    "bitwise_and": "and",
    "bitwise_or": "or",
    "bitwise_xor": "xor",
}
_COMPARE = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}
_IDENTITY = frozenset(
    {"clone", "alias", "detach", "contiguous", "lift_fresh_copy", "lift_fresh", "wait_tensor"}
)
_RESHAPES = frozenset(
    {
        "view",
        "reshape",
        "_unsafe_view",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "view_as",
        "reshape_as",
        "expand_dims",
    }
)
# Ops with a tuple of outputs: each `op_NAME` returns one value per output.
# Fused attention: SDPA and the kernels it dispatches to, read as their math (`attention`).
_ATTENTION = frozenset(
    {
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_attention_math",
    }
)
_MULTI_OUTPUT = frozenset(
    {
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "native_layer_norm",
        "topk",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
    }
)
_CONVERTS = frozenset({"_to_copy", "to", "type_as", "_to_dtype", "to_dtype"})
_COLLECTIVE_NAMESPACES = frozenset(
    {"_c10d_functional", "c10d_functional", "_c10d_functional_autograd"}
)
# Where each functional collective takes its process-group name.
_GROUP_ARG = {
    "all_reduce": 2,
    "all_gather_into_tensor": 2,
    "reduce_scatter_tensor": 3,
    "all_to_all_single": 3,
    "broadcast": 2,
}
_COLLECTIVE_KINDS = {
    "all_reduce": "all_reduce",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}
# c10d's RedOpType codes, as a ReduceOp script object holds them
_C10D_REDUCE_OPS = {0: "sum", 1: "avg", 2: "prod", 3: "min", 4: "max"}
_REDUCE_OPS = {"sum": "sum", "max": "max", "min": "min", "product": "prod", "prod": "prod"}
# Lifted tensor constants up to this many elements become `constant` nodes (with their
# literal); larger ones become parameters.
_MAX_LITERAL = 1024

_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)')


def source_loc(stack_trace: str | None, cwd: str | None = None) -> SourceLoc | None:
    """The model-code frame of an FX `stack_trace` (see `frames.pick_location`)."""
    if not stack_trace:
        return None
    frames = [
        SourceLoc(file, int(line), function.strip())
        for file, line, function in reversed(_FRAME_RE.findall(stack_trace))
    ]
    return pick_location(frames, cwd)


# --------------------------------------------------------------------------------------------
# Literals


def _number_text(value: Any, dtype: str) -> str:
    """A scalar as HLO literal text in `dtype`: `1`, `0.5`, `0.7978846`, `-inf`, `true`."""
    if dtype == "pred":
        return "true" if value else "false"
    if dtype[0] in "su":
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    import numpy as np

    if dtype == "f64":
        text = repr(value)
    elif dtype in ("f32", "f16"):
        text = str(np.float32(value) if dtype == "f32" else np.float16(value))
    else:  # bf16 and narrower: round through torch, print as f32
        import torch

        rounded = torch.tensor(value, dtype=getattr(torch, _TORCH_NAMES.get(dtype, "float32")))
        text = str(np.float32(rounded.float().item()))
    if text.endswith(".0"):
        text = text[:-2]
    return text


_TORCH_NAMES = {v: k for k, v in _DTYPES.items()}
# a complex dtype's parts
_COMPLEX_PARTS = {"c64": "f32", "c128": "f64"}


def _literal_text(values: Any, dtype: str) -> str:
    """A nested list of scalars as `{{1,2},{3,4}}`; a scalar as its number."""
    if isinstance(values, list):
        return "{" + ",".join(_literal_text(v, dtype) for v in values) + "}"
    return _number_text(values, dtype)


# --------------------------------------------------------------------------------------------
# Lowering


class _Unsupported(Exception):
    """This node's form is not mapped: lower it as an opaque op."""


def _dtype_of(torch_dtype: Any) -> str:
    name = str(torch_dtype).removeprefix("torch.")
    return _DTYPES.get(name, name)


def _writes_every_entry(destination: Any, indices: Any) -> bool:
    """`out[perm] = v` with perm the indices of a sort of as many values as out has along
    its one dim: each entry is written once, so what out held is never read (transformers'
    experts invert their sort into `torch.empty` so)."""
    if not isinstance(indices, (list, tuple)) or len(indices) != 1:
        return False
    index = indices[0]
    if getattr(index, "target", None) is not operator.getitem or index.args[1] != 1:
        return False
    sort = index.args[0]
    if _op_name(getattr(sort, "target", None))[1] != "sort":
        return False
    sorted_meta, destination_meta = sort.args[0].meta.get("val"), destination.meta.get("val")
    return (
        sorted_meta is not None
        and destination_meta is not None
        and sorted_meta.dim() == 1
        and tuple(sorted_meta.shape) == tuple(destination_meta.shape)
    )


def _arg(node: Any, i: int, name: str, default: Any = None) -> Any:
    """An FX node's argument `name`, given at position `i` or by keyword."""
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def _is_tensor_meta(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _op_name(target: Any) -> tuple[str, str, str]:
    """(namespace, op, overload) of an FX call target: ("aten", "add", "Tensor")."""
    packet = getattr(target, "overloadpacket", None)
    namespace = getattr(target, "namespace", None)
    if packet is not None and namespace is not None:
        return namespace, packet.__name__, getattr(target, "_overloadname", "default")
    if target is operator.getitem:
        return "", "getitem", ""
    name = getattr(target, "__name__", str(target))
    module = getattr(target, "__module__", "") or ""
    return module.split(".")[0] if module else "", name, ""


# Namespaces of PyTorch's own operator libraries; any other namespace is a framework's
# (`torch.library.custom_op("torchtitan::deterministic_scatter_add", ...)`).
_TORCH_NAMESPACES = frozenset(
    {"aten", "prims", "_c10d_functional", "c10d_functional", "c10d", "_dtensor", "profiler"}
)


def _is_library_op(target: Any, namespace: str) -> bool:
    """Whether an FX call target is an op of a framework's own operator library: a custom
    call, named `namespace::name`, that a rule file can give a meaning."""
    return getattr(target, "overloadpacket", None) is not None and (
        namespace not in _TORCH_NAMESPACES
    )


class _Lowering:
    def __init__(
        self,
        gm: Any,
        path: str,
        input_kinds: dict[str, str],
        constants: dict[str, Any],
        user_outputs: list[int] | None,
        group_sizes: dict[str, int],
    ) -> None:
        self.gm = gm
        self.path = path
        self.input_kinds = input_kinds  # placeholder name -> USER_INPUT/PARAMETER/...
        self.constants = constants  # placeholder name -> tensor (lifted constants)
        self.user_outputs = user_outputs
        self.group_sizes = group_sizes
        self.nodes: list[Node] = []
        self.params: list[tuple[int, int]] = []  # (index, node id)
        self.env: dict[Any, Any] = {}
        # views whose memory an in-place op wrote after they were made -> that op
        self.stale: dict[Any, Any] = {}
        self.functional = False  # lower the in-place op at hand as its functional form
        self.cwd = os.getcwd()
        self.loc_cache: dict[str, SourceLoc | None] = {}
        self.current: Any = None
        self.loc: SourceLoc | None = None
        self.fop = ""
        self.parts = 0
        self.order: dict[Any, int] = {}  # FX node -> position, for in-place ops
        # complex values, each held as its real and imaginary parts along a last dim of 2
        # (the layout `view_as_real` gives), in the parts' real dtype
        self.complex: set[int] = set()

    # ---- node creation

    def new(
        self,
        op: str,
        operands: tuple[int, ...],
        shape: tuple[int, ...],
        dtype: str,
        attrs: dict[str, Any] | None = None,
        final: bool = False,
    ) -> int:
        node_id = len(self.nodes)
        base = self.current.name if self.current is not None else op
        if final:
            name = base
        else:
            self.parts += 1
            name = f"{base}.{op}{self.parts}"
        self.nodes.append(
            Node(node_id, op, operands, shape, dtype, dict(attrs or {}), self.loc, name, self.fop)
        )
        return node_id

    def shape(self, value: int) -> tuple[int, ...]:
        return self.nodes[value].shape

    def dtype(self, value: int) -> str:
        return self.nodes[value].dtype

    def constant(self, value: Any, dtype: str) -> int:
        return self.new("constant", (), (), dtype, {"value": _number_text(value, dtype)})

    def fill(self, value: Any, shape: tuple[int, ...], dtype: str) -> int:
        const = self.constant(value, dtype)
        if not shape:
            return const
        return self.new("broadcast", (const,), shape, dtype, {"dims": ()})

    def convert(self, value: int, dtype: str) -> int:
        if self.dtype(value) == dtype:
            return value
        return self.new("convert", (value,), self.shape(value), dtype, {"dtype": dtype})

    def broadcast_to(self, value: int, shape: tuple[int, ...]) -> int:
        """numpy-style broadcasting made explicit: trailing dims aligned, size-1 dims grow."""
        src = self.shape(value)
        if src == shape:
            return value
        if len(src) > len(shape) or any(
            s not in (1, t) for s, t in zip(reversed(src), reversed(shape), strict=False)
        ):
            raise _Unsupported(f"cannot broadcast {list(src)} to {list(shape)}")
        offset = len(shape) - len(src)
        # As XLA lowers it: size-1 dims that grow are reshaped away first, so the broadcast
        # only adds dims (a broadcast never stretches a size-1 operand dim here).
        grown = {i for i, s in enumerate(src) if s == 1 and shape[offset + i] != 1}
        if grown:
            kept = tuple(s for i, s in enumerate(src) if i not in grown)
            value = self.new("reshape", (value,), kept, self.dtype(value))
        dims = tuple(offset + i for i in range(len(src)) if i not in grown)
        return self.new("broadcast", (value,), shape, self.dtype(value), {"dims": dims})

    def operand(self, arg: Any, dtype: str, shape: tuple[int, ...]) -> int:
        """A tensor or Python scalar argument as a node of `dtype` and `shape`."""
        value = self.value(arg)
        if isinstance(value, int) and not isinstance(value, bool) and self.is_node(arg):
            return self.broadcast_to(self.convert(value, dtype), shape)
        if isinstance(value, (bool, int, float)):
            return self.fill(value, shape, dtype)
        raise _Unsupported(f"operand {arg!r} is not a tensor or a number")

    def is_node(self, arg: Any) -> bool:
        import torch.fx

        return isinstance(arg, torch.fx.Node)

    def value(self, arg: Any) -> Any:
        """The lowered value of an FX argument (node id, tuple of ids, or a Python value)."""
        if self.is_node(arg):
            if arg not in self.env:
                raise _Unsupported(f"argument {arg.name} has no value")
            return self.env[arg]
        return arg

    def tensor(self, arg: Any) -> int:
        if not self.is_node(arg):
            raise _Unsupported(f"expected a tensor, got {arg!r}")
        value = self.env.get(arg)
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Unsupported(f"argument {arg.name} is not a tensor")
        return value

    # ---- metadata

    def out_meta(self, fx_node: Any) -> Any:
        meta = fx_node.meta
        val = meta.get("val")
        if val is not None:
            return val
        return meta.get("tensor_meta")

    def out_type(self, fx_node: Any) -> tuple[tuple[int, ...], str]:
        meta = self.out_meta(fx_node)
        if not _is_tensor_meta(meta):
            raise _Unsupported("no tensor shape in node.meta")
        return self.shape_of(meta), _dtype_of(meta.dtype)

    def shape_of(self, meta: Any) -> tuple[int, ...]:
        try:
            return tuple(int(d) for d in meta.shape)
        except (TypeError, ValueError):
            raise ScalifyError(
                f"node '{self.current.name}' has a dynamic shape {list(meta.shape)}; export "
                "with static shapes",
                self.path,
            ) from None

    def location(self, fx_node: Any) -> SourceLoc | None:
        trace = fx_node.meta.get("stack_trace")
        if not trace:
            return None
        if trace not in self.loc_cache:
            self.loc_cache[trace] = source_loc(trace, self.cwd)
        return self.loc_cache[trace]

    # ---- graph walk

    def run(self) -> Graph:
        graph = self.gm.graph
        outputs: list[int] = []
        for fx_node in graph.nodes:
            self.current = fx_node
            self.loc = self.location(fx_node)
            self.parts = 0
            if fx_node.op == "placeholder":
                self.fop = "placeholder"
                self.env[fx_node] = self.placeholder(fx_node)
            elif fx_node.op == "get_attr":
                self.fop = "get_attr"
                self.env[fx_node] = self.get_attr(fx_node)
            elif fx_node.op == "call_function":
                namespace, name, overload = _op_name(fx_node.target)
                self.fop = str(fx_node.target)
                self.refuse_stale_reads(fx_node)
                try:
                    self.env[fx_node] = self.call(fx_node, namespace, name, overload)
                except _Unsupported:
                    self.parts = 0
                    if _is_library_op(fx_node.target, namespace):  # a rule file may declare it
                        target = {"target": f"{namespace}::{name}"}
                        self.env[fx_node] = self.opaque(fx_node, "custom-call", target)
                    else:
                        self.env[fx_node] = self.opaque(fx_node, f"{namespace}.{name}")
                if namespace in ("aten", "prims"):  # collectives track their own writes
                    self.written_in_place(fx_node, namespace, name, overload)
            elif fx_node.op in ("call_module", "call_method"):
                self.fop = f"{fx_node.op}:{fx_node.target}"
                self.env[fx_node] = self.opaque(fx_node, f"{fx_node.op}.{fx_node.target}")
            elif fx_node.op == "output":
                self.refuse_stale_reads(fx_node)
                leaves = _flatten(self.value_tree(fx_node.args[0]))
                outputs = [v for v in leaves if isinstance(v, int) and not isinstance(v, bool)]
                if self.user_outputs is not None:
                    picked = [leaves[i] for i in self.user_outputs if i < len(leaves)]
                    outputs = [v for v in picked if isinstance(v, int) and not isinstance(v, bool)]
        if not outputs:
            raise ScalifyError("the program has no tensor outputs", self.path)
        return self.finish(outputs)

    def value_tree(self, arg: Any) -> Any:
        if isinstance(arg, (list, tuple)):
            return [self.value_tree(a) for a in arg]
        if self.is_node(arg):
            return self.env.get(arg)
        return None

    def placeholder(self, fx_node: Any) -> Any:
        name = fx_node.name
        kind = self.input_kinds.get(name)
        if name in self.constants:
            literal = self.literal(self.constants[name])
            if literal is not None:
                return literal
        meta = self.out_meta(fx_node)
        if not _is_tensor_meta(meta):
            return None  # a symbolic size, a token, ...: nothing downstream needs a node
        prefix = {"PARAMETER": "p_", "BUFFER": "b_", "CONSTANT_TENSOR": "c_"}.get(kind or "")
        if kind is None and name.startswith(("p_", "b_")):
            prefix = name[:2]  # a graph module without its signature: the export prefixes
        if prefix and name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
        return self.parameter(name, self.shape_of(meta), _dtype_of(meta.dtype))

    def parameter(self, name: str, shape: tuple[int, ...], dtype: str) -> int:
        """An input; `index` is its position among the inputs. A complex input is its real
        and imaginary parts along a last dim of 2."""
        index = len(self.params)
        part = _COMPLEX_PARTS.get(dtype)
        if part is not None:
            shape, dtype = (*shape, 2), part
        node = self.new("parameter", (), shape, dtype, {"name": name, "index": index}, True)
        self.params.append((index, node))
        if part is not None:
            self.complex.add(node)
        return node

    def get_attr(self, fx_node: Any) -> Any:
        """A tensor held by the graph module: a literal when small and not a parameter,
        else a parameter named by its attribute path."""
        import torch

        obj = self.attribute(fx_node)
        if not isinstance(obj, torch.Tensor):
            return None
        if not isinstance(obj, torch.nn.Parameter):
            literal = self.literal(obj)
            if literal is not None:
                return literal
        name = str(fx_node.target).replace(".", "_")
        return self.parameter(name, tuple(int(d) for d in obj.shape), _dtype_of(obj.dtype))

    def literal(self, tensor: Any) -> int | None:
        import torch

        if not isinstance(tensor, torch.Tensor) or tensor.numel() > _MAX_LITERAL:
            return None
        if tensor.device.type == "meta" or getattr(tensor, "fake_mode", None) is not None:
            return None
        dtype = _dtype_of(tensor.dtype)
        part = _COMPLEX_PARTS.get(dtype)
        if part is not None:
            tensor, dtype = torch.view_as_real(tensor), part
        try:
            values = tensor.detach().cpu().tolist()
        except Exception:  # noqa: BLE001 - e.g. a fake tensor: keep it a parameter
            return None
        value = self.new(
            "constant",
            (),
            tuple(int(d) for d in tensor.shape),
            dtype,
            {"value": _literal_text(values, dtype)},
            final=True,
        )
        if part is not None:
            self.complex.add(value)
        return value

    def opaque(self, fx_node: Any, op_name: str, extra: dict[str, Any] | None = None) -> Any:
        operands: list[int] = []
        for arg in _flatten([fx_node.args, list(fx_node.kwargs.values())]):
            if self.is_node(arg):
                operands.extend(
                    v
                    for v in _flatten([self.env.get(arg)])
                    if isinstance(v, int) and not isinstance(v, bool)
                )
        attrs: dict[str, Any] = {"hlo_op": op_name}
        if extra:
            attrs.update(extra)
        meta = self.out_meta(fx_node)

        def build(value: Any, path: tuple[int, ...]) -> Any:
            if _is_tensor_meta(value):
                leaf_attrs = dict(attrs, tuple_index=path) if path else dict(attrs)
                return self.new(
                    "opaque",
                    tuple(operands),
                    self.shape_of(value),
                    _dtype_of(value.dtype),
                    leaf_attrs,
                    final=not path,
                )
            if isinstance(value, (list, tuple)):
                return tuple(build(v, path + (i,)) for i, v in enumerate(value))
            return None

        return build(meta, ())

    # ---- ops

    def call(self, fx_node: Any, namespace: str, name: str, overload: str) -> Any:
        args, kwargs = fx_node.args, fx_node.kwargs
        if name == "getitem" and namespace == "":
            container = self.value(args[0])
            if isinstance(container, (tuple, list)):
                return container[args[1]]
            raise _Unsupported("getitem of a non-tuple")
        if namespace in _COLLECTIVE_NAMESPACES:
            return self.collective(fx_node, name)
        if namespace == "c10d":
            return self.c10d_collective(fx_node, name)
        if namespace == DEVICE_NAMESPACE:
            return self.device_op(fx_node, name)
        if (namespace, name) == ("prims", "copy_to"):  # `dst.copy_(src)` by another name
            namespace, name = "aten", "copy_"
        if (namespace, name) == ("prims", "reciprocal"):  # `1 / x` as a decomposition writes it
            namespace = "aten"
        if namespace != "aten":
            raise _Unsupported(namespace)
        if name in _IDENTITY:
            return self.tensor(args[0])
        if name == "dropout" or name == "feature_dropout":
            train = _arg(fx_node, 2, "train", True)
            if train:
                raise _Unsupported("dropout in training mode")
            return self.tensor(args[0])
        in_place = name.endswith("_") and not name.startswith("_")
        if in_place and (self.functional or self.rewritable_in_place(fx_node)):
            name = name[:-1]  # `add_` on a fresh tensor nobody reads again: plain `add`
        if name in ("max", "min") and overload == "other":
            name = "maximum" if name == "max" else "minimum"
        if name in ("max", "min") and overload == "dim":
            return self.extremum_along(fx_node, name)
        if name in ("view_as_complex", "view_as_real"):
            x = self.tensor(args[0])  # the same parts, read as complex or as real again
            view = self.new("reshape", (x,), self.shape(x), self.dtype(x), final=True)
            if name == "view_as_complex":
                self.complex.add(view)
            return view
        if any(self.is_complex(a) for a in _flatten([list(args), list(kwargs.values())])):
            return self.complex_call(fx_node, name)
        if name in _ATTENTION:
            return self.attention(fx_node, None, None)
        if name in _MULTI_OUTPUT:
            return getattr(self, f"op_{name}")(fx_node, None, None)
        shape, dtype = self.out_type(fx_node)
        if name in _RESHAPES:
            gathered = self.viewed_all_gather(fx_node, shape)
            if gathered is not None:
                return gathered
            return self.new("reshape", (self.tensor(args[0]),), shape, dtype, final=True)
        if name in _CONVERTS:
            return self.new(
                "convert", (self.tensor(args[0]),), shape, dtype, {"dtype": dtype}, True
            )
        if name in _UNARY:
            x = self.convert(self.tensor(args[0]), dtype)
            return self.new(_UNARY[name], (x,), shape, dtype, final=True)
        if name in _BINARY or name == "rsub":
            return self.binary(fx_node, name, shape, dtype)
        if name in _COMPARE:
            return self.compare(fx_node, _COMPARE[name], shape, dtype)
        method = getattr(self, f"op_{name}", None)
        if method is None:
            raise _Unsupported(name)
        return method(fx_node, shape, dtype)

    def op_reciprocal(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`1 / x`."""
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        return self.new("div", (self.fill(1, shape, dtype), x), shape, dtype, final=True)

    def op_as_strided(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`as_strided` that reads all of a contiguous tensor, in order (autograd's backward
        of an in-place op on a view replays the view so): a reshape. Any other stays
        opaque."""
        if not _contiguous_whole(fx_node):
            raise _Unsupported("as_strided other than a contiguous reshape")
        return self.new("reshape", (self.tensor(fx_node.args[0]),), shape, dtype, final=True)

    # ---- complex values (RoPE as torchtitan and Llama's reference code write it)

    def is_complex(self, arg: Any) -> bool:
        return self.is_node(arg) and self.env.get(arg) in self.complex

    def complex_call(self, fx_node: Any, name: str) -> int:
        """An op on complex values, on their parts: views, slices, casts between complex
        dtypes, sums and products. Anything else stays opaque."""
        args, kwargs = fx_node.args, fx_node.kwargs
        meta = self.out_meta(fx_node)
        part = _COMPLEX_PARTS.get(_dtype_of(meta.dtype))
        if part is None:
            raise _Unsupported(f"{name} from complex to real")
        shape = (*self.shape_of(meta), 2)
        if name in _IDENTITY:
            return self.tensor(args[0])
        if name in _RESHAPES:
            value = self.new("reshape", (self.tensor(args[0]),), shape, part)
        elif name in _CONVERTS:
            value = self.convert(self.tensor(args[0]), part)
        elif name == "expand":
            value = self.broadcast_to(self.tensor(args[0]), shape)
        elif name == "slice":
            x = self.tensor(args[0])
            dim, start, end, step = _slice_args(fx_node)
            dim = int(dim) % (len(shape) - 1)
            value, _ = self.slice_node(x, dim, start, end, step or 1, final=False)
        elif name in ("add", "sub") and (len(args) < 3 and "alpha" not in kwargs):
            a, b = (self.complex_operand(x, shape, part) for x in args[:2])
            value = self.new(name, (a, b), shape, part)
        elif name == "mul":
            value = self.complex_product(args[0], args[1], shape, part)
        elif name in ("_conj", "conj", "conj_physical", "resolve_conj"):
            value = self.conjugate(args[0], shape, part, negate=name != "resolve_conj")
        else:
            raise _Unsupported(f"{name} of a complex tensor")
        if value not in self.complex:
            value = self.new("reshape", (value,), shape, part)
        self.complex.add(value)
        self.nodes[value].name = fx_node.name
        return value

    def conjugate(self, arg: Any, shape: tuple[int, ...], part: str, negate: bool) -> int:
        """(re, -im): the conjugate's parts (`resolve_conj` only materialises: the same)."""
        z = self.convert(self.tensor(arg), part)
        if not negate:
            return z
        last = len(shape) - 1
        real = self.slice_node(z, last, 0, 1, 1, final=False)[0]
        imag = self.slice_node(z, last, 1, 2, 1, final=False)[0]
        flipped = self.new("neg", (imag,), self.shape(imag), part)
        return self.concatenate([real, flipped], last, shape, part)

    def complex_operand(self, arg: Any, shape: tuple[int, ...], part: str) -> int:
        """A complex operand's parts broadcast to `shape` (its last dim the parts)."""
        if not self.is_complex(arg):
            raise _Unsupported("a real operand where a complex one is expected")
        return self.broadcast_to(self.convert(self.tensor(arg), part), shape)

    def complex_product(self, a: Any, b: Any, shape: tuple[int, ...], part: str) -> int:
        """(ar + i ai)(br + i bi) = (ar br - ai bi) + i (ar bi + ai br); a real factor
        scales both parts."""
        if not (self.is_complex(a) and self.is_complex(b)):
            real, z = (a, b) if self.is_complex(b) else (b, a)
            if _is_complex_valued(real):  # complex, but not read as parts (an opaque op)
                raise _Unsupported("a product with a complex value that has no semantics")
            factor = self.operand(real, part, shape[:-1])
            factor = self.new("reshape", (factor,), (*shape[:-1], 1), part)
            spread = self.broadcast_to(factor, shape)
            return self.new("mul", (self.complex_operand(z, shape, part), spread), shape, part)
        last = len(shape) - 1
        half = (*shape[:-1], 1)

        def parts(v: Any) -> list[int]:  # cut first, then broadcast: as the user's broadcast
            raw = self.convert(self.tensor(v), part)
            end = len(self.shape(raw)) - 1
            pieces = [self.slice_node(raw, end, k, k + 1, 1, final=False)[0] for k in (0, 1)]
            return [self.broadcast_to(p, half) for p in pieces]

        xr, xi = parts(a)
        yr, yi = parts(b)

        def times(p: int, q: int) -> int:
            return self.new("mul", (p, q), half, part)

        real = self.new("sub", (times(xr, yr), times(xi, yi)), half, part)
        imaginary = self.new("add", (times(xr, yi), times(xi, yr)), half, part)
        return self.new("concatenate", (real, imaginary), shape, part, {"dim": last})

    def rewritable_in_place(self, fx_node: Any) -> bool:
        """Whether an in-place op (`add_`, as `make_fx` keeps it: RMSNorm's `mean + eps`)
        computes the same as its functional form here: it mutates a fresh tensor (made by
        an op that returns no alias of its inputs) that no later node reads."""
        target = fx_node.args[0] if fx_node.args else None
        if not self.is_node(target):
            return False
        if target.op in ("get_attr", "placeholder"):
            # a weight an optimizer step updates in place: its new value is this op's, and
            # no later op (through a view either) may read the old one
            return self.only_read_before(target, fx_node, through_views=True)
        if target.op != "call_function":
            return False
        maker = target
        if target.target is operator.getitem and self.is_node(target.args[0]):
            maker = target.args[0]  # one result of an op with several (topk's values)
        schema = getattr(maker.target, "_schema", None)
        if schema is not None and _writes_in_place(schema) and maker is target:
            # the result of another in-place op (an optimizer's `mul_` then `copy_` on a
            # fresh moment): fresh when that op read as a new value itself
            return self.rewritable_in_place(target) and self.only_read_before(target, fx_node)
        if schema is None or any(r.alias_info is not None for r in schema.returns):
            return False  # a view (or a collective): it aliases other tensors
        return self.only_read_before(target, fx_node)

    def binary(self, fx_node: Any, name: str, shape: tuple[int, ...], dtype: str) -> int:
        args, kwargs = fx_node.args, fx_node.kwargs
        lhs, rhs = args[0], args[1]
        alpha = _arg(fx_node, 2, "alpha", 1)
        if name == "div" and kwargs.get("rounding_mode") is not None:
            raise _Unsupported("div with rounding_mode")
        if name == "rsub":
            lhs, rhs, name = rhs, lhs, "sub"
            # rsub(x, y, alpha) = y - alpha * x: after the swap alpha scales the new rhs
        a = self.operand(lhs, dtype, shape)
        b = self.operand(rhs, dtype, shape)
        if alpha != 1 and name in ("add", "sub"):
            b = self.new("mul", (b, self.fill(alpha, shape, dtype)), shape, dtype)
        return self.new(_BINARY[name], (a, b), shape, dtype, final=True)

    def compare(self, fx_node: Any, direction: str, shape: tuple[int, ...], dtype: str) -> int:
        import torch

        lhs, rhs = fx_node.args[0], fx_node.args[1]
        metas = [self.out_meta(x) if self.is_node(x) else x for x in (lhs, rhs)]
        common = _dtype_of(torch.result_type(*metas))
        a = self.operand(lhs, common, shape)
        b = self.operand(rhs, common, shape)
        return self.new("compare", (a, b), shape, dtype, {"direction": direction}, True)

    # matmul family

    def dot(
        self,
        lhs: int,
        rhs: int,
        lc: tuple[int, ...],
        rc: tuple[int, ...],
        shape: tuple[int, ...],
        dtype: str,
        lb: tuple[int, ...] = (),
        rb: tuple[int, ...] = (),
        final: bool = True,
    ) -> int:
        lhs, lc, lb = self.absorb_transpose(lhs, lc, lb)
        rhs, rc, rb = self.absorb_transpose(rhs, rc, rb)
        attrs = {"lhs_contracting": lc, "rhs_contracting": rc, "lhs_batch": lb, "rhs_batch": rb}
        lhs, rhs = self.convert(lhs, dtype), self.convert(rhs, dtype)
        return self.new("dot", (lhs, rhs), shape, dtype, attrs, final)

    def absorb_transpose(
        self, value: int, contracting: tuple[int, ...], batch: tuple[int, ...]
    ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """A dot operand that is a transpose reads the transpose's operand instead, with its
        dims renumbered, when that keeps the order of the free dims (so the result is the
        same): `x @ w.t()`, `addmm(b, x, w.t())` and `linear(x, w, b)` become one dot, as
        XLA's simplifier folds them."""
        node = self.nodes[value]
        if node.op != "transpose":
            return value, contracting, batch
        perm = node.attrs["perm"]
        free = [perm[d] for d in range(len(perm)) if d not in contracting and d not in batch]
        if free != sorted(free):
            return value, contracting, batch
        return (
            node.operands[0],
            tuple(perm[d] for d in contracting),
            tuple(perm[d] for d in batch),
        )

    def op_mm(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        a, b = self.tensor(fx_node.args[0]), self.tensor(fx_node.args[1])
        return self.dot(a, b, (1,), (0,), shape, dtype)

    def op_bmm(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        a, b = self.tensor(fx_node.args[0]), self.tensor(fx_node.args[1])
        return self.dot(a, b, (2,), (1,), shape, dtype, (0,), (0,))

    def op__grouped_mm(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`_grouped_mm` with group ends `offs` (cumulative) along the rows:
        - `x [S, K] @ w [G, K, N]`: row i of x times the matrix of its group, read as a
          per-row lookup of the weight, `take(w, group(i))`, and a dot batched over the rows,
          so a weight split over K or N keeps its layout;
        - `a [K, S] @ b [S, N]` (its backward for the weight): one `[K, N]` product per
          group, summed over the group's rows, read as each row's outer product `a[:, i]
          b[i, :]` (a dot batched over the rows) contracted with `one_hot(group(i))`.
        Other operand ranks, and a bias, stay opaque."""
        a, b = self.tensor(fx_node.args[0]), self.tensor(fx_node.args[1])
        offs = _arg(fx_node, 2, "offs")
        if not self.is_node(offs) or _arg(fx_node, 3, "bias"):
            raise _Unsupported("grouped_mm without group ends, or with a bias")
        ranks = (len(self.shape(a)), len(self.shape(b)))
        ends = self.tensor(offs)
        if ranks == (2, 3):
            group = self.group_of_rows(ends, self.shape(a)[0])
            looked_up = (self.shape(a)[0], *self.shape(b)[1:])
            per_row = self.new("take", (b, group), looked_up, self.dtype(b), {"dim": 0})
            return self.dot(a, per_row, (1,), (1,), shape, dtype, (0,), (0,))
        if ranks == (2, 2):
            (k, rows), groups, n = self.shape(a), self.shape(ends)[0], self.shape(b)[1]
            group = self.group_of_rows(ends, rows)
            hot = self.convert(self.one_hot_of(group, 1, (rows, groups)), dtype)
            # each row's outer product a[:, i] b[i, :], then summed over the rows of a group
            outer = self.dot(a, b, (), (), (rows, k, n), dtype, (1,), (0,), final=False)
            return self.dot(hot, outer, (0,), (0,), shape, dtype)
        raise _Unsupported("grouped_mm of other operand ranks")

    def group_of_rows(self, ends: int, rows: int) -> int:
        """The group of each of `rows` rows, `#{g : ends[g] <= i}`, from cumulative ends."""
        groups, int_type = self.shape(ends)[0], self.dtype(ends)
        table = (rows, groups)
        row = self.new("iota", (), table, int_type, {"dim": 0})
        end = self.new("broadcast", (ends,), table, int_type, {"dims": (1,)})
        passed = self.new("compare", (row, end), table, "pred", {"direction": "GE"})
        counts = self.convert(passed, int_type)
        return self.new("reduce", (counts,), (rows,), int_type, {"dims": (1,), "op": "sum"})

    def op_matmul(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """torch.matmul: vectors contract directly, a 2-D rhs contracts the lhs's last dim,
        and batched operands are broadcast to a common batch shape first."""
        a, b = self.tensor(fx_node.args[0]), self.tensor(fx_node.args[1])
        ra, rb = len(self.shape(a)), len(self.shape(b))
        if ra == 0 or rb == 0:
            raise _Unsupported("matmul of a scalar")
        if rb == 1:
            return self.dot(a, b, (ra - 1,), (0,), shape, dtype)
        if ra == 1:
            if rb != 2:
                raise _Unsupported("matmul of a vector and a batched matrix")
            return self.dot(a, b, (0,), (0,), shape, dtype)
        if rb == 2:
            return self.dot(a, b, (ra - 1,), (0,), shape, dtype)
        batch = shape[:-2]
        a = self.broadcast_to(a, batch + self.shape(a)[-2:])
        b = self.broadcast_to(b, batch + self.shape(b)[-2:])
        n = len(batch)
        dims = tuple(range(n))
        return self.dot(a, b, (n + 1,), (n,), shape, dtype, dims, dims)

    def op_linear(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """linear(x, W, b) = x @ W^T + b: one dot contracting x's last dim with W's dim 1."""
        args = fx_node.args
        x, w = self.tensor(args[0]), self.tensor(args[1])
        bias = _arg(fx_node, 2, "bias")
        rx, rw = len(self.shape(x)), len(self.shape(w))
        rc = (1,) if rw == 2 else (0,)
        if bias is None:
            return self.dot(x, w, (rx - 1,), rc, shape, dtype)
        product = self.dot(x, w, (rx - 1,), rc, shape, dtype, final=False)
        b = self.operand(bias, dtype, shape)
        return self.new("add", (product, b), shape, dtype, final=True)

    def op_addmm(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """addmm(bias, a, b, beta, alpha) = beta * bias + alpha * (a @ b)."""
        args, kwargs = fx_node.args, fx_node.kwargs
        a, b = self.tensor(args[1]), self.tensor(args[2])
        beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
        product = self.dot(a, b, (1,), (0,), shape, dtype, final=False)
        if alpha != 1:
            product = self.new("mul", (product, self.fill(alpha, shape, dtype)), shape, dtype)
        bias = self.operand(args[0], dtype, shape)
        if beta != 1:
            bias = self.new("mul", (bias, self.fill(beta, shape, dtype)), shape, dtype)
        return self.new("add", (product, bias), shape, dtype, final=True)

    # layout and data movement

    def op_permute(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.tensor(fx_node.args[0])
        rank = len(self.shape(x))
        perm = tuple(int(d) % rank for d in fx_node.args[1]) if rank else ()
        return self.new("transpose", (x,), shape, dtype, {"perm": perm}, True)

    def op_transpose(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.tensor(fx_node.args[0])
        rank = len(self.shape(x))
        if rank < 2:
            return x
        d0, d1 = int(fx_node.args[1]) % rank, int(fx_node.args[2]) % rank
        perm = list(range(rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return self.new("transpose", (x,), shape, dtype, {"perm": tuple(perm)}, True)

    def op_t(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.tensor(fx_node.args[0])
        if len(self.shape(x)) < 2:
            return x
        return self.new("transpose", (x,), shape, dtype, {"perm": (1, 0)}, True)

    def op_expand(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.tensor(fx_node.args[0])
        out = self.broadcast_to(x, shape)
        if out != x:
            self.nodes[out].name = fx_node.name
        return out

    op_broadcast_to = op_expand
    op_expand_as = op_expand

    def op_cat(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        args = fx_node.args
        dim = int(_arg(fx_node, 1, "dim", 0)) % len(shape)
        gathered = self.folded_all_gather(fx_node, dim, shape)
        if gathered is not None:
            return gathered
        parts = [self.convert(self.tensor(t), dtype) for t in args[0]]
        # torch.cat skips 1-D empty tensors whatever the other operands' rank
        parts = [p for p in parts if self.shape(p) != (0,) or len(shape) == 1]
        return self.concatenate(parts, dim, shape, dtype)

    def concatenate(self, parts: list[int], dim: int, shape: tuple[int, ...], dtype: str) -> int:
        """Concatenates of up to 3 operands; longer lists nest (the e-graph's widest term has
        3 operands)."""
        if len(parts) == 1:
            return parts[0]
        acc, rest = parts[:3], parts[3:]
        while True:
            size = sum(self.shape(p)[dim] for p in acc)
            part_shape = shape[:dim] + (size,) + shape[dim + 1 :]
            last = not rest
            value = self.new("concatenate", tuple(acc), part_shape, dtype, {"dim": dim}, last)
            if last:
                return value
            acc, rest = [value] + rest[:2], rest[2:]

    op_concat = op_cat
    op_concatenate = op_cat

    def op_stack(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """stack = a unit dim inserted at `dim` in each operand, then concatenate."""
        args = fx_node.args
        dim = int(_arg(fx_node, 1, "dim", 0)) % len(shape)
        parts = []
        for t in args[0]:
            x = self.convert(self.tensor(t), dtype)
            src = self.shape(x)
            parts.append(self.new("reshape", (x,), src[:dim] + (1,) + src[dim:], dtype))
        return self.concatenate(parts, dim, shape, dtype)

    # creation

    def op_full(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        value = fx_node.args[1] if len(fx_node.args) > 1 else fx_node.kwargs["fill_value"]
        return self.named_fill(fx_node, value, shape, dtype)

    def op_zeros(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        return self.named_fill(fx_node, 0, shape, dtype)

    def op_ones(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        return self.named_fill(fx_node, 1, shape, dtype)

    op_full_like = op_full
    op_zeros_like = op_new_zeros = op_zeros
    op_ones_like = op_new_ones = op_ones

    def op_empty(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """An uninitialised complex tensor (`torch.polar` makes one and fills it through
        its real view): its parts along a last dim of 2, values nothing relates, so a part
        left unwritten and read stays unproved. Real ones stay opaque, as before."""
        part = _COMPLEX_PARTS.get(dtype)
        if part is None:
            raise _Unsupported("empty")
        out = self.new("opaque", (), (*shape, 2), part, {"hlo_op": "aten.empty"}, final=True)
        self.complex.add(out)
        return out

    def op_scalar_tensor(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        return self.named_fill(fx_node, fx_node.args[0], shape, dtype)

    def named_fill(self, fx_node: Any, value: Any, shape: tuple[int, ...], dtype: str) -> int:
        if not isinstance(value, (bool, int, float)):
            raise _Unsupported("fill with a non-literal value")
        out = self.fill(value, shape, dtype)
        self.nodes[out].name = fx_node.name
        return out

    def op_arange(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """arange(start, end, step) = iota * step + start."""
        args = list(fx_node.args)
        if not all(isinstance(a, (int, float)) for a in args):
            raise _Unsupported("arange with tensor bounds")
        start, step = (0, 1) if len(args) < 2 else (args[0], args[2] if len(args) > 2 else 1)
        start = fx_node.kwargs.get("start", start)
        step = fx_node.kwargs.get("step", step)
        value = self.new("iota", (), shape, dtype, {"dim": 0}, final=(start, step) == (0, 1))
        if step != 1:
            value = self.new("mul", (value, self.fill(step, shape, dtype)), shape, dtype)
        if start != 0:
            value = self.new("add", (value, self.fill(start, shape, dtype)), shape, dtype)
        self.nodes[value].name = fx_node.name
        return value

    def slice_node(
        self, x: int, dim: int, start: int, stop: int, step: int, final: bool
    ) -> tuple[int, tuple[int, ...]]:
        src = self.shape(x)
        size = src[dim]
        begin, end, stride = slice(start, stop, step).indices(size)
        if stride <= 0:
            raise _Unsupported("negative slice step")
        count = len(range(begin, end, stride))
        limit = begin + (count - 1) * stride + 1 if count else begin
        starts = [0] * len(src)
        limits = list(src)
        strides = [1] * len(src)
        starts[dim], limits[dim], strides[dim] = begin, limit, stride
        out_shape = src[:dim] + (count,) + src[dim + 1 :]
        attrs = {"starts": tuple(starts), "limits": tuple(limits), "strides": tuple(strides)}
        return self.new("slice", (x,), out_shape, self.dtype(x), attrs, final), out_shape

    def op_copy(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`dst.copy_(src)` where it reads as a new value (`rewritable_in_place`): `src`, cast
        to dst's dtype and broadcast to its shape (an optimizer writing a moment back)."""
        return self.broadcast_to(self.convert(self.tensor(fx_node.args[1]), dtype), shape)

    def op_slice_backward(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """The gradient of a slice: the slice's gradient padded with zeros back to the whole
        tensor, as JAX's transpose of a slice writes it (`pad`); a sum of pieces that tile
        the dim becomes their concatenation (padded_pieces.py)."""
        grad = self.convert(self.tensor(fx_node.args[0]), dtype)
        dim, start, _, step = (int(a) for a in fx_node.args[2:6])
        dim %= len(shape)
        size = shape[dim]
        start = min(max(start + size if start < 0 else start, 0), size)
        if step != 1:
            raise _Unsupported("the gradient of a strided slice")
        width = self.shape(grad)[dim]
        padding = "x".join(
            f"{start}_{size - start - width}" if d == dim else "0_0" for d in range(len(shape))
        )
        zero = self.constant(0, dtype)
        return self.new("pad", (grad, zero), shape, dtype, {"padding": padding}, final=True)

    def op_slice(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.tensor(fx_node.args[0])
        dim, start, end, step = _slice_args(fx_node)
        rank = len(self.shape(x))
        value, _ = self.slice_node(x, int(dim) % rank, start, end, step or 1, final=True)
        return value

    def op_narrow(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.tensor(fx_node.args[0])
        rank = len(self.shape(x))
        dim = int(fx_node.args[1]) % rank
        start = int(fx_node.args[2])
        if start < 0:
            start += self.shape(x)[dim]
        length = int(fx_node.args[3])
        value, _ = self.slice_node(x, dim, start, start + length, 1, final=True)
        return value

    def op_select(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.tensor(fx_node.args[0])
        dim, index = self.select_index(fx_node, x)
        value, _ = self.slice_node(x, dim, index, index + 1, 1, final=False)
        return self.new("reshape", (value,), shape, dtype, final=True)

    def split_outputs(self, fx_node: Any, dim: int) -> tuple[int, ...]:
        """split/chunk/unbind: consecutive slices along `dim`, sized as the outputs are."""
        x = self.tensor(fx_node.args[0])
        metas = self.out_meta(fx_node)
        if not isinstance(metas, (list, tuple)):
            raise _Unsupported("split without a list of outputs")
        rank = len(self.shape(x))
        dim = dim % rank
        values, offset = [], 0
        unbind = all(len(self.shape_of(m)) == rank - 1 for m in metas)
        for meta in metas:
            out_shape = self.shape_of(meta)
            size = 1 if unbind else out_shape[dim]
            value, sliced = self.slice_node(x, dim, offset, offset + size, 1, final=False)
            if sliced != out_shape:
                value = self.new("reshape", (value,), out_shape, self.dtype(x))
            values.append(value)
            offset += size
        return tuple(values)

    def op_split(self, fx_node: Any, shape: Any, dtype: Any) -> tuple[int, ...]:
        args = fx_node.args
        return self.split_outputs(fx_node, int(args[2] if len(args) > 2 else 0))

    op_split_with_sizes = op_chunk = op_split

    def op_unbind(self, fx_node: Any, shape: Any, dtype: Any) -> tuple[int, ...]:
        args = fx_node.args
        return self.split_outputs(fx_node, int(args[1] if len(args) > 1 else 0))

    # elementwise composites

    def op_where(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        cond = self.operand(fx_node.args[0], "pred", shape)
        a = self.operand(fx_node.args[1], dtype, shape)
        b = self.operand(fx_node.args[2], dtype, shape)
        return self.new("select", (cond, a, b), shape, dtype, final=True)

    def row_entries_put(
        self, x: int, indices: Any, values: Any, shape: tuple[int, ...], dtype: str
    ) -> int:
        """`x[arange(n), j] = v` on a 2-D x: one entry per row, at column j[row] (a
        hand-written cross-entropy backward puts -1 at each row's label so). It is
        `select(one_hot(j), v, x)`, the one-hot spelled as `j == iota` (one_hot.py folds
        it); any other pair of indices stays opaque."""
        rows, columns = (self.tensor(i) if self.is_node(i) else None for i in indices)
        if rows is None or columns is None or len(shape) != 2:
            raise _Unsupported("index_put with two indices other than (arange, column)")
        row_node = self.nodes[rows]
        if row_node.op != "iota" or self.shape(rows) != shape[:1]:
            raise _Unsupported("index_put whose row index is not arange over every row")
        if self.shape(columns) != shape[:1] or self.dtype(columns) == "pred":
            raise _Unsupported("index_put with a column index not one per row")
        value = self.value(values)
        if self.is_node(values) and self.shape(value) not in ((), shape[:1]):
            raise _Unsupported("index_put with values not one per row")
        hot = self.one_hot_of(columns, 1, shape)
        if self.is_node(values) and self.shape(value) == shape[:1]:
            fill = self.new(
                "broadcast", (self.convert(value, dtype),), shape, dtype, {"dims": (0,)}
            )
        else:
            fill = self.operand(values, dtype, shape)
        return self.new("select", (hot, fill, x), shape, dtype, final=True)

    def rows_added(
        self, x: int, index: int, values: Any, shape: tuple[int, ...], dtype: str
    ) -> int:
        """`x.index_put_([i], v, accumulate=True)`: each value row added into the row of x its
        index names (an embedding's gradient). It is `x + one_hot(i)^T v`, the one-hot over
        x's rows contracted with v over the index dims."""
        index_shape = self.shape(index)
        k = len(index_shape)
        v = self.convert(self.tensor(values), dtype) if self.is_node(values) else None
        if v is None or self.shape(v) != (*index_shape, *shape[1:]):
            raise _Unsupported("index_put accumulating other than one row per index")
        hot_shape = (*index_shape, shape[0])
        hot = self.convert(self.one_hot_of(index, k, hot_shape), dtype)
        dims = tuple(range(k))
        added = self.dot(hot, v, dims, dims, shape, dtype, final=False)
        return self.new("add", (x, added), shape, dtype, final=True)

    def permuted(self, index: int, values: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`out[p] = v` where p is a permutation of out's one dim: `one_hot(p)^T v`, every
        entry of out written once, none read from what it held before."""
        v = self.convert(self.tensor(values), dtype) if self.is_node(values) else None
        if v is None or self.shape(v) != shape:
            raise _Unsupported("a permutation scatter of other than one value per entry")
        hot = self.convert(self.one_hot_of(index, 1, (*shape, shape[0])), dtype)
        return self.dot(hot, v, (0,), (0,), shape, dtype)

    def one_hot_of(self, index: int, dim: int, shape: tuple[int, ...]) -> int:
        """`index == iota` along the new dim `dim` of `shape`, as `jax.nn.one_hot` lowers."""
        return one_hot_of(self.new, index, self.dtype(index), dim, shape)

    def op_scatter(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`x.scatter(dim, index, value)` with one index per row along `dim` (what autograd's
        `nll_loss_backward` writes: the value at each row's target): `select(one_hot(index),
        value, x)`. Other scatters stay opaque."""
        args = fx_node.args
        x, dim, index = self.tensor(args[0]), int(args[1]) % len(shape), self.tensor(args[2])
        index_shape = self.shape(index)
        if len(index_shape) != len(shape) or index_shape[dim] != 1:
            raise _Unsupported("scatter of more than one entry per row")
        if any(index_shape[d] != shape[d] for d in range(len(shape)) if d != dim):
            raise _Unsupported("scatter over part of the rows")
        if self.is_node(args[3]) and self.shape(self.tensor(args[3])) != ():
            raise _Unsupported("scatter of a tensor of values")
        squeezed = tuple(n for d, n in enumerate(index_shape) if d != dim)
        flat = self.new("reshape", (index,), squeezed, self.dtype(index))
        hot = self.one_hot_of(flat, dim, shape)
        fill = self.operand(args[3], dtype, shape)
        return self.new("select", (hot, fill, x), shape, dtype, final=True)

    def op_index_put(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`x[mask] = v` (`accumulate`: `x[mask] += v`) with one boolean mask over x's
        leading dims and a value that broadcasts to x: a `select` (DTensor's vocab-parallel
        embedding masks its indices and its rows so). Integer indices (a scatter) and a
        value per selected element (whose shape depends on the data) stay opaque."""
        args = fx_node.args
        x, indices = self.tensor(args[0]), args[1]
        accumulate = _arg(fx_node, 3, "accumulate", False)
        if isinstance(indices, (list, tuple)) and len(indices) == 2 and not accumulate:
            return self.row_entries_put(x, indices, args[2], shape, dtype)
        if _writes_every_entry(args[0], indices) and not accumulate:
            return self.permuted(self.tensor(indices[0]), args[2], shape, dtype)
        if accumulate and isinstance(indices, (list, tuple)) and len(indices) == 1:
            index = self.tensor(indices[0]) if self.is_node(indices[0]) else None
            if index is not None and self.dtype(index) != "pred":
                return self.rows_added(x, index, args[2], shape, dtype)
        if not isinstance(indices, (list, tuple)) or len(indices) != 1:
            raise _Unsupported("index_put with more than one index")
        mask = self.tensor(indices[0])
        mask_shape = self.shape(mask)
        if self.dtype(mask) != "pred" or shape[: len(mask_shape)] != mask_shape:
            raise _Unsupported("index_put with integer indices or a mask not over leading dims")
        value = self.value(args[2])
        if isinstance(value, int) and not isinstance(value, bool) and self.is_node(args[2]):
            if len(self.shape(value)) > len(shape) - len(mask_shape):
                raise _Unsupported("index_put with one value per selected element")
        fill = self.operand(args[2], dtype, shape)
        if accumulate:
            fill = self.new("add", (x, fill), shape, dtype)
        where = self.new(
            "broadcast", (mask,), shape, "pred", {"dims": tuple(range(len(mask_shape)))}
        )
        if mask_shape == shape:
            where = mask
        return self.new("select", (where, fill, x), shape, dtype, final=True)

    def op_masked_fill(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`x.masked_fill(mask, v)`: the mask broadcasts like any operand."""
        x = self.tensor(fx_node.args[0])
        where = self.operand(fx_node.args[1], "pred", shape)
        fill = self.operand(fx_node.args[2], dtype, shape)
        return self.new("select", (where, fill, x), shape, dtype, final=True)

    def op_clamp(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.operand(fx_node.args[0], dtype, shape)
        lo, hi = _arg(fx_node, 1, "min"), _arg(fx_node, 2, "max")
        if lo is not None and hi is not None:
            lo_v, hi_v = self.operand(lo, dtype, shape), self.operand(hi, dtype, shape)
            return self.new("clamp", (lo_v, x, hi_v), shape, dtype, final=True)
        if lo is not None:
            return self.new("max", (x, self.operand(lo, dtype, shape)), shape, dtype, final=True)
        if hi is not None:
            return self.new("min", (x, self.operand(hi, dtype, shape)), shape, dtype, final=True)
        return x

    op_clip = op_clamp

    def op_relu(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        return self.new("max", (x, self.fill(0, shape, dtype)), shape, dtype, final=True)

    def op_silu(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        sig = self.new("logistic", (x,), shape, dtype)
        return self.new("mul", (x, sig), shape, dtype, final=True)

    def op_gelu(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """tanh form: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), in the order
        XLA lowers jax.nn.gelu(approximate=True); erf form: x * 0.5 * (1 + erf(x / sqrt 2))."""
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        approximate = fx_node.kwargs.get(
            "approximate", fx_node.args[1] if len(fx_node.args) > 1 else "none"
        )

        def mul(a: int, b: int, final: bool = False) -> int:
            return self.new("mul", (a, b), shape, dtype, final=final)

        def add(a: int, b: int) -> int:
            return self.new("add", (a, b), shape, dtype)

        if approximate == "tanh":
            cube = mul(mul(x, x), x)
            inner = add(x, mul(cube, self.fill(0.044715, shape, dtype)))
            scaled = mul(inner, self.fill(math.sqrt(2.0 / math.pi), shape, dtype))
            t = self.new("tanh", (scaled,), shape, dtype)
            half = mul(add(t, self.fill(1, shape, dtype)), self.fill(0.5, shape, dtype))
            return mul(x, half, final=True)
        if approximate != "none":
            raise _Unsupported(f"gelu approximate={approximate!r}")
        e = self.new("erf", (mul(x, self.fill(math.sqrt(0.5), shape, dtype)),), shape, dtype)
        half = mul(add(e, self.fill(1, shape, dtype)), self.fill(0.5, shape, dtype))
        return mul(x, half, final=True)

    # reductions

    def reduce_dims(self, x: int, dims: Any) -> tuple[int, ...]:
        rank = len(self.shape(x))
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            return tuple(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        return tuple(sorted({int(d) % rank for d in dims})) if rank else ()

    def reduce(
        self, x: int, dims: tuple[int, ...], op: str, shape: tuple[int, ...], dtype: str
    ) -> int:
        """reduce over `dims`, then a reshape to `shape` when keepdim kept unit dims."""
        src = self.shape(x)
        kept = tuple(s for d, s in enumerate(src) if d not in dims)
        out = self.new("reduce", (x,), kept, dtype, {"dims": dims, "op": op}, final=kept == shape)
        if kept != shape:
            out = self.new("reshape", (out,), shape, dtype, final=True)
        return out

    def reduction(self, fx_node: Any, shape: tuple[int, ...], dtype: str, op: str) -> int:
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        return self.reduce(x, self.reduce_dims(x, _arg(fx_node, 1, "dim")), op, shape, dtype)

    op_sum = partialmethod(reduction, op="sum")
    op_amax = partialmethod(reduction, op="max")
    op_amin = partialmethod(reduction, op="min")
    op_prod = partialmethod(reduction, op="prod")

    def extremum_along(self, fx_node: Any, op: str) -> tuple[int, int]:
        """`x.max(dim)`: (the values, a reduce over dim; the indices, which have no
        semantics here: attention with sinks keeps only the values)."""
        x = self.tensor(fx_node.args[0])
        dim = int(_arg(fx_node, 1, "dim", 0)) % len(self.shape(x))
        values_meta, indices_meta = self.out_meta(fx_node)
        shape, dtype = self.shape_of(values_meta), _dtype_of(values_meta.dtype)
        values = self.reduce(self.convert(x, dtype), (dim,), op, shape, dtype)
        attrs = {"hlo_op": f"aten.{op}.dim indices"}
        index_shape, index_type = self.shape_of(indices_meta), _dtype_of(indices_meta.dtype)
        indices = self.new("opaque", (x,), index_shape, index_type, attrs)
        return values, indices

    def op_max(self, fx_node: Any, shape: Any, dtype: Any, op: str = "max") -> int:
        if len(fx_node.args) != 1:  # max.dim returns (values, indices)
            raise _Unsupported(f"{op}.dim")
        return self.reduction(fx_node, shape, dtype, op)

    op_min = partialmethod(op_max, op="min")

    def op_cumsum(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`x.cumsum(dim)`: the canonical prefix sum (PyTorch's own decomposition is a masked
        sum over a square mask, whose size grows with the square of the dim)."""
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        rank = len(self.shape(x))
        if not rank:  # a scalar's prefix sum is itself
            return x
        dim = int(fx_node.args[1] if len(fx_node.args) > 1 else fx_node.kwargs["dim"]) % rank
        return self.new("cumsum", (x,), shape, dtype, {"dim": dim}, final=True)

    def op_mean(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """mean = reduce sum, then divide by the number of reduced elements."""
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        dims = self.reduce_dims(x, _arg(fx_node, 1, "dim"))
        count = math.prod(self.shape(x)[d] for d in dims)
        total = self.reduce(x, dims, "sum", shape, dtype)
        self.nodes[total].name = f"{fx_node.name}.sum"
        return self.new("div", (total, self.fill(count, shape, dtype)), shape, dtype, final=True)

    def op_native_layer_norm(self, fx_node: Any, shape: Any, dtype: Any) -> tuple[int, ...]:
        """(out, mean, rstd) of layer norm over the trailing `normalized_shape` dims: mean,
        centre, mean of squares, rsqrt(var + eps), scale, then weight and bias."""
        args = fx_node.args
        metas = self.out_meta(fx_node)
        if not isinstance(metas, (list, tuple)) or len(metas) != 3:
            raise _Unsupported("native_layer_norm without three outputs")
        out_shape, stat_shape = self.shape_of(metas[0]), self.shape_of(metas[1])
        out_dtype, stat_dtype = _dtype_of(metas[0].dtype), _dtype_of(metas[1].dtype)
        x = self.convert(self.tensor(args[0]), stat_dtype)
        rank, count = len(out_shape), len(args[1])
        dims = tuple(range(rank - count, rank))
        mean, centred = self.centre(x, dims, stat_shape)
        var = self.mean_over(self.new("mul", (centred, centred), out_shape, stat_dtype), dims)
        eps = self.fill(float(args[4]), stat_shape, stat_dtype)
        rstd = self.new(
            "rsqrt", (self.new("add", (var, eps), stat_shape, stat_dtype),), stat_shape, stat_dtype
        )
        normed = self.new(
            "mul", (centred, self.broadcast_to(rstd, out_shape)), out_shape, stat_dtype
        )
        out = self.affine(self.convert(normed, out_dtype), args[2], args[3])
        self.nodes[out].name = fx_node.name
        return out, mean, rstd

    def mean_over(self, x: int, dims: tuple[int, ...]) -> int:
        """The mean of `x` over `dims`, the reduced dims kept as size 1 (keepdim)."""
        shape, dtype = self.shape(x), self.dtype(x)
        kept = tuple(1 if d in dims else s for d, s in enumerate(shape))
        total = self.reduce(x, dims, "sum", kept, dtype)
        count = self.fill(math.prod(shape[d] for d in dims), kept, dtype)
        return self.new("div", (total, count), kept, dtype)

    def centre(self, x: int, dims: tuple[int, ...], stat_shape: tuple[int, ...]) -> tuple[int, int]:
        """(mean, x - mean) over `dims`."""
        mean = self.mean_over(x, dims)
        if self.shape(mean) != stat_shape:
            raise _Unsupported(f"layer norm statistics of shape {list(stat_shape)}")
        spread = self.broadcast_to(mean, self.shape(x))
        return mean, self.new("sub", (x, spread), self.shape(x), self.dtype(x))

    def affine(self, x: int, weight: Any, bias: Any) -> int:
        """x * weight + bias, each optional (None), broadcast over the leading dims."""
        shape, dtype = self.shape(x), self.dtype(x)
        if weight is not None:
            x = self.new("mul", (x, self.operand(weight, dtype, shape)), shape, dtype)
        if bias is not None:
            x = self.new("add", (x, self.operand(bias, dtype, shape)), shape, dtype)
        return x

    def softmax_parts(
        self, x: int, dim: int, shape: tuple[int, ...], dtype: str, log: bool = False
    ) -> tuple:
        """(max of x over dim, x - max, exp of it, the sum of the exps, that sum broadcast
        back; with `log` the sum's log: taken before the broadcast, as hand-written
        log-sum-exps (a vocab-parallel cross-entropy, `jax.nn.log_softmax`) take it)."""
        rest = tuple(d for d in range(len(shape)) if d != dim)
        reduced = tuple(shape[d] for d in rest)
        peak = self.new("reduce", (x,), reduced, dtype, {"dims": (dim,), "op": "max"})
        spread = self.new("broadcast", (peak,), shape, dtype, {"dims": rest})
        shifted = self.new("sub", (x, spread), shape, dtype)
        e = self.new("exp", (shifted,), shape, dtype)
        total = self.new("reduce", (e,), reduced, dtype, {"dims": (dim,), "op": "sum"})
        if log:
            total = self.new("log", (total,), reduced, dtype)
        denominator = self.new("broadcast", (total,), shape, dtype, {"dims": rest})
        return peak, shifted, e, total, denominator

    def op_softmax(
        self, fx_node: Any, shape: tuple[int, ...], dtype: str, log: bool = False
    ) -> int:
        """max-reduce, broadcast, sub, exp, sum-reduce, broadcast, div (as jax.nn.softmax)."""
        x = self.convert(self.tensor(fx_node.args[0]), dtype)
        dim = int(fx_node.args[1]) % len(shape) if shape else 0
        _, shifted, e, _, denominator = self.softmax_parts(x, dim, shape, dtype, log)
        if log:
            return self.new("sub", (shifted, denominator), shape, dtype, final=True)
        return self.new("div", (e, denominator), shape, dtype, final=True)

    op__softmax = op_softmax
    op_log_softmax = partialmethod(op_softmax, log=True)

    op__log_softmax = op_log_softmax

    def attention(self, fx_node: Any, shape: Any, dtype: Any) -> Any:
        """Fused attention (SDPA and the kernels it dispatches to) as its math:
        softmax(q @ k^T * scale + mask) @ v over the last two dims, batch and head dims
        leading, in the dtype of q. Key/value heads fewer than query heads (GQA) are each
        repeated for their group of query heads, as `enable_gqa` and `repeat_kv` do; a
        causal mask keeps key j <= query i; a boolean mask keeps where true, a float mask is
        added. Results: (output, log-sum-exp, ...) for the kernels, the output for SDPA."""
        args, kwargs = fx_node.args, fx_node.kwargs
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
        if _op_name(fx_node.target)[1] != "scaled_dot_product_attention":
            names = ("query", "key", "value", "dropout_p", "is_causal")
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        if given.get("dropout_p", 0.0) not in (0, 0.0):
            raise _Unsupported("attention with dropout")
        q, k, v = (self.tensor(given[n]) for n in ("query", "key", "value"))
        metas = self.out_meta(fx_node)
        out_meta = metas[0] if isinstance(metas, (list, tuple)) else metas
        dtype = _dtype_of(out_meta.dtype)
        qs, ks, vs = self.shape(q), self.shape(k), self.shape(v)
        if len(qs) != len(ks) or len(qs) < 3 or qs[:-3] != ks[:-3]:
            raise _Unsupported("attention operands of other batch shapes")
        lead = len(qs) - 3  # dims before (heads, sequence, features)
        if ks[-3] != qs[-3]:
            k, v = self.repeat_heads(k, qs[-3]), self.repeat_heads(v, qs[-3])
        batch = tuple(range(lead + 1))
        rank = len(qs)
        scores, _ = self.attention_scores(q, k, given, dtype)
        probs, lse = self.softmax_with_lse(scores, dtype)
        out_shape = (*qs[:-1], vs[-1])
        out = self.dot(probs, v, (rank - 1,), (rank - 2,), out_shape, dtype, batch, batch)
        self.nodes[out].name = fx_node.name
        if not isinstance(metas, (list, tuple)):
            return out
        rest = [None] * (len(metas) - 2)
        return (out, lse, *rest)

    def attention_scores(self, q: int, k: int, given: dict, dtype: str) -> tuple[int, float]:
        """(q @ k^T * scale, masked as `given` says; the scale), k's heads already q's."""
        qs, ks = self.shape(q), self.shape(k)
        rank = len(qs)
        batch = tuple(range(rank - 2))
        scores_shape = (*qs[:-1], ks[-2])
        scores = self.dot(q, k, (rank - 1,), (rank - 1,), scores_shape, dtype, batch, batch, False)
        scale = given.get("scale")
        scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
        scores = self.new(
            "mul", (scores, self.fill(scale, scores_shape, dtype)), scores_shape, dtype
        )
        mask = given.get("attn_mask")
        if given.get("is_causal"):
            scores = self.masked_scores(scores, self.causal_mask(qs[-2], ks[-2]), dtype)
        if mask is not None:
            mask_id = self.tensor(mask)
            if self.dtype(mask_id) == "pred":
                scores = self.masked_scores(scores, mask_id, dtype)
            else:
                bias = self.broadcast_to(self.convert(mask_id, dtype), scores_shape)
                scores = self.new("add", (scores, bias), scores_shape, dtype)
        return scores, scale

    def op__scaled_dot_product_flash_attention_for_cpu_backward(
        self, fx_node: Any, shape: Any, dtype: Any
    ) -> tuple[int, int, int]:
        """The fused kernel's backward as its math, from the recomputed probabilities P:
        dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ = dS K * scale,
        dK = dS^T Q * scale (query and key heads equal, no dropout)."""
        names = ("grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p", "is_causal")
        given = {**dict(zip(names, fx_node.args, strict=False)), **fx_node.kwargs}
        if given.get("dropout_p", 0.0) not in (0, 0.0):
            raise _Unsupported("attention backward with dropout")
        metas = self.out_meta(fx_node)
        dtype = _dtype_of(metas[0].dtype)
        g, q, k, v, o = (
            self.convert(self.tensor(given[n]), dtype)
            for n in ("grad_out", "query", "key", "value", "out")
        )
        qs, ks = self.shape(q), self.shape(k)
        if len(qs) != len(ks) or len(qs) < 3 or qs[:-3] != ks[:-3]:
            raise _Unsupported("attention backward over other batch shapes")
        kv_shape = ks
        if ks[-3] != qs[-3]:  # GQA: each key/value head serves a group of query heads
            k, v = self.repeat_heads(k, qs[-3]), self.repeat_heads(v, qs[-3])
            ks = self.shape(k)
        rank = len(qs)
        batch = tuple(range(rank - 2))
        scores, scale = self.attention_scores(q, k, given, dtype)
        probs, _ = self.softmax_with_lse(scores, dtype)
        p_shape = self.shape(probs)
        last, rows = (rank - 1,), (rank - 2,)
        dv = self.dot(probs, g, rows, rows, self.shape(v), dtype, batch, batch)
        dp = self.dot(g, v, last, last, p_shape, dtype, batch, batch, False)
        weighted = self.new("mul", (g, o), self.shape(g), dtype)
        total = self.new("reduce", (weighted,), p_shape[:-1], dtype, {"dims": last, "op": "sum"})
        spread = self.new("broadcast", (total,), p_shape, dtype, {"dims": tuple(range(rank - 1))})
        ds = self.new("mul", (probs, self.new("sub", (dp, spread), p_shape, dtype)), p_shape, dtype)
        dq = self.dot(ds, k, last, rows, qs, dtype, batch, batch, False)
        dk = self.dot(ds, q, rows, rows, ks, dtype, batch, batch, False)
        dq, dk = (
            self.new("mul", (x, self.fill(scale, self.shape(x), dtype)), self.shape(x), dtype)
            for x in (dq, dk)
        )
        if kv_shape != ks:  # the gradients of a shared head summed over its group
            dk, dv = (self.group_sum(x, kv_shape) for x in (dk, dv))
        return dq, dk, dv

    def group_sum(self, x: int, kv_shape: tuple[int, ...]) -> int:
        """x [..., heads, s, d] summed over each group of heads that shares a key/value head."""
        shape, dtype = self.shape(x), self.dtype(x)
        kv = kv_shape[-3]
        grouped = (*shape[:-3], kv, shape[-3] // kv, *shape[-2:])
        split = self.new("reshape", (x,), grouped, dtype)
        group_dim = len(shape) - 2
        attrs = {"dims": (group_dim,), "op": "sum"}
        return self.new("reduce", (split,), kv_shape, dtype, attrs)

    def repeat_heads(self, x: int, heads: int) -> int:
        """Each of x's heads (dim -3) repeated for `heads / its heads` query heads in a row."""
        shape, dtype = self.shape(x), self.dtype(x)
        kv = shape[-3]
        if heads % kv:
            raise _Unsupported(f"{heads} query heads over {kv} key/value heads")
        lead = len(shape) - 3
        grown = (*shape[: lead + 1], heads // kv, *shape[-2:])
        dims = (*range(lead + 1), lead + 2, lead + 3)
        spread = self.new("broadcast", (x,), grown, dtype, {"dims": dims})
        return self.new("reshape", (spread,), (*shape[:lead], heads, *shape[-2:]), dtype)

    def causal_mask(self, queries: int, keys: int) -> int:
        """[queries, keys]: key j is seen by query i when j <= i (torch's top-left causal)."""
        rows = self.new("iota", (), (queries, keys), "s64", {"dim": 0})
        cols = self.new("iota", (), (queries, keys), "s64", {"dim": 1})
        return self.new("compare", (rows, cols), (queries, keys), "pred", {"direction": "GE"})

    def masked_scores(self, scores: int, mask: int, dtype: str) -> int:
        shape = self.shape(scores)
        keep = self.broadcast_to(mask, shape)
        hidden = self.fill(float("-inf"), shape, dtype)
        return self.new("select", (keep, scores, hidden), shape, dtype)

    def softmax_with_lse(self, x: int, dtype: str) -> tuple[int, int]:
        """(softmax of x over its last dim, its log-sum-exp)."""
        shape = self.shape(x)
        reduced = shape[:-1]
        peak, _, e, total, denominator = self.softmax_parts(x, len(shape) - 1, shape, dtype)
        probs = self.new("div", (e, denominator), shape, dtype)
        lse = self.new("add", (peak, self.new("log", (total,), reduced, dtype)), reduced, dtype)
        return probs, lse

    def op_index(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`x[i]` with one integer index tensor on dim 0 (`weights[expert_ids]`): whole
        slices of x, the index dims first, as `take` along dim 0. `x[arange(n), j]` on a
        matrix (Megatron's predicted logits, `logits_2d[arange_1d, target]`): row r's entry
        j[r], as `take_along` dim 1. Other indexing (boolean masks, later dims, other pairs
        of index tensors) stays opaque."""
        x, indices = self.tensor(fx_node.args[0]), fx_node.args[1]
        if isinstance(indices, (list, tuple)) and len(indices) == 2 and None not in indices:
            return self._entry_per_row(x, indices, shape, dtype)
        if not isinstance(indices, (list, tuple)) or len(indices) != 1 or indices[0] is None:
            raise _Unsupported("index with other than one index tensor on dim 0")
        index = self.tensor(indices[0])
        if self.dtype(index) == "pred":
            raise _Unsupported("index by a boolean mask")
        return self.new("take", (x, index), shape, dtype, {"dim": 0}, final=True)

    def _entry_per_row(self, x: int, indices, shape: tuple[int, ...], dtype: str) -> int:
        rows, columns = (self.tensor(i) for i in indices)
        n = self.shape(x)[0] if len(self.shape(x)) == 2 else -1
        counted = self.nodes[rows].op == "iota" and self.nodes[rows].attrs.get("dim", 0) == 0
        if not counted or self.shape(rows) != (n,) or self.shape(columns) != (n,):
            raise _Unsupported("index by two tensors other than (arange(rows), columns)")
        column = self.new("reshape", (columns,), (n, 1), self.dtype(columns))
        taken = self.new("take_along", (x, column), (n, 1), dtype, {"dim": 1})
        return self.new("reshape", (taken,), shape, dtype, final=True)

    def op_topk(self, fx_node: Any, shape: Any, dtype: Any) -> tuple[int, int]:
        """(values, indices) of the k largest (or smallest) entries along the last dim, as
        two `top_k` nodes (HLO's `topk` reads the same). Another dim stays opaque."""
        x, k = self.tensor(fx_node.args[0]), int(fx_node.args[1])
        dim, largest = _arg(fx_node, 2, "dim", -1), _arg(fx_node, 3, "largest", True)
        rank = len(self.shape(x))
        if int(dim) % rank != rank - 1:
            raise _Unsupported("topk along another dim than the last")
        metas = self.out_meta(fx_node)
        values, indices = (
            self.new(
                "top_k",
                (x,),
                self.shape_of(meta),
                _dtype_of(meta.dtype),
                {"k": k, "part": part, "largest": bool(largest)},
            )
            for part, meta in enumerate(metas[:2])
        )
        return values, indices

    def op_embedding(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`weight[indices]`: whole rows of the table, the index dims first (`take` along
        dim 0, as XLA's gather for `jnp.take` reads). `padding_idx` only changes gradients."""
        weight, indices = self.tensor(fx_node.args[0]), self.tensor(fx_node.args[1])
        return self.new("take", (weight, indices), shape, dtype, {"dim": 0}, final=True)

    def op_gather(self, fx_node: Any, shape: tuple[int, ...], dtype: str) -> int:
        """`torch.gather(x, dim, index)`: one entry per row along `dim` (`take_along`, as XLA's
        gather for `take_along_axis` reads) when the index covers every other dim of x;
        a gather over part of the other dims stays opaque."""
        x, index = self.tensor(fx_node.args[0]), self.tensor(fx_node.args[2])
        rank = len(self.shape(x))
        dim = int(fx_node.args[1]) % max(rank, 1)
        same = [d for d in range(rank) if d != dim]
        if len(self.shape(index)) != rank or any(
            self.shape(index)[d] != self.shape(x)[d] for d in same
        ):
            raise _Unsupported("gather over part of the other dims")
        return self.new("take_along", (x, index), shape, dtype, {"dim": dim}, final=True)

    # ---- values that depend on the device (scalify/capture/device_ops.py)

    def device_op(self, fx_node: Any, name: str) -> int:
        args = fx_node.args
        if name == "device_coordinate":  # (partition id / stride) % size, as XLA writes it
            size, stride = int(args[0]), int(args[1])
            coord = device_coordinate(self.new, size, stride, "s64")
            self.nodes[coord].name = self.current.name  # the traced node's own name
            return coord
        if name == "chunk_at":  # x.chunk(chunks, dim)[index]: a slice at index * size
            x, index = self.tensor(args[0]), self.tensor(args[3])
            dim, chunks = int(args[1]), int(args[2])
            shape, dtype = self.out_type(fx_node)
            size = shape[dim]
            start = index
            if size != 1:
                step = self.constant(size, self.dtype(index))
                start = self.new("mul", (index, step), (), self.dtype(index))
            attrs = {"dim": dim, "size": size, "parts": chunks}
            return self.new("slice_at", (x, start), shape, dtype, attrs, final=True)
        raise _Unsupported(f"{DEVICE_NAMESPACE}.{name}")

    # ---- collectives

    def group_size(self, group: Any) -> int | None:
        """The size of a process group named in the graph: recorded in the file, else a
        live group of that name in this process, else None."""
        if str(group) in self.group_sizes:
            return int(self.group_sizes[str(group)])
        return _live_group(group, lambda dist, g: int(g.size()))

    def group_ranks(self, group: Any) -> tuple[int, ...] | None:
        """The global ranks of this device's process group named in the graph (its peers
        along one mesh dim of several: {0, 2} for the first dim of a 2 x 2 mesh), when a live
        group of that name is in this process; None otherwise."""
        return _live_group(group, lambda dist, g: tuple(dist.get_process_group_ranks(g)))

    def collective(self, fx_node: Any, name: str) -> Any:
        args, arg = fx_node.args, partial(_arg, fx_node)
        if name == "wait_tensor":
            return self.tensor(args[0])
        op_name = f"{_op_name(fx_node.target)[0]}.{name}"
        shape, dtype = self.out_type(fx_node)
        if name == "all_reduce":
            reduce_op = str(arg(1, "reduceOp")).lower()
            size = self.group_size(arg(2, "group_name"))
        elif name == "all_gather_into_tensor":
            reduce_op, size = "", int(arg(1, "group_size"))
        elif name == "reduce_scatter_tensor":
            reduce_op, size = str(arg(1, "reduceOp")).lower(), int(arg(2, "group_size"))
        elif name == "all_to_all_single":
            reduce_op, size = "", self.group_size(arg(3, "group_name"))
            splits = [arg(1, "output_split_sizes"), arg(2, "input_split_sizes")]
            given = [list(s) for s in splits if s is not None]
            for sizes in given:  # even splits (what funcol passes) are the plain all-to-all
                if len(set(sizes)) != 1 or (size is not None and len(sizes) != size):
                    raise _Unsupported("all_to_all_single with uneven splits")
                size = len(sizes)
        else:
            raise _Unsupported(name)
        if size is None:
            group = arg(_GROUP_ARG[name], "group_name")
            return self.opaque(fx_node, op_name, {"unresolved_group": str(group)})
        if reduce_op and reduce_op not in _REDUCE_OPS and reduce_op != "avg":
            raise _Unsupported(f"reduce op {reduce_op}")
        kind = _COLLECTIVE_KINDS[name]
        ranks = self.group_ranks(arg(_GROUP_ARG[name], "group_name"))
        if kind == "reduce_scatter":
            return self.reduce_scatter(args[0], shape, dtype, size, reduce_op, ranks)
        x = self.tensor(args[0])
        return self.emit_collective(kind, x, shape, dtype, size, reduce_op, ranks=ranks)

    def reduce_scatter(
        self,
        arg: Any,
        shape: tuple[int, ...],
        dtype: str,
        size: int,
        reduce_op: str,
        ranks: tuple[int, ...] | None = None,
    ) -> int:
        """A reduce-scatter along dim 0 of `arg`, read as one along the dim of the value it
        was arranged from: chunks concatenated along dim 0 (funcol's `scatter_dim`), or a
        transpose that moved the dim to the front (`movedim`, as spmd_types writes it; the
        result is then that transpose of the reduce-scatter along the dim)."""
        scattered = self.scattered_source(arg, size)
        kind = "reduce_scatter"
        if scattered is not None:
            y, dim = scattered
            return self.emit_collective(kind, y, shape, dtype, size, reduce_op, dim, ranks)
        moved = self.moved_source(arg)
        if moved is None:
            x = self.tensor(arg)
            return self.emit_collective(kind, x, shape, dtype, size, reduce_op, 0, ranks)
        x, perm = moved
        local = tuple(shape[perm.index(d)] for d in range(len(perm)))
        out = self.emit_collective(kind, x, local, dtype, size, reduce_op, perm[0], ranks)
        return self.new("transpose", (out,), shape, dtype, {"perm": perm})

    def moved_source(self, arg: Any) -> tuple[int, tuple[int, ...]] | None:
        """(x, perm) when `arg` is a (copied) transpose of x by `perm`."""
        while _is_aten(arg, "clone", "contiguous"):
            arg = arg.args[0]
        if not _is_aten(arg, "permute", "transpose"):
            return None
        node = self.tensor(arg)
        if self.nodes[node].op != "transpose":
            return None
        return self.nodes[node].operands[0], tuple(self.nodes[node].attrs["perm"])

    def c10d_collective(self, fx_node: Any, name: str) -> Any:
        """The in-place c10d collectives (`dist.all_reduce(x)`, `all_gather_into_tensor(out,
        x)`, `reduce_scatter_tensor(out, x)`, as make_fx records them under DTensor-free
        code such as spmd_types and transformers' inference path), read functionally: the
        op's (tensors, work) result holds the collective's value. The buffer it writes must
        not be read again except through that result."""
        args = fx_node.args
        written = args[0][0] if name == "allreduce_" and len(args[0]) == 1 else args[0]
        if not self.is_node(written) or not self.only_read_before(written, fx_node):
            raise _Unsupported(f"c10d.{name} whose buffer is read around it")
        group = args[1] if name == "allreduce_" else args[2]
        size, ranks = self.process_group_size(group), self.process_group_ranks(group)
        if size is None:
            raise _Unsupported(f"c10d.{name} over a process group it cannot resolve")
        shape, dtype = self.shape(self.tensor(written)), self.dtype(self.tensor(written))
        if name == "allreduce_":
            op = self.reduce_op_of(args[2])
            x = self.tensor(written)
            out = self.emit_collective("all_reduce", x, shape, dtype, size, op, ranks=ranks)
            return ((out,), None)
        if name == "_allgather_base_":
            x = self.tensor(args[1])
            return (self.emit_collective("all_gather", x, shape, dtype, size, ranks=ranks), None)
        if name == "_reduce_scatter_base_":
            op = self.reduce_op_of(args[3])
            return (self.reduce_scatter(args[1], shape, dtype, size, op, ranks), None)
        raise _Unsupported(f"c10d.{name}")

    # ---- writes through views (`out[:, :k].copy_(x)`)

    def written_in_place(self, fx_node: Any, namespace: str, name: str, overload: str) -> None:
        """After an in-place op that later ops may see (it is not read as a new value): the
        tensor it wrote is that value from here on. Written through a chain of slices, the
        tensor the slices view becomes its old value with the slice replaced (a
        concatenation), and through a reshape the written value reshaped back; written
        through another view, every later read of the tensor is refused. Either way the
        views made before the write go stale (reading one is refused, never read as the old
        value), but for earlier in-place results that are the whole tensor itself: they
        read its new value."""
        if not _in_place(fx_node) or self.rewritable_in_place(fx_node):
            return
        target = fx_node.args[0]
        if not self.is_node(target):
            return
        chain, root = [], target
        while root.op == "call_function" and _is_view(root) and self.is_node(root.args[0]):
            chain.append(root)
            root = root.args[0]
        stale = [v for v in self.views_of(root) if self.order[v] < self.order[fx_node]]
        new = self.functional_value(fx_node, namespace, name, overload)
        self.env[fx_node] = new
        if new is None or not all(
            _plain_slice(v) or _select(v) or _in_place(v) or _whole_reshape(v) or _parts_view(v)
            for v in chain
        ):
            stale.append(root)  # a write Scalify cannot put back: no later read of it
        elif not chain:
            self.env[root] = new
        else:
            was_complex = self.is_complex(root)
            self.env[root] = self.write_back(root, chain, new)
            if was_complex:  # its parts written through its real view: still complex
                self.complex.add(self.env[root])
        if root not in stale and self.env.get(root) is not None:
            whole = [
                v
                for v in stale
                if _in_place(v) and self.shape_of(v.meta["val"]) == self.shape(self.env[root])
            ]
            for view in whole:  # an earlier in-place result is the tensor itself
                self.env[view] = self.env[root]
            stale = [v for v in stale if v not in whole]
        for view in stale:
            self.stale.setdefault(view, fx_node)

    def functional_value(self, fx_node: Any, namespace: str, name: str, overload: str) -> Any:
        """The value an in-place op writes, lowered as its functional form (None when that
        has no semantics either)."""
        self.functional = True
        try:
            value = self.call(fx_node, namespace, name, overload)
        except _Unsupported:
            return None
        finally:
            self.functional = False
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def write_back(self, root: Any, chain: list[Any], written: int) -> int:
        """`root`'s value with the slice that `chain` (target first: slices, and results of
        earlier in-place ops, which are their targets) views replaced."""
        current = {root: self.env[root]}
        for view in reversed(chain):
            if _in_place(view) or _parts_view(view):  # its target itself (a complex value is
                current[view] = current[view.args[0]]  # held as its parts already)
                continue
            if _whole_reshape(view):  # the same elements in row-major order, reshaped
                parent = current[view.args[0]]
                shape = self.shape_of(view.meta["val"])
                current[view] = self.new("reshape", (parent,), shape, self.dtype(parent))
                continue
            if _select(view):  # one index of a dim, the dim dropped: a slice of one, squeezed
                parent = current[view.args[0]]
                dim, index = self.select_index(view, parent)
                shape = self.shape_of(view.meta["val"])
                one = self.piece(parent, dim, index, index + 1)
                current[view] = self.new("reshape", (one,), shape, self.dtype(parent))
                continue
            dim, begin, end = self.slice_bounds(view, current[view.args[0]])
            current[view] = self.piece(current[view.args[0]], dim, begin, end)
        for view in chain:
            if _in_place(view) or _parts_view(view):
                continue
            parent = current[view.args[0]]
            if _whole_reshape(view):  # written through a reshape: the parent reshaped back
                shape, dtype = self.shape(parent), self.dtype(parent)
                written = self.new("reshape", (self.convert(written, dtype),), shape, dtype)
                continue
            if _select(view):  # the written value gets its dim back, as a slice of one
                dim, begin = self.select_index(view, parent)
                end, shape = begin + 1, list(self.shape(parent))
                shape[dim] = 1
                written = self.new("reshape", (written,), tuple(shape), self.dtype(written))
            else:
                dim, begin, end = self.slice_bounds(view, parent)
            size, dtype = self.shape(parent)[dim], self.dtype(parent)
            parts = [self.piece(parent, dim, 0, begin)] if begin else []
            parts.append(self.convert(written, dtype))
            parts += [self.piece(parent, dim, end, size)] if end < size else []
            written = self.concatenate(parts, dim, self.shape(parent), dtype)
        return written

    def slice_bounds(self, view: Any, parent: int) -> tuple[int, int, int]:
        """(dim, begin, end) of a step-1 `aten.slice` view of `parent`'s value."""
        shape = self.shape(parent)
        dim, start, end, _ = _slice_args(view)
        dim = int(dim) % len(shape)
        begin, stop, _ = slice(start, end, 1).indices(shape[dim])
        return dim, begin, max(begin, stop)

    def select_index(self, view: Any, parent: int) -> tuple[int, int]:
        """(dim, index) of an `aten.select` of `parent`'s value, both made nonnegative (a
        read, `op_select`, and a write through it, `write_back`)."""
        shape = self.shape(parent)
        dim = int(view.args[1]) % len(shape)
        return dim, int(view.args[2]) % shape[dim]

    def piece(self, x: int, dim: int, begin: int, end: int) -> int:
        """x[begin:end] along dim; a piece of a concatenation along dim is that piece."""
        if (begin, end) == (0, self.shape(x)[dim]):
            return x
        node = self.nodes[x]
        if node.op == "concatenate" and node.attrs.get("dim") == dim:
            offset = 0
            for part in node.operands:
                size = self.shape(part)[dim]
                if (begin, end) == (offset, offset + size):
                    return part
                if offset <= begin and end <= offset + size:
                    return self.piece(part, dim, begin - offset, end - offset)
                offset += size
        value, _ = self.slice_node(x, dim, begin, end, 1, final=False)
        return value

    def views_of(self, root: Any) -> list[Any]:
        """Every op whose result shares `root`'s memory through a chain of views."""
        if not self.order:
            self.order = {node: i for i, node in enumerate(self.gm.graph.nodes)}
        found, stack = [], [root]
        while stack:
            for user in stack.pop().users:
                if user.op == "call_function" and _is_view(user) and user not in found:
                    found.append(user)
                    stack.append(user)
        return found

    def refuse_stale_reads(self, fx_node: Any) -> None:
        for arg in _flatten([list(fx_node.args), list(fx_node.kwargs.values())]):
            writer = self.stale.get(arg) if self.is_node(arg) else None
            if writer is not None:
                raise ScalifyError(
                    f"`{fx_node.name}`{at_line(self.loc)} reads `{arg.name}` after "
                    f"`{writer.name}` wrote into its memory in place; Scalify reads such "
                    "writes only through slices "
                    "of a tensor read afterwards, so it does not guess this value",
                    self.path,
                )

    def only_read_before(self, tensor: Any, op: Any, through_views: bool = False) -> bool:
        """Whether every reader of `tensor` but `op` comes before `op`; `through_views`: and
        every reader of a view of it (which shares its memory) too."""
        if not self.order:
            self.order = {node: i for i, node in enumerate(self.gm.graph.nodes)}
        here = self.order[op]
        for user in tensor.users:
            if user is op:
                continue
            if self.order[user] > here:
                return False
            if through_views and _is_view(user) and not self.only_read_before(user, op, True):
                return False
        return True

    def attribute(self, fx_node: Any) -> Any:
        """What a `get_attr` node reads of the graph module (None for anything else)."""
        if not self.is_node(fx_node) or fx_node.op != "get_attr":
            return None
        obj: Any = self.gm
        for part in str(fx_node.target).split("."):
            obj = getattr(obj, part, None)
        return obj

    def process_group_size(self, arg: Any) -> int | None:
        try:
            from torch._C._distributed_c10d import ProcessGroup

            return int(ProcessGroup.unbox(self.attribute(arg)).size())
        except Exception:  # noqa: BLE001 - not a process group object: unresolved
            return None

    def process_group_ranks(self, arg: Any) -> tuple[int, ...] | None:
        try:
            import torch.distributed as dist
            from torch._C._distributed_c10d import ProcessGroup

            return tuple(dist.get_process_group_ranks(ProcessGroup.unbox(self.attribute(arg))))
        except Exception:  # noqa: BLE001 - not a process group object: read by its size
            return None

    def reduce_op_of(self, arg: Any) -> str:
        try:
            code = self.attribute(arg).op()
        except Exception:  # noqa: BLE001 - not a ReduceOp object
            code = None
        if code not in _C10D_REDUCE_OPS:
            raise _Unsupported(f"c10d reduce op {code}")
        return _C10D_REDUCE_OPS[code]

    def emit_collective(
        self,
        kind: str,
        x: int,
        shape: tuple[int, ...],
        dtype: str,
        size: int,
        reduce_op: str = "",
        dim: int = 0,
        ranks: tuple[int, ...] | None = None,
    ) -> int:
        """One collective over a group of `size` devices along `dim` (an `avg` reduction is
        a sum divided by the size): over `ranks`, this device's group, where they are known
        (the mesh says which axis that is), else over devices 0 .. size - 1."""
        if size == 1 and shape == self.shape(x):
            return x  # a group of one device: every collective is its operand (Megatron's
            # cross-entropy all-reduces at tensor-parallel size 1 too)
        group = ranks if ranks is not None and len(ranks) == size else tuple(range(size))
        attrs: dict[str, Any] = {"groups": (group,)}
        if reduce_op:
            attrs["op"] = "sum" if reduce_op == "avg" else _REDUCE_OPS[reduce_op]
        if kind != "all_reduce":
            attrs["dim"] = dim
        if kind == "all_to_all":
            attrs["split_dim"] = attrs["concat_dim"] = dim
        out = self.new(kind, (x,), shape, dtype, attrs, final=reduce_op != "avg")
        if reduce_op == "avg":
            out = self.new("div", (out, self.fill(size, shape, dtype)), shape, dtype, final=True)
        return out

    def scattered_source(self, arg: Any, size: int) -> tuple[int, int] | None:
        """(y, d) when a reduce-scatter's operand is `y`'s `size` chunks along d concatenated
        along dim 0: funcol's `reduce_scatter_tensor` with `scatter_dim=d` (DTensor's
        Partial -> Shard(d)); the whole is one reduce-scatter of y along d."""
        if not _is_aten(arg, "cat") or not arg.args:
            return None
        parts = arg.args[0]
        cat_dim = _arg(arg, 1, "dim", 0)
        chunks = _chunks_of(parts)
        if chunks is None or len(parts) != size or cat_dim % len(_shape_of_fx(arg)) != 0:
            return None
        return self.tensor(chunks[0]), chunks[1]

    def gather_source(self, node: Any) -> tuple[Any, Any, int] | None:
        """(collective node, gathered input, group size) when `node` is the result of an
        all-gather along dim 0: funcol's `all_gather_into_tensor` (or its `wait_tensor`),
        or the buffer c10d's in-place `_allgather_base_` wrote."""
        if _collective(node) == "wait_tensor":
            node = node.args[0]
        if _collective(node) == "all_gather_into_tensor":
            size = _arg(node, 1, "group_size")
            return (node, node.args[0], int(size)) if size is not None else None
        if getattr(node, "target", None) is operator.getitem and node.args[1] == 0:
            base = node.args[0]
            if _op_name(getattr(base, "target", None)) == ("c10d", "_allgather_base_", "default"):
                size = self.process_group_size(base.args[2])
                return (base, base.args[1], size) if size is not None else None
        return None

    def folded_all_gather(self, fx_node: Any, dim: int, shape: tuple[int, ...]) -> int | None:
        """One all-gather along `dim` when this `cat` along `dim` joins, in order, the
        group-size chunks along dim 0 of an all-gather: funcol's `all_gather_tensor` with
        `gather_dim=dim` (DTensor's Shard(dim) -> Replicate), and code that writes the same
        by hand around `all_gather_into_tensor`."""
        parts = fx_node.args[0]
        chunks = _chunks_of(parts)
        if chunks is None or chunks[1] != 0:
            return None
        source = self.gather_source(chunks[0])
        if source is None or source[2] != len(parts) or source[0] not in self.env:
            return None
        return self.gather_along(source, dim, shape)

    def viewed_all_gather(self, fx_node: Any, shape: tuple[int, ...]) -> int | None:
        """One all-gather along d when this view of an all-gather of x only moves the
        gathered dim 0 to dim d, x's dims before d being all 1: funcol's view form of
        `all_gather_tensor` (batch 1, gathered along the sequence)."""
        source = self.gather_source(fx_node.args[0])
        if source is None or source[0] not in self.env:
            return None
        local, size = self.shape(self.tensor(source[1])), source[2]
        if len(shape) != len(local):
            return None
        moved = [d for d, (a, b) in enumerate(zip(local, shape, strict=True)) if a != b]
        if len(moved) != 1 or moved[0] == 0:
            return None
        dim = moved[0]
        if shape[dim] != size * local[dim] or any(n != 1 for n in local[:dim]):
            return None
        return self.gather_along(source, dim, shape)

    def gather_along(self, source: tuple[Any, Any, int], dim: int, shape: tuple[int, ...]) -> int:
        """The all-gather `source` as one along `dim`, with the collective's name and
        source line."""
        collective, gathered, size = source
        x = self.tensor(gathered)
        at = _GROUP_ARG["all_gather_into_tensor"]  # (the gather the source was read from)
        ranks = self.group_ranks(_arg(collective, at, "group_name"))
        out = self.emit_collective(
            "all_gather", x, shape, self.dtype(x), size, dim=dim, ranks=ranks
        )
        node = self.nodes[out]
        node.name, node.loc = collective.name, self.location(collective)
        node.framework_op = str(collective.target)
        return out

    # ---- result

    def finish(self, outputs: list[int]) -> Graph:
        """Prune what the outputs do not reach and renumber ids densely, keeping order."""
        nodes, remap = prune_and_renumber(self.nodes, outputs)
        inputs = [remap[n] for _, n in sorted(self.params) if n in remap]
        return Graph(
            path=self.path,
            nodes=nodes,
            inputs=inputs,
            outputs=[remap[o] for o in outputs],
        )


def _live_group(name: Any, read: Any) -> Any:
    """`read(torch.distributed, group)` of the live process group named `name` in this
    process; None when there is none (an unknown name: the op is read by its group's size,
    or stays opaque)."""
    try:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _resolve_process_group

        if dist.is_available() and dist.is_initialized():
            return read(dist, _resolve_process_group(str(name)))
    except Exception:  # noqa: BLE001 - an unknown name
        pass
    return None


def _is_aten(node: Any, *names: str) -> bool:
    """Whether an FX node calls one of the ATen ops `names` (any overload)."""
    if getattr(node, "op", None) != "call_function":
        return False
    namespace, name, _ = _op_name(node.target)
    return namespace == "aten" and name in names


def _collective(node: Any) -> str:
    """The functional collective an FX node calls (`all_gather_into_tensor`), else ""."""
    if getattr(node, "op", None) != "call_function":
        return ""
    namespace, name, _ = _op_name(node.target)
    return name if namespace in _COLLECTIVE_NAMESPACES else ""


def _shape_of_fx(node: Any) -> tuple[int, ...]:
    val = node.meta.get("val", node.meta.get("tensor_meta"))
    return tuple(int(d) for d in val.shape)


def _chunks_of(parts: Any) -> tuple[Any, int] | None:
    """(source, dim) when the FX nodes `parts` are, in order, every one of the equal pieces
    that one `split`/`chunk` cuts `source` into along `dim`; else None."""
    if not isinstance(parts, (list, tuple)) or not parts:
        return None
    if not all(getattr(p, "target", None) is operator.getitem for p in parts):
        return None
    split = parts[0].args[0]
    if any(p.args[0] is not split for p in parts):
        return None
    if [p.args[1] for p in parts] != list(range(len(parts))):
        return None
    if not _is_aten(split, "split", "split_with_sizes", "chunk"):
        return None
    pieces = split.meta.get("val")
    if not isinstance(pieces, (list, tuple)) or len(pieces) != len(parts):
        return None
    dim = int(_arg(split, 2, "dim", 0)) % len(pieces[0].shape)
    if len({int(piece.shape[dim]) for piece in pieces}) != 1:
        return None
    return split.args[0], dim


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        out: list[Any] = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [value]


def _is_complex_valued(arg: Any) -> bool:
    """Whether a traced argument holds complex numbers (by its recorded value's dtype)."""
    value = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
    return bool(getattr(getattr(value, "dtype", None), "is_complex", False))


def _writes_in_place(schema: Any) -> bool:
    """An op that writes its first argument and returns it: ATen's `add_`, `copy_`, and the
    primitives PyTorch's decompositions write with (`prims.copy_to`, which `F.pad` lowers
    to: a fill with the padded tensor copied into a slice of it)."""
    info = schema.returns[0].alias_info if schema.returns else None
    if info is None or not info.is_write:
        return False
    first = schema.arguments[0].alias_info if schema.arguments else None
    return schema.name.endswith("_") or (first is not None and first.before_set == info.before_set)


def _slice_args(node: Any) -> tuple[Any, ...]:
    """(dim, start, end, step) of an `aten.slice` node, defaults filled in."""
    given = zip(("dim", "start", "end", "step"), (0, None, None, 1), strict=True)
    return tuple(_arg(node, i, name, d) for i, (name, d) in enumerate(given, 1))


def _in_place(node: Any) -> bool:
    """The result of an in-place op (`y.add_(1)`), or of an `out=` op writing into its own
    input (`torch.exp(x, out=x)`, as Megatron's cross-entropy writes): its target, written."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return False
    if _writes_in_place(schema):
        return True
    out = node.kwargs.get("out") if hasattr(node, "kwargs") else None
    return schema.overload_name == "out" and out is not None and node.args[:1] == (out,)


def _plain_slice(node: Any) -> bool:
    """`aten.slice(x, dim, start, end)` with step 1."""
    return _op_name(node.target)[1] == "slice" and _slice_args(node)[3] in (None, 1)


def _select(node: Any) -> bool:
    """`aten.select(x, dim, index)` with a constant index: one index of a dim, the dim
    dropped (`out[:, :, i]`)."""
    return (
        _op_name(node.target)[1] == "select"
        and len(node.args) == 3
        and isinstance(node.args[2], int)
    )


def _parts_view(node: Any) -> bool:
    """`view_as_real` / `view_as_complex`: the same memory read as a complex value or as
    its parts along a last dim of 2, which is how the IR holds a complex value anyway (a
    write through it writes the parts: `torch.polar` fills an empty complex tensor so)."""
    return _op_name(node.target)[1] in ("view_as_real", "view_as_complex")


def _whole_reshape(node: Any) -> bool:
    """A view that reshapes every element of its operand, in row-major order (`x.view(-1,
    n)`, a contiguous `as_strided`): a write through it writes its operand's elements at
    the same row-major places."""
    if "val" not in getattr(node, "meta", {}):
        return False
    return _op_name(node.target)[1] in _RESHAPES or _contiguous_whole(node)


def _contiguous_whole(node: Any) -> bool:
    """`as_strided(x, size, stride, 0)` over all of a contiguous x that starts its storage,
    with the row-major strides of `size`: x's elements in order, reshaped."""
    if _op_name(node.target)[1] != "as_strided" or not node.args:
        return False
    base = getattr(node.args[0], "meta", {}).get("val")
    size, stride = list(node.args[1]), list(node.args[2])
    offset = _arg(node, 3, "storage_offset", 0)
    if base is None or offset not in (0, None):
        return False
    expected, step = [], 1
    for n in reversed(size):
        expected.insert(0, step)
        step *= n
    whole = base.is_contiguous() and base.storage_offset() == 0 and step == base.numel()
    return whole and [s for s, n in zip(stride, size, strict=True) if n != 1] == [
        s for s, n in zip(expected, size, strict=True) if n != 1
    ]


def _is_view(node: Any) -> bool:
    """An op whose result aliases its first operand (`t`, `view`, `transpose`...)."""
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def lowers_natively(name: str) -> bool:
    """Whether the frontend gives the ATen op `name` (an in-place `add_` read as `add`) its
    own semantics. The tracer decomposes the ops it does not (backward kernels such as
    `threshold_backward`) into ones it does, with PyTorch's own decompositions."""
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    special = {"dropout", "feature_dropout", "max", "min", "view_as_complex", "view_as_real"}
    known = _IDENTITY | _RESHAPES | _ATTENTION | _MULTI_OUTPUT | _CONVERTS | special | {"rsub"}
    return any(
        n in known or n in _UNARY or n in _BINARY or n in _COMPARE or hasattr(_Lowering, f"op_{n}")
        for n in (name, base)
    )


# --------------------------------------------------------------------------------------------
# Public API


def _import_torch(path: str) -> Any:
    try:
        import torch
    except ImportError:
        raise ScalifyError(
            "reading PyTorch graphs needs PyTorch: pip install 'scalify[torch]'", path
        ) from None
    return torch


def graph_from_fx(
    gm: Any,
    path: str,
    example_inputs: Any = None,
    *,
    group_sizes: dict[str, int] | None = None,
    world_size: int | None = None,
) -> Graph:
    """An FX graph to the IR (not yet canonicalized: `scalify.frontends.load_graph` and
    `canonical_graph_from_fx` do that).

    `gm` is a `torch.fx.GraphModule` from `make_fx` or `torch.export` (its `graph_module`),
    or a `torch.export.ExportedProgram` (then its signature names parameters and lifted
    constants). Shapes and dtypes come from `node.meta["val"]` or `["tensor_meta"]`; when they
    are missing, `example_inputs` are run through `ShapeProp` to fill them in. `group_sizes`
    maps process-group names to sizes for collectives that do not carry one.
    """
    _import_torch(path)
    input_kinds: dict[str, str] = {}
    constants: dict[str, Any] = {}
    user_outputs: list[int] | None = None
    if hasattr(gm, "graph_signature") and hasattr(gm, "graph_module"):
        ep = gm
        gm = ep.graph_module
        for spec in ep.graph_signature.input_specs:
            arg_name = getattr(spec.arg, "name", None)
            if arg_name is None:
                continue
            input_kinds[arg_name] = spec.kind.name
            if spec.kind.name == "CONSTANT_TENSOR" and spec.target in ep.constants:
                constants[arg_name] = ep.constants[spec.target]
            elif (  # a constant make_fx lifted (a mask's fill), exported as a buffer
                spec.kind.name == "BUFFER"
                and re.fullmatch(r"_tensor_constant\d+", str(spec.target))
                and spec.target in ep.state_dict
            ):
                constants[arg_name] = ep.state_dict[spec.target]
        user_outputs = [
            i
            for i, spec in enumerate(ep.graph_signature.output_specs)
            if spec.kind.name == "USER_OUTPUT"
        ]
    if example_inputs is not None and any(
        n.op != "output" and "val" not in n.meta and "tensor_meta" not in n.meta
        for n in gm.graph.nodes
    ):
        from torch.fx.passes.shape_prop import ShapeProp

        ShapeProp(gm).propagate(*example_inputs)
    lowering = _Lowering(gm, path, input_kinds, constants, user_outputs, dict(group_sizes or {}))
    try:
        graph = lowering.run()
    except ScalifyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the contract: users only ever see ScalifyError
        where = f" at node '{lowering.current.name}'" if lowering.current is not None else ""
        raise ScalifyError(
            f"cannot read the FX graph{where} ({type(exc).__name__}: {exc})", path
        ) from exc
    if world_size and world_size > 1:
        graph.num_partitions = world_size
    return graph


def load_fx(path: str | Path) -> Graph:
    """Read a `torch.export.save` file (`.pt2`) into the IR (not yet canonicalized)."""
    p = str(path)
    torch = _import_torch(p)
    if not Path(p).is_file():
        raise ScalifyError(f"graph file not found: {p}", p)
    if not zipfile.is_zipfile(p):
        raise ScalifyError(
            "not a PyTorch export file: a .pt2 file is a zip archive",
            p,
            notes=["expected a file written by torch.export.save"],
        )
    try:  # the ops a program traced on several devices holds (device_probe.py)
        import scalify.capture.device_ops  # noqa: F401
    except Exception:  # noqa: BLE001 - a torch without torch.library: such files cannot load
        pass
    extra = {GROUPS_FILE: ""}
    # torch logs a full traceback at WARNING before re-raising; the error below says it all.
    export_log = logging.getLogger("torch.export")
    old_level = export_log.level
    export_log.setLevel(logging.ERROR)
    try:
        ep = torch.export.load(p, extra_files=extra)
    except Exception as exc:  # noqa: BLE001 - zip, json, pickle or op-registry errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ScalifyError(
            f"cannot read PyTorch export file ({type(exc).__name__}: {first[:200]})",
            p,
            notes=["expected a file written by torch.export.save"],
        ) from None
    finally:
        export_log.setLevel(old_level)
    groups: dict[str, int] = {}
    world_size = None
    layouts: list = []
    followed: dict[int, str] = {}
    weights: dict[str, tuple[str, tuple[int, ...]]] = {}
    if extra.get(GROUPS_FILE):
        try:
            recorded = json.loads(extra[GROUPS_FILE])
            groups = {str(k): int(v) for k, v in recorded.get("groups", {}).items()}
            world_size = recorded.get("world_size")
            layouts = recorded.get("output_layouts") or []
            followed = {int(k): str(v) for k, v in (recorded.get("output_inputs") or {}).items()}
            weights = {
                str(name): (str(layout), tuple(int(n) for n in shape))
                for name, (layout, shape) in (recorded.get("input_layouts") or {}).items()
            }
        except (ValueError, TypeError, AttributeError) as exc:
            raise ScalifyError(f"bad {GROUPS_FILE} inside the export file: {exc}", p) from None
    graph = graph_from_fx(ep, p, group_sizes=groups, world_size=world_size)
    graph.output_layouts = {i: str(lay) for i, lay in enumerate(layouts) if lay}
    graph.output_inputs = followed
    graph.input_layouts = weights
    return graph


def save_exported(
    ep: Any,
    path: str | Path,
    output_layouts: list[str | None] = (),
    output_inputs: dict[int, str] | None = None,
    input_layouts: dict[str, tuple[str, list[int]]] | None = None,
) -> None:
    """`torch.export.save`, recording the size of every process group the program's
    collectives name (resolved in this process), so `load_fx` can read them later without
    a process group, the layout each output is returned in (a DTensor's placements; None
    for a plain tensor), which outputs are a weight's gradient or updated value, and each
    DTensor weight's layout and global shape (what its placements state)."""
    import torch

    sizes: dict[str, int] = {}
    lowering = _Lowering(ep.graph_module, str(path), {}, {}, None, {})
    collectives = False
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        namespace, name, _ = _op_name(node.target)
        if namespace not in _COLLECTIVE_NAMESPACES or name == "wait_tensor":
            continue
        collectives = True
        position = _GROUP_ARG.get(name)
        group = node.kwargs.get("group_name")
        if group is None and position is not None and len(node.args) > position:
            group = node.args[position]
        if isinstance(group, str) and group not in sizes:
            size = lowering.group_size(group)
            if size is not None:
                sizes[group] = size
    record: dict[str, Any] = {
        "groups": sizes,
        "output_layouts": list(output_layouts),
        "output_inputs": {str(k): v for k, v in (output_inputs or {}).items()},
        "input_layouts": dict(input_layouts or {}),
    }
    if collectives:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                record["world_size"] = dist.get_world_size()
        except Exception:  # noqa: BLE001 - no default group: nothing to record
            pass
    torch.export.save(ep, str(path), extra_files={GROUPS_FILE: json.dumps(record)})
