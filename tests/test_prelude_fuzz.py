"""The prelude's rules over sub-axes and masks are fuzzed by `prelude_fuzz.py`: each fires on
its random instances and stays sound, and each, with a guard taken out or its axes swapped,
is refuted numerically."""

from __future__ import annotations

import pytest
from conftest import REPO
from scalify.compiler.compile import compile_rule_dir

from scalify.engine import egraph
from scalify.soundness.prelude_fuzz import PRELUDE_RULES, fuzz_prelude

# (the prelude's text, the planted unsound text): a rule's guard or its axis order undone
PLANTED = {
    "split-over-sub-axes": (
        '(Op1 "split" ?kb ?x) ?d ?o) (+ ?d 1) ?i)))\n      :ruleset layout :name "split-over-sub',
        '(Op1 "split" ?kb ?x) ?d ?i) (+ ?d 1) ?o)))\n      :ruleset layout :name "split-over-sub',
    ),
    "split-over-two-axes": (
        '(Op1 "split" ?kb ?x) ?d ?o) (+ ?d 1) ?i)))\n      :ruleset layout :name "split-over-two',
        '(Op1 "split" ?kb ?x) ?d ?i) (+ ?d 1) ?o)))\n      :ruleset layout :name "split-over-two',
    ),
    "split-over-one-axis": (
        '((union ?y (Shard (Op1 "split" ?kb ?x) (+ ?d 1) ?a)))',
        '((union ?y (Shard (Op1 "split" ?kb ?x) ?d ?a)))',
    ),
    "shard-unjoin": (
        '((union ?n (Shard (Shard ?t ?d ?a) ?d ?b))) :ruleset layout :name "shard-unjoin")',
        '((union ?n (Shard (Shard ?t ?d ?b) ?d ?a))) :ruleset layout :name "shard-unjoin")',
    ),
    "mask-fills-padding": (
        '(Op3 "select" ?k ?p ?x ?f)) (IndexBelow ?p ?d ?m)',
        '(Op3 "select" ?k ?p ?x ?f))',
    ),
    "mask-fills-padding-ge": (
        '(Op3 "select" ?k ?p ?f ?x)) (IndexAtLeast ?p ?d ?m)',
        '(Op3 "select" ?k ?p ?f ?x))',
    ),
    "broadcast-block": (
        '(= (AttrI ?kw (+ "new_size:" (to-string ?e))) (* ?n (AxisSize ?a)))',
        "(Axis ?a)",
    ),
}


@pytest.fixture(scope="module")
def rules():
    return compile_rule_dir(REPO / "rules")


def test_each_prelude_rule_fires_and_stays_sound(rules):
    reports = fuzz_prelude(rules, 30)
    assert [r.name for r in reports] == [" / ".join(r.names) for r in PRELUDE_RULES]
    for report in reports:
        assert report.fired >= 5 and not report.unsound, report


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_unsound_prelude_rule_is_refuted(rules, monkeypatch, name):
    sound, unsound = PLANTED[name]
    text = egraph.prelude_text()
    assert text.count(sound) == 1
    monkeypatch.setattr(egraph, "prelude_text", lambda: text.replace(sound, unsound))
    monkeypatch.setattr(egraph, "_LOADED", {})  # the session loaded with the shipped prelude
    reports = {r.name: r for r in fuzz_prelude(rules, 60)}
    refuted = next(r for key, r in reports.items() if name in key.split(" / "))
    assert refuted.unsound, f"{name} planted unsound was not refuted"
    assert "is false" in refuted.unsound[0] and "instance: mesh" in refuted.unsound[0]
