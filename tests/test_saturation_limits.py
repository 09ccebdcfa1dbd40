"""Saturation stops at its limits within a round of crossing them, and says which: a rule
that makes the e-graph explode must end in an `unknown` that names the limit, not in the
kernel killing the process."""

from __future__ import annotations

import pytest
from conftest import REPO

from scalify.cli import main
from scalify.engine.memory import memory_low
from scalify.verify import Limits, verify_files

MLP = REPO / "examples" / "mlp" / "hlo"


def verify_mlp(limits: Limits):
    return verify_files(
        str(MLP / "baseline.hlo"), str(MLP / "tp.hlo"), REPO / "rules", "dp=2,tp=4", None, limits
    )


def test_the_size_is_read_each_round_while_the_graph_grows_fast():
    report = verify_mlp(Limits(node_limit=300, simulate=False))
    assert report.verdict == "unknown"
    assert any("node limit 300 reached" in note for note in report.notes)
    # the first round doubles the e-graph: the size is read after it, not after twenty
    assert report.stats["rounds"] == 1


def test_a_run_that_saturates_is_unchanged():
    report = verify_mlp(Limits(simulate=False))
    assert report.verdict == "equivalent"
    assert not any("stopped early" in note for note in report.notes)


@pytest.mark.skipif(not memory_low(1.0), reason="no /proc/meminfo on this machine")
def test_a_floor_of_free_memory_stops_the_run_with_a_reason():
    report = verify_mlp(Limits(min_free_memory=0.999, simulate=False))
    assert report.verdict == "unknown"
    (note,) = [note for note in report.notes if "stopped early" in note]
    assert "free memory fell to" in note and "the floor is 99.9%" in note


def test_memory_floor_off_never_stops():
    assert memory_low(0.0) == ""


def test_the_cli_refuses_a_share_out_of_range(capsys):
    with pytest.raises(SystemExit) as info:
        main(["verify", str(MLP / "baseline.hlo"), str(MLP / "tp.hlo"), "--min-free-memory", "2"])
    assert info.value.code == 2
    assert "expected a share from 0 to below 1, got 2.0" in capsys.readouterr().err
