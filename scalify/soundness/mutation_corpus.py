"""The correct (baseline, distributed) pairs that mutation testing starts from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from scalify.frontends import load_graph, parse_graph_text
from scalify.ir import Graph
from scalify.mesh import Mesh, parse_mesh
from scalify.relations import RelationsFile
from scalify.soundness.cases import case_relations, read_case
from scalify.verify import choose_mesh


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


def hlo_pairs(
    folder: Path, baseline: str = "baseline.hlo", distributed: str = "tp.hlo"
) -> Iterator[tuple[str, Graph, Graph, Mesh, RelationsFile | None]]:
    """A baseline and a distributed HLO file of an exported example folder."""
    base = load_graph(str(folder / baseline))
    dist = load_graph(str(folder / distributed))
    yield str(folder / distributed), base, dist, choose_mesh(None, dist, None), None
