"""`scalify rules lint` on the shipped rules, on broken rule folders, and golden blessing."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import REPO


def test_shipped_rules_lint_clean(cli):
    result = cli("rules", "lint", "--fuzz", "8", "-v")
    assert result.code == 0, result.out
    assert "rules: ok" in result.out
    assert "fuzz: dot_contracted_shards:" in result.out


def test_syntax_error_in_rule_file(cli, tmp_path):
    (tmp_path / "core.srl").write_text("rule broken:\n  match dot(X\n")
    result = cli("rules", "lint", "--fuzz", "0", str(tmp_path))
    assert result.code == 1
    assert "core.srl:2:" in result.out and "error:" in result.out and "^" in result.out


def copy_rules(tmp_path):
    target = tmp_path / "rules"
    shutil.copytree(REPO / "rules", target)
    return target


def test_golden_mismatch_shows_a_diff(cli, tmp_path):
    rules = copy_rules(tmp_path)
    srl = rules / "tp.srl"
    srl.write_text(srl.read_text().replace("outdim(1, d) >= 0", "outdim(1, d) > 0", 1))
    result = cli("rules", "lint", "--fuzz", "0", str(rules))
    assert result.code == 1
    assert "differs from the golden file" in result.out
    assert "-       (>= ?_dim2 0))" in result.out and "+       (> ?_dim2 0))" in result.out


def test_bless_rewrites_goldens(cli, tmp_path, monkeypatch):
    rules = copy_rules(tmp_path)
    (rules / "tests" / "tp.golden.egg").write_text("stale\n")
    monkeypatch.setenv("SCALIFY_BLESS", "1")
    assert cli("rules", "lint", "--fuzz", "0", str(rules)).code in (0, 1)
    monkeypatch.delenv("SCALIFY_BLESS")
    assert "dot_shard_rhs" in (rules / "tests" / "tp.golden.egg").read_text()


def test_rule_without_a_case_is_reported(cli, tmp_path):
    rules = copy_rules(tmp_path)
    extra = (
        "\n# -(x[blk]) == (-x)[blk], stated twice\nrule neg_shard_again:\n"
        "  match   neg(X)\n  where   X ~ x @ shard(d, a)\n"
        "  rewrite neg(X) ~ neg(x) @ shard(d, a)\n"
    )
    (rules / "tp.srl").write_text((rules / "tp.srl").read_text() + extra)
    result = cli("rules", "lint", "--fuzz", "0", "--bless", str(rules))
    assert "rule `neg_shard_again` has no case that must fire" in result.out
    assert "rule `neg_shard_again` has no near-miss case" in result.out


UNSOUND = """
# UNSOUND on purpose: gathering the pieces of a partial sum does not add them up
rule gather_partial_is_sum:
  match   all_gather[dim=d, axes=a](X)
  where   X ~ x @ partial(sum, a)
  rewrite all_gather[dim=d, axes=a](X) ~ x @ replicate
"""


def test_fuzzing_catches_a_planted_unsound_rule(cli, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(REPO / "rules" / "core.srl", rules / "core.srl")
    (rules / "bad.srl").write_text(UNSOUND)
    result = cli("rules", "lint", "--fuzz", "30", str(rules))
    assert result.code == 1
    assert "rule `gather_partial_is_sum` is UNSOUND" in result.out
    assert "bad.srl:3: error:" in result.out
    assert "seed " in result.out and "instance: mesh" in result.out


NEVER_FIRES = """
# exp(x) * exp(-x) == 1 on a shard: a three-op pattern no random one-op instance makes
rule product_of_inverse_exps:
  match   mul(exp(X), exp(neg(X)))
  where   X ~ x @ shard(d, a)
  rewrite mul(exp(X), exp(neg(X))) ~ mul(exp(x), exp(neg(x))) @ shard(d, a)
"""


def test_a_rule_fuzzing_never_fires_fails_lint_unless_its_file_says_why(cli, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(REPO / "rules" / "core.srl", rules / "core.srl")
    (rules / "extra.srl").write_text(NEVER_FIRES)
    result = cli("rules", "lint", "--fuzz", "25", "--bless", str(rules))
    assert "error: fuzzing never made rule `product_of_inverse_exps` fire" in result.out
    said = NEVER_FIRES + '  unfuzzed "a three-op pattern; the cases exercise it"\n'
    (rules / "extra.srl").write_text(said)
    # a rule that does fire, given a reason all the same
    core = (rules / "core.srl").read_text()
    unary = core.index("rule elementwise_shard_unary:")
    end = core.index("\n\n", unary)
    core = core[:end] + '\n  unfuzzed "no longer true"' + core[end:]
    (rules / "core.srl").write_text(core)
    result = cli("rules", "lint", "--fuzz", "25", "--bless", str(rules))
    assert "product_of_inverse_exps` fire" not in result.out
    assert (
        "warning: rule `elementwise_shard_unary` fires on random instances: its `unfuzzed` "
        "reason no longer holds" in result.out
    )


def test_rules_compile_prints_the_egglog_program(cli):
    result = cli("rules", "compile")
    assert result.code == 0
    assert '(InFamily "add" "elementwise")' in result.out
    assert ':name "dot_contracted_shards")' in result.out


def test_rules_compile_reports_a_bad_folder(cli, tmp_path):
    result = cli("rules", "compile", str(tmp_path / "missing"))
    assert result.code == 2 and "rules folder not found" in result.err


# Planted unsound versions of the lookup rules: each is refuted by the fuzzer, which is what
# makes the shipped rules' side conditions necessary. name: (rule files it needs, text, fuzz)
PLANTED_LOOKUP_RULES = {
    # block_take without size(T, d) == c: wrong block sizes show a false relation
    "block_take_any_size": (
        ("core.srl", "tp.srl"),
        """
