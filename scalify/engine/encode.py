"""Turn IR graphs and input relations into egglog commands.

Each IR node becomes one term unioned with its name, so DAG sharing survives and the text fed
to egglog grows linearly with the graph. Names: `(Ref "b" 12)` is baseline node 12,
`(Ref "d" 7)` distributed node 7. A name is a term of the prelude's `Ref` constructor, not an
egglog `let`: a `let` declares a table, and tables declared between egglog 13.2's `(push)` and
`(pop)` outlive the pop in shared registries, where they broke congruence in later proofs of
the same session (a proof's result depended on the proofs run before it).
"""

from __future__ import annotations

import itertools
import math

from scalify.engine.signature import node_signature
from scalify.ir import Graph, Node, is_scalar_fill
from scalify.layout import Layout, value_step
from scalify.mesh import Mesh
from scalify.ops import ELEMENTWISE, NOT_PURE, SIZED_OPERAND
from scalify.ops.spec import Signature
from scalify.values import literal_number

# where unit_broadcasts.py leaves, in graph.derived, each twin it adds and the broadcast form
# that twin reads
UNIT_TWINS = "unit_twins"
# what a padding holds when a mask gave it the lowest value (`padded(d, m, n, lowest)`)
LOWEST = "lowest"
# copies of broadcasts that keep their sizes whatever their users (a twin's anchor)
SIZED_FORMS = "sized_forms"


def egg_string(text: str) -> str:
    """A string literal egglog accepts; keys are only compared, so mapping quotes is safe."""
    return '"' + text.replace("\\", "/").replace('"', "'") + '"'


def shape_free_nodes(graph: Graph) -> set[int]:
    """Broadcasts whose term may omit the sizes they broadcast to.

    Terms carry no sizes, so equal terms must mean equal shapes. A broadcast may drop its
    output sizes only when every user is elementwise and has another operand whose term pins
    the shape ("anchored"); otherwise a 2-row fill would equal an 8-row fill. Computed as a
    greatest fixpoint: candidates that lose their anchor are dropped until none does.

    The equal forms of unit_broadcasts.py (an op's twin over `broadcast(squeeze(v))`) take
    no part in that: they must not pin another broadcast's sizes, and their own broadcast is
    free when the twin's other operand is anchored.
    """
    twins: dict[int, int] = graph.derived.get(UNIT_TWINS, {})
    free = _free_broadcasts(graph, frozenset(twins))
    if twins:
        anchored = _anchored(graph, free)
        for twin, form in twins.items():
            if any(o != form and o in anchored for o in graph.node(twin).operands):
                free.add(form)
    return free


def _free_broadcasts(graph: Graph, twins: frozenset[int]) -> set[int]:
    users = {n: [u for u in us if u not in twins] for n, us in graph.users().items()}
    # the squeezes and broadcasts that only the twins read are not users either
    support = _read_by_twins_only(graph, users)
    users = {n: [u for u in us if u not in support] for n, us in users.items()}
    # The alternative form of a node (graph.equalities) stands where the node stands: it
    # shares its users.
    same = {n: {n} for n in graph.nodes}
    for a, b in graph.equalities:
        group = same[a] | same[b]
        for member in group:
            same[member] = group
            users[member] = sorted({u for m in group for u in users.get(m, [])})
    outputs = set(graph.outputs)
    sized = graph.derived.get(SIZED_FORMS, frozenset())
    free = {
        n.id
        for n in graph.nodes.values()
        if n.op == "broadcast"
        and n.id not in sized
        and not (same[n.id] & outputs)
        and users[n.id]
        and all(_sized_by_user(graph.node(u), n) for u in users[n.id])
    }
    while True:
        anchored = _anchored(graph, free)
        pinned = _pinned_floating(graph, users, anchored, outputs)
        lost = {
            n
            for n in free
            if any(
                u not in pinned
                and not any(o not in same[n] and o in anchored for o in graph.node(u).operands)
                for u in users[n]
            )
        }
        if not lost:
            return free
        # Two broadcasts that meet only each other cannot both drop their sizes, but one
        # can: keep fills of literals free (their sizes are what differs between a sharded
        # and a baseline graph) and give the broadcasts of computed values their sizes first.
        # Among those, the broadcast with the fewest new dims gets its sizes first: its
        # sizes are the fewest a layout can change (a norm's `rsqrt` broadcast along the
        # hidden dim keeps it, the scale's broadcast along batch and sequence loses it).
        computed = {n for n in lost if not _of_literal(graph, n)}
        fewest = min(_new_dims(graph.node(n)) for n in computed or lost)
        tied = {n for n in computed or lost if _new_dims(graph.node(n)) == fewest}
        if not computed:
            # Literals only: of those that tie, the one whose kept dims come first. A causal
            # mask compares a count broadcast along the keys (dims (0,)) with one along the
            # queries (dims (1,)): both literals in the baseline, while a sequence shard's
            # query count is computed from the device's coordinate and takes the sizes; so
            # the baseline's query count takes them too, and the key counts stay free in both.
            first = min(_kept_dims(graph.node(n)) for n in tied)
            tied = {n for n in tied if _kept_dims(graph.node(n)) == first}
        free -= tied


