"""Which dim of a masked lookup's index each dim of its value shows, through reshapes that
merge dims and split them back (Megatron's `logits_2d[arange, target.view(-1)]`)."""

from __future__ import annotations

from scalify.canon.block_lookup import dim_atoms, dim_labels
from scalify.ir import Node


def _nodes(*specs):
    """Nodes from (id, op, operands, shape, attrs), the first one the path's bottom."""
    return {i: Node(i, op, ops, shape, "s32", attrs) for i, op, ops, shape, attrs in specs}


def test_a_merge_split_back_shows_the_same_dims():
    nodes = _nodes(
        (0, "parameter", (), (8, 2), {}),  # the index
        (1, "merge", (0,), (16,), {"dim": 0, "inner": 2}),
        (2, "split", (1,), (16, 1), {"dim": 0, "inner": 1}),  # the lookup's index
        (3, "take_along", (9, 2), (16, 1), {"dim": 1}),  # the lookup, one entry per row
        (4, "merge", (3,), (16,), {"dim": 0, "inner": 1}),
        (5, "split", (4,), (8, 2), {"dim": 0, "inner": 2}),  # its value, as the index
    )
    index = dim_atoms(nodes, [2, 1, 0])
    assert dim_labels(nodes, [2, 1, 0]) == [(0, 1), None]
    assert dim_labels(nodes, [5, 4, 3], index) == [0, 1]


def test_a_split_that_cuts_other_dims_has_no_correspondence():
    nodes = _nodes(
        (0, "parameter", (), (8, 2), {}),
        (1, "merge", (0,), (16,), {"dim": 0, "inner": 2}),
        (2, "split", (1,), (4, 4), {"dim": 0, "inner": 4}),  # cuts the 8 into 4 x 2
    )
    assert dim_labels(nodes, [2, 1, 0]) is None
