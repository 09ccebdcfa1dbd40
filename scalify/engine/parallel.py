"""Proving distinct segments in several processes at once (`scalify verify --jobs N`).

Segments are proved in order because each one's entry relation is the layout proved at the
previous cut. After the first few, that layout is usually the same at every cut (the
residual stream stays replicated), so the remaining segment pairs can be keyed in advance
with it, and the distinct ones proved in parallel. The ordered walk in `prove_partitioned`
then uses a prefetched proof only when its key, computed with the entry relation actually
proved, is exactly the one it was proved under; otherwise it proves the pair itself. A
guess that turns out wrong costs time, never soundness.

The caller hands in its own `prove` (a module-level function, so worker processes can load
it): this module needs nothing from `verify.py`, which imports it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from scalify.engine.partition import Segment, segment_relations, structural_key, subgraph
from scalify.ir import Graph
from scalify.mesh import Mesh
from scalify.relations import Relation

Proof = TypeVar("Proof")


class Limits(Protocol):
    """What prefetching reads of the verifier's limits (a dataclass: workers get a copy with
    no progress line and one job each)."""

    jobs: int
    progress: bool


# Segments proved in order before the rest are keyed and prefetched.
PREFETCH_AFTER = 2


def prefetch_segments(
    base: Graph,
    dist: Graph,
    base_segs: list[Segment],
    dist_segs: list[Segment],
    inputs: list[Relation],
    entry: list,
    rules_program: str,
    mesh: Mesh,
    limits: Limits,
    prove: Callable[[Graph, Graph, str, Mesh, list[Relation], Limits], Proof],
) -> dict[str, tuple[Proof, tuple[int, int]]]:
    """Proofs of the distinct remaining segment pairs (paired one to one), keyed as the
    ordered walk will key them if the entry relation stays `entry`, each with the exits
    (baseline, distributed) of the pair it was proved for."""
    jobs: dict[str, tuple[Any, ...]] = {}
    for k, (base_seg, dist_seg) in enumerate(zip(base_segs, dist_segs, strict=False)):
        label = f"prefetch {k}"
        base_sub, dist_sub = subgraph(base, base_seg, label), subgraph(dist, dist_seg, label)
        relations = segment_relations(base_sub, dist_sub, inputs, entry, base_seg.entry)
        key = structural_key(base_sub, dist_sub, relations)
        jobs.setdefault(key, (base_sub, dist_sub, relations))
    if len(jobs) < 2:
        return {}
    quiet = replace(limits, progress=False, jobs=1)
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(limits.jobs, len(jobs))) as pool:
        proofs = pool.starmap(
            prove,
            [(b, d, rules_program, mesh, r, quiet) for b, d, r in jobs.values()],
        )
    # each proof with the exits of the pair it was proved for: its facts name that pair's
    # nodes, so it stands only for that pair (an identical one later is a memo hit instead)
    exits = [(base_sub.outputs[0], dist_sub.outputs[0]) for base_sub, dist_sub, _ in jobs.values()]
    return dict(zip(jobs, zip(proofs, exits, strict=True), strict=True))
