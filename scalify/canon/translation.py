"""The translation check: the canonical graph computes what the loaded graph computes.

Canonical folds are directed rewrites written in Python. A wrong one can prove a wrong
program as easily as an unsound rule, and no rule fuzzer sees it. This check runs the graph
as the frontend loaded it and as canonicalisation left it on the same small random inputs
(every device of the program at once when it has collectives or reads its device id, each
device drawing its own inputs) and compares every output. It is the fuzzer of the folds:
the tests run it over every stored graph, and `scalify verify --check-canon` (or
`SCALIFY_CHECK_CANON=1`) runs it on the user's graphs before proving.

Inputs are drawn as the canonical graph's parameters allow: a lookup index that a fold
assumed in range (`assumed_range`) is drawn in range, since that assumption is what the
fold relies on and what the report states.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import numpy as np

from scalify.errors import ScalifyError
from scalify.ir import Graph, Node
from scalify.mesh import Mesh
from scalify.ops import COLLECTIVES
from scalify.simulate.spmd import random_input, run_spmd, simulable, values_close
from scalify.values import NotSimulable

ENV_FLAG = "SCALIFY_CHECK_CANON"
SEEDS = (0, 1)


def enabled() -> bool:
    """Whether loading should check each canonicalisation (`SCALIFY_CHECK_CANON=1`)."""
    return os.environ.get(ENV_FLAG, "") not in ("", "0")


def snapshot(graph: Graph) -> Graph:
    """The graph as loaded, kept aside before the folds edit it in place."""
    return copy.deepcopy(graph)


@dataclass(frozen=True)
class Departure:
    """An output whose canonical value differs from its loaded value."""

    output: int
    device: int
    index: tuple[int, ...]
    loaded: object
    canonical: object

    def describe(self) -> str:
        return (
            f"output {self.output} on device {self.device} at {list(self.index)}: "
            f"{self.canonical} after canonicalisation, {self.loaded} as loaded"
        )


def device_count(graph: Graph) -> int:
    """How many devices the program runs on, as far as it says: its partition count, else
    one past the highest device id its replica groups name, else one."""
    if graph.num_partitions and graph.num_partitions > 1:
        return graph.num_partitions
    named = [
        d
        for n in graph.nodes.values()
        if n.op in COLLECTIVES
        for g in n.attrs.get("groups", ())
        for d in g
    ]
    return max(named, default=0) + 1


def _runs_per_device(graph: Graph) -> bool:
    return any(n.op in COLLECTIVES or n.op == "rank_index" for n in graph.nodes.values())


def _parameters(graph: Graph) -> dict[int, Node]:
    """Parameters by their position among the program's inputs."""
    return {
        int(n.attrs.get("index", i)): n for i, n in enumerate(graph.node(i) for i in graph.inputs)
    }


Values = dict[int, list[np.ndarray]]  # a value per device, by parameter position


def _inputs(loaded: Graph, canonical: Graph, devices: int, seed: int) -> Values:
    """One random value a device for every parameter position, drawn as the canonical
    graph's parameter (its assumed range, if a fold gave it one) allows."""
    rng = np.random.default_rng(seed)
    drawn: Values = {}
    kept = _parameters(canonical)
    for position, node in sorted(_parameters(loaded).items()):
        like = kept.get(position, node)
        drawn[position] = [random_input(like, rng) for _ in range(devices)]
    return drawn


def _run(graph: Graph, drawn: Values, mesh: Mesh) -> list[list[np.ndarray]]:
    by_position = _parameters(graph)
    inputs = {
        node.id: drawn[position] for position, node in by_position.items() if position in drawn
    }
    values = run_spmd(graph, inputs, mesh)
    return [values[o] for o in graph.outputs]


def departures(loaded: Graph, canonical: Graph, seeds=SEEDS) -> list[Departure] | None:
    """Where the canonical graph's outputs part from the loaded graph's on random inputs;
    None when the two cannot be run here (an op without numeric semantics, too large)."""
    devices = device_count(loaded) if _runs_per_device(loaded) else 1
    mesh = Mesh((("devices", devices),))
    if len(loaded.outputs) != len(canonical.outputs):
        return [
            Departure(len(canonical.outputs), 0, (), len(loaded.outputs), len(canonical.outputs))
        ]
    if not (simulable(loaded, mesh) and simulable(canonical, mesh)):
        return None
    found: list[Departure] = []
    for seed in seeds:
        drawn = _inputs(loaded, canonical, devices, seed)
        try:
            before = _run(loaded, drawn, mesh)
        except (NotSimulable, KeyError, ValueError, IndexError, TypeError):
            return None  # the program as loaded has no numeric reading here: nothing to check
        try:
            after = _run(canonical, drawn, mesh)
        except NotSimulable:
            return None
        except (KeyError, ValueError, IndexError, TypeError) as err:
            return [Departure(0, 0, (), "a value", f"no run ({type(err).__name__}: {err})")]
        for output, (was, now) in enumerate(zip(before, after, strict=True)):
            for device, (w, g) in enumerate(zip(was, now, strict=True)):
                if np.shape(w) != np.shape(g):
                    found.append(Departure(output, device, (), np.shape(w), np.shape(g)))
                    continue
                w, g, _, close = values_close(np.asarray(w), np.asarray(g))
                if not np.all(close):
                    bad = tuple(int(i) for i in np.argwhere(~np.asarray(close))[0])
                    found.append(Departure(output, device, bad, w[bad].item(), g[bad].item()))
        if found:
            return found
    return found


def check(loaded: Graph, canonical: Graph) -> None:
    """Raise when canonicalisation changed what the program computes: an internal error
    that must never turn into a verdict."""
    found = departures(loaded, canonical)
    if found:
        raise ScalifyError(
            "internal error: canonicalisation changed what the program computes "
            f"({found[0].describe()}); please report it with this graph file",
            canonical.path,
        )
