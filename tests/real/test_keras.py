"""A Keras 3 model on JAX: Keras's `Layer.__call__` calls the model's `call()` back, and every
`keras.ops.einsum` makes its op in Keras's backend wrapper, one line for all of them. The
parsed graph must place each op at the model's own line, the backend's line kept beside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from real_support import require

require("keras")

if os.environ.setdefault("KERAS_BACKEND", "jax") != "jax":
    pytest.skip("Keras runs on another backend here", allow_module_level=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
from keras import ops  # noqa: E402

from scalify.frontends.hlo import parse_hlo  # noqa: E402

HERE = Path(__file__).resolve()
SHOWN = "tests/real/test_keras.py"


class Block(keras.layers.Layer):
    """x @ w with an einsum, then relu + 1."""

    def __init__(self, width: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.width = width

    def build(self, shape) -> None:
        self.w = self.add_weight(shape=(shape[-1], self.width), initializer="ones")

    def call(self, x):
        h = ops.einsum("bd,de->be", x, self.w)  # LINE: einsum
        return ops.relu(h) + 1.0


class Model(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block(8)
        self.head = keras.layers.Dense(4)

    def call(self, x):
        return self.head(self.block(x))  # LINE: head


def _line(tag: str) -> int:
    lines = HERE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if f"# LINE: {tag}" in text)


def test_a_keras_models_ops_are_placed_at_the_models_lines(monkeypatch):
    monkeypatch.chdir(HERE.parents[2])
    model = Model()
    x = jnp.ones((2, 16))
    model(x)
    state = [v.value for v in model.trainable_variables]

    def forward(state, x):
        return model.stateless_call(state, [], x)[0]

    text = jax.jit(forward).lower(state, x).as_text(dialect="hlo", debug_info=True)
    graph = parse_hlo(text, "keras.hlo")
    located = [n for n in graph.nodes.values() if n.loc is not None]
    assert located and all(n.loc.file == SHOWN for n in located), [str(n.loc) for n in located]
    (einsum, dense) = sorted((n for n in located if n.op == "dot"), key=lambda n: n.loc.line)
    assert (einsum.loc.line, einsum.loc.function) == (_line("einsum"), "Block.call")
    # JAX keeps Keras's frames in its locations or drops them (it depends on where the two
    # are installed); where it keeps them, Keras's wrapper is the library line beside
    if einsum.loc.library is not None:
        assert einsum.loc.library.file == "keras/src/backend/jax/numpy.py"
    assert einsum.loc.call_site.line == _line("head")  # Model.call, through Layer.__call__
    # a layer of Keras's own (Dense) is placed at the model's line that called it
    assert dense.loc.line == _line("head")
    assert dense.loc.library is None or dense.loc.library.file.startswith("keras/")
