"""`scalify.capture.torch_xla`: capture a torch-xla model as baseline and distributed HLO.

torch-xla pins its own torch, so it lives in another interpreter (a venv of its own); this
module only starts `xla_driver.py` there, once for the baseline on one device and once for
the distributed program on every device of the mesh, and gathers what they write.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from scalify.errors import ScalifyError
from scalify.mesh import parse_mesh

__all__ = ["DRIVER", "Captured", "torch_xla", "xla_python"]

DRIVER = Path(__file__).with_name("xla_driver.py")
HOW_TO = "docs/how-to/capture-torch-xla.md"


def xla_python(python: str | None = None) -> str:
    """The torch-xla interpreter: `python`, else $SCALIFY_XLA_PYTHON."""
    chosen = python or os.environ.get("SCALIFY_XLA_PYTHON")
    if not chosen:
        raise ScalifyError(
            "torch-xla runs in its own interpreter: pass --python PATH or set SCALIFY_XLA_PYTHON",
            notes=[
                'python -m venv xla-venv && xla-venv/bin/pip install "torch==2.9.0" '
                '"torch-xla==2.9.0" numpy',
                f"see {HOW_TO}",
            ],
        )
    if not Path(chosen).exists():
        raise ScalifyError(f"torch-xla interpreter not found: {chosen}")
    return chosen


@dataclass
class Captured:
    """The files a capture wrote, and the seconds each run took."""

    baseline: Path
    distributed: Path
    relations: Path
    seconds: dict[str, float] = field(default_factory=dict)

    def verify_command(self) -> str:
        return f"scalify verify {self.baseline} {self.distributed} --relations {self.relations}"


def _run_driver(python: str, role: str, function: str, mesh: str, out: Path, root: Path) -> None:
    command = [python, str(DRIVER), role, function, "--mesh", mesh, "--out", str(out)]
    command += ["--root", str(root)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise ScalifyError(
            f"capturing the {role} program {function} failed (exit {done.returncode})",
            notes=tail or None,
        )


def torch_xla(
    distributed: str,
    baseline: str,
    *,
    mesh: str,
    out: str | Path,
    python: str | None = None,
    root: str | Path | None = None,
) -> Captured:
    """Run `baseline` on one device and `distributed` on every device of `mesh` under
    torch-xla (PJRT on CPU, one process per device) and write `out/baseline.hlo`,
    `out/distributed.hlo` and `out/relations.json`, ready for
    `scalify verify out/baseline.hlo out/distributed.hlo --relations out/relations.json`.

    Both are `MODULE:FUNCTION` (a dotted module importable from the current folder, or a
    `.py` path); each function receives a capture context (see the how-to). Source paths
    under `root` (default: the current folder) are written relative to it.
    """
    parsed = parse_mesh(mesh)
    interpreter = xla_python(python)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    base_root = Path(root or os.getcwd()).resolve()
    seconds: dict[str, float] = {}
    for role, function in (("baseline", baseline), ("distributed", distributed)):
        start = time.perf_counter()
        _run_driver(interpreter, role, function, str(parsed), target, base_root)
        seconds[role] = round(time.perf_counter() - start, 2)
    base_rel = json.loads((target / "baseline.json").read_text())
    dist_rel = json.loads((target / "distributed.json").read_text())
    if set(base_rel["inputs"]) != set(dist_rel["inputs"]):
        raise ScalifyError(
            "the baseline and the distributed program declare different inputs: "
            f"{sorted(base_rel['inputs'])} vs {sorted(dist_rel['inputs'])}",
            str(target / "distributed.hlo"),
        )
    relations = target / "relations.json"
    relations.write_text(json.dumps(dist_rel, indent=2) + "\n")
    for role in ("baseline", "distributed"):
        (target / f"{role}.json").unlink()
    return Captured(target / "baseline.hlo", target / "distributed.hlo", relations, seconds)
