"""Localisation: the distributed nodes where agreement with the baseline first breaks.

A node is on the frontier when no rule related it to a baseline node while all its operands
are related. Each suspect gets a reason in words; reasons that name a known bug pattern are
marked definite, the rest say that a rule may be missing.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from scalify.externs.device_tables import DeviceScalars, device_count
from scalify.externs.int_ranges import is_int_dtype
from scalify.ir import Graph, Node, at_line
from scalify.layout import Layout, canonical, layout_str
from scalify.mesh import Mesh
from scalify.ops import COLLECTIVES, ELEMENTWISE
from scalify.ops.collectives import collective_axes
from scalify.report.model import MADE_AT, SHOWS_AT

Proven = dict[int, set[tuple[Layout, int]]]
LITERALS = {"constant", "iota"}


class Explanation(NamedTuple):
    reason: str
    definite: bool
    origin: Node | None = None  # the op upstream the reason names as the cause
    made: Node | None = None  # where the partial sum a missing all-reduce should reduce was made


@dataclass
class Finding:
    node: Node
    reason: str
    definite: bool
    operands: list[str]
    second: tuple[Node, str] | None = None  # another op the finding involves, and its role


def _is_literal(node: Node, graph: Graph) -> bool:
    if node.op in LITERALS:
        return True
    return node.op == "broadcast" and all(_is_literal(graph.node(o), graph) for o in node.operands)


def related(node_id: int, graph: Graph, proven: Proven, replicated: set[int]) -> bool:
    node = graph.node(node_id)
    return (
        node_id in proven
        or node_id in replicated
        or node_id in _rank_derived(graph)
        or _is_literal(node, graph)
        or (  # a device's block of an index: meaningful only inside a block lookup
            node.op in ("in_block", "block_offset")
            and all(related(o, graph, proven, replicated) for o in node.operands)
        )
    )


def _rank_derived(graph: Graph) -> set[int]:
    """A device's own index and arithmetic on it alone (offsets, masks' bounds): legitimate
    SPMD values, not where a bug starts. The first op that mixes them with data and has no
    rule is the suspect."""
    return graph.memo("rank_derived", _compute_rank_derived)


def _compute_rank_derived(graph: Graph) -> set[int]:
    derived: set[int] = set()
    for node in graph.nodes.values():
        if node.op == "rank_index" or (
            node.op not in COLLECTIVES
            and node.operands
            and any(o in derived for o in node.operands)
            and all(o in derived or _is_literal(graph.node(o), graph) for o in node.operands)
        ):
            derived.add(node.id)
    return derived


def describe(node_id: int, dist: Graph, base: Graph, proven: Proven) -> str:
    node = dist.node(node_id)
    if node_id in _rank_derived(dist) and (values := per_device_values(dist, node_id)):
        shown = ", ".join(str(v) for v in values[:8]) + (", ..." if len(values) > 8 else "")
        return f"`{node.name}` is computed from the device id: {shown} on devices 0, 1, ..."
    if node_id not in proven:
        kind = "a literal" if _is_literal(node, dist) else "unrelated to the baseline"
        return f"`{node.name}` is {kind}"
    parts = sorted(
        {
            f"{layout_str(canonical(lay))} of baseline `{base.node(b).name}`"
            for lay, b in proven[node_id]
        }
    )
    return f"`{node.name}` is " + " | ".join(parts[:3])


def per_device_values(graph: Graph, node_id: int) -> list | None:
    """An integer scalar's value on each device, when it is computed from the device id and
    literals alone (an offset, a block index), else None."""
    devices = device_count(graph)
    if devices < 2 or not is_int_dtype(graph.node(node_id).dtype):
        return None
    return DeviceScalars(graph, devices).of(node_id)


def _layouts(node_id: int, proven: Proven) -> list[Layout]:
    return [lay for lay, _ in proven.get(node_id, ())]


def _partial_axes(layouts: list[Layout]) -> set[str]:
    return {p.axis for lay in layouts for p in lay if p.kind == "partial"}


def _explain(
    node: Node, dist: Graph, proven: Proven, mesh: Mesh, fused: frozenset[int] = frozenset()
) -> Explanation:
    """Why `node` breaks agreement, whether that is certain, and the op upstream that caused
    it when the reason names one (the root cause, reported first)."""
    operand_layouts = [_layouts(o, proven) for o in node.operands]
    if node.op in COLLECTIVES and node.op != "collective_permute":
        axes = collective_axes(node, mesh)
        if axes.startswith("groups"):
            expected = "; ".join(f"{a}: {_groups_text(mesh.groups((a,)))}" for a in mesh.names)
            return Explanation(
                f"{node.op} over replica groups {axes[6:]}, which are not the groups of any "
                f"mesh axis ({expected}): the reduction runs over the wrong devices",
                True,
            )
        partial = _partial_axes(operand_layouts[0])
        if any(p.kind == "rescaled" for lay in operand_layouts[0] for p in lay):
            return Explanation(
                f"{node.op} over {axes} sums per-chunk values that are each still relative "
                "to their chunk's own max (split-KV form): each must be multiplied by "
                "exp(chunk max - global max) before the sum, and on this path it is not",
                True,
                made=_shift_made_at(node.operands[0], dist, proven),
            )
        sharded_over = {
            p.axis for lay in operand_layouts[0] for p in lay if p.kind == "shard"
        } & set(axes.split(","))
        if node.op in ("all_reduce", "reduce_scatter") and not partial and sharded_over:
            axis = sorted(sharded_over)[0]
            return Explanation(
                f"{node.op} over {axes} of a value split over {axis} (each device holds a "
                "different block, e.g. different tokens): it adds blocks that do not belong "
                "together; a gather, or no collective, was meant",
                True,
            )
        source = dist.node(node.operands[0])
        if (
            node.op in ("all_reduce", "reduce_scatter")
            and source.op == "all_reduce"
            and collective_axes(source, mesh) == axes
            and node.attrs.get("op", "sum") == source.attrs.get("op", "sum") == "sum"
        ):
            scale = 1
            for a in axes.split(","):
                scale *= mesh.axis_size(a)
            return Explanation(
                f"{node.op} over {axes} of `{source.name}`{at_line(source.loc)}, already "
                f"summed over {axes}: the result is {scale}x too large; is the reduction "
                "applied twice? (JAX's autodiff already sums the gradient of a weight that is "
                "the same on every device, when shard_map checks replication)",
                True,
            )
        if node.op in ("all_reduce", "reduce_scatter"):
            if not partial and operand_layouts[0]:
                scale = 1
                for a in axes.split(","):
                    scale *= mesh.axis_size(a)
                since = _completed_at(node.operands[0], dist, proven)
                return Explanation(
                    f"{node.op} over {axes} of a value that is already complete on every "
                    f"device ({layout_str(operand_layouts[0][0])}"
                    + (f", since the {_origin_text(since, dist)}" if since else "")
                    + f"): the result is {scale}x too large; is the reduction applied twice?",
                    True,
                    since,
                )
            if partial and axes not in partial:
                return Explanation(
                    f"{node.op} over {axes}, but its operand is a partial sum over "
                    f"{', '.join(sorted(partial))}: the reduction runs over the wrong "
                    "devices",
                    True,
                )
        return Explanation(
            f"{node.op} over {axes} does not match its operand's layout "
            f"({_layouts_text(operand_layouts[0])})",
            False,
        )
    partial_ops = {
        p.op: p.axis for lays in operand_layouts for lay in lays for p in lay if p.kind == "partial"
    }
    moves_data = node.op in (
        "broadcast",
        "transpose",
        "merge",
        "split",
        "slice",
        "reshape",
        "concatenate",
    )
    rescale = _rescale_exponent(node, dist, operand_layouts) or _lse_misuse(node, operand_layouts)
    if rescale:
        return Explanation(rescale, False)
    if ("max" in partial_ops or "min" in partial_ops) and not moves_data:
        op = "max" if "max" in partial_ops else "min"
        axis = partial_ops[op]
        # Combining partial maxima with max is fine (a rule may be missing); arithmetic with
        # one partial max and a complete value is the classic missing-reduction bug.
        complete = [lays for lays in operand_layouts if lays and not _partial_axes(lays)]
        definite = node.op in ("add", "sub", "mul", "div") and bool(complete)
        partial = next(
            o
            for o, lays in zip(node.operands, operand_layouts, strict=True)
            if axis in _partial_axes(lays)
        )
        return Explanation(
            f"{node.op} uses a partial {op} over {axis} (each device holds only its own "
            f"{op}) as if it were complete: a {op} all-reduce over {axis} is missing "
            "before this op",
            definite,
            made=_partial_made_at(partial, axis, dist, proven),
        )
    if node.op in ("add", "sub"):
        kinds = [bool(_partial_axes(lays)) for lays in operand_layouts]
        # Definite only when the other operand is known to be complete; an unrelated one may
        # be a share of the value that a missing rule would account for.
        if any(kinds) and not all(kinds) and all(operand_layouts):
            axis = sorted(_partial_axes(operand_layouts[kinds.index(True)]))[0]
            made = _partial_made_at(node.operands[kinds.index(True)], axis, dist, proven)
            return Explanation(
                f"{node.op} of a partial sum over {axis} and a complete value: the complete "
                f"value is counted {mesh.axis_size(axis)} times once the partial sum is "
                f"reduced (a bias added before the all-reduce, or an all-reduce over {axis} "
                "missing before this op"
                + (f": the partial sum is the {_origin_text(made, dist)}" if made else "")
                + ")",
                True,
                made=made,
            )
    if node.op in (
        "div",
        "mul",
        "max",
        "min",
        "exp",
        "log",
        "rsqrt",
        "sqrt",
        "tanh",
        "pow",
    ) and partial_ops.get("sum"):
        axis = partial_ops["sum"]
        partial = next(
            o
            for o, lays in zip(node.operands, operand_layouts, strict=True)
            if axis in _partial_axes(lays)
        )
        made = _partial_made_at(partial, axis, dist, proven)
        return Explanation(
            f"{node.op} of a partial sum over {axis}: it is not linear, so each device's "
            f"part gives a wrong result; an all-reduce over {axis} is missing before "
            "this op" + (f" (the partial sum is the {_origin_text(made, dist)})" if made else ""),
            True,
            made=made,
        )
    shards = [p for lays in operand_layouts[:1] for lay in lays for p in lay if p.kind == "shard"]
    if node.op == "reduce" and any(p.dim in node.attrs["dims"] for p in shards):
        axis = next(p.axis for p in shards if p.dim in node.attrs["dims"])
        return Explanation(
            f"reduce over dims {list(node.attrs['dims'])} covers a dim split over {axis}: each "
            f"device reduces only its own block, a value the baseline never computes (a "
            f"reduction over all of the dim needs an all-reduce over {axis} here)",
            False,
        )
    mismatch = _contraction_order_mismatch(node, dist, operand_layouts)
    if mismatch:
        return Explanation(mismatch, True)
    unpaired = _unpaired_dot_shards(node, operand_layouts)
    if unpaired:
        return Explanation(unpaired, False)
    cut = _cut_dims(node, dist)
    if node.op == "slice" and any(p.dim in cut for p in shards):
        p = next(p for p in shards if p.dim in cut)
        origin = _sharded_at(node.operands[0], dist, proven)
        return Explanation(
            f"slice of dim {p.dim}, which is split over {p.axis}"
            + (f" (since the {_origin_text(origin, dist)})" if origin else "")
            + ": every device cuts its own block at the same offsets, so the pieces are no "
            "blocks of the baseline's pieces (a fused weight or product cut as one block "
            "instead of per part?)",
            False,
            origin,
        )
    if node.op == "slice" and not operand_layouts[0] and node.operands[0] in fused:
        return Explanation(
            "a piece of a value built block by block (a fused weight or its product) that is "
            "no block of any baseline piece: the cut's offsets or sizes do not line up with "
            "the parts the value was built from (split sizes from the wrong dimension?)",
            False,
        )
    # a split whose outer part is one entry a device, or a merge of such a dim, only inserts
    # or removes a unit dim (a broadcast to a device's one row of a batch, read as a
    # reshape): the block stays whole, so no misplaced shard is certain there
    unit_outer = (
        node.shape[node.attrs["dim"]] == 1
        if node.op == "split"
        else node.op == "merge" and dist.node(node.operands[0]).shape[node.attrs["dim"]] == 1
    )
    if node.op == "split" and not unit_outer and any(p.dim == node.attrs["dim"] for p in shards):
        return Explanation(
            f"reshape splits the sharded dim {node.attrs['dim']} so that its inner part has "
            f"{node.attrs['inner']} elements per device: the shard no longer lands on the "
            "outer factor, so each device holds pieces of every block (e.g. heads and "
            "head_dim swapped)",
            True,
        )
    if (
        node.op == "merge"
        and not unit_outer
        and any(p.dim == node.attrs["dim"] + 1 for p in shards)
    ):
        return Explanation(
            f"reshape merges dims {node.attrs['dim']} and {node.attrs['dim'] + 1}, but the "
            "sharded one is the inner dim: the merged dim is not one block per device",
            True,
        )
    if node.op == "transpose" and shards:
        return Explanation(
            f"transpose {list(node.attrs['perm'])} of a sharded operand gives a layout no "
            "baseline node has: the dims are permuted differently from the baseline",
            False,
        )
    if node.op == "convert":
        return Explanation(
            f"convert to {node.dtype}: the baseline computes no such conversion here "
            "(the two pipelines use different precisions)",
            True,
        )
    if node.op in ("add", "sub") and len(node.operands) == 2:
        counted = _partial_over_fewer_axes(operand_layouts, mesh)
        if counted:
            return Explanation(counted, True)
    if node.op in ELEMENTWISE and len(node.operands) > 1:
        texts = {_layouts_text(lays) for lays in operand_layouts if lays}
        if len(texts) > 1 and "replicate" not in texts:
            return Explanation(
                f"elementwise {node.op} of operands related to the baseline by different "
                f"layouts: {' vs '.join(sorted(texts))}",
                True,
            )
    if node.op == "opaque":
        return Explanation(
            f"opaque op `{node.attrs.get('hlo_op', '?')}`: Scalify has no semantics for "
            "it, so it only matches the identical baseline op on identical operands",
            False,
        )
    texts = [
        "literal" if _is_literal(dist.node(o), dist) else _layouts_text(lays)
        for o, lays in zip(node.operands, operand_layouts, strict=True)
    ]
    if node.op in ELEMENTWISE and set(texts) <= {"replicate", "literal"} and "literal" in texts:
        return Explanation(
            f"{node.op} of a complete value and a literal gives a value the baseline never "
            "computes: check the constant against the baseline's (a scale by the wrong "
            "group size, or a wrong constant)",
            False,
        )
    return Explanation(
        f"no rule relates {node.op}({', '.join(texts)}) to a node of the baseline: the "
        "baseline computes no such value, or a rule is missing",
        False,
    )


def _rescale_exponent(node: Node, dist: Graph, operand_layouts: list[list[Layout]]) -> str:
    """A chunk's own max and the global max meeting outside the split-KV rescale
    exp(f - g) that a rule would have consumed: name what differs."""
    maxes = [
        i
        for i, lays in enumerate(operand_layouts)
        if any(p.kind == "partial" and p.op == "max" for lay in lays for p in lay)
    ]
    if not maxes or len(node.operands) != 2:
        return ""
    other = node.operands[1 - maxes[0]]
    if node.op == "sub" and maxes == [0] and operand_layouts[1] == [()]:
        return (
            "the chunk's own max minus the global max, the exponent of a split-KV rescale, "
            "is not used as exp(f - g) on the chunk's results (another base, a scale, or the "
            "wrong operand order?)"
        )
    if node.op in ("mul", "div") and _is_literal(dist.node(other), dist):
        return (
            f"{node.op} of a chunk's own max (partial max) by a constant: the max enters the "
            "split-KV rescale exp(f - g) as it is; is it scaled twice?"
        )
    return ""


def _contraction_order_mismatch(
    node: Node, dist: Graph, operand_layouts: list[list[Layout]]
) -> str:
    """A dot whose contracted dims are split over the same mesh axes in both operands, but
    in a different order: device (i, j) multiplies blocks that do not pair up."""
    if node.op != "dot" or not all(operand_layouts):
        return ""
    sides = []
    for key, layouts in zip(("lhs_contracting", "rhs_contracting"), operand_layouts, strict=True):
        dims = tuple(node.attrs.get(key, ()))
        sides.append(
            [[p.axis for p in lay if p.kind == "shard" and p.dim in dims] for lay in layouts]
        )
    for left in sides[0]:
        for right in sides[1]:
            if len(left) > 1 and sorted(left) == sorted(right) and left != right:
                return (
                    f"dot contracts dims split over {', '.join(left)} in the lhs but over "
                    f"{', '.join(right)} in the rhs: the axes' order decides which block a "
                    "device holds, so each device multiplies blocks that do not pair up (a "
                    "weight split in another axis order than its input)"
                )
    return ""


def _unpaired_dot_shards(node: Node, operand_layouts: list[list[Layout]]) -> str:
    """A dot whose operands are both split over an axis, where a batch or contracted pair has
    only one of its dims split over it: each device multiplies blocks that do not belong
    together, whatever rule could apply."""
    if node.op != "dot" or not all(operand_layouts):
        return ""
    a = node.attrs
    pairs = list(zip(a.get("lhs_batch", ()), a.get("rhs_batch", ()), strict=True))
    pairs += zip(a.get("lhs_contracting", ()), a.get("rhs_contracting", ()), strict=True)
    for left in operand_layouts[0]:
        for right in operand_layouts[1]:
            for axis in {p.axis for p in left if p.kind == "shard"}:
                lhs = {p.dim for p in left if p.kind == "shard" and p.axis == axis}
                rhs = {p.dim for p in right if p.kind == "shard" and p.axis == axis}
                if not rhs:
                    continue
                odd = [(i, j) for i, j in pairs if (i in lhs) != (j in rhs)]
                if odd:
                    i, j = odd[0]
                    return (
                        f"dot pairs dim {i} of its lhs with dim {j} of its rhs, but only one "
                        f"of them is split over {axis} (the lhs along {sorted(lhs)}, the rhs "
                        f"along {sorted(rhs)}): each device multiplies blocks that do not "
                        "belong together (an operand's dims permuted differently from the "
                        "baseline's?)"
                    )
    return ""


def _cut_dims(node: Node, dist: Graph) -> set[int]:
    """The dims a static slice cuts."""
    if node.op != "slice":
        return set()
    shape = dist.node(node.operands[0]).shape
    a = node.attrs
    return {
        d
        for d, (s, e, st) in enumerate(zip(a["starts"], a["limits"], a["strides"], strict=True))
        if (s, e, st) != (0, shape[d], 1)
    }


def _sharded_at(node_id: int, dist: Graph, proven: Proven) -> Node | None:
    """Where a sharded value got its shard: the nearest device slice, input or collective
    upstream that is sharded."""

    def made_there(node: Node) -> bool:
        if node.op == "parameter":
            return True
        return node.op in ("slice_at", "reduce_scatter", "all_to_all") and node.loc is not None

    return _nearest_upstream_node(
        node_id, dist, made_there, lambda o: any(map(_has_shard, _layouts(o, proven)))
    )


def _origin_text(node: Node | None, dist: Graph) -> str:
    """An origin as a reason names it: `op at file:line`, or `input NAME`."""
    if node is None:
        return ""
    if node.op == "parameter":
        return f"input `{dist.input_name(node.id)}`"
    return f"{node.op} at {node.loc.file}:{node.loc.line}" if node.loc else ""


def _partial_made_at(node_id: int, axis: str, dist: Graph, proven: Proven) -> Node | None:
    """Where a partial sum over `axis` was made: the nearest op upstream with a line whose
    result is one while its operands are not (a row-parallel dot, a masked lookup). A missing
    all-reduce has no line of its own; this is the value it should have reduced."""

    def is_partial(i: int) -> bool:  # a plain partial sum: a rescaled one is not yet one
        return any(
            axis in _partial_axes([lay]) and all(p.kind != "rescaled" for p in lay)
            for lay in _layouts(i, proven)
        )

    def through(i: int, depth: int = 0) -> bool:
        """A partial sum, or a view of one that no rule relates (a keepdims reshape)."""
        node = dist.node(i)
        if is_partial(i):
            return True
        if depth > 4 or _layouts(i, proven) or node.op not in _VIEWS or not node.operands:
            return False
        return through(node.operands[0], depth + 1)

    def made_there(node: Node) -> bool:
        return (
            node.loc is not None
            and is_partial(node.id)
            and not any(through(o) for o in node.operands)
        )

    return _nearest_upstream_node(node_id, dist, made_there, through)


_VIEWS = frozenset({"split", "merge", "reshape", "broadcast"})


def partial_origin(node_id: int, dist: Graph, proven: Proven) -> Node | None:
    """Where a value that is a partial reduction (over its first such axis) was made; for a
    view no rule relates (a keepdims reshape of a max the baseline folds away), where the
    value it views was."""
    node = dist.node(node_id)
    while not _layouts(node.id, proven) and node.op in _VIEWS and node.operands:
        node = dist.node(node.operands[0])
    axes = sorted(_partial_axes(_layouts(node.id, proven)))
    return _partial_made_at(node.id, axes[0], dist, proven) if axes else None


def _has_shard(layout: Layout) -> bool:
    return any(p.kind == "shard" for p in layout)


def _completed_at(node_id: int, dist: Graph, proven: Proven) -> Node | None:
    """The nearest collective upstream of a complete value that made it complete (an
    all-gather or all-reduce): where a reduction applied twice began."""

    def made_there(node: Node) -> bool:
        return node.op in ("all_gather", "all_reduce") and node.loc is not None

    return _nearest_upstream_node(node_id, dist, made_there, lambda o: o in proven)


def _nearest_upstream_node(
    node_id: int,
    dist: Graph,
    accept: Callable[[Node], bool],
    follow: Callable[[int], bool],
    budget: int = 64,
) -> Node | None:
    """Breadth-first up the operands that `follow` admits: the first node `accept` takes."""
    seen, queue = set(), [node_id]
    while queue and len(seen) < budget:
        current = dist.node(queue.pop(0))
        if current.id in seen:
            continue
        seen.add(current.id)
        if accept(current):
            return current
        queue += [o for o in current.operands if follow(o)]
    return None


def _elsewhere(origin: Node | None, node: Node) -> Node | None:
    """The origin a reason names, when it is an op on another line than `node` (an input's
    layout comes from the relations, not a line of code; an op on the same line adds nothing
    to where the finding already is)."""
    if origin is None or origin.op == "parameter" or origin.loc is None or node.loc is None:
        return None
    same = (origin.loc.file, origin.loc.line) == (node.loc.file, node.loc.line)
    return None if same else origin


def _behind_backward(node: Node, made: Node | None) -> Node | None:
    """For a missing all-reduce found at an op autograd wrote (its line is a `backward()` or
    `autograd.grad` call): the op that made the partial sum it should have reduced, when that
    op has a line of its own (a custom autograd function's backward, Megatron's dgrad
    product). None otherwise: the finding stays where it is."""
    if made is None or node.loc is None:
        return None
    line = linecache.getline(node.loc.file, node.loc.line)
    if "backward(" not in line and "autograd.grad(" not in line:
        return None
    return _elsewhere(made, node)


def _groups_text(groups) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def _layouts_text(layouts: list[Layout]) -> str:
    return " | ".join(sorted({layout_str(canonical(lay)) for lay in layouts})) or "unrelated"


def frontier(
    dist: Graph, base: Graph, proven: Proven, mesh: Mesh, replicated: set[int]
) -> list[Finding]:
    """Unrelated distributed nodes all of whose operands are related, in graph order.

    `replicated` nodes (the same on every device, computable from baseline values) count as
    related: a relayout of a replicated constant is not where a bug starts. Callers retry with
    an empty set when that finds nothing, so a replicated value that differs from the
    baseline is still localised."""
    findings = []
    fused = frozenset(_judged_by_pieces(dist, proven, replicated))
    replicated = replicated | fused
    needed = _feeding_outputs(dist, lambda n: related(n, dist, proven, replicated))
    collected = _replicated_from_unrelated(dist, proven, replicated)
    for node in dist.nodes.values():
        if node.op == "parameter" or node.id not in needed:
            continue  # an alternative form (graph.equalities) that the program never uses
        if related(node.id, dist, proven, replicated):
            continue
        if all(related(o, dist, proven, replicated) for o in node.operands):
            findings += _same_everywhere_sources(
                node, dist, base, proven, replicated, collected, findings, mesh
            )
            findings += _unrescaled_shift(node, dist, base, proven, findings)
            why = _explain(node, dist, proven, mesh, fused)
            origin = _elsewhere(why.origin, node) or _behind_backward(node, why.made)
            second = None
            if origin is not None:  # the root cause first, where it shows second
                node, second = origin, (node, SHOWS_AT)
            elif _elsewhere(why.made, node) is not None:
                second = (why.made, MADE_AT)
            if any(f.node.id == node.id for f in findings):
                continue  # one root cause showing at several ops: one suspect
            operands = [describe(o, dist, base, proven) for o in node.operands]
            findings.append(Finding(node, why.reason, why.definite, operands, second))
    findings.sort(key=lambda f: not f.definite)
    return findings


def with_off_axis_collectives(
    dist: Graph, base: Graph, proven: Proven, mesh: Mesh, findings: list[Finding]
) -> list[Finding]:
    """The frontier's findings with the collectives over replica groups that are no set of
    mesh axes, wherever they are (an operand no rule relates hides them from the frontier).
    A wrong reduction goes first when it feeds a finding (the root cause of what shows
    there) or when no finding is a known bug pattern (a frontier of rule gaps only: a
    reduction over the wrong devices is the likelier cause); after the findings otherwise."""
    extra = _off_axis_collectives(dist, base, proven, mesh, findings)
    if not extra:
        return findings
    if not any(f.definite for f in findings):
        return extra + findings
    ancestors = dist.computed_ancestors(f.node.id for f in findings)
    causes = [f for f in extra if f.node.id in ancestors]
    return causes + findings + [f for f in extra if f not in causes]


def _off_axis_collectives(
    dist: Graph, base: Graph, proven: Proven, mesh: Mesh, findings: list[Finding]
) -> list[Finding]:
    """Collectives over replica groups that are no set of mesh axes, not among `findings`."""
    found = {f.node.id for f in findings}
    needed = _feeding_outputs(dist, lambda n: False)
    extra = []
    for node in dist.nodes.values():
        if (
            node.op not in COLLECTIVES
            or node.op == "collective_permute"
            or node.id in found
            or node.id not in needed
            or not collective_axes(node, mesh).startswith("groups")
        ):
            continue
        why = _explain(node, dist, proven, mesh)
        operands = [describe(o, dist, base, proven) for o in node.operands]
        extra.append(Finding(node, why.reason, False, operands))
    return extra


# Ops a static slice moves through (slice_views.py): a value used only through them and then
# slices is a fused value, judged by its pieces.
_FUSED_PATH = frozenset({"dot", "concatenate", "merge", "split", "slice_at"})


def _judged_by_pieces(dist: Graph, proven: Proven, replicated: set[int]) -> set[int]:
    """Unrelated nodes that reach the program only through static slices (a fused weight
    built per block, its product): no layout relates them whole, only their pieces, so a
    piece is where a bug shows, not the fused value."""
    users = dist.memo("users", Graph.users)
    result: set[int] = set()

    def pieces_only(node_id: int, depth: int) -> bool:
        uses = users.get(node_id, [])
        if not uses or depth > 4:
            return False
        for user in uses:
            op = dist.node(user).op
            if op == "slice":
                continue
            if op not in _FUSED_PATH or not pieces_only(user, depth + 1):
                return False
        return True

    def from_related(node: Node) -> bool:  # else the break is upstream, not in the pieces
        return all(o in result or related(o, dist, proven, replicated) for o in node.operands)

    for node in dist.nodes.values():
        if node.id not in proven and node.id not in replicated and node.op in _FUSED_PATH:
            if pieces_only(node.id, 0) and from_related(node):
                result.add(node.id)
    return result


def _same_everywhere_sources(
    node: Node,
    dist: Graph,
    base: Graph,
    proven: Proven,
    replicated: set[int],
    collected: set[int],
    found,
    mesh: Mesh,
) -> list[Finding]:
    """Operands of `node` that are the same on every device yet equal to no baseline value.
    When the earliest op of such a value is a collective of a value already wrong (an
    all-reduce of a partial sum an early layer got wrong, a sequence-parallel norm changed
    before its all-gather), the collective only made the wrong value the same everywhere:
    the first op of that value no rule relates is the suspect, wherever the value is read.
    Otherwise, when another operand is sharded over an axis, the device's own part was
    probably meant (a slice without the device offset): that earliest op is the suspect,
    ahead of `node` where the mismatch shows."""
    split = [
        p.axis
        for o in node.operands
        for lay, _ in proven.get(o, ())
        for p in lay
        if p.kind == "shard"
    ]
    known = {f.node.id for f in found}
    out = []
    for operand in node.operands:
        origin = _first_unproven_replicated(operand, dist, proven, replicated)
        if origin is None or origin.id in known:
            continue
        upstream = _upstream_frontier(origin, dist, proven, replicated, collected)
        if origin.op in COLLECTIVES and upstream is not None:
            if upstream.id not in known:
                known.add(upstream.id)
                why = _explain(upstream, dist, proven, mesh)
                reason, definite = why.reason, why.definite
                operands = [describe(o, dist, base, proven) for o in upstream.operands]
                out.append(Finding(upstream, reason, definite, operands))
            continue
        if not split:
            continue
        known.add(origin.id)
        out.append(
            Finding(
                origin,
                f"{origin.op} gives every device the same value, but it meets a value split "
                f"over {split[0]} at `{node.name}`: each device's own part was probably meant "
                "(a slice or index without the device's offset)",
                False,
                [describe(o, dist, base, proven) for o in origin.operands],
            )
        )
    return out


def _partial_over_fewer_axes(operand_layouts, mesh: Mesh) -> str:
    """add of a partial sum over axes A and B and one over A only: the second is the same
    on every device along B, so the all-reduce over both counts it size(B) times."""
    axes = [[_partial_axes([lay]) for lay in lays] if lays else [set()] for lays in operand_layouts]
    for wide in axes[0] + axes[1]:
        for narrow in axes[0] + axes[1]:
            if narrow and narrow < wide and (wide in axes[0]) != (narrow in axes[0]):
                extra = sorted(wide - narrow)
                count = 1
                for a in extra:
                    count *= mesh.axis_size(a)
                return (
                    f"add of a partial sum over {', '.join(sorted(wide))} and one over "
                    f"{', '.join(sorted(narrow))} only: the second is the same on every device "
                    f"along {', '.join(extra)}, so reducing the sum over "
                    f"{', '.join(sorted(wide))} counts it {count} times (a shared expert or "
                    "bias folded into a reduction over more axes than its own)"
                )
    return ""


def _lse_misuse(node: Node, operand_layouts) -> str:
    """A part's log-sum-exp, or the log of its rescaled sum, used other than the merge
    expects: the reason names the merge's form."""
    kinds = {p.kind for lays in operand_layouts for lay in lays for p in lay}
    if "log" in kinds and node.op not in ("sub", "all_reduce"):
        return (
            f"{node.op} of a part's log-sum-exp (g + log of its sum of exp): the merge weighs "
            "the parts by exp(lse - max lse) in natural base, so an lse that is scaled, "
            "shifted or in another base gives every part a wrong weight"
        )
    if "rescaled" in kinds and node.op == "log":
        return (
            "log of a part's sum of exp, which is relative to the part's own max f: only "
            "f + log(sum), with the same f and in natural base, is the part's log-sum-exp"
        )
    return ""


