"""Proving distinct segments in several processes at once (`scalify verify --jobs N`).

Segments are proved in order because each one's entry relation is the layout proved at the
previous cut. After the first few, that layout is usually the same at every cut (the
residual stream stays replicated), so the remaining segment pairs can be keyed in advance
with it, and the distinct ones proved in parallel. The ordered walk in `prove_partitioned`
then uses a prefetched proof only when its key, computed with the entry relation actually
proved, is exactly the one it was proved under; otherwise it proves the pair itself. A
guess that turns out wrong costs time, never soundness.
"""

from __future__ import annotations

import multiprocessing
from typing import TYPE_CHECKING, Any

from .mesh import Mesh
from .partition import Segment, segment_relations, structural_key, subgraph
from .relations import Relation

if TYPE_CHECKING:
    from .ir import Graph
    from .verify import Limits, Proof

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
) -> dict[str, Proof]:
    """Proofs of the distinct remaining segment pairs (paired one to one), keyed as the
    ordered walk will key them if the entry relation stays `entry`."""
    jobs: dict[str, tuple[Any, ...]] = {}
    for k, (base_seg, dist_seg) in enumerate(zip(base_segs, dist_segs, strict=False)):
        label = f"prefetch {k}"
        base_sub, dist_sub = subgraph(base, base_seg, label), subgraph(dist, dist_seg, label)
        relations = segment_relations(base_sub, dist_sub, inputs, entry, base_seg.entry)
        key = structural_key(base_sub, dist_sub, relations)
        jobs.setdefault(key, (base_sub, dist_sub, relations))
    if len(jobs) < 2:
        return {}
    quiet = _quiet(limits)
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(limits.jobs, len(jobs))) as pool:
        proofs = pool.starmap(
            _prove,
            [(b, d, rules_program, mesh, r, quiet) for b, d, r in jobs.values()],
        )
    return dict(zip(jobs, proofs, strict=True))


def _quiet(limits: Limits) -> Limits:
    from dataclasses import replace

    return replace(limits, progress=False, jobs=1)


def _prove(base_sub, dist_sub, rules_program, mesh, relations, limits):
    from .verify import prove

    return prove(base_sub, dist_sub, rules_program, mesh, relations, limits)
