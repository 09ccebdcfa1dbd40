"""Localisation of bugs that leave no op of their own at the line to fix: an argument passed to
a helper unpermuted, a permutation that makes a dim look like independent chunks, a
reduction over groups that are no mesh axis. The first suspect must name the line."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import REPO, export_example
from scalify.compiler.compile import compile_rule_dir

from scalify.frontends.frames import pick_location
from scalify.ir import SourceLoc
from scalify.layout import layout_str
from scalify.relations import RelationsFile, input_relations, output_relations
from scalify.soundness.mutate import mutants
from scalify.soundness.mutation_corpus import hlo_pairs
from scalify.verify import Limits, verify_graphs

pytest.importorskip("jax")


def test_a_helpers_op_is_located_with_the_line_that_called_it():
    helper = SourceLoc("pkg/model.py", 180, "causal_attention")
    caller = SourceLoc("pkg/model.py", 345, "attention")
    driver = SourceLoc("pkg/export.py", 20, "main")
    loc = pick_location([helper, caller, driver], cwd="/nowhere")
    assert (loc.file, loc.line) == ("pkg/model.py", 180)
    assert (loc.call_site.file, loc.call_site.line) == ("pkg/model.py", 345)
    # a top-level function called from another file (the driver) has no call site
    assert pick_location([caller, driver], cwd="/nowhere").call_site is None


SITE = "/home/me/venv/lib/python3.11/site-packages"


def _frame(path: str, line: int, function: str) -> SourceLoc:
    """A frame of an installed package (`keras/...`) or of the user's code (`/home/me/...`)."""
    return SourceLoc(path if path.startswith("/") else f"{SITE}/{path}", line, function)


def test_a_keras_layers_op_is_located_at_the_users_call_not_the_backend_wrapper():
    """Keras's `Layer.__call__` calls the user's `call()` back; the op is made in Keras's
    backend einsum (one line for every einsum of every model): the user's line comes first,
    the backend's beside it, the line of `Model.call` that called the block as call site.
    JAX drops its own frames, so the backend wrapper is the innermost frame."""
    stack = [
        _frame("keras/src/backend/jax/numpy.py", 144, "einsum"),
        _frame("keras/src/ops/numpy.py", 3011, "einsum"),
        _frame("/home/me/proj/model.py", 17, "Block.call"),
        _frame("keras/src/ops/operation.py", 58, "Operation.__call__"),
        _frame("keras/src/utils/traceback_utils.py", 117, "error_handler"),
        _frame("keras/src/layers/layer.py", 941, "Layer.__call__"),
        _frame("/home/me/proj/model.py", 28, "Model.call"),
        _frame("keras/src/layers/layer.py", 941, "Layer.__call__"),
        _frame("/home/me/proj/train.py", 40, "step"),
        _frame("/home/me/proj/train.py", 52, "<module>"),
    ]
    loc = pick_location(stack, cwd="/home/me/proj")
    assert (loc.file, loc.line, loc.function) == ("model.py", 17, "Block.call")
    assert (loc.library.file, loc.library.line) == ("keras/src/backend/jax/numpy.py", 144)
    assert (loc.call_site.file, loc.call_site.line) == ("model.py", 28)


def test_library_model_code_stays_first_with_the_users_line_as_call_site():
    """transformers' model code made the op: torch's module calls (the tracer) and pytest
    running the user's test (a package outside the user's frame that made no part of the op)
    are no callback, so the library's line stays first."""
    llama = "transformers/models/llama/modeling_llama.py"
    stack = [
        _frame("torch/nn/functional.py", 2377, "linear"),
        _frame(llama, 250, "forward"),
        _frame("torch/nn/modules/module.py", 1789, "_call_impl"),
        _frame(llama, 402, "forward"),
        _frame("torch/nn/modules/module.py", 1789, "_call_impl"),
        _frame("/home/me/proj/wrapper.py", 12, "forward"),
        _frame("torch/nn/modules/module.py", 1789, "_call_impl"),
        _frame("/home/me/proj/test_model.py", 30, "test_llama"),
        _frame("_pytest/python.py", 159, "pytest_pyfunc_call"),
        _frame("pluggy/_callers.py", 103, "_multicall"),
    ]
    loc = pick_location(stack, cwd="/home/me/proj")
    assert (loc.file, loc.line) == (llama, 250) and loc.library is None
    assert (loc.call_site.file, loc.call_site.line) == ("wrapper.py", 12)
    # transformers' Flax models on JAX, whose stacks hold no frame of JAX's
    flax_llama = "transformers/models/llama/modeling_flax_llama.py"
    stack = [
        _frame(flax_llama, 210, "FlaxLlamaAttention.__call__"),
        _frame(flax_llama, 480, "FlaxLlamaModule.__call__"),
        _frame("/home/me/proj/export.py", 25, "forward"),
        _frame("_pytest/python.py", 159, "pytest_pyfunc_call"),
    ]
    loc = pick_location(stack, cwd="/home/me/proj")
    assert (loc.file, loc.line) == (flax_llama, 210) and loc.library is None
    assert (loc.call_site.file, loc.call_site.line) == ("export.py", 25)


