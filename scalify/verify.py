"""Verification end to end: load, relate inputs, saturate, decide outputs, localise."""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from scalify.canon.canonicalize import canonicalize
from scalify.compiler.compile import CompiledRuleSet, compile_rule_dir
from scalify.compiler.lower import rule_name
from scalify.engine.decode import read_proof
from scalify.engine.egraph import ROUNDS_PER_CHECK, RunStats, rules_session
from scalify.engine.encode import (
    GraphEncoder,
    layout_term,
    node_ref,
    signature_facts,
    vocabulary_facts,
)
from scalify.engine.memory import MIN_FREE_SHARE
from scalify.engine.parallel import PREFETCH_AFTER, prefetch_segments
from scalify.engine.partition import (
    Segment,
    canonical_order,
    cut_points,
    final_output,
    forward_region,
    in_pass_order,
    merge_segments,
    segment_relations,
    segments,
    side_inputs,
    structural_key,
    subgraph,
)
from scalify.engine.scaling import scaled_outputs, scaling_facts, scaling_rules
from scalify.engine.sub_axes import sub_axis_facts, with_sub_view_forms
from scalify.errors import ScalifyError
from scalify.forms.chunk_axes import CHUNK_AXIS, lift_chunk_axis
from scalify.forms.device_windows import with_window_forms
from scalify.forms.early_outputs import early_output, scaled_output
from scalify.forms.fill_outputs import fill_fits
from scalify.forms.part_layouts import (
    infer_parts,
    local_part_cuts,
    with_output_parts,
    with_part_views,
)
from scalify.forms.repeat_units import infer_repeat_units
from scalify.forms.selected_blocks import with_selected_block_forms
from scalify.forms.slice_views import with_slice_alternatives
from scalify.forms.unit_broadcasts import with_paired_broadcast_forms, with_unit_broadcast_forms
from scalify.forms.unit_dims import with_unit_alternatives
from scalify.forms.unit_dots import squeezed_unit, with_unit_dot_forms
from scalify.forms.unit_round_trips import with_round_trip_forms
from scalify.forms.view_chains import with_view_chain_forms
from scalify.frontends import load_graph
from scalify.frontends.custom_calls import undeclared_note
from scalify.ir import Graph
from scalify.layout import Layout, canonical, layout_str, local_shape, resolve_declared
from scalify.mesh import Mesh, parse_mesh
from scalify.ops import COLLECTIVES
from scalify.ops.structural import is_elided
from scalify.relations import (
    Relation,
    RelationsFile,
    bind_unpaired_inputs,
    input_relations,
    output_relations,
    read_relations_file,
)
from scalify.report.frontier import (
    frontier,
    output_mismatch,
    partial_origin,
    with_off_axis_collectives,
)
from scalify.report.model import (
    EQUIVALENT,
    MADE_AT,
    NOT_EQUIVALENT,
    UNKNOWN,
    OutputResult,
    Report,
    Site,
    Suspect,
)
from scalify.report.nearest import rules_for_op
from scalify.report.neighbourhood import neighbourhood
from scalify.report.numeric_frontier import read_numbers
from scalify.report.view_parting import with_view_partings
from scalify.simulate import NotSimulable, simulate
from scalify.simulate.input_values import InputValues, ValueCheck, check_input_values, unconfirmed

# Graphs below this size are proved whole; partitioning pays off on deep stacks.
PARTITION_MIN_NODES = 400
# A partitioned proof that fails is redone on the whole graph up to this size, so the
# report sees every relation (a segment sees only its own).
WHOLE_GRAPH_RETRY_NODES = 3000
# How many segments of each graph a pair may take when the cut after one pair cannot be
# related: a cut one graph has and the other lacks, or a value whose relation needs the ops
# after it (a fused projection's output before the slices that take its parts).
MERGES = ((1, 1), (1, 2), (2, 1), (2, 2), (3, 3))
# Consecutive segments this small in both graphs are proved as one.
TINY_SEGMENT_NODES = 16
# Suspects that get a neighbourhood picture (the report stays small on large failures).
PICTURED_SUSPECTS = 10
PROGRESS_BAR, PROGRESS_LINE = 30, 79  # progress bar cells; widest line drawn


@dataclass
class Limits:
    max_rounds: int = 20_000
    node_limit: int = 2_000_000
    simulate: bool = True
    partition: bool = True
    progress: bool = False  # a progress line on stderr (the CLI turns it on for a terminal)
    jobs: int = 1  # processes proving distinct segments at once (see parallel.py)
    rounds_per_check: int = ROUNDS_PER_CHECK  # most rounds between two reads of the size
    # stop (verdict `unknown`) when the machine's free memory falls under this share of it
    min_free_memory: float = MIN_FREE_SHARE


