"""Canonical rules (`canon` in `.srl`, rules/canon.srl): the shipped ones fire and hold on
random instances, planted unsound variants are refuted by the fuzzer, and the rewriter runs
them when a graph is loaded (the verify report counts them among the rules fired)."""

from __future__ import annotations

import pytest
from conftest import REPO
from scalify.compiler.compile import compile_rule_dir, compile_texts

from scalify.frontends import parse_graph_text
from scalify.soundness.canon_fuzz import fuzz_canon_rule
from scalify.soundness.cases import read_case, run_case

SHIPPED = compile_rule_dir(REPO / "rules").canon_rules


@pytest.mark.parametrize("rule", SHIPPED, ids=lambda r: r.name)
def test_a_shipped_canonical_rule_fires_and_holds(rule) -> None:
    report = fuzz_canon_rule(rule, budget=40, seed=3)
    assert report.fired, f"{rule.name} never fired in {report.instances} instances"
    assert not report.unsound, report.unsound[:1]


PLANTED = {
    # the identity dropped for any permutation: wrong whenever a square value is transposed
    "unguarded_identity": """
# transpose(x, p) == x (wrong: only for the identity)
canon unguarded_identity:
  match   transpose[perm=p](x)
  rewrite x
""",
    # the two permutations composed in the wrong order: wrong for rank 3 and more
    "swapped_composition": """
# transpose(transpose(x, p), q) == transpose(x, q[p]) (wrong order)
canon swapped_composition:
  match   transpose[perm=q](transpose[perm=p](x))
  rewrite transpose[perm=compose(q, p)](x)
""",
    # the broadcasts' dims picked the wrong way round
    "swapped_pick": """
# broadcast(broadcast(x, i), o) == broadcast(x, i[o]) (wrong order)
canon swapped_pick:
  match   broadcast[dims=o](broadcast[dims=i](x))
  rewrite broadcast[dims=pick(i, o)](x)
""",
    # a guard on the wrong operand: 0 - x is not x
    "zero_minus": """
# 0 - x == x (wrong: it is -x)
canon zero_minus:
  match   sub(z, x)
  where   is_zero_fill(z)
  rewrite x
""",
    # a reshape dropped across a transpose
    "reshape_through_transpose": """
# reshape(transpose(x)) == reshape(x) (wrong: the transpose moves elements)
canon reshape_through_transpose:
  match   reshape(transpose(x))
  rewrite reshape(x)
""",
    # the select's branches swapped: a true predicate keeps the first
    "select_of_true_swapped": """
# select(true, a, b) == b (wrong: it is a)
canon select_of_true_swapped:
  match   select(p, a, b)
  where   is_true(p)
  rewrite b
""",
    # any fill dropped from a sum, not only zeros
    "add_any_fill": """
# x + c == x (wrong: only for c = 0)
canon add_any_fill:
  match   add(x, z)
  where   is_fill(z)
  rewrite x
""",
    # a literal computed where the operands are no fills: the function fails on the match
    "unguarded_literal": """
family arithmetic = add, mul
# f(x, y) == its literal (wrong: only when both are fills)
canon unguarded_literal:
  match   f(x, y)
  where   f in arithmetic
  rewrite broadcast[dims=empty()](constant[value=literal()]())
""",
    # a slice moved inside a transpose with its bounds left in the transpose's order
    "slice_of_transpose_unpermuted": """
# slice(transpose(x, p)) == transpose(slice(x), p), same bounds (wrong: they must be permuted)
canon slice_of_transpose_unpermuted:
  match   slice[starts=s, limits=l, strides=t](transpose[perm=p](x))
  rewrite transpose[perm=p](slice[starts=s, limits=l, strides=t](x))
""",
    # the lookup lifted out of the broadcast, its table dims placed first instead of last
    "take_of_broadcast_misplaced": """
# take(t, broadcast(i, b)) == broadcast(take(t, i), b + ...) (wrong: the table's dims go last)
canon take_of_broadcast_misplaced:
  match   take[dim=d](t, broadcast[dims=b](i))
  where   result_rank() >= plus(rank(i), rank(t))
  rewrite broadcast[dims=append_last(b, minus(rank(t), 1))](take[dim=0](t, i))
""",
    # a merge moved inside the broadcast, the broadcast's dims left as they were
    "merge_of_broadcast_dims_kept": """
# merge(broadcast(x, d)) == broadcast(merge(x), d) (wrong: the dims after the merge shift)
canon merge_of_broadcast_dims_kept:
  match   merge[dim=p, inner=n](broadcast[dims=d](x))
  where   merges_own_dims()
  rewrite broadcast[dims=d](merge[dim=position(d, p), inner=n](x))
""",
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_unsound_canonical_rule_is_refuted(name: str) -> None:
    (rule,) = compile_texts([(f"{name}.srl", PLANTED[name])]).canon_rules
    report = fuzz_canon_rule(rule, budget=60, seed=0)
    assert report.unsound, f"{name}: {report.fired} firings, none refuted"


def test_loading_a_graph_runs_the_canonical_rules() -> None:
    text = """HloModule m
ENTRY main {
  x = f32[2,3,4] parameter(0)
  t1 = f32[3,4,2] transpose(x), dimensions={1,2,0}
  t2 = f32[2,3,4] transpose(t1), dimensions={2,0,1}
  ROOT y = f32[2,3,4] negate(t2)
}
"""
    graph = parse_graph_text(text, "views.hlo")
    assert [n.op for n in graph.nodes.values()] == ["parameter", "neg"]
    assert graph.canon_fired == {"transpose_of_transpose": 1, "transpose_identity": 1}


def test_the_report_counts_canonical_rules_among_the_rules_fired() -> None:
    case = read_case(REPO / "rules" / "tests" / "canon" / "views_composed.case")
    report, problems = run_case(case, compile_rule_dir(REPO / "rules"))
    assert not problems, problems
    assert {"transpose_of_transpose", "broadcast_of_broadcast"} <= set(report.stats["rules_fired"])


def test_a_rewrite_builds_a_tree_of_ops_each_canonical() -> None:
    """`rank * 2 * 8`: the rewrite builds `mul(x, mul(2, 8))`, and the nested product is
    itself rewritten as it is made (folded to the literal 16, its broadcast dropped)."""
    text = """HloModule m
ENTRY main {
  r = s32[] parameter(0)
  a = s32[] constant(2)
  b = s32[] constant(8)
  ra = s32[] multiply(r, a)
  ROOT o = s32[] multiply(ra, b)
}
"""
    graph = parse_graph_text(text, "factors.hlo")
    (out,) = (graph.node(o) for o in graph.outputs)
    factor = graph.node(out.operands[1])
    assert (out.op, factor.op, factor.attrs["value"]) == ("mul", "constant", "16")
    assert {"join_int_factors", "fold_binary_fill", "broadcast_identity"} <= set(graph.canon_fired)
