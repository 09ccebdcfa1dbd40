"""Outputs that fill one scalar (a gradient the loss never reads is zeros in both programs):
proved under every layout that fits their shape, never across different literals, never as a
sum of copies that is not the fill."""

from __future__ import annotations

import pytest
from conftest import verify_texts


def _hlo(shape: str, value: str) -> str:
    return (
        "HloModule fill\n\nENTRY main {\n"
        f"  c = f32[] constant({value})\n"
        f"  ROOT b = f32[{shape}] broadcast(c), dimensions={{}}\n}}\n"
    )


@pytest.mark.parametrize(
    ("base_value", "local", "value", "layout", "verdict"),
    [
        ("0", "4,4", "0", "shard(0, tp)", "equivalent"),
        ("0", "8,2", "0", "shard(1, tp)", "equivalent"),
        ("0", "8,4", "0", "partial(sum, tp)", "equivalent"),  # 0 + 0 is 0
        ("1", "8,4", "1", "partial(max, tp)", "equivalent"),
        ("1", "8,4", "1", "partial(sum, tp)", "not_equivalent"),  # 1 + 1 is not 1
        ("0", "4,4", "1", "shard(0, tp)", "not_equivalent"),  # another literal
        ("0", "8,4", "0", "shard(0, tp)", "not_equivalent"),  # the wrong local shape
    ],
)
def test_a_fill_is_any_layout_that_fits(tmp_path, base_value, local, value, layout, verdict):
    report = verify_texts(
        tmp_path, _hlo("8,4", base_value), _hlo(local, value), {"outputs": [layout]}, "tp=2"
    )
    assert report.verdict == verdict, report.outputs
