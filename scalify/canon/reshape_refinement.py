"""A reshape of one run of dims, read through the finest shape both sides cut into.

`[s, b, g, (h/g) * d] -> [s, b * h, d]` (Megatron's queries of grouped-query attention,
regrouped as batch x heads) is one run of dims. Merged first and split after, it passes
through `[s, b * h * d]`, where the batch and the heads are gone; split first into the
pieces both shapes are cut into (`[s, b, g, h/g, d]`) and merged after, it passes through a
shape where each is a dim of its own, and the merge of batch and heads that a later product
reads (`merged_batches.py`) is a chain of merges of its own. Both readings enter the e-graph
as equal values.
"""

from __future__ import annotations

import math


def refined_steps(source: list[int], target: list[int]) -> list[tuple[str, int, int]] | None:
    """The view steps, (op, dim relative to the run, inner size), that turn one run of dims
    `source` into `target` through their common refinement: each dim split into its pieces,
    the pieces (a unit dim of the source one of them) merged into the target's dims from the
    inner end (a head dim grouped as `g x h/g` stays a dim of its own before the batch joins
    it), the target's unit dims split off. None when the two cut their product at positions
    that do not nest."""
    if math.prod(source) != math.prod(target):
        return None
    kept = [n for n in target if n != 1]
    if not kept:
        return None  # only unit dims: nothing to cut
    pieces = _pieces([n for n in source if n != 1], kept)
    if pieces is None:
        return None
    steps: list[tuple[str, int, int]] = []
    sequence: list[int] = []  # every piece in order, the source's unit dims among them
    at = 0
    for size in source:  # each source dim split into its pieces
        if size == 1:
            sequence.append(1)
            continue
        own = _take(pieces, at, size)
        for k in range(len(own) - 1):
            steps.append(("split", len(sequence) + k, math.prod(own[k + 1 :])))
        sequence += own
        at += len(own)
    runs = _runs(sequence, kept)
    for position, run in enumerate(runs):  # each target dim merged from its inner end
        for k in reversed(range(len(run) - 1)):
            steps.append(("merge", position + k, math.prod(run[k + 1 :])))
    for j, size in enumerate(target):  # the target's unit dims split off
        if size == 1:
            steps.append(("split", 0, kept[0] if kept else 1) if j == 0 else ("split", j - 1, 1))
    return steps


def _runs(sequence: list[int], kept: list[int]) -> list[list[int]]:
    """The pieces of each target dim: a unit piece joins the dim it falls inside, or at a
    boundary the dim before it (the next one when there is none before)."""
    runs: list[list[int]] = [[] for _ in kept]
    target, total = 0, 1
    for piece in sequence:
        if target < len(kept) and total == kept[target] and piece != 1:
            target, total = target + 1, 1
        runs[min(target, len(kept) - 1)].append(piece)
        total *= piece
    return runs


def _pieces(source: list[int], target: list[int]) -> list[int] | None:
    cuts = sorted(set(_cumulative(source)) | set(_cumulative(target)))
    pieces, last = [], 1
    for cut in cuts:
        if cut % last:
            return None
        if cut != last:
            pieces.append(cut // last)
        last = cut
    return pieces


def _cumulative(sizes: list[int]) -> list[int]:
    out, total = [], 1
    for n in sizes:
        total *= n
        out.append(total)
    return out


def _take(pieces: list[int], at: int, size: int) -> list[int]:
    """The pieces from `at` whose product is `size`."""
    own, total = [], 1
    while total < size:
        own.append(pieces[at + len(own)])
        total *= own[-1]
    return own
