"""The graph IR every frontend produces and the engine consumes.

One small SSA form for both graphs: a node has a canonical op (the vocabulary of `.srl`
patterns), operand node ids, a static shape, a dtype, canonical attributes and the source
location it came from. Frontends own the mapping from framework ops; nothing downstream
looks at framework syntax. The canonical ops themselves are declared in `scalify/ops/`.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scalify.values import literal_number

# Reshapes that keep row-major order: a frontend's `reshape`, and the `merge` and `split`
# steps canonicalisation turns it into (a graph may be canonicalised twice).
ROW_MAJOR_VIEWS = frozenset({"reshape", "merge", "split"})


@dataclass(frozen=True)
class SourceLoc:
    """Where a node came from: the model code's line, and when that line is inside an
    installed library, the user's line that called into it (`call_site`); when the line is
    the user's code a library called back (a Keras layer's `call`), the library's line that
    made the op (`library`), kept because that line alone is the same for every such op."""

    file: str
    line: int
    function: str = ""
    call_site: SourceLoc | None = field(default=None, compare=False)
    library: SourceLoc | None = field(default=None, compare=False)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where} ({self.function})" if self.function else where


def at_line(loc: SourceLoc | None) -> str:
    """` (file:line)` for a message naming an op, or nothing when there is no location."""
    return f" ({loc.file}:{loc.line})" if loc and loc.file else ""


@dataclass
class Node:
    """One SSA value.

    `attrs` holds canonical attributes only, e.g. for `dot`: lhs_contracting, rhs_contracting,
    lhs_batch, rhs_batch (tuples of ints); for collectives: `groups` (tuple of tuples of device
    ids; an empty tuple means all devices), `op` (sum, max, min, prod), `dim`.
    """

    id: int
    op: str
    operands: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    attrs: dict[str, Any] = field(default_factory=dict)
    loc: SourceLoc | None = None
    name: str = ""
    framework_op: str = ""

    def derived(
        self, node_id: int, op: str, operands, shape, attrs: dict, name: str, dtype: str = ""
    ) -> Node:
        """A new node standing where this one stands: its source location and framework op,
        and its dtype unless `dtype` is given."""
        return Node(node_id, op, tuple(operands), tuple(shape), dtype or self.dtype, dict(attrs),
                    self.loc, name, self.framework_op)  # fmt: skip


@dataclass(frozen=True)
class TileSharding:
    """A sharding annotation read from the input: how many blocks each dim is cut into, and
    (when the input names them) which mesh axes cut it."""

    tiles: tuple[int, ...]
    axes: tuple[tuple[str, ...], ...] | None = None
    replicated: bool = False
    devices: tuple[int, ...] | None = None  # device of each tile, row-major over device_grid
    device_grid: tuple[int, ...] | None = None  # tile counts incl. replicated trailing dims


@dataclass
class Graph:
    """A whole program: nodes in topological order, inputs and outputs by node id."""

    path: str
    nodes: dict[int, Node]
    inputs: list[int]
    outputs: list[int]
    input_shardings: dict[int, TileSharding] = field(default_factory=dict)
    output_shardings: dict[int, TileSharding] = field(default_factory=dict)
    # output index -> the layout the program says it returns (a DTensor's placements, as a
    # layout string over the mesh's axis names)
    output_layouts: dict[int, str] = field(default_factory=dict)
    # output index -> the input whose layout it has: a training step's gradient of a weight,
    # or the weight an optimizer step updated
    output_inputs: dict[int, str] = field(default_factory=dict)
    # input name -> (the layout a DTensor weight's placements give, over its own global
    # shape; that global shape): FSDP's shard of a weight, inside any split its shape shows
    input_layouts: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    mesh_hint: dict[str, int] = field(default_factory=dict)
    num_partitions: int | None = None
    # input name -> the parameter the loader dropped because no output reads it (kept aside:
    # the other graph may read an input of that name, and they then pair)
    unread_inputs: dict[str, Node] = field(default_factory=dict)
    # Pairs of nodes that compute the same value in two forms (see canonicalize.py); both
    # forms go into the e-graph, unioned.
    equalities: list[tuple[int, int]] = field(default_factory=list)
    # how often each canonical rule (rules/canon.srl) rewrote a node of this graph
    canon_fired: dict[str, int] = field(default_factory=dict)
    # Facts derived from the nodes (users, literal nodes, ...), computed once; analyses key it
    # by their own name. Graphs are not edited after canonicalisation, so it stays valid.
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def memo(self, name: str, compute):
        """`compute(self)` once per graph and name."""
        if name not in self.derived:
            self.derived[name] = compute(self)
        return self.derived[name]

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def input_name(self, node_id: int) -> str:
        node = self.nodes[node_id]
        return str(node.attrs.get("name") or node.name)

    def users(self) -> dict[int, list[int]]:
        result: dict[int, list[int]] = {i: [] for i in self.nodes}
        for node in self.nodes.values():
            for operand in node.operands:
                result[operand].append(node.id)
        return result

    def computed_ancestors(self, roots, stop: set[int] | frozenset = frozenset()) -> set[int]:
        """The computed nodes `roots` are made from, themselves included, outside `stop`
        (parameters are inputs, not computed)."""
        found: set[int] = set()
        stack = list(roots)
        while stack:
            node_id = stack.pop()
            if node_id in found or node_id in stop or self.nodes[node_id].op == "parameter":
                continue
            found.add(node_id)
            stack.extend(self.nodes[node_id].operands)
        return found

    def opaque_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.op == "opaque"]


def is_scalar_fill(node: Node, node_of: Callable[[int], Node]) -> bool:
    """A broadcast of a rank-0 literal (`jnp.zeros(shape)`, the `0.5` of `x * 0.5`)."""
    if node.op != "broadcast" or len(node.operands) != 1:
        return False
    operand = node_of(node.operands[0])
    return operand.op == "constant" and operand.shape == ()


def dim_slice(shape: tuple[int, ...], dim: int, start: int, end: int) -> tuple[dict, tuple]:
    """The attributes of a step-1 slice of `shape` from `start` to `end` along `dim` alone,
    and the slice's shape."""
    starts = tuple(start if i == dim else 0 for i in range(len(shape)))
    limits = tuple(end if i == dim else n for i, n in enumerate(shape))
    attrs = {"starts": starts, "limits": limits, "strides": (1,) * len(shape)}
    return attrs, (*shape[:dim], end - start, *shape[dim + 1 :])


