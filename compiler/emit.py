"""Emit lowered rules as egglog text through a jinja2 template."""

from __future__ import annotations

from functools import cache

import jinja2

from .lower import EggRule


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("scalify.compiler", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def emit_rules(path: str, rules: list[EggRule]) -> str:
    """The egglog program text for one rule file."""
    return _environment().get_template("rules.egg.j2").render(path=path, rules=rules)


def emit_families(families: dict[str, tuple[str, ...]]) -> str:
    """Facts stating which ops belong to which family."""
    return "\n".join(
        f'(InFamily "{member}" "{name}")'
        for name, members in sorted(families.items())
        for member in members
    )
