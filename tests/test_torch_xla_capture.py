"""torch-xla capture: `scalify capture` runs examples/torch_xla_mlp under torch-xla (its own
venv, given by $SCALIFY_XLA_PYTHON) on 4 CPU devices, and `scalify verify` proves the correct
program and reports each bug at its line, an all-reduce included (torch-xla's own metadata
puts collectives inside torch_xla). Skipped without the venv, unless SCALIFY_REQUIRE_XLA=1
(CI), where a missing venv fails."""

from __future__ import annotations

import ast
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import REPO, bug_line, caught_suspect

from scalify.capture.xla import DRIVER

MODEL = REPO / "examples" / "torch_xla_mlp" / "model.py"
SHOWN = "examples/torch_xla_mlp/model.py"
PROGRAMS = {
    "tp": "tp_mlp",
    "bias_before_allreduce": "tp_mlp_bias_before_allreduce",
    "double_allreduce": "tp_mlp_double_allreduce",
}


def _xla_python() -> str:
    python = os.environ.get("SCALIFY_XLA_PYTHON", "")
    if python and os.path.exists(python):
        return python
    if os.environ.get("SCALIFY_REQUIRE_XLA") == "1":
        pytest.fail(f"SCALIFY_REQUIRE_XLA=1 but no torch-xla interpreter at {python!r}")
    pytest.skip("set SCALIFY_XLA_PYTHON to a python with torch-xla 2.9 to run")


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Each program captured into its own folder (concurrently: each is mostly start-up)."""
    from scalify.capture import torch_xla

    python = _xla_python()
    root = tmp_path_factory.mktemp("xla")

    def capture(item):
        name, function = item
        return name, torch_xla(
            f"{MODEL}:{function}",
            f"{MODEL}:mlp",
            mesh="tp=4",
            out=root / name,
            python=python,
            root=REPO,
        )

    with ThreadPoolExecutor(len(PROGRAMS)) as pool:
        return dict(pool.map(capture, PROGRAMS.items()))


def verify(cli, files, *extra):
    return cli(
        "verify",
        str(files.baseline),
        str(files.distributed),
        "--relations",
        str(files.relations),
        *extra,
    )


def test_capture_writes_named_inputs_and_relations(captured):
    files = captured["tp"]
    relations = json.loads(files.relations.read_text())
    assert relations == {
        "mesh": "tp=4",
        "inputs": {
            "x": "replicate",
            "w1": "shard(1, tp)",
            "b1": "shard(0, tp)",
            "w2": "shard(0, tp)",
            "b2": "replicate",
        },
        "outputs": ["replicate"],
    }
    text = files.distributed.read_text()
    assert 'op_name="w1"' in text and "StackFrames" in text
    assert f'"{SHOWN}"' in text  # paths under the repository are written relative to it


def test_good_program_is_equivalent(captured, cli):
    result = verify(cli, captured["tp"])
    assert result.code == 0, result.out + result.err
    assert "verdict: equivalent" in result.out
    assert "w2: shard(0, tp) (relations file)" in result.out


@pytest.mark.parametrize(
    "bug,op", [("bias_before_allreduce", "add"), ("double_allreduce", "all_reduce")]
)
def test_bug_is_reported_at_its_line(captured, cli, bug, op):
    result = verify(cli, captured[bug], "--format", "json")
    assert caught_suspect(result) == (op, SHOWN, bug_line(bug, MODEL), "tp_mlp")


def test_driver_imports_only_torch_torch_xla_and_the_standard_library():
    """It runs in the torch-xla venv, where Scalify and its dependencies are not installed."""
    allowed = set(sys.stdlib_module_names) | {"torch", "torch_xla", "__future__"}
    tree = ast.parse(DRIVER.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        assert all(name.split(".")[0] in allowed for name in names), names


def test_capture_without_an_interpreter_says_how_to_get_one(cli, monkeypatch):
    monkeypatch.delenv("SCALIFY_XLA_PYTHON", raising=False)
    result = cli(
        "capture", f"{SHOWN}:tp_mlp", "--baseline", f"{SHOWN}:mlp", "--mesh", "tp=4", "-o", "x"
    )
    assert result.code == 2
    assert "SCALIFY_XLA_PYTHON" in result.err and "torch-xla==2.9.0" in result.err
