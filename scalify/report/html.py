"""The report as one self-contained HTML page: inline CSS and SVG, no script, no external
resource, so it can be kept as a CI artifact and opened anywhere."""

from __future__ import annotations

from html import escape
from pathlib import Path

from scalify.report.model import (
    EQUIVALENT,
    NOT_EQUIVALENT,
    Neighbourhood,
    Report,
    Suspect,
    confirming_entry,
)
from scalify.report.svg import render_svg

SNIPPET_CONTEXT = 3  # lines shown above and below a suspect's line
SOURCE_SEARCH_LEVELS = 4  # parents of the distributed file's folder tried for a relative path
MAX_SOURCE_BYTES = 2_000_000

MEANING = {
    EQUIVALENT: "every distributed output is proven equal to its baseline output under the "
    "required relation (exit code 0)",
    NOT_EQUIVALENT: "the distributed graph computes something else than the baseline: read "
    "the suspects below (exit code 1)",
}
UNKNOWN_MEANING = (
    "not proved, and no evidence of a bug: a rule may be missing or saturation stopped "
    "early; read the notes and the suspects (exit code 1)"
)

# The page's colours; tests look for them in a screenshot.
COLOURS = {
    "ok": "#1b7f3b",  # verdict equivalent
    "bad": "#c62828",  # verdict not_equivalent, suspect outline
    "unknown": "#b26a00",  # verdict unknown
    "suspect": "#ffe3e3",  # fill of the suspect's box
    "related": "#e5f0fb",  # fill of a baseline box a distributed node shown is related to
    "related-line": "#1565c0",
    "highlight": "#fff1b8",  # the suspect's line in the source snippet
    "muted": "#666",
}
ROOT = ":root { " + " ".join(f"--{k}: {v};" for k, v in COLOURS.items()) + " }"

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
  color: #1d1d1d; background: #fafafa; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 40px; }
