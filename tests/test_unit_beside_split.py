"""A true unit dim beside a dim split down to one entry a device (Mamba-2's `[1, heads]`,
the heads over fsdp): the device holds two unit dims where the baseline holds one, and a
reshape that drops a unit may be read as merging either. The proof pairs the reading the
baseline takes (`merge-over-one-axis`), and the frontier makes no definite claim about
which unit went where."""

from __future__ import annotations

from conftest import verify_texts

from scalify.frontends import parse_graph_text
from scalify.layout import Placement
from scalify.mesh import parse_mesh
from scalify.report.frontier import Finding
from scalify.report.view_parting import with_view_partings

BASE = """HloModule base
ENTRY main {
  x = f32[1,2,8] parameter(0)
  r = f32[2,8,1,1] reshape(x)
  ROOT e = f32[2,8,1,1] exponential(r)
}
"""
DIST = """HloModule dist
ENTRY main {
  x = f32[1,1,4] parameter(0)
  r = f32[1,4,1,1] reshape(x)
  ROOT e = f32[1,4,1,1] exponential(r)
}
"""
MESH = "fsdp=2,tp=2"
INPUT = "shard(1, fsdp) shard(2, tp)"


def test_a_unit_dropped_beside_a_dim_split_to_one_entry_is_proved(tmp_path):
    relations = {"inputs": {"x": INPUT}, "outputs": ["shard(0, fsdp) shard(1, tp)"]}
    report = verify_texts(tmp_path, BASE, DIST, relations, MESH)
    assert report.verdict == "equivalent", [s.reason for s in report.suspects]


def test_the_same_reshape_claimed_over_the_axes_swapped_is_not_proved(tmp_path):
    relations = {"inputs": {"x": INPUT}, "outputs": ["shard(0, tp) shard(1, fsdp)"]}
    report = verify_texts(tmp_path, BASE, DIST, relations, MESH)
    assert report.verdict != "equivalent"


def test_the_frontier_claims_no_parting_of_views_over_a_dim_split_to_one_entry():
    """Before, the dim split to one entry read as a unit: the views from x looked as if they
    dropped it, and the finding became a definite `not_equivalent` where no run could
    check it (an opaque convolution beside it)."""
    base, dist = parse_graph_text(BASE, "base.hlo"), parse_graph_text(DIST, "dist.hlo")
    x = next(n for n in dist.nodes.values() if n.name == "x")
    merge = next(n for n in dist.nodes.values() if n.op == "merge")
    layout = (Placement("shard", "fsdp", dim=1), Placement("shard", "tp", dim=2))
    base_x = next(n.id for n in base.nodes.values() if n.name == "x")
    finding = Finding(merge, "no rule relates it", False, [])
    (kept,) = with_view_partings(
        dist, base, {x.id: {(layout, base_x)}}, parse_mesh(MESH), [finding]
    )
    assert not kept.definite and kept.reason == "no rule relates it"


def test_an_empty_dim_beside_a_unit_is_no_reading():
    """A unit inserted before an empty dim (Megatron's GPT at tp 4 holds one) has no inner
    size to pair with the baseline's split there: it is passed over, not divided by."""
    from scalify.engine.sub_axes import with_sub_view_forms

    module = (
        "HloModule m\nENTRY main {\n  x = f32[2,@] parameter(0)\n"
        "  ROOT r = f32[2,1,@] broadcast(x), dimensions={0,2}\n}\n"
    )
    base = parse_graph_text(module.replace("@", "4"), "base.hlo")
    dist = parse_graph_text(module.replace("@", "0"), "dist.hlo")
    assert with_sub_view_forms(dist, base, parse_mesh("tp=2")) is dist


def test_view_pairings_are_stated_once_a_pair_of_keys():
    """An unrolled scan repeats one view thousands of times: the pairings of distributed and
    baseline views are facts about their keys, so their number does not grow with the
    copies (a fact for each pair of nodes made three million for EasyDeL's Mamba-2)."""
    from scalify.engine.sub_axes import sub_axis_facts, with_sub_view_forms

    def copies(text: str, n: int, shapes: tuple[str, str]) -> str:
        """`text` with n more inputs, each reshaped as x is and returned (a scan's steps,
        unrolled)."""
        head, _ = text.split("  ROOT e = ")
        views = "".join(
            f"  x{i} = {shapes[0]} parameter({i + 1})\n  r{i} = {shapes[1]} reshape(x{i})\n"
            for i in range(n)
        )
        outputs = ", ".join(["r", *(f"r{i}" for i in range(n))])
        types = ", ".join([shapes[1]] * (n + 1))
        return head + views + f"  ROOT t = ({types}) tuple({outputs})\n}}\n"

    def pairings(n: int) -> int:
        base = parse_graph_text(copies(BASE, n, ("f32[1,2,8]", "f32[2,8,1,1]")), "base.hlo")
        dist = parse_graph_text(copies(DIST, n, ("f32[1,1,4]", "f32[1,4,1,1]")), "dist.hlo")
        mesh = parse_mesh(MESH)
        facts = sub_axis_facts(base, with_sub_view_forms(dist, base, mesh), mesh)
        return sum(f.startswith("(SubView") for f in facts)

    assert pairings(1) > 0
    assert pairings(6) == pairings(1)
