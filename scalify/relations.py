"""Input and output relations: which baseline tensor each distributed input is, and how.

Sources, in order: a relations file (`--relations`), sharding annotations in the distributed
graph (GSPMD `sharding=`, Shardy in/out shardings), and inference from shape ratios against
the mesh. Every relation records where it came from, and the report prints them all.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from scalify.errors import ScalifyError
from scalify.ir import Graph, NewNodes, Node, TileSharding, replace_nodes
from scalify.layout import REPLICATE, Layout, Placement, layout_str, local_shape, parse_layout
from scalify.mesh import Mesh
from scalify.ops.coordinate_form import device_coordinate
from scalify.values import dtype_class


@dataclass(frozen=True)
class Relation:
    dist_id: int
    base_id: int
    name: str
    layout: Layout
    source: str  # relations file, annotation, baseline annotation, inferred from shapes,
    # default, or proven at the cut

    def describe(self) -> str:
        return f"{self.name}: {layout_str(self.layout)} ({self.source})"


@dataclass(frozen=True)
class RelationsFile:
    path: str
    mesh: str | None
    inputs: dict[str, str]
    outputs: list[str] | None
    # Outputs it does not state: infer a layout from the shape ratios when the local shape
    # differs from the baseline's (a program on local shards returns local shards), as for
    # inputs; otherwise they must be replicate. `scalify.api` sets it with `parallel_inputs`.
    infer_outputs: bool = False


# `"outputs": "inferred"`: every output's layout from its shape ratios, as for inputs.
INFER_OUTPUTS = "inferred"


def _unstated_output(
    index: int, b_shape: tuple, d_shape: tuple, mesh: Mesh, where: str, path: str
) -> ScalifyError:
    """A partitioned program whose output's layout nothing states and whose local shape is
    not the baseline's: the default (replicate) cannot be meant, and a verdict resting on
    it would be wrong either way, so the user is asked for it."""
    try:
        hint = f' such as ["{layout_str(_from_shapes(b_shape, d_shape, mesh, where))}"]'
    except ScalifyError:
        hint = ""
    return ScalifyError(
        f"output {index} has local shape {list(d_shape)} where the baseline's is "
        f"{list(b_shape)}, and nothing states its layout (no relations file entry, "
        "DTensor placement or output sharding says it)",
        path,
        notes=[
            f'give it in a relations file: {{"outputs": [...]}}{hint}, or export the '
            "baseline with the same shardings, so its output annotation says it"
        ],
    )


def read_relations_file(path: str) -> RelationsFile:
    """Read the JSON relations file; see docs/reference/relations.md for its fields."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ScalifyError(f"relations file not found: {path}", path) from None
    except json.JSONDecodeError as err:
        raise ScalifyError(f"not valid JSON: {err.msg}", path, err.lineno, err.colno) from None
    if not isinstance(data, dict) or not isinstance(data.get("inputs", {}), dict):
        raise ScalifyError(
            'expected an object {"mesh": ..., "inputs": {NAME: LAYOUT}, "outputs": [LAYOUT, ...]}',
            path,
        )
    outputs = data.get("outputs")
    if outputs == INFER_OUTPUTS:
        return RelationsFile(path, data.get("mesh"), dict(data.get("inputs", {})), None, True)
    if outputs is not None and not isinstance(outputs, list):
        raise ScalifyError(
            f'"outputs" must be a list of layouts, one per output, or "{INFER_OUTPUTS}"', path
        )
    for index, layout in enumerate(outputs or []):
        if layout is not None and not isinstance(layout, str):
            raise ScalifyError(
                f'"outputs"[{index}] is {json.dumps(layout)}: expected a layout string such as '
                '"shard(0, tp)", or null to leave that output to its other sources',
                path,
            )
    for name, layout in data.get("inputs", {}).items():
        if not isinstance(layout, str):
            raise ScalifyError(
                f'"inputs"["{name}"] is {json.dumps(layout)}: expected a layout string such '
                'as "shard(0, tp)"',
                path,
            )
    return RelationsFile(path, data.get("mesh"), dict(data.get("inputs", {})), outputs)


# An input only the distributed graph has, declared by what it holds on each device: the
# device's row-major id (`device_id`), its coordinate on one mesh axis (`device_id(AXIS)`),
# one value on every device (`constant(V)`), or one value per device id (`per_device([...])`).
DEVICE_VALUE_KINDS = ("device_id", "constant", "per_device")
DEVICE_VALUE_FORMS = "device_id, device_id(AXIS), constant(V) or per_device([V0, V1, ...])"
_DEVICE_VALUE_RE = re.compile(rf"\s*({'|'.join(DEVICE_VALUE_KINDS)})\s*(?:\((.*)\))?\s*", re.S)
_NUMBER_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?inf|nan|true|false")


