"""Every transformers decoder family that ships a tensor-parallel plan, tiny and random, loaded
with `DistributedConfig(tp_size=2)` and checked by Scalify: one line per family.

    python bench/transformers_families.py [FAMILY ...]

One generic tiny config serves every family (width 64, 2 layers, 4 heads, 2 KV heads, 4
experts), so a family whose own code needs other sizes fails in that code, and says so. Each
family runs in its own process (a family that hangs times out alone). Not a test: a survey
of code Scalify has not been written against.
"""

from __future__ import annotations

import subprocess
import sys
import time

ONE = r"""
import sys, tempfile, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
import torch, transformers
from transformers.distributed import DistributedConfig
from scalify.api import check_equivalent, fake_mesh
name = sys.argv[1]
common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=256, max_position_embeddings=64, tie_word_embeddings=False,
    head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2, num_experts=4,
    num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    shared_expert_intermediate_size=64, n_group=1, topk_group=1)
try:
    config = getattr(transformers, name + "Config")(**common)
    folder = Path(tempfile.mkdtemp()) / name
    torch.manual_seed(0)
    cls = getattr(transformers, name + "ForCausalLM")
    cls(config).save_pretrained(folder)
    mesh = fake_mesh("tp=2")
    baseline = cls.from_pretrained(folder).eval()
    model = cls.from_pretrained(folder, distributed_config=DistributedConfig(tp_size=2)).eval()
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        report = check_equivalent(baseline, model, mesh=mesh, example_inputs=(ids,))
    first = report.suspects[0].reason[:120] if report.suspects else ""
    print(f"{report.verdict}\t{first}")
except Exception as exc:
    print(f"error\t{type(exc).__name__}: {str(exc)[:120]}")
"""


def families() -> list[str]:
    import transformers

    found = []
    for name in dir(transformers):
        if not name.endswith("Config") or name.startswith("Pretrained"):
            continue
        family = name[: -len("Config")]
        plan = getattr(getattr(transformers, name), "base_model_tp_plan", None)
        if plan and hasattr(transformers, family + "ForCausalLM"):
            found.append(family)
    return found


def main() -> None:
    chosen = sys.argv[1:] or families()
    counts: dict[str, int] = {}
    for family in chosen:
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-c", ONE, family], capture_output=True, text=True, timeout=300
            )
            line = (done.stdout.strip().splitlines() or ["error\tno output"])[-1]
        except subprocess.TimeoutExpired:
            line = "error\ttimed out"
        verdict, _, detail = line.partition("\t")
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{family:24} {verdict:15} {time.perf_counter() - start:6.1f}s  {detail}", flush=True)
    print("total: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))


if __name__ == "__main__":
    main()
