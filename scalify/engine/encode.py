"""Turn IR graphs and input relations into egglog commands.

Each IR node becomes one `let`-bound term, so DAG sharing survives and the text fed to egglog
grows linearly with the graph. Names: `$b12` is baseline node 12, `$d7` distributed node 7.
"""

from __future__ import annotations

from scalify.ir import Graph, Node
from scalify.layout import Layout
from scalify.mesh import Mesh

from .signature import ELEMENTWISE, NOT_PURE, Signature, node_signature


def egg_string(text: str) -> str:
    """A string literal egglog accepts; keys are only compared, so mapping quotes is safe."""
    return '"' + text.replace("\\", "/").replace('"', "'") + '"'


def _is_scalar_fill(node: Node, graph: Graph) -> bool:
    if node.op != "broadcast" or len(node.operands) != 1:
        return False
    operand = graph.node(node.operands[0])
    return operand.op == "constant" and operand.shape == ()


class GraphEncoder:
    """Encodes one graph (one side) and collects the signatures it used."""

    def __init__(self, graph: Graph, side: str, mesh: Mesh, signatures: dict[str, Signature]):
        self.graph = graph
        self.side = side
        self.mesh = mesh
        self.signatures = signatures
        self.users = graph.users()
        self.outputs = set(graph.outputs)

    def name(self, node_id: int) -> str:
        return f"${self.side}{node_id}"

    def _all_users_elementwise(self, node: Node) -> bool:
        users = self.users[node.id]
        return bool(users) and node.id not in self.outputs and all(
            self.graph.node(u).op in ELEMENTWISE for u in users
        )

    def _splat(self, node: Node) -> str:
        literal = self.graph.node(node.operands[0]).attrs.get("value", "?")
        return f"(Splat {egg_string(str(literal))} {egg_string(node.dtype)})"

    def _operand(self, user: Node, operand_id: int) -> str:
        operand = self.graph.node(operand_id)
        if user.op in ELEMENTWISE and _is_scalar_fill(operand, self.graph):
            has_shaped = any(not _is_scalar_fill(self.graph.node(o), self.graph)
                             for o in user.operands)
            if has_shaped:
                return self._splat(operand)
        return self.name(operand_id)

    def term(self, node: Node) -> str:
        if node.op == "parameter":
            label = f"{self.side}:{self.graph.input_name(node.id)}"
            return f"(Input {egg_string(label)} {egg_string(node.dtype)})"
        if node.op == "constant":
            shape = ",".join(map(str, node.shape))
            return (f"(Const {egg_string(str(node.attrs.get('value')))} "
                    f"{egg_string(node.dtype)} {egg_string(shape)})")
        if _is_scalar_fill(node, self.graph) and self._all_users_elementwise(node):
            return self._splat(node)
        arity = len(node.operands)
        if node.op == "rank_index" or not 1 <= arity <= 3:
            return f"(Leaf {egg_string(node.op + ':' + self.side)} {node.id})"
        shape_free = node.op == "broadcast" and self._all_users_elementwise(node)
        signature = node_signature(node, self.graph, self.mesh, shape_free)
        self.signatures.setdefault(signature.key, signature)
        operands = " ".join(self._operand(node, o) for o in node.operands)
        return f"(Op{arity} {egg_string(node.op)} {egg_string(signature.key)} {operands})"

    def commands(self) -> list[str]:
        tag = "BaseNode" if self.side == "b" else "DistNode"
        result = []
        for node in self.graph.nodes.values():
            result.append(f"(let {self.name(node.id)} {self.term(node)})")
            result.append(f"({tag} {self.name(node.id)} {node.id})")
        return result


def layout_term(base_term: str, layout: Layout) -> str:
    """The e-graph term stating `layout` over a baseline term."""
    term = base_term
    for p in layout:
        if p.kind == "shard":
            term = f"(Shard {term} {p.dim} {egg_string(p.axis)})"
        else:
            term = f"(Partial {term} {egg_string(p.op)} {egg_string(p.axis)})"
    return term


def signature_facts(signatures: dict[str, Signature]) -> list[str]:
    facts = []
    for key, sig in signatures.items():
        k = egg_string(key)
        facts += [f"(set (OutDim {k} {o} {d}) {e})" for (o, d), e in sig.out_dims.items()]
        facts += [f"(set (InDim {k} {o} {e}) {d})" for (o, e), d in sig.in_dims.items()]
        facts += [f"(set (AttrS {k} \"{n}\") {egg_string(v)})" for n, v in sig.attrs_s.items()]
        facts += [f"(set (AttrI {k} \"{n}\") {v})" for n, v in sig.attrs_i.items()]
    return facts


def vocabulary_facts(mesh: Mesh, graphs: list[Graph]) -> list[str]:
    ops = {n.op for g in graphs for n in g.nodes.values()}
    facts = [f"(Axis {egg_string(a)})" for a in mesh.names]
    facts += [f"(Pure {egg_string(op)})" for op in sorted(ops - NOT_PURE)]
    return facts