def _read_by_twins_only(graph: Graph, users: dict[int, list[int]]) -> set[int]:
    """The nodes unit_broadcasts.py adds for its twins (`broadcast(squeeze(v))`): read by
    twins alone (`users` has the twins left out), directly or through one another."""
    readers = graph.users()
    outputs = set(graph.outputs)
    partners: dict[int, set[int]] = {}
    for a, b in graph.equalities:
        partners.setdefault(a, set()).add(b)
        partners.setdefault(b, set()).add(a)
    support: set[int] = set()
    grew = True
    while grew:
        grew = False
        for n in graph.nodes:
            if n in support or n in outputs:
                continue
            if readers.get(n):
                read_by_support = all(u in support for u in users.get(n, []))
            else:  # an equal form nothing reads: support when what it equals is
                read_by_support = bool(partners.get(n, set()) & support)
            if read_by_support:
                support.add(n)
                grew = True
    return support


def _pinned_floating(
    graph: Graph, users: dict[int, list[int]], anchored: set[int], outputs: set[int]
) -> set[int]:
    """Elementwise ops over size-free values only (a LayerNorm's `rsqrt` times its scale,
    both broadcast) whose own shape their users fix: each user elementwise with an anchored
    operand, or itself such an op. Their terms carry no sizes either, so their broadcasts
    may stay free; a greatest fixpoint, as for the broadcasts."""
    floating = {
        n.id
        for n in graph.nodes.values()
        if n.op in ELEMENTWISE and n.id not in anchored and n.id not in outputs and users.get(n.id)
    }
    while True:
        lost = {
            n
            for n in floating
            if any(
                graph.node(u).op not in ELEMENTWISE
                or not (
                    u in floating or any(o != n and o in anchored for o in graph.node(u).operands)
                )
                for u in users[n]
            )
        }
        if not lost:
            return floating
        floating -= lost


def _kept_dims(node: Node) -> tuple[int, ...]:
    return tuple(node.attrs.get("dims", ()))


def _new_dims(node: Node) -> int:
    return len(node.shape) - len(node.attrs.get("dims", ()))


