"""Op signatures: the attribute key of a node and the facts rules read about it.

A key names an op's meaning independent of which graph it is in: it holds the attributes
that matter and leaves out sizes a layout changes (a column-parallel dot has the same key as
its baseline dot). Dim maps (`OutDim`/`InDim`) say where each operand dim goes, so one rule
covers every rank and every dim numbering.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalify.ir import COLLECTIVES, ELEMENTWISE, Graph, Node
from scalify.mesh import Mesh

ORDER_SENSITIVE = {"all_gather", "reduce_scatter", "all_to_all"}
NOT_PURE = COLLECTIVES | {"rank_index", "opaque"}


@dataclass
class Signature:
    """Everything the e-graph needs to know about an op apart from its operands."""

    key: str
    out_dims: dict[tuple[int, int], int] = field(default_factory=dict)
    in_dims: dict[tuple[int, int], int] = field(default_factory=dict)
    attrs_s: dict[str, str] = field(default_factory=dict)
    attrs_i: dict[str, int] = field(default_factory=dict)


def dtype_class(dtype: str) -> str:
    """float, int or pred: what identities over the reals may assume about a dtype."""
    if dtype == "pred":
        return "pred"
    if dtype.startswith(("f", "bf", "c")):
        return "float"
    return "int"


_FLOAT_BITS = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23), "f64": (11, 52)}


def _widens(source: str, target: str) -> bool:
    """Every value of `source` is exact in `target` (exponent and mantissa both no smaller),
    so the cast commutes with adding partial sums; a narrowing cast rounds each part."""
    if source not in _FLOAT_BITS or target not in _FLOAT_BITS:
        return False
    (se, sm), (te, tm) = _FLOAT_BITS[source], _FLOAT_BITS[target]
    return te >= se and tm >= sm


def _ints(values) -> str:
    return ",".join(str(v) for v in values)


def _dot_maps(node: Node, ranks: list[int]) -> list[list[int]]:
    a = node.attrs
    lb, rb = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    lc, rc = tuple(a.get("lhs_contracting", ())), tuple(a.get("rhs_contracting", ()))
    lhs_free = [d for d in range(ranks[0]) if d not in lb and d not in lc]
    rhs_free = [d for d in range(ranks[1]) if d not in rb and d not in rc]
    lhs = [0] * ranks[0]
    rhs = [0] * ranks[1]
    for i, (l_dim, r_dim) in enumerate(zip(lb, rb, strict=True)):
        lhs[l_dim], rhs[r_dim] = i, i
    for i, (l_dim, r_dim) in enumerate(zip(lc, rc, strict=True)):
        lhs[l_dim], rhs[r_dim] = -1 - i, -1 - i
    for j, d in enumerate(lhs_free):
        lhs[d] = len(lb) + j
    for j, d in enumerate(rhs_free):
        rhs[d] = len(lb) + len(lhs_free) + j
    return [lhs, rhs]


def _gather_maps(a: dict, ranks: list[int], out_rank: int) -> list[list[int]]:
    """The indices' dims (but the index vector) land on the output's batch positions, in
    order; of the operand only its batching dims land, where their indices dims do. Window
    dims are not mapped: a shard of one is no block of what the gather takes."""
    positions = [p for p in range(out_rank) if p not in a["offset_dims"]]
    index_dims = [e for e in range(ranks[1]) if e != a["index_vector_dim"]]
    index_map = [
        positions[index_dims.index(e)]
        if e in index_dims and len(positions) == len(index_dims)
        else -1
        for e in range(ranks[1])
    ]
    paired = dict(zip(a["operand_batching_dims"], a["start_indices_batching_dims"], strict=True))
    operand_map = [index_map[paired[d]] if d in paired else -1 for d in range(ranks[0])]
    return [operand_map, index_map]


def _scatter_maps(a: dict, ranks: list[int]) -> list[list[int]]:
    """Only batching dims are mapped, to the operand's (the output's) batching dim: of the
    operand itself, of the indices, and of the updates' scatter dims (which follow the
    indices' dims but the index vector, in order)."""
    operand_dims, index_batch = a["input_batching_dims"], a["scatter_indices_batching_dims"]
    paired = dict(zip(index_batch, operand_dims, strict=True))
    operand_map = [d if d in operand_dims else -1 for d in range(ranks[0])]
    index_map = [paired.get(e, -1) for e in range(ranks[1])]
    index_dims = [e for e in range(ranks[1]) if e != a["index_vector_dim"]]
    scatter_dims = [d for d in range(ranks[2]) if d not in a["update_window_dims"]]
    update_map = [-1] * ranks[2]
    if len(scatter_dims) == len(index_dims):
        for d, e in zip(scatter_dims, index_dims, strict=True):
            update_map[d] = paired.get(e, -1)
    return [operand_map, index_map, update_map]


