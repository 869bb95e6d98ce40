"""A minimal GPT (pre-norm decoder) and the arithmetic to size it and judge its FLOP/s."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    seq_len: int = 32
    layers: int = 2
    hidden: int = 32
    heads: int = 2

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError("hidden must be divisible by heads")


#: Named sizes. "1b" is what the GPU check trains (~1.07e9 parameters, tied embeddings).
PRESETS = {
    "tiny": GPTConfig(vocab=64, seq_len=32, layers=2, hidden=32, heads=2),
    "small": GPTConfig(vocab=256, seq_len=64, layers=4, hidden=128, heads=4),
    "1b": GPTConfig(vocab=32000, seq_len=1024, layers=20, hidden=2048, heads=16),
}


def param_count(cfg: GPTConfig) -> int:
    """Exact parameter count of :class:`GPT` (tied input/output embedding)."""
    d, L = cfg.hidden, cfg.layers
    per_layer = (4 * d * d + 4 * d) + (8 * d * d + 5 * d) + 4 * d  # attn qkv+proj, mlp, 2 layernorms
    return cfg.vocab * d + cfg.seq_len * d + L * per_layer + 2 * d


def flops_per_token(cfg: GPTConfig) -> float:
    """Training FLOPs per token: 6·N for the weights plus 12·L·s·d for attention scores (PaLM)."""
    return 6.0 * param_count(cfg) + 12.0 * cfg.layers * cfg.seq_len * cfg.hidden


def mfu(tokens_per_second: float, cfg: GPTConfig, peak_flops_total: float) -> float:
    """Model FLOP utilisation: achieved model FLOP/s over the peak of all devices used."""
    return tokens_per_second * flops_per_token(cfg) / peak_flops_total


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.fc = nn.Linear(cfg.hidden, 4 * cfg.hidden)
        self.out = nn.Linear(4 * cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, gradient_checkpointing: bool = False):
        super().__init__()
        self.cfg = cfg
        self.gradient_checkpointing = gradient_checkpointing
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq_len, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.hidden)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            nn.init.normal_(block.out.weight, std=0.02 / math.sqrt(2 * cfg.layers))  # type: ignore[union-attr,arg-type]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.ln(x) @ self.tok.weight.t()  # tied output embedding
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def synthetic_batch(cfg: GPTConfig, batch: int, *, seed: int, step: int, rank: int,
                    device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic (seed, step, rank) sequences x[t+1] = x[t] + stride (mod vocab): learnable.

    Depends only on its arguments, so a resumed run sees exactly the batches it would have seen.
    """
    gen = torch.Generator().manual_seed((seed * 1_000_003 + step) * 65_537 + rank)
    start = torch.randint(0, cfg.vocab, (batch, 1), generator=gen)
    stride = torch.randint(1, 5, (batch, 1), generator=gen)
    seq = (start + stride * torch.arange(cfg.seq_len + 1)) % cfg.vocab
    return seq[:, :-1].to(device), seq[:, 1:].to(device)
