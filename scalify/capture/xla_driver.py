"""Run a user's torch-xla function and write its HLO, for `scalify capture`.

This file runs in the torch-xla interpreter (its own venv: torch-xla pins another torch than
Scalify's), by path, so it imports only torch, torch_xla and the standard library.

    python xla_driver.py baseline|distributed MODULE:FUNCTION --mesh tp=4 --out DIR [--root R]

`baseline` calls FUNCTION(ctx) once on one device; `distributed` starts one process per
device of the mesh (`torch_xla.launch`, PJRT on CPU) and calls it on every rank. FUNCTION
declares its inputs with `ctx.input(name, global_tensor, layout)` and returns its output
tensor(s). The HLO of rank 0 is written to DIR/ROLE.hlo with:

- each parameter named after its input (`op_name="x"` in its metadata, as JAX names
  arguments), since torch-xla numbers parameters in graph order, not argument order;
- the full Python stack of every instruction (torch-xla keeps it in the module proto's stack
  frame index but prints only the innermost frame, which for a collective is inside
  torch_xla): the `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames` tables and a
  `stack_frame_id` per instruction, as `jax ... as_text(debug_info=True)` prints them, so
  Scalify can report the innermost frame in the user's code. Files under `--root` are
  written relative to it.

DIR/ROLE.json holds {"inputs": {name: layout}, "outputs": [layout, ...]}.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

LAYOUT_RE = re.compile(r"shard\(\s*(\d+)\s*,\s*(\w+)\s*\)")


def parse_mesh(text: str) -> list[tuple[str, int]]:
    axes = []
    for part in text.split(","):
        name, _, size = part.partition("=")
        axes.append((name.strip(), int(size)))
    return axes


class Context:
    """What the user's function receives: where it runs, and how to declare inputs/outputs.

    rank, world_size: this process and how many there are (1 for the baseline);
    mesh: {axis: size}; coords: {axis: this rank's coordinate} (row-major, first axis
    slowest); device: the XLA device; distributed: False for the baseline run.
    """

    def __init__(self, mesh: list[tuple[str, int]], rank: int, distributed: bool) -> None:
        import torch_xla

        self.axes = mesh
        self.mesh = dict(mesh)
        self.rank = rank
        self.distributed = distributed
        self.world_size = 1
        for _, size in mesh if distributed else ():
            self.world_size *= size
        self.coords: dict[str, int] = {}
        rest = rank
        for name, size in reversed(mesh):
            self.coords[name] = rest % size if distributed else 0
            rest //= size
        self.device = torch_xla.device()
        self.inputs: dict[str, str] = {}
        self.input_ids: dict[int, str] = {}
        self.output_layouts: dict[int, str] = {}

    def groups(self, axis: str) -> list[list[int]]:
        """Replica groups of one mesh axis: ranks that differ only in that axis."""
        if axis not in self.mesh:
            raise ValueError(f"axis {axis!r} is not in the mesh {self.mesh}")
        names = [n for n, _ in self.axes]
        sizes = [s for _, s in self.axes]
        k = names.index(axis)
        groups: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size):
            rest, coords = rank, []
            for size in reversed(sizes):
                coords.append(rest % size)
                rest //= size
            coords.reverse()
            key = tuple(c for i, c in enumerate(coords) if i != k)
            groups.setdefault(key, []).append(rank)
        return list(groups.values())

    def input(self, name: str, value: Any, layout: str = "replicate") -> Any:
        """Declare input `name`: `value` is the global tensor (or a shape, filled at random);
        on a rank, the block `layout` gives it (`replicate`, `shard(DIM, AXIS)` ...) is put
        on the device. Returns that device tensor."""
        import torch
        import torch_xla

        if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in self.inputs:
            raise ValueError(f"input name {name!r} must be a new identifier")
        tensor = value if isinstance(value, torch.Tensor) else torch.randn(*value)
        placed: set[int] = set()
        if layout.strip() != "replicate":
            matches = LAYOUT_RE.findall(layout)
            if not matches or LAYOUT_RE.sub("", layout).strip():
                raise ValueError(f"input {name}: layout {layout!r} is not replicate or shard(...)")
            for dim_text, axis in matches:
                dim, size = int(dim_text), self.mesh.get(axis)
                if size is None or dim in placed or tensor.shape[dim] % size:
                    raise ValueError(
                        f"input {name}: bad layout {layout!r} for {tuple(tensor.shape)}"
                    )
                placed.add(dim)
                if self.distributed:
                    block = tensor.shape[dim] // size
                    tensor = tensor.narrow(dim, self.coords[axis] * block, block)
        on_device = tensor.contiguous().to(self.device)
        self.inputs[name] = layout.strip()
        self.input_ids[torch_xla._XLAC._xla_get_tensor_id(on_device)] = name
        return on_device

    def output(self, tensor: Any, layout: str = "replicate") -> Any:
        """Declare the layout an output must have (outputs are `replicate` otherwise)."""
        self.output_layouts[id(tensor)] = layout
        return tensor


def load_function(spec: str) -> Any:
    """MODULE:FUNCTION, MODULE a dotted module (importable from the current folder) or a
    path to a .py file."""
    module_name, _, function = spec.rpartition(":")
    if not module_name or not function:
        raise SystemExit(f"scalify capture: expected MODULE:FUNCTION, got {spec!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        path = Path(module_name).resolve()
        name = "scalify_capture_" + re.sub(r"\W", "_", path.stem)
        loaded = importlib.util.spec_from_file_location(name, path)
        if loaded is None or loaded.loader is None:
            raise SystemExit(f"scalify capture: cannot load {path}")
        module = importlib.util.module_from_spec(loaded)
        sys.modules[name] = module
        loaded.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    found = getattr(module, function, None)
    if not callable(found):
        raise SystemExit(f"scalify capture: {module_name} has no function {function!r}")
    return found


# ---- the module proto's stack frame index (protobuf wire format, decoded by hand)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, Any]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((number, value))
    return out


def _message(data: bytes) -> dict[int, Any]:
    return dict(_fields(data))


def debug_info(proto: bytes) -> tuple[list[str], list[str], list[dict], list[dict], dict]:
    """(file names, function names, file locations, stack frames, instruction name -> frame
    id) from an HloModuleProto: stack_frame_index is field 17, computations 3, their
    instructions 2, an instruction's name 1 and metadata 7, whose stack_frame_id is 15."""
    files: list[str] = []
    functions: list[str] = []
    locations: list[dict] = []
    frames: list[dict] = []
    frame_of: dict[str, int] = {}
    for number, value in _fields(proto):
        if number == 17:
            for key, item in _fields(value):
                if key == 1:
                    files.append(item.decode())
                elif key == 2:
                    functions.append(item.decode())
                elif key == 3:
                    locations.append(_message(item))
                elif key == 4:
                    frames.append(_message(item))
        elif number == 3:
            for key, item in _fields(value):
                if key != 2:
                    continue
                instruction = _message(item)
                frame = _message(instruction.get(7, b"")).get(15, 0)
                if frame:
                    frame_of[instruction[1].decode()] = frame
    return files, functions, locations, frames, frame_of