def choose_mesh(text: str | None, dist: Graph, given: RelationsFile | None) -> Mesh:
    """--mesh, else the relations file, else the graph's own mesh, else its partition count."""
    if text:
        return parse_mesh(text)
    if given and given.mesh:
        return parse_mesh(given.mesh)
    if dist.mesh_hint:
        return parse_mesh(",".join(f"{k}={v}" for k, v in dist.mesh_hint.items()))
    if dist.num_partitions and dist.num_partitions > 1:
        return parse_mesh(f"tp={dist.num_partitions}")
    if not any(n.op in COLLECTIVES or n.op == "rank_index" for n in dist.nodes.values()):
        return Mesh(())  # one device: a single-device rewrite (chunked attention, say)
    raise ScalifyError(
        "the distributed graph does not say its mesh; pass --mesh, e.g. "
        "--mesh tp=8 or --mesh dp=2,tp=4",
        dist.path,
    )


def inferred_input_relations(
    base: Graph, dist: Graph, mesh: Mesh, given: RelationsFile | None
) -> list[Relation]:
    """Each input's layout: stated, annotated or read from shapes, then refined by how both
    programs use it (the parts of a fused weight, the unit of a repeat)."""
    inputs = infer_parts(base, dist, input_relations(base, dist, mesh, given), mesh)
    return infer_repeat_units(base, dist, inputs)


def with_index_maps(
    relations: list[Relation], rules: CompiledRuleSet, where: str
) -> list[Relation]:
    """Each layout kind a relation names from the rules' declarations, with its index map
    (what the simulator and the fuzzer cut a device's value with)."""
    return [
        dataclasses.replace(r, layout=resolve_declared(r.layout, rules.layouts, where))
        for r in relations
    ]


