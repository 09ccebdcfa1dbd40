"""Beside the symbolic frontier, what the numbers say at each suspect of a refuted proof.

A suspect is a distributed op no proved relation reaches. When a counterexample shows the
programs part somewhere, a suspect is one of two things: its value matches some baseline
value and only a rule saying so is missing (the programs part later), or it matches none
of the simple ways it could (the place to look). Both programs are run on the same random
inputs (the simulator the counterexample uses) and each suspect's values are compared with
the baseline's values under every one-placement layout its shape allows (the same value, a
block along one dim over one mesh axis, a partial sum over one axis). The report says which
it is, and a frontier suspect where only a rule is missing moves after the others. A
value related another way (a block of a broadcast the baseline never materialises) matches
nothing here too, so "matches nothing" is where to look, not a proof that the values part.
"""

from __future__ import annotations

import numpy as np

from scalify.ir import Graph, at_line
from scalify.layout import Layout, Placement, layout_str
from scalify.mesh import Mesh
from scalify.relations import Relation
from scalify.report.model import SHOWS_AT
from scalify.simulate import NotSimulable
from scalify.simulate.spmd import (
    compare_output,
    distribute,
    random_input,
    run_baseline,
    run_spmd,
    simulable,
)
from scalify.values import host

# How many suspects are read: each costs a pass over the baseline's values.
READ_SUSPECTS = 4


def read_numbers(
    base: Graph, dist: Graph, mesh: Mesh, inputs: list[Relation], suspects: list, seed: int = 7
) -> None:
    """Fill in `numerically` on the first suspects, and move the ones whose values part from
    every baseline value ahead of those where only a rule is missing. Does nothing when the
    programs cannot be simulated whole."""
    if not suspects or not (simulable(base, mesh, devices=1) and simulable(dist, mesh)):
        return
    by_name = {n.name: n.id for n in dist.nodes.values()}
    try:
        base_values, dist_values = _run_both(base, dist, mesh, inputs, seed)
    except (NotSimulable, KeyError, ValueError, IndexError, TypeError, FloatingPointError):
        return
    rng = np.random.default_rng(seed)
    for suspect in suspects[:READ_SUSPECTS]:
        # a root cause upstream is read where its wrong value shows: the cause itself (a
        # slice at the wrong place, a gather) may well hold a baseline value
        shown = suspect.second is not None and suspect.second.role == SHOWS_AT
        name = suspect.second.node if shown else suspect.node
        node_id = by_name.get(name)
        if node_id is None or node_id not in dist_values:
            continue
        match = _matching(base, dist.node(node_id), dist_values[node_id], base_values, mesh, rng)
        where = f"where it shows (`{name}`), " if shown else ""
        if match is None:
            suspect.numerically = (
                f"{where}on random inputs its values equal no baseline value under a one-axis "
                "layout"
            )
        else:
            b, layout = match
            node = base.node(b)
            suspect.numerically = (
                f"{where}on random inputs its values equal {layout_str(layout)} of baseline "
                f"`{node.name}`{at_line(node.loc)}: only a rule relating them is missing "
                "here; the programs part after it"
            )
    # A frontier suspect (no rule reached it, no bug pattern named) whose values match goes
    # after the others: a diagnosed pattern or a value that matches nothing is the lead.
    read = suspects[:READ_SUSPECTS]
    matched = [
        s for s in read if s.reason.startswith("no rule relates") and "only a rule" in s.numerically
    ]
    if matched and len(matched) < len(read):
        suspects[: len(read)] = [s for s in read if s not in matched] + matched


def _run_both(base: Graph, dist: Graph, mesh: Mesh, inputs: list[Relation], seed: int):
    rng = np.random.default_rng(seed)
    base_inputs = {i: random_input(base.node(i), rng) for i in base.inputs}
    dist_inputs = {}
    for rel in inputs:
        if rel.dist_id in dist.nodes and rel.base_id in base_inputs:
            value = host(base_inputs[rel.base_id], dist.node(rel.dist_id).dtype)
            dist_inputs[rel.dist_id] = distribute(value, rel.layout, mesh, rng)
    if any(i not in dist_inputs for i in dist.inputs):
        raise NotSimulable("a distributed input has no relation")
    with np.errstate(all="ignore"):
        return run_baseline(base, base_inputs), run_spmd(dist, dist_inputs, mesh)


def _matching(base: Graph, node, values: list[np.ndarray], base_values, mesh: Mesh, rng):
    """The first baseline node (same op and line first) whose value `values` is under a
    one-placement layout, and that layout; None when there is none."""
    local = tuple(values[0].shape)
    candidates = sorted(
        (b for b in base.nodes.values() if b.id in base_values),
        key=lambda b: (b.op != node.op, not _same_line(b, node), b.id),
    )
    for b in candidates:
        expected = base_values[b.id]
        if expected.size < 2 or np.all(expected == expected.flat[0]):
            continue  # a fill: equal to too much to say anything
        for layout in _layouts(tuple(expected.shape), local, mesh):
            if compare_output(0, expected, values, layout, mesh, rng) is None:
                return b.id, layout
    return None


def _same_line(a, b) -> bool:
    return a.loc is not None and b.loc is not None and a.loc.line == b.loc.line


def _layouts(whole: tuple[int, ...], local: tuple[int, ...], mesh: Mesh) -> list[Layout]:
    """The one-placement layouts under which a device holding `local` holds `whole`."""
    if len(whole) != len(local):
        return []
    if whole == local:
        return [()] + [(Placement("partial", axis, op="sum"),) for axis in mesh.names]
    differing = [d for d in range(len(whole)) if whole[d] != local[d]]
    if len(differing) != 1:
        return []
    d = differing[0]
    return [
        (Placement("shard", axis, dim=d),)
        for axis, size in mesh.axes
        if local[d] * size == whole[d]
    ]