def tables(proto: bytes, root: str | None) -> tuple[str, dict[str, int]]:
    """The debug-info tables as HLO text, and each instruction's stack frame id. A printed
    `parent_frame_id` is the parent's id plus one (1: no parent), as XLA prints it."""
    files, functions, locations, frames, frame_of = debug_info(proto)
    if not frames:
        return "", {}
    prefix = (root.rstrip(os.sep) + os.sep) if root else None

    def shown(path: str) -> str:
        return path[len(prefix) :] if prefix and path.startswith(prefix) else path

    lines = ["FileNames"]
    lines += [f"{i} {json.dumps(shown(f))}" for i, f in enumerate(files, 1)]
    lines += ["", "FunctionNames"]
    lines += [f"{i} {json.dumps(f)}" for i, f in enumerate(functions, 1)]
    lines += ["", "FileLocations"]
    lines += [
        f"{i} {{file_name_id={loc.get(1, 0)} function_name_id={loc.get(2, 0)} "
        f"line={loc.get(3, 0)}}}"
        for i, loc in enumerate(locations, 1)
    ]
    lines += ["", "StackFrames"]
    lines += [
        f"{i} {{file_location_id={fr.get(1, 0)} parent_frame_id={fr.get(2, 0) + 1}}}"
        for i, fr in enumerate(frames, 1)
    ]
    return "\n".join(lines) + "\n", frame_of


