"""A sharding annotation or a DTensor weight read as a layout. A dim cut over two mesh axes
at once (EasyDeL shards weights over fsdp and sp together) is a shard over each in turn, the
first the more significant, as the annotation's device order says; an order no axes follow
is an error. A DTensor weight's placements are its layout inside any split its shape shows."""

from __future__ import annotations

import pytest

from scalify.errors import ScalifyError
from scalify.ir import TileSharding
from scalify.layout import Placement
from scalify.mesh import parse_mesh
from scalify.relations import _from_tiles


def test_a_dim_cut_over_two_axes_is_a_shard_over_each():
    mesh = parse_mesh("fsdp=2,sp=2")  # device = 2 * fsdp + sp
    tiles = TileSharding(tiles=(4, 1), devices=(0, 1, 2, 3), device_grid=(4, 1))
    assert _from_tiles(tiles, mesh, "w", (8, 4), (2, 4)) == (
        Placement("shard", "fsdp", dim=0),
        Placement("shard", "sp", dim=0),
    )
    swapped = TileSharding(tiles=(4, 1), devices=(0, 2, 1, 3), device_grid=(4, 1))
    assert _from_tiles(swapped, mesh, "w", (8, 4), (2, 4)) == (
        Placement("shard", "sp", dim=0),
        Placement("shard", "fsdp", dim=0),
    )


def test_blocks_on_devices_no_axes_count_are_an_error():
    mesh = parse_mesh("fsdp=2,sp=2")
    tiles = TileSharding(tiles=(4, 1), devices=(0, 3, 1, 2), device_grid=(4, 1))
    with pytest.raises(ScalifyError, match="split 4 ways"):
        _from_tiles(tiles, mesh, "w", (8, 4), (2, 4))


def test_a_set_of_axes_is_one_axis_to_the_simulator():
    """Collectives over several axes order their devices with the first axis slowest; a
    shard over the set counts its blocks so."""
    mesh = parse_mesh("fsdp=2,tp=3,sp=2")
    assert mesh.axis_size("fsdp,sp") == 4
    assert [mesh.coordinate(d, "fsdp,sp") for d in range(mesh.size)] == [
        0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3,
    ]  # fmt: skip
    assert all(
        [mesh.coordinate(d, "fsdp,sp") for d in group] == [0, 1, 2, 3]
        for group in mesh.groups(("fsdp", "sp"))
    )


def test_a_dtensor_weight_inside_a_split_its_shape_shows():
    """FSDP's shard (a DTensor over dp) of a weight TP already split (its DTensor's global
    shape is TP's block): the TP split is the outer one, FSDP's inside it."""
    from scalify.ir import Graph, Node
    from scalify.relations import input_relations

    def graph(shape):
        x = Node(0, "parameter", (), shape, "f32", {"name": "w", "index": 0}, name="w")
        return Graph("g", {0: x}, inputs=[0], outputs=[0])

    base, dist = graph((16, 4)), graph((4, 4))
    dist.input_layouts = {"w": ("shard(0, dp)", (8, 4))}
    (relation,) = input_relations(base, dist, parse_mesh("dp=2,tp=2"), None)
    assert relation.layout == (Placement("shard", "tp", dim=0), Placement("shard", "dp", dim=0))
    assert relation.source == "DTensor placement"
