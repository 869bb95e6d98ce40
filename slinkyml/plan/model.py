"""Transformer shape, parameter counts and how Megatron splits them over TP x PP.

A GPT-style decoder; given only ``--params``, the shape comes from Megatron-LM's weak-scaling table
(Narayanan et al. 2021, Table 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from slinkyml import DATA_DIR
from slinkyml.errors import SpecError

#: (params in billions, hidden, heads, layers) per size class, Narayanan et al. 2021 Table 1
REFERENCE_SHAPES: tuple[tuple[float, int, int, int], ...] = tuple(map(tuple, json.loads(
    (DATA_DIR / "model_shapes.json").read_text())["shapes"]))


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer; ``total_params`` overrides the count derived from the shape."""

    layers: int
    hidden: int
    heads: int
    seq: int = 2048
    vocab: int = 51200
    total_params: float | None = None
    assumed: bool = False  # True when the shape was guessed from --params

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise SpecError(f"--{name}", f"must be a positive integer, got {value!r}")
        if self.hidden % self.heads:
            raise SpecError("--heads", f"{self.heads} heads do not divide hidden size {self.hidden}")
        if self.total_params is not None and self.total_params <= self.embedding_params:
            raise SpecError("--params", f"{self.total_params:.3g} is not more than the embeddings "
                                        f"({self.embedding_params:.3g}) of this shape")

    @property
    def embedding_params(self) -> float:
        """Word embeddings (tied with the output layer), positions and the final layer norm."""
        return float(self.vocab * self.hidden + self.seq * self.hidden + 2 * self.hidden)

    @property
    def shape_params(self) -> float:
        return float(self.layers * (12 * self.hidden**2 + 13 * self.hidden)) + self.embedding_params

    @property
    def params(self) -> float:
        return float(self.total_params) if self.total_params is not None else self.shape_params

    @property
    def layer_params(self) -> float:
        """Parameters of one transformer layer (scaled so the total matches ``params``)."""
        return (self.params - self.embedding_params) / self.layers

    @property
    def largest_module_params(self) -> float:
        """Largest single module (ZeRO-3 gathers one at a time): the embedding or the 4h MLP."""
        return float(max(self.vocab * self.hidden, 4 * self.hidden**2 + 4 * self.hidden))

    def describe(self) -> str:
        tag = " (assumed from --params)" if self.assumed else ""
        return (f"{self.layers} layers x hidden {self.hidden} x {self.heads} heads, seq {self.seq}, "
                f"vocab {self.vocab}: {self.params / 1e9:.1f}B params{tag}")


def shape_from_params(params: float, *, seq: int = 2048, vocab: int = 51200) -> ModelShape:
    """Assume a shape for ``params``: the nearest (log scale) reference row's hidden size and heads,
    and the layer count rounded to a multiple of 8 so common pipeline depths divide it."""
    if not params or params <= 0 or not math.isfinite(params):
        raise SpecError("--params", f"must be a positive number, got {params!r}")
    _, hidden, heads, _ = min(REFERENCE_SHAPES, key=lambda r: abs(math.log(r[0] * 1e9 / params)))
    per_layer = 12 * hidden**2 + 13 * hidden
    embed = vocab * hidden + seq * hidden + 2 * hidden
    raw = max(1.0, (params - embed) / per_layer)
    layers = max(8, int(round(raw / 8)) * 8) if raw >= 6 else max(1, int(round(raw)))
    if params <= embed:
        raise SpecError("--params", f"{params:.3g} is too small for a {hidden}-wide model with "
                                    f"vocabulary {vocab}; give --layers/--hidden/--heads instead")
    return ModelShape(layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab,
                      total_params=float(params), assumed=True)


def stage_layers(layers: int, pp: int) -> tuple[int, int, bool]:
    """(layers on the first stage, most layers on any stage, embedding counted as a layer).

    Even split, else Megatron-DeepSpeed's ``type:transformer|embedding`` partition, else ceil.
    """
    if layers % pp == 0:
        return layers // pp, layers // pp, False
    if pp > 1 and (layers + 2) % pp == 0:
        per = (layers + 2) // pp
        return per - 1, per, True
    per = -(-layers // pp)
    return per, per, False
