"""The authors' later wind-tunnel transformer, rebuilt for ``--arch benchmarks.authors_tinygpt:tinygpt``.

The papers' bijection checkpoints come from a GPT with separate key and value vocabularies: token
and learned position embeddings added, ``n_layers`` pre-norm blocks (RMSNorm, eps 1e-5; attention
with separate bias-free query, key, value and output projections and a causal mask; an MLP of width
4·dim with biases and GELU), a final RMSNorm and an output head tied to the token embedding — by
default dim 192, 6 layers, 6 heads (2.67M parameters at V = 20).  Written here from that
description, for the time-to-Bayes comparison (``benchmarks/time_to_bayes.py``): the same network
trained on this machine with the authors' schedule beside windtunnel's recipe.

Tied head: the logits over the task's classes are the residual stream's dot products with the
embeddings of the class tokens (for bijection the value tokens ``V … 2V-1``), so the readout is
the embedding, as in the original.  Where a task's classes are not tokens the head is a separate
linear map.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = self.norm1(x)
        q, k, v = (w(h).view(B, T, self.heads, C // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # softmax(qk^T / sqrt(d_head)) v
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab_size: int, n_classes: int, seq_len: int, class_tokens: torch.Tensor | None,
                 dim: int = 192, n_layers: int = 6, n_heads: int = 6):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, dim)
        self.pos_emb = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, n_heads) for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.head = None if class_tokens is not None else nn.Linear(dim, n_classes, bias=False)
        if class_tokens is not None:
            self.register_buffer("class_tokens", class_tokens, persistent=False)
        for m in self.modules():  # GPT-2's initialisation, as the original
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(T, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        if self.head is not None:
            return self.head(x)
        return x @ self.tok_emb.weight[self.class_tokens].T  # the tied head, over the class tokens


def tinygpt(task, dim: int = 192, n_layers: int = 6, n_heads: int = 6) -> TinyGPT:
    """The authors' transformer for ``task`` (no capacity target: its size is its own)."""
    class_tokens = None
    if task.name == "bijection":
        class_tokens = torch.arange(task.vocab_size - task.n_classes, task.vocab_size)  # the value tokens
    return TinyGPT(task.vocab_size, task.n_classes, task.seq_len, class_tokens, dim, n_layers, n_heads)
