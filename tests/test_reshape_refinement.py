"""A reshape of one run of dims read through the finest shape both sides cut into: the
steps, and the shapes they pass through."""

from __future__ import annotations

import math

import pytest

from scalify.canon.reshape_refinement import refined_steps


def _shapes(source: list[int], steps) -> list[list[int]]:
    shape, seen = list(source), []
    for op, dim, inner in steps:
        if op == "merge":
            assert shape[dim + 1] == inner
            shape = shape[:dim] + [shape[dim] * inner] + shape[dim + 2 :]
        else:
            assert shape[dim] % inner == 0
            shape = shape[:dim] + [shape[dim] // inner, inner] + shape[dim + 1 :]
        seen.append(shape)
    return seen


@pytest.mark.parametrize(
    ("source", "target", "through"),
    [
        # Megatron's queries of one KV group per device: b, g=1, (h/g)*d -> b*h, d; the
        # heads (g, h/g) merged before the batch joins them
        ([2, 1, 8], [4, 4], [[2, 1, 2, 4], [2, 2, 4], [4, 4]]),
        ([2, 2, 8], [8, 4], [[2, 2, 2, 4], [2, 4, 4], [8, 4]]),
        ([2, 2, 2], [8], [[2, 4], [8]]),  # three dims merged from the inner end
        ([1, 6], [2, 3], [[1, 2, 3], [2, 3]]),
    ],
)
def test_the_steps_pass_through_the_finest_shape(source, target, through):
    steps = refined_steps(source, target)
    assert steps is not None
    assert _shapes(source, steps) == through
    assert math.prod(through[-1]) == math.prod(target)


def test_cuts_that_do_not_nest_have_no_refinement():
    assert refined_steps([4, 6], [6, 4]) is None
    assert refined_steps([2, 3], [3, 2]) is None


def test_a_run_of_unit_dims_only_has_no_refinement():
    assert refined_steps([1, 1], [1]) is None