@dataclass(frozen=True)
class DeviceValue:
    """What a declared input holds on each device."""

    kind: str  # device_id, constant or per_device
    axis: str | None = None  # device_id(AXIS): the coordinate on this axis
    values: tuple[str, ...] = ()  # constant: one literal; per_device: one per device id

    def describe(self, mesh: Mesh) -> str:
        if self.kind == "device_id" and self.axis:
            return f"the device's coordinate on mesh axis {self.axis}"
        if self.kind == "device_id":
            return f"the device's row-major id on mesh {mesh}"
        if self.kind == "constant":
            return f"{self.values[0]} on every device"
        return f"[{', '.join(self.values)}] on devices 0 to {len(self.values) - 1}"


@dataclass(frozen=True)
class BoundInputs:
    """The graphs with declared device inputs replaced by what they hold and unread inputs
    given back, the relations file without the declarations, and one note per input so
    bound (the report's assumptions)."""

    base: Graph
    dist: Graph
    given: RelationsFile | None
    notes: list[str]


def parse_device_value(text: str, mesh: Mesh, where: str) -> DeviceValue | None:
    """The declaration `text` spells, or None when it is not one (a layout, then)."""
    m = _DEVICE_VALUE_RE.fullmatch(text)
    if m is None:
        return None
    kind, arg = m.group(1), m.group(2)
    arg = None if arg is None else arg.strip()
    if kind == "device_id" and not arg:
        return DeviceValue(kind)
    if kind == "device_id":
        if arg not in mesh.names:
            raise ScalifyError(
                f"bad declaration '{text}': axis '{arg}' is not in mesh {mesh}",
                where,
            )
        return DeviceValue(kind, arg)
    if kind == "constant" and arg and _NUMBER_RE.fullmatch(arg):
        return DeviceValue(kind, values=(arg,))
    if kind == "per_device" and arg and arg.startswith("[") and arg.endswith("]"):
        values = tuple(v.strip() for v in arg[1:-1].split(","))
        if all(_NUMBER_RE.fullmatch(v) for v in values):
            if len(values) != mesh.size:
                raise ScalifyError(
                    f"bad declaration '{text}': {len(values)} values, but mesh {mesh} has "
                    f"{mesh.size} devices (one value per device id, in row-major order)",
                    where,
                )
            return DeviceValue(kind, values=values)
    raise ScalifyError(f"bad declaration '{text}': expected {DEVICE_VALUE_FORMS}", where)


def _check_holds(value: DeviceValue, node: Node, mesh: Mesh, text: str, where: str) -> None:
    """The input's dtype can hold the declared values: an id or an integer literal in an
    integer or float input, true or false in a pred."""
    spelled = f"{node.dtype}{list(node.shape)}"
    if node.dtype == "pred":
        if value.kind == "device_id" or any(v not in ("true", "false") for v in value.values):
            raise ScalifyError(
                f"bad declaration '{text}': the input is {spelled}, which holds true or false; "
                "expected constant(true|false) or per_device([true|false, ...])",
                where,
            )
        return
    if dtype_class(node.dtype) == "int":
        if any(not re.fullmatch(r"[-+]?\d+", v) for v in value.values):
            raise ScalifyError(
                f"bad declaration '{text}': the input is {spelled}, an integer type; expected "
                "integer values",
                where,
            )
        bits = int(node.dtype[1:]) if re.fullmatch(r"[su]\d+", node.dtype) else 64
        signed = node.dtype[0] != "u"
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        held = [int(v) for v in value.values] or [0, mesh.size - 1]  # a device id: 0..n-1
        if not all(low <= v <= high for v in held):
            raise ScalifyError(
                f"bad declaration '{text}': the input is {spelled}, which holds {low} to "
                f"{high}; expected values in that range",
                where,
            )
    if any(v in ("true", "false") for v in value.values):
        raise ScalifyError(
            f"bad declaration '{text}': the input is {spelled}, not pred; expected numbers",
            where,
        )


