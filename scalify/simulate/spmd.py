"""Numeric SPMD simulation: run the baseline once and the distributed graph on every device
of a simulated mesh with real collective semantics, then compare under the output relations.

This is the ground truth the rules are checked against. It expands per device and per
element, so it only runs on small shapes; the verifier itself never does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from scalify.ir import Graph, Node, feeding
from scalify.layout import Layout, Placement, held_places
from scalify.mesh import Mesh
from scalify.relations import Relation
from scalify.simulate.kernels import apply
from scalify.values import IDENTITY, REDUCERS, NotSimulable, host

MAX_ELEMENTS = 64_000_000


def device_coords(mesh: Mesh, device: int) -> dict[str, int]:
    return mesh.coords(device)


def random_input(node: Node, rng: np.random.Generator) -> np.ndarray:
    if node.dtype == "pred":
        return rng.random(node.shape) < 0.5
    if node.dtype.startswith(("f", "bf")):
        return rng.standard_normal(node.shape)
    if node.dtype.startswith("c"):
        return rng.standard_normal(node.shape) + 1j * rng.standard_normal(node.shape)
    if "assumed_range" in node.attrs:  # a lookup index: only values in range are meant
        lo, hi = node.attrs["assumed_range"]
        return host(rng.integers(lo, hi + 1, size=node.shape), node.dtype)
    return host(rng.integers(-4, 5, size=node.shape), node.dtype)


def _block(value: np.ndarray, dim: int, index: int, count: int, p: Placement | None = None, fill=0):
    """Block `index` of `count` along `dim`; with parts, that block of every part's value,
    joined."""
    if p is not None and p.parts:
        starts = np.cumsum((0,) + p.parts[:-1])
        pieces = []
        for k, (s, n) in enumerate(zip(starts, p.parts, strict=True)):
            piece = np.take(value, range(s, s + n), axis=dim)
            for q in p.part_values[k] if p.part_values else ():
                piece = padded_or_repeated(piece, q, fill)
            pieces.append(_block(piece, dim, index, count))
        return np.concatenate(pieces, axis=dim)
    size = value.shape[dim] // count
    return np.take(value, range(index * size, (index + 1) * size), axis=dim)


def padded_or_repeated(value: np.ndarray, p: Placement, fill=0) -> np.ndarray:
    """`value` padded at the end of the dim with `fill`, or with its runs repeated."""
    if p.kind == "padded":
        widths = [(0, 0)] * value.ndim
        widths[p.dim] = (0, p.size - value.shape[p.dim])
        if p.op == "lowest":  # a padding a mask gave the lowest value
            fill = -np.inf
        return np.pad(value, widths, constant_values=fill)
    runs = value.shape[p.dim] // p.unit
    split = value.reshape(value.shape[: p.dim] + (runs, p.unit) + value.shape[p.dim + 1 :])
    repeated = np.repeat(split, p.size, axis=p.dim)
    return repeated.reshape(value.shape[: p.dim] + (-1,) + value.shape[p.dim + 1 :])


def distribute(
    value: np.ndarray, layout: Layout, mesh: Mesh, rng: np.random.Generator, fill=0
) -> list[np.ndarray]:
    """Per-device values that relate to `value` by `layout` (first placement innermost);
    a padding holds `fill`."""
    per_device = [value] * mesh.size
    for p in layout:
        if p.kind in ("padded", "repeated"):
            per_device = [padded_or_repeated(v, p, fill) for v in per_device]
        elif p.kind == "shard":
            size = mesh.axis_size(p.axis)
            per_device = [
                _block(v, p.dim, mesh.coordinate(d, p.axis), size, p, fill)
                for d, v in enumerate(per_device)
            ]
        elif p.kind == "laid":
            per_device = [
                _held(v, p, mesh.coordinate(d, p.axis), mesh) for d, v in enumerate(per_device)
            ]
        else:
            per_device = _split_partial(per_device, p, mesh, rng)
    return per_device


def _held(value: np.ndarray, p: Placement, coord: int, mesh: Mesh) -> np.ndarray:
    """What device `coord` holds of `value` under a declared layout kind: the places its
    index map names, in its local order."""
    if p.index_map is None:
        raise NotSimulable(f"layout kind `{p.op}` has no index map: no rule file declares it")
    places = held_places(p.index_map, coord, mesh.axis_size(p.axis), value.shape[p.dim])
    return np.take(value, places, axis=p.dim)


def _split_partial(per_device, p: Placement, mesh: Mesh, rng) -> list[np.ndarray]:
    result = list(per_device)
    for group in mesh.groups(tuple(p.axis.split(","))):
        whole = per_device[group[0]]
        if whole.dtype == bool:
            raise NotSimulable("a predicate cannot be a partial reduction")
        if p.op == "sum":
            parts = [
                rng.standard_normal(whole.shape)
                if whole.dtype.kind == "f"
                else rng.integers(-4, 5, size=whole.shape)
                for _ in group[:-1]
            ]
            parts.append(whole - sum(parts))
        else:
            sign = 1.0 if p.op == "max" else -1.0
            keeper = int(rng.integers(len(group)))
            parts = [
                whole if k == keeper else whole - sign * np.abs(rng.standard_normal(whole.shape))
                for k in range(len(group))
            ]
        for device, part in zip(group, parts, strict=True):
            result[device] = part
    return result


def _groups(node: Node, mesh: Mesh) -> list[tuple[int, ...]]:
    groups = [tuple(g) for g in node.attrs.get("groups", ())]
    if any(d >= mesh.size for g in groups for d in g):
        raise NotSimulable(f"{node.op} names devices beyond the mesh {mesh}")
    if not groups:
        return [tuple(range(mesh.size))]
    return _completed(node, groups, mesh)


def _completed(node: Node, groups: list[tuple[int, ...]], mesh: Mesh) -> list[tuple[int, ...]]:
    """A program traced on one device names only that device's group (rank 0's tp group,
    say); every device runs the same program with its own group of the same axes, read as
    the rules read it (`Mesh.axes_of_groups`). The groups as given when they cover every
    device or name no axes."""
    if sorted(d for g in groups for d in g) == list(range(mesh.size)):
        return groups
    axes = mesh.axes_of_groups(tuple(groups), ordered=node.op != "all_reduce")
    if axes is None:
        return groups
    if "," in axes:
        return list(mesh.groups(tuple(axes.split(","))))
    return list(mesh.axis_groups(axes))


def _collective(node: Node, values: list[np.ndarray], mesh: Mesh) -> list[np.ndarray]:
    out: list[np.ndarray | None] = [None] * mesh.size
    a = node.attrs
    if node.op == "collective_permute":
        for device in range(mesh.size):
            out[device] = np.zeros_like(values[device])
        for source, target in a.get("pairs", ()):
            out[target] = values[source]
        return out
    for group in _groups(node, mesh):
        members = [values[d] for d in group]
        if node.op == "all_reduce":
            total = REDUCERS[a["op"]].reduce(np.stack(members), axis=0)
            for d in group:
                out[d] = total
        elif node.op == "all_gather":
            whole = np.concatenate(members, axis=int(a["dim"]))
            for d in group:
                out[d] = whole
        elif node.op == "reduce_scatter":
            total = REDUCERS[a["op"]].reduce(np.stack(members), axis=0)
            for k, d in enumerate(group):
                out[d] = _block(total, int(a["dim"]), k, len(group))
        elif node.op == "all_to_all":
            split = int(a.get("split_dim", a.get("dim", 0)))
            concat = int(a.get("concat_dim", a.get("dim", 0)))
            n = len(group)
            for k, d in enumerate(group):
                out[d] = np.concatenate([_block(m, split, k, n) for m in members], axis=concat)
        else:
            raise NotSimulable(f"collective `{node.op}`")
    if any(v is None for v in out):
        raise NotSimulable(f"{node.op} replica groups do not cover every device")
    return out


def run_baseline(graph: Graph, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    values: dict[int, np.ndarray] = dict(inputs)
    for node in graph.nodes.values():
        if node.id in values:
            continue
        if node.op in (
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "all_to_all",
            "collective_permute",
            "rank_index",
        ):
            raise NotSimulable(f"baseline has a distributed op `{node.op}`")
        values[node.id] = apply(
            node, [values[o] for o in node.operands], [graph.node(o).dtype for o in node.operands]
        )
    return values


def run_spmd(
    graph: Graph, inputs: dict[int, list[np.ndarray]], mesh: Mesh
) -> dict[int, list[np.ndarray]]:
    """Evaluate the per-device program on every device, node by node in lockstep."""
    values: dict[int, list[np.ndarray]] = dict(inputs)
    for node in graph.nodes.values():
        if node.id in values:
            continue
        args = [values[o] for o in node.operands]
        if node.op == "rank_index":
            values[node.id] = [host(np.array(d), node.dtype) for d in range(mesh.size)]
        elif node.op in (
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "all_to_all",
            "collective_permute",
        ):
            values[node.id] = _collective(node, args[0], mesh)
        else:
            dtypes = [graph.node(o).dtype for o in node.operands]
            values[node.id] = [apply(node, [a[d] for a in args], dtypes) for d in range(mesh.size)]
    return values


@dataclass
class Mismatch:
    """Where a distributed output departs from what its relation requires."""

    output: int
    device: int
    index: tuple[int, ...]
    expected: float | complex
    found: float | complex
    max_abs_diff: float
    shapes: tuple | None = None  # (required, found) when the shapes differ

    def describe(self) -> str:
        if self.shapes:
            want, got = self.shapes
            return (
                f"output {self.output} on device {self.device} has shape {list(got)} where "
                f"the required layout gives {list(want)}"
            )
        return (
            f"output {self.output} on device {self.device} at {list(self.index)}: "
            f"expected {self.expected:.6g}, found {self.found:.6g} "
            f"(max |difference| {self.max_abs_diff:.3g})"
        )


def _reduce_partials(values: list[np.ndarray], layout: Layout, mesh: Mesh):
    values = list(values)
    remaining = []
    for p in reversed(layout):
        if p.kind != "partial":
            remaining.insert(0, p)
            continue
        for group in mesh.groups(tuple(p.axis.split(","))):
            total = REDUCERS[p.op].reduce(np.stack([values[d] for d in group]), axis=0)
            for d in group:
                values[d] = total
    return values, tuple(remaining)


def compare_output(
    index: int, expected: np.ndarray, found: list[np.ndarray], layout: Layout, mesh: Mesh, rng
) -> Mismatch | None:
    found, layout = _reduce_partials(found, layout, mesh)
    wanted = distribute(expected, layout, mesh, rng)
    # an output's padding may hold anything: only the places that hold the value are compared
    unread = (
        distribute(np.zeros(expected.shape, bool), layout, mesh, rng, fill=True)
        if any(p.kind == "padded" or p.part_values for p in layout)
        else [False] * len(wanted)
    )
    for device, (want, got) in enumerate(zip(wanted, found, strict=True)):
        if want.shape != got.shape:
            return Mismatch(
                index,
                device,
                (),
                float("nan"),
                float("nan"),
                float("inf"),
                shapes=(want.shape, got.shape),
            )
        w, g, held, close = values_close(want, got)
        close = close | unread[device]
        if not close.all():
            bad = tuple(int(i) for i in np.argwhere(~close)[0])
            with np.errstate(invalid="ignore"):  # inf - inf: no difference to show
                diff = np.abs(w.astype(held) - g.astype(held))
            finite = diff[np.isfinite(diff)]
            largest = float(finite.max()) if finite.size else float("nan")
            return Mismatch(index, device, bad, w[bad].item(), g[bad].item(), largest)
    return None


def values_close(want: np.ndarray, got: np.ndarray):
    """Both values in the precision they are compared in, that precision, and where they
    agree: floats within a tolerance that scales with the finite values only (an infinity
    among them, a mask's -inf, would make every value close to every other), others
    exactly."""
    kinds = {want.dtype.kind, got.dtype.kind}
    if kinds & {"f", "c"}:
        held = np.complex128 if "c" in kinds else np.float64
        w, g = want.astype(held), got.astype(held)
        finite = np.abs(w[np.isfinite(w)])
        scale = max(1.0, float(finite.max(initial=0.0)))
        return w, g, held, np.isclose(g, w, rtol=1e-6, atol=1e-6 * scale, equal_nan=True)
    return want, got, np.float64, want == got


def simulable(graph: Graph, mesh: Mesh, devices: int | None = None) -> bool:
    """Small enough to run on every device of `mesh` (or on `devices` of them: the baseline
    runs once)."""
    elements = sum(int(np.prod(n.shape)) for n in graph.nodes.values())
    return elements * (mesh.size if devices is None else devices) <= MAX_ELEMENTS


def simulate(
    base: Graph,
    dist: Graph,
    mesh: Mesh,
    inputs: list[Relation],
    outputs: list[Relation],
    seed: int = 0,
) -> Mismatch | None:
    """Random inputs, both programs, and the first output that breaks its relation.

    Raises NotSimulable when an op has no numeric semantics here or the graphs are too big.
    """
    if simulable(base, mesh, devices=1) and simulable(dist, mesh):
        return _simulate_outputs(base, dist, mesh, inputs, list(enumerate(outputs)), seed)
    # Too large whole: each output on its own cone (a KV cache written by the first layer
    # needs none of the vocabulary projection).
    checked = 0
    for index, rel in enumerate(outputs):
        b_cone, d_cone = _cone(base, rel.base_id), _cone(dist, rel.dist_id)
        if not (simulable(b_cone, mesh, devices=1) and simulable(d_cone, mesh)):
            continue
        checked += 1
        cone_outputs = [(index, rel)]
        if mismatch := _simulate_outputs(b_cone, d_cone, mesh, inputs, cone_outputs, seed, base):
            return mismatch
    if checked < len(outputs):
        raise NotSimulable(
            "graphs too large to simulate"
            + (f" (the {checked} outputs small enough to check agree)" if checked else "")
        )
    return None


def _cone(graph: Graph, output: int) -> Graph:
    """The part of `graph` that computes `output`."""
    needed = feeding(graph, [output])
    return replace(
        graph,
        nodes={i: n for i, n in graph.nodes.items() if i in needed},
        inputs=[i for i in graph.inputs if i in needed],
        outputs=[output],
        derived={},
    )


def _simulate_outputs(
    base: Graph,
    dist: Graph,
    mesh: Mesh,
    inputs: list[Relation],
    outputs: list[tuple[int, Relation]],
    seed: int,
    whole_base: Graph | None = None,
) -> Mismatch | None:
    """Simulate `outputs`; `whole_base` has the baseline inputs a cone of it may lack."""
    rng = np.random.default_rng(seed)
    base_inputs = {i: random_input(base.node(i), rng) for i in base.inputs}
    dist_inputs = {}
    for rel in inputs:
        if rel.dist_id not in dist.nodes:
            continue
        if rel.base_id not in base_inputs:  # the baseline's cone does not read it
            base_inputs[rel.base_id] = random_input((whole_base or base).node(rel.base_id), rng)
        value = host(base_inputs[rel.base_id], dist.node(rel.dist_id).dtype)
        dist_inputs[rel.dist_id] = distribute(value, rel.layout, mesh, rng)
    for i in dist.inputs:
        if i not in dist_inputs:
            raise NotSimulable(f"distributed input {dist.input_name(i)} has no relation")
    base_values = run_baseline(base, base_inputs)
    dist_values = run_spmd(dist, dist_inputs, mesh)
    for index, rel in outputs:
        mismatch = compare_output(
            index, base_values[rel.base_id], dist_values[rel.dist_id], rel.layout, mesh, rng
        )
        if mismatch:
            return mismatch
    return None


__all__ = [
    "IDENTITY",
    "Mismatch",
    "NotSimulable",
    "distribute",
    "run_baseline",
    "run_spmd",
    "simulate",
]