# UNSOUND on purpose: the vocab-parallel lookup without checking that the table holds one block
rule block_take_any_size:
  match   select(broadcast[dims=bo](in_block[size=c](I, coord(a))),
                 take[dim=d, index_out=bo](T, block_offset[size=c](I, coord(a))), splat(z))
  where   T ~ t @ shard(d, a)
          I ~ i @ invariant(a)
          litint(z) == 0
  rewrite select(broadcast[dims=bo](in_block[size=c](I, coord(a))),
                 take[dim=d, index_out=bo](T, block_offset[size=c](I, coord(a))), splat(z))
          ~ take(t, i) @ partial(sum, a)
""",
        60,
    ),
    # a one-hot is not linear: the fuzzer's partial-sum operands refute it
    "one_hot_partial": (
        ("core.srl",),
        """
# UNSOUND on purpose: a one-hot of each device's part summed is no one-hot
rule one_hot_partial:
  match   one_hot(X)
  where   X ~ x @ partial(sum, a)
  rewrite one_hot(X) ~ one_hot(x) @ partial(sum, a)
""",
        40,
    ),
    # a vocab-split table at global ids: only the masked block form (block_take) is a part
    "take_any_table_shard": (
        ("core.srl",),
        """
# UNSOUND on purpose: no mask, no offset
rule take_any_table_shard:
  match   take(T, I)
  where   T ~ t @ shard(d, a)
          I ~ i @ invariant(a)
  rewrite take(T, I) ~ take(t, i) @ partial(sum, a)
""",
        60,
    ),
    # a gather whose table and indices are split along dims that are not a batching pair
    "gather_any_shards": (
        ("core.srl",),
        """
# UNSOUND on purpose: no check that the two shards are the batching pair
rule gather_any_shards:
  match   gather(T, I)
  where   T ~ t @ shard(d, a)
          I ~ i @ shard(e, a)
  rewrite gather(T, I) ~ gather(t, i) @ shard(d, a)
""",
        60,
    ),
    # scatter-add is linear in the updates and the buffer together: partial updates into a
    # whole buffer count the buffer once per device
    "scatter_partial_updates": (
        ("core.srl",),
        """
# UNSOUND on purpose: the buffer is not a partial sum
rule scatter_partial_updates:
  match   scatter(B, I, U)
  where   B ~ b @ invariant(a)
          I ~ i @ invariant(a)
          U ~ u @ partial(sum, a)
  rewrite scatter(B, I, U) ~ scatter(b, i, u) @ partial(sum, a)
""",
        60,
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED_LOOKUP_RULES))
def test_fuzzing_refutes_a_planted_unsound_lookup_rule(cli, tmp_path, name):
    files, text, fuzz = PLANTED_LOOKUP_RULES[name]
    rules = tmp_path / "rules"
    rules.mkdir()
    for file in files:
        shutil.copy(REPO / "rules" / file, rules / file)
    (rules / "bad.srl").write_text(text)
    result = cli("rules", "lint", "--fuzz", str(fuzz), str(rules))
    assert f"rule `{name}` is UNSOUND" in result.out


def test_a_rule_that_grows_the_egraph_without_bound_is_stopped_and_named():
    """A rule that wraps every op in two others feeds on its own output: on a fuzz instance the
    e-graph is stopped at its node limit (read every round, not every 20, so it never takes
    the machine's memory) and the instance is a failure that says why."""
    from scalify.soundness.fuzz import FUZZ_NODE_LIMIT, check_instance, generate

    instance = generate("exp", np.random.default_rng(0))
    grow = (  # two new ops around each one: twice as many each round
        '(rule ((= ?n (Op1 ?f ?k ?x))) ((Op1 ?f "a" ?n) (Op1 ?f "b" ?n)) '
        ':ruleset layout :name "grow")'
    )
    fired, failures = check_instance(instance, grow, ["grow"], 0)
    assert fired and len(failures) == 1
    assert f"passed {FUZZ_NODE_LIMIT} nodes" in failures[0] and "without bound" in failures[0]
