"""docs/reference/cli.md is made from the CLI's own parser, so it cannot drift from it:
`SCALIFY_BLESS=1 pytest tests/test_cli_reference.py` writes it again after a change."""

from __future__ import annotations

import argparse
import os

from conftest import REPO

from scalify.cli import build_parser

PAGE = REPO / "docs" / "reference" / "cli.md"
INTRO = """# CLI reference

Every `scalify` command and option, as `scalify COMMAND --help` prints them (this page is
generated from the parser by `tests/test_cli_reference.py`; `SCALIFY_BLESS=1` writes it).
Exit codes: 0 equivalent (or success), 1 not proved (`not_equivalent` or `unknown`), 2 bad
input or usage, 3 equivalent only under input layouts Scalify inferred from shapes or from
how both programs cut a tensor, which nothing stated or confirmed (`equivalent, assuming`:
the report names them and the `--relations` entry that states them).
"""


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _commands(parser: argparse.ArgumentParser, prefix: str = "scalify"):
    """(command line, parser) for every command that takes arguments, in order."""
    for name, sub in _subparsers(parser):
        line = f"{prefix} {name}"
        nested = list(_subparsers(sub))
        if nested:
            yield from _commands(sub, line)
        else:
            yield line, sub


def reference() -> str:
    sections = [INTRO]
    for line, sub in _commands(build_parser()):
        sub.prog = line
        help_text = sub.format_help().rstrip()
        sections.append(f"## `{line}`\n\n```text\n{help_text}\n```\n")
    return "\n".join(sections)


def test_the_cli_reference_is_the_parser_s_help(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width
    text = reference()
    if os.environ.get("SCALIFY_BLESS") == "1":
        PAGE.write_text(text)
    assert PAGE.exists() and PAGE.read_text() == text, (
        "docs/reference/cli.md is out of date: SCALIFY_BLESS=1 pytest tests/test_cli_reference.py"
    )
