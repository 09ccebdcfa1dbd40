"""What the real-framework tests need: the frameworks, installed as an optional extra.

Locally a missing framework skips its tests; in CI (`SCALIFY_REQUIRE_REAL=1`, set by
`.ci/run`, which installs them) it fails them, so a broken install never passes silently.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def installed(module: str) -> bool:
    """Whether `module` can be imported. `find_spec` on a dotted name imports its parent
    package, so a missing parent (`megatron` for `megatron.core`) raises instead of
    answering `None`: both mean "not installed"."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def require(*modules: str) -> None:
    missing = [m for m in modules if not installed(m)]
    if not missing:
        return
    message = f"needs {', '.join(missing)} (pip install -e '.[real]', see tests/real/README.md)"
    if os.environ.get("SCALIFY_REQUIRE_REAL") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)
