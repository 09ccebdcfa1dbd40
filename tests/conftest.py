"""Shared fixtures: paths of the repo and a runner for the `scalify` CLI in-process."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from scalify.cli import main

REPO = Path(__file__).resolve().parents[1]
MLP = REPO / "examples" / "mlp"


@pytest.fixture(autouse=True)
def _every_not_equivalent_has_a_witness(monkeypatch):
    """Over every verification the suite runs (the stored real pairs, the corpus, the
    examples, the API's): a `not_equivalent` verdict carries a counterexample or a
    refutation by the rules, never neither."""
    import scalify.verify as verify_module

    original = verify_module.verify_graphs

    def checked(*args, **kwargs):
        report = original(*args, **kwargs)
        assert report.verdict != "not_equivalent" or report.counterexample or report.refuted_by, (
            f"not_equivalent without a witness: {report.suspects[:1]}"
        )
        return report

    monkeypatch.setattr(verify_module, "verify_graphs", checked)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> CliResult:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


def verify_json(baseline: Path, distributed: Path, *options: str) -> tuple[int, dict]:
    """`scalify verify --format json` on two files (and `options`): the exit code and the
    report."""
    result = run_cli("verify", str(baseline), str(distributed), "--format", "json", *options)
    return result.code, json.loads(result.out)


def assert_proved(baseline: Path, distributed: Path, fired: set[str] = frozenset()) -> dict:
    """`verify` proves the pair equivalent (exit 0), with at least the rules `fired`."""
    code, report = verify_json(baseline, distributed)
    assert (code, report["verdict"]) == (0, "equivalent"), report.get("suspects")
    assert set(fired) <= set(report["stats"]["rules_fired"])
    return report


def assert_caught(baseline: Path, distributed: Path, model: Path, bug: str) -> dict:
    """`verify` does not prove the pair (exit 1) and names the bug's line first. The verdict
    is `not_equivalent` with its witness, or, where no numeric run was possible (graphs at
    their real sizes), `unknown` with the bug as a lead."""
    code, report = verify_json(baseline, distributed)
    unrunnable = any(n.startswith("no numeric check") for n in report["notes"])
    assert code == 1 and report["verdict"] in (
        ("not_equivalent", "unknown") if unrunnable else ("not_equivalent",)
    ), (report["verdict"], report["notes"])
    assert caught_at(report, model, bug), report["suspects"][:1]
    return report


def caught_suspect(result: CliResult) -> tuple[str, str, int, str]:
    """A `verify --format json` run that found its pair not equivalent (exit 1): the op, file,
    line and function of its first suspect, for the caller to compare with the bug's."""
    assert result.code == 1, result.out + result.err
    report = json.loads(result.out)
    assert report["verdict"] == "not_equivalent"
    first = report["suspects"][0]
    return first["op"], first["file"], first["line"], first["function"]


def caught_at(report: dict, model: Path, bug: str) -> bool:
    """The first suspect is at the line of `model` tagged `# BUG: bug`."""
    first = report["suspects"][0]
    return (first["file"], first["line"]) == (
        str(model.relative_to(REPO)),
        bug_line(bug, model),
    )


def bug_line(name: str, model: Path = MLP / "model.py") -> int:
    """The line of an example's model.py tagged `# BUG: name`."""
    for number, line in enumerate(model.read_text().splitlines(), 1):
        if re.search(rf"# BUG: {name}\b", line):
            return number
    raise AssertionError(f"no BUG marker {name} in {model}")


def exported_programs(folder: str):
    """A module fixture: `tests/FOLDER/export.py` run once into a fresh directory (JAX reads
    its device count at start-up, so each export runs in its own process); the fixture's
    value is that directory."""

    @pytest.fixture(scope="module")
    def programs(tmp_path_factory):
        out = tmp_path_factory.mktemp(folder)
        script = REPO / "tests" / folder / "export.py"
        subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
        return out

    return programs


def verify_texts(folder: Path, baseline: str, distributed: str, relations: dict, mesh: str):
    """The report of verifying two HLO texts under a relations file, all three written into
    `folder` (`base.hlo`, `dist.hlo`, `rel.json`), with the shipped rules."""
    from scalify.verify import verify_files

    (folder / "base.hlo").write_text(baseline)
    (folder / "dist.hlo").write_text(distributed)
    (folder / "rel.json").write_text(json.dumps(relations))
    return verify_files(
        str(folder / "base.hlo"),
        str(folder / "dist.hlo"),
        REPO / "rules",
        mesh=mesh,
        relations=str(folder / "rel.json"),
    )


def rules_with(folder: Path, name: str, text: str) -> Path:
    """A rules folder at `folder`: the shipped rules plus one file `name` holding `text` (a
    user's own declarations, as a scratch rules folder holds them)."""
    import shutil

    shutil.copytree(REPO / "rules", folder, ignore=shutil.ignore_patterns("tests"))
    (folder / name).write_text(text)
    return folder


def rules_plus(folder: Path, overlay: Path) -> Path:
    """A rules folder at `folder`: the shipped rules with their cases and golden files, and
    the files of `overlay` laid over them (a folder laid out as a rules folder: `.srl` files,
    `tests/<file>/*.case`, `tests/<file>.golden.egg`), as a rule author adds them."""
    import shutil

    shutil.copytree(REPO / "rules", folder)
    shutil.copytree(overlay, folder, dirs_exist_ok=True)
    return folder


def export_example(script: Path, out: Path, *args: str) -> Path:
    """Run an example's export.py (JAX must start with its own device count, so not
    in-process) and return the folder it wrote."""
    subprocess.run(
        [sys.executable, str(script), "--out", str(out), *args],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    return out


def exported_at(example: str, flag: str, degrees=(2, 4), *extra: str):
    """A module fixture: `examples/EXAMPLE/export.py --FLAG N` (and `extra`) run once per
    degree N; the fixture's value is the folder it wrote."""

    @pytest.fixture(scope="module", params=list(degrees), ids=lambda n: f"{flag}{n}")
    def exported(request, tmp_path_factory):
        out = tmp_path_factory.mktemp(f"{example}_{flag}{request.param}")
        script = REPO / "examples" / example / "export.py"
        return export_example(script, out, f"--{flag}", str(request.param), *extra)

    return exported


def line_of(pattern: str, model: Path = MLP / "model.py") -> int:
    """The first line of `model` that contains `pattern`."""
    for number, line in enumerate(model.read_text().splitlines(), 1):
        if pattern in line:
            return number
    raise AssertionError(pattern)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(REPO)


sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
