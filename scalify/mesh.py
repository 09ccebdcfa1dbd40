"""The device mesh: named axes over row-major device ids, and which axes a collective's
replica groups stand for.

Groups are matched once per distinct group list; what reaches the e-graph is only the axis
name, so reasoning never expands per rank.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

from scalify.errors import ScalifyError


@dataclass(frozen=True)
class Mesh:
    """Axes in order; device id = row-major index over the axis coordinates."""

    axes: tuple[tuple[str, int], ...]

    @property
    def size(self) -> int:
        total = 1
        for _, n in self.axes:
            total *= n
        return total

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    def axis_size(self, name: str) -> int:
        """The size of an axis, or of several comma-joined (their product). A sub-axis
        `a/q` (the groups of q neighbours along a) has size(a) / q, `a%q` (a device's
        place in its group) q."""
        sizes = dict(self.axes)
        total = 1
        for part in name.split(","):
            axis, op, q = sub_axis_parts(part)
            n = sizes[axis]
            total *= n if op is None else (n // q if op == "/" else q)
        return total

    def coordinate(self, device: int, name: str) -> int:
        """The device's coordinate on an axis, or on several comma-joined as one (the first
        the most significant, as collectives over them order their devices)."""
        coords, value = self.coords(device), 0
        for part in name.split(","):
            axis, op, q = sub_axis_parts(part)
            c = (
                coords[axis]
                if op is None
                else (coords[axis] // q if op == "/" else coords[axis] % q)
            )
            value = value * self.axis_size(part) + c
        return value

    def stride(self, axis: str) -> int:
        """How far apart in device ids consecutive coordinates of a mesh axis are (the
        product of the sizes of the axes after it)."""
        stride = 1
        for name, size in reversed(self.axes):
            if name == axis:
                return stride
            stride *= size
        raise KeyError(axis)

    def __str__(self) -> str:
        return ",".join(f"{name}={n}" for name, n in self.axes)

    def coords(self, device: int) -> dict[str, int]:
        """The coordinate of `device` along each axis (row-major, first axis slowest)."""
        coords = {}
        for name, size in reversed(self.axes):
            coords[name] = device % size
            device //= size
        return coords

    def groups(self, axes: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
        """The replica groups of a set of axes: devices that differ only in those axes, each
        group ordered by its coordinates along them (first axis slowest)."""
        sizes = [n for _, n in self.axes]
        chosen = [i for i, (name, _) in enumerate(self.axes) if name in axes]
        others = [i for i in range(len(sizes)) if i not in chosen]
        strides = [1] * len(sizes)
        for i in range(len(sizes) - 2, -1, -1):
            strides[i] = strides[i + 1] * sizes[i + 1]
        result = []
        for outer in itertools.product(*(range(sizes[i]) for i in others)):
            base = sum(c * strides[i] for c, i in zip(outer, others, strict=True))
            group = tuple(
                base + sum(c * strides[i] for c, i in zip(inner, chosen, strict=True))
                for inner in itertools.product(*(range(sizes[i]) for i in chosen))
            )
            result.append(group)
        return tuple(result)

    def other_axes(self, name: str) -> tuple[str, ...]:
        """The axes that, with the axis or sub-axis `name`, place every device: the other
        mesh axes, and for a sub-axis its twin (`a%q` for `a/q`)."""
        if "," in name:
            raise ValueError(f"one axis or sub-axis expected, got {name!r}")
        axis, op, q = sub_axis_parts(name)
        twin = () if op is None else (f"{axis}{'%' if op == '/' else '/'}{q}",)
        return tuple(a for a in self.names if a != axis) + twin

    def group_of(self, device: int, name: str) -> tuple[int, ...]:
        """What the devices of `device`'s group along the axis or sub-axis `name` share:
        their coordinates on the other axes."""
        return tuple(self.coordinate(device, other) for other in self.other_axes(name))

    def axis_groups(self, name: str) -> tuple[tuple[int, ...], ...]:
        """The replica groups of one axis or sub-axis (`a/q`, `a%q`), each ordered by the
        coordinate on it."""
        if "," in name:
            raise ValueError(f"one axis or sub-axis expected, got {name!r}")
        if sub_axis_parts(name)[1] is None:
            return self.groups((name,))
        return _sub_axis_groups(self, name)

    @cached_property
    def _axis_sets(self) -> list[tuple[str, ...]]:
        names = self.names
        return [
            combo for r in range(1, len(names) + 1) for combo in itertools.combinations(names, r)
        ]

    def axes_of_groups(self, groups: tuple[tuple[int, ...], ...], ordered: bool) -> str | None:
        """The mesh axes whose groups are exactly `groups` (as a comma-joined name), or None.

        `ordered`: the order inside a group matters (all_gather, reduce_scatter, all_to_all
        concatenate in group order); for all_reduce only membership matters.
        """
        if not groups:
            return ",".join(self.names)
        return _resolve(self, groups, ordered)

    def axis_images(self, pairs: tuple[tuple[int, int], ...]) -> dict[str, str] | None:
        """For a permute (source, target pairs) that hands every device the value of the
        device whose coordinates are its own with some axes exchanged (XLA's transpose of
        the fsdp and tensor devices): each axis c mapped to the axis whose coordinate on the
        receiver is c's coordinate on the sender. None for any other permute."""
        everyone = list(range(self.size))
        if sorted(s for s, _ in pairs) != everyone or sorted(t for _, t in pairs) != everyone:
            return None
        images: dict[str, str] = {}
        for c, size in self.axes:
            candidates = [
                e
                for e, other in self.axes
                if other == size
                and e not in images.values()
                and all(self.coords(s)[c] == self.coords(t)[e] for s, t in pairs)
            ]
            if not candidates:
                return None
            images[c] = c if c in candidates else candidates[0]
        return images


