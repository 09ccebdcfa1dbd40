"""Dynamic slices at constant offsets as static slices, and writes at constant offsets as
concatenations.

An unrolled loop (see the HLO frontend's `while_loop`) indexes its stacked weights with the
iteration counter: `dynamic-slice(w, i, 0, 0)` with `i = ((0 + 1) + 1)`. The canonical rules
(`rules/canon.srl`: `fold_binary_fill`, `join_int_factors`, `select_of_true`, ...) fold the
counter to a constant; here the slice at constant offsets becomes a static `slice`, so that
the layout rules treat each iteration's weights like any other slice. Every step here is an
identity on integers.

A write of a block at constant offsets along one dim (a dynamic-update-slice, or a scatter
that replaces one whole window at a literal index: JAX's `x.at[..., :k].set(u)`) is the
concatenation of the untouched pieces and the block: DeepSeek's attention builds each head's
query as `zeros.at[..., :nope].set(q_nope).at[..., nope:].set(q_pe)`.

Python, not canonical rules: a dynamic slice and a write have one operand per dim (no fixed
arity for a pattern), and the write becomes up to three ops whose presence depends on the
offsets.
"""

from __future__ import annotations

from scalify.externs.device_tables import int_table
from scalify.ir import Graph, Node


def fold_static_indices(graph: Graph) -> None:
    before: dict[int, list[Node]] = {}  # nodes made for a node, placed right before it
    for node in list(graph.nodes.values()):
        if node.op == "dynamic_slice":
            _static_slice(node, graph)
        elif node.op in ("dynamic_update_slice", "scatter"):
            _static_update(node, graph, before)
    if before:
        nodes: dict[int, Node] = {}
        for node_id, node in graph.nodes.items():
            for made in before.get(node_id, ()):
                nodes[made.id] = made
            nodes[node_id] = node
        graph.nodes = nodes


def _static_slice(node: Node, graph: Graph) -> None:
    """dynamic-slice at constant starts: a static slice (starts clamped as HLO clamps them)."""
    x, *starts = node.operands
    offsets = [_int_constant(graph.nodes[s]) for s in starts]
    if None in offsets:
        return
    shape = graph.nodes[x].shape
    sizes = tuple(node.attrs.get("sizes", node.shape))
    begin = [
        min(max(int(o), 0), dim - size) for o, dim, size in zip(offsets, shape, sizes, strict=True)
    ]
    node.op, node.operands = "slice", (x,)
    node.attrs = {
        "starts": tuple(begin),
        "limits": tuple(b + size for b, size in zip(begin, sizes, strict=True)),
        "strides": (1,) * len(sizes),
    }


def _static_update(node: Node, graph: Graph, before: dict[int, list[Node]]) -> None:
    """A block written at constant offsets, cutting one dim only: concatenate(x[:s], u,
    x[s + w:]) along it."""
    x, block = node.operands[0], node.operands[-1] if node.op == "scatter" else node.operands[1]
    shape, width = graph.nodes[x].shape, graph.nodes[block].shape
    if len(width) != len(shape):
        return
    starts = _update_starts(node, graph, shape, width)
    if starts is None:
        return
    cut = [d for d, (n, w) in enumerate(zip(shape, width, strict=True)) if n != w]
    if len(cut) != 1 or any(starts[d] for d in range(len(shape)) if d not in cut):
        return
    (d,) = cut
    start, end = starts[d], starts[d] + width[d]
    pieces = []
    for lo, hi in ((0, start), (end, shape[d])):
        if lo == hi:
            pieces.append(None)
            continue
        attrs = {
            "starts": tuple(lo if k == d else 0 for k in range(len(shape))),
            "limits": tuple(hi if k == d else n for k, n in enumerate(shape)),
            "strides": (1,) * len(shape),
        }
        piece_shape = tuple(hi - lo if k == d else n for k, n in enumerate(shape))
        made = Node(
            max(graph.nodes) + 1, "slice", (x,), piece_shape, node.dtype, attrs, node.loc,
            f"{node.name}.kept{len(pieces)}", node.framework_op,
        )  # fmt: skip
        graph.nodes[made.id] = made
        before.setdefault(node.id, []).append(made)
        pieces.append(made.id)
    operands = tuple(p for p in (pieces[0], block, pieces[1]) if p is not None)
    node.op, node.operands, node.attrs = "concatenate", operands, {"dim": d}


def _update_starts(node: Node, graph: Graph, shape, width) -> list[int] | None:
    """Where the block starts in each dim, when that is a constant: a dynamic-update-slice's
    offsets clamped as HLO clamps them; a scatter's literal index, when it replaces one
    window as large as the update at it, all inside the operand (a window that does not
    fit is dropped by a scatter, not clamped: left as it is)."""
    if node.op == "dynamic_update_slice":
        offsets = [_int_constant(graph.nodes[s]) for s in node.operands[2:]]
        if None in offsets:
            return None
        return [min(max(o, 0), n - w) for o, n, w in zip(offsets, shape, width, strict=True)]
    a = node.attrs
    index = graph.nodes[node.operands[1]]
    if (
        a.get("op") != "replace"
        or len(node.operands) != 3
        or a.get("inserted_window_dims")
        or a.get("input_batching_dims")
        or tuple(a.get("update_window_dims", ())) != tuple(range(len(width)))
        or len(index.shape) != 1
        or a.get("index_vector_dim") != 0
    ):
        return None
    values = int_table(index)
    dims = a.get("scatter_dims_to_operand_dims", ())
    if values is None or len(values) != len(dims):
        return None
    starts = [0] * len(shape)
    for value, d in zip(values, dims, strict=True):
        starts[d] = value
    if any(not 0 <= s <= n - w for s, n, w in zip(starts, shape, width, strict=True)):
        return None
    return starts


def _int_constant(node: Node) -> int | None:
    if (
        node.op != "constant"
        or node.shape != ()
        or not (_is_int(node.dtype) or node.dtype == "pred")
    ):
        return None
    text = str(node.attrs.get("value")).strip().lower()
    if text in ("true", "false"):
        return int(text == "true")
    try:
        return int(text)
    except ValueError:
        return None


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("s", "u")) and dtype[1:].isdigit()
