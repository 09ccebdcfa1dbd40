"""Collectives and the device's own identity: ops only a distributed program has. The SPMD
driver (`scalify/simulate/spmd.py`) runs them across devices; they have no one-device
kernel, and a fuzz instance's baseline is the collective's operand itself."""

from __future__ import annotations

import math

from scalify.mesh import Mesh
from scalify.ops.spec import KeyInput, OpSpec, ints, same_shape_maps
from scalify.values import NotSimulable


def permute_senders(node) -> dict[int, int]:
    """A collective-permute's sender for each device it hands a value to."""
    return {target: source for source, target in node.attrs["pairs"]}


def collective_axes(node, mesh: Mesh) -> str:
    """The mesh axes a collective runs over, or a description of groups that are none."""
    groups = tuple(tuple(g) for g in node.attrs.get("groups", ()))
    found = mesh.axes_of_groups(groups, ordered=node.op in _ORDERED)
    if found is not None:
        return found
    return "groups" + "{" + ",".join("{" + ints(g) + "}" for g in groups) + "}"


def _with_axes(axes: str, k: KeyInput, sig) -> list[str]:
    a = k.node.attrs
    sig.attrs_s["axes"] = axes
    parts = [f"axes={axes}"]
    if "op" in a:
        sig.attrs_s["op"] = str(a["op"])
        parts.append(f"op={a['op']}")
    for name in ("dim", "split_dim", "concat_dim"):
        if name in a:
            sig.attrs_i[name] = int(a[name])
            parts.append(f"{name}={a[name]}")
    return parts


def _groups_key(k: KeyInput, sig) -> list[str]:
    return _with_axes(collective_axes(k.node, k.mesh), k, sig)


def _pairs_key(k: KeyInput, sig) -> list[str]:
    pairs = tuple(k.node.attrs.get("pairs", ()))
    images = k.mesh.axis_images(pairs)
    if images is not None:  # what the permute-* rules of prelude.egg read
        sig.attrs_s["permutes"] = "axes"
        sig.attrs_s.update({f"image:{c}": e for c, e in images.items()})
    return _with_axes("pairs=" + ints(f"{s}>{t}" for s, t in pairs), k, sig)


def _group_size(node, mesh: Mesh) -> int:
    """The size of the fuzzer's groups: the product of the axes it drew (`_axes`)."""
    return math.prod(mesh.axis_size(a) for a in str(node.attrs.get("_axes", "")).split(",") if a)


def _gathered(node, shape, mesh: Mesh) -> tuple[int, ...]:
    out = list(shape)
    out[node.attrs["dim"]] *= _group_size(node, mesh)
    return tuple(out)


def _scattered(node, shape, mesh: Mesh) -> tuple[int, ...]:
    out = list(shape)
    out[node.attrs["dim"]] //= _group_size(node, mesh)
    return tuple(out)


def _exchanged(node, shape, mesh: Mesh) -> tuple[int, ...]:
    size = _group_size(node, mesh)
    out = list(shape)
    if out[node.attrs["split_dim"]] % size:
        raise NotSimulable("all_to_all split dim not divisible by the group")
    out[node.attrs["split_dim"]] //= size
    out[node.attrs["concat_dim"]] *= size
    return tuple(out)


def _instance(b, op: str) -> int:
    """A collective over a random axis, every axis, or groups of no axis, of a randomly laid
    out x."""
    exchange = op == "all_to_all"
    rank = int(b.rng.integers(2 if exchange else 1, 4 if exchange else 3))
    shape = [b.size() for _ in range(rank)]
    if exchange:  # every dim stays divisible by any group after any sharding
        shape = [n * b.unit for n in shape]
    x = b.input(tuple(shape), "f32", b.operand_layout(0, rank, b.layout(rank)))
    names = b.mesh.names
    roll = b.rng.random()
    if roll < 0.35:
        axes = (b.axis,)
    elif roll < 0.7:
        axes = (names[int(b.rng.integers(len(names)))],)
    elif roll < 0.85:
        axes = names
    else:
        axes = ()
    groups = b.mesh.groups(axes) if axes else _odd_groups(b.mesh, b.rng)
    attrs: dict = {"groups": groups, "_axes": ",".join(axes)}
    spec = _SPECS[op]
    if "op" in spec.attrs:
        roll = b.rng.random()
        attrs["op"] = "sum" if roll < 0.7 else "max" if roll < 0.85 else "min"
    if exchange:
        attrs["split_dim"] = int(b.rng.integers(rank))
        attrs["concat_dim"] = int(b.rng.integers(rank))
    elif "dim" in spec.attrs:
        attrs["dim"] = int(b.rng.integers(rank))
        if spec.fuzz_shape is _scattered and b.dist[x].shape[attrs["dim"]] % max(
            1, math.prod(b.mesh.axis_size(a) for a in axes)
        ):
            attrs["dim"] = 0
    if not axes:
        attrs["_axes"] = ""
    return b.op(op, (x,), "f32", attrs)


def _odd_groups(mesh: Mesh, rng) -> tuple[tuple[int, ...], ...]:
    """Groups of no axis: every device, in a shuffled order (order matters for gathers)."""
    devices = rng.permutation(mesh.size).tolist()
    return (tuple(devices),)


def _rank_index_key(k: KeyInput, sig) -> list[str]:
    kind = k.node.attrs.get("kind", "")
    sig.attrs_s["kind"] = str(kind)
    return [f"kind={kind}"]


def _collective(name: str, attrs: dict[str, str], **fields) -> OpSpec:
    return OpSpec(
        name,
        arity=(1,),
        attrs=attrs,
        key=fields.pop("key", _groups_key),
        dim_map=same_shape_maps,
        generate=fields.pop("generate", lambda b: _instance(b, name)),
        collective=True,
        pure=False,
        **fields,
    )


OPS = [
    _collective("all_reduce", {"op": "S", "axes": "S"}, fuzz_shape=lambda n, s, m: tuple(s)),
    _collective("all_gather", {"dim": "I", "axes": "S"}, fuzz_shape=_gathered, ordered_groups=True),
    _collective(
        "reduce_scatter",
        {"dim": "I", "op": "S", "axes": "S"},
        fuzz_shape=_scattered,
        ordered_groups=True,
    ),
    _collective(
        "all_to_all",
        {"dim": "I", "split_dim": "I", "concat_dim": "I", "axes": "S"},
        fuzz_shape=_exchanged,
        ordered_groups=True,
    ),
    _collective("collective_permute", {"axes": "S"}, key=_pairs_key, generate=None),
    OpSpec(
        "rank_index",
        arity=(0,),
        attrs={"kind": "S"},
        key=_rank_index_key,
        pure=False,
    ),
]


_SPECS = {spec.name: spec for spec in OPS}
_ORDERED = frozenset(spec.name for spec in OPS if spec.ordered_groups)