def _canonical(groups, ordered: bool) -> frozenset:
    return frozenset(tuple(g) if ordered else frozenset(g) for g in groups)


def _resolve(mesh: Mesh, groups, ordered: bool) -> str | None:
    """The axes whose groups are `groups`; where `groups` lists some devices' groups only (a
    traced program knows its own device's group), the axes whose groups include them."""
    wanted = _canonical(groups, ordered)
    every = {d for g in groups for d in g} == set(range(mesh.size))
    for combo in mesh._axis_sets:
        have = _canonical(mesh.groups(combo), ordered)
        if have == wanted or (not every and wanted <= have):
            return ",".join(combo)
    if every:  # groups of q neighbours along an axis, or the devices q apart along it
        for axis, n in mesh.axes:
            for q in (q for q in range(2, n) if n % q == 0):
                for sub in sub_axes(axis, q):
                    if _canonical(_sub_axis_groups(mesh, sub), ordered) == wanted:
                        return sub
    return None


def _sub_axis_groups(mesh: Mesh, sub: str) -> tuple[tuple[int, ...], ...]:
    """The replica groups of a sub-axis: devices that differ only in their coordinate on it,
    each group ordered by that coordinate."""
    groups: dict[tuple, list[int]] = {}
    for device in range(mesh.size):
        groups.setdefault(mesh.group_of(device, sub), []).append(device)
    return tuple(tuple(sorted(g, key=lambda d: mesh.coordinate(d, sub))) for g in groups.values())


def sub_axes(axis: str, q: int) -> tuple[str, str]:
    """The two sub-axes that cut `axis` into groups of q neighbouring devices: which group
    (`axis/q`, the more significant) and where in it (`axis%q`)."""
    return f"{axis}/{q}", f"{axis}%{q}"


def sub_axis_parts(name: str) -> tuple[str, str | None, int]:
    """(axis, "/" or "%" or None, q) for an axis name, a sub-axis name among them."""
    for op in ("/", "%"):
        if op in name:
            axis, q = name.split(op)
            return axis, op, int(q)
    return name, None, 0


def parse_mesh(text: str) -> Mesh:
    """`tp=8` or `dp=2,tp=4` (first axis slowest). Raises ScalifyError on bad syntax."""
    axes = []
    for part in text.split(","):
        name, sep, size = part.strip().partition("=")
        if not sep or not name.isidentifier() or not size.isdigit() or int(size) < 1:
            raise ScalifyError(
                f"bad mesh {text!r}: expected NAME=SIZE[,NAME=SIZE...], e.g. tp=8 or dp=2,tp=4"
            )
        axes.append((name, int(size)))
    if len({name for name, _ in axes}) != len(axes):
        raise ScalifyError(f"bad mesh {text!r}: an axis is named twice")
    return Mesh(tuple((name, n) for name, n in axes if n > 1))