def verify_graphs(
    base: Graph,
    dist: Graph,
    rules: CompiledRuleSet,
    mesh: Mesh,
    given: RelationsFile | None = None,
    limits: Limits | None = None,
    timings: dict[str, float] | None = None,
    values: InputValues | None = None,
) -> Report:
    """Prove `dist` equal to `base`. With `values` (the inputs' values in both programs, as
    the Python API holds them), every layout Scalify infers is checked against them first."""
    limits = limits or Limits()
    timings = dict(timings or {})
    bound = bind_unpaired_inputs(base, dist, mesh, given)  # inputs only one graph has
    base, dist, given = bound.base, bound.dist, bound.given
    where = given.path if given else ""
    inputs = with_index_maps(inferred_input_relations(base, dist, mesh, given), rules, where)
    checked = ValueCheck(inputs)
    if values is not None:
        plain = input_relations(base, dist, mesh, given)
        checked = check_input_values(inputs, plain, base, dist, mesh, values)
        inputs = checked.relations
    if inherit_assumed_ranges(base, dist, inputs):
        dist = canonicalize(dist)  # the distributed graph's lookup guards fold now too
    outputs = with_index_maps(output_relations(base, dist, mesh, given, inputs), rules, where)
    base, dist, outputs = with_output_parts(base, dist, outputs, mesh)

    start = time.perf_counter()
    proof, results, suspects, definite = _prove_and_decide(
        base, dist, rules, mesh, inputs, outputs, limits
    )
    notes = bound.notes + checked.notes
    if not all(r.ok for r in results) and (lifted := lift_chunk_axis(dist, mesh)):
        # A dim of independent chunks reduced across: prove it as a mesh axis (chunk_axes.py).
        tried = _prove_and_decide(base, lifted.graph, rules, lifted.mesh, inputs, outputs, limits)
        if _explains_more(tried, (proof, results, definite)):
            proof, results, suspects, definite = tried
            notes.append(
                f"a dim of {lifted.chunks} independent chunks, reduced across, is read as "
                f"mesh axis '{CHUNK_AXIS}' of size {lifted.chunks} (see "
                "docs/explanation/collectives-and-combines.md)"
            )
    stats = proof.stats
    timings["prove"] = time.perf_counter() - start

    counterexample, refuted_by = "", ""
    if all(r.ok for r in results) and checked.contradicted:
        verdict = UNKNOWN  # proved only under a layout the values contradict
        notes.append(
            f"proved only under the inferred layouts of {', '.join(checked.contradicted)}, "
            "which the values contradict: the proof does not hold for the values given"
        )
    elif all(r.ok for r in results):
        verdict = EQUIVALENT
    else:
        start = time.perf_counter()
        verdict, counterexample, note = _refine(
            base, dist, mesh, inputs, outputs, definite and not stats.limit, limits
        )
        if verdict == NOT_EQUIVALENT and counterexample:  # the values part somewhere: where?
            read_numbers(base, dist, mesh, inputs, suspects)
        timings["simulate"] = time.perf_counter() - start
        if note:
            notes.append(note)
        if verdict == NOT_EQUIVALENT and not counterexample:
            refuted_by = _refutation(proof, outputs, results)
            if not refuted_by:  # a known bug's pattern is a lead, not a witness
                verdict = UNKNOWN
                notes.append(
                    "the first suspect has the pattern of a known bug, but no witness: no "
                    "counterexample (see above) and no refutation by the rules, so the "
                    "verdict is unknown, not not_equivalent"
                )
    if stats.limit:
        notes.append(f"saturation stopped early: {stats.limit}; the verdict may be incomplete")
    notes += assumption_notes(base, dist)
    opaque_nodes = [n for g in (base, dist) for n in g.opaque_nodes()]
    opaque = sorted({n.attrs.get("hlo_op", "?") for n in opaque_nodes})
    if opaque:
        notes.append(f"opaque ops (no semantics, matched only to themselves): {', '.join(opaque)}")
    if custom := undeclared_note(opaque_nodes):
        notes.append(custom)
    if verdict == UNKNOWN and not stats.limit and not checked.contradicted:
        notes.append(
            "not proved, and no counterexample: a rule may be missing "
            "(see docs/how-to/write-a-rule.md)"
        )
    fired: dict[str, int] = {}
    srl_rules = {r.name for r in rules.rules}
    for name, count in stats.rule_matches.items():
        if count and name in srl_rules:
            fired[rule_name(name)] = fired.get(rule_name(name), 0) + count
    for graph in (base, dist):  # the canonical rules, run as the graphs were loaded
        for name, count in graph.canon_fired.items():
            fired[name] = fired.get(name, 0) + count
    return Report(
        verdict=verdict,
        baseline=base.path,
        distributed=dist.path,
        mesh=str(mesh),
        outputs=results,
        suspects=suspects,
        relations={
            "inputs": [r.describe() for r in inputs],
            "outputs": [r.describe() for r in outputs],
        },
        stats={
            "seconds": {k: round(v, 4) for k, v in timings.items()},
            "baseline_nodes": len(base.nodes),
            "distributed_nodes": len(dist.nodes),
            "egraph_nodes": stats.nodes,
            "rounds": stats.rounds,
            "saturated": stats.saturated,
            "rules_fired": fired,
            "partitions": proof.partitions,
            "memo_hits": proof.memo_hits,
        },
        notes=notes,
        counterexample=counterexample,
        refuted_by=refuted_by,
        assumptions=assumed_layouts(inputs) if verdict == EQUIVALENT else [],
    )


def assumed_layouts(inputs: list[Relation]) -> list[str]:
    """The input layouts a proof used that Scalify inferred (from shapes, from how both
    programs cut a tensor) and that neither a user stated nor the values confirmed: the
    proof holds for weights laid out that way, which nothing has shown them to be. A
    replicated input (equal shapes) is not among them: it is what equal shapes say."""
    return [r.describe() for r in inputs if unconfirmed(r)]


def _prove_and_decide(base, dist, rules, mesh, inputs, outputs, limits: Limits):
    """Prove (segment by segment where the graph cuts), then judge each output and find the
    suspects. Returns (proof, output results, suspects, whether the suspects are definite)."""
    proof = None
    if limits.partition:
        proof = prove_partitioned(base, dist, rules.program(), mesh, inputs, limits)
        if limits.progress:  # erase the bar, whichever way the partitioned proof ended
            print("\r" + " " * PROGRESS_LINE + "\r", end="", file=sys.stderr, flush=True)
    proof = proof or prove(base, dist, rules.program(), mesh, inputs, limits, outputs)
    results, suspects, definite = _decide(base, dist, mesh, outputs, proof)
    if proof.failed is not None and not suspects:
        # The segment that broke holds no suspect on its own (its cut relation was already
        # wrong): prove the whole graph so the report can point somewhere.
        proof = prove(base, dist, rules.program(), mesh, inputs, limits, outputs)
        results, suspects, definite = _decide(base, dist, mesh, outputs, proof)
    for suspect in suspects:
        if suspect.reason.startswith("no rule relates"):
            suspect.nearest_rules = rules_for_op(suspect.op, len(suspect.operands), rules)
    return proof, results, suspects, definite


