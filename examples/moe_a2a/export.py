"""Export the all-to-all MoE layer as HLO: the baseline, the correct body, one file a bug;
the same for the gather/scatter form (`scatter_baseline.hlo`, `scatter*.hlo`).

Usage: python examples/moe_a2a/export.py --out DIR [--ep 4] [--tokens 8] [--hidden 16]
       [--experts 8] [--ffn 32] [--capacity 4]
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hlo_export import example_model, export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path,
    ep: int = 4,
    tokens: int = 8,
    hidden: int = 16,
    experts: int = 8,
    ffn: int = 32,
    capacity: int = 4,
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    model = example_model(__file__)

    args = [
        ((ep, tokens, hidden), P("ep")),  # one group of tokens per device
        ((hidden, experts), P()),
        ((experts, hidden, ffn), P("ep")),
        ((experts, ffn, hidden), P("ep")),
    ]
    mesh = jax.make_mesh((ep,), ("ep",))
    variants = {}
    forms = (  # (baseline, body, name, bugs, the baseline's file name)
        (model.moe, model.ep_moe, "ep", model.BUGS, "baseline"),
        (
            model.moe_scatter,
            model.ep_moe_scatter,
            "scatter",
            model.SCATTER_BUGS,
            "scatter_baseline",
        ),
    )
    for baseline, body, name, bugs, baseline_name in forms:
        form = shard_map_variants(
            mesh,
            partial(baseline, capacity=capacity),
            partial(body, capacity=capacity),
            args,
            P("ep"),
            name,
            bugs,
        )
        form[baseline_name] = form.pop("baseline")
        variants.update(form)
    return write_hlo(out_dir, variants)


if __name__ == "__main__":
    export_cli(__doc__, export_all, devices=("ep",))
