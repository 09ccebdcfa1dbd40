"""The report as a person reads it in a terminal."""

from __future__ import annotations

from scalify.report.model import EQUIVALENT, Report, confirming_entry


def render_text(report: Report) -> str:
    lines = [f"verdict: {report.outcome}", f"mesh: {report.mesh}"]
    lines.append("outputs:")
    for out in report.outputs:
        mark = "ok" if out.ok else "NOT PROVED"
        lines.append(
            f"  [{mark}] output {out.index} ({out.node}): proven {out.proven}; "
            f"required {out.expected}"
        )
    lines.append("input relations used:")
    lines += [f"  {r}" for r in report.relations["inputs"]]
    lines.append("output relations required:")
    lines += [f"  {r}" for r in report.relations["outputs"]]
    if report.verdict != EQUIVALENT:
        lines.append(f"suspects ({len(report.suspects)}):")
        for i, s in enumerate(report.suspects, 1):
            where = f"{s.file}:{s.line}" if s.file else "(no source location)"
            func = f" in {s.function}" if s.function else ""
            lines.append(f"  {i}. {where}{func}: {s.op} `{s.node}`")
            if s.called_from:
                lines.append(f"     called from {s.called_from}")
            if s.via:
                lines.append(f"     via {s.via}")
            lines.append(f"     {s.reason}")
            if s.second is not None:
                at = f"{s.second.file}:{s.second.line}" if s.second.file else "(no location)"
                lines.append(f"     {s.second.role} {at}: {s.second.op} `{s.second.node}`")
            if s.numerically:
                lines.append(f"     numerically: {s.numerically}")
            for operand in s.operands:
                lines.append(f"     operand {operand}")
            if s.nearest_rules:
                lines.append(
                    f"     rules over `{s.op}` (none applied to these operands): "
                    + ", ".join(s.nearest_rules)
                )
    if report.counterexample:
        lines.append(f"counterexample: {report.counterexample}")
    if report.refuted_by:
        lines.append(f"refuted by: {report.refuted_by}")
    if report.assumptions:
        lines.append("assuming (inferred, not stated, not checked against values):")
        lines += [f"  {a}" for a in report.assumptions]
        lines.append(f"  to confirm, state them with --relations: {confirming_entry(report)}")
    lines += [f"note: {n}" for n in report.notes]
    st = report.stats
    secs = ", ".join(f"{k} {v:.3f}s" for k, v in st["seconds"].items())
    lines.append(
        f"stats: {st['baseline_nodes']} baseline + {st['distributed_nodes']} distributed "
        f"nodes, e-graph {st['egraph_nodes']} nodes, {st['rounds']} rounds; {secs}"
    )
    return "\n".join(lines) + "\n"