def _explains_more(lifted, plain) -> bool:
    """Whether the proof of the chunk-lifted graph is the one to report. Reading a dim as
    chunks is a guess about the program: it must prove at least as many outputs, and, as
    many, relate at least as many distributed nodes to baseline ones (a permuted dim that
    only looks like chunks loses the relations the plain proof had, and its frontier then
    points away from the bug); and not at all when the plain proof's frontier is a known
    bug pattern, which the guess could only move away from."""
    (lifted_proof, lifted_results, *_), (plain_proof, plain_results, plain_definite) = (
        lifted,
        plain,
    )
    proved = sum(r.ok for r in lifted_results) - sum(r.ok for r in plain_results)
    if proved:
        return proved > 0
    if plain_definite:
        return False  # the plain proof already names a known bug: no guess needed
    return len(lifted_proof.relations) >= len(plain_proof.relations)


def _refutation(proof, outputs: list[Relation], results) -> str:
    """A witness from the rules that the graphs differ, without numbers: an output the
    e-graph proved to be exactly n times its baseline value (n > 1), which it can equal
    only where that value is zero."""
    for index, (rel, result) in enumerate(zip(outputs, results, strict=False)):
        n = proof.scaled.get(rel.dist_id)
        if not result.ok and n:
            return f"the rules prove output {index} is exactly {n}x its baseline value"
    return ""


def _refine(base, dist, mesh, inputs, outputs, definite: bool, limits: Limits):
    """Tell a real bug from a gap in the rules: run both graphs on random inputs.

    Returns (verdict, counterexample, note). Without a simulation, a known bug pattern at
    the frontier still counts as not equivalent.
    """
    if limits.simulate:
        try:
            for seed in range(2):
                mismatch = simulate(base, dist, mesh, inputs, outputs, seed=seed)
                if mismatch:
                    return NOT_EQUIVALENT, mismatch.describe() + f" (seed {seed})", ""
            return (
                UNKNOWN,
                "",
                (
                    "both graphs agree numerically on random inputs (2 seeds): the "
                    "distributed graph is probably right and a rule is missing"
                ),
            )
        except NotSimulable as why:
            reason = f"no numeric check: {why}"
    else:
        reason = ""
    return (NOT_EQUIVALENT if definite else UNKNOWN), "", reason


def alternative_forms(graph: Graph) -> Graph:
    """Reshape round trips folded, unit-dim reshapes moved through elementwise ops, squeezed
    unit dims kept in dots, view chains in their normal form: equal forms of the graph as it
    stands, for the e-graph to union with the originals."""
    return with_view_chain_forms(
        with_unit_dot_forms(with_unit_alternatives(with_round_trip_forms(graph)))
    )


