"""Print the README's set-up commands, one per line: the lines of the first `sh` block under
"## Set up and run". `.ci/newcomer` runs exactly these, and `tests/test_readme.py` checks
their shape, so the README and CI cannot drift apart."""

from __future__ import annotations

import sys
from pathlib import Path

HEADING = "## Set up and run"


def setup_commands(readme: str) -> list[str]:
    """The commands of the README's set-up block, in order."""
    _, found, after = readme.partition(HEADING)
    if not found:
        raise ValueError(f"the README has no {HEADING!r} section")
    _, fence, block = after.partition("```sh\n")
    if not fence:
        raise ValueError(f"the README's {HEADING!r} section has no ```sh block")
    body, _, _ = block.partition("```")
    return [line.strip() for line in body.splitlines() if line.strip()]


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "README.md"
    print("\n".join(setup_commands(path.read_text())))
