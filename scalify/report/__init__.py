"""Report rendering: one model, several formats."""

from scalify.report.html import render_html
from scalify.report.json_report import render_json
from scalify.report.model import Report
from scalify.report.sarif import render_sarif
from scalify.report.text import render_text

FORMATS = {
    "text": render_text,
    "json": render_json,
    "sarif": render_sarif,
    "html": render_html,
}


def render(report: Report, fmt: str) -> str:
    return FORMATS[fmt](report)


__all__ = ["FORMATS", "Report", "render"]
