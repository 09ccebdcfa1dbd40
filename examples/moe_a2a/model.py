"""A GShard-style expert-parallel MoE layer: capacity-based dispatch and all-to-all.

`moe` is the single-device baseline. Tokens come in G groups (`x`: groups, tokens, hidden);
each group routes its tokens to its top-k experts with a capacity of C slots per expert (a
token past the capacity is dropped), in the one-hot/einsum form: a dispatch mask and combine
weights of shape (groups, tokens, experts, capacity). `ep_moe` is the per-device body on an
("ep",) mesh holding one group of tokens and experts/ep experts: it routes its own tokens,
an all-to-all sends every expert its slots from all groups, the local experts run, and a
second all-to-all brings the results back for the combine. Each bug changes one line, tagged
with a BUG comment naming it.
"""

from typing import Literal

import jax
import jax.numpy as jnp
from jax import Array, lax

Bug = Literal["combine_with_dispatch_mask", "outputs_summed_over_groups"]
BUGS: tuple[Bug, ...] = ("combine_with_dispatch_mask", "outputs_summed_over_groups")
ScatterBug = Literal["combine_with_kept_mask", "slots_counted_over_groups"]
SCATTER_BUGS: tuple[ScatterBug, ...] = ("combine_with_kept_mask", "slots_counted_over_groups")
TOP_K = 2


def route(x: Array, router: Array, capacity: int) -> tuple[Array, Array]:
    """Combine weights and dispatch mask, both (groups, tokens, experts, capacity)."""
    experts = router.shape[1]
    top, index = lax.top_k(x @ router, TOP_K)
    gates = jax.nn.softmax(top, axis=-1)
    chosen = jax.nn.one_hot(index, experts, dtype=x.dtype)  # (g, t, k, e)
    mask = jnp.sum(chosen, axis=2)  # (g, t, e): 1 where the token goes to the expert
    position = jnp.cumsum(mask, axis=1) * mask - 1.0  # its slot in that expert's buffer
    kept = mask * (position < capacity)  # tokens past the capacity are dropped
    slot = jax.nn.one_hot(position, capacity, dtype=x.dtype)
    weight = jnp.einsum("gtk,gtke->gte", gates, chosen) * kept
    return weight[..., None] * slot, kept[..., None] * slot


def experts_ffn(xe: Array, w1: Array, w2: Array) -> Array:
    """Each expert's FFN on its slots: xe (groups, experts, capacity, hidden)."""
    return jnp.einsum("gecf,efh->gech", jax.nn.gelu(jnp.einsum("gech,ehf->gecf", xe, w1)), w2)


def moe(x: Array, router: Array, w1: Array, w2: Array, *, capacity: int) -> Array:
    combine, dispatch = route(x, router, capacity)
    xe = jnp.einsum("gtec,gth->gech", dispatch, x)
    return jnp.einsum("gtec,gech->gth", combine, experts_ffn(xe, w1, w2))


def ep_moe(
    x: Array, router: Array, w1: Array, w2: Array, *, capacity: int, bug: Bug | None = None
) -> Array:
    """x: this device's group of tokens (1, tokens, hidden); w1, w2: its experts."""
    combine, dispatch = route(x, router, capacity)
    xe = jnp.einsum("gtec,gth->gech", dispatch, x)  # (1, experts, capacity, hidden)
    xe = lax.all_to_all(xe, "ep", split_axis=1, concat_axis=0, tiled=True)  # every group's
    ye = experts_ffn(xe, w1, w2)  # slots for the local experts
    ye = lax.all_to_all(ye, "ep", split_axis=0, concat_axis=1, tiled=True)  # back home
    if bug == "combine_with_dispatch_mask":
        return jnp.einsum("gtec,gech->gth", dispatch, ye)  # BUG: combine_with_dispatch_mask
    y = jnp.einsum("gtec,gech->gth", combine, ye)
    if bug == "outputs_summed_over_groups":
        return lax.psum(y, "ep")  # BUG: outputs_summed_over_groups
    return y


# ---- the gather/scatter form -----------------------------------------------------------------
# The same routing with indices instead of one-hot tensors: each (token, choice) has an expert
# id and a slot; dispatch scatter-adds the token into (expert, slot) of its group's buffer
# (a slot past the capacity is dropped), combine gathers it back. Both are vmapped over the
# groups, so HLO holds them with the group as a batching dim.


def route_indices(x: Array, router: Array, capacity: int, bug: ScatterBug | None = None):
    """(expert id, slot, gate weight), each (groups, tokens, k); a dropped choice weighs 0.
    A token's slot in an expert's buffer counts the tokens before it that chose the expert."""
    experts = router.shape[1]
    top, index = lax.top_k(x @ router, TOP_K)
    gates = jax.nn.softmax(top, axis=-1)
    mask = jnp.sum(jax.nn.one_hot(index, experts, dtype=x.dtype), axis=2)  # (g, t, e)
    counted = jnp.cumsum(mask, axis=1)
    if bug == "slots_counted_over_groups":
        counted = jnp.cumsum(mask, axis=0)  # BUG: slots_counted_over_groups
    position = counted * mask - 1.0
    slot = jnp.take_along_axis(position, index, axis=2).astype(jnp.int32)
    return index, slot, gates * (slot < capacity)


def scatter_dispatch(x: Array, index: Array, slot: Array, experts: int, capacity: int) -> Array:
    """(groups, experts, capacity, hidden): every kept token in its slot of its experts."""

    def one_group(x, index, slot):
        buffer = jnp.zeros((experts, capacity, x.shape[-1]), x.dtype)
        tokens = jnp.broadcast_to(x[:, None, :], (*index.shape, x.shape[-1]))
        return buffer.at[index, slot].add(tokens, mode="drop")

    return jax.vmap(one_group)(x, index, slot)


def gather_slots(ye: Array, index: Array, slot: Array) -> Array:
    """(groups, tokens, k, hidden): each choice's expert output, 0 for a dropped one."""
    return jax.vmap(lambda y, i, s: y.at[i, s].get(mode="fill", fill_value=0))(ye, index, slot)


def moe_scatter(x: Array, router: Array, w1: Array, w2: Array, *, capacity: int) -> Array:
    index, slot, weight = route_indices(x, router, capacity)
    xe = scatter_dispatch(x, index, slot, router.shape[1], capacity)
    got = gather_slots(experts_ffn(xe, w1, w2), index, slot)
    return jnp.einsum("gtk,gtkh->gth", weight, got)


def ep_moe_scatter(
    x: Array, router: Array, w1: Array, w2: Array, *, capacity: int, bug: ScatterBug | None = None
) -> Array:
    """The gather/scatter form per device: its own group routed, dispatched and combined,
    the expert slots sent to their devices and back by all-to-alls."""
    index, slot, weight = route_indices(x, router, capacity, bug)
    xe = scatter_dispatch(x, index, slot, router.shape[1], capacity)
    xe = lax.all_to_all(xe, "ep", split_axis=1, concat_axis=0, tiled=True)
    ye = experts_ffn(xe, w1, w2)
    ye = lax.all_to_all(ye, "ep", split_axis=0, concat_axis=1, tiled=True)
    got = gather_slots(ye, index, slot)
    if bug == "combine_with_kept_mask":
        return jnp.einsum("gtk,gtkh->gth", weight > 0, got)  # BUG: combine_with_kept_mask
    return jnp.einsum("gtk,gtkh->gth", weight, got)
