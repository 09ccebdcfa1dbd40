"""Framework-independent clean-ups of the IR that every frontend's output goes through.

Lowerings wrap values in steps that compute nothing (a reshape to the same shape, a
broadcast onto the same dims, reshape chains): removing them here keeps rules free of such
noise. Every rewrite is an identity, so the graph's meaning is unchanged.
"""

from __future__ import annotations

import itertools
import math

from scalify.canon.all_to_all import fold_tiled_all_to_all
from scalify.canon.block_iotas import fold_block_iotas
from scalify.canon.block_lookup import fold_block_lookups
from scalify.canon.gather_sinking import sink_gathers
from scalify.canon.literal_arrays import fold_literal_arrays
from scalify.canon.merged_batches import add_unmerged_batch_forms
from scalify.canon.one_hot import fold_one_hots
from scalify.canon.padded_pieces import join_padded_pieces
from scalify.canon.reshape_refinement import refined_steps
from scalify.canon.rewriter import WITH_BROADCASTS, builtin_rules, run
from scalify.canon.static_indices import fold_static_indices
from scalify.canon.unit_shapes import unit_placements
from scalify.canon.view_blocks import write_view_blocks
from scalify.canon.views_through_broadcasts import add_views_through_broadcasts
from scalify.errors import ScalifyError
from scalify.externs.device_tables import fold_device_scalars, fold_device_tables
from scalify.externs.index_forms import guarded_index_range
from scalify.externs.int_ranges import fold_int_ranges
from scalify.ir import Graph, Node, at_line, feeding, is_zero_fill


def is_identity(node: Node, operand: Node) -> bool:
    """An op that returns its operand unchanged (same shape, dims, order, dtype)."""
    if node.op in ("reshape", "convert", "copy") and node.shape == operand.shape:
        return node.op != "convert" or node.dtype == operand.dtype
    if node.op == "broadcast":
        return node.shape == operand.shape and tuple(node.attrs["dims"]) == tuple(
            range(len(node.shape))
        )
    if node.op == "transpose":
        return tuple(node.attrs["perm"]) == tuple(range(len(node.shape)))
    return False


