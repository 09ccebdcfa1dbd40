"""The README's two set-up commands are what CI runs as a newcomer (`.ci/newcomer`): read
them from the README the way CI does, so the two cannot drift apart."""

from __future__ import annotations

import importlib.util
import shlex

from conftest import REPO, run_cli

CI = REPO / ".ci"


def _setup_commands() -> list[str]:
    spec = importlib.util.spec_from_file_location("readme_commands", CI / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.setup_commands((REPO / "README.md").read_text())


def test_the_readme_has_two_setup_commands_an_install_and_verify_then_the_tests() -> None:
    first, second = _setup_commands()
    assert first.startswith("pip install -e . && scalify verify "), first
    assert second.startswith('pip install -e ".[dev]" && ') and "pytest" in second, second


def test_the_first_command_proves_the_bundled_example() -> None:
    verify = _setup_commands()[0].split("&&")[1].split()
    assert verify[:2] == ["scalify", "verify"]
    arguments = []
    for word in verify[2:]:
        if not word.startswith("-"):
            assert (REPO / word).exists(), f"the README's command names a missing {word}"
            word = str(REPO / word)
        arguments.append(word)
    result = run_cli("verify", *arguments)
    assert result.code == 0 and "verdict: equivalent" in result.out, result.out + result.err


def test_ci_runs_the_readme_commands_as_a_newcomer() -> None:
    """CI's first step runs both commands as the README writes them (the second is the
    whole suite); the full run then adds only what needs the optional frameworks."""
    run = (CI / "run").read_text()
    newcomer = (CI / "newcomer").read_text()
    assert run.index(".ci/newcomer") < run.index('-e ".[dev,real]"')
    assert "readme_commands.py" in newcomer and 'bash -c "$command"' in newcomer
    assert "PYTEST_ADDOPTS" not in newcomer  # verbatim: nothing narrows the suite
    test_command = _setup_commands()[1].split("&&")[-1].strip()
    assert shlex.split(test_command) == ["python", "-m", "pytest", "-q"]
    assert f"{test_command} tests/real" in run


def test_python_dash_m_scalify_is_the_command_line():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "scalify", "rules", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "lint" in done.stdout, done.stderr
