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
- *Rows added into a device's block.* An embedding's gradient adds each token's row into
  the table row its index names, `one_hot(i)^T g` (the frontends lower a scatter-add so); a
  vocab-parallel embedding's device adds `g * in_block` at its guarded local index. Where
  the mask is the block's, `one_hot[c](guarded local index)^T (g * in_block)` is the
  device's slice of `one_hot(i)^T g`: inside the block the guarded index is the local one,
  outside the mask makes the row 0 and the block's one-hot has no entry for it.
- *An entry read, changed and written back is a change added.* `x[rows, k] -= w` (Megatron's
  vocab-parallel cross-entropy backward) is `select(one_hot_d(k), take_along_d(x, k) - w, x)`:
  at k it is `x - w`, elsewhere `x`, so it is `x - select(one_hot_d(k), w, 0)` (likewise
  for `+=`). The change alone is then the one-hot of a guarded index the rules above read.
"""

from __future__ import annotations

from scalify.canon.block_lookup import dim_labels
from scalify.canon.functions import folded_literal
from scalify.externs.index_forms import IndexReader
from scalify.ir import (
    ROW_MAJOR_VIEWS,
    Graph,
    NewNodes,
    Node,
    fill_value,
    is_zero_fill,
    replace_nodes,
)

Ranges = dict[int, tuple[float, float]]


def fold_one_hot_sums(graph: Graph, ranges: Ranges, one_hot_nodes, block_one_hot) -> None:
    """The rewrites of the module doc. `one_hot_nodes(node, index, dim, size, next_id)`
    makes the one-hot of an index, as one_hot.py forms it (a device's slice where the
    index is a block-local one); `block_one_hot(node, whole, coord, n, dim, size, next_id)`
    the device's slice of the whole one-hot."""
    reader = IndexReader(graph)
    one_hots = (one_hot_nodes, block_one_hot)

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.op == "select":
            changed = _read_modify_write(node, graph, reader, next_id)
            if not changed:
                return _unguarded(node, graph, reader, ranges, one_hots, next_id)
            *made, change, applied = changed
            for new in made:  # visible to the guard's reading of the change
                graph.nodes[new.id] = new
            # the guard's reading takes the change's place (and its id onwards)
            guarded = _unguarded(change, graph, reader, ranges, one_hots, change.id)
            if not guarded:
                return changed
            applied.operands = (applied.operands[0], guarded[-1].id)
            applied.id = guarded[-1].id + 1
            return [*made, *guarded, applied]
        if node.op == "sub":
            return _log_softmax_of_one_hot_gradient(node, graph, ranges, next_id)
        if node.op == "dot":
            return _rows_added_in_block(node, graph, reader, ranges, block_one_hot, next_id)
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


# ---- an entry read, changed and written back


def _read_modify_write(node: Node, graph: Graph, reader: IndexReader, next_id: int) -> list[Node]:
    """`z op select(one_hot_d(k), broadcast(w), 0)` for `select(one_hot_d(k),
    broadcast(take_along_d(z, k) op w), z)`, op `add` or `sub`; the last two nodes made are
    the select and the op. [] where the written value is not z's entry at k changed."""
    nodes = graph.nodes
    hot_id, written, z = node.operands
    hot = nodes[hot_id]
    if hot.op != "one_hot":
        return []
    dim = int(hot.attrs["dim"])
    value = _broadcast_along(nodes[written], dim, nodes)
    change = nodes[value] if value is not None else None
    if change is None or change.op not in ("add", "sub"):
        return []
    orders = [change.operands] + ([change.operands[::-1]] if change.op == "add" else [])
    for read, amount in orders:
        if not _reads_entry_at(read, z, hot.operands[0], dim, reader):
            continue
        new = NewNodes(node, next_id)
        shape, dtype = node.shape, node.dtype
        zero = new.add("constant", (), (), dtype, {"value": "0"})
        zeros = new.add("broadcast", (zero,), shape, dtype, {"dims": ()})
        if (literal := fill_value(nodes[amount], nodes)) is not None:  # one fill, not two
            amount, attrs = new.add("constant", (), (), dtype, {"value": literal}), {"dims": ()}
        else:
            attrs = dict(nodes[written].attrs)
        spread = new.add("broadcast", (amount,), shape, dtype, attrs)
        new.add("select", (hot_id, spread, zeros), shape, dtype, {})
        new.add(change.op, (z, new.nodes[-1].id), shape, dtype, {})
        new.nodes[-1].name = node.name
        return new.nodes
    return []


def _reads_entry_at(read: int, z: int, index: int, dim: int, reader: IndexReader) -> bool:
    """Whether `read` is `take_along_d(z, k)` with its unit dim d dropped, k = `index`."""
    nodes = reader.nodes
    take = nodes[_without_unit_views(read, nodes)]
    if take.op != "take_along" or int(take.attrs.get("dim", -1)) != dim:
        return False
    source, at = take.operands
    if source != z or take.shape[dim] != 1 or nodes[at].shape != take.shape:
        return False
    kept = tuple(n for d, n in enumerate(take.shape) if d != dim)
    return kept == nodes[index].shape and _same_value(at, index, reader)


def _without_unit_views(node_id: int, nodes) -> int:
    """The value under views that only add or drop dims of size 1."""
    while (node := nodes[node_id]).op in ROW_MAJOR_VIEWS and node.operands:
        source = nodes[node.operands[0]]
        if [n for n in node.shape if n != 1] != [n for n in source.shape if n != 1]:
            break
        node_id = source.id
    return node_id