def reshape_groups(
    source: tuple[int, ...], target: tuple[int, ...]
) -> list[tuple[list[int], list[int]]]:
    """Pair runs of source dims with runs of target dims of equal size (a reshape only
    merges and splits contiguous dims). Size-1 dims join a neighbouring run."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(source) and j < len(target):
        si, sj = [i], [j]
        ps, pt = source[i], target[j]
        while ps != pt:
            if ps < pt:
                i += 1
                ps *= source[i]
                si.append(i)
            else:
                j += 1
                pt *= target[j]
                sj.append(j)
        groups.append((si, sj))
        i, j = i + 1, j + 1
    if groups:
        groups[-1][0].extend(range(i, len(source)))
        groups[-1][1].extend(range(j, len(target)))
    elif source or target:
        groups.append((list(range(len(source))), list(range(len(target)))))
    return groups


def _decompose_reshape(
    node: Node,
    operand: Node,
    next_id: int,
    removed: tuple[int, ...] | None = None,
    last_group_first: bool = False,
    finest: bool = False,
) -> list[Node]:
    """A reshape as primitive view steps: `merge` (dims p and p+1 into one) and `split` (dim
    p into an outer dim and an inner dim of size `inner`). Keys then name the inner sizes
    only, which a shard on the outer factor leaves unchanged. `removed`: the reshape only
    deletes these size-1 dims (one reading of it, see `unit_removals`). Groups of dims are
    reshaped from the first unless `last_group_first`."""
    if not operand.shape or not node.shape or 0 in operand.shape or 0 in node.shape:
        return [node]  # a scalar, or an empty tensor (no runs of dims to pair)
    steps: list[Node] = []
    shape = list(operand.shape)
    current = operand.id
    position = 0

    def emit(op: str, attrs: dict, new_shape: list[int]) -> None:
        nonlocal current, next_id
        steps.append(
            Node(
                next_id,
                op,
                (current,),
                tuple(new_shape),
                node.dtype,
                attrs,
                node.loc,
                f"{node.name}.{op}{len(steps)}",
                node.framework_op,
            )
        )
        current = next_id
        next_id += 1

    if removed is not None:
        # Only unit dims go: move them behind the others first, so that each later merge has
        # inner size 1 and a shard stays on its (outer) dim.
        kept = [d for d in range(len(operand.shape)) if d not in removed]
        perm = kept + list(removed)
        shape = [operand.shape[d] for d in perm]
        emit("transpose", {"perm": tuple(perm)}, shape)
    groups = reshape_groups(tuple(shape), node.shape)
    for si, sj in reversed(groups) if last_group_first else groups:
        if last_group_first:
            position = si[0]  # the groups before it are not reshaped yet
        run = [shape[position + k] for k in range(len(si))]
        refined = refined_steps(run, [node.shape[d] for d in sj]) if finest else None
        if refined is not None:  # through the finest shape both cut into (see the module)
            for op, dim, inner in refined:
                p = position + dim
                if op == "merge":
                    viewed = shape[:p] + [shape[p] * shape[p + 1]] + shape[p + 2 :]
                else:
                    viewed = shape[:p] + [shape[p] // inner, inner] + shape[p + 1 :]
                emit(op, {"dim": p, "inner": inner}, viewed)
                shape = viewed
            position += len(sj)
            continue
        for _ in range(len(si) - 1):
            inner = shape[position + 1]
            merged = shape[:position] + [shape[position] * inner] + shape[position + 2 :]
            emit("merge", {"dim": position, "inner": inner}, merged)
            shape = merged
        for k in range(len(sj) - 1):
            inner = 1
            for d in sj[k + 1 :]:
                inner *= node.shape[d]
            size = shape[position + k]
            split = shape[: position + k] + [size // inner, inner] + shape[position + k + 1 :]
            emit("split", {"dim": position + k, "inner": inner}, split)
            shape = split
        position += len(sj)
    if tuple(shape) != node.shape or not steps:
        return [
            Node(
                node.id,
                node.op,
                node.operands,
                node.shape,
                node.dtype,
                node.attrs,
                node.loc,
                node.name,
                node.framework_op,
            )
        ]
    steps[-1].id = node.id
    if len(steps) > 1:
        steps[-1].operands = (steps[-2].id,)
    steps[-1].name = node.name
    return steps


MAX_UNIT_READINGS = 8


def unit_removals(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Each set of size-1 dims whose deletion turns `source` into `target`, when one of them
    comes before a kept dim of another size (a squeeze that merge steps would do with the
    unit dim as the outer part). Several when size-1 dims are also kept: `[1,1,16] ->
    [1,16]` drops the first or the second, and which one is the real squeeze only the
    other graph can tell (a batch dim split down to one entry per device, beside a size-1
    dim of the model)."""
    found: list[tuple[int, ...]] = []

    def walk(i: int, j: int, dropped: tuple[int, ...]) -> None:
        if len(found) >= MAX_UNIT_READINGS:
            return
        if i == len(source):
            if j == len(target) and dropped:
                found.append(dropped)
            return
        if j < len(target) and source[i] == target[j]:
            walk(i + 1, j + 1, dropped)
        if source[i] == 1:
            walk(i + 1, j, (*dropped, i))

    walk(0, 0, ())
    return [
        dropped
        for dropped in found
        if any(
            source[e] != 1 and e not in dropped for d in dropped for e in range(d + 1, len(source))
        )
    ]


