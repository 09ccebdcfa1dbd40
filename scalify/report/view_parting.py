"""Where a chain of views parts from the baseline's, and the two index expressions.

A reshape on the wrong factor or a transpose of the wrong pair shows at the frontier as
the first view of the chain that no baseline node matches, which is often the chain's first
step (a transpose that is right), not the one that is wrong. Reading both chains as runs of
atoms (view_chains.py) tells them apart: the chain from the same source in the baseline
cuts each source dim at some boundaries and orders the pieces in some runs; the first
distributed step that cuts a dim where the baseline never does, or joins pieces in an order
no baseline dim holds, is where they part. The finding moves there, and its reason prints
both chains' results as expressions of the source's dims (`[i, k/8, j, k%8]`).

Only chains whose source is related to the baseline by plain shards, none split down to one
entry a device, are read (sizes are compared in the baseline's units); others keep the
frontier's finding.
"""

from __future__ import annotations

import math
from dataclasses import replace

from scalify.forms.view_chains import VIEWS, ViewAtoms
from scalify.ir import Graph, Node
from scalify.layout import Layout
from scalify.mesh import Mesh
from scalify.report.frontier import Finding, Proven

LETTERS = "ijklmnopqrstuvwxyz"


def with_view_partings(
    dist: Graph, base: Graph, proven: Proven, mesh: Mesh, findings: list[Finding]
) -> list[Finding]:
    """The findings, each at a view moved to the step where its chain parts from the
    baseline's chain, with both chains' results in its reason."""
    moved = [_parting(f, dist, base, proven, mesh) or f for f in findings]
    seen: set[int] = set()
    unique = []
    for f in moved:
        if f.node.id not in seen:
            seen.add(f.node.id)
            unique.append(f)
    unique.sort(key=lambda f: not f.definite)
    return unique


def _parting(f: Finding, dist: Graph, base: Graph, proven: Proven, mesh: Mesh):
    if f.node.op not in VIEWS:
        return None
    source, steps = _program_chain(f.node, dist)
    related = [(lay, b) for lay, b in proven.get(source.id, ()) if _scales(lay, mesh)]
    if not related:
        return None
    layout, base_id = related[0]
    scale = _scales(layout, mesh)
    if any(source.shape[d] == 1 for d in scale):
        # a dim split down to one entry a device: its entry is a unit atom like the
        # source's true unit dims, and which unit a view moves where is not known
        return None
    dist_atoms = ViewAtoms.of(source.shape)
    if not all(dist_atoms.step(s) for s in steps):
        return None
    for end, base_steps in _base_chains(base.node(base_id), base):
        base_atoms = ViewAtoms.of(base.node(base_id).shape)
        if not all(base_atoms.step(s) for s in base_steps):
            continue
        if _local_shape(base_atoms, scale) != steps[-1].shape:
            continue  # the baseline's views end elsewhere
        step = _parting_step(source.shape, steps, scale, base_atoms)
        if step is None:
            return None  # the same expression: not a view that parts
        names = _dim_names(base.node(base_id))
        mine = _expression(dist_atoms, scale, names)
        theirs = _expression(base_atoms, {}, names)
        if mine == theirs:
            return None  # no parting a reader could see: the frontier's own reason stands
        reason = (
            f"the views from `{source.name}` part from the baseline's here: they give "
            f"{mine}, where the baseline's views of `{base.node(base_id).name}` give {theirs} "
            f"(`{end.name}`), {_legend(base.node(base_id), names)} (a reshape on the "
            "wrong factor, or dims permuted in the wrong order?)"
        )
        return replace(f, node=step, reason=reason, definite=True)
    return None


def _scales(layout: Layout, mesh: Mesh) -> dict[int, int] | None:
    """dim -> how many devices split it, for a layout of plain shards; else None."""
    if any(p.kind != "shard" or p.parts for p in layout):
        return None
    scale: dict[int, int] = {}
    for p in layout:
        scale[p.dim] = scale.get(p.dim, 1) * mesh.axis_size(p.axis)
    return scale or None


def _program_chain(node: Node, graph: Graph) -> tuple[Node, list[Node]]:
    """The views back from `node` to the first op that is no view, and on through the
    views that alone read each step after it."""
    users = graph.users()
    steps = [node]
    while graph.node(steps[0].operands[0]).op in VIEWS:
        steps.insert(0, graph.node(steps[0].operands[0]))
    while len(readers := users.get(steps[-1].id, ())) == 1 and graph.node(readers[0]).op in VIEWS:
        steps.append(graph.node(readers[0]))
    return graph.node(steps[0].operands[0]), steps


