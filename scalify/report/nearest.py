"""For a suspect that no rule explains: the rules that match its op, so the reader knows which
family of rules came closest and where a missing rule would go."""

from __future__ import annotations

import re

from scalify.compiler.compile import CompiledRuleSet

_TOP = re.compile(r'^\(= \?n0 \(Op(?P<arity>\d) (?:"(?P<op>[a-z_]+)"|\?(?P<var>\w+)) ')
_FAMILY = re.compile(r'^\(InFamily \?(?P<var>\w+) "(?P<family>\w+)"\)$')


def rules_for_op(op: str, arity: int, rules: CompiledRuleSet) -> list[str]:
    """The `.srl` rules whose pattern has `op` with `arity` operands (or a family holding
    it) at the top, in rule-set order, each named once (a `spread` rule's expansions share
    its name)."""
    names: list[str] = []
    for rule in rules.rules:
        if _top_matches(op, arity, rule.query, rules.families):
            name = rule.name.split("#")[0]
            if name not in names:
                names.append(name)
    return names


def _top_matches(
    op: str, arity: int, query: list[str], families: dict[str, tuple[str, ...]]
) -> bool:
    for atom in query:
        top = _TOP.match(atom)
        if top is None:
            continue
        if int(top["arity"]) != arity:
            return False
        if top["op"]:
            return top["op"] == op
        for other in query:
            family = _FAMILY.match(other)
            if family and family["var"] == top["var"]:
                return op in families.get(family["family"], ())
        return False
    return False
