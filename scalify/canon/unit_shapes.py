"""Where a reshape that only inserts size-1 dims puts its operand's dims: a question about
shapes alone, asked by canonicalisation and by the all-to-all fold."""

from __future__ import annotations

# A reshape inserting unit dims beside unit dims of its own is read in at most this many ways.
MAX_UNIT_PLACEMENTS = 4


def unit_placements(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Each way a reshape that only inserts size-1 dims places the source's dims, in order:
    the target dims the source dims land on, every other target dim of size 1. One way when
    the source has no size-1 dim; several when it has (`[1, 8] -> [1, 1, 8]`). None (an
    empty list) beyond MAX_UNIT_PLACEMENTS, and for any other reshape."""
    if len(target) <= len(source):
        return []
    found: list[tuple[int, ...]] = []

    def place(i: int, start: int, chosen: tuple[int, ...]) -> None:
        if len(found) > MAX_UNIT_PLACEMENTS:
            return
        if i == len(source):
            if all(target[d] == 1 for d in range(len(target)) if d not in chosen):
                found.append(chosen)
            return
        for d in range(start, len(target)):
            if target[d] == source[i]:
                place(i + 1, d + 1, (*chosen, d))

    place(0, 0, ())
    return found if len(found) <= MAX_UNIT_PLACEMENTS else []
