"""A device's block of a re-laid-out weight, read back as its blocks of the weight's parts.

A fused weight `[g|u]` can reach a column-parallel matmul re-laid out by views, so that one
contiguous block per device holds that device's columns of every part:
`w.reshape(d, 2, tp, f / tp).transpose(0, 2, 1, 3).reshape(d, 2 f)`, then block r. No
layout relates the re-laid-out weight's block to the baseline's `[g|u]`; the parts do: block
r is `[g_r | u_r]`, the form a program that slices each part writes
(`concat(slice_at(g, r c), slice_at(u, r c))`), which the slice forms of slice_views.py and
the shard rules already prove.

This is bijection inference on the cut dim: the chain of merges, splits and transposes
between the weight and the sliced value is run on the positions of that one dim (every other
dim kept whole and in order, else nothing is inferred), which gives, for each device, the
positions of the weight its block holds. Where those are runs at `a_p + r * n_p` on device
r (the same runs on every device, shifted), the block equals the concatenation of the runs'
blocks, and that form replaces the slice. The positions are one dim's, so the cost is that
dim's size, whatever the rest of the weight. Written when a graph is canonicalised (it is
an identity, not an alternative: the block's users read the parts).
"""

from __future__ import annotations

import numpy as np

from scalify.ir import Graph, NewNodes, Node, replace_nodes

VIEWS = ("merge", "split", "transpose")


def write_view_blocks(graph: Graph) -> None:
    """Write every block of a re-laid-out value in its part form, in place (its users then
    read the concatenation): an identity, made where the graph is canonicalised, so that
    the per-part layouts found from a graph's own slices and the slice forms of
    slice_views.py see it as a program that slices each part."""

    def rewrite(node: Node, next_id: int) -> list[Node]:
        found = _runs_of_parts(node, graph) if node.op == "slice_at" else None
        if found is None:
            return []
        source, runs, coordinate = found
        return _parts_form(NewNodes(node, next_id), source, runs, graph.node(coordinate))

    replace_nodes(graph, rewrite)


def _runs_of_parts(node: Node, graph: Graph) -> tuple[Node, list[tuple[int, int]], int] | None:
    """(w, [(a_p, n_p)], the device's coordinate) when the slice's block on device r is the
    concatenation of w's runs `[a_p + r n_p, a_p + (r + 1) n_p)` along the cut dim, w the
    value under a chain of views, and the offset is `coordinate * size`."""
    dim, size, devices = (int(node.attrs[k]) for k in ("dim", "size", "parts"))
    offset = graph.node(node.operands[1])
    step = graph.node(offset.operands[1]) if offset.op == "mul" else None
    if step is None or step.op != "constant" or str(step.attrs.get("value")) != str(size):
        return None
    chain, value = [], graph.node(node.operands[0])
    while value.op in VIEWS:
        chain.append(value)
        value = graph.node(value.operands[0])
    if not chain or len(value.shape) != len(node.shape):
        return None
    positions = _positions(value, dim, reversed(chain))
    if positions is None or positions.size != devices * size:
        return None
    blocks = positions.reshape(devices, size)
    runs = _runs(blocks[0])
    if len(runs) < 2:
        return None  # one run: a plain block, which the shard rules read as it is
    for r, block in enumerate(blocks):
        shifted = np.concatenate([np.arange(a + r * n, a + (r + 1) * n) for a, n in runs])
        if not np.array_equal(block, shifted):
            return None
    return value, runs, offset.operands[0]


def _positions(value: Node, dim: int, chain) -> np.ndarray | None:
    """The chain run on the positions of `value`'s dim `dim`, every other dim left whole:
    the positions along the last view's dim `dim`, or None when the chain moves or
    regroups another dim (then no dim of the result is made of `dim` alone)."""
    labels = [d == dim for d in range(len(value.shape))]  # which dims are pieces of `dim`
    array = np.arange(value.shape[dim]).reshape(
        [n if d == dim else 1 for d, n in enumerate(value.shape)]
    )
    for view in chain:
        p = int(view.attrs.get("dim", 0))
        if view.op == "split":
            if not labels[p]:
                return None
            labels.insert(p + 1, True)
            shape = list(array.shape)
            shape[p : p + 1] = [shape[p] // int(view.attrs["inner"]), int(view.attrs["inner"])]
            array = array.reshape(shape)
        elif view.op == "merge":
            if not (labels[p] and labels[p + 1]):
                return None
            del labels[p + 1]
            shape = list(array.shape)
            shape[p : p + 2] = [shape[p] * shape[p + 1]]
            array = array.reshape(shape)
        else:
            perm = tuple(int(d) for d in view.attrs["perm"])
            kept = [d for d in perm if not labels[d]]
            if kept != sorted(kept):
                return None
            labels = [labels[d] for d in perm]
            array = array.transpose(perm)
    if labels != [d == dim for d in range(len(labels))]:
        return None
    return array.reshape(-1)


def _runs(block: np.ndarray) -> list[tuple[int, int]]:
    """The block's maximal runs of consecutive positions, as (start, length)."""
    breaks = np.flatnonzero(np.diff(block) != 1) + 1
    return [(int(run[0]), len(run)) for run in np.split(block, breaks)]


def _parts_form(
    new: NewNodes, source: Node, runs: list[tuple[int, int]], coordinate: Node
) -> list[Node]:
    """concat(slice_at(w[a_p : a_p + n_p devices], coordinate * n_p), ...) along the dim."""
    node = new.like
    dim, devices = int(node.attrs["dim"]), int(node.attrs["parts"])
    pieces = []
    for start, length in runs:
        starts, limits, part_shape = [0] * len(source.shape), list(source.shape), list(source.shape)
        starts[dim], limits[dim], part_shape[dim] = (
            start,
            start + length * devices,
            length * devices,
        )
        strides = (1,) * len(limits)
        attrs = {"starts": tuple(starts), "limits": tuple(limits), "strides": strides}
        part = new.add("slice", (source.id,), part_shape, source.dtype, attrs)
        step = new.add("constant", (), (), coordinate.dtype, {"value": str(length)})
        offset = new.add("mul", (coordinate.id, step), (), coordinate.dtype, {})
        block_shape = list(source.shape)
        block_shape[dim] = length
        attrs = {"dim": dim, "size": length, "parts": devices}
        pieces.append(new.add("slice_at", (part, offset), block_shape, source.dtype, attrs))
    new.add("concatenate", tuple(pieces), node.shape, node.dtype, {"dim": dim})
    return new.nodes
