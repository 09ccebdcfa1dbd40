"""The Python API for tests: `assert_equivalent(baseline_fn, parallel_fn, ...)`.

Both callables are traced in this process on rank 0 of a fake process group (the same path
as `scalify.capture.export`), lowered through the FX frontend and verified in-process, so a
pytest test needs no launcher, no files and no devices. A failed proof raises
`AssertionError` whose message is the text report, suspects and source lines included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scalify.mesh import Mesh, parse_mesh
from scalify.relations import RelationsFile
from scalify.report.model import EQUIVALENT, Report

__all__ = ["assert_equivalent", "check_equivalent", "fake_mesh"]


def fake_mesh(spec: str = "tp=4") -> Any:
    """A `DeviceMesh` over a fake process group of the mesh's size (this process is rank 0),
    to parallelise a module with DTensor in a test. `spec` is a mesh such as `tp=4`."""
    from torch.distributed.device_mesh import init_device_mesh

    from scalify.capture.fx_trace import fake_process_group

    mesh = parse_mesh(spec)
    fake_process_group(mesh.size)
    return init_device_mesh("cpu", tuple(n for _, n in mesh.axes), mesh_dim_names=mesh.names)


def _mesh_of(mesh: Any) -> Mesh:
    """A mesh string, a scalify Mesh, or a torch DeviceMesh (its dim names, else tp/dp...)."""
    if isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, str):
        return parse_mesh(mesh)
    shape = tuple(int(n) for n in getattr(mesh, "shape", ()))
    if not shape:
        raise TypeError(f"mesh must be a string such as 'tp=4' or a DeviceMesh, not {mesh!r}")
    names = getattr(mesh, "mesh_dim_names", None) or (
        ("tp",) if len(shape) == 1 else tuple(f"axis{i}" for i in range(len(shape)))
    )
    return parse_mesh(",".join(f"{k}={v}" for k, v in zip(names, shape, strict=True)))


def _label(fn: Callable[..., Any], role: str) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"<{role} {name}>"


def _given_relations(
    relations: Mapping[str, Any] | None, *, infer_outputs: bool
) -> RelationsFile | None:
    """The stated relations as a relations file; `infer_outputs` lets outputs it does not
    state take their layout from the shape ratios (a program on local shards)."""
    if relations is None and not infer_outputs:
        return None
    stated = relations or {}
    outputs = list(stated.get("outputs") or []) or None
    inputs = dict(stated.get("inputs", {}))
    return RelationsFile("<relations>", None, inputs, outputs, infer_outputs=infer_outputs)


def _weight_layouts(placements: dict[str, Any], mesh: Mesh) -> dict[str, Any]:
    """Input name -> (the layout a DTensor weight's placements give, its global shape)."""
    from scalify.capture.placements import placement_layout

    found = {}
    for name, (placed, local_shape, global_shape) in placements.items():
        layout = placement_layout(placed, local_shape, mesh)
        if layout is not None:
            found[name] = (layout, global_shape)
    return found


def _placement_layouts(placed: list[Any], dist: Any, mesh: Mesh) -> dict[int, str]:
    """Output index -> the layout its DTensor placement gives, for the outputs that are
    DTensors (output_relations reads them unless the stated relations say otherwise)."""
    from scalify.capture.placements import placement_layout

    shapes = [dist.node(o).shape for o in dist.outputs]
    layouts = [placement_layout(p, s, mesh) for p, s in zip(placed, shapes, strict=False)]
    return {i: layout for i, layout in enumerate(layouts) if layout}


def _weights(gm: Any) -> dict[str, Any]:
    """Name -> value of a traced program's weights (its parameters and buffers, as its
    graph names its inputs), for checking inferred layouts against them."""
    import itertools

    found = {}
    for name, tensor in itertools.chain(gm.named_parameters(), gm.named_buffers()):
        local = (tensor.to_local() if hasattr(tensor, "to_local") else tensor).detach().cpu()
        if local.is_complex():
            continue  # complex tables (RoPE as a rotation) are not compared
        found[name] = (local.float() if local.is_floating_point() else local).numpy()
    return found


def check_equivalent(
    baseline_fn: Callable[..., Any],
    parallel_fn: Callable[..., Any],
    *,
    mesh: Any,
    example_inputs: Sequence[Any],
    parallel_inputs: Sequence[Any] | None = None,
    relations: Mapping[str, Any] | None = None,
    rules: str | Path | None = None,
    tracing_mode: str = "auto",
) -> Report:
    """Trace both callables and verify; returns the report whatever the verdict.

    `baseline_fn(*example_inputs)` is the single-device program on global inputs.
    `parallel_fn(*parallel_inputs)` is what rank 0 runs: a DTensor-parallelised module, or a
    module calling functional collectives on its local shards; `parallel_inputs` defaults to
    `example_inputs` (DTensor modules take the global, replicated input). Weights pair by
    parameter name and their layouts are inferred from the shape ratios; `relations` may
    state them as in a relations file (`{"inputs": {NAME: LAYOUT}, "outputs": [LAYOUT]}`).
    Outputs it does not state must be `replicate`, except that with `parallel_inputs` (a
    program on local shards, such as a `SequenceParallel` block) an output whose shape
    differs from the baseline's takes its layout from the shape ratios, as inputs do.

    Outputs may be any pytree of tensors (a `ModelOutput`, a tuple); each tensor leaf is
    checked, and a DTensor leaf must have the layout its placements give. `tracing_mode`:
    "real", "fake" (fake tensors: gets through framework code that branches on data when
    it sees a tracer) or "auto" (real, then fake for both when real tracing stops).
    """
    from scalify.canon.canonicalize import canonicalize
    from scalify.capture.fx_trace import fake_process_group, trace
    from scalify.cli import default_rules_dir
    from scalify.compiler.compile import compile_rule_dir
    from scalify.frontends.custom_calls import expand_custom_calls
    from scalify.frontends.fx import graph_from_fx
    from scalify.simulate.input_values import InputValues
    from scalify.verify import verify_graphs

    chosen = _mesh_of(mesh)
    fake_process_group(chosen.size)
    base_inputs = tuple(example_inputs)
    dist_inputs = base_inputs if parallel_inputs is None else tuple(parallel_inputs)
    base_label, dist_label = _label(baseline_fn, "baseline"), _label(parallel_fn, "parallel")
    base_gm = trace(baseline_fn, base_inputs, tracing_mode=tracing_mode)
    traced = trace(parallel_fn, dist_inputs, across_devices=True, tracing_mode=tracing_mode)
    if base_gm.meta["tracing_mode"] != traced.meta["tracing_mode"]:  # one mode for both,
        base_gm = trace(baseline_fn, base_inputs, tracing_mode="fake")  # so both decompose
        traced = trace(parallel_fn, dist_inputs, across_devices=True, tracing_mode="fake")
    compiled = compile_rule_dir(rules or default_rules_dir())
    base = graph_from_fx(base_gm, base_label)
    dist = graph_from_fx(traced, dist_label, world_size=chosen.size)
    for graph in (base, dist):  # a framework's own ops, as the rule files declare them
        expand_custom_calls(graph, compiled.custom_calls)
    base, dist = canonicalize(base), canonicalize(dist)
    dist.output_layouts = _placement_layouts(traced.meta["output_placements"], dist, chosen)
    dist.input_layouts = _weight_layouts(traced.meta.get("input_placements", {}), chosen)
    dist.output_inputs = dict(traced.meta.get("output_inputs", {}))
    given = _given_relations(relations, infer_outputs=parallel_inputs is not None)
    # this process is device 0; weights the program updates (an optimizer step) hold their
    # new values once traced, not the inputs': those are left unchecked
    written = set(dist.output_inputs.values()) | set(base_gm.meta.get("output_inputs", {}).values())
    values = InputValues(
        {k: v for k, v in _weights(base_gm).items() if k not in written},
        {k: v for k, v in _weights(traced).items() if k not in written},
    )
    return verify_graphs(base, dist, compiled, chosen, given, values=values)


def assert_equivalent(
    baseline_fn: Callable[..., Any], parallel_fn: Callable[..., Any], **options: Any
) -> Report:
    """`check_equivalent` with the same arguments (`options` are its keyword arguments),
    raising AssertionError with the text report unless the verdict is `equivalent` (pytest
    shows the suspects and their source lines). Returns the report."""
    from scalify.report import render

    report = check_equivalent(baseline_fn, parallel_fn, **options)
    if report.verdict != EQUIVALENT:
        raise AssertionError("scalify: not proved equivalent\n" + render(report, "text"))
    return report
