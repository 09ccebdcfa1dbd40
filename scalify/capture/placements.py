"""What a traced program returns: its tensors, and the layout DTensor says each one has.

Models return what their users need, not one tensor: torchtitan a `Shard(-1)` DTensor of
logits (loss parallel), transformers a `ModelOutput`. The traced program returns the
tensor leaves of that value (a pytree: tuples, dicts, `ModelOutput`s; other leaves, such
as a key/value cache object, are left out), each DTensor as its local tensor, and its
placements become the output's required layout (`Shard(d)` -> `shard(d, axis)`, `Partial`
-> `partial(op, axis)`), so a model is checked as it is written, without a wrapper.
"""

from __future__ import annotations

from typing import Any

import torch

from scalify.errors import ScalifyError
from scalify.mesh import Mesh

# (placements, mesh dim names, mesh shape) of a DTensor output; None for a plain tensor
Placed = tuple[tuple[Any, ...], tuple[str, ...], tuple[int, ...]] | None


def tensor_leaves(
    value: Any, placed: list[Placed], known: dict[int, str] | None = None, found=None
) -> tuple[torch.Tensor, ...]:
    """The tensors of `value` in pytree order, DTensors as their local tensors; what each
    one's placement was is appended to `placed`. `known` maps `id(tensor)` of tensors with a
    name (a weight's gradient, a weight an optimizer step updated) to that name; each leaf
    that is one of them is recorded in `found` as leaf index -> name."""
    from torch.utils._pytree import tree_leaves

    out: list[torch.Tensor] = []
    for leaf in tree_leaves(value):
        if not isinstance(leaf, torch.Tensor):
            continue
        if known and id(leaf) in known and found is not None:
            found[len(out)] = known[id(leaf)]
        if hasattr(leaf, "placements") and hasattr(leaf, "to_local"):
            mesh = leaf.device_mesh
            names = tuple(mesh.mesh_dim_names or ())
            placed.append((tuple(leaf.placements), names, tuple(int(n) for n in mesh.shape)))
            leaf = leaf.to_local()
        else:
            placed.append(None)
        out.append(leaf)
    return tuple(out)


def placement_text(placed: Placed, local_shape: tuple[int, ...]) -> str | None:
    """The layout of a DTensor output over its own mesh's dim names (`shard(2, tp)`), for a
    file read later against a mesh of those names; None for a plain tensor."""
    if placed is None:
        return None
    _, names, shape = placed
    if len(names) != len(shape):
        raise ScalifyError("a DTensor output on a device mesh without dim names")
    own = Mesh(tuple((name, size) for name, size in zip(names, shape, strict=True) if size > 1))
    return placement_layout(placed, local_shape, own)


def placement_layout(placed: Placed, local_shape: tuple[int, ...], mesh: Mesh) -> str | None:
    """The layout string of a DTensor output of local shape `local_shape` on `mesh` (None:
    not a DTensor, the default applies)."""
    if placed is None:
        return None
    placements, names, shape = placed
    rank = len(local_shape)
    parts: list[str] = []
    for i, placement in enumerate(placements):
        if shape[i] == 1 or placement.is_replicate():
            continue
        axis = _axis(names[i] if i < len(names) else None, shape[i], mesh)
        if type(placement).__name__ == "_StridedShard":
            parts.append(_strided(placement, local_shape, shape[i], axis))
        elif placement.is_shard():
            parts.append(f"shard({placement.dim % rank}, {axis})")
        elif placement.is_partial():
            op = str(getattr(placement, "reduce_op", "sum")).lower()
            if op not in ("sum", "max", "min"):
                raise ScalifyError(f"an output placed {placement}: only sum, max and min partials")
            parts.append(f"partial({op}, {axis})")
        else:
            raise ScalifyError(f"an output placed {placement}, which Scalify does not read")
    return " ".join(parts) or "replicate"


def _strided(placement: Any, local_shape: tuple[int, ...], devices: int, axis: str) -> str:
    """`_StridedShard(d, split_factor=k)`: dim d is k equal parts, each split over the mesh
    dim, the device holding its block of every part (transformers' packed [gate | up]
    weights, FSDP2 over TP): a shard with k parts, sizes in baseline units."""
    dim = placement.dim % len(local_shape)
    k = int(placement.split_factor)
    whole = local_shape[dim] * devices
    if k < 2 or whole % k:
        raise ScalifyError(f"an output placed {placement}, whose parts do not divide its dim")
    sizes = ", ".join([str(whole // k)] * k)
    return f"shard({dim}, {axis}, parts=[{sizes}])"


def _axis(name: str | None, size: int, mesh: Mesh) -> str:
    """The mesh axis a DTensor mesh dim is: by name, else the only axis of its size."""
    if name is not None and name in mesh.names:
        return name
    same = [a for a, n in mesh.axes if n == size]
    if len(same) == 1:
        return same[0]
    raise ScalifyError(
        f"an output is placed over a device-mesh dim {name or '(unnamed)'} of {size} devices, "
        f"which is no single axis of the mesh {mesh}; name the mesh dims as the mesh's axes"
    )