def canonicalize(graph: Graph) -> Graph:
    """Drop identity ops, fold reshape chains, split reshapes into merge/split steps, and
    prune what no output uses."""
    fold_tiled_all_to_all(graph)
    fold_device_tables(graph)
    _fold(graph)
    sink_gathers(graph)
    fold_static_indices(graph)
    ranges = fold_int_ranges(graph, guarded_index_range)
    fold_block_lookups(graph, ranges)
    fold_one_hots(graph, ranges)
    fold_block_iotas(graph, ranges)
    # the canonical rules again, over what the folds above made (literals among them)
    run(graph, builtin_rules(), graph.canon_fired)
    join_padded_pieces(graph)
    fold_literal_arrays(graph)
    fold_device_scalars(graph)  # after the arrays: they read a per-device test as a block
    # again: a predicate evaluated just now (an optimizer's `step >= 1`) decides a select;
    # and broadcasts lifted out of lookups and casts (rules/canon_broadcasts.srl), now that
    # the folds above have read them as the frontend wrote them
    run(graph, builtin_rules(), graph.canon_fired)
    next_id = max(graph.nodes, default=-1) + 1
    nodes: dict[int, Node] = {}
    for node in graph.nodes.values():
        if node.op == "dynamic_slice":
            next_id = _slice_along_dims(node, nodes, next_id)
        if node.op == "dynamic_update_slice":
            _update_along_one_dim(node, nodes)
        if node.op != "reshape":
            nodes[node.id] = node
            continue
        operand = nodes[node.operands[0]]
        if math.prod(operand.shape) != math.prod(node.shape):
            raise ScalifyError(
                f"reshape `{node.name}`{at_line(node.loc)} turns {list(operand.shape)} into "
                f"{list(node.shape)}, another number of elements: the program's shapes "
                "disagree (a manual shard_map region in a program that is not yet "
                "partitioned, read as global?)",
                graph.path,
            )
        steps = _decompose_reshape(node, operand, next_id)
        next_id += len(steps)
        for step in steps:
            nodes[step.id] = step
        readings = [  # (suffix, how): other readings of the same reshape, as equal values
            # A local unit dim may be a real one (a squeezed scan slice) or a dim sharded
            # down to one entry
            (".squeeze" + (f"{k}" if k else ""), {"removed": removed})
            for k, removed in enumerate(unit_removals(operand.shape, node.shape))
        ]
        if _cuts_finer(operand.shape, node.shape):
            # batch x heads regrouped from a head split: through the finest shape
            readings.append((".refined", {"finest": True}))
        if _reshapes_several_groups(operand.shape, node.shape):
            # `x.view(B, S, H * D).view(B * S, H * D)` passes through a value that the
            # reshape at once, merged from the first group, never makes: both orders enter
            readings.append((".reversed", {"last_group_first": True}))
        for suffix, how in readings:
            alternative = _decompose_reshape(node, operand, next_id, **how)
            if alternative[-1].op == "reshape":
                continue  # no such reading
            alternative[-1].id = next_id + len(alternative) - 1
            alternative[-1].name = f"{node.name}{suffix}"
            next_id += len(alternative)
            for step in alternative:
                nodes[step.id] = step
            graph.equalities.append((node.id, alternative[-1].id))
    graph.nodes = nodes
    write_view_blocks(graph)  # on the merge, split and slice_at steps just made
    # views of broadcasts moved inside them, over the merge and split steps just made
    # (rules/canon_broadcasts.srl), lookups at broadcast indices lifted out
    run(graph, builtin_rules(*WITH_BROADCASTS), graph.canon_fired)
    add_unmerged_batch_forms(graph, viewed_as)
    add_views_through_broadcasts(graph)
    return _prune(graph)


def viewed_as(like: Node, value: Node, shape: tuple[int, ...], next_id: int) -> list[Node]:
    """`value` reshaped to `shape` as merge and split steps, ids from `next_id` on, placed
    and named as `like`."""
    reshape = Node(next_id, "reshape", (value.id,), shape, value.dtype, {}, like.loc, like.name)
    steps = _decompose_reshape(reshape, value, next_id + 1)
    steps[-1].id = next_id + len(steps)
    steps[-1].name = f"{like.name}.viewed"
    return steps


def _unit_insertion(node: Node, operand: Node | None) -> tuple[int, ...] | None:
    """Where the operand's dims land when `node` only inserts size-1 dims: a broadcast that
    stretches none, or a reshape of a shape without unit dims (so the placement is
    unambiguous). None for anything else."""
    if operand is None:
        return None
    if node.op == "broadcast":
        return tuple(node.attrs["dims"]) if _only_adds_unit_dims(node, operand) else None
    if node.op == "reshape":  # one placement only: the operand has no unit dim to pick
        placements = unit_placements(operand.shape, node.shape)
        return placements[0] if len(placements) == 1 else None
    return None


