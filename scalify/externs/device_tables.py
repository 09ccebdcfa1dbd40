"""Per-device constant tables, read as the arithmetic they stand for.

XLA's SPMD partitioner gives each device its offset into a sharded dim by indexing a
constant table with the device id: the vocab-parallel lookup starts from
`dynamic-slice({0, 64, 128, 192}, partition-id)`; on a mesh of several axes it first maps
the device id to its coordinate on one axis (`{0, 0, 1, 1}`: the fsdp coordinate of
fsdp=2 x tensor=2) and then the coordinate to the offset (`{0, 64}`). Each such table is an
affine function of a coordinate `c = (id / s) % n` (the device's coordinate on the mesh axis
of n devices and stride s, which `rules/tp.srl`'s `axis_coordinate` reads as `coord(a)`):

- a table of one entry per device with t[i] = t0 + k * ((i / s) % n), indexed by the device
  id, is `t0 + k * ((id / s) % n)`;
- a table of n entries, t[j] = t0 + k*j, indexed by such a coordinate (whose range is
  [0, n) by construction, so the slice's clamp never acts), is `t0 + k * c`.

On a mesh of several axes a table may count over several of them at once: XLA's offset
into a vocab split over fsdp and sp, which tp separates in the device order, is
`64 * (2 c_fsdp + c_sp)`. `joint_coordinate_fit` reads such a table, and it is written as
`t0 + k * J`, J the coordinate on those axes built axis by axis (`c_fsdp * 2 + c_sp`, which
the prelude's `joint-coordinate` reads as `coord(fsdp,sp)`). A table indexed by other
arithmetic on the device id (another table's coordinate) is evaluated on every device
(`DeviceScalars`) and fitted the same ways.

Written so, an offset is an affine form over a coordinate for `index_forms.py` and a value
the rules relate. Any other table is left as it is.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Sequence

import numpy as np

from scalify.externs.int_ranges import is_int_dtype
from scalify.ir import Graph, NewNodes, Node, computed_from_literals, replace_nodes
from scalify.simulate.kernels import apply
from scalify.values import NotSimulable

_INT = re.compile(r"-?\d+")

Coordinate = tuple[int, int, int]  # (node id of the device id, stride, count)


def fold_device_tables(graph: Graph) -> None:
    """Replace each per-device table lookup of an affine table by its arithmetic."""
    devices = graph.num_partitions
    if not devices or devices < 2:
        return
    coordinates: dict[int, Coordinate] = {}  # nodes known to be a coordinate, and which

    def rewrite(node: Node, next_id: int) -> list[Node]:
        nodes = graph.nodes
        if node.op != "dynamic_slice" or len(node.operands) != 2 or node.shape != (1,):
            return []
        table, index = (nodes[o] for o in node.operands)
        values = int_table(table)
        if values is None:
            return []
        device = _device_id(index, nodes)
        if device is not None and len(values) == devices:
            found = _coordinate_table(values, devices)
            if found is None:
                joint = joint_coordinate_fit(values, devices)
                return [] if joint is None else _joint_offset(node, device, joint, next_id, nodes)
            (stride, count), start, step = found
            coordinate = (device, stride, count)
        else:
            coordinate = coordinates.get(_unviewed(index, nodes))
            affine = _affine(values)
            if coordinate is None or affine is None or len(values) != coordinate[2]:
                return _composed_table(node, values, index, next_id)
            start, step = affine
        new = NewNodes(node, next_id)
        coordinate_id = _affine_in_coordinate(new, coordinate, start, step, nodes)
        if (start, step) == (0, 1):  # the coordinate itself: a table may be indexed by it
            coordinates[coordinate_id] = coordinate
        return new.nodes

    scalars: list[DeviceScalars] = []  # made on first use, for the graph as it was
    pid = next((n.id for n in graph.nodes.values() if _device_id(n, graph.nodes) is not None), None)

    def _composed_table(node: Node, values: list[int], index: Node, next_id: int) -> list[Node]:
        """A table indexed by some other arithmetic on the device id (a coordinate on
        several axes, itself from a table): the entry each device takes, fitted as one
        table of one entry per device (with one axis, J below is its coordinate)."""
        if pid is None:
            return []
        if not scalars:
            scalars.append(DeviceScalars(graph, devices))
        per_device = scalars[0].of(index.id)
        if per_device is None:
            return []
        taken = [values[min(max(int(i), 0), len(values) - 1)] for i in per_device]
        found = _coordinate_table(taken, devices)
        if found is None:
            joint = joint_coordinate_fit(taken, devices)
            return [] if joint is None else _joint_offset(node, pid, joint, next_id, graph.nodes)
        fit = (found[1], found[2], [found[0]])
        return _joint_offset(node, pid, fit, next_id, graph.nodes)

    replace_nodes(graph, rewrite)


def _affine_in_coordinate(
    new: NewNodes, coordinate: Coordinate, start: int, step: int, nodes: dict[int, Node]
) -> int:
    """`t0 + k * ((id / s) % n)` in the node's dtype and shape, written as the rules read it
    (`axis_coordinate`); returns the id of the coordinate `(id / s) % n` itself."""
    node = new.like
    pid, stride, count = coordinate
    pid_dtype = nodes[pid].dtype
    found = new.add("div", (pid, _const(new, stride, pid_dtype)), (), pid_dtype, {})
    found = new.add("rem", (found, _const(new, count, pid_dtype)), (), pid_dtype, {})
    value = new.add("convert", (found,), (), node.dtype, {"dtype": node.dtype})
    if step != 1:
        value = new.add("mul", (value, _const(new, step, node.dtype)), (), node.dtype, {})
    if start != 0:
        value = new.add("add", (value, _const(new, start, node.dtype)), (), node.dtype, {})
    if node.shape:
        new.add("reshape", (value,), node.shape, node.dtype, {})
    return found


def fold_device_scalars(graph: Graph) -> None:
    """Write each integer scalar computed from the device id alone as the affine form it
    takes on every device, `t0 + k * ((id / s) % n)`, when it takes one: `(r // 2) * 8`
    spelled as JAX's floor division and wrapped as a slice start, or `(r % 2) * 4`, read as
    the block a device takes, whatever the spelling (rules match one form). Only the
    outermost such value is written; evaluated on every device, so only on modules of at
    most MAX_DEVICES devices."""
    devices = device_count(graph)
    ids = (_device_id(n, graph.nodes) for n in graph.nodes.values())
    pid = next((i for i in ids if i is not None), None)
    if devices < 2 or devices > MAX_DEVICES or pid is None:
        return
    scalars = DeviceScalars(graph, devices)
    users = graph.users()
    targets = {
        n.id
        for n in graph.nodes.values()
        if is_int_dtype(n.dtype)
        and n.id not in scalars.literal
        and n.op != "rank_index"
        and not _affine_form(n, graph.nodes)
        and scalars.of(n.id) is not None
        and any(scalars.of(u) is None for u in users[n.id])
    }

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.id not in targets:
            return []
        values = scalars.of(node.id)
        fit = coordinate_fit(values, devices)
        if fit is None:
            return []
        (stride, count), step = fit
        if step == 0:  # the same on every device: no block to read, and its line is kept
            return []
        new = NewNodes(node, next_id)
        _affine_in_coordinate(new, (pid, stride, count), int(values[0]), step, graph.nodes)
        return new.nodes

    if targets:
        replace_nodes(graph, rewrite)


def device_count(graph: Graph) -> int:
    """How many devices run the module: its partition count, else its mesh's size (a
    shard_map body names its mesh but no partition count); 1 when it says neither."""
    return graph.num_partitions or math.prod(graph.mesh_hint.values())


def _affine_form(node: Node, nodes: dict[int, Node]) -> bool:
    """Whether the node is already written as `_affine_in_coordinate` writes it."""
    if node.op == "reshape":
        node = nodes[node.operands[0]]
    for op in ("add", "mul"):
        if node.op == op and nodes[node.operands[1]].op == "constant":
            node = nodes[node.operands[0]]
    if node.op != "convert":
        return False
    found = nodes[node.operands[0]]
    if found.op != "rem" or nodes[found.operands[1]].op != "constant":
        return False
    step = nodes[found.operands[0]]
    return (
        step.op == "div"
        and nodes[step.operands[1]].op == "constant"
        and _device_id(nodes[step.operands[0]], nodes) is not None
    )


# (t0, k, [(stride, count), ...] most significant first): t[i] = t0 + k * J(i), J the
# device's coordinate on the listed axes taken together (the first the most significant)
JointFit = tuple[int, int, list[tuple[int, int]]]


def joint_coordinate_fit(values: list[int], devices: int) -> JointFit | None:
    """A table of one entry per device that is `t0 + k * J(id)`, J the device's coordinate
    on several mesh axes taken together, not all adjacent: XLA's offset into a vocab split
    over fsdp and sp on a (fsdp, tp, sp) mesh is `64 * (2 * c_fsdp + c_sp)`, constant along
    tp. The device id is read as digits (the prime factors of the device count, in each
    order), the table as a sum over digits; adjacent digits whose steps continue each other
    are one axis; the steps of what is left must be those of one mixed-radix count."""
    table = np.asarray(values, dtype=np.int64)
    ids = np.arange(devices)
    for radices in sorted(set(itertools.permutations(_prime_factors(devices)))):
        strides = list(itertools.accumulate((1, *radices[:-1]), operator.mul))
        digits = [(ids // s) % n for s, n in zip(strides, radices, strict=True)]
        steps = [int(table[s] - table[0]) for s in strides]
        fitted = table[0] + sum(k * d for k, d in zip(steps, digits, strict=True))
        if not np.array_equal(fitted, table):
            continue
        terms: list[list[int]] = []  # [stride, count, step], least significant first
        for stride, count, step in zip(strides, radices, steps, strict=True):
            last = terms[-1] if terms else None
            if last and last[2] and stride == last[0] * last[1] and step == last[2] * last[1]:
                last[1] *= count
            else:
                terms.append([stride, count, step])
        # least significant first by value: the axes may count in another order than the
        # mesh's (positions over sp then tp on a (fsdp, tp, sp) mesh)
        terms = sorted((t for t in terms if t[2]), key=lambda t: abs(t[2]))
        if len(terms) >= 2 and _mixed_radix(terms):  # else another digit order may fit
            return int(table[0]), terms[0][2], [(s, n) for s, n, _ in reversed(terms)]
    return None


def _mixed_radix(terms: list[list[int]]) -> bool:
    """Whether the steps of [stride, count, step] terms, least significant first, count one
    number: each a positive step times the counts of the terms below it."""
    weight = terms[0][2]
    for low, high in itertools.pairwise(terms):
        weight *= low[1]
        if high[2] != weight:
            return False
    return terms[0][2] > 0


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


def _joint_offset(node: Node, device: int, fit: JointFit, next_id: int, nodes) -> list[Node]:
    """`t0 + k * J` with J = ((c_1 * n_2 + c_2) * n_3 + ...), each c the coordinate
    `(id / s) % n` the rules read as `coord(a)`, and each step of J one the rules read as
    the coordinate on the axes so far (`joint-coordinate` in the prelude)."""
    start, step, axes = fit
    new = NewNodes(node, next_id)
    pid_dtype = nodes[device].dtype
    joint = None
    for stride, count in axes:
        value = new.add("div", (device, _const(new, stride, pid_dtype)), (), pid_dtype, {})
        value = new.add("rem", (value, _const(new, count, pid_dtype)), (), pid_dtype, {})
        if joint is not None:
            scaled = new.add("mul", (joint, _const(new, count, pid_dtype)), (), pid_dtype, {})
            value = new.add("add", (scaled, value), (), pid_dtype, {})
        joint = value
    value = new.add("convert", (joint,), (), node.dtype, {"dtype": node.dtype})
    value = new.add("mul", (value, _const(new, step, node.dtype)), (), node.dtype, {})
    if start != 0:
        value = new.add("add", (value, _const(new, start, node.dtype)), (), node.dtype, {})
    new.add("reshape", (value,), (1,), node.dtype, {})
    return new.nodes


def _const(new: NewNodes, value: int, dtype: str) -> int:
    return new.add("constant", (), (), dtype, {"value": str(value)})


def int_table(table: Node) -> list[int] | None:
    """The entries of an integer literal of rank 1 (`{0, 64, 128}`), or None."""
    if table.op != "constant" or len(table.shape) != 1 or table.dtype[:1] not in "su":
        return None
    values = [int(v) for v in _INT.findall(str(table.attrs.get("value", "")))]
    return values if len(values) == table.shape[0] else None


def _affine(values: list[int]) -> tuple[int, int] | None:
    """(t0, k) when t[j] = t0 + k*j."""
    if len(values) < 2:
        return None
    start, step = values[0], values[1] - values[0]
    return (start, step) if all(v == start + step * j for j, v in enumerate(values)) else None


def _coordinate_table(values: list[int], devices: int) -> tuple[tuple[int, int], int, int] | None:
    """((s, n), t0, k) when t[i] = t0 + k * ((i / s) % n), the smallest such s and n."""
    fit = coordinate_fit([np.asarray(v) for v in values], devices)
    return None if fit is None else (fit[0], values[0], fit[1])


def coordinate_fit(
    per_device: Sequence[np.ndarray], devices: int
) -> tuple[tuple[int, int], int] | None:
    """((s, n), k) when the value on device i is the value on device 0 plus the integer
    `k * ((i / s) % n)` everywhere, for the smallest such s and n: a value affine in the
    device's coordinate on the mesh axis of n devices and stride s (a table of offsets, or
    the positions a device counts from its own offset, literal_arrays.py)."""
    first = np.asarray(per_device[0]).astype(np.int64)
    for stride in (s for s in range(1, devices + 1) if devices % s == 0):
        for count in (n for n in range(2, devices // stride + 1) if devices % (stride * n) == 0):
            steps = np.asarray(per_device[stride]).astype(np.int64) - first
            if steps.size == 0 or not (steps == steps.flat[0]).all():
                continue
            step = int(steps.flat[0])
            if all(
                np.array_equal(
                    np.asarray(v).astype(np.int64), first + step * ((i // stride) % count)
                )
                for i, v in enumerate(per_device)
            ):
                return (stride, count), step
    return None


def _device_id(node: Node, nodes: dict[int, Node]) -> int | None:
    """The device's id in the module (partition-id), possibly cast: its node, else None."""
    while node.op == "convert":
        node = nodes[node.operands[0]]
    is_id = node.op == "rank_index" and node.attrs.get("kind") == "partition"
    return node.id if is_id else None