def prove(
    base: Graph,
    dist: Graph,
    rules_program: str,
    mesh: Mesh,
    inputs: list[Relation],
    limits: Limits,
    outputs: list[Relation] = (),
):
    """Both graphs, the input relations and the rules in one e-graph, run to saturation.

    Returns what was proven for each distributed node and the run's statistics; `outputs`
    not proved equal to their baseline are then asked whether they are a multiple of it.
    """  # noqa: D401
    signatures: dict = {}
    dist = with_window_forms(dist, mesh)
    dist = with_selected_block_forms(dist, mesh)
    base_ids, dist_ids = set(base.nodes), set(dist.nodes)
    parts = local_part_cuts(inputs, mesh)  # inputs related through their parts
    base, dist, inputs = with_part_views(base, dist, inputs, mesh)
    base = with_slice_alternatives(alternative_forms(base), baseline=True)
    dist = with_slice_alternatives(alternative_forms(dist), baseline=False, parts=parts)
    base = with_paired_broadcast_forms(base)
    dist = with_paired_broadcast_forms(with_unit_broadcast_forms(dist))
    dist = with_sub_view_forms(dist, base, mesh)
    # the vocabulary last: the equal forms above bring literals and ops of their own
    commands = vocabulary_facts(mesh, [base, dist]) + scaling_facts(mesh, [base, dist])
    commands += GraphEncoder(base, "b", mesh, signatures).commands()
    commands += GraphEncoder(dist, "d", mesh, signatures).commands()
    commands += signature_facts(signatures)
    commands += sub_axis_facts(base, dist, mesh)
    commands += [
        f"(union {node_ref('d', r.dist_id)} "
        f"{layout_term(node_ref('b', r.base_id), r.layout, base.node(r.base_id).shape)})"
        for r in inputs
    ]
    with rules_session(scaling_rules(), rules_program) as session:
        session.feed(commands)
        stats = session.saturate(
            limits.max_rounds, limits.node_limit, limits.rounds_per_check, limits.min_free_memory
        )
        relations, replicated, held = read_proof(session)
        unproved = {
            r.dist_id: layout_term(
                node_ref("b", r.base_id), r.layout, base.node(r.base_id).shape, padding="any"
            )
            for r in outputs
            if all(b != r.base_id for _, b in relations.get(r.dist_id, ()))
        }
        scaled = scaled_outputs(session, unproved, mesh) if unproved else {}
    # Only the graphs' own nodes: the alternative forms are the proof's, not the report's.
    # A node related only to an alternative form (a block of a slice of a fused weight) is
    # still no place where a bug starts; nor is a squeeze of a unit dim that holds a block of
    # a value the baseline could compute but does not (DistHeld: a device's one q head as
    # [b, s, d], proved on through the dots that keep its unit dim, unit_dots.py) when what
    # it squeezes is related. Other views stay suspects: a reshape on the wrong factor holds
    # such a block too. An output is judged by its own relation.
    reached = {d for d, rels in relations.items() if d in dist_ids and rels}
    reached |= {
        d
        for d in held & dist_ids
        if d not in dist.outputs
        and squeezed_unit(dist.node(d), dist) is not None
        and any(b in base_ids for _, b in relations.get(dist.node(d).operands[0], ()))
    }
    relations = {
        d: {(lay, b) for lay, b in rels if b in base_ids}
        for d, rels in relations.items()
        if d in dist_ids
    }
    relations = {d: r for d, r in relations.items() if r}
    reached = (reached | set(parts)) - set(relations)
    return Proof(relations, replicated & dist_ids, stats, reached=reached, scaled=scaled)


@dataclass
class Proof:
    """What saturation established: layouts over baseline nodes, and which distributed nodes
    are the same on every device (replicated) even without a baseline node."""

    relations: dict
    replicated: set[int]
    stats: RunStats
    partitions: int = 1
    memo_hits: int = 0
    failed: tuple[Graph, Graph, Proof] | None = None  # the segment where a partitioned proof broke
    reached: set[int] = field(default_factory=set)  # related only to alternative forms
    scaled: dict[int, int] = field(default_factory=dict)  # output -> n: n x its baseline


