"""The op tables, families and counts the docs state are made from the op registry, the
frontends' maps and the rule files (`scalify/soundness/reference.py`), so they cannot drift:
`SCALIFY_BLESS=1 pytest tests/test_docs_reference.py` writes them again after a change."""

from __future__ import annotations

import os
import re

import pytest
from conftest import REPO

from scalify.ops import OPS
from scalify.soundness.reference import GENERATORS, PAGES, REGION, counts, regenerated


@pytest.fixture(scope="module")
def shipped():
    return counts(REPO)


@pytest.mark.parametrize("page", PAGES)
def test_the_page_states_what_the_code_holds(page, shipped) -> None:
    path = REPO / page
    text = regenerated(path.read_text(), shipped)
    if os.environ.get("SCALIFY_BLESS") == "1":
        path.write_text(text)
    assert path.read_text() == text, (
        f"{page} is out of date: SCALIFY_BLESS=1 pytest tests/test_docs_reference.py"
    )


def test_every_generator_has_its_region() -> None:
    found = {m["name"] for page in PAGES for m in REGION.finditer((REPO / page).read_text())}
    assert found == set(GENERATORS)


def test_every_op_of_the_registry_is_in_the_canonical_ops_table() -> None:
    text = (REPO / "docs" / "reference" / "canonical-ops.md").read_text()
    (table,) = (m["body"] for m in REGION.finditer(text) if m["name"] == "ops")
    assert set(re.findall(r"`(\w+)`", table)) >= set(OPS)


def test_a_stale_count_is_rewritten(shipped) -> None:
    stale = "reproduces\n3 published silent bugs"
    assert regenerated(stale, shipped) == f"reproduces\n{shipped.corpus} published silent bugs"


def test_the_hand_written_node_attribute_table_names_only_registry_ops() -> None:
    text = (REPO / "docs" / "reference" / "canonical-ops.md").read_text()
    table = text.split("The attributes a node carries", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1] for line in table.splitlines()[2:]]
    named = {name for cell in rows for name in re.findall(r"`(\w+)`", cell)}
    assert named and named <= set(OPS), named - set(OPS)