def _rescaled(node_id: int, proven: Proven) -> bool:
    return any(p.kind == "rescaled" for lay, _ in proven.get(node_id, ()) for p in lay)


def _unrescaled_shift(
    node: Node, dist: Graph, base: Graph, proven: Proven, found: list[Finding]
) -> list[Finding]:
    """A collective summing chunks shifted by their own max, in code that never rescales by
    exp(f - g) anywhere: the global max was meant at the shift itself, which is the suspect
    (ahead of the collective, which is named too)."""
    if node.op not in COLLECTIVES or not node.operands or not _rescaled(node.operands[0], proven):
        return []
    origin = _first_rescaled(node.operands[0], dist, proven)
    shift = _chunk_shift(origin, dist)
    if shift is None or origin.id in {f.node.id for f in found}:
        return []
    users = dist.memo("users", Graph.users)
    if any(dist.node(u).op != "broadcast" for u in users.get(shift, [])):
        return []  # the chunk max is used elsewhere too (a rescale): blame the collective
    made = _elsewhere(partial_origin(shift, dist, proven), origin)
    return [
        Finding(
            origin,
            f"{origin.op} of scores shifted by each device's own max (partial max) and never "
            "rescaled: a max all-reduce is missing before the shift (use the global max), or "
            "rescale each chunk by exp(chunk max - global max) before the sum",
            True,
            [describe(o, dist, base, proven) for o in origin.operands],
            (made, MADE_AT) if made is not None else None,
        )
    ]


