"""The op registry: each op declared once, and the tables that read it agree with it."""

from __future__ import annotations

import numpy as np
import pytest
from scalify.compiler.signatures import DIM_MAPPED, OP_ARITY, OP_ATTRS

from scalify.engine.signature import node_signature
from scalify.ops import OPS
from scalify.simulate import NotSimulable
from scalify.soundness.fuzz import generate

GENERATED = sorted(name for name, spec in OPS.items() if spec.generate)


def test_compiler_tables_are_read_from_the_registry():
    assert OP_ARITY == {name: spec.arity for name, spec in OPS.items() if spec.arity}
    assert OP_ATTRS == {name: dict(spec.attrs) for name, spec in OPS.items() if spec.attrs}
    assert DIM_MAPPED <= set(OP_ARITY)


def test_every_op_the_fuzzer_builds_is_simulated():
    for name in GENERATED:
        spec = OPS[name]
        assert spec.kernel or spec.fuzz_shape, name


def test_an_op_is_declared_once():
    from scalify.ops import collectives, elementwise, indexing, structural
    from scalify.ops.spec import OpSpec, registry

    with pytest.raises(ValueError, match="declared twice"):
        registry(elementwise.OPS, [OpSpec("neg")])
    with pytest.raises(ValueError, match="S or I"):
        OpSpec("reverse", arity=(1,), attrs={"dims": "list"})
    names = [s.name for m in (elementwise, structural, indexing, collectives) for s in m.OPS]
    assert len(names) == len(set(names)) == len(OPS)


@pytest.mark.parametrize("name", GENERATED)
def test_keys_set_only_the_attributes_rules_may_read(name):
    """What a key puts on the signature is what the op declares rules may read (and a dim
    map is total over the operands it maps)."""
    built = 0
    for seed in range(20):
        try:
            instance = generate(name, np.random.default_rng(seed))
        except NotSimulable:
            continue
        for graph in (instance.base, instance.dist):
            for node in graph.nodes.values():
                if node.op != name:
                    continue
                built += 1
                sig = node_signature(node, graph, instance.mesh)
                declared = {"class", *OPS[name].attrs, *OPS[name].engine_attrs}
                named = {a.split(":")[0] for a in (*sig.attrs_s, *sig.attrs_i)}
                assert named <= declared, (name, sig)
                for (k, d), e in sig.out_dims.items():
                    assert e < len(node.shape), (name, k, d, e)
    assert built, f"no instance of {name} in 20 seeds"