def _device_value_nodes(value: DeviceValue, like: Node, mesh: Mesh, next_id: int) -> list[Node]:
    """The ops that compute `value` on each device, as the frontends write a device's index
    (partition-id, converted; `device_coordinate` for one axis), broadcast to `like`'s
    shape: the program then reads its device's value as if it computed it."""
    new = NewNodes(like, next_id)
    dtype = like.dtype
    if value.kind == "constant":
        last = new.add("constant", (), (), dtype, {"value": value.values[0]})
    elif value.kind == "device_id" and value.axis:
        size, stride = mesh.axis_size(value.axis), mesh.stride(value.axis)
        last = device_coordinate(new.add, size, stride, dtype)
    else:
        pid = new.add("rank_index", (), (), "u32", {"kind": "partition"})
        if value.kind == "per_device":
            text = "{" + ",".join(value.values) + "}"
            table = new.add("constant", (), (len(value.values),), dtype, {"value": text})
            one = new.add("dynamic_slice", (table, pid), (1,), dtype, {"sizes": (1,)})
            last = new.add("reshape", (one,), (), dtype, {})
        else:
            last = (
                new.add("convert", (pid,), (), dtype, {"dtype": dtype}) if dtype != "u32" else pid
            )
    if like.shape:
        new.add("broadcast", (last,), like.shape, dtype, {"dims": ()})
    return new.nodes


def bind_unpaired_inputs(
    base: Graph, dist: Graph, mesh: Mesh, given: RelationsFile | None
) -> BoundInputs:
    """Give every input only one graph has its meaning, so that the rest pair. A distributed
    input the relations file declares as a device value (`device_id`, `constant(V)`, ...)
    is replaced by the ops that compute that value: the proof and the numeric run then see
    a program they understand. An input one program declares but never reads (its loader
    drops it) while the other reads it is given back, unread, to pair with: the verdict
    then says whether reading it matters. The graphs are copied, not edited."""
    declared = _device_values(base, dist, mesh, given)
    names = {i: dist.input_name(i) for i in dist.inputs}
    notes = [
        f'assumed: input `{names[i]}` holds {value.describe(mesh)} (relations file: "{text}")'
        for i, (text, value) in declared.items()
    ]
    if declared:
        dist = _with_device_values(dist, declared, mesh)
        assert given is not None  # declarations come from it
        kept = {n: t for n, t in given.inputs.items() if n not in {names[i] for i in declared}}
        given = replace(given, inputs=kept)
    base, dist, kept_notes = _with_unread_inputs(base, dist)
    return BoundInputs(base, dist, given, notes + kept_notes)


def _with_unread_inputs(base: Graph, dist: Graph) -> tuple[Graph, Graph, list[str]]:
    """Both graphs, each given back the inputs its loader dropped as unread that the other
    graph has by name (and reads), with one note per input so kept."""
    notes: list[str] = []
    graphs = {"baseline": base, "distributed": dist}
    for side, other in (("baseline", "distributed"), ("distributed", "baseline")):
        graph, names = graphs[side], {graphs[side].input_name(i) for i in graphs[side].inputs}
        unread = [
            n
            for n in (graphs[other].input_name(i) for i in graphs[other].inputs)
            if n not in names and n in graph.unread_inputs
        ]
        if unread:
            graphs[side] = _with_inputs_back(graph, unread)
            notes += [
                f"the {side} graph declares input `{n}` but never reads it; it is kept to "
                f"pair with the {other} graph's, which reads it"
                for n in unread
            ]
    return graphs["baseline"], graphs["distributed"], notes


def _device_values(
    base: Graph, dist: Graph, mesh: Mesh, given: RelationsFile | None
) -> dict[int, tuple[str, DeviceValue]]:
    """Distributed input id -> (text, value) for each input the relations file declares as
    a device value; a declaration that cannot hold is an error."""
    if given is None:
        return {}
    by_name = {dist.input_name(i): i for i in dist.inputs}
    base_names = {base.input_name(i) for i in base.inputs}
    declared: dict[int, tuple[str, DeviceValue]] = {}
    for name, text in given.inputs.items():
        where = f"{given.path}: input {name}"
        value = parse_device_value(text, mesh, where)
        if value is None:
            _check_layout_entry(base, dist, name, text, base_names, where)
            continue
        if name not in by_name:
            continue  # input_relations names the inputs the graph does not have
        if name in base_names:
            raise ScalifyError(
                f"'{text}' declares what an input only the distributed graph has holds, but "
                f"the baseline has an input `{name}` too",
                where,
                notes=['relate an input both graphs have by a layout, such as "replicate"'],
            )
        _check_holds(value, dist.node(by_name[name]), mesh, text, where)
        declared[by_name[name]] = (text, value)
    return declared


