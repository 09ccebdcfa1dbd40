"""The report as JSON (design §6 fields)."""

from __future__ import annotations

import json

from scalify.report.model import Report


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"
