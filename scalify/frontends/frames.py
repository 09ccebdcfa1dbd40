"""Which frame of a call stack is an op's source location.

A bug in a framework's model code (torchtitan's `embedding.py`, transformers' `modeling_llama.py`,
transformers-neuronx's `attention.py`) must be reported there, not at the user's one call into
the library; but the frames of the tracer itself (torch, JAX, torch-xla, the Neuron lowering)
say nothing about the model. So the location is the innermost frame outside the tracer, and
when that frame is inside an installed package, the innermost frame outside every installed
package is kept beside it as the call site: the line in the user's own code that reached the
library.

Unless the library called back into the user's code: Keras's `Layer.__call__` runs the user's
`call()`, whose `keras.ops.einsum` makes the op in Keras's backend wrapper, one line for every
einsum of every model. When the package that made the op also has a frame outside the
innermost user frame, that user line is the model's and is reported first, with the library's
line kept beside it (`SourceLoc.library`). A package outside the user's frames that made no
part of the op (pytest running a test, a launcher) is no callback.
"""

from __future__ import annotations

import os
import sysconfig

from scalify.ir import SourceLoc

# The tracer's packages. This cannot be read off a stack: JAX drops its own frames from the
# stacks it records, so the innermost frame of a JAX op is whichever library called JAX
# (Keras's backend, transformers' Flax models), and torch's `Module.__call__` runs every
# module's `forward`, the user's and transformers' alike, so it is no library calling back.
# Flax is here as torch.nn is inside torch: its layers wrap JAX's ops and are called straight
# from the model (an `nnx.Linear`), so nothing in the stack tells them from model code.
_TRACERS = (
    "torch",
    "torch_xla",
    "torch_neuronx",
    "functorch",
    "jax",
    "jaxlib",
    "flax",
    "pyhlo",
    "libneuronxla",
    "neuronxcc",
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
        return any(inside.startswith(f"{name}/") for name in _TRACERS)
    if any(f"/{name}/" in _probe(file) for name in _TRACERS):
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


def _package(file: str) -> str | None:
    """The top-level package of an installed file or of a src-layout checkout, else None
    (the user's own code)."""
    inside = package_path(file) or _source_checkout_path(file)
    return inside.split("/", 1)[0] if inside else None


def _called_back(model: list[SourceLoc]) -> int | None:
    """The index in `model` (frames outside the tracer, innermost first) of the innermost user
    frame when the installed package that made the op (`model[0]`'s) holds every frame
    inside it and also has a frame outside it: that package called the user's code back, as
    Keras's `Layer.__call__` runs `call()`, and the user's code called its ops."""
    if package_path(model[0].file) is None:
        return None  # the op was made in the user's code, or in a source checkout's
    user = next((i for i, f in enumerate(model) if not is_installed(f.file)), None)
    if user is None:
        return None
    package = _package(model[0].file)
    if any(_package(f.file) != package for f in model[:user]):
        # another library's code stands between the user's line and the op (a library's
        # model calling a kernel library): that code is the model, not a wrapper
        return None
    return user if any(_package(f.file) == package for f in model[user + 1 :]) else None


def _helper_caller(model: list[SourceLoc], chosen: int) -> SourceLoc | None:
    """For an op in the user's own helper, the line of the same file that called it, if any
    (the next user frame out, past a library that called back between them)."""
    outer = [f for f in model[chosen + 1 :] if not is_installed(f.file)]
    here = model[chosen]
    if outer and outer[0].file == here.file and outer[0].function != here.function:
        return outer[0]
    return None


def pick_location(frames: list[SourceLoc], cwd: str | None = None) -> SourceLoc | None:
    """The location of an op whose stack is `frames`, innermost first: the innermost frame
    that is model code (library model code included), with the innermost frame of the
    user's own code as its call site when the two differ; or the user's line first when the
    library that made the op called that line back (see the module docstring). Paths are
    shortened for display."""
    if not frames:
        return None
    cwd = cwd or os.getcwd()
    model = [f for f in frames if not is_machinery(f.file)]
    if not model:
        return _shown(frames[0], cwd)
    back = _called_back(model)
    if back is not None:  # the user's line, the library's beside it
        return _shown(model[back], cwd, _helper_caller(model, back), model[0])
    chosen = model[0]
    site = None
    if package_path(chosen.file) is not None:  # the user's line that called the library
        site = next((f for f in model if not is_installed(f.file)), None)
    elif _source_checkout_path(chosen.file) is not None:  # a library's source: its caller
        site = next((f for f in frames[frames.index(chosen) + 1 :] if f.file != chosen.file), None)
    else:  # the user's own helper: the line of the same file that called it, if any
        site = _helper_caller(model, 0)
    return _shown(chosen, cwd, site)


def _shown(
    frame: SourceLoc,
    cwd: str,
    site: SourceLoc | None = None,
    library: SourceLoc | None = None,
) -> SourceLoc:
    """`frame` with its call site and library line, their paths shortened for display."""

    def short(f: SourceLoc | None) -> SourceLoc | None:
        return None if f is None else SourceLoc(display_path(f.file, cwd), f.line, f.function)

    return SourceLoc(
        display_path(frame.file, cwd), frame.line, frame.function, short(site), short(library)
    )