def _base_chains(source: Node, graph: Graph) -> list[tuple[Node, list[Node]]]:
    """Each view reachable from `source` through views, with the steps to it."""
    users = graph.users()
    found, todo = [], [(source.id, [])]
    while todo:
        at, steps = todo.pop(0)
        for user in users.get(at, ()):
            node = graph.node(user)
            if node.op in VIEWS and len(steps) < 8:
                found.append((node, [*steps, node]))
                todo.append((user, [*steps, node]))
    return found[::-1]  # the longest chains first: where the baseline's views end


def _global_atoms(atoms: ViewAtoms, scale: dict[int, int]) -> list[list[tuple[int, int, int]]]:
    """Each result dim as (source dim, stride, size) atoms in the baseline's units: the
    outermost atom of a split source dim holds 1/n of it."""
    sizes = list(atoms.sizes)
    for dim, run in enumerate(atoms.source):
        outer = next((a for a in run if sizes[a] > 1), None)
        if outer is not None and dim in scale:
            sizes[outer] *= scale[dim]
    where: dict[int, tuple[int, int, int]] = {}
    for dim, run in enumerate(atoms.source):
        stride = 1
        for a in reversed(run):
            where[a] = (dim, stride, sizes[a])
            stride *= sizes[a]
    return [[where[a] for a in run if where[a][2] > 1] for run in atoms.dims]


def _local_shape(atoms: ViewAtoms, scale: dict[int, int]) -> tuple[int, ...]:
    """The shape of a device's block of the (baseline) chain's result: each split source
    dim's outermost atom is split where it lands."""
    shape = []
    for run in atoms.dims:
        size = math.prod(atoms.sizes[a] for a in run)
        for dim, source in enumerate(atoms.source):
            outer = next((a for a in source if atoms.sizes[a] > 1), None)
            if dim in scale and outer in run:
                size //= scale[dim]
        shape.append(size)
    return tuple(shape)


def _parting_step(shape, steps: list[Node], scale, base: ViewAtoms) -> Node | None:
    """The first step that cuts a dim where the baseline's chain never does, or joins pieces
    in an order no dim of the baseline's result holds; the last transpose when only the
    final order differs; None when both chains give one expression."""
    target = _global_atoms(base, {})
    cuts = {(d, s) for run in target for d, s, _ in run}
    atoms = ViewAtoms.of(shape)
    last_transpose = None
    for step in steps:
        atoms.step(step)
        now = _global_atoms(atoms, scale)
        if step.op == "transpose":
            last_transpose = step
        elif step.op == "split" and not {(d, s) for run in now for d, s, _ in run} <= cuts:
            return step
        elif step.op == "merge" and not _holds(target, now[int(step.attrs["dim"])]):
            return step
    if _global_atoms(atoms, scale) == target:
        return None
    return last_transpose or steps[-1]


def _holds(target, run) -> bool:
    """Whether some dim of the baseline's result holds `run`'s pieces, in that order."""
    fine = [(d, s) for d, s, _ in run]
    for other in target:
        pieces = [(d, s) for d, s, _ in other]
        for start in range(len(pieces) - len(fine) + 1):
            if pieces[start : start + len(fine)] == fine:
                return True
    return False


def _dim_names(source: Node) -> list[str]:
    return [LETTERS[d % len(LETTERS)] for d in range(len(source.shape))]


def _legend(source: Node, names: list[str]) -> str:
    return f"{', '.join(names)} indexing its dims {list(source.shape)}"


def _expression(atoms: ViewAtoms, scale: dict[int, int], names: list[str]) -> str:
    """The result's dims as expressions of the source's (baseline) indices."""
    dims = []
    for run in _global_atoms(atoms, scale):
        whole_dims = {d for d, _, _ in run}
        if len(whole_dims) == 1 and _is_whole(run, _source_size(atoms, scale, run[0][0])):
            dims.append(names[run[0][0]])
            continue
        parts = []
        for dim, stride, size in run:
            whole = _source_size(atoms, scale, dim)
            name = names[dim]
            if stride == 1 and size == whole:
                parts.append(name)
            elif stride == 1:
                parts.append(f"{name}%{size}")
            elif stride * size == whole:
                parts.append(f"{name}/{stride}")
            else:
                parts.append(f"{name}/{stride}%{size}")
        dims.append(" ⊗ ".join(parts) if len(parts) > 1 else (parts[0] if parts else "1"))
    return "[" + ", ".join(dims) + "]"


def _is_whole(run, size: int) -> bool:
    """Whether the run is every piece of one source dim, in order."""
    stride = 1
    for _, s, z in reversed(run):
        if s != stride:
            return False
        stride *= z
    return stride == size


def _source_size(atoms: ViewAtoms, scale: dict[int, int], dim: int) -> int:
    return math.prod(atoms.sizes[a] for a in atoms.source[dim]) * scale.get(dim, 1)
