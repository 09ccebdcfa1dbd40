"""The verification result, independent of how it is printed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

EQUIVALENT, NOT_EQUIVALENT, UNKNOWN = "equivalent", "not_equivalent", "unknown"


@dataclass
class PictureNode:
    """One box of a suspect's neighbourhood picture: enough to draw it in any format."""

    id: int
    name: str
    op: str
    shape: str  # dtype[dims], e.g. f32[8,64]
    operands: list[int]  # ids of this node's operands that are shown too (the edges)
    role: str  # distributed: suspect, operand, user, nearby; baseline: related, context
    relation: str = ""  # how the node is tied to the other graph, in words
    line: int = 0


@dataclass
class Neighbourhood:
    """The distributed nodes around a suspect and the baseline nodes they correspond to, so
    a reader can compare the two sides. Bounded (see scalify/report/neighbourhood.py)."""

    distributed: list[PictureNode]
    baseline: list[PictureNode]
    baseline_basis: str  # how the baseline nodes were chosen, in words
    hidden: int = 0  # nodes within reach that were left out to keep the picture small


SHOWS_AT = "shows at"  # a root-cause suspect's second site: where its wrong value shows
MADE_AT = "partial reduction made at"  # a missing all-reduce's: where its partial sum was made


@dataclass
class Site:
    """A second place a suspect involves: where its wrong value shows, when the suspect is
    the root cause upstream, or where the partial sum a missing all-reduce should have
    reduced was made."""

    role: str  # SHOWS_AT or MADE_AT
    op: str
    node: str
    file: str
    line: int


@dataclass
class Suspect:
    """A distributed node where agreement with the baseline breaks."""

    op: str
    node: str
    file: str
    line: int
    function: str
    reason: str
    operands: list[str] = field(default_factory=list)
    framework_op: str = ""
    neighbourhood: Neighbourhood | None = None
    # for a suspect no rule explains: the rules whose pattern has this op at the top
    nearest_rules: list[str] = field(default_factory=list)
    # when the line is inside a library's model code: the user's line that called into it
    called_from: str = ""
    # what both programs run on random inputs say here (scalify/report/numeric_frontier.py)
    numerically: str = ""
    second: Site | None = None
    # `called_from` as (file, line): the call that passed this op's function its operands
    caller: tuple[str, int] | None = None
    # when the line is the user's code a library called back (a Keras layer's `call`): the
    # library's line that made the op (Keras's backend `einsum`)
    via: str = ""

    def sites(self) -> list[tuple[str, int]]:
        """The suspect's lines, its own first: a bug fixed at any is this suspect's (the
        second site, or the call whose arguments the op received)."""
        lines = [(self.file, self.line)]
        if self.second is not None:
            lines.append((self.second.file, self.second.line))
        if self.caller is not None:
            lines.append(self.caller)
        return lines


@dataclass
class OutputResult:
    index: int
    node: str
    expected: str
    proven: str
    ok: bool


@dataclass
class Report:
    verdict: str
    baseline: str
    distributed: str
    mesh: str
    outputs: list[OutputResult]
    suspects: list[Suspect]
    relations: dict[str, list[str]]
    stats: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    counterexample: str = ""
    # a not_equivalent verdict's witness when no counterexample could be run: the rules'
    # refutation (not_equivalent is given with one or the other, never neither)
    refuted_by: str = ""
    # an `equivalent` verdict that rests on input layouts Scalify inferred (from shapes, from
    # how both programs cut a tensor) and neither a user stated nor values confirmed: each as
    # `name: layout (source)`. Its own outcome: `equivalent, assuming`, exit code 3.
    assumptions: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """The verdict, with `, assuming` when an equivalence rests on inferred layouts."""
        if self.verdict == EQUIVALENT and self.assumptions:
            return f"{EQUIVALENT}, assuming"
        return self.verdict

    @property
    def exit_code(self) -> int:
        if self.verdict == EQUIVALENT:
            return 3 if self.assumptions else 0
        return 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def confirming_entry(report: Report) -> str:
    """The relations-file entry that states every assumed layout (`name: layout (source)`)."""
    inputs = {}
    for assumption in report.assumptions:
        name, rest = assumption.split(": ", 1)
        inputs[name] = rest.split(" (", 1)[0]
    return json.dumps({"inputs": inputs})