def _cuts_finer(source: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Some run of dims is cut differently on the two sides (two or more dims of size above
    1 on each, not a plain merge or split), or merges three or more dims into one: merging
    first and splitting first, or merging from the outer end and from the inner end, then
    pass through different values."""
    if not source or not target or 0 in source or 0 in target:
        return False
    return any(
        (sum(source[d] > 1 for d in si) > 1 and sum(target[d] > 1 for d in sj) > 1)
        or (len(si) > 2 and len(sj) == 1)
        for si, sj in reshape_groups(source, target)
    )


def _reshapes_several_groups(source: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """More than one run of dims is merged or split (so the order of the steps shows)."""
    if not source or not target or 0 in source or 0 in target:
        return False
    groups = reshape_groups(source, target)
    return sum(len(si) > 1 or len(sj) > 1 for si, sj in groups) > 1


def _prune(graph: Graph) -> Graph:
    live = _with_equals(
        graph.nodes, feeding(graph, [*graph.outputs, *graph.inputs]), graph.equalities
    )
    graph.nodes = {i: n for i, n in graph.nodes.items() if i in live}
    graph.equalities = [(a, b) for a, b in graph.equalities if a in live and b in live]
    return graph


def _slice_along_dims(node: Node, nodes: dict[int, Node], next_id: int) -> int:
    """A dynamic slice that starts at 0 in every dim it keeps whole becomes `slice_at(x,
    start)` along each other dim in turn, with the slice size and how many such slices fill
    the dim (`parts`): XLA takes a device's block of a value split over batch and sequence
    in one slice. The intermediate slices are added to `nodes`; returns the next free id."""
    x, *starts = node.operands
    sizes = tuple(node.attrs.get("sizes", node.shape))
    operand = nodes[x]
    moving = [d for d, s in enumerate(starts) if not is_zero_fill(s, nodes)]
    if not moving or any(
        sizes[j] != operand.shape[j] for j in range(len(sizes)) if j not in moving
    ):
        return next_id
    if any(not sizes[d] or operand.shape[d] % sizes[d] for d in moving):
        return next_id
    shape, current = list(operand.shape), x
    for d in moving[:-1]:
        shape[d] = sizes[d]
        step = Node(
            next_id, "slice_at", (current, starts[d]), tuple(shape), node.dtype,
            {"dim": d, "size": sizes[d], "parts": operand.shape[d] // sizes[d]},
            node.loc, f"{node.name}.slice{d}", node.framework_op,
        )  # fmt: skip
        nodes[step.id] = step
        current, next_id = step.id, next_id + 1
    d = moving[-1]
    node.op, node.operands = "slice_at", (current, starts[d])
    node.attrs = {"dim": d, "size": sizes[d], "parts": operand.shape[d] // sizes[d]}
    return next_id


def _update_along_one_dim(node: Node, nodes: dict[int, Node]) -> None:
    """A dynamic-update-slice whose block spans every dim but one and starts at 0 in them
    becomes `update_at(x, block, start)` along that dim (a scan stacking its outputs)."""
    x, block, *starts = node.operands
    moving = [d for d, s in enumerate(starts) if not is_zero_fill(s, nodes)]
    if len(moving) != 1:
        return
    (d,) = moving
    full = nodes[x].shape
    if any(nodes[block].shape[j] != full[j] for j in range(len(full)) if j != d):
        return
    node.op, node.operands, node.attrs = "update_at", (x, block, starts[d]), {"dim": d}


def _without_unit_dims(node: Node, operand: Node, node_id: int) -> Node | None:
    """For a reduce over dims some of which have size 1 (the transpose of `repeat` over one
    KV head per device reduces its unit head dim with the repeats): the same reduce over
    the other dims alone, keeping the unit dims for a reshape to drop. Reducing one element
    is no reduction, and a unit dim sharded down to one entry per device is no dim to
    reduce across. None when no reduced dim is a unit dim, or every one is."""
    dims = tuple(node.attrs.get("dims", ()))
    unit = [d for d in dims if operand.shape[d] == 1]
    kept = tuple(d for d in dims if d not in unit)
    if not unit or not kept or len(node.operands) != 1:
        return None  # a reduce over unit dims alone stays one (a mask's `all` over them)
    shape = tuple(n for d, n in enumerate(operand.shape) if d not in kept)
    attrs = {**node.attrs, "dims": kept}
    return Node(
        node_id,
        "reduce",
        node.operands,
        shape,
        node.dtype,
        attrs,
        node.loc,
        f"{node.name}.reduced",
        node.framework_op,
    )


def _only_adds_unit_dims(node: Node, operand: Node) -> bool:
    """A broadcast that only inserts size-1 dims, in order, and stretches none, is a reshape."""
    if node.op != "broadcast":
        return False
    dims = tuple(node.attrs["dims"])
    new = [d for d in range(len(node.shape)) if d not in dims]
    kept = all(node.shape[d] == operand.shape[i] for i, d in enumerate(dims))
    return list(dims) == sorted(dims) and kept and all(node.shape[d] == 1 for d in new)


# A broadcast whose operand has this many size-1 dims or fewer is read with each set of them
# dropped; with more, with all of them dropped only.
MAX_SQUEEZED_UNITS = 3


def _squeezed_alternatives(node: Node, operand: Node, next_id: int) -> list[list[Node]]:
    """The same broadcast with some of the operand's size-1 dims dropped first (a reshape)
    and broadcast along new dims instead, one form per set of them (all of them first).
    The forms go into the e-graph as equal: `x[None]` broadcasts one way, a tensor whose
    sharded dim has one element per device the other, and only one of them matches the
    other graph; a mask `[b, 1, s, s]` with one row of the batch a device (fsdp) keeps its
    batch dim and drops the other."""
    unit = [i for i, size in enumerate(operand.shape) if size == 1]
    if not unit:
        return []
    chosen = [tuple(unit)]
    if len(unit) <= MAX_SQUEEZED_UNITS:
        chosen += [tuple(c) for r in range(1, len(unit)) for c in itertools.combinations(unit, r)]
    forms = []
    for k, dropped in enumerate(chosen):
        suffix = "" if k == 0 else f"{k}"
        at = next_id + 2 * k
        kept = tuple(size for i, size in enumerate(operand.shape) if i not in dropped)
        squeeze = Node(
            at, "reshape", (operand.id,), kept, operand.dtype, {}, node.loc,
            f"{node.name}.squeeze{suffix}", node.framework_op,
        )  # fmt: skip
        dims = tuple(d for i, d in enumerate(node.attrs["dims"]) if i not in dropped)
        broadcast = Node(
            at + 1, "broadcast", (squeeze.id,), node.shape, node.dtype,
            {**node.attrs, "dims": dims}, node.loc, f"{node.name}.alt{suffix}",
            node.framework_op,
        )  # fmt: skip
        forms.append([squeeze, broadcast])
    return forms


def _with_equals(nodes: dict[int, Node], live: set[int], equalities) -> set[int]:
    """Keep the alternative form of every live node, and what it needs."""
    partner: dict[int, list[int]] = {}
    for a, b in equalities:
        partner.setdefault(a, []).append(b)
    stack = [b for n in live for b in partner.get(n, ())]
    while stack:
        node_id = stack.pop()
        if node_id in live or node_id not in nodes:
            continue
        live.add(node_id)
        stack.extend(nodes[node_id].operands)
    return live


def _fold(graph: Graph) -> Graph:
    canon = builtin_rules()
    fired = graph.canon_fired
    alias: dict[int, int] = {}
    nodes: dict[int, Node] = {}
    next_id = max(graph.nodes, default=-1) + 1

    def new_id() -> int:  # for the ops a canonical rule's rewrite nests
        nonlocal next_id
        next_id += 1
        return next_id - 1

    # nodes that already have their equal forms (a graph canonicalised again): none more
    paired = {n for pair in graph.equalities for n in pair}

    def add(node: Node) -> None:
        nonlocal next_id
        operands = tuple(alias.get(o, o) for o in node.operands)
        node.operands = operands
        if node.op == "reduce" and node.id not in paired:
            inner = _without_unit_dims(node, nodes[operands[0]], next_id)
            if inner is not None:  # the reduce over the other dims, then drop the unit ones;
                # both forms enter, as equal values: a unit dim may be a device's one head
                # of a dim the baseline reduces whole, or one the baseline's repeat made
                dropped = Node(
                    next_id + 1, "reshape", (inner.id,), node.shape, node.dtype, {},
                    node.loc, f"{node.name}.dropped", node.framework_op,
                )  # fmt: skip
                next_id += 2
                nodes[inner.id] = inner
                nodes[dropped.id] = dropped
                graph.equalities.append((node.id, dropped.id))
        if (
            operands
            and node.id not in paired  # a kept broadcast form stays one (canonicalised again)
            and _only_adds_unit_dims(node, nodes[operands[0]])
        ):
            node.op, node.attrs = "reshape", {}
        # the canonical rules of rules/canon.srl: identities dropped (a reshape to the same
        # shape, a cast to the same dtype, a broadcast or transpose onto the same dims),
        # views of their own kind composed into one, arithmetic on literals folded
        same = canon.rewrite(node, nodes, fired, new_id)
        if same is not None:
            alias[node.id] = same
            return
        nodes[node.id] = node

    def broadcast_forms(node: Node, operand: Node | None) -> list[Node]:
        """The node as a broadcast of `operand`, where it only inserts unit dims into it:
        one form, or one per placement where the operand has unit dims of its own
        (`[1, 8] -> [1, 1, 8]` inserts before or after the first; a device's one row of a
        batch split over fsdp makes such shapes, the baseline's `[2, 16] -> [2, 1, 16]` not)."""
        if node.id in paired or operand is None:
            return []
        dims = _unit_insertion(node, operand)
        placements = [dims] if dims is not None else []
        if dims is None and node.op == "reshape":
            placements = unit_placements(operand.shape, node.shape)
        return [
            Node(
                next_id + k,
                "broadcast",
                (operand.id,),
                node.shape,
                node.dtype,
                {"dims": placed},
                node.loc,
                f"{node.name}.broadcast" + (f"{k}" if k else ""),
                node.framework_op,
            )
            for k, placed in enumerate(placements)
        ]

    for node in graph.nodes.values():
        operand = (
            nodes.get(alias.get(node.operands[0], node.operands[0])) if node.operands else None
        )
        kept = broadcast_forms(node, operand)
        add(node)
        if not kept and node.id in nodes and node.op == "reshape":
            # read again on the operand `add` left it (a reshape of a reshape is one
            # reshape of the first one's operand, whose unit dims may be gone)
            operand = nodes.get(node.operands[0])
            kept = broadcast_forms(node, operand)
        if kept and node.id in nodes and len(node.shape) > len(operand.shape):
            # A new dim of size 1 is a view here, and a broadcast to a dim that is split
            # down to one entry per device (one head per device) in the other graph, or
            # beside one (`mask.reshape(b, 1, s)` on a sequence shard, where a split would
            # put the shard on the unit dim); both forms go into the e-graph as equal values.
            next_id += len(kept)
            for form in kept:
                nodes[form.id] = form
                graph.equalities.append((node.id, form.id))
        if node.op == "broadcast" and node.operands:  # its operand as `add` left it (a
            # broadcast of a broadcast is one broadcast of the inner operand)
            operand = nodes.get(node.operands[0])
        if (
            node.id in nodes
            and node.id not in paired
            and node.op == "broadcast"
            and operand is not None
            and not is_identity(node, operand)
        ):
            for alternative in _squeezed_alternatives(node, operand, next_id):
                next_id += len(alternative)
                for extra in alternative:
                    add(extra)
                graph.equalities.append(
                    (node.id, alias.get(alternative[-1].id, alternative[-1].id))
                )
    outputs = [alias.get(o, o) for o in graph.outputs]
    live = set(outputs) | set(graph.inputs)
    for node in reversed(list(nodes.values())):
        if node.id in live:
            live.update(node.operands)
    live = _with_equals(nodes, live, graph.equalities)
    graph.equalities = [(a, b) for a, b in graph.equalities if a in live and b in live]
    graph.nodes = {i: n for i, n in nodes.items() if i in live}
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}
    graph.outputs = outputs
    return graph
