"""Report rendering: one model, several formats."""

from .html import render_html
from .json_report import render_json
from .model import Report
from .sarif import render_sarif
from .text import render_text

FORMATS = {
    "text": render_text,
    "json": render_json,
    "sarif": render_sarif,
    "html": render_html,
}


def render(report: Report, fmt: str) -> str:
    return FORMATS[fmt](report)


__all__ = ["FORMATS", "Report", "render"]