def _first_rescaled(node_id: int, dist: Graph, proven: Proven) -> Node:
    """The first op up a chain of rescaled values (the exp of the shifted scores)."""
    origin = dist.node(node_id)
    while True:
        earlier = [o for o in origin.operands if _rescaled(o, proven)]
        if not earlier:
            return origin
        origin = dist.node(earlier[0])


def _shift_made_at(node_id: int, dist: Graph, proven: Proven) -> Node | None:
    """Where the per-chunk max that a rescaled value was shifted by was made."""
    shift = _chunk_shift(_first_rescaled(node_id, dist, proven), dist)
    return partial_origin(shift, dist, proven) if shift is not None else None


def _chunk_shift(node: Node, dist: Graph) -> int | None:
    """f in exp(s - broadcast(f)), or None."""
    if node.op != "exp":
        return None
    sub = dist.node(node.operands[0])
    if sub.op != "sub":
        return None
    shifted = dist.node(sub.operands[1])
    return shifted.operands[0] if shifted.op == "broadcast" else None


def _earliest_root(starts: list[int], dist: Graph, inside: Callable[[int], bool]) -> Node | None:
    """Walking back from `starts` through the nodes `inside` admits, the earliest one (in
    graph order) none of whose operands is in that region; None when no start is inside."""
    region, stack = set(), [i for i in starts if inside(i)]
    while stack:
        i = stack.pop()
        if i in region:
            continue
        region.add(i)
        stack += [o for o in dist.node(i).operands if inside(o)]
    roots = [i for i in region if not any(o in region for o in dist.node(i).operands)]
    order = dist.memo("positions", lambda g: {i: k for k, i in enumerate(g.nodes)})
    return dist.node(min(roots, key=order.__getitem__)) if roots else None


