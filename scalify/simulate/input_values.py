"""Inferred input layouts checked against the values both programs hold.

Where Scalify infers how a distributed input relates to the baseline's (from the shape
ratios, or from how both programs cut it), the inference is an assumption, and a wrong one
can prove a wrong program: a fused QKV weight cut on the host as one block per rank, read per
part by the attention, was proved under the per-part layout that makes the proof go through.
When the values exist (the Python API holds both models), each inferred layout is checked:
the device's value must be the block of the baseline's value that the layout says it holds.
A layout the values contradict is replaced by the plain reading of the shapes when that one
holds them; when none does, the verdict cannot be `equivalent` (see `verify.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from scalify.ir import Graph
from scalify.layout import Layout, layout_str
from scalify.mesh import Mesh
from scalify.relations import Relation
from scalify.simulate.spmd import distribute, values_close

# layouts the user or the program states: not assumptions of Scalify's
STATED = ("relations file", "annotation", "baseline annotation", "DTensor placement")
CHECKED = "checked against the device's values"


@dataclass(frozen=True)
class InputValues:
    """Input name -> value, for the baseline and for one device of the distributed program
    (`device`, in the mesh's row-major numbering)."""

    base: Mapping[str, np.ndarray]
    dist: Mapping[str, np.ndarray]
    device: int = 0


@dataclass
class ValueCheck:
    relations: list[Relation]
    notes: list[str] = field(default_factory=list)
    contradicted: list[str] = field(default_factory=list)  # inputs no inferred layout holds


def holds(layout: Layout, base: np.ndarray, local: np.ndarray, mesh: Mesh, device: int):
    """Whether `local` is device `device`'s value of `base` under `layout`; None when the
    values cannot tell (a partial sum: any split of the value is one)."""
    if any(p.kind == "partial" for p in layout):
        return None
    try:
        wanted = distribute(base, layout, mesh, np.random.default_rng(0))[device]
    except (ValueError, IndexError):
        return False
    if wanted.shape != local.shape:
        return False
    return bool(np.all(values_close(wanted, local)[3]))


def _is_assumed(rel: Relation) -> bool:
    return not rel.source.startswith(STATED)


def unconfirmed(rel: Relation) -> bool:
    """A cut Scalify inferred that no one stated and no value check confirmed (a replicated
    default is what equal shapes say, not an assumption about how weights were cut)."""
    return _is_assumed(rel) and CHECKED not in rel.source and bool(rel.layout)


def check_input_values(
    inferred: list[Relation],
    plain: list[Relation],
    base: Graph,
    dist: Graph,
    mesh: Mesh,
    values: InputValues,
) -> ValueCheck:
    """Check each assumed input relation of `inferred` against the values; `plain` are the
    same relations as read from shapes alone, before any refinement."""
    check = ValueCheck([])
    first = {r.dist_id: r for r in plain}
    for rel in inferred:
        b = values.base.get(base.input_name(rel.base_id))
        d = values.dist.get(dist.input_name(rel.dist_id))
        if b is None or d is None or not _is_assumed(rel):
            check.relations.append(rel)
            continue
        verdict = holds(rel.layout, b, d, mesh, values.device)
        if verdict is None:
            check.relations.append(rel)
        elif verdict:
            check.relations.append(replace(rel, source=f"{rel.source}, {CHECKED}"))
        else:
            check.relations.append(_instead(rel, first.get(rel.dist_id), b, d, mesh, values, check))
    return check


def _instead(rel, shapes_only, b, d, mesh, values, check: ValueCheck) -> Relation:
    said = f"{rel.name}: {layout_str(rel.layout)} ({rel.source})"
    device = f"device {values.device}'s value"
    if (
        shapes_only is not None
        and shapes_only.layout != rel.layout
        and holds(shapes_only.layout, b, d, mesh, values.device)
    ):
        check.notes.append(
            f"{said} is contradicted by {device}; {layout_str(shapes_only.layout)} holds it "
            "and is used instead"
        )
        return replace(shapes_only, source=f"inferred from shapes, {CHECKED}")
    check.contradicted.append(rel.name)
    check.notes.append(
        f"{said} is contradicted by {device}, and no layout Scalify infers holds it: state "
        f"the layout in the relations (`{rel.name}`), or check how the weight is cut"
    )
    return rel
