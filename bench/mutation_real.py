"""Mutation score over real frameworks' graphs: EasyDeL's models partitioned by XLA.

    python bench/mutation_real.py [--per-kind N] [--jobs J] [--pairs a,b,...]

Starts from the stored correct pairs of `tests/real/easydel` (each read with the mesh
`tests/real/test_easydel.py` gives it) and makes the five kinds of edit of
`scalify.soundness.mutate.family`: a collective dropped, a collective over a subset of its
groups, an all-reduce's `sum` swapped for `max`, a transpose's permutation with two
equal-sized dims exchanged, and one reader of the device's index given the next device's.
For each pair and kind, candidates are drawn in a fixed pseudo-random order and simulated
(seed 1) until N of them differ from the baseline (at most `--tries` a kind): only those
are bugs, and each is verified with the proof alone (`Limits(simulate=False)`). Prints, per
kind, how many were tried, differed, were wrongly proved, caught, and caught with the first
suspect at the mutated line; writes every mutant's outcome to `bench/mutation_real.json`.
Exits 1 if any differing mutant was proved equivalent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from scalify.compiler.compile import compile_rule_dir

from scalify.frontends import load_graph
from scalify.soundness.mutate import FAMILY, Judge, sample_family
from scalify.verify import choose_mesh

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "real"))
from test_easydel import CASES, HERE  # noqa: E402  (the pairs and their meshes, one list)


@dataclass
class KindScore:
    """One kind's counts over every pair."""

    tried: int = 0  # candidates built and simulated
    not_simulable: int = 0
    differing: int = 0
    wrongly_proved: int = 0
    caught: int = 0
    located: int = 0  # caught, and the mutant names the lines a report should point at
    first_at_line: int = 0
    top3_at_line: int = 0
    seconds: float = 0.0  # verifying the differing ones
    wrong: list[str] = field(default_factory=list)

    def share(self) -> str:
        return f"{100 * self.first_at_line / self.located:.0f}%" if self.located else "-"


def run_pair(job: tuple[str, int, int]) -> list[dict]:
    """Every sampled mutant of one pair: a worker process's unit, so it loads its own rules
    (compiled rules do not pickle cheaply and take 0.1 s)."""
    case, per_kind, tries = job
    rules = compile_rule_dir(REPO / "rules")
    base = load_graph(str(HERE / f"{case}_baseline.hlo.gz"), rules.custom_calls)
    dist = load_graph(str(HERE / f"{case}_dist.hlo.gz"), rules.custom_calls)
    mesh = choose_mesh(CASES[case], dist, None)
    judge = Judge(base, dist, rules, mesh)
    rows = []
    seed = zlib.crc32(case.encode())
    for candidate, mutant, out in sample_family(judge, dist, mesh, per_kind, tries, seed):
        row = {"pair": case, "kind": candidate.kind, "mutation": candidate.description}
        row["differing"] = out.differing if out.simulable else None
        if out.differing:
            row |= {
                "verdict": out.verdict,
                "sites": [f"{f}:{n}" for f, n in mutant.sites],
                "located": out.located,
                "first_at_line": out.first_at_line,
                "top3_at_line": out.top3_at_line,
                "first": f"{out.first[0]}:{out.first[1]}" if out.first else None,
                "reason": out.reason,
                "seconds": out.seconds,
            }
        rows.append(row)
    return rows


def tally(rows: list[dict]) -> dict[str, KindScore]:
    scores = {kind: KindScore() for kind in FAMILY}
    for row in rows:
        s = scores[row["kind"]]
        s.tried += 1
        if row["differing"] is None:
            s.not_simulable += 1
        if not row["differing"]:
            continue
        s.differing += 1
        s.seconds += row["seconds"]
        if row["verdict"] == "equivalent":
            s.wrongly_proved += 1
            s.wrong.append(f"{row['pair']}: {row['mutation']}")
            continue
        s.caught += 1
        if row["located"]:
            s.located += 1
            s.first_at_line += row["first_at_line"]
            s.top3_at_line += row["top3_at_line"]
    return scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--per-kind", type=int, default=1, help="differing mutants per kind")
    parser.add_argument("--tries", type=int, default=4, help="candidates simulated per kind")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--pairs", help="comma-separated pairs (default: every stored one)")
    parser.add_argument("--out", default=str(REPO / "bench" / "mutation_real.json"))
    args = parser.parse_args()
    pairs = args.pairs.split(",") if args.pairs else list(CASES)
    # the largest first, so that the last worker to finish is not left with one of them
    pairs.sort(key=lambda p: -(HERE / f"{p}_dist.hlo.gz").stat().st_size)
    start = time.perf_counter()
    rows: list[dict] = []
    # spawned, not forked: a forked worker inherits locks held by the parent's threads
    with get_context("spawn").Pool(args.jobs) as pool:
        for done in pool.imap_unordered(run_pair, [(p, args.per_kind, args.tries) for p in pairs]):
            rows += done
            print(f"{done[0]['pair'] if done else '?'}: {len(done)} mutants", flush=True)
    rows.sort(key=lambda r: (pairs.index(r["pair"]), FAMILY.index(r["kind"])))
    scores = tally(rows)
    total = KindScore()
    print(
        f"\n{'kind':14s} {'tried':>5s} {'diff':>5s} {'wrong':>5s} {'caught':>6s} "
        f"{'at line':>9s} {'top 3':>7s} {'verify s':>8s}"
    )
    for kind, s in [*scores.items(), ("total", total)]:
        if kind != "total":
            for name in ("tried", "not_simulable", "differing", "wrongly_proved", "caught"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
            for name in ("located", "first_at_line", "top3_at_line", "seconds"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
            total.wrong += s.wrong
        print(
            f"{kind:14s} {s.tried:5d} {s.differing:5d} {s.wrongly_proved:5d} {s.caught:6d} "
            f"{s.first_at_line:4d}/{s.located:<4d} {s.top3_at_line:3d}/{s.located:<3d} "
            f"{s.seconds:8.1f}  {s.share()}"
        )
    seconds = time.perf_counter() - start
    print(f"{len(pairs)} pairs, {seconds:.0f} s")
    for line in total.wrong:
        print(f"WRONGLY PROVED: {line}")
    summary = {
        kind: {k: v for k, v in vars(s).items() if k != "wrong"} | {"wrong": s.wrong}
        for kind, s in [*scores.items(), ("total", total)]
    }
    Path(args.out).write_text(
        json.dumps(
            {
                "settings": {
                    "per_kind": args.per_kind,
                    "tries": args.tries,
                    "pairs": pairs,
                    "seconds": round(seconds),
                },
                "kinds": summary,
                "mutants": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 1 if total.wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
