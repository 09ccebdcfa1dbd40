"""The declaration of one canonical op, read by every table that needs to know about it.

An op is declared once (`OpSpec`) in the module of its family; the compiler's op tables, the
signature keys and dim maps, the simulator and the fuzzer all read that declaration. Nothing
here imports the generic modules that read it: they look specs up when they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from scalify.ir import Node
    from scalify.mesh import Mesh


@dataclass
class Signature:
    """Everything the e-graph needs to know about an op apart from its operands: its key,
    where each operand dim goes (`out_dims`, `in_dims`) and the attributes rules read."""

    key: str
    out_dims: dict[tuple[int, int], int] = field(default_factory=dict)
    in_dims: dict[tuple[int, int], int] = field(default_factory=dict)
    attrs_s: dict[str, str] = field(default_factory=dict)
    attrs_i: dict[str, int] = field(default_factory=dict)


# per_side(one side's nodes) -> that side's extra attributes and output shape
PerSide = Callable[[dict[int, "Node"]], tuple[dict, "tuple | None"]]


@dataclass(frozen=True)
class KeyInput:
    """What an op's key may read: the node, its operands (local shapes on the distributed
    side), the mesh, and whether this broadcast's new sizes are pinned by its users."""

    node: Node
    operands: list[Node]
    mesh: Mesh
    shape_free_broadcast: bool = False

    @property
    def ranks(self) -> list[int]:
        return [len(o.shape) for o in self.operands]


# key(input, signature) -> the key's extra parts; it sets the Signature attrs rules may read.
KeyFunction = Callable[[KeyInput, "Signature"], list[str]]
# dim_map(node, operand shapes, output rank) -> per operand, where each of its dims lands in
# the output (-1 - i for the i-th consumed one, -1 for one that is gone).
DimMap = Callable[["Node", list[tuple[int, ...]], int], list[list[int]]]
# kernel(node, operand values) -> the value on one device
Kernel = Callable[["Node", list["np.ndarray"]], "np.ndarray"]
# generate(builder) -> the id of a random instance of the op (and the nodes it needs); the
# builder (`scalify/soundness/fuzz.py`) adds both programs node by node, the distributed side with
# local shapes; it is not named here, since the fuzzer imports this module
Generator = Callable[[Any], int]
# check_types(attrs, operand shapes): raise NotSimulable for a draw HLO would reject
TypeCheck = Callable[[dict, list[tuple[int, ...]]], None]
# fuzz_shape(node, operand shape, mesh) -> the output shape of an op with no one-device kernel
ShapeFunction = Callable[["Node", tuple[int, ...], "Mesh"], tuple[int, ...]]


def attrs_key(k: KeyInput, sig: Signature) -> list[str]:
    """Every attribute is part of the meaning (ops rules do not look into)."""
    return [repr(sorted((name, str(v)) for name, v in k.node.attrs.items()))]


def attrs_and_shape_key(k: KeyInput, sig: Signature) -> list[str]:
    """Every attribute and the output shape (ops rules do not look into, whose sizes are
    part of what they compute)."""
    node = k.node
    return [repr(sorted((n, str(v)) for n, v in node.attrs.items())), f"shape={ints(node.shape)}"]


def int_attrs_key(*names: str) -> KeyFunction:
    """A key of integer attributes that rules may read, in the order given."""

    def key(k: KeyInput, sig: Signature) -> list[str]:
        a = k.node.attrs
        for name in names:
            sig.attrs_i[name] = int(a[name])
        return [f"{name}={a[name]}" for name in names]

    return key


def no_key(k: KeyInput, sig: Signature) -> list[str]:
    """The op and its operand ranks say it all."""
    return []


def ints(values) -> str:
    return ",".join(str(v) for v in values)


@dataclass(frozen=True)
class Scaling:
    """How an op meets a positive factor: dividing the operands named here by n divides the
    result by n. `each`: any one of them alone (a dot, a product, a lookup's table);
    `together`: all of them at once (a sum, a select's two branches, a pad and its fill).
    `operands=None` names every operand; `when` is an attribute and the values it must have
    (a reduce that sums or takes a maximum or minimum, which a positive factor passes)."""

    mode: str
    operands: tuple[int, ...] | None = None
    when: tuple[str, tuple[str, ...]] | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("each", "together"):
            raise ValueError(f"scaling mode must be each or together, got {self.mode!r}")


EACH = Scaling("each")
TOGETHER = Scaling("together")


@dataclass(frozen=True)
class OpSpec:
    """One canonical op.

    `arity`: the operand counts a rule may match (none: rules cannot name the op).
    `attrs`: the attributes a rule may read, with their kind, "S" (string) or "I" (integer);
    the key sets them on the signature. `engine_attrs`: attributes the key sets for the
    prelude's own rules alone, which rule files may not read; `name` stands for a family
    `name:<dim>`, one a dim. `elementwise`: same shapes in, that shape out.
    `collective`: runs across devices (the SPMD driver simulates it, `fuzz_shape` gives its
    local output shape). `pure`: equal operands give equal results on every device.
    `ordered_groups`: the order of a replica group matters (which device holds which block).
    `sized_operand`: rules may read the sizes of the first operand (`size(X, d)`).
    `scaling`: how a division by a group's size passes through the op (see `Scaling`).
    """

    name: str
    arity: tuple[int, ...] = ()
    attrs: Mapping[str, str] = field(default_factory=dict)
    engine_attrs: Mapping[str, str] = field(default_factory=dict)
    key: KeyFunction = attrs_key
    dim_map: DimMap | None = None
    kernel: Kernel | None = None
    generate: Generator | None = None
    check_types: TypeCheck | None = None
    fuzz_shape: ShapeFunction | None = None
    elementwise: bool = False
    collective: bool = False
    pure: bool = True
    ordered_groups: bool = False
    sized_operand: bool = False
    scaling: Scaling | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))
        bad = {k: v for k, v in self.attrs.items() if v not in ("S", "I")}
        if bad:
            raise ValueError(f"op `{self.name}`: attribute kinds must be S or I, got {bad}")


def registry(*families: list[OpSpec]) -> dict[str, OpSpec]:
    """The specs of every family by name; a name declared twice is an error."""
    table: dict[str, OpSpec] = {}
    for family in families:
        for spec in family:
            if spec.name in table:
                raise ValueError(f"op `{spec.name}` is declared twice")
            table[spec.name] = spec
    return table


def same_shape_maps(node: Any, shapes: list[tuple[int, ...]], out_rank: int) -> list[list[int]]:
    """Every operand of the output's rank keeps its dims (elementwise ops, collectives)."""
    return [list(range(len(s))) if len(s) == out_rank else [] for s in shapes]
