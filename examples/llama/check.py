"""Numeric sanity check: the correct tp body matches the baseline and every bug changes it.

Usage: python examples/llama/check.py [--config tiny] [--tp 2,4,8] [--layers N]
       [--seq 8] [--batch 2]

Runs real (small) arrays on host CPU devices: for each tp, the loss and the logits of
`tp_llama` against `llama`, then those of every `tp_<bug>` variant. Exits 1 if the correct
variant differs, or a bug leaves loss and logits unchanged where export.py exports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--tp", default="2,4,8")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args(argv)
    tps = [int(t) for t in a.tp.split(",")]
    if "jax" in sys.modules:
        raise RuntimeError("jax was imported before XLA_FLAGS could be set")
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={max(tps)}"
    ).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import jax
    import jax.numpy as jnp
    import numpy as np
    from export import CONFIGS, check_divisible, no_op_reason, tp_function
    from jax.sharding import Mesh
    from model import BUGS, llama, llama_logits, param_shapes

    cfg = CONFIGS[a.config]
    if a.layers is not None:
        cfg = dataclasses.replace(cfg, layers=a.layers)
    rng = np.random.default_rng(0)

    def init(shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) == 1:  # norm weights: near one
            return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(n, int) for n in x)  # noqa: E731
    params = jax.tree.map(init, param_shapes(cfg), is_leaf=is_shape)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab, (a.batch, a.seq)), jnp.int32)
    targets = jnp.asarray(rng.integers(0, cfg.vocab, (a.batch, a.seq)), jnp.int32)

    ref_loss = float(jax.jit(lambda p, t, y: llama(p, t, y, cfg=cfg))(params, tokens, targets))
    ref_logits = np.asarray(jax.jit(lambda p, t: llama_logits(p, t, cfg=cfg))(params, tokens))
    print(f"{a.config} layers={cfg.layers} baseline loss {ref_loss:.6f}")
    ok = True
    for tp in tps:
        check_divisible(cfg, tp)
        mesh = Mesh(np.array(jax.devices()[:tp]), ("tp",))
        loss = float(tp_function(cfg, mesh, None)(params, tokens, targets))
        logits = np.asarray(tp_function(cfg, mesh, None, logits=True)(params, tokens))
        err = float(np.max(np.abs(logits - ref_logits)))
        good = abs(loss - ref_loss) < 1e-4 and err < 1e-4
        ok &= good
        print(
            f"tp={tp} correct: loss {loss:.6f} (diff {loss - ref_loss:+.2e}), "
            f"max |logits diff| {err:.2e} {'OK' if good else 'MISMATCH'}"
        )
        for bug in BUGS:
            bug_loss = float(tp_function(cfg, mesh, bug)(params, tokens, targets))
            bug_logits = np.asarray(tp_function(cfg, mesh, bug, logits=True)(params, tokens))
            bug_err = float(np.max(np.abs(bug_logits - ref_logits)))
            changed = abs(bug_loss - ref_loss) > 1e-4 or bug_err > 1e-3
            reason = no_op_reason(bug, cfg, tp)
            ok &= changed != bool(reason)
            verdict = ("no-op, not exported: " + reason) if reason else ""
            verdict = verdict if changed != bool(reason) else "UNEXPECTED"
            print(
                f"tp={tp} {bug:>27}: loss {bug_loss:.6f} ({bug_loss - ref_loss:+.4f}), "
                f"max |logits diff| {bug_err:.3f} {verdict or 'changed'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
