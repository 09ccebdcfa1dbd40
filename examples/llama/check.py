"""Numeric sanity check: the correct tp body matches the baseline and every bug changes it.

Usage: python examples/llama/check.py [--config tiny] [--tp 2,4,8,16] [--parts full,layers]
       [--layers N] [--seq 8] [--batch 2]

Runs real (small) arrays on host CPU devices, for each tp and part, the correct tp variant
against the baseline, then every `tp_<bug>` variant. --parts full compares the loss and the
logits of `tp_llama` with `llama`; --parts layers compares the hidden states `tp_decoder`
returns (after the psums) with those of `decoder`, on random replicated inputs. Exits 1 if
the correct variant differs, or a bug leaves the outputs unchanged where export.py exports
it (or changes them where export.py skips it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from config import add_variant_options, config_from


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_variant_options(ap)
    ap.add_argument("--tp", default="2,4,8,16")
    ap.add_argument("--parts", default="full,layers", help="comma-separated: full, layers")
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args(argv)
    tps = [int(t) for t in a.tp.split(",")]
    parts = [p for p in a.parts.split(",") if p]
    if "jax" in sys.modules:
        raise RuntimeError("jax was imported before XLA_FLAGS could be set")
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={max(tps)}"
    ).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import jax
    import jax.numpy as jnp
    import numpy as np
    from export import baseline_function, check_divisible, skip_reason, tp_function
    from jax.sharding import Mesh
    from model import BUGS, PARTS, param_shapes, part_params
    from padding import pad_params

    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    cfg = config_from(a)
    rng = np.random.default_rng(0)

    def init(shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) == 1:  # norm weights: near one
            return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(n, int) for n in x)  # noqa: E731
    params = jax.tree.map(init, param_shapes(cfg), is_leaf=is_shape)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab, (a.batch, a.seq)), jnp.int32)
    targets = jnp.asarray(rng.integers(0, cfg.vocab, (a.batch, a.seq)), jnp.int32)
    x = jnp.asarray(rng.standard_normal((a.batch, a.seq, cfg.hidden)), jnp.float32)

    # Per part, each output the tp variants are compared on: name -> fn -> array.
    # The weights come in as the function takes them (padded for a tp that needs it); padded
    # logits are compared on the true vocabulary.
    Run = Callable[[Callable[..., Any], Any], np.ndarray]
    outputs: dict[str, dict[str, Run]] = {
        "full": {
            "loss": lambda fn, p: np.asarray(fn(p, tokens, targets)),
            "logits": lambda fn, p: np.asarray(fn(p, tokens))[..., : cfg.vocab],
        },
        "layers": {"hidden": lambda fn, p: np.asarray(fn(part_params(p, "layers"), x))},
    }
    ref = {
        part: {out: run(baseline_function(cfg, out), params) for out, run in outputs[part].items()}
        for part in parts
    }
    loss = f", baseline loss {float(ref['full']['loss']):.6f}" if "full" in ref else ""
    print(f"{a.config} layers={cfg.layers}{loss}")

    def diffs(part: str, mesh: Mesh, bug: str | None) -> dict[str, float]:
        d = {}
        padded = pad_params(params, cfg, mesh.shape["tp"])  # the converter's layout, if any
        for out, run in outputs[part].items():
            got = run(tp_function(cfg, mesh, bug, output=out), padded)
            d[out] = float(np.max(np.abs(got - ref[part][out])))
        return d

    def show(d: dict[str, float]) -> str:
        return ", ".join(f"max |{out} diff| {v:.2e}" for out, v in d.items())

    ok = True
    for tp in tps:
        check_divisible(cfg, tp)
        mesh = Mesh(np.array(jax.devices()[:tp]), ("tp",))
        for part in parts:
            d = diffs(part, mesh, None)
            good = max(d.values()) < 1e-4
            ok &= good
            print(f"tp={tp} {part:>6} {'correct':>27}: {show(d)} {'OK' if good else 'MISMATCH'}")
            for bug in BUGS:
                d = diffs(part, mesh, bug)
                changed = max(d.values()) > 1e-3
                reason = skip_reason(bug, cfg, tp, part)
                ok &= changed != bool(reason)
                verdict = ("skipped: " + reason) if reason else "changed"
                verdict = verdict if changed != bool(reason) else "UNEXPECTED"
                print(f"tp={tp} {part:>6} {bug:>27}: {show(d)} {verdict}")
    print("all OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