def prove_partitioned(
    base: Graph, dist: Graph, rules_program: str, mesh: Mesh, inputs: list[Relation], limits: Limits
) -> Proof | None:
    """Prove segment by segment between cuts (see partition.py), reusing the proof of every
    structurally identical segment. Cuts are paired in order; where one graph has a cut the
    other lacks, the next segment of that graph is merged in and the pair tried again. None
    when the graphs do not cut at all (then the whole graph is proved at once)."""
    if len(dist.nodes) < PARTITION_MIN_NODES:
        return None
    base, dist = in_pass_order(base), in_pass_order(dist)
    base_cuts, dist_cuts = cut_points(base), cut_points(dist)
    # a training step's backward segments read values whose relations are proved on the way:
    # keys computed ahead of the walk could not match, so nothing is prefetched for them
    may_prefetch = limits.jobs > 1 and not forward_region(dist)
    if (
        len(base_cuts) < 2
        or len(dist_cuts) < 2
        or len(base.outputs) != len(dist.outputs)
        or base_cuts[-1] != final_output(base)
        or dist_cuts[-1] != final_output(dist)
    ):
        return None
    # outputs proved inside a segment (a layer's caches): each distributed one and its
    # baseline partner, paired by position
    paired_outputs = dict(zip(dist.outputs, base.outputs, strict=True))
    base_segs, dist_segs = segments(base, base_cuts), segments(dist, dist_cuts)
    total = Proof({}, set(), RunStats(saturated=True), partitions=0)
    memo: dict[str, list] = {}
    prefetched: dict[str, tuple[Proof, tuple[int, int]]] = {}
    entry: list = []
    i = j = 0
    while i < len(base_segs) and j < len(dist_segs):
        if may_prefetch and i == j >= PREFETCH_AFTER:
            may_prefetch = False  # once
            prefetched = prefetch_segments(
                base,
                dist,
                base_segs[i:],
                dist_segs[j:],
                inputs,
                entry,
                rules_program,
                mesh,
                limits,
                prove,
            )
        if limits.progress:
            _show_progress(j, len(dist_segs), total.memo_hits)
        first_failure, failed_with_sides = None, False
        for take_base, take_dist in _merge_order(base_segs, dist_segs, i, j):
            base_seg = merge_segments(base_segs[i : i + take_base])
            dist_seg = merge_segments(dist_segs[j : j + take_dist])
            label = f"segment {total.partitions}"
            base_sub, dist_sub = subgraph(base, base_seg, label), subgraph(dist, dist_seg, label)
            relations = segment_relations(
                base_sub, dist_sub, inputs, entry, base_seg.entry, total.relations
            )
            sides = bool(side_inputs(dist_sub))
            key = structural_key(base_sub, dist_sub, relations)
            # memoised facts are placed by position in this order (see structural_key)
            base_order, dist_order = canonical_order(base_sub), canonical_order(dist_sub)
            if key in memo and memo[key][0]:
                total.memo_hits += 1
                exit_layouts, inner, made = memo[key]
                for d, b, lay in (inner or []) + made:  # the proved segment's outputs, here
                    total.relations.setdefault(dist_order[d], set()).add((lay, base_order[b]))
            else:
                early, proved_for = prefetched.pop(key, (None, None))
                if early is None or proved_for != (base_seg.exit, dist_seg.exit):  # another pair
                    early = prove(base_sub, dist_sub, rules_program, mesh, relations, limits)
                proof = early
                _accumulate(total, proof)
                exit_layouts = [
                    lay for lay, b in proof.relations.get(dist_seg.exit, ()) if b == base_seg.exit
                ]
                placed = Placed(dist_seg, dist_order, base_order)
                inner = _inner_outputs(placed, paired_outputs, proof)
                memo[key] = (exit_layouts, inner, _read_later(dist, placed, proof))
                if not exit_layouts:
                    first_failure = first_failure or (base_sub, dist_sub, proof)
                    failed_with_sides = failed_with_sides or sides
                    continue
                if inner is None and total.failed is None:  # an inner output not proved
                    total.failed = (base_sub, dist_sub, proof)
            total.partitions += 1
            total.relations[dist_seg.exit] = {(lay, base_seg.exit) for lay in exit_layouts}
            entry = exit_layouts
            i, j = i + take_base, j + take_dist
            break
        else:
            if len(dist.nodes) <= WHOLE_GRAPH_RETRY_NODES or failed_with_sides:
                # small enough: localise in the whole graph, not one segment; or a segment
                # of a backward pass whose reads of the forward did not pair up
                return None
            total.failed = first_failure
            return total
    if i < len(base_segs) or j < len(dist_segs):
        return None
    return total


def _merge_order(base_segs: list, dist_segs: list, i: int, j: int) -> list[tuple[int, int]]:
    """The MERGES that fit from segments i and j, the closest in size first: a pair whose
    sizes differ much is one whose cuts do not correspond (a cut one graph lacks), and its
    proof would be spent in vain. Ties keep MERGES' order (fewest segments first). A run of
    tiny segments in both graphs (a norm's steps, each a cut) is taken whole: each proof has
    a fixed cost."""
    tiny = 1
    while (
        i + tiny < len(base_segs)
        and j + tiny < len(dist_segs)
        and all(
            len(s.nodes) < TINY_SEGMENT_NODES
            for s in (base_segs[i + tiny - 1], dist_segs[j + tiny - 1])
            + (base_segs[i + tiny], dist_segs[j + tiny])
        )
    ):
        tiny += 1
    fitting = [
        (b + tiny - 1, d + tiny - 1)
        for b, d in MERGES
        if i + b + tiny - 1 <= len(base_segs) and j + d + tiny - 1 <= len(dist_segs)
    ]

    def mismatch(pair: tuple[int, int]) -> float:
        b = sum(len(s.nodes) for s in base_segs[i : i + pair[0]])
        d = sum(len(s.nodes) for s in dist_segs[j : j + pair[1]])
        return max(b, d) / max(min(b, d), 1)

    return sorted(fitting, key=lambda pair: (mismatch(pair) > 1.5, fitting.index(pair)))


class Placed(NamedTuple):
    """A proved segment and the orders its memoised facts are placed by (structural_key)."""

    dist_seg: Segment
    dist_order: list[int]
    base_order: list[int]


