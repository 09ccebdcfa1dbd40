"""The cross-entropy gradient, written by hand or by autograd, in one form.

A cross-entropy's gradient with respect to the logits is `(softmax - one_hot(target)) * g`.
Autograd writes it as `log_softmax`'s backward applied to `nll_loss`'s:
`G - exp(logp) * sum(G)` with `G = one_hot(target) * (-1) * g`; a vocab-parallel loss
(torchtitan's `_LossParallelCrossEntropy`, Megatron's) writes it directly, each device
putting `-1` at its block's target column with a row-wise `index_put`, the target index
guarded so it stays in range. Two exact rewrites bring both to the same terms:

- *A sum over a one-hot row is its one entry.* `x - e * sum_d(x)` with
  `x = select(one_hot_d(t), c, 0) * s` (s the same along d) is `(select(one_hot_d(t), c, 0)
  - c * e) * s`: `sum_d(x) = c * s` wherever t is in [0, size), which the index's range
  says (an input index is assumed in range, int_ranges.py). With c = -1 that is
  `(select(one_hot(t), -1, 0) + e) * s`, the hand-written form.
- *A guarded index does not matter where the value does not.* `select(one_hot[c](k'), y, z)`
  with `k' = select(m, k, i - c*r)`, m "i is outside block r" (the guard that keeps the
  local index in range), and y equal to z wherever m holds, is `select(one_hot[c](i - c*r),
  y', z)` with y' = y where m does not hold: outside the block both are z, inside k' is
  `i - c*r`. `one_hot.py` then reads that one-hot as the device's slice of the whole one.
"""

from __future__ import annotations

from .index_forms import IndexReader
from .ir import ROW_MAJOR_VIEWS, Graph, NewNodes, Node, replace_nodes
from .literal_folding import fill_value, folded_literal

Ranges = dict[int, tuple[float, float]]


def fold_one_hot_sums(graph: Graph, ranges: Ranges, one_hot_nodes) -> None:
    """Both rewrites of the module doc. `one_hot_nodes(node, index, dim, size, next_id)`
    makes the one-hot of an index, as one_hot.py forms it (a device's slice where the
    index is a block-local one)."""
    reader = IndexReader(graph)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.op == "select":
            return _unguarded(node, graph, reader, one_hot_nodes, next_id)
        if node.op == "sub":
            return _log_softmax_of_one_hot_gradient(node, graph, ranges, next_id)
        return []

    replace_nodes(graph, rewrite)


# ---- a sum over a one-hot row


def _log_softmax_of_one_hot_gradient(
    node: Node, graph: Graph, ranges: Ranges, next_id: int
) -> list[Node]:
    nodes = graph.nodes
    grad, product = node.operands
    found = _scaled_one_hot(grad, graph, ranges)
    if found is None or nodes[product].op != "mul":
        return []
    picked, scale, dim, value = found
    for e, spread in (nodes[product].operands, nodes[product].operands[::-1]):
        total = _broadcast_along(nodes[spread], dim, nodes)
        if total is None or nodes[total].op != "reduce":
            continue
        reduce = nodes[total]
        if reduce.operands != (grad,) or tuple(reduce.attrs.get("dims", ())) != (dim,):
            continue
        if reduce.attrs.get("op") != "sum" or nodes[e].shape != node.shape:
            continue
        new = NewNodes(node, next_id)
        shape, dtype = node.shape, node.dtype
        if float(value) == -1.0:
            inner = new.add("add", (picked, e), shape, dtype, {})
        else:
            const = new.add("constant", (), (), dtype, {"value": value})
            fill = new.add("broadcast", (const,), shape, dtype, {"dims": ()})
            scaled = new.add("mul", (e, fill), shape, dtype, {})
            inner = new.add("sub", (picked, scaled), shape, dtype, {})
        new.add("mul", (inner, scale), shape, dtype, {})
        new.nodes[-1].name = node.name
        return new.nodes
    return []


