"""Export the PyTorch MLP example as `.pt2` files: the baseline and each tensor-parallel variant.

Usage: python examples/torch_mlp/export.py --out DIR [--tp 4] [--batch 8] [--hidden 64]
       [--ffn 256] [--no-dtensor]

Everything runs in this one CPU process: a fake process group (`torch.distributed`'s "fake"
backend, from its testing utilities) of `tp` ranks stands in for the real ones, and the
program of rank 0 is traced with `torch.export`. The functional collectives in the traced
graph name their group only by a string, so the files are written with
`scalify.frontends.fx.save_exported`, which records each group's size inside the `.pt2`.
Source paths in stack traces are made relative to the repository root, so reports read
`examples/torch_mlp/model.py` whatever the directory.

`dtensor.pt2` is the same MLP parallelised by DTensor (`ColwiseParallel` on fc1,
`RowwiseParallel` on fc2, on a 1-D device mesh), traced with `make_fx` and then exported.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def load_model() -> ModuleType:
    """examples/torch_mlp/model.py under its own module name (examples/mlp has a `model`)."""
    name = "scalify_example_torch_mlp_model"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def fake_process_group(world: int) -> object:
    """The default (WORLD) group of a fake `world`-rank job, this process being rank 0
    (Scalify's own helper: it replaces a fake job of another size)."""
    from scalify.capture.fx_trace import fake_process_group as scalify_fake_process_group

    return scalify_fake_process_group(world)


def _relative_traces(ep) -> None:
    """Strip the repository root from every stack trace (metadata only)."""
    root = str(REPO_ROOT) + os.sep
    for node in ep.graph.nodes:
        trace = node.meta.get("stack_trace")
        if trace:
            node.meta["stack_trace"] = trace.replace(root, "")


def _dtensor_program(full, x, tp: int):
    """The MLP parallelised by DTensor, traced with make_fx, as an ExportedProgram whose
    parameters carry the module's names (make_fx holds them as anonymous constants)."""
    import copy

    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from torch.fx.experimental.proxy_tensor import make_fx

    mesh = init_device_mesh("cpu", (tp,))
    model = parallelize_module(
        copy.deepcopy(full), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    )
    gm = make_fx(model, record_stack_traces=True)(x)
    local = {}
    for name, p in model.named_parameters():
        tensor = p.to_local() if hasattr(p, "to_local") else p
        local[tensor.data_ptr()] = name.replace(".", "_")
    for node in gm.graph.nodes:
        if node.op == "placeholder":  # make_fx calls it arg0_1; the baseline calls it x
            node.name = node.target = "x"
        if node.op != "get_attr":
            continue
        tensor = getattr(gm, node.target)
        name = local.get(tensor.data_ptr())
        if name is None:
            continue
        gm.register_parameter(name, torch.nn.Parameter(tensor.detach().clone()))
        delattr(gm, node.target)
        node.target = name
    gm.graph.lint()
    gm.recompile()
    return torch.export.export(gm, (x,))


def export_all(
    out_dir: Path,
    tp: int = 4,
    batch: int = 8,
    hidden: int = 64,
    ffn: int = 256,
    dtensor: bool = True,
) -> dict[str, Path]:
    """Write baseline.pt2, tp.pt2, tp_<bug>.pt2 (and dtensor.pt2, and baseline_biased.pt2
    with dtensor_biased.pt2 for an fc2 that has its own bias) to out_dir."""
    import torch

    from scalify.frontends.fx import save_exported

    model = load_model()

    group = fake_process_group(tp)
    torch.manual_seed(0)
    full = model.MLP(hidden, ffn).eval()
    x = torch.randn(batch, hidden)
    programs = {"baseline": torch.export.export(full, (x,))}
    for bug in (None, *model.BUGS):
        name = "tp" if bug is None else f"tp_{bug}"
        programs[name] = torch.export.export(model.TPMLP(full, 0, tp, group, bug).eval(), (x,))
    if dtensor:
        programs["dtensor"] = _dtensor_program(full, x, tp)
        biased = model.BiasedMLP(hidden, ffn).eval()
        programs["baseline_biased"] = torch.export.export(biased, (x,))
        programs["dtensor_biased"] = _dtensor_program(biased, x, tp)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, ep in programs.items():
        _relative_traces(ep)
        path = out_dir / f"{name}.pt2"
        save_exported(ep, path)
        written[name] = path
    return written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--no-dtensor", action="store_true", help="skip dtensor.pt2")
    a = ap.parse_args(argv)
    for path in export_all(a.out, a.tp, a.batch, a.hidden, a.ffn, not a.no_dtensor).values():
        print(path)


if __name__ == "__main__":
    main()