def _read_later(dist: Graph, placed: Placed, proof: Proof) -> list[tuple[int, int, Layout]]:
    """The segment's values that later segments read (the forward's activations, which the
    backward reads), as (canonical position in the distributed segment, in the baseline
    segment, layout): for a memoised copy to hand on as this one does."""
    dist_seg, dist_order, base_order = placed
    users = dist.memo("users", Graph.users)
    members = set(dist_seg.nodes)
    dist_at = {n: k for k, n in enumerate(dist_order)}
    base_at = {n: k for k, n in enumerate(base_order)}
    found = []
    for node_id in dist_seg.nodes[:-1]:
        if all(u in members for u in users.get(node_id, [])):
            continue
        found += [
            (dist_at[node_id], base_at[b], lay)
            for lay, b in proof.relations.get(node_id, ())
            if b in base_at
        ]
    return found


def _inner_outputs(placed: Placed, paired: dict[int, int], proof: Proof):
    """The outputs a segment computes before its exit, as (canonical position in the
    distributed segment, in the baseline segment, layout) for a memoised copy to reuse; None
    when one of them is related to no baseline output of the segment."""
    dist_seg, dist_order, base_order = placed
    dist_at = {n: k for k, n in enumerate(dist_order)}
    base_at = {n: k for k, n in enumerate(base_order)}
    found = []
    for node_id in dist_seg.nodes[:-1]:
        partner = paired.get(node_id)
        if partner is None:
            continue
        layouts = [lay for lay, b in proof.relations.get(node_id, ()) if b == partner]
        if partner not in base_at or not layouts:
            return None
        found += [(dist_at[node_id], base_at[partner], lay) for lay in layouts]
    return found


def _show_progress(done: int, total: int, reused: int) -> None:
    """A bar redrawn in place on one stderr line (the CLI asks for it only on a terminal)."""
    filled = PROGRESS_BAR * done // max(total, 1)
    bar = "#" * filled + "." * (PROGRESS_BAR - filled)
    text = f"scalify: [{bar}] segment {done + 1}/{total} ({reused} reused)"
    print("\r" + text[:PROGRESS_LINE], end="", file=sys.stderr, flush=True)


def _accumulate(total: Proof, proof: Proof) -> None:
    for node_id, relations in proof.relations.items():
        total.relations.setdefault(node_id, set()).update(relations)
    total.replicated |= proof.replicated
    total.reached |= proof.reached
    stats, new = total.stats, proof.stats
    stats.rounds += new.rounds
    stats.nodes = max(stats.nodes, new.nodes)
    stats.saturated &= new.saturated
    stats.limit = stats.limit or new.limit
    for rule, count in new.rule_matches.items():
        stats.rule_matches[rule] = stats.rule_matches.get(rule, 0) + count


def _decide(base: Graph, dist: Graph, mesh: Mesh, outputs: list[Relation], proof: Proof):
    proven = proof.relations
    results = []
    failing = []  # (output index, relation, the layouts proven to its baseline node)
    for index, rel in enumerate(outputs):
        layouts = [lay for lay, b in proven.get(rel.dist_id, ()) if b == rel.base_id]
        want = canonical(rel.layout)
        filled = fill_fits(base, rel.base_id, dist, rel.dist_id, rel.layout, mesh)
        ok = filled or any(canonical(lay) == want for lay in layouts)
        shape_ok = (
            local_shape(base.node(rel.base_id).shape, rel.layout, mesh)
            == dist.node(rel.dist_id).shape
        )
        proven_text = " | ".join(sorted({layout_str(canonical(lay)) for lay in layouts})) or (
            "the baseline's fill, at the layout's shape" if filled else "unrelated"
        )
        results.append(
            OutputResult(
                index,
                dist.node(rel.dist_id).name,
                layout_str(rel.layout),
                proven_text,
                ok and shape_ok,
            )
        )
        if not (ok and shape_ok):
            failing.append((index, rel, layouts))
    if not failing:
        return results, [], False
    # A partitioned proof that broke in one segment is localised inside that segment.
    where_base, where_dist, where = proof.failed or (base, dist, proof)
    findings = frontier(
        where_dist, where_base, where.relations, mesh, where.replicated | where.reached
    ) or frontier(where_dist, where_base, where.relations, mesh, where.reached)
    findings = with_off_axis_collectives(where_dist, where_base, where.relations, mesh, findings)
    findings = with_view_partings(where_dist, where_base, where.relations, mesh, findings)
    suspects = [_suspect(f.node, f.reason, f.operands, f.second) for f in findings]
    for suspect, f in zip(suspects[:PICTURED_SUSPECTS], findings, strict=False):
        suspect.neighbourhood = neighbourhood(
            f.node.id, where_dist, where_base, where.relations, where.replicated
        )
    definite = any(f.definite for f in findings)
    # An output proved a multiple of its baseline value is the root cause the frontier (at
    # the literal where the two programs' means part) cannot name: it goes first.
    multiples = {}
    for index, rel, _ in failing:
        if rel.dist_id in proof.scaled:
            node, reason = scaled_output(dist, base, index, rel, proof.scaled[rel.dist_id], mesh)
            multiples.setdefault(node.id, _suspect(node, reason, []))
    if multiples:
        suspects = list(multiples.values()) + suspects
        definite = True
    for index, rel, layouts in failing:
        reason = None if findings or layouts else early_output(base, index, rel, proof.relations)
        if reason is not None:
            node = dist.node(rel.dist_id)
            suspects.append(_suspect(node, reason, []))
            continue
        if layouts and not findings:
            node = dist.node(rel.dist_id)
            made = partial_origin(node.id, dist, proof.relations)
            second = (made, MADE_AT) if made not in (None, node) else None
            reason = output_mismatch(node, rel.layout, layouts)
            suspects.append(_suspect(node, reason, [], second))
            suspects[-1].neighbourhood = neighbourhood(
                node.id, dist, base, proof.relations, proof.replicated
            )
            definite = True
    return results, suspects, definite


