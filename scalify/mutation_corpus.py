"""The correct (baseline, distributed) pairs that mutation testing starts from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .cases import case_relations, read_case
from .frontends import load_graph, parse_graph_text
from .ir import Graph
from .mesh import Mesh, parse_mesh
from .relations import RelationsFile
from .verify import choose_mesh


def case_pairs(rules_dir: Path) -> Iterator[tuple[str, Graph, Graph, Mesh, RelationsFile | None]]:
    """Every rule case that must be proved equivalent."""
    for path in sorted(rules_dir.glob("tests/*/*.case")):
        case = read_case(path)
        if case.header["expect"] == "equivalent":
            yield (
                str(path),
                parse_graph_text(case.baseline, case.path),
                parse_graph_text(case.distributed, case.path),
                parse_mesh(case.header.get("mesh", "tp=4")),
                case_relations(case),
            )


def hlo_pairs(folder: Path) -> Iterator[tuple[str, Graph, Graph, Mesh, RelationsFile | None]]:
    """baseline.hlo with tp.hlo in an exported example folder."""
    base = load_graph(str(folder / "baseline.hlo"))
    dist = load_graph(str(folder / "tp.hlo"))
    yield str(folder / "tp.hlo"), base, dist, choose_mesh(None, dist, None), None
