"""The .srl compiler: each check reports `path:line:col: error:` with the line and a caret."""

from __future__ import annotations

import pytest
from scalify.compiler.compile import compile_texts

from scalify.errors import ScalifyError

GOOD = """\
family elementwise = add, mul

# f(x[blk], y[blk]) == f(x, y)[blk]
rule ew:
  match   f(X, Y)
  where   f in elementwise
          X ~ x @ shard(d, a)
          Y ~ y @ shard(d, a)
  rewrite f(X, Y) ~ f(x, y) @ shard(d, a)
"""


def compile_error(text: str) -> ScalifyError:
    with pytest.raises(ScalifyError) as info:
        compile_texts([("r.srl", text)])
    return info.value


def test_good_rule_lowers_to_an_egglog_rule():
    rules = compile_texts([("r.srl", GOOD)])
    (rule,) = rules.rules
    assert rule.doc == "f(x[blk], y[blk]) == f(x, y)[blk]"
    assert rule.source == "r.srl:4"
    text = rules.program()
    assert '(InFamily "add" "elementwise")' in text
    assert "(= ?n0 (Op2 ?f ?_k1 ?X ?Y))" in text
    assert "(union ?n0 (Shard (Op2 ?f ?_k1 ?x ?y) ?d ?a))" in text
    assert ':ruleset layout :name "ew"' in text


def test_duplicate_rule_names_are_refused():
    text = GOOD + "\n# again\nrule ew:\n  match neg(X)\n  rewrite neg(X) == X\n"
    error = compile_error(text)
    assert "duplicate rule name `ew`" in error.message
    assert error.line == 12
    assert any("first defined at r.srl:4" in n for n in error.notes)


def test_shadowed_rule_is_refused():
    copy = GOOD.replace("rule ew:", "rule ew_again:").replace("family elementwise = add, mul\n", "")
    error = compile_error(GOOD + "\n" + copy)
    assert "shadowed by `ew`" in error.message


def test_families_are_shared_across_files():
    other = (
        "# neg of a shard\nrule n:\n  match f(X)\n  where f in elementwise\n"
        "          X ~ x @ shard(d, a)\n  rewrite f(X) ~ f(x) @ shard(d, a)\n"
    )
    core = GOOD.replace("add, mul", "add, mul, neg")
    rules = compile_texts([("core.srl", core), ("tp.srl", other)])
    assert [r.name for r in rules.rules] == ["ew", "n"]


def test_family_with_unknown_member():
    error = compile_error("family e = add, frob\n")
    assert "unknown op `frob`" in error.message


def test_spread_expands_into_one_rule_per_alternative():
    text = GOOD.replace("shard(d, a)\n          Y", "spread(d, a)\n          Y").replace(
        "Y ~ y @ shard(d, a)", "Y ~ y @ spread(d, a)"
    )
    rules = compile_texts([("r.srl", text)])
    names = [r.name for r in rules.rules]
    assert names == [f"ew#{k}" for k in range(1, 6)]  # 3 x 3 choices less the 4 with no shard
    program = rules.program()
    assert "(FreeAlong ?Y ?d ?a)" in program and "(Splat " in program


def test_spread_is_refused_in_a_rewrite():
    text = GOOD.replace(
        "rewrite f(X, Y) ~ f(x, y) @ shard(d, a)", "rewrite f(X, Y) ~ f(x, y) @ spread(d, a)"
    )
    error = compile_error(text)
    assert "`spread` only constrains operands in `where`" in error.message


def test_variable_roles_are_checked_in_the_rewrite():
    text = GOOD.replace(
        "rewrite f(X, Y) ~ f(x, y) @ shard(d, a)", "rewrite f(X, Y) ~ f(x, y) @ shard(a, d)"
    )
    error = compile_error(text)
    assert error.message == "`a` is an axis here, where a dim is expected"


def test_a_where_equation_between_terms_is_refused():
    text = GOOD.replace(
        "          Y ~ y @ shard(d, a)\n", "          Y ~ y @ shard(d, a)\n          X == X\n"
    )
    error = compile_error(text)
    assert "where a dim is expected" in error.message