def _with_device_values(
    dist: Graph, declared: dict[int, tuple[str, DeviceValue]], mesh: Mesh
) -> Graph:
    """A copy of `dist` whose declared inputs are the ops computing their values,
    canonicalised again (a device id feeds the folds of offsets and tables)."""
    from scalify.canon.canonicalize import canonicalize

    dist = copy.deepcopy(dist)
    dist.derived.clear()

    def rewrite(node: Node, next_id: int) -> list[Node]:
        if node.id not in declared:
            return []
        return _device_value_nodes(declared[node.id][1], node, mesh, next_id)

    replace_nodes(dist, rewrite)
    dist.inputs = [i for i in dist.inputs if i not in declared]
    dist.input_shardings = {i: s for i, s in dist.input_shardings.items() if i not in declared}
    if not dist.num_partitions and mesh.size > 1:
        dist.num_partitions = mesh.size  # a device id lies below it (lookup guards fold)
    return canonicalize(dist)


def _with_inputs_back(base: Graph, names: list[str]) -> Graph:
    """A copy of `base` with the parameters `names` its loader dropped as unread given
    back, in parameter order, so that they pair by name with the other graph's."""
    base = copy.deepcopy(base)
    base.derived.clear()
    next_id = max(base.nodes, default=-1) + 1
    added = {}
    for offset, name in enumerate(names):
        node = replace(base.unread_inputs.pop(name), id=next_id + offset)
        added[node.id] = node
    base.nodes = {**added, **base.nodes}  # parameters first: the order stays topological

    def order(i: int) -> tuple:
        attrs = base.node(i).attrs
        return (attrs.get("index", 0), attrs.get("tuple_index", ()))

    base.inputs = sorted([*base.inputs, *added], key=order)
    return base


def _check_layout_entry(
    base: Graph, dist: Graph, name: str, text: str, base_names: set[str], where: str
) -> None:
    """An entry that is no device value, for an input only the distributed graph has (by
    name, where the baseline has fewer inputs): a layout cannot relate it to anything, so
    the error says what such an input's entry must be."""
    if (
        name in base_names
        or name in base.unread_inputs
        or len(dist.inputs) <= len(base.inputs)
        or name not in {dist.input_name(i) for i in dist.inputs}
    ):
        return
    raise ScalifyError(
        f"bad declaration '{text}': `{name}` is an input only the distributed graph has, so "
        f"its entry says what it holds on each device: expected {DEVICE_VALUE_FORMS}",
        where,
        notes=["see docs/reference/relations.md#inputs-only-the-distributed-graph-has"],
    )


def _pairing_name(graph: Graph, node_id: int) -> str:
    """The name an input pairs by: its own, unless the frontend gave it a distinct name only
    to tell apart inputs whose names repeat (XLA's `param`, `param.1`, ...): those pair by
    the repeated name, that is by position."""
    return str(graph.node(node_id).attrs.get("pairing_name") or graph.input_name(node_id))


def pair_inputs(base: Graph, dist: Graph) -> list[tuple[int, int]]:
    """(base id, dist id) pairs: by name when every name matches, else by position."""
    base_names = {_pairing_name(base, i): i for i in base.inputs}
    dist_names = [_pairing_name(dist, i) for i in dist.inputs]
    if set(dist_names) == set(base_names) and len(dist_names) == len(base_names):
        return [(base_names[n], d) for n, d in zip(dist_names, dist.inputs, strict=True)]
    if len(base.inputs) != len(dist.inputs):
        raise _unpaired_inputs(base, dist, set(base_names), set(dist_names))
    return list(zip(base.inputs, dist.inputs, strict=True))


def _unpaired_inputs(
    base: Graph, dist: Graph, base_names: set[str], dist_names: set[str]
) -> ScalifyError:
    """Inputs that pair neither by name nor by position, named one by one: the input only
    one graph has is what the user must act on, with the declaration that would pair it."""
    only_dist = [
        dist.input_name(i) for i in dist.inputs if _pairing_name(dist, i) not in base_names
    ]
    only_base = [
        base.input_name(i) for i in base.inputs if _pairing_name(base, i) not in dist_names
    ]
    lacking = [
        _lacking(side, other, names)
        for side, other, names in (
            ("distributed", "baseline", only_dist),
            ("baseline", "distributed", only_base),
        )
        if names
    ]
    return ScalifyError(
        f"the baseline has {len(base.inputs)} inputs and the distributed graph has "
        f"{len(dist.inputs)}; they cannot be paired"
        + (f": the {' and the '.join(lacking)}" if lacking else ""),
        dist.path,
        notes=[
            f"baseline inputs: {', '.join(base.input_name(i) for i in base.inputs)}",
            f"distributed inputs: {', '.join(dist.input_name(i) for i in dist.inputs)}",
            "an input that no output depends on is dropped, unless the other graph has an "
            "input of its name",
            *_declaration_hint(dist, only_dist),
        ],
    )


