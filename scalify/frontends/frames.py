"""Which frame of a call stack is an op's source location.

A bug in a framework's model code (torchtitan's `embedding.py`, transformers' `modeling_llama.py`,
transformers-neuronx's `attention.py`) must be reported there, not at the user's one call into
the library; but the frames of the tracer itself (torch, JAX, torch-xla, the Neuron lowering)
say nothing about the model. So the location is the innermost frame outside the *tracing
machinery*, and when that frame is inside an installed package, the innermost frame outside
every installed package is kept beside it as the call site: the line in the user's own code
that reached the library.
"""

from __future__ import annotations

import os
import sysconfig

from scalify.ir import SourceLoc

# Packages whose frames are the tracer or the numeric library itself, never model code.
_MACHINERY = (
    "torch",
    "torch_xla",
    "jax",
    "jaxlib",
    "torch_neuronx",
    "pyhlo",
    "libneuronxla",
    "neuronxcc",
    "flax",
    "functorch",
)
_PACKAGE_DIRS = ("site-packages", "dist-packages")


def _stdlib_dirs() -> tuple[str, ...]:
    dirs = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib")}
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


_STDLIB = _stdlib_dirs()
_SCALIFY = os.path.dirname(os.path.abspath(__file__)) + os.sep  # the tracer's own frames


def _probe(file: str) -> str:
    return "/" + file.replace("\\", "/")


def package_path(file: str) -> str | None:
    """The path of `file` inside the package directory that holds it
    (`torchtitan/models/llama3/model.py`), or None when it is not in one."""
    probe = _probe(file)
    for marker in _PACKAGE_DIRS:
        at = probe.rfind(f"/{marker}/")
        if at >= 0:
            return probe[at + len(marker) + 2 :]
    return None


def _source_checkout_path(file: str) -> str | None:
    """The path of `file` below the `src/` folder of a source checkout in src layout
    (`.../transformers-neuronx/src/transformers_neuronx/decoder.py` ->
    `transformers_neuronx/decoder.py`), or None."""
    probe = _probe(file)
    at = probe.rfind("/src/")
    return probe[at + 5 :] if at >= 0 and os.path.isabs(file) else None


def is_machinery(file: str) -> bool:
    """A frame of the tracer, the numeric library, the standard library or generated code."""
    if file.startswith("<"):
        return True  # <eval_with_key>, <string>: generated code
    inside = package_path(file)
    if inside is not None:  # an installed package (site-packages sits inside the stdlib dir)
        return any(inside.startswith(f"{name}/") for name in _MACHINERY)
    if any(f"/{name}/" in _probe(file) for name in _MACHINERY):
        return True  # a source checkout of torch, jax, ...
    absolute = os.path.abspath(file) if os.path.isabs(file) else ""
    return absolute.startswith(_STDLIB) or absolute.startswith(_SCALIFY)


def is_installed(file: str) -> bool:
    """A frame of an installed package (a framework's model code included)."""
    return package_path(file) is not None or is_machinery(file)


def display_path(file: str, cwd: str) -> str:
    """A path relative to `cwd` when the file is inside it; inside an installed package,
    the path within the package directory; else as written."""
    inside = package_path(file)
    if inside is not None:
        return inside
    if not os.path.isabs(file):
        return file
    absolute = os.path.abspath(file)
    if absolute == cwd or absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, cwd).replace(os.sep, "/")
    return _source_checkout_path(file) or file


def pick_location(frames: list[SourceLoc], cwd: str | None = None) -> SourceLoc | None:
    """The location of an op whose stack is `frames`, innermost first: the innermost frame
    that is model code (library model code included), with the innermost frame of the
    user's own code as its call site when the two differ. Paths are shortened for display."""
    if not frames:
        return None
    cwd = cwd or os.getcwd()
    chosen = next((f for f in frames if not is_machinery(f.file)), frames[0])
    site = None
    if package_path(chosen.file) is not None:  # the user's line that called the library
        site = next((f for f in frames if not is_installed(f.file)), None)
    elif _source_checkout_path(chosen.file) is not None:  # a library's source: its caller
        outer = frames[frames.index(chosen) + 1 :]
        site = next((f for f in outer if f.file != chosen.file), None)
    else:  # the user's own helper: the line of the same file that called it, if any
        outer = [f for f in frames[frames.index(chosen) + 1 :] if not is_machinery(f.file)]
        if outer and outer[0].file == chosen.file and outer[0].function != chosen.function:
            site = outer[0]
    if site is not None:
        site = SourceLoc(display_path(site.file, cwd), site.line, site.function)
    return SourceLoc(display_path(chosen.file, cwd), chosen.line, chosen.function, site)
