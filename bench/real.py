"""Real frameworks' models: how long Scalify takes on each, traced as users trace them.

    python bench/real.py [--out bench/real_results.json]

One row per model of tests/real (torchtitan's Llama3, Qwen3, Qwen3-MoE and DeepSeek-V3 with
their TP plans, transformers' LlamaForCausalLM with DistributedConfig, transformers-neuronx
Llama graphs as torch-neuronx lowered them, Megatron-core's GPTModel training step,
EasyDeL's Llama and Phi-3 partitioned by XLA with tensor and sequence parallelism): the
whole `check_equivalent` or `verify_files` call (tracing or loading both programs, the
device probes, proving) and the prove phase alone, side by side, plus the ratios tp 4 /
tp 2, tp 8 / tp 2, sp 4 / sp 2 and 8 layers / 1 layer (the proof must not grow with the
parallel degree). Entangle's published times for the same Neuron graphs (16 cores) are
printed beside ours. Needs the `real` extra (tests/real/README.md)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "real"))


LLAMA3_RUNS = ((2, False, 4, 2), (2, True, 4, 2), (4, False, 8, 4), (4, True, 8, 4))


def torchtitan_rows() -> list[tuple[str, float, float, str]]:
    from titan_models import build, tokens

    from scalify.api import check_equivalent

    rows = []
    runs = [("llama3", tp, sp, heads, kv) for tp, sp, heads, kv in LLAMA3_RUNS]
    runs += [(family, 2, False, 4, 2) for family in ("qwen3", "qwen3_moe", "deepseek_v3")]
    for family, tp, sp, heads, kv in runs:
        baseline, model, mesh, context = build(tp, family=family, sp=sp, heads=heads, kv_heads=kv)
        start = time.perf_counter()
        with context():
            report = check_equivalent(
                baseline,
                model,
                mesh=mesh,
                example_inputs=(tokens(),),
                relations={"outputs": ["shard(2, tp)"]},
            )
        total = time.perf_counter() - start
        name = f"torchtitan {family} tp={tp}{' sp' if sp else ''}"
        rows.append((name, total, report.stats["seconds"].get("prove", 0.0), report.verdict))
    return rows


def transformers_rows() -> list[tuple[str, float, float, str]]:
    from hf_llama import load, save_tiny_llama, token_ids

    from scalify.api import check_equivalent

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        baseline, model, mesh = load(save_tiny_llama(Path(folder)))
        for grad in (True, False):
            start = time.perf_counter()
            with torch.set_grad_enabled(grad):
                report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(token_ids(),))
            total = time.perf_counter() - start
            name = f"transformers llama tp=2 {'grad' if grad else 'no_grad'}"
            rows.append((name, total, report.stats["seconds"].get("prove", 0.0), report.verdict))
    return rows


# Entangle (nyu-systems/Entangle, its paper's evaluation) on 16 cores: about 10 s for one
# layer at tp 2 and about 240 s for eight layers at tp 8.
ENTANGLE_SECONDS = {"neuron llama tp=2 layers=1": 10.0, "neuron llama tp=8 layers=8": 240.0}


def neuron_rows() -> list[tuple[str, float, float, str]]:
    from scalify.verify import verify_files

    data = REPO / "tests" / "real" / "neuron"
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        relations = Path(folder) / "relations.json"
        relations.write_text('{"outputs": "inferred"}')
        # the first HLO verify of a process builds the parser and warms egglog: once, untimed,
        # so that the ratios below compare the graphs, not a cold start
        verify_files(
            str(data / "tp1_layer1.hlo.gz"),
            str(data / "tp2_layer1.hlo.gz"),
            REPO / "rules",
            mesh="tp=2",
            relations=str(relations),
        )
        # tp 6 pads the heads and the MLP width and repeats the KV heads: one line states
        # the fused QKV weight of every layer (tests/real/neuron/README.md)
        kv = "512 repeated(1, 4, 64) padded(1, 2304)"
        qkv = f"shard(1, tp, parts=[2048 padded(1, 2304), {kv}, {kv}])"
        padded = Path(folder) / "tp6.json"
        padded.write_text(json.dumps({"inputs": {"[2048, 1152]": qkv}, "outputs": "inferred"}))
        for layers in (1, 8):
            for tp in (2, 4, 6, 8):
                start = time.perf_counter()
                report = verify_files(
                    str(data / f"tp1_layer{layers}.hlo.gz"),
                    str(data / f"tp{tp}_layer{layers}.hlo.gz"),
                    REPO / "rules",
                    mesh=f"tp={tp}",
                    relations=str(padded if tp == 6 else relations),
                )
                total = time.perf_counter() - start
                name = f"neuron llama tp={tp} layers={layers}"
                rows.append(
                    (name, total, report.stats["seconds"].get("prove", 0.0), report.verdict)
                )
    return rows


def megatron_rows() -> list[tuple[str, float, float, str]]:
    """Megatron-core's GPTModel training step (loss and every weight's gradient), each run in
    its own process as tests/real/megatron_parts.py runs it."""
    import subprocess

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for tp in (2, 4):
            out = Path(folder) / f"gpt{tp}.json"
            script = REPO / "tests" / "real" / "megatron_parts.py"
            command = [sys.executable, str(script), str(out), "--part", "gpt", "--loss"]
            start = time.perf_counter()
            subprocess.run([*command, "--grad", "--tp", str(tp)], check=True, capture_output=True)
            total = time.perf_counter() - start
            report = json.loads(out.read_text())
            name = f"megatron gpt train step tp={tp}"
            rows.append((name, total, report["stats"]["seconds"]["prove"], report["verdict"]))
    return rows


def easydel_rows() -> list[tuple[str, float, float, str]]:
    """EasyDeL's Llama partitioned by XLA, the stored pairs of tests/real/easydel."""
    from scalify.verify import verify_files

    data = REPO / "tests" / "real" / "easydel"
    meshes = {
        "tp2": "dp=1,fsdp=1,ep=1,tp=2,sp=1",
        "sp2": "dp=1,fsdp=1,ep=1,tp=1,sp=2",
        "sp4": "dp=1,fsdp=1,ep=1,tp=1,sp=4",
        "tp2_sp2": "dp=1,fsdp=1,ep=1,tp=2,sp=2",
        "fsdp2_tp2_sp2": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
        "dp2_tp2_sp2_mask": "dp=2,fsdp=1,ep=1,tp=2,sp=2",
        "phi3_fsdp2_tp2_sp2_mask": "dp=1,fsdp=2,ep=1,tp=2,sp=2",
    }
    rows = []
    for case, mesh in meshes.items():
        start = time.perf_counter()
        report = verify_files(
            str(data / f"{case}_baseline.hlo.gz"),
            str(data / f"{case}_dist.hlo.gz"),
            REPO / "rules",
            mesh=mesh,
        )
        total = time.perf_counter() - start
        rows.append(
            (
                f"easydel {case if case.startswith('phi3') else 'llama ' + case}",
                total,
                report.stats["seconds"].get("prove", 0.0),
                report.verdict,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "bench" / "real_results.json"))
    args = parser.parse_args()
    rows = torchtitan_rows() + transformers_rows() + neuron_rows() + megatron_rows()
    rows += easydel_rows()
    print(f"{'model':36s} {'verify s':>9s} {'prove s':>8s} {'Entangle s':>10s}  verdict")
    for name, total, prove, verdict in rows:
        theirs = f"{ENTANGLE_SECONDS[name]:10.0f}" if name in ENTANGLE_SECONDS else " " * 10
        print(f"{name:36s} {total:9.2f} {prove:8.2f} {theirs}  {verdict}")
    by_name = {name: total for name, total, _, _ in rows}
    proving = {name: prove for name, _, prove, _ in rows}
    ratios = {
        "torchtitan tp4/tp2": by_name["torchtitan llama3 tp=4"] / by_name["torchtitan llama3 tp=2"],
        "torchtitan sp tp4/tp2": by_name["torchtitan llama3 tp=4 sp"]
        / by_name["torchtitan llama3 tp=2 sp"],
        "neuron tp8/tp2 (8 layers)": by_name["neuron llama tp=8 layers=8"]
        / by_name["neuron llama tp=2 layers=8"],
        "neuron tp6 (padded)/tp2 (8 layers)": by_name["neuron llama tp=6 layers=8"]
        / by_name["neuron llama tp=2 layers=8"],
        "neuron 8 layers/1 layer (tp 2)": by_name["neuron llama tp=2 layers=8"]
        / by_name["neuron llama tp=2 layers=1"],
        # the proof alone: reading eight layers' text is linear in it, proving them is not
        "neuron 8 layers/1 layer, prove (tp 2)": proving["neuron llama tp=2 layers=8"]
        / proving["neuron llama tp=2 layers=1"],
        "megatron train step tp4/tp2": by_name["megatron gpt train step tp=4"]
        / by_name["megatron gpt train step tp=2"],
        "easydel sp4/sp2": by_name["easydel llama sp4"] / by_name["easydel llama sp2"],
    }
    for name, value in ratios.items():
        print(f"ratio {name}: {value:.2f}")
    Path(args.out).write_text(
        json.dumps(
            {
                "models": [
                    {
                        "model": n,
                        "verify_seconds": round(t, 3),
                        "prove_seconds": round(p, 3),
                        "verdict": v,
                    }
                    for n, t, p, v in rows
                ],
                "ratios": {k: round(v, 3) for k, v in ratios.items()},
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
