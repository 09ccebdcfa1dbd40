"""Layout kinds a rule file declares (`layout cyclic(d, a) = i * n + r`): checked here, once,
for what makes an index map a layout (every place of the dim held by exactly one device), so
that every rule, simulation and fuzz run over the kind can take that for granted."""

from __future__ import annotations

from scalify.layout import INDEX_NAMES, IndexMap, held_places, index_map_text

from .ast import LayoutDecl, RuleFile
from .check import error_at
from .signatures import LAYOUTS

# the axis sizes and dim sizes (multiples of the axis size) an index map is tried on
_COUNTS = (1, 2, 3, 4, 8)
_MULTIPLES = (1, 2, 3, 5)


def check_layout_decls(files: list[RuleFile]) -> dict[str, IndexMap]:
    """Each declared kind's index map by name; an error at the declaration for a name taken,
    a name the map may not read, or a map that is not a partition of the dim's places."""
    declared: dict[str, tuple[LayoutDecl, RuleFile]] = {}
    for rule_file in files:
        for decl in rule_file.layouts:
            if decl.name in LAYOUTS or decl.name in ("padded", "repeated"):
                raise error_at(
                    decl.span, rule_file.text, f"`{decl.name}` is a built-in layout kind"
                )
            if decl.name in declared:
                first = declared[decl.name][0].span
                raise error_at(
                    decl.span,
                    rule_file.text,
                    f"layout kind `{decl.name}` is declared twice",
                    f"first declared at {first.path}:{first.line}",
                )
            for name in decl.names:
                if name.name not in INDEX_NAMES:
                    raise error_at(
                        name.span,
                        rule_file.text,
                        f"an index map reads {', '.join(INDEX_NAMES)}, not `{name.name}`",
                        "i: the device's place along the dim; r: its coordinate on the axis; "
                        "n: the axis's size; size: the dim's global size",
                    )
            if problem := partition_problem(decl.index):
                raise error_at(
                    decl.span,
                    rule_file.text,
                    f"layout kind `{decl.name}` = {index_map_text(decl.index)} is not a layout: "
                    f"{problem}",
                    "every place of the dim must be held by exactly one device",
                )
            declared[decl.name] = (decl, rule_file)
    return {name: decl.index for name, (decl, _) in declared.items()}


def partition_problem(index: IndexMap) -> str:
    """Why `index` does not hand each place of a dim to exactly one device, on the first
    axis and dim sizes where it does not; empty if it does on all that are tried."""
    for count in _COUNTS:
        for size in (count * k for k in _MULTIPLES):
            holder: dict[int, int] = {}
            for coord in range(count):
                for local, place in enumerate(held_places(index, coord, count, size).tolist()):
                    at = (
                        f"with {count} device(s) on a dim of {size}, device {coord}'s place {local}"
                    )
                    if not 0 <= place < size:
                        return f"{at} is place {place}, outside the dim"
                    if place in holder:
                        return f"{at} is place {place}, which device {holder[place]} holds too"
                    holder[place] = coord
    return ""
