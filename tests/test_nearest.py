"""For a suspect no rule explains, the report names the rules over its op (the nearest rule
family), filtered by arity and family membership."""

from __future__ import annotations

from conftest import REPO
from scalify.compiler.compile import compile_rule_dir

from scalify.report.nearest import rules_for_op

RULES = compile_rule_dir(REPO / "rules")


def test_rules_over_a_binary_elementwise_op():
    names = rules_for_op("sub", 2, RULES)
    assert {"elementwise_shard_binary", "additive_partial"} <= set(names)
    assert "elementwise_shard_unary" not in names  # a unary pattern over the same family
    assert len(names) == len(set(names))  # spread expansions named once


def test_rules_over_dot_and_an_op_without_rules():
    assert {"dot_shard_rhs", "dot_contracted_shards", "rescaled_dot"} <= set(
        rules_for_op("dot", 2, RULES)
    )
    assert rules_for_op("opaque", 1, RULES) == []
