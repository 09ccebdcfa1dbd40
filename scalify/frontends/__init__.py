"""Frontends turn framework graph files into the IR."""

from __future__ import annotations

import gzip
from pathlib import Path

from scalify.canon import translation
from scalify.canon.canonicalize import canonicalize
from scalify.errors import ScalifyError
from scalify.frontends.custom_calls import CustomCall, expand_custom_calls
from scalify.ir import Graph


def load_graph(path: str, custom_calls: dict[str, CustomCall] | None = None) -> Graph:
    """Load a graph file, choosing the frontend from its content; `custom_calls` are the
    rule files' declared meanings of custom-call targets (scalify/frontends/custom_calls.py)."""
    file = Path(path)
    if not file.is_file():
        raise ScalifyError(f"graph file not found: {path}", path)
    if file.suffix == ".pt2":  # a torch.export.save archive (zip): the FX frontend
        from scalify.frontends.fx import load_fx

        graph = load_fx(path)
        expand_custom_calls(graph, custom_calls or {})  # a framework's own ops
        return checked_canonical(graph)
    try:
        # HLO text compresses some 50x (torch-neuronx repeats the Python stack on every op)
        text = (
            gzip.decompress(file.read_bytes()).decode()
            if file.suffix == ".gz"
            else file.read_text()
        )
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise ScalifyError(f"cannot read graph file: {err}", path) from None
    if text.lstrip().startswith("HloModule"):
        return parse_graph_text(text, path, custom_calls)
    raise ScalifyError(
        "unrecognised graph file: expected HLO text starting with `HloModule`",
        path,
        1,
        1,
        text.splitlines()[0] if text.strip() else "",
    )


def parse_graph_text(
    text: str, path: str, custom_calls: dict[str, CustomCall] | None = None
) -> Graph:
    """HLO text to canonical IR (what every consumer of graphs should call), declared
    custom calls replaced by their meaning first."""
    from scalify.frontends.hlo import parse_hlo

    graph = parse_hlo(text, path)
    expand_custom_calls(graph, custom_calls or {})
    return checked_canonical(graph)


def checked_canonical(graph: Graph) -> Graph:
    """`canonicalize(graph)`; with the translation check on (`--check-canon`), the result
    is run against the graph as loaded on random inputs first (scalify/canon/translation.py)."""
    if not translation.enabled():
        return canonicalize(graph)
    loaded = translation.snapshot(graph)
    canonical = canonicalize(graph)
    translation.check(loaded, canonical)
    return canonical
