"""The verification result, independent of how it is printed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

EQUIVALENT, NOT_EQUIVALENT, UNKNOWN = "equivalent", "not_equivalent", "unknown"


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

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == EQUIVALENT else 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