def _sized_by_user(user: Node, operand: Node) -> bool:
    """The user fixes the operand's shape from its other operands and its key: an
    elementwise op, a scatter into it (whose key holds the sizes of the dims that are not
    batching dims, and whose indices and updates hold the batch sizes), or a concatenate
    along a dim the broadcast keeps (the other operands fix every other dim; the kept dim's
    size is its operand's), or a dot pairing each dim the broadcast adds with one of the
    other operand's."""
    if user.op == "scatter":
        return user.operands[0] == operand.id and operand.id not in user.operands[1:]
    if user.op == "concatenate":
        return user.attrs["dim"] in operand.attrs.get("dims", ())
    if user.op == "dot" and list(user.operands).count(operand.id) == 1:
        # the other operand holds the sizes of the batch and contracted dims: a broadcast
        # whose new dims are all such (a rope key expanded to the heads of q) is pinned
        side = "lhs" if user.operands[0] == operand.id else "rhs"
        paired = {*user.attrs[f"{side}_batch"], *user.attrs[f"{side}_contracting"]}
        kept = set(operand.attrs.get("dims", ()))
        return all(d in paired for d in range(len(operand.shape)) if d not in kept)
    return user.op in ELEMENTWISE


def _of_literal(graph: Graph, node_id: int) -> bool:
    """A value computed from literals only (an iota, a constant, reshapes of them)."""
    from scalify.ir import literal_nodes

    return node_id in literal_nodes(graph)


def _anchored(graph: Graph, free: set[int]) -> set[int]:
    anchored: set[int] = set()
    for node in graph.nodes.values():
        if node.id in free:
            continue
        if node.op in ELEMENTWISE:
            ok = any(o in anchored for o in node.operands)
        elif node.op == "scatter":
            ok = all(o in anchored for o in node.operands[1:])
        elif node.op in ("concatenate", "dot"):  # a free operand sized by the anchored
            ok = any(o in anchored for o in node.operands) and all(
                o in anchored or o in free for o in node.operands
            )
        else:
            ok = all(o in anchored for o in node.operands)
        if ok:
            anchored.add(node.id)
    return anchored


def literal_key(value, dtype: str) -> str:
    """One spelling per scalar literal (`-1`, `-1.0` and `-1.00` are one fill): frontends
    and folded arithmetic print numbers differently."""
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text  # true, false, an elided or tuple literal: as written
    if dtype.startswith(("f", "bf")):
        return repr(number)
    return str(int(number)) if number.is_integer() else text