h1 { font-size: 20px; margin: 0 0 12px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 0 0 8px; }
h4 { font-size: 14px; margin: 14px 0 6px; color: #333; }
code, pre { font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
#verdict { border-radius: 8px; padding: 14px 18px; color: #fff; }
#verdict .word { font-size: 28px; font-weight: 700; letter-spacing: 0.5px; }
#verdict p { margin: 4px 0 0; }
.v-equivalent { background: var(--ok); }
.v-not_equivalent { background: var(--bad); }
.v-unknown { background: var(--unknown); }
table { border-collapse: collapse; margin: 4px 0; background: #fff; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; font-weight: 600; }
td.ok { color: var(--ok); font-weight: 600; }
td.bad { color: var(--bad); font-weight: 600; }
.suspect { background: #fff; border: 1px solid #ddd; border-left: 5px solid var(--bad);
  border-radius: 6px; padding: 12px 16px; margin: 12px 0; }
.reason { font-size: 15px; background: #fff4f4; padding: 8px 10px; border-radius: 4px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
pre.snippet { background: #f6f8fa; border: 1px solid #ddd; border-radius: 4px; padding: 6px 0;
  overflow-x: auto; }
pre.snippet .line { display: block; padding: 0 10px; white-space: pre; }
pre.snippet .hl { background: var(--highlight); font-weight: 600; border-left: 4px solid var(--bad);
  padding-left: 6px; }
pre.snippet .ln { color: #999; display: inline-block; min-width: 3.5em; user-select: none; }
.pictures { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
figure { margin: 0; background: #fff; border: 1px solid #ddd; border-radius: 6px;
  padding: 8px; flex: 1 1 360px; min-width: 0; }
figcaption { font-size: 13px; color: #333; margin-bottom: 6px; font-weight: 600; }
svg.graph { display: block; max-width: 100%; height: auto; margin: 0 auto; }
svg.graph rect { fill: #f4f4f4; stroke: #777; stroke-width: 1.2; }
svg.graph .role-suspect rect { fill: var(--suspect); stroke: var(--bad); stroke-width: 3; }
svg.graph .role-related rect { fill: var(--related); stroke: var(--related-line); }
svg.graph .unrelated rect { stroke-dasharray: 5 3; }
svg.graph text { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; fill: #222; }
svg.graph text.op { font-weight: 700; }
svg.graph text.name { fill: #666; font-size: 11px; }
.muted { color: var(--muted); }
.legend span { display: inline-block; margin-right: 14px; }
.swatch { display: inline-block; width: 14px; height: 10px; border: 1px solid #777;
  vertical-align: middle; margin-right: 4px; }
ul { margin: 4px 0; padding-left: 22px; }
ul.relations { columns: 26em; }
table.stats th { white-space: nowrap; }
pre#counterexample { background: #fff4f4; padding: 8px 10px; border-radius: 4px;
  white-space: pre-wrap; }
"""


def render_html(report: Report) -> str:
    """The whole page; source snippets are read from the files the suspects name."""
    title = f"Scalify: {report.verdict} ({Path(report.distributed).name})"
    parts = [
        _verdict(report),
        _outputs(report),
        _relations(report),
        _suspects(report),
        _counterexample(report),
        _notes(report),
        _stats(report),
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{ROOT}{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(p for p in parts if p)
        + "\n</main>\n</body>\n</html>\n"
    )


def _verdict(report: Report) -> str:
    meaning = MEANING.get(report.verdict, UNKNOWN_MEANING)
    if report.assumptions:
        meaning = (
            "proven equal only under input layouts Scalify inferred and nothing confirmed: "
            + "; ".join(report.assumptions)
            + f"; state them with --relations {confirming_entry(report)} (exit code 3)"
        )
    return (
        "<h1>Scalify verification report</h1>\n"
        f'<header id="verdict" class="v-{escape(report.verdict)}">'
        f'<span class="word">{escape(report.outcome)}</span>'
        f"<p>{escape(meaning)}</p></header>\n"
        '<dl class="facts">'
        f"<dt>baseline</dt><dd><code>{escape(report.baseline)}</code></dd>"
        f"<dt>distributed</dt><dd><code>{escape(report.distributed)}</code></dd>"
        f'<dt>mesh</dt><dd><code id="mesh">{escape(report.mesh)}</code></dd>'
        f"<dt>exit code</dt><dd>{report.exit_code}</dd></dl>"
    )


def _outputs(report: Report) -> str:
    rows = "".join(
        f"<tr><td>{o.index}</td><td><code>{escape(o.node)}</code></td>"
        f"<td><code>{escape(o.proven)}</code></td><td><code>{escape(o.expected)}</code></td>"
        f'<td class="{"ok" if o.ok else "bad"}">{"ok" if o.ok else "NOT PROVED"}</td></tr>'
        for o in report.outputs
    )
    return (
        '<h2 id="outputs">Outputs</h2>\n<table><tr><th>#</th><th>distributed node</th>'
        "<th>proven relation</th><th>required relation</th><th></th></tr>"
        f"{rows}</table>"
    )


def _relations(report: Report) -> str:
    def items(key: str) -> str:
        return "".join(f"<li><code>{escape(r)}</code></li>" for r in report.relations[key])

    return (
        '<h2 id="relations">Relations</h2>\n<h4>input relations used</h4>'
        f'<ul class="relations">{items("inputs")}</ul><h4>output relations required</h4>'
        f'<ul class="relations">{items("outputs")}</ul>'
    )


def _suspects(report: Report) -> str:
    if report.verdict == EQUIVALENT and not report.suspects:
        return ""
    if not report.suspects:
        return '<h2 id="suspects">Suspects</h2>\n<p class="muted">no suspect was found.</p>'
    roots = _source_roots(report.distributed)
    body = "\n".join(_suspect(i, s, roots) for i, s in enumerate(report.suspects, 1))
    return f'<h2 id="suspects">Suspects ({len(report.suspects)}), most certain first</h2>\n' + body


def _suspect(rank: int, s: Suspect, roots: list[Path]) -> str:
    where = f"{s.file}:{s.line}" if s.file else "(no source location)"
    facts = [
        ("op", f"<code>{escape(s.op)}</code>"),
        ("node", f"<code>{escape(s.node)}</code>"),
        ("location", f'<code class="where">{escape(where)}</code>'),
        ("function", f"<code>{escape(s.function)}</code>" if s.function else "—"),
    ]
    if s.framework_op:
        facts.append(("framework op", f"<code>{escape(s.framework_op)}</code>"))
    if s.second is not None:
        at = f"{s.second.file}:{s.second.line}" if s.second.file else "(no location)"
        facts.append(
            (
                s.second.role,
                f'<code class="where">{escape(at)}</code>: {escape(s.second.op)} '
                f"<code>{escape(s.second.node)}</code>",
            )
        )
    if s.called_from:
        facts.append(("called from", f'<code class="where">{escape(s.called_from)}</code>'))
    if s.via:
        facts.append(("via", f'<code class="where">{escape(s.via)}</code>'))
    operands = "".join(f"<li>{_code_spans(o)}</li>" for o in s.operands)
    return (
        f'<section class="suspect" id="suspect-{rank}">'
        f"<h3>{rank}. <code>{escape(where)}</code>"
        + (f" in <code>{escape(s.function)}</code>" if s.function else "")
        + f": {escape(s.op)} <code>{escape(s.node)}</code></h3>"
        + '<dl class="facts">'
        + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
        + "</dl>"
        + f'<p class="reason">{escape(s.reason)}</p>'
        + (f"<h4>operands, as proven</h4><ul>{operands}</ul>" if operands else "")
        + (
            f"<p class='nearest'>rules over <code>{escape(s.op)}</code> (none applied to "
            f"these operands): {escape(', '.join(s.nearest_rules))}</p>"
            if s.nearest_rules
            else ""
        )
        + _snippet(s, roots)
        + (_pictures(s.neighbourhood, rank) if s.neighbourhood else "")
        + "</section>"
    )


def _code_spans(text: str) -> str:
    """`name` in reason texts as <code>; the rest escaped."""
    pieces = escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def _source_roots(distributed: str) -> list[Path]:
    """Where a relative source path may start: the current folder, then the folders above
    the distributed graph file (exports often name files relative to the project root)."""
    roots = [Path.cwd()]
    folder = Path(distributed).resolve().parent
    roots += [folder, *list(folder.parents)[: SOURCE_SEARCH_LEVELS - 1]]
    return list(dict.fromkeys(roots))


def read_source(file: str, roots: list[Path]) -> list[str] | None:
    """The file's lines, or None when it cannot be found or is not a readable text file."""
    if not file:
        return None
    path = Path(file)
    candidates = [path] if path.is_absolute() else [root / path for root in roots]
    for candidate in candidates:
        try:
            if candidate.is_file() and candidate.stat().st_size <= MAX_SOURCE_BYTES:
                return candidate.read_text(errors="replace").splitlines()
        except OSError:
            continue
    return None


def _snippet(s: Suspect, roots: list[Path]) -> str:
    lines = read_source(s.file, roots) if s.line > 0 else None
    if not lines or s.line > len(lines):
        reason = "no source location" if not s.file else f"source file {s.file} not found"
        return f'<p class="muted snippet-missing">{escape(reason)}</p>'
    first = max(1, s.line - SNIPPET_CONTEXT)
    last = min(len(lines), s.line + SNIPPET_CONTEXT)
    rows = []
    for number in range(first, last + 1):
        cls = "line hl" if number == s.line else "line"
        rows.append(
            f'<span class="{cls}" data-line="{number}"><span class="ln">{number}</span>'
            f"{escape(lines[number - 1])}</span>"
        )
    return (
        f'<h4>source: <code>{escape(s.file)}</code></h4><pre class="snippet">{"".join(rows)}</pre>'
    )


def _pictures(hood: Neighbourhood, rank: int) -> str:
    dist = render_svg(hood.distributed, "distributed neighbourhood", f"s{rank}d")
    base = (
        render_svg(hood.baseline, "baseline counterpart", f"s{rank}b")
        if hood.baseline
        else '<p class="muted">no baseline node to show</p>'
    )
    hidden = f" {hood.hidden} more node(s) within reach are left out." if hood.hidden else ""
    return (
        "<h4>the graph around it</h4>"
        '<p class="legend muted">'
        '<span><i class="swatch" style="background:var(--suspect);border:2px solid var(--bad)"></i>'
        "suspect</span>"
        '<span><i class="swatch" style="border-style:dashed"></i>not related to the baseline'
        "</span>"
        '<span><i class="swatch" '
        'style="background:var(--related);border-color:var(--related-line)"></i>'
        "baseline node a distributed node shown is related to</span>"
        "<span>arrows: operand → user</span></p>"
        f'<div class="pictures" id="pictures-{rank}">'
        f'<figure class="side-distributed"><figcaption>distributed</figcaption>{dist}</figure>'
        f'<figure class="side-baseline"><figcaption>baseline</figcaption>{base}</figure>'
        "</div>"
        f'<p class="muted basis">Baseline side: {escape(hood.baseline_basis)}.{hidden}</p>'
        + _picture_table(hood)
    )


def _picture_table(hood: Neighbourhood) -> str:
    """The same nodes as words: the relation each one has to the other graph."""
    rows = "".join(
        f"<tr><td>{side}</td><td><code>{escape(n.name)}</code></td><td>{escape(n.op)}</td>"
        f"<td><code>{escape(n.shape)}</code></td><td>{escape(n.role)}</td>"
        f"<td>{n.line or ''}</td><td>{_code_spans(n.relation)}</td></tr>"
        for side, nodes in (("distributed", hood.distributed), ("baseline", hood.baseline))
        for n in nodes
    )
    return (
        '<table class="picture-nodes"><tr><th>side</th><th>node</th><th>op</th>'
        "<th>shape</th><th>role</th><th>line</th><th>relation to the other graph</th></tr>"
        f"{rows}</table>"
    )


def _counterexample(report: Report) -> str:
    if report.refuted_by and not report.counterexample:
        return f'<h2>Refuted by the rules</h2>\n<p id="refuted-by">{escape(report.refuted_by)}</p>'
    if not report.counterexample:
        return ""
    return (
        "<h2>Counterexample</h2>\n<p>Both graphs were run on the same random inputs; they "
        f'differ:</p><pre id="counterexample">{escape(report.counterexample)}</pre>'
    )


def _notes(report: Report) -> str:
    if not report.notes:
        return ""
    items = "".join(f"<li>{_code_spans(n)}</li>" for n in report.notes)
    return f'<h2 id="notes">Notes</h2>\n<ul>{items}</ul>'


def _stats(report: Report) -> str:
    st = report.stats
    rows = [
        ("baseline nodes", st.get("baseline_nodes")),
        ("distributed nodes", st.get("distributed_nodes")),
        ("e-graph nodes", st.get("egraph_nodes")),
        ("rounds", st.get("rounds")),
        ("saturated", st.get("saturated")),
        ("partitions", st.get("partitions")),
        ("memoised segments", st.get("memo_hits")),
    ]
    seconds = ", ".join(f"{k} {v:.3f}s" for k, v in st.get("seconds", {}).items())
    rows.append(("time", seconds))
    fired = sorted(st.get("rules_fired", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    rows.append(("rules fired", ", ".join(f"{name} ×{count}" for name, count in fired) or "—"))
    cells = "".join(
        f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows if v is not None
    )
    return f'<h2 id="stats">Stats</h2>\n<table class="stats">{cells}</table>'