def _upstream_frontier(
    node: Node, dist: Graph, proven: Proven, replicated: set[int], collected: set[int]
) -> Node | None:
    """The earliest op upstream of `node`, through ops no proof relates, whose operands are
    all related: where the value `node` collects went wrong. None when its operands are.
    The walk goes on through `collected` values (the same on every device only because an
    earlier collective gathered a wrong value: an early layer's all-reduce, the residual
    stream after it), so a bug in an early layer is found there, not where a later layer
    first slices the wrong stream; it stops at the device's index and arithmetic on it
    alone, legitimate SPMD values, rather than blaming the partition-id (which has no
    source line) for what a later op did with data."""

    def unrelated(i: int) -> bool:
        if dist.node(i).op == "parameter":
            return False
        return i in collected or not related(i, dist, proven, replicated)

    return _earliest_root(list(node.operands), dist, unrelated)


def _replicated_from_unrelated(dist: Graph, proven: Proven, replicated: set[int]) -> set[int]:
    """The replicated, unproven nodes that an unproven, unreplicated node feeds (through
    unproven nodes): the same on every device only because a collective made them so."""
    tainted: set[int] = set()
    for node in dist.nodes.values():
        if node.op == "parameter" or related(node.id, dist, proven, set()):
            continue
        if node.id not in replicated or any(o in tainted for o in node.operands):
            tainted.add(node.id)
    return tainted & replicated