def _suspect(node, reason: str, operands: list[str], second=None) -> Suspect:
    loc = node.loc
    if second is not None:
        other, role = second
        where = other.loc
        second = Site(
            role, other.op, other.name, where.file if where else "", where.line if where else 0
        )
    return Suspect(
        op=node.op,
        node=node.name,
        file=loc.file if loc else "",
        line=loc.line if loc else 0,
        function=loc.function if loc else "",
        reason=reason,
        operands=operands,
        framework_op=node.framework_op,
        called_from=str(loc.call_site) if loc and loc.call_site else "",
        second=second,
        caller=(loc.call_site.file, loc.call_site.line) if loc and loc.call_site else None,
        via=str(loc.library) if loc and loc.library else "",
    )


def inherit_assumed_ranges(base: Graph, dist: Graph, inputs: list[Relation]) -> bool:
    """Give each distributed input the range assumed of its baseline input (a lookup index
    in the table's rows, int_ranges.py), when it holds the same values (replicated or a
    block of them). The verdict rests on the baseline's assumption alone, which the report
    prints; this lets the distributed graph's own guards around a partitioned lookup (XLA's
    clamp and negative-index wrap) fold the way the baseline's did. Returns whether any
    input got a range it did not have."""
    changed = False
    for relation in inputs:
        bounds = base.node(relation.base_id).attrs.get("assumed_range")
        if bounds is None or any(p.kind != "shard" for p in relation.layout):
            continue
        node = dist.node(relation.dist_id)
        if node.attrs.get("assumed_range") != bounds:
            node.attrs["assumed_range"] = bounds
            changed = True
    return changed


def assumption_notes(base: Graph, dist: Graph) -> list[str]:
    """What the verdict assumes about the inputs (lookup indices in range: int_ranges.py),
    and about literals the dumps elide."""
    elided = sorted(
        {
            f"{n.dtype}{list(n.shape)}"
            for g in (base, dist)
            for n in g.nodes.values()
            if n.op == "constant" and is_elided(str(n.attrs.get("value", "")))
        }
    )
    notes = (
        [
            "assumed: constants the graphs print as {...} (values elided) are equal wherever "
            f"their type and shape are: {', '.join(elided)}"
        ]
        if elided
        else []
    )
    return notes + [
        f"assumed: input `{base.input_name(i)}` lies in [{lo}, {hi + 1}) (a lookup index; "
        "out-of-range indices are outside what is verified)"
        for i in base.inputs
        if (bounds := base.node(i).attrs.get("assumed_range")) is not None
        for lo, hi in [bounds]
    ]


def verify_files(
    baseline: str,
    distributed: str,
    rules_dir: str | Path,
    mesh: str | None = None,
    relations: str | None = None,
    limits: Limits | None = None,
) -> Report:
    timings: dict[str, float] = {}
    start = time.perf_counter()
    rules = compile_rule_dir(rules_dir)
    timings["compile_rules"] = time.perf_counter() - start
    start = time.perf_counter()
    base = load_graph(baseline, rules.custom_calls)
    dist = load_graph(distributed, rules.custom_calls)
    timings["load"] = time.perf_counter() - start
    given = read_relations_file(relations) if relations else None
    chosen = choose_mesh(mesh, dist, given)
    return verify_graphs(base, dist, rules, chosen, given, limits, timings)