def feeding(graph: Graph, roots) -> set[int]:
    """`roots` and every node they are computed from (graph order is topological)."""
    needed = set(roots)
    for node in reversed(list(graph.nodes.values())):
        if node.id in needed:
            needed.update(node.operands)
    return needed


def place_after(graph: Graph, placed: dict[int, list[int]]) -> None:
    """Reorder `graph.nodes` so that the nodes listed under each node come right after it
    (new equal forms beside the node they equal: graph order stays topological, and layer
    cuts stay where they were)."""
    if not placed:
        return
    added = {i for ids in placed.values() for i in ids}
    nodes = {}
    for i in (i for i in graph.nodes if i not in added):
        nodes[i] = graph.nodes[i]
        for j in placed.get(i, ()):
            nodes[j] = graph.nodes[j]
    graph.nodes = nodes


def replace_nodes(graph: Graph, rewrite: Callable[[Node, int], list[Node]]) -> None:
    """Replace each node that `rewrite(node, next_id)` gives new nodes for (in graph order,
    operands first) by the last of them, keeping the graph's order topological. While it
    runs, `graph.nodes` also finds the nodes made so far (a node's operands may be one)."""
    nodes: dict[int, Node] = {}
    alias: dict[int, int] = {}
    original = graph.nodes
    next_id = max(original, default=-1) + 1
    graph.nodes = ChainMap(nodes, original)  # type: ignore[assignment]
    try:
        for node in list(original.values()):
            node.operands = tuple(alias.get(o, o) for o in node.operands)
            new = rewrite(node, next_id)
            if not new:
                nodes[node.id] = node
                continue
            next_id += len(new)
            nodes.update({n.id: n for n in new})
            alias[node.id] = new[-1].id
    finally:
        graph.nodes = original
    graph.nodes = nodes
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    graph.equalities = [(alias.get(a, a), alias.get(b, b)) for a, b in graph.equalities]
    graph.output_shardings = {alias.get(k, k): v for k, v in graph.output_shardings.items()}


class PlacedForms:
    """Equal forms made beside the nodes they equal: each new node takes the location,
    dtype and framework op of the node it is made like, a name derived from it, and its
    place right after the current `anchor` (`place_after`, once all are made)."""

    def __init__(self, graph: Graph, tag: str) -> None:
        self.graph = graph
        self.tag = tag
        self.next_id = max(graph.nodes, default=-1) + 1
        self.placed: dict[int, list[int]] = {}
        self.anchor = -1

    def emit(self, like: Node, op: str, operands, shape, attrs: dict) -> int:
        node = like.derived(
            self.next_id, op, operands, shape, attrs, f"{like.name}.{self.tag}_{op}"
        )
        self.graph.nodes[node.id] = node
        self.placed.setdefault(self.anchor, []).append(node.id)
        self.next_id += 1
        return node.id

    def place(self) -> None:
        place_after(self.graph, self.placed)


class NewNodes:
    """Nodes made to stand where `like` stands: its source location, names derived from its
    name, ids counted up from `next_id` (the caller puts them into the graph, in order)."""

    def __init__(self, like: Node, next_id: int) -> None:
        self.like = like
        self.next_id = next_id
        self.nodes: list[Node] = []

    def add(
        self, op: str, operands: tuple[int, ...], shape, dtype: str, attrs: dict[str, Any]
    ) -> int:
        node = Node(
            self.next_id + len(self.nodes),
            op,
            operands,
            tuple(shape),
            dtype,
            attrs,
            self.like.loc,
            f"{self.like.name}.{op}",
            op,
        )
        self.nodes.append(node)
        return node.id


LITERAL_OPS = {"constant", "iota"}


def literal_nodes(graph: Graph) -> set[int]:
    """Nodes computed from literals only (no parameter among their inputs)."""
    return graph.memo("literal_nodes", computed_from_literals)


def computed_from_literals(graph: Graph) -> set[int]:
    """`literal_nodes` computed afresh, for a graph still being rewritten (no memo)."""
    literal: set[int] = set()
    for node in graph.nodes.values():
        if node.op in LITERAL_OPS or (
            node.op != "parameter" and node.operands and all(o in literal for o in node.operands)
        ):
            literal.add(node.id)
    return literal


def is_zero_fill(node_id: int, nodes: dict[int, Node]) -> bool:
    """A zero scalar, or a fill of one (`0`, `0.0`, `-0.0`, however the frontend spelled it)."""
    text = fill_value(nodes[node_id], nodes)
    return literal_number(text) == 0.0


def fill_value(node: Node, nodes: dict[int, Node]) -> str | None:
    """The literal text of a scalar constant, or of views and broadcasts of one (a fill)."""
    while node.operands and (node.op in ROW_MAJOR_VIEWS or node.op == "broadcast"):
        node = nodes[node.operands[0]]  # a view or a broadcast of a fill is that fill
    if node.op != "constant" or node.shape != ():
        return None
    return str(node.attrs.get("value", ""))