def test_the_users_own_ops_keep_their_line():
    """Ops the user's code makes with JAX or torch directly: the tracer's frames are skipped
    and no library line is kept."""
    stack = [
        _frame("jax/_src/numpy/lax_numpy.py", 9200, "einsum"),
        _frame("/home/me/proj/model.py", 40, "attention"),
        _frame("torch/nn/modules/module.py", 1789, "_call_impl"),
        _frame("/home/me/proj/run.py", 5, "<module>"),
    ]
    loc = pick_location(stack, cwd="/home/me/proj")
    assert (loc.file, loc.line) == ("model.py", 40)
    assert loc.library is None and loc.call_site is None


def _last_line_of(path, pattern: str) -> int:
    """The last line holding `pattern` (the tensor-parallel program's, after the baseline's)."""
    lines = path.read_text().splitlines()
    return max(i for i, line in enumerate(lines, 1) if pattern in line)


def _report_of_mutant(out, files, pick):
    """The report on the first mutant of the distributed graph that `pick(mutant)` selects."""
    rules = compile_rule_dir(REPO / "rules")
    ((_, base, dist, mesh, given),) = hlo_pairs(out, *files)
    inputs = input_relations(base, dist, mesh, given)
    outputs = output_relations(base, dist, mesh, given, inputs)
    stated = given or RelationsFile("<mutant>", None, {}, None)
    if stated.outputs is None:
        stated = replace(stated, outputs=[layout_str(r.layout) for r in outputs])
    mutant = next(m for m in mutants(dist, mesh) if pick(m))
    return mutant, verify_graphs(
        base, mutant.graph, rules, mesh, stated, limits=Limits(simulate=False)
    )


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama_full")
    script = REPO / "examples" / "llama" / "export.py"
    return export_example(
        script, out, "--config", "tiny", "--tp", "2", "--parts", "full", "--bugs", "none"
    )


def _attention_call_transposed(llama, perm: str):
    """(the line of the tensor-parallel attention's call of `causal_attention`, the report on
    the mutant whose transpose of an argument there has permutation `perm`)."""
    model = REPO / "examples" / "llama" / "model.py"
    call = _last_line_of(model, "o = causal_attention(q.transpose")
    _, report = _report_of_mutant(
        llama,
        ("baseline.hlo", "tp.hlo"),
        lambda m: f"perm {perm}" in m.description and m.sites[0][1] == call,
    )
    return call, report


def test_an_argument_left_unpermuted_is_located_at_the_call(llama):
    """`causal_attention(q, ...)` where `q.transpose(0, 2, 1, 3)` belongs: the identity
    leaves no op at the call, and the dot that pairs the wrong dims is in the helper; the
    report names the call that passed it."""
    call, report = _attention_call_transposed(llama, "[0, 1, 2, 3]")
    assert report.verdict != "equivalent"
    first = report.suspects[0]
    assert first.op == "dot" and ("examples/llama/model.py", call) in first.sites()
    assert first.called_from.startswith(f"examples/llama/model.py:{call}")


def test_a_permutation_that_looks_like_chunks_keeps_the_plain_proofs_suspect(llama):
    """A transpose of four dims of 8 into [0, 3, 1, 2] makes the head-dim contraction look
    like a reduction across independent chunks; read as a chunk axis nothing relates, so the
    report keeps the plain proof, whose first suspect is the transpose itself."""
    call, report = _attention_call_transposed(llama, "[0, 3, 1, 2]")
    assert report.suspects[0].op == "transpose"
    assert report.suspects[0].line == call
    assert not any("independent chunks" in note for note in report.notes)


def test_a_reduction_over_no_mesh_axis_comes_before_the_rule_gaps_it_leaves(tmp_path):
    script = REPO / "examples" / "flash_decoding" / "export.py"
    out = export_example(script, tmp_path, "--tp", "2")
    _, report = _report_of_mutant(
        out,
        ("baseline.hlo", "fd.hlo"),
        lambda m: (
            m.description.startswith("all_reduce `pmax") and "half the group" in m.description
        ),
    )
    first = report.suspects[0]
    assert first.op == "all_reduce" and "not the groups of any mesh axis" in first.reason
