"""Coin: Beta–Bernoulli flips, or Paper III's two-label SULA task (Paper III, arXiv 2512.23752).

``labels="flips"`` (conjugate accumulation): a coin bias ``p ~ Beta(a, b)`` per episode and
flips ``f_1..f_n ~ Bernoulli(p)`` (1 = heads).  Tokens ``[BOS, f_1, …, f_{n-1}]`` (flips are ids
0/1, ``BOS`` is 2), targets ``[f_1, …, f_n]``: at position ``t`` the model has seen ``t`` flips with
``h`` heads and predicts the next one.  The exact predictive (Laplace's rule generalised) is

    p(f_{t+1} = 1 | f_{1..t}) = (a + h) / (a + b + t).

``labels="noisy"`` (Paper III's SULA, "not Beta–Bernoulli"): a latent label ``y ∈ {0, 1}`` with
a uniform prior; example labels ``ℓ_j = y`` with probability ``1 - ε`` and ``1 - y`` otherwise
(``ε = label_noise``, 0.1 in the paper).  Tokens ``[BOS, ℓ_1, …, ℓ_{n-1}]`` and at every position
the model predicts ``y`` itself (the target is ``y`` everywhere).  With ``n_1`` ones and ``n_0``
zeros among the labels seen,

    p(y = 1 | ℓ_{1..t}) ∝ (1-ε)^{n_1} ε^{n_0}   vs   p(y = 0 | ℓ_{1..t}) ∝ ε^{n_1} (1-ε)^{n_0},

i.e. ``sigmoid((n_1 - n_0) log((1-ε)/ε))``; ``a`` and ``b`` are unused there.

Classes: 0 (tails / label 0) and 1 (heads / label 1).  Every position is scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Episodes, Task, check, generator, register
from ..errors import is_int, is_real


def _positive_real(x: object) -> bool:
    return is_real(x) and math.isfinite(x) and x > 0


@register
@dataclass(frozen=True)
class Coin(Task):
    """Beta–Bernoulli coin flips (``labels="flips"``) or noisy-label SULA (``labels="noisy"``)."""

    name = "coin"
    summary = "Beta-Bernoulli next-flip prediction, or Paper III's noisy two-label task (accumulation)"

    a: float = 1.0
    b: float = 1.0
    n: int = 32
    labels: str = "flips"
    label_noise: float = 0.1

    BOS: ClassVar[int] = 2

    def validate(self) -> None:
        check(_positive_real(self.a), "a", "a finite number > 0")
        check(_positive_real(self.b), "b", "a finite number > 0")
        check(is_int(self.n) and 1 <= self.n <= 65536, "n", "an integer in [1, 65536]")
        check(self.labels in ("flips", "noisy"), "labels", "'flips' or 'noisy'")
        ok = is_real(self.label_noise)
        check(ok and 0 < self.label_noise < 1, "label_noise", "a number in (0, 1)")

    @property
    def n_classes(self) -> int:
        return 2

    @property
    def vocab_size(self) -> int:
        return 3

    @property
    def seq_len(self) -> int:
        return self.n

    @property
    def length_param(self) -> str:
        return "n"

    def sample(self, n: int, seed: int) -> Episodes:
        check(isinstance(n, int) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        L = self.n
        if self.labels == "flips":
            ga = torch._standard_gamma(torch.full((n,), float(self.a), dtype=torch.float64), generator=g)
            gb = torch._standard_gamma(torch.full((n,), float(self.b), dtype=torch.float64), generator=g)
            u = torch.rand(n, generator=g, dtype=torch.float64)
            tiny = ga + gb == 0  # both gammas underflow only for a, b << 1: p is then ~0 or ~1
            p = torch.where(tiny, (u < self.a / (self.a + self.b)).double(), ga / (ga + gb).clamp_min(1e-300))
            seq = (torch.rand(n, L, generator=g, dtype=torch.float64) < p[:, None]).long()
            targets = seq
            latent = {"p": p, "flips": seq}
        else:
            y = torch.randint(0, 2, (n,), generator=g)
            flip = (torch.rand(n, L, generator=g, dtype=torch.float64) < self.label_noise).long()
            seq = y[:, None] ^ flip
            targets = y[:, None].expand(n, L).clone()
            latent = {"label": y, "labels": seq}
        tokens = torch.empty(n, L, dtype=torch.long)
        tokens[:, 0] = self.BOS
        tokens[:, 1:] = seq[:, : L - 1]
        return Episodes(
            tokens=tokens,
            targets=targets,
            posterior=self.posterior(tokens),
            mask=self.scored_mask(tokens),
            latent=latent,
        )

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return torch.ones(tokens.shape, dtype=torch.bool)

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        B, T = tokens.shape
        ones = (tokens[:, 1:] == 1).double()
        h = torch.zeros(B, T, dtype=torch.float64)
        h[:, 1:] = torch.cumsum(ones, dim=1)  # ones seen at or before t (t-th position has seen t labels)
        t = torch.arange(T, dtype=torch.float64).expand(B, T)
        if self.labels == "flips":
            p1 = (self.a + h) / (self.a + self.b + t)
            p0 = (self.b + t - h) / (self.a + self.b + t)
        else:
            eps = float(self.label_noise)
            logit = (2 * h - t) * (math.log1p(-eps) - math.log(eps))
            p1, p0 = torch.sigmoid(logit), torch.sigmoid(-logit)
        return torch.stack([p0, p1], dim=-1)

    def windowed_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                           window: int = 1) -> torch.Tensor:
        """The predictive given only the last ``window`` labels: the labels are exchangeable given the
        latent, so it is :meth:`posterior` of ``BOS`` followed by the window — Beta(a + h_w, b + w − h_w)
        for flips, the noisy-label vote of the window for labels."""
        check(is_int(window) and window >= 0, "window", "a non-negative integer")
        B, T = tokens.shape
        out = torch.empty(B, T, 2, dtype=torch.float64)
        bos = torch.full((B, 1), self.BOS, dtype=tokens.dtype)
        for t in range(T):
            lo = max(1, t - window + 1)
            out[:, t] = self.posterior(torch.cat([bos, tokens[:, lo : t + 1]], 1))[:, -1]
        return out

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        sym = ("T", "H") if self.labels == "flips" else ("L0", "L1")
        return ["BOS" if int(t) == self.BOS else sym[int(t)] for t in episodes.tokens[index]]
