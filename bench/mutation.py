"""Mutation score: mutate correct distributed graphs, simulate, verify, and count.

    python bench/mutation.py [--jax]

Sources: every rule case that must be proved, the bundled MLP example, and with --jax the
MLP re-exported at tp = 2, 4, 8 plus the flash-decoding, sequence-parallel, Ulysses,
scanned-stack, all-to-all MoE and Mixtral examples. Prints tried / differing / caught /
wrongly proved per source and in total, and how well the caught ones are localised: the
share whose first suspect is on the mutated op's line (or, for a dropped collective, the
line of the value it should have reduced), and whose first three suspects include it. Exits
1 if any differing mutant was proved equivalent.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from scalify.compiler.compile import compile_rule_dir

from scalify.soundness.mutate import MutationScore, score
from scalify.soundness.mutation_corpus import case_pairs, hlo_pairs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import export_mlp  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# (name, export script, its arguments, (baseline file, distributed file)) for --jax
EXAMPLES = [
    (
        "flash decoding split",
        "examples/flash_decoding/export.py",
        ["--tp", "2"],
        ("split_baseline.hlo", "split.hlo"),
    ),
    (
        "flash decoding",
        "examples/flash_decoding/export.py",
        ["--tp", "2"],
        ("baseline.hlo", "fd.hlo"),
    ),
    (
        "flash decoding lse merge",
        "examples/flash_decoding/export.py",
        ["--tp", "2"],
        ("split_baseline.hlo", "lse.hlo"),
    ),
    (
        "flash decoding kv chunks (one device)",
        "examples/flash_decoding/export.py",
        ["--tp", "2"],
        ("split_baseline.hlo", "chunked.hlo"),
    ),
    ("ulysses sp=2", "examples/ulysses/export.py", ["--sp", "2"], ("baseline.hlo", "ulysses.hlo")),
    ("sp tp=2", "examples/sp/export.py", ["--tp", "2"], ("baseline.hlo", "sp.hlo")),
    (
        "scan stack tp=2",
        "examples/scan_stack/export.py",
        ["--tp", "2", "--layers", "3"],
        ("baseline.hlo", "tp.hlo"),
    ),
    (
        "moe all-to-all ep=2",
        "examples/moe_a2a/export.py",
        ["--ep", "2"],
        ("baseline.hlo", "ep.hlo"),
    ),
    (
        "moe gather/scatter ep=2",
        "examples/moe_a2a/export.py",
        ["--ep", "2"],
        ("scatter_baseline.hlo", "scatter.hlo"),
    ),
    (
        "mixtral shared expert",
        "examples/mixtral/export.py",
        ["--layers", "1", "--bugs", "none", "--shared-expert", "32"],
        ("baseline.hlo", "ep.hlo"),
    ),
    (
        "llama full tp=2",
        "examples/llama/export.py",
        ["--config", "tiny", "--tp", "2", "--layers", "1", "--parts", "full", "--bugs", "none"],
        ("baseline.hlo", "tp.hlo"),
    ),
    (  # 8 KV heads over 16 devices, one q head each: shared heads, squeezed dots
        "llama kv<tp tp=16",
        "examples/llama/export.py",
        ["--config", "tiny", "--tp", "16", "--layers", "1", "--bugs", "none"],
        ("baseline.hlo", "tp.hlo"),
    ),
    (  # [gate|up] cut as one block of the weight re-laid out by views
        "llama fused relaid tp=4",
        "examples/llama/export.py",
        [
            "--config",
            "tiny",
            "--tp",
            "4",
            "--layers",
            "1",
            "--parts",
            "layers",
            "--fused",
            "--fused-cut",
            "relaid",
            "--bugs",
            "none",
        ],
        ("baseline.hlo", "tp.hlo"),
    ),
    (  # tp 6: a converter's padded heads and widths, KV heads repeated (inferred units)
        "llama padded tp=6",
        "examples/llama/export.py",
        ["--config", "tiny", "--tp", "6", "--layers", "1", "--parts", "layers", "--bugs", "none"],
        ("baseline.hlo", "tp.hlo"),
    ),
    (  # heads reached by other reshape/transpose chains and an einsum over a viewed weight
        "attention views tp=4",
        "examples/attention_views/export.py",
        ["--tp", "4"],
        ("baseline.hlo", "tp.hlo"),
    ),
    (
        "mixtral ep=2 tp=2",
        "examples/mixtral/export.py",
        ["--layers", "1", "--bugs", "none"],
        ("baseline.hlo", "ep.hlo"),
    ),
]


def _share(part: int, whole: int) -> str:
    """A percentage of the caught mutants whose mutated op has a line; `-` when none has."""
    return f"{100 * part // whole}%" if whole else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jax", action="store_true", help="also export MLPs at tp=2,4,8")
    args = parser.parse_args()
    rules = compile_rule_dir(REPO / "rules")
    sources = list(case_pairs(REPO / "rules")) + list(hlo_pairs(REPO / "examples/mlp/hlo"))
    if args.jax:
        tmp = Path(tempfile.mkdtemp())
        for tp in (2, 4, 8):
            out = tmp / f"tp{tp}"
            export_mlp(out, tp, 64, 256)
            sources += [(f"mlp tp={tp}", *rest) for _, *rest in hlo_pairs(out)]
        for name, script, args_, files in EXAMPLES:
            out = tmp / name
            subprocess.run(
                [sys.executable, str(REPO / script), "--out", str(out), *args_],
                check=True,
                capture_output=True,
            )
            sources += [(name, *rest) for _, *rest in hlo_pairs(out, *files)]
    total = MutationScore()
    print(
        f"{'source':52s} {'tried':>5s} {'diff':>5s} {'caught':>6s} {'wrong':>5s} "
        f"{'at line':>7s} {'top 3':>5s}"
    )
    for name, base, dist, mesh, given in sources:
        result = score(base, dist, rules, mesh, given)
        total.add(result)
        print(
            f"{Path(name).name[:52]:52s} {result.tried:5d} {result.differing:5d} "
            f"{result.caught:6d} {len(result.wrongly_proved):5d} "
            f"{_share(result.first_at_line, result.located):>7s} "
            f"{_share(result.top3_at_line, result.located):>5s}"
        )
    print(f"total: {total.line()}")
    for line in total.wrongly_proved:
        print(f"WRONGLY PROVED: {line}")
    return 1 if total.wrongly_proved else 0


if __name__ == "__main__":
    raise SystemExit(main())
