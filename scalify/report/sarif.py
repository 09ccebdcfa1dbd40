"""The report as SARIF 2.1.0, for code-scanning in CI: each suspect is a result at its source
file and line."""

from __future__ import annotations

import json

from scalify.report.model import EQUIVALENT, NOT_EQUIVALENT, Report

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def render_sarif(report: Report) -> str:
    level = "error" if report.verdict == NOT_EQUIVALENT else "warning"
    results = []
    for suspect in report.suspects:
        result = {
            "ruleId": f"scalify/{report.verdict}",
            "level": level,
            "message": {"text": f"{suspect.op} `{suspect.node}`: {suspect.reason}"},
        }
        if suspect.file:
            result["locations"] = [_location(suspect.file, suspect.line)]
        related = []
        second = suspect.second
        if second is not None and second.file:
            related.append(_location(second.file, second.line))
            related[-1]["message"] = {"text": f"{second.role}: {second.op} `{second.node}`"}
        if suspect.caller is not None:
            related.append(_location(*suspect.caller))
            related[-1]["message"] = {"text": f"called from {suspect.called_from}"}
        if related:
            result["relatedLocations"] = related
        results.append(result)
    if report.assumptions:
        results.append(
            {
                "ruleId": "scalify/assumed_layout",
                "level": "warning",
                "message": {
                    "text": "equivalent only under inferred input layouts: "
                    + "; ".join(report.assumptions)
                },
            }
        )
    if report.verdict != EQUIVALENT and not results:
        results.append(
            {
                "ruleId": f"scalify/{report.verdict}",
                "level": level,
                "message": {"text": "; ".join(report.notes) or report.verdict},
            }
        )
    sarif = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "scalify",
                        "rules": [
                            {
                                "id": "scalify/not_equivalent",
                                "shortDescription": {
                                    "text": "distributed graph differs from baseline"
                                },
                            },
                            {
                                "id": "scalify/unknown",
                                "shortDescription": {"text": "equivalence not proved"},
                            },
                            {
                                "id": "scalify/assumed_layout",
                                "shortDescription": {
                                    "text": "equivalent under an inferred input layout"
                                },
                            },
                        ],
                    }
                },
                "properties": {
                    "verdict": report.verdict,
                    "assumptions": report.assumptions,
                    "mesh": report.mesh,
                    "counterexample": report.counterexample,
                    "refuted_by": report.refuted_by,
                },
                "results": results,
            }
        ],
    }
    return json.dumps(sarif, indent=2) + "\n"


def _location(file: str, line: int) -> dict:
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": file},
            "region": {"startLine": max(line, 1)},
        }
    }