def _scaled_one_hot(node_id: int, graph: Graph, ranges: Ranges):
    """(select(one_hot_d(t), c, 0), s, d, c) for `select(one_hot_d(t), c, 0) * s` with s the
    same along d and t in [0, size); None otherwise."""
    nodes = graph.nodes
    node = nodes[node_id]
    if node.op != "mul":
        return None
    for picked, scale in (node.operands, node.operands[::-1]):
        select = nodes[picked]
        if select.op != "select":
            continue
        hot = nodes[select.operands[0]]
        value, zero = (fill_value(nodes[o], nodes) for o in select.operands[1:])
        if hot.op != "one_hot" or value is None or zero is None or float(zero) != 0.0:
            continue
        dim, size = int(hot.attrs["dim"]), int(hot.attrs["size"])
        lo, hi = ranges.get(hot.operands[0], (None, None))
        if lo is None or hi is None or lo < 0 or hi > size - 1:
            continue
        if (
            _broadcast_along(nodes[scale], dim, nodes) is None
            and fill_value(nodes[scale], nodes) is None
        ):
            continue
        return picked, scale, dim, value
    return None


def _broadcast_along(node: Node, dim: int, nodes: dict[int, Node]) -> int | None:
    """v for a broadcast of v that only adds dim `dim`, else None."""
    if node.op != "broadcast":
        return None
    dims = tuple(node.attrs.get("dims", ()))
    added = [d for d in range(len(node.shape)) if d not in dims]
    return node.operands[0] if added == [dim] else None


# ---- a guarded index where the value does not depend on it


def _unguarded(node: Node, graph: Graph, reader: IndexReader, one_hot_nodes, next_id: int):
    nodes = graph.nodes
    hot_id, kept, other = node.operands
    hot = nodes[hot_id]
    if hot.op != "one_hot" or fill_value(nodes[other], nodes) is None:
        return []
    guard = nodes[hot.operands[0]]
    if guard.op != "select":
        return []
    test, first, second = guard.operands
    found = reader.block(test)
    if found is None:
        return []
    block, negated = found
    outside_when = negated  # the truth of `test` where the index is outside the block
    local = second if outside_when else first  # the branch taken inside the block
    if block.size != int(hot.attrs["size"]) or not reader.equals_offset(local, block):
        return []
    zero = fill_value(nodes[other], nodes)
    outside = _value_assuming(kept, test, outside_when, graph)
    inside = _value_assuming(kept, test, not outside_when, graph)
    if outside is None or inside is None or float(outside) != float(zero):
        return []
    new = NewNodes(node, next_id)
    made = one_hot_nodes(hot, local, int(hot.attrs["dim"]), block.size, new.next_id)
    new.nodes.extend(made)
    shape, dtype = node.shape, node.dtype
    const = new.add("constant", (), (), dtype, {"value": inside})
    fill = new.add("broadcast", (const,), shape, dtype, {"dims": ()})
    new.add("select", (made[-1].id, fill, other), shape, dtype, {})
    new.nodes[-1].name = node.name
    return new.nodes


def _value_assuming(node_id: int, test: int, truth: bool, graph: Graph) -> str | None:
    """The literal `node_id` is when `test` has the given truth, where that fixes it (a
    fill, views of one, exact arithmetic on them); None otherwise."""
    nodes = graph.nodes
    if node_id == test:
        return "true" if truth else "false"
    node = nodes[node_id]
    text = fill_value(node, nodes)
    if text is not None:
        return text
    if node.op in ROW_MAJOR_VIEWS or node.op == "broadcast":
        return _value_assuming(node.operands[0], test, truth, graph)
    texts = [_value_assuming(o, test, truth, graph) for o in node.operands]
    if not texts or None in texts:
        return None
    scalars = {
        -1 - k: Node(-1 - k, "constant", (), (), nodes[o].dtype, {"value": t})
        for k, (o, t) in enumerate(zip(node.operands, texts, strict=True))
    }
    probe = Node(node.id, node.op, tuple(scalars), (), node.dtype, dict(node.attrs))
    return folded_literal(probe, scalars)
