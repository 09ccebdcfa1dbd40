"""Every compiler error, as a bad rule file beside the message it must give
(tests/compiler_errors/NN_name.srl and .expected), and the error table of the `.srl`
reference made from the same files, so the documented messages are the real ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from scalify.compiler.compile import compile_texts

from scalify.errors import ScalifyError

HERE = Path(__file__).resolve().parent / "compiler_errors"
REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "srl.md"
FILES = sorted(HERE.glob("*.srl"))


def rendered(path: Path) -> list[str]:
    """The error's first line and its notes, as `scalify rules compile` prints them."""
    with pytest.raises(ScalifyError) as info:
        compile_texts([(path.name, path.read_text())])
    lines = info.value.render().splitlines()
    assert any(line.strip() == "^" or line.rstrip().endswith("^") for line in lines[1:]), lines
    return [lines[0]] + [line.strip() for line in lines if line.strip().startswith("note:")]


def table_row(path: Path) -> str:
    """The reference's row for one file: what the error is, and the message."""
    what = path.read_text().splitlines()[0].removeprefix("# error: ")
    first, *notes = rendered(path)
    extra = "".join(f" with note `` {n.removeprefix('note: ')} ``" for n in notes)
    return f"| {what} | `` {first} ``{extra} |"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_bad_rule_file_gives_its_message(path):
    expected = path.with_suffix(".expected").read_text().splitlines()
    assert rendered(path) == expected


def test_the_reference_lists_every_error_as_the_compiler_prints_it():
    table = "\n".join(["| error | example |", "|---|---|", *map(table_row, FILES)])
    assert table in REFERENCE.read_text(), (
        "docs/reference/srl.md's compiler-error table differs from tests/compiler_errors; "
        "the table it should hold:\n" + table
    )


def test_the_reference_shows_the_grammar_as_it_is():
    grammar = (Path(__file__).resolve().parents[1] / "grammar" / "srl.lark").read_text()
    assert "```\n" + grammar + "```\n" in REFERENCE.read_text(), (
        "docs/reference/srl.md's grammar block differs from grammar/srl.lark"
    )