def _declaration_hint(dist: Graph, names: list[str]) -> list[str]:
    """The relations file entry that would pair the distributed graph's extra inputs: an
    integer one most likely holds the device's index, any other a value the program is
    given (whose V the user knows)."""
    if not names:
        return []
    dtypes = {dist.input_name(i): dist.node(i).dtype for i in dist.inputs}
    entries = {
        n: "device_id" if dtype_class(dtypes.get(n, "")) == "int" else "constant(V)" for n in names
    }
    one = len(names) == 1
    return [
        f"to pair {'it' if one else 'them'}, declare what {'it holds' if one else 'they hold'} "
        f"on each device in the --relations file, e.g. {json.dumps({'inputs': entries})}",
        '"device_id": the device\'s row-major id on the mesh; "device_id(AXIS)": its '
        'coordinate on mesh axis AXIS; "constant(V)": V on every device; '
        '"per_device([V0, V1, ...])": V0 on device 0, V1 on device 1, ...',
    ]


def _lacking(side: str, other: str, names: list[str]) -> str:
    """`distributed input `rank` has no baseline input of its name`, or the plural."""
    listed = ", ".join(f"`{n}`" for n in names)
    if len(names) == 1:
        return f"{side} input {listed} has no {other} input of its name"
    return f"{side} inputs {listed} have no {other} inputs of their names"


def _axis_following_tiles(tiles: TileSharding, dim: int, mesh: Mesh, where: str) -> str | None:
    """The mesh axis whose coordinate is the tile index along `dim` on every device, read
    from the annotation's device assignment; None when the annotation gives no devices."""
    grid, devices = tiles.device_grid, tiles.devices
    if grid is None or devices is None or len(devices) != mesh.size:
        return None
    if not any(size == grid[dim] for _, size in mesh.axes):
        return None  # no axis of that size: the caller's message says so
    positions = list(itertools.product(*(range(n) for n in grid)))
    for axis, size in mesh.axes:
        if size == grid[dim] and all(
            mesh.coords(device)[axis] == index[dim]
            for index, device in zip(positions, devices, strict=True)
        ):
            return axis
    raise ScalifyError(
        f"the sharding of dim {dim} puts its {grid[dim]} blocks on devices that do not follow "
        f"any axis of mesh {mesh} (row-major device ids)",
        where,
        notes=[
            "pass the mesh in the graph's device order with --mesh, or give the layout in "
            "a --relations file"
        ],
    )


def _axes_following_tiles(
    tiles: TileSharding, dim: int, mesh: Mesh, used: set[str]
) -> tuple[str, ...]:
    """Two or more mesh axes whose coordinates, the first the most significant, count the
    tile index along `dim` on every device (EasyDeL shards a weight over fsdp and sp at
    once): that dim is a shard over each in turn. () when the annotation gives no devices
    or no such axes exist."""
    grid, devices = tiles.device_grid, tiles.devices
    if grid is None or devices is None or len(devices) != mesh.size:
        return ()
    positions = list(itertools.product(*(range(n) for n in grid)))
    free = [(n, size) for n, size in mesh.axes if n not in used and size > 1]
    for k in range(2, len(free) + 1):
        for axes in itertools.permutations(free, k):
            if math.prod(size for _, size in axes) != grid[dim]:
                continue
            joined = ",".join(n for n, _ in axes)
            if all(
                mesh.coordinate(device, joined) == index[dim]
                for index, device in zip(positions, devices, strict=True)
            ):
                return tuple(n for n, _ in axes)
    return ()


def _annotated_devices(tiles: TileSharding, mesh: Mesh) -> bool:
    return tiles.devices is not None and len(tiles.devices) == mesh.size


def _some_axes_of(count: int, mesh: Mesh, used: set[str]) -> bool:
    """Whether some unused axes (one or several) have `count` devices in all."""
    free = [size for name, size in mesh.axes if name not in used and size > 1]
    return any(
        math.prod(sizes) == count
        for k in range(1, len(free) + 1)
        for sizes in itertools.combinations(free, k)
    )