class GraphEncoder:
    """Encodes one graph (one side) and collects the signatures it used."""

    def __init__(self, graph: Graph, side: str, mesh: Mesh, signatures: dict[str, Signature]):
        self.graph = graph
        self.side = side
        self.mesh = mesh
        self.signatures = signatures
        self.shape_free = shape_free_nodes(graph)

    def name(self, node_id: int) -> str:
        return node_ref(self.side, node_id)

    def term(self, node: Node) -> str:
        if node.op == "parameter":
            # The node id makes every input its own term: names need not be unique (compiled
            # HLO calls every parameter `param`), and two inputs sharing a term would be one
            # e-class, so a relation of one would hold for all of them.
            label = f"{self.side}:{node.id}:{self.graph.input_name(node.id)}"
            return f"(Input {egg_string(label)} {egg_string(node.dtype)})"
        if node.op == "constant" and node.shape == ():
            # A rank-0 literal is the scalar fill itself; its consumers' keys fix its rank.
            literal = literal_key(node.attrs.get("value"), node.dtype)
            return f"(Splat {egg_string(literal)} {egg_string(node.dtype)})"
        if node.op in ("constant", "iota"):
            shape = ",".join(map(str, node.shape))
            value = (
                node.attrs.get("value")
                if node.op == "constant"
                else (f"iota(dim={node.attrs.get('dim', 0)})")
            )
            return f"(Const {egg_string(str(value))} {egg_string(node.dtype)} {egg_string(shape)})"
        shape_free = node.id in self.shape_free
        if shape_free and is_scalar_fill(node, self.graph.node):
            literal = literal_key(
                self.graph.node(node.operands[0]).attrs.get("value", "?"), node.dtype
            )
            return f"(Splat {egg_string(literal)} {egg_string(node.dtype)})"
        arity = len(node.operands)
        if node.op == "rank_index":  # the same function of the device everywhere: not Base
            signature = node_signature(node, self.graph, self.mesh)
            self.signatures.setdefault(signature.key, signature)
            return f'(Op0 "rank_index" {egg_string(signature.key)})'
        if arity == 0:
            return f"(Leaf {egg_string(node.op + ':' + self.side)} {node.id})"
        signature = node_signature(node, self.graph, self.mesh, shape_free)
        if arity > 3:  # the widest term has 3 operands: the rest nest in an argument list
            operands = " ".join(self.name(o) for o in node.operands[:2])
            operands += " " + self._argument_list(node.operands[2:])
            arity = 3
        else:
            operands = " ".join(self.name(o) for o in node.operands)
        axes = signature.attrs_s.get("axes", "")
        if node.op == "all_reduce" and "," in axes and not axes.startswith("groups"):
            return self._one_axis_at_a_time(signature, axes.split(","), operands)
        self.signatures.setdefault(signature.key, signature)
        return f"(Op{arity} {egg_string(node.op)} {egg_string(signature.key)} {operands})"

    def _argument_list(self, operands: tuple[int, ...]) -> str:
        """Operands past the third (a dynamic-update-slice's start indices), as nested
        `_args` terms: two ops with equal operands still meet."""
        if len(operands) == 1:
            return self.name(operands[0])
        if len(operands) <= 3:
            names = " ".join(self.name(o) for o in operands)
            return f'(Op{len(operands)} "_args" "" {names})'
        head = " ".join(self.name(o) for o in operands[:2])
        return f'(Op3 "_args" "" {head} {self._argument_list(operands[2:])})'

    def _one_axis_at_a_time(self, signature: Signature, axes: list[str], operand: str) -> str:
        """An all-reduce over several mesh axes is the all-reduces over each of them in turn
        (the reduction is associative and commutative), so single-axis rules apply."""
        term = operand
        for axis in axes:
            key = signature.key.replace(f"axes={','.join(axes)}", f"axes={axis}")
            one = Signature(
                key,
                dict(signature.out_dims),
                dict(signature.in_dims),
                {**signature.attrs_s, "axes": axis},
                dict(signature.attrs_i),
            )
            self.signatures.setdefault(key, one)
            term = f'(Op1 "all_reduce" {egg_string(key)} {term})'
        return term

    def commands(self) -> list[str]:
        tag = "BaseNode" if self.side == "b" else "DistNode"
        result = []
        for node in self.graph.nodes.values():
            result.append(f"(union {self.name(node.id)} {self.term(node)})")
            result.append(f"({tag} {self.name(node.id)} {node.id})")
            if node.op == "iota":  # what a mask over a padded dim compares with its bound
                dim = int(node.attrs.get("dim", 0))
                result.append(f"(IotaAlong {self.name(node.id)} {dim} {node.shape[dim]})")
            if node.op in SIZED_OPERAND:  # what `size(X, d)` in a rule reads
                table = self.graph.node(node.operands[0])
                result += [
                    f"(HasSize {self.name(table.id)} {d} {n})" for d, n in enumerate(table.shape)
                ]
        result += [f"(union {self.name(a)} {self.name(b)})" for a, b in self.graph.equalities]
        return result


def node_ref(side: str, node_id: int) -> str:
    """The e-graph's name for node `node_id` of the graph on `side` ("b" or "d")."""
    return f'(Ref "{side}" {node_id})'


def layout_term(
    base_term: str, layout: Layout, shape: tuple[int, ...], padding: str = "zero"
) -> str:
    """The e-graph term stating `layout` over a baseline term of `shape`. A relations file's
    padding holds zeros in an input (a checkpoint's padded rows) and anything in an output."""
    term, sizes = base_term, list(shape)
    for p in layout:
        if p.kind == "shard":
            term = f"(Shard {term} {p.dim} {egg_string(p.axis)})"
        elif p.kind == "laid":
            term = f"(Laid {egg_string(p.op)} {term} {p.dim} {egg_string(p.axis)})"
        elif p.kind in ("padded", "repeated"):
            content = LOWEST if p.op == LOWEST else padding
            term = (
                f"(Padded {term} {p.dim} {sizes[p.dim]} {p.size} {egg_string(content)})"
                if p.kind == "padded"
                else f"(Repeated {term} {p.dim} {p.size} {p.unit})"
            )
            sizes[p.dim] = value_step(sizes[p.dim], p)
        else:
            term = f"(Partial {term} {egg_string(p.op)} {egg_string(p.axis)})"
    return term