def _unviewed(node: Node, nodes: dict[int, Node]) -> int:
    """Under reshapes and integer casts (a coordinate keeps its values)."""
    while node.op in ("reshape", "convert"):
        node = nodes[node.operands[0]]
    return node.id


# Evaluated device by device only on modules of at most this many devices.
MAX_DEVICES = 64


class DeviceScalars:
    """One-element values computed from literals and the device's id alone, on every device."""

    def __init__(self, graph: Graph, devices: int) -> None:
        self.graph = graph
        self.devices = devices
        self.literal = computed_from_literals(graph)
        self.cache: dict[int, list | None] = {}

    def of(self, node_id: int) -> list | None:
        """The value on each device, or None when it is not such a value."""
        if node_id not in self.cache:
            self.cache[node_id] = self._evaluate(node_id)
        return self.cache[node_id]

    def spread(self, node_id: int) -> list | None:
        """The value on each device of one the same over the whole node (a scalar, or a
        broadcast of one: a select's predicate), or None."""
        node = self.graph.node(node_id)
        if node.op == "broadcast" and not node.attrs.get("dims"):
            node_id = node.operands[0]
        return self.of(node_id)

    def _evaluate(self, node_id: int) -> list | None:
        if self.devices > MAX_DEVICES or not self._computable(node_id, set()):
            return None
        try:
            return [self._value(node_id, d, {}).item() for d in range(self.devices)]
        except (NotSimulable, ValueError, TypeError, IndexError, KeyError):
            return None

    def _computable(self, node_id: int, seen: set[int]) -> bool:
        node = self.graph.node(node_id)
        if node.op == "rank_index":  # the partition id only: a replica id is another value
            return node.attrs.get("kind") == "partition"
        if node_id in self.literal or node_id in seen:
            return True
        if node.op == "parameter" or not node.operands or math.prod(node.shape) > 1:
            return False
        seen.add(node_id)
        return all(self._computable(o, seen) for o in node.operands)

    def _value(self, node_id: int, device: int, memo: dict) -> np.ndarray:
        if node_id not in memo:
            node = self.graph.node(node_id)
            if node.op == "rank_index":
                memo[node_id] = np.asarray(device)
            else:
                args = [self._value(o, device, memo) for o in node.operands]
                dtypes = [self.graph.node(o).dtype for o in node.operands]
                value = np.asarray(apply(node, args, dtypes)).reshape(node.shape)
                if is_int_dtype(node.dtype) and not fits_dtype(value, node.dtype):
                    raise ValueError("wraps around")  # the kernels compute in int64
                memo[node_id] = value
        return memo[node_id]


def fits_dtype(value: np.ndarray, dtype: str) -> bool:
    """Whether every entry lies in the integer dtype's range (the kernels compute in int64)."""
    kind = {"s": "int", "u": "uint"}.get(dtype[:1])
    if kind is None or not dtype[1:].isdigit():
        return False
    info = np.iinfo(f"{kind}{dtype[1:]}")
    return value.size == 0 or (int(value.min()) >= info.min and int(value.max()) <= info.max)