def _from_tiles(tiles: TileSharding, mesh: Mesh, where: str, base_shape, dist_shape) -> Layout:
    """The shards an annotation states, each dim over the axes its devices follow. A dim
    whose blocks together are larger than the baseline's (a converter's padded heads or
    widths; inputs and outputs alike) is the baseline's padded, or repeated and padded, first."""
    placements = []
    used: set[str] = set()
    for dim, count in enumerate(tiles.tiles):
        if count == 1:
            continue
        names = tiles.axes[dim] if tiles.axes and dim < len(tiles.axes) else ()
        names = tuple(n for n in names if n in mesh.names)
        following = _axis_following_tiles(tiles, dim, mesh, where)
        if following is not None and len(names) <= 1:
            names = (following,)
        if not names:
            names = _axes_following_tiles(tiles, dim, mesh, used)
        if not names and _annotated_devices(tiles, mesh) and _some_axes_of(count, mesh, used):
            raise ScalifyError(  # the devices say where the blocks are: no guess from sizes
                f"dim {dim} is split {count} ways on devices that follow no axis of mesh "
                f"{mesh}, nor several in turn (row-major device ids)",
                where,
                notes=["give the layout in a --relations file"],
            )
        if not names:
            names = _axes_for_ratio(count, mesh, used, where, dim)
        if dist_shape[dim] * count != base_shape[dim]:
            n = math.prod(mesh.axis_size(name) for name in names)
            placements += _padding(dim, base_shape[dim], dist_shape[dim], n) or ()
        for name in names:
            used.add(name)
            placements.append(Placement("shard", name, dim=dim))
    return tuple(placements)


def _axes_for_ratio(ratio: int, mesh: Mesh, used: set[str], where: str, dim: int):
    candidates = [n for n, size in mesh.axes if size == ratio and n not in used]
    if len(candidates) == 1:
        return (candidates[0],)
    if not candidates:
        raise ScalifyError(
            f"dim {dim} is split {ratio} ways, which matches no axis of mesh {mesh}",
            where,
            notes=["pass --mesh NAME=SIZE,... or give the layout in --relations"],
        )
    raise ScalifyError(
        f"dim {dim} is split {ratio} ways, which matches axes {', '.join(candidates)} of mesh "
        f"{mesh}; say which in a --relations file",
        where,
    )


def _padding(dim: int, b: int, d: int, n: int) -> Layout | None:
    """How a dim of size b reaches a block of d > b / n elements on each of n devices: its
    blocks repeated k = d * n // b times (KV heads repeated for the q heads) and padded at
    the end to d * n, the padding less than one block (no device holds padding alone), as a
    checkpoint converter lays out heads or a width that the degree does not divide. None
    when no such layout fits."""
    if d * n <= b:
        return None
    times, rest = divmod(d * n, b)
    if rest >= d:
        return None
    repeat = (Placement("repeated", "", dim=dim, size=times),) if times > 1 else ()
    return repeat + ((Placement("padded", "", dim=dim, size=d * n),) if rest else ())


def _padded_value(dim: int, b: int, d: int, mesh: Mesh, used: set[str]) -> Layout | None:
    """`_padding` over the one free axis that fits (zeros in the padding are then assumed,
    and the report lists it); None unless exactly one does."""
    fits = [
        value + (Placement("shard", axis, dim=dim),)
        for axis in mesh.names
        if axis not in used and (value := _padding(dim, b, d, mesh.axis_size(axis))) is not None
    ]
    return fits[0] if len(fits) == 1 else None


