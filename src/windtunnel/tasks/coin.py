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

``pool`` (memorisation vs inference, flips only): every episode's bias is one of ``pool`` biases
drawn once from Beta(a, b) with ``pool_seed`` (uniformly, with replacement).  The exact predictive is
then the pool's: with ``h`` heads in ``t`` flips,

    p(f_{t+1} = 1 | f_{1..t}) = Σ_i p_i · p_iʰ (1 − p_i)ᵗ⁻ʰ / Σ_i p_iʰ (1 − p_i)ᵗ⁻ʰ,

which :meth:`Coin.unpooled` (the same task without a pool) replaces by Laplace's rule above.
"""

from __future__ import annotations

import functools
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
    tiny = {"n": 8}

    a: float = 1.0
    b: float = 1.0
    n: int = 32
    labels: str = "flips"
    label_noise: float = 0.1
    pool: int | None = None
    pool_seed: int = 0

    BOS: ClassVar[int] = 2

    def validate(self) -> None:
        check(_positive_real(self.a), "a", "a finite number > 0")
        check(_positive_real(self.b), "b", "a finite number > 0")
        check(is_int(self.n) and 1 <= self.n <= 65536, "n", "an integer in [1, 65536]")
        check(self.labels in ("flips", "noisy"), "labels", "'flips' or 'noisy'")
        ok = is_real(self.label_noise)
        check(ok and 0 < self.label_noise < 1, "label_noise", "a number in (0, 1)")
        check(self.pool is None or (is_int(self.pool) and 1 <= self.pool <= 2**20), "pool", "null, or an integer in [1, 2^20]")
        check(self.pool is None or self.labels == "flips", "pool", "null with labels='noisy' (its latent has two values)")
        check(is_int(self.pool_seed) and 0 <= self.pool_seed < 2**31, "pool_seed", "an integer in [0, 2^31)")

    def unpooled(self) -> "Coin | None":
        """The same task with a fresh bias from Beta(a, b) every episode (``None`` without a pool)."""
        return None if self.pool is None else self.replace(pool=None)

    def pool_members(self) -> torch.Tensor | None:
        """The pool's biases ``[pool]`` float64 (``None`` without a pool)."""
        return None if self.pool is None else _pool(float(self.a), float(self.b), self.pool, self.pool_seed)

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
            if self.pool is not None:  # members picked from a stream of their own: the flips' uniforms are the fresh task's
                pick = torch.randint(0, self.pool, (n,), generator=torch.Generator().manual_seed(0x9002_0000_0000 + seed))
                p = self.pool_members()[pick]
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
            posterior=self.lazy_posterior(tokens),
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
        if self.labels == "flips" and self.pool is not None:
            p1 = _pool_table(float(self.a), float(self.b), self.pool, self.pool_seed, T)[t.long(), h.long()]
            fresh = (self.a + h) / (self.a + self.b + t)  # a context no member can produce keeps Laplace's rule
            p1 = torch.where(torch.isnan(p1), fresh, p1)
            p0 = 1.0 - p1
        elif self.labels == "flips":
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


@functools.lru_cache(maxsize=8)
def _pool(a: float, b: float, size: int, seed: int) -> torch.Tensor:
    """``size`` biases from Beta(a, b), drawn as episodes draw theirs, from a stream of their own."""
    g = torch.Generator().manual_seed(0x9001_0000_0000 + seed)
    ga = torch._standard_gamma(torch.full((size,), a, dtype=torch.float64), generator=g)
    gb = torch._standard_gamma(torch.full((size,), b, dtype=torch.float64), generator=g)
    u = torch.rand(size, generator=g, dtype=torch.float64)
    return torch.where(ga + gb == 0, (u < a / (a + b)).double(), ga / (ga + gb).clamp_min(1e-300))


@functools.lru_cache(maxsize=8)
def _pool_table(a: float, b: float, size: int, seed: int, T: int) -> torch.Tensor:
    """:func:`_pool_predictive` of a pool, computed once per length."""
    return _pool_predictive(_pool(a, b, size, seed), T)


def _pool_predictive(members: torch.Tensor, T: int) -> torch.Tensor:
    """``P[t, h] = p(next = 1 | h heads in t flips)`` under the pool, ``[T, T]`` float64 (NaN where no member
    can produce the count: a bias of exactly 0 or 1 rules out any tails or heads)."""
    log_p = torch.where(members > 0, members.clamp_min(1e-300).log(), torch.full_like(members, -math.inf))
    log_q = torch.where(members < 1, (1 - members).clamp_min(1e-300).log(), torch.full_like(members, -math.inf))
    out = torch.full((T, T), math.nan, dtype=torch.float64)
    for t in range(T):
        h = torch.arange(t + 1, dtype=torch.float64)[:, None]
        # 0 · log 0 = 0: no heads (tails) seen puts no weight on log p (log(1 − p))
        log_w = torch.where(h > 0, h * log_p, 0.0) + torch.where(t - h > 0, (t - h) * log_q, 0.0)  # [t+1, pool]
        total = torch.logsumexp(log_w, 1)
        heads = torch.logsumexp(log_w + log_p, 1)
        ok = torch.isfinite(total)
        out[t, : t + 1] = torch.where(ok, (heads - total).exp(), torch.full_like(total, math.nan))
    return out
