"""One error type for everything a user can get wrong: rule files, graph files, flags.

Every error prints as `path:line:col: error: message`, then the offending source line with a
caret under the column, then notes. The CLI turns it into exit code 2, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ScalifyError(Exception):
    """A problem in the user's input, with where it is and what was expected."""

    message: str
    path: str = ""
    line: int = 0
    column: int = 0
    source_line: str = ""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        where = self.path
        if self.line:
            where += f":{self.line}"
            if self.column:
                where += f":{self.column}"
        head = f"{where}: error: {self.message}" if where else f"error: {self.message}"
        lines = [head]
        if self.source_line:
            lines.append(f"  {self.source_line.rstrip()}")
            if self.column:
                lines.append("  " + " " * (self.column - 1) + "^")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def line_of(text: str, line: int) -> str:
    """The 1-based `line` of `text`, or empty when out of range."""
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""
