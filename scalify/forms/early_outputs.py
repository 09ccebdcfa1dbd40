"""An output that equals a value the baseline computes before its output, or a multiple of
its own baseline value: a step is missing.

Gradients accumulated over micro-batches and never divided, a loss summed where the baseline
averages: every distributed op relates to some baseline value, and the output relates, with
the layout it must have, to the baseline's value one step before its output. The frontier
has nothing to show; this says which baseline value the output is, and what the baseline
does with it next, with both lines. An output proved to be n times its baseline value (n a
group's size: gradients summed over data-parallel devices where each device's mean needed an
average) is told at the sum that should have been an average.
"""

from __future__ import annotations

from collections import deque

from scalify.ir import Graph, Node, at_line
from scalify.layout import canonical, layout_str
from scalify.mesh import Mesh
from scalify.ops import COLLECTIVES
from scalify.ops.collectives import collective_axes
from scalify.relations import Relation


def early_output(base: Graph, index: int, rel: Relation, proven) -> str | None:
    """The reason for the finding about output `index` (its relation `rel`), or None when
    it relates to no earlier baseline value by the required layout."""
    wanted = canonical(rel.layout)
    earlier = [
        b for lay, b in proven.get(rel.dist_id, ()) if b != rel.base_id and canonical(lay) == wanted
    ]
    path = next((p for b in earlier if (p := _path(base, b, rel.base_id))), None)
    if path is None:
        return None
    value, after = base.node(path[0]), base.node(path[1])
    return (
        f"output {index} is {layout_str(rel.layout)} of baseline `{value.name}`"
        f"{at_line(value.loc)}, a value the baseline computes before its output: the "
        f"baseline goes on with {after.op} `{after.name}`{at_line(after.loc)}, which the "
        "distributed program does not do (a division by the number of micro-batches or "
        "devices, say)"
    )


def _path(base: Graph, start: int, goal: int) -> list[int] | None:
    """The baseline nodes from `start` to `goal` along users, shortest first."""
    users = base.users()
    came: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [goal]
            while path[-1] != start:
                path.append(came[path[-1]])
            return path[::-1]
        for user in users.get(node, ()):
            if user not in came:
                came[user] = node
                queue.append(user)
    return None


def scaled_output(
    dist: Graph, base: Graph, index: int, rel: Relation, n: int, mesh: Mesh
) -> tuple[Node, str]:
    """The suspect for output `index`, proved to be `n` times its baseline value: the last
    sum over a group of n devices on its way (the reduction that needed dividing by n), and
    the reason."""
    node = _last_sum_over(dist, rel.dist_id, n, mesh) or dist.node(rel.dist_id)
    value = base.node(rel.base_id)
    where = f" ({node.op} over {collective_axes(node, mesh)})" if node.op in COLLECTIVES else ""
    return node, (
        f"output {index} is exactly {n}x the baseline's `{value.name}`{at_line(value.loc)}: "
        f"a sum over {n} devices{where} where the baseline's mean needs it divided by {n}; "
        "an average, not a sum, was meant (or the sum is taken twice)"
    )


def _last_sum_over(dist: Graph, start: int, n: int, mesh: Mesh) -> Node | None:
    """The collective sum over a group of n devices nearest the output, along operands."""
    seen, queue = {start}, deque([start])
    while queue:
        node = dist.node(queue.popleft())
        if node.op in ("all_reduce", "reduce_scatter") and node.attrs.get("op", "sum") == "sum":
            groups = node.attrs.get("groups", ())
            if groups and len(groups[0]) == n:
                return node
        for operand in node.operands:
            if operand not in seen:
                seen.add(operand)
                queue.append(operand)
    return None