def _same_value(a: int, b: int, reader: IndexReader) -> bool:
    """Two nodes that hold the same array up to unit dims: row-major views of one value
    (a view is fixed by its shape), or the same transpose or cast of such (the frontends
    make a view again where the program reuses one)."""
    nodes = reader.nodes
    if [n for n in nodes[a].shape if n != 1] != [n for n in nodes[b].shape if n != 1]:
        return False
    a, b = reader.down(a, tuple(ROW_MAJOR_VIEWS))[-1], reader.down(b, tuple(ROW_MAJOR_VIEWS))[-1]
    if a == b:
        return True
    x, y = nodes[a], nodes[b]
    if x.op != y.op or x.op not in ("transpose", "convert") or x.attrs != y.attrs:
        return False
    return x.shape == y.shape and _same_value(x.operands[0], y.operands[0], reader)


# ---- a guarded index where the value does not depend on it


def _unguarded(
    node: Node, graph: Graph, reader: IndexReader, ranges: Ranges, one_hots, next_id: int
):
    nodes = graph.nodes
    hot_id, kept, other = node.operands
    hot = nodes[hot_id]
    if hot.op != "one_hot" or fill_value(nodes[other], nodes) is None:
        return []
    views, guard = [], nodes[hot.operands[0]]
    while guard.op in ROW_MAJOR_VIEWS:  # the guarded index merged into the one-hot's rows
        views.append(guard)
        guard = nodes[guard.operands[0]]
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
    one_hot_nodes, block_one_hot = one_hots
    new = NewNodes(node, next_id)
    dim = int(hot.attrs["dim"])
    if views:  # the whole index viewed as the guarded one was: the block's one-hot of it
        lo, hi = ranges.get(block.coord, (None, None))
        if lo != 0 or hi is None or hi == float("inf"):
            return []
        whole, dtype = block.index, nodes[block.index].dtype
        for view in reversed(views):
            whole = new.add(view.op, (whole,), view.shape, dtype, dict(view.attrs))
        at = new.next_id + len(new.nodes)
        made = block_one_hot(hot, whole, block.coord, int(hi) + 1, dim, block.size, at)
    else:
        made = one_hot_nodes(hot, local, dim, block.size, new.next_id)
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


# ---- rows added into a device's block


def _rows_added_in_block(
    node: Node, graph: Graph, reader: IndexReader, ranges: Ranges, block_one_hot, next_id: int
) -> list[Node]:
    nodes = graph.nodes
    lhs, rhs = node.operands
    cast = nodes[lhs] if nodes[lhs].op == "convert" else None
    hot = nodes[cast.operands[0]] if cast is not None else nodes[lhs]
    if hot.op != "one_hot" or node.attrs.get("lhs_batch") or node.attrs.get("rhs_batch"):
        return []
    k = int(hot.attrs["dim"])
    contracted = tuple(range(k))
    if tuple(node.attrs["lhs_contracting"]) != contracted:
        return []
    if tuple(node.attrs["rhs_contracting"]) != contracted or k != len(hot.shape) - 1:
        return []
    found = _block_masked(rhs, k, graph, reader)
    if found is None:
        return []
    values, block = found
    size = int(hot.attrs["size"])
    lo, hi = ranges.get(block.coord, (None, None))
    if block.size != size or lo != 0 or hi is None or hi == float("inf"):
        return []
    if not reader.equals_offset(hot.operands[0], block):
        return []
    made = block_one_hot(hot, block.index, block.coord, int(hi) + 1, k, size, next_id)
    new = NewNodes(node, next_id + len(made))
    new.nodes[:0] = made
    hot_id = made[-1].id
    if cast is not None:
        hot_id = new.add("convert", (hot_id,), cast.shape, cast.dtype, dict(cast.attrs))
    new.add("dot", (hot_id, values), node.shape, node.dtype, dict(node.attrs))
    new.nodes[-1].name = node.name
    return new.nodes


def _block_masked(node_id: int, k: int, graph: Graph, reader: IndexReader):
    """(x, block) for `x * m` (either order) where m is the indicator of "index in block"
    (a cast of the predicate, through views that keep its dims as x's first k dims)."""
    nodes = graph.nodes
    node = nodes[node_id]
    if node.op == "mul":
        candidates = [(v, m, True) for v, m in (node.operands, node.operands[::-1])]
    elif node.op == "select":  # select(in_block, x, 0), or its negation with the branches swapped
        test, first, second = node.operands
        candidates = [
            (value, test, False)
            for value, zero in ((first, second), (second, first))
            if is_zero_fill(zero, nodes)
        ]
    else:
        return None
    for value, mask, cast_expected in candidates:
        path = [mask]
        while nodes[path[-1]].op in ROW_MAJOR_VIEWS or nodes[path[-1]].op == "broadcast":
            path.append(nodes[path[-1]].operands[0])
        predicate = nodes[path[-1]]
        if cast_expected:
            if predicate.op != "convert" or nodes[predicate.operands[0]].dtype != "pred":
                continue
            path.append(predicate.operands[0])
            predicate = nodes[path[-1]]
        found = reader.block(predicate.id)
        zero_branch_first = node.op == "select" and value == node.operands[2]
        if found is None or found[1] != zero_branch_first:
            continue  # the value must be kept inside the block, zero outside it
        views = reader.mask_views(predicate.id)
        labels = dim_labels(nodes, [*path, *views[1:]])
        bottom = nodes[views[-1]]
        if labels is None or len(bottom.shape) != k:
            continue
        if labels[:k] != list(range(k)) and not _unit_aligned(labels[:k], bottom):
            continue
        return value, found[0]
    return None


def _unit_aligned(labels: list, predicate: Node) -> bool:
    """Labels that name each of the predicate's dims in order, unit dims (None) aside."""
    wanted = [d for d, n in enumerate(predicate.shape) if n != 1]
    return [lab for lab in labels if lab is not None] == wanted