def _dim_maps(node: Node, ranks: list[int], out_rank: int) -> list[list[int]]:
    op, a = node.op, node.attrs
    if op in ELEMENTWISE or op in COLLECTIVES:
        return [list(range(r)) if r == out_rank else [] for r in ranks]
    if op == "dot":
        return _dot_maps(node, ranks)
    if op == "reduce":
        dims = set(a["dims"])
        kept = [d for d in range(ranks[0]) if d not in dims]
        return [[-1 if d in dims else kept.index(d) for d in range(ranks[0])]]
    if op == "broadcast":
        return [list(a["dims"])]
    if op == "transpose":
        perm = list(a["perm"])
        return [[perm.index(d) for d in range(ranks[0])]]
    if op == "slice":
        sliced = set(a.get("sliced_dims", ()))
        return [[-1 if d in sliced else d for d in range(ranks[0])]]
    if op == "concatenate":
        return [[-1 if d == a["dim"] else d for d in range(r)] for r in ranks]
    if op == "merge":  # dims p, p+1 -> p: only a shard of the outer dim stays a shard
        p = a["dim"]
        return [[d if d <= p else (-1 if d == p + 1 else d - 1) for d in range(ranks[0])]]
    if op == "top_k":  # the last dim is replaced by the k chosen entries
        return [[d if d < ranks[0] - 1 else -1 for d in range(ranks[0])]]
    if op == "cumsum":  # every dim stays; a shard of the summed dim is no block of the result
        return [list(range(ranks[0]))]
    if op == "take":  # the index dims first, then the table's dims but the looked-up one
        d, n = a["dim"], ranks[1]
        return [[-1 if e == d else n + e - (e > d) for e in range(ranks[0])], list(range(n))]
    if op == "take_along":  # the looked-up dim is the index's; every other dim stays
        d = a["dim"]
        return [[-1 if e == d else e for e in range(ranks[0])], list(range(ranks[1]))]
    if op in ("in_block", "block_offset"):  # elementwise over the index; a scalar block
        return [list(range(ranks[0])), []]
    if op == "one_hot":  # a new dim at `dim`; the index's dims keep their order around it
        d = a["dim"]
        return [[e if e < d else e + 1 for e in range(ranks[0])]]
    if op == "gather":
        return _gather_maps(a, ranks, out_rank)
    if op == "scatter":
        return _scatter_maps(a, ranks)
    if op == "split":  # dim p -> (p, p+1): a shard of it lands on the outer part
        p = a["dim"]
        return [[d if d <= p else d + 1 for d in range(ranks[0])]]
    return []


