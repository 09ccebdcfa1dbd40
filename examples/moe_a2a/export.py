"""Export the all-to-all MoE layer as HLO: the baseline, the correct body, one file a bug;
the same for the gather/scatter form (`scatter_baseline.hlo`, `scatter*.hlo`).

Usage: python examples/moe_a2a/export.py --out DIR [--ep 4] [--tokens 8] [--hidden 16]
       [--experts 8] [--ffn 32] [--capacity 4]
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hlo_export import export_cli, shard_map_variants, write_hlo  # noqa: E402


def export_all(
    out_dir: Path, ep: int, tokens: int, hidden: int, experts: int, ffn: int, capacity: int
) -> dict[str, Path]:
    import jax
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(HERE))
    from model import BUGS, SCATTER_BUGS, ep_moe, ep_moe_scatter, moe, moe_scatter

    args = [
        ((ep, tokens, hidden), P("ep")),  # one group of tokens per device
        ((hidden, experts), P()),
        ((experts, hidden, ffn), P("ep")),
        ((experts, ffn, hidden), P("ep")),
    ]
    mesh = jax.make_mesh((ep,), ("ep",))
    variants = {}
    forms = (  # (baseline, body, name, bugs, the baseline's file name)
        (moe, ep_moe, "ep", BUGS, "baseline"),
        (moe_scatter, ep_moe_scatter, "scatter", SCATTER_BUGS, "scatter_baseline"),
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


def main(argv: list[str] | None = None) -> None:
    export_cli(
        __doc__,
        {"ep": 4, "tokens": 8, "hidden": 16, "experts": 8, "ffn": 32, "capacity": 4},
        lambda ep, **_: ep,
        export_all,
        argv,
    )


if __name__ == "__main__":
    main()
