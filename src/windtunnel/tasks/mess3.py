"""Mess3: one fixed three-state hidden Markov process whose belief states form a fractal.

Not a wind tunnel of the papers: the process is the same in every episode, so there is no hypothesis
to infer, only a hidden state to track.  It is the standard test of *belief-state geometry*: an
optimal predictor must carry the belief ``η_t = p(s_t | x_1..x_t)`` — a point of the 2-simplex — and
the set of beliefs the process reaches is a self-similar fractal, so whether a network's residual
stream holds that set linearly (the ``belief_geometry`` diagnostic) is a sharp question.

Hidden states ``s ∈ {0, 1, 2}``, symbols ``a ∈ {0, 1, 2}``.  The state moves, then emits:

    A[i, j] = p(s_t = j | s_{t-1} = i) = 1 − 2x if i = j else x
    E[j, a] = p(x_t = a | s_t = j)      = α if a = j else (1 − α)/2

so the labelled transition matrices are ``T⁽ᵃ⁾[i, j] = A[i, j] E[j, a]``.  ``A`` is doubly stochastic,
so the stationary distribution — the initial state's — is uniform.  The belief after ``t`` symbols
and the next-symbol predictive are

    η_0 = (1/3, 1/3, 1/3),     η_t ∝ η_{t−1} T⁽ˣᵗ⁾ = (η_{t−1} A) ⊙ E[:, x_t],
    p(x_{t+1} = a | x_1..x_t) = (η_t A E)[a]

(normalised every step in float64; every entry of ``A`` and ``E`` is positive, so nothing underflows).

Tokens ``[BOS, x_1, …, x_{n−1}]`` (symbols are ids 0–2, ``BOS`` is 3), targets ``[x_1, …, x_n]``:
at position ``t`` the model has seen ``t`` symbols and predicts the next.  Every position is scored.
:meth:`Mess3.belief` gives ``η_t`` at every position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Episodes, Task, check, generator, register
from ..errors import is_int, is_real

S = 3
"""Number of hidden states (and of symbols)."""


@register
@dataclass(frozen=True)
class Mess3(Task):
    """Mess3: predict the next symbol of a fixed 3-state hidden Markov process (belief-state geometry)."""

    name = "mess3"
    summary = "a fixed 3-state hidden Markov process; predict the next symbol (its belief states form a fractal)"

    x: float = 0.05
    alpha: float = 0.85
    n: int = 16

    BOS: ClassVar[int] = S
    tiny = {"n": 6}

    def validate(self) -> None:
        check(is_real(self.x) and 0 < self.x < 0.5, "x", "a number in (0, 0.5): the probability of each move to another state")
        check(is_real(self.alpha) and 0 < self.alpha < 1, "alpha", "a number in (0, 1): the probability a state emits its own symbol")
        check(is_int(self.n) and 1 <= self.n <= 65536, "n", "an integer in [1, 65536]")

    @property
    def n_classes(self) -> int:
        return S

    @property
    def vocab_size(self) -> int:
        return S + 1

    @property
    def seq_len(self) -> int:
        return self.n

    @property
    def length_param(self) -> str:
        return "n"

    # --- the process ----------------------------------------------------------------------
    def transition(self) -> torch.Tensor:
        """``A[i, j] = p(s_t = j | s_{t−1} = i)``, float64 ``[3, 3]``."""
        x = float(self.x)
        return torch.full((S, S), x, dtype=torch.float64).fill_diagonal_(1.0 - 2.0 * x)

    def emission(self) -> torch.Tensor:
        """``E[j, a] = p(x_t = a | s_t = j)``, float64 ``[3, 3]``."""
        a = float(self.alpha)
        return torch.full((S, S), (1.0 - a) / 2.0, dtype=torch.float64).fill_diagonal_(a)

    def sample(self, n: int, seed: int) -> Episodes:
        check(is_int(n) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        L = self.n
        A_cdf, E_cdf = self.transition().cumsum(-1), self.emission().cumsum(-1)
        u = torch.rand(n, 2 * L + 1, generator=g, dtype=torch.float64)
        state = (u[:, 0] * S).long().clamp_max(S - 1)  # the uniform stationary start
        states = torch.empty(n, L, dtype=torch.long)
        symbols = torch.empty(n, L, dtype=torch.long)
        for t in range(L):  # inverse-CDF draws: move, then emit from the new state
            state = (u[:, 1 + 2 * t, None] > A_cdf[state]).sum(-1).clamp_max(S - 1)
            states[:, t] = state
            symbols[:, t] = (u[:, 2 + 2 * t, None] > E_cdf[state]).sum(-1).clamp_max(S - 1)
        tokens = torch.empty(n, L, dtype=torch.long)
        tokens[:, 0] = self.BOS
        tokens[:, 1:] = symbols[:, : L - 1]
        return Episodes(tokens=tokens, targets=symbols, posterior=self.lazy_posterior(tokens),
                        mask=self.scored_mask(tokens), latent={"states": states})

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return torch.ones(tokens.shape, dtype=torch.bool)

    def belief(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """``η_t = p(s_t | x_1..x_t)`` at every position ``[B, T, 3]`` float64 (position 0, the ``BOS``,
        holds the uniform prior)."""
        B, T = tokens.shape
        A, E = self.transition(), self.emission()
        eta = torch.full((B, S), 1.0 / S, dtype=torch.float64)
        out = torch.empty(B, T, S, dtype=torch.float64)
        out[:, 0] = eta
        for t in range(1, T):
            sym = tokens[:, t].clamp(0, S - 1)  # a stray BOS is read as symbol 2; only sampled inputs are exact
            eta = (eta @ A) * E[:, sym].T
            eta = eta / eta.sum(-1, keepdim=True)
            out[:, t] = eta
        return out

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return self.belief(tokens) @ (self.transition() @ self.emission())

    def windowed_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                           window: int = 1) -> torch.Tensor:
        """The next-symbol predictive given only the last ``window`` symbols: the chain starts (and so
        stays) at its uniform stationary law, so the state before the window is uniform and the filter
        restarts there — :meth:`posterior` of ``BOS`` followed by the window."""
        check(is_int(window) and window >= 0, "window", "a non-negative integer")
        B, T = tokens.shape
        out = torch.empty(B, T, S, dtype=torch.float64)
        bos = torch.full((B, 1), self.BOS, dtype=tokens.dtype)
        for t in range(T):
            lo = max(1, t - window + 1)
            out[:, t] = self.posterior(torch.cat([bos, tokens[:, lo : t + 1]], 1))[:, -1]
        return out

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        return ["BOS" if int(t) == self.BOS else "ABC"[int(t)] for t in episodes.tokens[index]]
