"""Activation memory per GPU, after Korthikanti et al. 2022 (arXiv:2205.05198, Sections 4.1-4.3,
Table 2): bytes per layer per micro-batch for each TP/SP/recompute combination, with the 1F1B
pipeline's in-flight micro-batches on the first stage and the output layer on the last.
"""

from __future__ import annotations

from typing import Any

from slinkyml.plan._xp import maximum, minimum, where

RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = 0, 1, 2
RECOMPUTE_NAMES = ("none", "selective", "full")


def layer_bytes(s: Any, b: Any, h: Any, a: Any, t: Any, recompute: Any, sp: Any) -> Any:
    """Activation bytes one transformer layer keeps for one micro-batch (Korthikanti Table 2)."""
    sbh = s * b * h
    attn = 5.0 * a * s / h  # softmax output, its dropout mask, attention-over-values input
    # Without sequence parallelism the layer norms, dropouts and residual inputs (10 sbh) are
    # replicated on every tensor-parallel rank; with it they are sharded too.
    base = where(sp, 34.0 / t, 10.0 + 24.0 / t)
    kept = base + where(recompute == RECOMPUTE_SELECTIVE, 0.0, attn / t)
    full = where(sp, 2.0 / t, 2.0)
    return sbh * where(recompute == RECOMPUTE_FULL, full, kept)


def layer_bytes_no_recompute(s: Any, b: Any, h: Any, a: Any, t: Any, sp: Any) -> Any:
    """A layer's full activations (the working set rebuilt during backward with full recompute)."""
    return s * b * h * (where(sp, 34.0 / t, 10.0 + 24.0 / t) + 5.0 * a * s / (h * t))


def stage_activation_bytes(*, s: Any, b: Any, h: Any, a: Any, v: Any, t: Any, p: Any,
                           micro_batches: Any, first_layers: Any, last_layers: Any,
                           recompute: Any, sp: Any, most_layers: Any = None) -> tuple[Any, Any]:
    """Peak activation bytes on (the first stage, the last stage): the first has the most
    micro-batches in flight, the last the output layer and loss. With p = 1 they are one GPU and
    both figures are that GPU's total. ``most_layers``: layers on the second stage when the split is
    uneven (it holds one micro-batch fewer but may have more layers than the first)."""
    in_flight = minimum(p, micro_batches)
    per_layer = layer_bytes(s, b, h, a, t, recompute, sp)
    working = where(recompute == RECOMPUTE_FULL, layer_bytes_no_recompute(s, b, h, a, t, sp), 0.0)
    dropout = s * b * h / where(sp, t, 1)
    output = 4.0 * s * b * h / t * (1.0 + v / h)
    if most_layers is None:
        most_layers = first_layers
    layer_mbs = maximum(in_flight * first_layers, (in_flight - 1) * most_layers)
    first = layer_mbs * per_layer + in_flight * dropout + working
    last = last_layers * per_layer + working + output
    single = first + output
    return where(p == 1, single, first), where(p == 1, single, last)