def _first_unproven_replicated(
    node_id: int, dist: Graph, proven: Proven, replicated: set[int]
) -> Node | None:
    """Walking back through values that are replicated but equal to no baseline value, the
    earliest one (in graph order) whose operands are all outside that region; None if
    `node_id` is not such a value."""

    def inside(i: int) -> bool:
        return (
            i not in proven
            and i in replicated
            and not _is_literal(dist.node(i), dist)
            and i not in _rank_derived(dist)
        )

    return _earliest_root([node_id], dist, inside)


def _feeding_outputs(graph: Graph, is_related: Callable[[int], bool]) -> set[int]:
    """The nodes an output reaches through unrelated nodes. A related node's operands were
    consumed by the rule that related it (`b / tp` inside a bias shared out before the
    all-reduce), so nothing behind it is where an output went wrong."""
    needed = set(graph.outputs)
    for node in reversed(list(graph.nodes.values())):
        if node.id in needed and not is_related(node.id):
            needed.update(node.operands)
    return needed


def output_mismatch(node: Node, expected: Layout, proven_layouts: list[Layout]) -> str:
    """Why an output that is related to the baseline still does not meet its relation."""
    have = _layouts_text(proven_layouts)
    partial = _partial_axes(proven_layouts)
    text = f"output is {have} but {layout_str(expected)} is required"
    if partial:
        text += f": an all-reduce over {', '.join(sorted(partial))} is missing"
    return text