def node_signature(
    node: Node, graph: Graph, mesh: Mesh, shape_free_broadcast: bool = False
) -> Signature:
    """The signature of `node`. `shape_free_broadcast`: every user of this broadcast is
    elementwise, so the user's other operand fixes the new dims' sizes and the key may omit
    them (they differ between a sharded and a baseline graph)."""
    operands = [graph.node(i) for i in node.operands]
    ranks = [len(o.shape) for o in operands]
    parts = [node.op, node.dtype, "r=" + _ints(ranks)]
    a = node.attrs
    sig = Signature("")
    sig.attrs_s["class"] = dtype_class(node.dtype)
    if node.op == "convert":
        sig.attrs_s["from_class"] = dtype_class(operands[0].dtype)
        sig.attrs_s["widens"] = "yes" if _widens(operands[0].dtype, node.dtype) else "no"
        parts.append("from=" + operands[0].dtype)
    if node.op in ("mul", "exp"):  # the dims a factor over the whole value lives on
        sig.attrs_s["all_dims"] = _ints(range(len(node.shape)))
    if node.op == "dot":
        batch = a.get("lhs_batch", ())
        sig.attrs_s["lhs_batch"] = _ints(batch)
        sig.attrs_s["batch_out"] = _ints(range(len(batch)))  # where the batch dims land
        parts += [
            f"lb={_ints(a.get('lhs_batch', ()))}",
            f"rb={_ints(a.get('rhs_batch', ()))}",
            f"lc={_ints(a.get('lhs_contracting', ()))}",
            f"rc={_ints(a.get('rhs_contracting', ()))}",
        ]
    elif node.op == "reduce":
        parts += [f"dims={_ints(a['dims'])}", f"op={a['op']}"]
        sig.attrs_s["op"] = a["op"]
        kept = [d for d in range(ranks[0]) if d not in a["dims"]]
        sig.attrs_s["kept"] = _ints(kept)
        sig.attrs_s["kept_out"] = _ints(range(len(kept)))  # where the kept dims land
    elif node.op == "broadcast":
        parts.append(f"dims={_ints(a['dims'])}")
        sig.attrs_s["dims"] = _ints(a["dims"])
        parts.append(f"rank={len(node.shape)}")
        if shape_free_broadcast:
            sig.attrs_s["sizes"] = "free"
        else:
            new = [f"{d}:{n}" for d, n in enumerate(node.shape) if d not in a["dims"]]
            parts.append("new=" + _ints(new))
    elif node.op == "transpose":
        parts.append(f"perm={_ints(a['perm'])}")
    elif node.op == "reshape":
        parts.append(f"from={_ints(operands[0].shape)}")
        parts.append(f"to={_ints(node.shape)}")
    elif node.op == "slice_at":
        for name in ("dim", "size", "parts"):
            parts.append(f"{name}={a[name]}")
            sig.attrs_i[name] = int(a[name])
    elif node.op == "rank_index":
        parts.append(f"kind={a.get('kind', '')}")
        sig.attrs_s["kind"] = str(a.get("kind", ""))
    elif node.op in ("merge", "split"):
        parts.append(f"dim={a['dim']}")
        parts.append(f"inner={a['inner']}")
        sig.attrs_i["dim"] = int(a["dim"])
        sig.attrs_i["inner"] = int(a["inner"])
    elif node.op == "slice":
        sliced = []
        for d, (start, limit, stride) in enumerate(
            zip(a["starts"], a["limits"], a["strides"], strict=True)
        ):
            if (start, limit, stride) != (0, operands[0].shape[d], 1):
                sliced.append(d)
                parts.append(f"{d}:{start}:{limit}:{stride}")
        a = {**a, "sliced_dims": tuple(sliced)}
    elif node.op == "top_k":
        for name in ("k", "part"):
            parts.append(f"{name}={a[name]}")
            sig.attrs_i[name] = int(a[name])
        parts.append(f"largest={a.get('largest', True)}")
    elif node.op == "cumsum":
        parts.append(f"dim={a['dim']}")
        sig.attrs_i["dim"] = int(a["dim"])
    elif node.op in ("take", "take_along"):
        parts.append(f"dim={a['dim']}")
        sig.attrs_i["dim"] = int(a["dim"])
        sig.attrs_s["index_out"] = _ints(range(ranks[1]))  # where the index dims land
    elif node.op == "one_hot":
        for name in ("dim", "size"):
            parts.append(f"{name}={a[name]}")
            sig.attrs_i[name] = int(a[name])
    elif node.op in ("in_block", "block_offset"):
        parts.append(f"size={a['size']}")
        sig.attrs_i["size"] = int(a["size"])
    elif node.op == "compare":
        parts.append(f"dir={a.get('direction', '')}")
        sig.attrs_s["direction"] = str(a.get("direction", ""))
    elif node.op == "concatenate":
        parts.append(f"dim={a['dim']}")
        sig.attrs_i["dim"] = int(a["dim"])
    elif node.op in COLLECTIVES:
        _collective(node, mesh, parts, sig)
    elif node.op == "scatter":  # the buffer's sizes but its batching dims: a fill has none
        parts.append(repr(sorted((k, str(v)) for k, v in a.items())))
        batching = a["input_batching_dims"]
        parts.append("sizes=" + _ints(n for d, n in enumerate(node.shape) if d not in batching))
    elif node.op in ("opaque", "pad", "iota", "dynamic_slice"):
        parts.append(repr(sorted((k, str(v)) for k, v in a.items())))
        parts.append(f"shape={_ints(node.shape)}")
    elif node.op not in ELEMENTWISE:
        parts.append(repr(sorted((k, str(v)) for k, v in a.items())))
    sig.key = "|".join(parts)
    node_for_maps = Node(node.id, node.op, node.operands, node.shape, node.dtype, a)
    for k, dims in enumerate(_dim_maps(node_for_maps, ranks, len(node.shape))):
        for d, e in enumerate(dims):
            sig.out_dims[(k, d)] = e
        for e in range(len(node.shape)):
            sig.in_dims[(k, e)] = dims.index(e) if e in dims else -1
    return sig


def collective_axes(node: Node, mesh: Mesh) -> str:
    """The mesh axes a collective runs over, or a description of groups that are none."""
    groups = tuple(tuple(g) for g in node.attrs.get("groups", ()))
    found = mesh.axes_of_groups(groups, ordered=node.op in ORDER_SENSITIVE)
    if found is not None:
        return found
    return "groups" + "{" + ",".join("{" + _ints(g) + "}" for g in groups) + "}"


def _collective(node: Node, mesh: Mesh, parts: list[str], sig: Signature) -> None:
    a = node.attrs
    axes = (
        collective_axes(node, mesh)
        if node.op != "collective_permute"
        else "pairs=" + _ints(f"{s}>{t}" for s, t in a.get("pairs", ()))
    )
    sig.attrs_s["axes"] = axes
    parts.append(f"axes={axes}")
    if "op" in a:
        sig.attrs_s["op"] = str(a["op"])
        parts.append(f"op={a['op']}")
    for name in ("dim", "split_dim", "concat_dim"):
        if name in a:
            sig.attrs_i[name] = int(a[name])
            parts.append(f"{name}={a[name]}")