def _from_shapes(
    base_shape, dist_shape, mesh: Mesh, where: str, taken: frozenset[str] = frozenset()
) -> Layout:
    """The shards the shape ratios show, over axes not in `taken`."""
    if len(base_shape) != len(dist_shape):
        raise ScalifyError(
            f"rank differs: baseline {list(base_shape)} vs distributed {list(dist_shape)}",
            where,
            notes=["give its layout in a --relations file"],
        )
    placements = []
    used: set[str] = set(taken)
    for dim, (b, d) in enumerate(zip(base_shape, dist_shape, strict=True)):
        if b == d:
            continue
        if d and b % d and (value := _padded_value(dim, b, d, mesh, used)):
            used.add(value[-1].axis)
            placements += value
            continue
        if d == 0 or b % d:
            raise ScalifyError(
                f"dim {dim}: baseline size {b} is not a multiple of distributed size {d}", where
            )
        for axis in _axes_for_ratio(b // d, mesh, used, where, dim):
            used.add(axis)
            placements.append(Placement("shard", axis, dim=dim))
    return tuple(placements)


def _shape_key(shape: tuple[int, ...], given: dict[str, str]) -> str | None:
    """The relations file's entry for every input of this local shape (a key such as
    `[2048, 1152]`: one line for a weight that each layer of a model has)."""
    for key in given:
        if key.startswith("[") and key.endswith("]"):
            sizes = [t.strip() for t in key[1:-1].split(",") if t.strip()]
            if all(t.isdigit() for t in sizes) and tuple(map(int, sizes)) == tuple(shape):
                return key
    return None


def check_shape(layout: Layout, base_shape, dist_shape, mesh: Mesh, where: str) -> None:
    """Each placement fits the shape the placements before it leave (innermost first), and
    the layout gives the distributed shape."""
    _check_steps(layout, layout, base_shape, mesh, where)
    _check_parts(layout, base_shape, mesh, where)
    expected = local_shape(tuple(base_shape), layout, mesh)
    if expected != tuple(dist_shape):
        raise ScalifyError(
            f"layout {layout_str(layout)} gives local shape {list(expected)} but the "
            f"distributed graph has {list(dist_shape)}",
            where,
        )


def _check_steps(steps: Layout, layout: Layout, base_shape, mesh: Mesh, where: str) -> None:
    """Each of `steps` (the placements of `layout`, or of one of its parts) fits the shape
    the steps before it leave."""
    shape = list(base_shape)
    for p in steps:
        if p.kind not in ("shard", "padded", "repeated"):
            continue
        if not 0 <= p.dim < len(shape):
            raise ScalifyError(
                f"{layout_str(layout)}: dim {p.dim} out of range for shape {list(base_shape)}",
                where,
            )
        size = shape[p.dim]
        if p.kind == "padded" and p.size < size:
            raise ScalifyError(
                f"{layout_str(layout)}: {p} is shorter than dim {p.dim} (size {size})", where
            )
        if p.kind == "repeated" and size % p.unit:
            raise ScalifyError(
                f"{layout_str(layout)}: {p} needs dim {p.dim} (size {size}) to be whole runs "
                f"of {p.unit}",
                where,
            )
        if p.kind == "shard" and not p.parts and size % mesh.axis_size(p.axis):
            raise ScalifyError(
                f"mesh axis {p.axis}={mesh.axis_size(p.axis)} does not divide dim {p.dim} "
                f"(size {size}) of shape {list(base_shape)}"
                + ("" if size == base_shape[p.dim] else " after the padding or repeats"),
                where,
            )
        shape = list(local_shape(tuple(shape), (p,), mesh))


def _check_parts(layout: Layout, base_shape, mesh: Mesh, where: str) -> None:
    """Parts cover their dim exactly, each splits evenly over the axis, and no other
    placement cuts that dim (whose blocks would then be blocks of blocks of parts)."""
    parted = [p for p in layout if p.parts]
    if len(parted) > 1:
        raise ScalifyError(f"{layout_str(layout)}: only one placement may have parts", where)
    for p in parted:
        if sum(p.parts) != base_shape[p.dim]:
            raise ScalifyError(
                f"{layout_str(layout)}: the parts add up to {sum(p.parts)}, but dim {p.dim} "
                f"of shape {list(base_shape)} has {base_shape[p.dim]}",
                where,
            )
        for size, values in zip(p.parts, p.part_values, strict=False):
            if any(q.dim != p.dim for q in values):
                raise ScalifyError(
                    f"{layout_str(layout)}: a part's padding or repeats are along dim "
                    f"{p.dim}, the dim of the parts",
                    where,
                )
            part_shape = tuple(size if d == p.dim else s for d, s in enumerate(base_shape))
            _check_steps(values, layout, part_shape, mesh, where)
        n = mesh.axis_size(p.axis)
        if any(size % n for size in p.part_sizes()):
            raise ScalifyError(
                f"{layout_str(layout)}: mesh axis {p.axis}={n} does not divide every part",
                where,
            )
        if any(q is not p and q.kind == "shard" and q.dim == p.dim for q in layout):
            raise ScalifyError(
                f"{layout_str(layout)}: dim {p.dim} has parts and another shard", where
            )


def input_relations(
    base: Graph, dist: Graph, mesh: Mesh, given: RelationsFile | None
) -> list[Relation]:
    relations = []
    given_inputs = dict(given.inputs) if given else {}
    shape_keys_used: set[str] = set()
    for base_id, dist_id in pair_inputs(base, dist):
        name = dist.input_name(dist_id)
        where = f"{dist.path}: input {name}"
        b_shape, d_shape = base.node(base_id).shape, dist.node(dist_id).shape
        key = _shape_key(d_shape, given_inputs)
        if key is not None:  # an input of its shape: the entry is no unknown name
            shape_keys_used.add(key)
        if name in given_inputs:  # a name comes before its shape
            layout = parse_layout(given_inputs.pop(name), mesh, given.path)
            source = "relations file"
        elif key is not None:
            layout = parse_layout(given_inputs[key], mesh, given.path)
            source = f"relations file, inputs of shape {key}"
        elif dist_id in dist.input_shardings:
            layout = _from_tiles(dist.input_shardings[dist_id], mesh, where, b_shape, d_shape)
            source = "annotation"
        elif name in dist.input_layouts:
            placed, placed_global = dist.input_layouts[name]
            # the split its shape shows beyond the DTensor's own (TP's block, which FSDP
            # then shards) is the outer one
            inner = parse_layout(placed, mesh, where)
            taken = frozenset(p.axis for p in inner)
            layout = _from_shapes(b_shape, placed_global, mesh, where, taken) + inner
            source = "DTensor placement"
        else:
            layout = _from_shapes(b_shape, d_shape, mesh, where)
            source = "inferred from shapes"
        if source in ("annotation", "inferred from shapes") and any(
            p.kind == "padded" for p in layout
        ):
            source += "; its padding assumed to hold zeros"
        check_shape(layout, b_shape, d_shape, mesh, where)
        relations.append(Relation(dist_id, base_id, name, layout, source))
    for key in shape_keys_used:
        given_inputs.pop(key)
    if given_inputs:
        names = [dist.input_name(d) for d in dist.inputs]
        raise ScalifyError(
            f"relations file names inputs that the distributed graph does not "
            f"have: {', '.join(sorted(given_inputs))}",
            given.path,
            notes=[f"its inputs: {', '.join(names[:40])}" + (", ..." if len(names) > 40 else "")],
        )
    return relations


def output_relations(
    base: Graph,
    dist: Graph,
    mesh: Mesh,
    given: RelationsFile | None,
    inputs: list[Relation] | None = None,
) -> list[Relation]:
    """The layout each distributed output must have. In order: what the relations file, the
    DTensor placement or the sharding annotation says; the layout of the input the output
    is the gradient or updated value of (a training step: `inputs` gives it); else
    replicate. In a partitioned module, an output whose local shape differs and whose
    layout nothing gives is an error: a verdict resting on the default would be wrong."""
    followed = {r.name: r for r in inputs or ()}
    if len(base.outputs) != len(dist.outputs):
        raise ScalifyError(
            f"the baseline has {len(base.outputs)} outputs and the distributed "
            f"graph has {len(dist.outputs)}",
            dist.path,
        )
    relations = []
    for index, (base_id, dist_id) in enumerate(zip(base.outputs, dist.outputs, strict=True)):
        where = f"{dist.path}: output {index}"
        b_shape, d_shape = base.node(base_id).shape, dist.node(dist_id).shape
        if given and given.outputs is not None and index >= len(given.outputs):
            raise ScalifyError(
                f"relations file gives {len(given.outputs)} output layouts "
                f"but there are {len(dist.outputs)} outputs",
                given.path,
            )
        if given and given.outputs is not None and given.outputs[index] is not None:
            layout, source = parse_layout(given.outputs[index], mesh, given.path), "relations file"
        elif index in dist.output_layouts:
            layout = parse_layout(dist.output_layouts[index], mesh, dist.path)
            source = "DTensor placement"
            weight = dist.input_layouts.get(dist.output_inputs.get(index, ""))
            if weight is not None:  # a DTensor weight's gradient: its placements say what the
                # weight's did, inside the split the weight's global shape shows (TP's block)
                taken = frozenset(p.axis for p in layout)
                layout = _from_shapes(b_shape, weight[1], mesh, where, taken) + layout
        elif dist_id in dist.output_shardings:
            layout = _from_tiles(dist.output_shardings[dist_id], mesh, where, b_shape, d_shape)
            source = "annotation"
        elif base_id in base.output_shardings:  # an SPMD dump: the global module states it
            layout = _from_tiles(base.output_shardings[base_id], mesh, where, b_shape, d_shape)
            source = "baseline annotation"
        elif dist.output_inputs.get(index) in followed:
            weight = followed[dist.output_inputs[index]]
            layout, source = weight.layout, f"the layout of input {weight.name}"
        elif given and given.infer_outputs and b_shape != d_shape:
            layout, source = _from_shapes(b_shape, d_shape, mesh, where), "inferred from shapes"
        elif b_shape != d_shape and dist.input_shardings:  # a partitioned module: the
            # default cannot be meant (a traced program promises whole outputs unless its
            # DTensor placements say otherwise, and a shard left over is its bug)
            raise _unstated_output(index, b_shape, d_shape, mesh, where, dist.path)
        else:
            layout, source = REPLICATE, "default"
        _check_parts(layout, b_shape, mesh, where)
        relations.append(Relation(dist_id, base_id, f"output {index}", layout, source))
    return relations


__all__ = [
    "REPLICATE",
    "Relation",
    "input_relations",
    "output_relations",
    "pair_inputs",
    "read_relations_file",
]