_INSTR_RE = re.compile(
    r"^(\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s.*?metadata=\{)((?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\}"
)
_PARAM_RE = re.compile(r"\sparameter\((\d+)\)")


def annotate(text: str, proto: bytes, names: dict[int, str], root: str | None) -> str:
    """Name the parameters, add the stack frames (see the module docstring)."""
    table_text, frame_of = tables(proto, root)
    out = []
    for line in text.splitlines():
        m = _INSTR_RE.match(line)
        if m is not None:
            head, name, meta = m.group(1), m.group(2), m.group(3)
            param = _PARAM_RE.search(line[: m.end(1)])
            if param is not None and int(param.group(1)) in names:
                meta = re.sub(r'op_type="[^"]*"\s*', "", meta)
                meta = re.sub(r'op_name="[^"]*"', f'op_name="{names[int(param.group(1))]}"', meta)
            if name in frame_of:
                meta = f"{meta} stack_frame_id={frame_of[name]}"
            line = head + meta + "}" + line[m.end() :]
        out.append(line)
    if table_text:  # after the `HloModule` line, where JAX prints them
        out[1:1] = ["", table_text.rstrip("\n")]
    return "\n".join(out) + "\n"


def run(role: str, spec: str, mesh: list[tuple[str, int]], rank: int, root: str | None):
    """Call the function on this rank; returns (annotated HLO text, relations)."""
    import torch
    import torch_xla

    torch.manual_seed(0)
    ctx = Context(mesh, rank, role == "distributed")
    result = load_function(spec)(ctx)
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    if not outputs or not all(isinstance(t, torch.Tensor) for t in outputs):
        raise SystemExit("scalify capture: the function must return a tensor or a tuple of tensors")
    ids, _ = torch_xla._XLAC._get_tensors_xla_device_data_node(outputs)
    names = {number: ctx.input_ids[i] for number, i in enumerate(ids) if i in ctx.input_ids}
    text = torch_xla._XLAC._get_xla_tensors_hlo(outputs)
    proto = torch_xla._XLAC._get_xla_tensors_hlo_proto(outputs)
    relations = {
        "mesh": ",".join(f"{n}={s}" for n, s in mesh),
        "inputs": {n: layout for n, layout in ctx.inputs.items() if n in names.values()},
        "outputs": [ctx.output_layouts.get(id(t), "replicate") for t in outputs],
    }
    return annotate(text, proto, names, root), relations


def _write(out: Path, stem: str, text: str, relations: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.hlo").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(relations, indent=2) + "\n")


def _rank_main(index: int, spec: str, mesh: list[tuple[str, int]], out: str, root: str | None):
    import torch_xla.runtime as xr

    rank = xr.global_ordinal()
    text, relations = run("distributed", spec, mesh, rank, root)
    _write(Path(out) / ".ranks", f"rank{rank}", text, relations)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["baseline", "distributed"])
    ap.add_argument("function", help="MODULE:FUNCTION")
    ap.add_argument("--mesh", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--root", default=None, help="write source paths under ROOT relative to it")
    args = ap.parse_args(argv)
    mesh = parse_mesh(args.mesh)
    out = Path(args.out)
    root = os.path.abspath(args.root) if args.root else None
    size = 1
    for _, n in mesh:
        size *= n
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["XLA_HLO_DEBUG"] = "1"
    os.environ["CPU_NUM_DEVICES"] = str(size if args.role == "distributed" else 1)
    if args.role == "baseline":
        text, relations = run("baseline", args.function, mesh, 0, root)
        _write(out, "baseline", text, relations)
        return 0
    import torch_xla

    load_function(args.function)  # a missing module or function fails here, not on every rank
    torch_xla.launch(_rank_main, args=(args.function, mesh, str(out), root))
    ranks = out / ".ranks"
    first = (ranks / "rank0.hlo").read_text()
    for rank in range(1, size):
        if (ranks / f"rank{rank}.hlo").read_text() != first:
            print(
                f"scalify capture: rank {rank} traced another program than rank 0; "
                "rank 0's is written",
                file=sys.stderr,
            )
    _write(out, "distributed", first, json.loads((ranks / "rank0.json").read_text()))
    for path in ranks.iterdir():
        path.unlink()
    ranks.rmdir()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:  # the user's function failed: its traceback is what helps
        traceback.print_exc()
        sys.exit(1)
