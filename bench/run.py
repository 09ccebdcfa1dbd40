"""Scale benchmark: full-size Llama-3.1 (decoder stacks and whole models) and Mixtral decoder
stacks, and the ratios that show reasoning cost does not grow with shapes or the parallel
degree.

    python bench/run.py [--quick] [--floor] [--out bench/results.json]

Graphs are exported from the example model code with shape-only lowering (no weights are
allocated). Each verification runs in a fresh process so its peak memory is its own. Prints
a table and writes `bench/results.json` (`models`, `ratios` and `cli_floor`: the README's
first command in fresh processes, measured in this run; `--floor` measures that alone).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_export(example: str, out: Path, *options: str) -> Path:
    """Run examples/EXAMPLE/export.py into `out` with `options`, in its own process (JAX fixes
    its device count at start-up); return `out`."""
    script = REPO / "examples" / example / "export.py"
    subprocess.run(
        [sys.executable, str(script), "--out", str(out), *options], check=True, capture_output=True
    )
    return out


def export_llama(
    out: Path,
    config: str,
    tp: int,
    layers: int | None = None,
    seq: int = 8,
    parts: str = "layers",
    dp: int = 1,
) -> Path:
    args = ["--config", config, "--tp", str(tp), "--parts", parts, "--bugs", "none"]
    args += ["--seq", str(seq)]
    if layers:
        args += ["--layers", str(layers)]
    if dp > 1:  # two sequences per device: a batch dim of one each is not proved yet
        args += ["--dp", str(dp), "--batch", str(2 * dp)]
    return run_export("llama", out, *args)


def export_mixtral(out: Path, config: str, ep: int, tp: int) -> Path:
    return run_export(
        "mixtral", out, "--config", config, "--ep", str(ep), "--tp", str(tp), "--bugs", "none"
    )


def export_mlp(out: Path, tp: int, hidden: int, ffn: int) -> Path:
    return run_export(
        "mlp", out, "--dp", "1", "--tp", str(tp), "--hidden", str(hidden), "--ffn", str(ffn)
    )


def export_flash(out: Path, chunks: int, seq: int) -> Path:
    return run_export(
        "flash_decoding", out, "--tp", "2", "--seq", str(seq), "--chunks", str(chunks)
    )


def _verify_child(folder: str, distributed: str, baseline: str, queue) -> None:
    from scalify.verify import verify_files

    start = time.perf_counter()
    report = verify_files(f"{folder}/{baseline}", f"{folder}/{distributed}", REPO / "rules")
    total = time.perf_counter() - start
    seconds = report.stats["seconds"]
    queue.put(
        {
            "verdict": report.verdict,
            "seconds": round(total, 3),
            "load_seconds": seconds.get("load", 0.0),
            "verify_seconds": round(seconds.get("prove", 0.0) + seconds.get("localise", 0.0), 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "egraph_nodes": report.stats["egraph_nodes"],
            "memo_hits": report.stats["memo_hits"],
            "partitions": report.stats["partitions"],
            "distributed_nodes": report.stats["distributed_nodes"],
        }
    )


def measure(folder: Path, distributed: str = "tp.hlo", baseline: str = "baseline.hlo") -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_verify_child, args=(str(folder), distributed, baseline, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def cli_floor(runs: int = 5) -> dict:
    """The README's first command as a user meets it: `scalify verify` on the MLP example in
    fresh processes. The first run starts with an empty compiled-rules store (a new machine),
    the others reuse it. Median and spread of the wall time, the largest peak memory."""
    command = [
        sys.executable,
        "-m",
        "scalify.cli",
        "verify",
        str(REPO / "examples" / "mlp" / "hlo" / "baseline.hlo"),
        str(REPO / "examples" / "mlp" / "hlo" / "tp.hlo"),
        "--rules",
        str(REPO / "rules"),
        "--format",
        "json",
    ]
    store = Path(tempfile.mkdtemp(prefix="scalify-cache-"))
    walls, proves, peaks = [], [], []
    for _ in range(runs):
        script = (
            "import json, resource, subprocess, sys, time; start = time.perf_counter(); "
            "out = subprocess.run(sys.argv[1:], capture_output=True, text=True).stdout; "
            "wall = time.perf_counter() - start; "
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024; "
            "print(json.dumps([wall, peak, json.loads(out)['stats']['seconds']['prove']]))"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, *command],
            capture_output=True,
            text=True,
            check=True,
            env={**__import__("os").environ, "SCALIFY_CACHE": str(store)},
        )
        wall, peak, prove = json.loads(done.stdout)
        walls.append(wall)
        peaks.append(peak)
        proves.append(prove)
    shutil.rmtree(store, ignore_errors=True)
    warm = sorted(walls[1:])
    return {
        "first_seconds": round(walls[0], 3),
        "median_seconds": round(warm[len(warm) // 2], 3),
        "spread_seconds": round(warm[-1] - warm[0], 3),
        "median_prove_seconds": round(sorted(proves)[len(proves) // 2], 3),
        "peak_rss_mb": round(max(peaks), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="8B and 8x7B only, small ratio graphs")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.json")
    parser.add_argument(
        "--floor", action="store_true", help="only the cold CLI floor, merged into --out"
    )
    args = parser.parse_args()
    if args.floor:
        floor = cli_floor()
        print(f"cold CLI, MLP example: {floor}")
        kept = json.loads(args.out.read_text()) if args.out.exists() else {}
        args.out.write_text(json.dumps({**kept, "cli_floor": floor}, indent=2) + "\n")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="scalify-bench-"))
    models = []
    llama = [("llama-3.1-8b", "8b"), ("llama-3.1-70b", "70b"), ("llama-3.1-405b", "405b")]
    mixtral = [("mixtral-8x7b", "8x7b"), ("mixtral-8x22b", "8x22b")]
    runs = (
        [
            (
                name,
                f"{config}, tp=8, decoder layers",
                lambda n=name, c=config: export_llama(tmp / n, c, 8),
                "tp.hlo",
            )
            for name, config in (llama[:1] if args.quick else llama)
        ]
        + [
            (
                f"{name} (whole model)",
                f"{config}, tp=8, vocab-parallel embedding + decoder + vocab-parallel loss",
                lambda n=name, c=config: export_llama(tmp / f"{n}-full", c, 8, parts="full"),
                "tp.hlo",
            )
            for name, config in (llama[:1] if args.quick else llama)
        ]
        + [
            (
                "llama-3.1-8b train step",
                "8b, tp=8, value_and_grad of the 32-layer decoder stack (every weight's gradient)",
                lambda: export_llama(tmp / "train32", "8b", 8, parts="train_layers"),
                "tp.hlo",
            ),
            (
                "llama-3.1-8b optimizer step",
                "8b, dp=2 x tp=8, loss, gradients and one AdamW update of the 32-layer stack",
                lambda: export_llama(tmp / "step32", "8b", 8, parts="train_step", dp=2),
                "tp.hlo",
            ),
        ]
        + [
            (
                name,
                f"{config}, ep=2 x tp=4, decoder layers",
                lambda n=name, c=config: export_mixtral(tmp / n, c, 2, 4),
                "ep.hlo",
            )
            for name, config in (mixtral[:1] if args.quick else mixtral)
        ]
    )
    for name, config, export, distributed in runs:
        result = measure(export(), distributed)
        models.append({"name": name, "config": config, **result})
        print(
            f"{name:30s} {result['verdict']:14s} {result['seconds']:7.2f} s  load "
            f"{result['load_seconds']:5.2f}  verify {result['verify_seconds']:5.2f}  "
            f"rss {result['peak_rss_mb']:7.1f} MB  e-graph {result['egraph_nodes']:6d}  "
            f"memo {result['memo_hits']}/{result['partitions']}",
            flush=True,
        )

    def verify_time(folder: Path) -> float:
        """The fastest of three verifications: a ratio of small times is otherwise mostly
        the noise of whatever else the machine is doing."""
        names = ("tp.hlo", "baseline.hlo")
        if (folder / "chunked.hlo").exists():  # split-KV attention over chunks on one device
            names = ("chunked.hlo", "split_baseline.hlo")
        return min(measure(folder, *names)["verify_seconds"] for _ in range(3))

    ratios = {}
    pairs = {
        "tp64_over_tp2": (
            lambda: export_mlp(tmp / "mlp_tp64", 64, 256, 1024),
            lambda: export_mlp(tmp / "mlp_tp2", 2, 256, 1024),
        ),
        "seq_long_over_short": (
            lambda: export_llama(
                tmp / "seq_long", "8b", 8, layers=2, seq=8192 if args.quick else 131072
            ),
            lambda: export_llama(tmp / "seq_short", "8b", 8, layers=2, seq=128),
        ),
        "hidden4x_over_1x": (
            lambda: export_mlp(tmp / "mlp_h4", 4, 1024, 4096),
            lambda: export_mlp(tmp / "mlp_h1", 4, 256, 1024),
        ),
        "kv_chunks64_over_4": (
            lambda: export_flash(tmp / "chunks64", 64, 4096),
            lambda: export_flash(tmp / "chunks4", 4, 4096),
        ),
        "step_over_forward": (  # dp x tp, forward + backward + AdamW vs the tp forward
            lambda: export_llama(tmp / "step_r", "8b", 8, parts="train_step", dp=2),
            lambda: export_llama(tmp / "forward_s", "8b", 8),
        ),
        "train_over_forward": (  # the whole 32-layer stack, forward + backward vs forward
            lambda: export_llama(tmp / "train_r", "8b", 8, parts="train_layers"),
            lambda: export_llama(tmp / "forward_r", "8b", 8),
        ),
        "kv_tp64_over_tp16": (  # 405B's 8 KV heads, each shared by 8 or 2 devices
            lambda: export_llama(tmp / "kv_tp64", "405b", 64, layers=2),
            lambda: export_llama(tmp / "kv_tp16", "405b", 16, layers=2),
        ),
        "views_tp32_over_tp4": (  # heads reached by other view chains, 2 heads per device
            lambda: run_export(
                "attention_views", tmp / "views_tp32", "--tp", "32", "--heads", "64"
            ),
            lambda: run_export("attention_views", tmp / "views_tp4", "--tp", "4", "--heads", "8"),
        ),
        "padded_tp6_over_tp8": (  # 8B's heads and MLP padded at tp 6, against tp 8 unpadded
            lambda: export_llama(tmp / "padded_tp6", "8b", 6, layers=2),
            lambda: export_llama(tmp / "unpadded_tp8", "8b", 8, layers=2),
        ),
        "layers126_over_32": (
            lambda: export_llama(tmp / "layers126", "8b", 8, layers=126),
            lambda: export_llama(tmp / "layers32", "8b", 8, layers=32),
        ),
    }
    for ratio, (numerator, denominator) in pairs.items():
        top, bottom = verify_time(numerator()), verify_time(denominator())
        ratios[ratio] = round(top / max(bottom, 1e-6), 2)
        print(f"{ratio:20s} {ratios[ratio]:6.2f}  ({top:.3f} s / {bottom:.3f} s)", flush=True)
    biggest = max(models, key=lambda m: m["seconds"])
    ratios["total_over_parse"] = round(biggest["seconds"] / max(biggest["load_seconds"], 1e-6), 2)
    print(f"{'total_over_parse':20s} {ratios['total_over_parse']:6.2f}  ({biggest['name']})")
    floor = cli_floor()
    print(f"cold CLI, MLP example: {floor}", flush=True)
    result = {"models": models, "ratios": ratios, "cli_floor": floor}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
