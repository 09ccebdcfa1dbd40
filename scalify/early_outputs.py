"""An output that equals a value the baseline computes before its output: a step is missing.

Gradients accumulated over micro-batches and never divided, a loss summed where the baseline
averages: every distributed op relates to some baseline value, and the output relates, with
the layout it must have, to the baseline's value one step before its output. The frontier
has nothing to show; this says which baseline value the output is, and what the baseline
does with it next, with both lines.
"""

from __future__ import annotations

from collections import deque

from .ir import Graph, at_line
from .layout import canonical, layout_str
from .relations import Relation


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