def signature_facts(signatures: dict[str, Signature]) -> list[str]:
    facts = []
    for key, sig in signatures.items():
        k = egg_string(key)
        facts += [f"(set (OutDim {k} {o} {d}) {e})" for (o, d), e in sig.out_dims.items()]
        facts += [f"(set (InDim {k} {o} {e}) {d})" for (o, e), d in sig.in_dims.items()]
        facts += [f'(set (AttrS {k} "{n}") {egg_string(v)})' for n, v in sig.attrs_s.items()]
        facts += [f'(set (AttrI {k} "{n}") {v})' for n, v in sig.attrs_i.items()]
    return facts


def _integer(text: str) -> int | None:
    """The integer a literal stands for (`4`, `4.0`), or None."""
    value = literal_number(text)
    return int(value) if value is not None and value.is_integer() and abs(value) < 2**62 else None


def vocabulary_facts(mesh: Mesh, graphs: list[Graph]) -> list[str]:
    ops = {n.op for g in graphs for n in g.nodes.values()}
    facts = [f"(Axis {egg_string(a)})" for a in mesh.names]
    facts += [
        f"(AxisBefore {egg_string(a)} {egg_string(b)})"
        for a, b in itertools.combinations([n for n, size in mesh.axes if size > 1], 2)
    ]
    facts += [
        f"(AxisDisjoint {egg_string(a)} {egg_string(','.join(axes))})"
        for a in mesh.names
        for r in range(1, len(mesh.names) + 1)
        for axes in itertools.combinations(mesh.names, r)
        if a not in axes
    ]
    facts += [
        f"(AxisPair {egg_string(','.join(axes))} {egg_string(','.join(axes[:-1]))} "
        f"{egg_string(axes[-1])})"
        for r in range(2, len(mesh.names) + 1)
        for axes in itertools.combinations(mesh.names, r)
    ]
    facts += [f"(set (AxisSize {egg_string(a)}) {n})" for a, n in mesh.axes]
    facts += [f"(set (AxisStride {egg_string(a)}) {mesh.stride(a)})" for a in mesh.names]
    # Sets of axes (those of one device skipped) are one axis too, as collectives over them
    # name them, the first axis the most significant; a run of consecutive axes has a
    # stride: the device's coordinate on it is (id / s) % n, s the last axis's stride and n
    # their product. (On a set with gaps, the coordinate is built axis by axis: the
    # prelude's `joint-coordinate`.)
    real = [(a, n) for a, n in mesh.axes if n > 1]
    for size in range(2, len(real) + 1):
        for chosen in itertools.combinations(range(len(real)), size):
            axes = [real[k] for k in chosen]
            name = egg_string(",".join(a for a, _ in axes))
            facts += [f"(Axis {name})", f"(set (AxisSize {name}) {math.prod(n for _, n in axes)})"]
            if chosen[-1] - chosen[0] == size - 1:
                facts.append(f"(set (AxisStride {name}) {mesh.stride(axes[-1][0])})")
    literals = {
        literal_key(n.attrs.get("value"), n.dtype)
        for g in graphs
        for n in g.nodes.values()
        if n.op == "constant" and n.shape == ()
    }
    facts += [
        f"(set (LitI {egg_string(text)}) {value})"
        for text in sorted(literals)
        if (value := _integer(text)) is not None
    ]
    facts += [f"(Pure {egg_string(op)})" for op in sorted((ops | {"_args"}) - NOT_PURE)]
    return facts
