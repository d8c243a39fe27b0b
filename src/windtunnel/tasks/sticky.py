"""Sticky Markov chain (Paper II, arXiv 2512.22473, §5.2, EM vs SGD): filtering from noisy vectors.

A fixed chain on ``n_symbols`` symbols: stay with probability ``self_prob``, otherwise move to
``j != i`` with probability ``∝ 1 / d(i, j)``, ``d`` the circular distance ``min(|i-j|, n-|i-j|)``
(the off-diagonal of each row sums to ``1 - self_prob``).  The matrix is circulant, so the uniform
start ``y_0`` is stationary.  Fixed symbol means ``μ_y ~ N(0, I_dim)`` come from a generator seeded
``means_seed`` (the same for every episode: they belong to the task, not to the episode).

Episode: ``y_0 ~ uniform``, ``y_t ~ P(y_{t-1}, ·)`` and the model sees real vectors
``x_t = μ_{y_{t-1}} + noise · N(0, I)`` for ``t = 1..length`` (``features``; ``tokens`` are a dummy
id 0).  At position ``t`` it predicts ``y_t``, *before* any evidence about it:

    p(y_t = k | x_1..x_t) = Σ_j α_t(j) P(j, k),
    α_t(j) = p(y_{t-1}=j | x_1..x_t) ∝ N(x_t; μ_j, noise² I) Σ_i α_{t-1}(i) P(i, j),  α_0 uniform

(forward filtering in float64, each step normalised in log space).  The posterior is computed
from the float32 ``features`` the model actually sees, cast to float64, so the oracle and
``sample`` agree exactly.  Every position is scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .base import Episodes, Task, check, generator, register
from ..errors import InvalidValue, is_int, is_real


def sticky_matrix(n_symbols: int, self_prob: float) -> torch.Tensor:
    """The circulant transition matrix ``P [n, n]`` float64 (rows sum to 1)."""
    i = torch.arange(n_symbols)
    d = (i[:, None] - i[None, :]).abs()
    d = torch.minimum(d, n_symbols - d).double()
    w = torch.where(d > 0, 1.0 / d.clamp_min(1.0), torch.zeros_like(d))
    P = (1.0 - self_prob) * w / w.sum(-1, keepdim=True)
    return P + self_prob * torch.eye(n_symbols, dtype=torch.float64)


@register
@dataclass(frozen=True)
class Sticky(Task):
    """Paper II's sticky chain seen through Gaussian noise; predict the next symbol."""

    name = "sticky"
    summary = "sticky Markov chain observed as noisy Gaussian vectors; predict the next symbol (filtering)"
    tiny = {"length": 6, "dim": 4}

    n_symbols: int = 8
    self_prob: float = 0.3
    dim: int = 20
    length: int = 32
    means_seed: int = 0
    noise: float = 1.0

    def validate(self) -> None:
        def finite(v: object) -> bool:
            return is_real(v) and math.isfinite(v)  # type: ignore[arg-type]

        check(is_int(self.n_symbols) and 2 <= self.n_symbols <= 1024, "n_symbols", "an integer in [2, 1024]")
        check(finite(self.self_prob) and 0.0 <= self.self_prob <= 1.0, "self_prob", "a number in [0, 1]")
        check(is_int(self.dim) and 1 <= self.dim <= 4096, "dim", "an integer in [1, 4096]")
        check(is_int(self.length) and 1 <= self.length <= 100_000, "length", "an integer in [1, 100000]")
        check(is_int(self.means_seed) and 0 <= self.means_seed < 2**31, "means_seed", "an integer in [0, 2^31)")
        check(finite(self.noise) and 1e-6 <= self.noise <= 1e6, "noise", "a number in [1e-6, 1e6] (the Gaussian likelihood under- or overflows beyond)")

    # --- sizes ----------------------------------------------------------------------------
    @property
    def n_classes(self) -> int:
        return self.n_symbols

    @property
    def vocab_size(self) -> int:
        return 1

    @property
    def seq_len(self) -> int:
        return self.length

    @property
    def n_features(self) -> int:
        return self.dim

    @property
    def length_param(self) -> str:
        return "length"

    # --- the fixed chain ------------------------------------------------------------------
    def transition(self) -> torch.Tensor:
        """``P [n_symbols, n_symbols]`` float64."""
        return sticky_matrix(self.n_symbols, float(self.self_prob))

    def means(self) -> torch.Tensor:
        """The symbol means ``μ [n_symbols, dim]`` float64 (fixed by ``means_seed``)."""
        return torch.randn(self.n_symbols, self.dim, generator=generator(self.means_seed), dtype=torch.float64)

    # --- sampling -------------------------------------------------------------------------
    def sample(self, n: int, seed: int) -> Episodes:
        check(is_int(n) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        V, L = self.n_symbols, self.length
        P, mu = self.transition(), self.means()
        cdf = P.cumsum(-1)
        cdf[:, -1] = 1.0  # u < 1 always lands inside the row
        symbols = torch.empty(n, L + 1, dtype=torch.int64)
        y = torch.randint(0, V, (n,), generator=g)
        symbols[:, 0] = y
        u = torch.rand(n, L, generator=g, dtype=torch.float64)
        for t in range(L):
            y = (cdf.index_select(0, y) <= u[:, t : t + 1]).sum(-1)
            symbols[:, t + 1] = y
        eps = torch.randn(n, L, self.dim, generator=g, dtype=torch.float64)
        features = (mu[symbols[:, :L]] + self.noise * eps).float()
        tokens = torch.zeros(n, L, dtype=torch.int64)
        return Episodes(
            tokens=tokens,
            targets=symbols[:, 1:].clone(),
            posterior=self.lazy_posterior(tokens, features),
            mask=self.scored_mask(tokens, features),
            latent={"symbols": symbols, "means": mu, "P": P},
            shared=("means", "P"),
            features=features,
        )

    # --- the exact answer from the inputs -------------------------------------------------
    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return torch.ones(tokens.shape, dtype=torch.bool)

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        if features is None:
            raise InvalidValue("invalid features: the sticky task needs the real-valued features")
        V = self.n_symbols
        x = features.double()
        B, L, _ = x.shape
        P, mu = self.transition(), self.means()
        # log N(x_t; μ_j, noise² I) up to a constant in j: (x·μ_j - |μ_j|²/2) / noise²
        loglik = (x @ mu.T - 0.5 * (mu * mu).sum(-1)) / (self.noise**2)  # [B,L,V]
        out = torch.empty(B, L, V, dtype=torch.float64)
        prior = torch.full((B, V), 1.0 / V, dtype=torch.float64)  # p(y_{t-1} | x_1..x_{t-1})
        for t in range(L):
            # in log space: a prior with exact zeros (self_prob 0 or 1) meets a sharp likelihood
            logp = prior.log() + loglik[:, t]
            alpha = (logp - logp.amax(-1, keepdim=True)).exp_()
            alpha = alpha / alpha.sum(-1, keepdim=True)
            prior = alpha @ P  # p(y_t | x_1..x_t)
            out[:, t] = prior
        return out
