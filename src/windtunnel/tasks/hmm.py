"""HMM filtering (Paper I, arXiv 2512.22471, "HMM filtering"): belief accumulation plus *transport*.

A fresh hidden Markov model per episode: ``S`` states, ``O`` symbols, uniform initial state.
Every row of the transition matrix ``T`` (``T[i, j] = p(s_{t+1}=j | s_t=i)``) and of the emission
matrix ``E`` (``E[i, o] = p(o | s=i)``) is drawn from Dirichlet(1), floored at 0.05, renormalised
and put on the 0.01 grid: integer hundredths, each ``>= 5``, every row summing to exactly 100
(round half to even, raise entries below 5 to 5, then give the remainder to the row's largest
entries).  States and observations are sampled from these *discretised* matrices.

Tokens: ids ``0..95`` are the probabilities 0.05, 0.06, …, 1.00 (``id = hundredths - 5``), then
``[TRANS]=96``, ``[EMIT]=97``, ``[SEP]=98`` and observation ``o`` is ``99 + o``.  An episode is ::

    [TRANS] T (row-major, S*S) [EMIT] E (row-major, S*O) [SEP] o_1 … o_K

a header of ``3 + S*S + S*O`` tokens (53 at the defaults) then one token per observation.  The
authors interleave an ``[OBS]`` marker before every symbol; it is the same token at every step and
carries no information, so it is left out (the episode is ``K`` tokens shorter).

The scored positions are the ``K`` observations.  At the ``t``-th the model predicts the filtering
posterior, by the forward algorithm on the matrices decoded from the header:

    α_1(s) ∝ E(o_1 | s) / S,        α_t(s) ∝ E(o_t | s) Σ_{s'} α_{t-1}(s') T(s' → s)

(normalised every step, float64; all entries are at least 0.05, so nothing underflows).
``pool`` (memorisation vs inference): every episode's HMM is one of ``pool`` drawn once from
``pool_seed``; the posterior is unchanged (the matrices are in the header), so what a pool tests is
whether a model trained on few HMMs filters ones it never saw (``evaluate``'s ``priors.fresh``).

``target="posterior"`` trains on ``α_t`` (soft labels, as the authors do); ``target="state"`` on the
sampled hidden state ``s_t``.  In both cases ``targets`` holds ``s_t``, which is a draw from
``α_t``, so accuracy against it is meaningful.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .base import IGNORE, Episodes, Task, check, generator, register, two_unused
from ..errors import is_int

TRANS, EMIT, SEP = 96, 97, 98
OBS0 = 99
"""Token id of observation symbol 0."""
MIN_CENTS = 5
"""The floor, 0.05, in hundredths."""


def discretise(p: torch.Tensor) -> torch.Tensor:
    """Rows of probabilities ``[..., C]`` (each entry about >= 0.05) → integer hundredths.

    Every entry ``>= 5``, every row summing to exactly 100: round, raise to 5, then the remainder
    goes to the largest entry (a deficit is taken from the largest entries, never below 5).
    Needs ``5 * C <= 100``.
    """
    cents = torch.round(p * 100.0).clamp_min_(MIN_CENTS).to(torch.int64)
    diff = 100 - cents.sum(-1, keepdim=True)
    big = cents.argmax(-1, keepdim=True)
    # a surplus (or an exact row) goes to the largest entry in one step
    cents.scatter_add_(-1, big, diff.clamp_min(0))
    deficit = (-diff).clamp_min(0)
    while bool((deficit > 0).any()):  # rare; at most C passes
        big = cents.argmax(-1, keepdim=True)
        take = torch.minimum(deficit, cents.gather(-1, big) - MIN_CENTS)
        cents.scatter_add_(-1, big, -take)
        deficit -= take
    return cents


def draw_matrices(n: int, S: int, O: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` transition ``[n, S, S]`` and emission ``[n, S, O]`` matrices in hundredths: every row
    Dirichlet(1), floored at 0.05, renormalised and put on the 0.01 grid (:func:`discretise`)."""

    def grid_rows(rows: int, cols: int) -> torch.Tensor:
        x = torch.empty(n, rows, cols, dtype=torch.float64).exponential_(generator=g)
        x = x / x.sum(-1, keepdim=True)  # Dirichlet(1)
        x = x.clamp_min_(0.05)
        return discretise(x / x.sum(-1, keepdim=True))

    return grid_rows(S, S), grid_rows(S, O)


@functools.lru_cache(maxsize=8)
def _pool(S: int, O: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` HMMs drawn as episodes draw theirs, from a stream of their own (never an episode's)."""
    return draw_matrices(size, S, O, torch.Generator().manual_seed(0x9001_0000_0000 + seed))


@register
@dataclass(frozen=True)
class HMM(Task):
    """HMM filtering: ``S`` states, ``O`` symbols, ``K`` observations, fresh matrices per episode."""

    name = "hmm"
    summary = "fresh random HMM per episode given as a header; track p(state | observations) (transport)"
    tiny = {"S": 3, "O": 4, "K": 6}

    S: int = 5
    O: int = 5
    K: int = 20
    target: str = "posterior"
    pool: int | None = None
    pool_seed: int = 0

    def validate(self) -> None:
        check(is_int(self.S) and 2 <= self.S <= 20,
              "S", "an integer in [2, 20] (S * 0.05 <= 1)")
        check(is_int(self.O) and 1 <= self.O <= 20,
              "O", "an integer in [1, 20] (O * 0.05 <= 1)")
        check(is_int(self.K) and 1 <= self.K <= 4096,
              "K", "an integer in [1, 4096]")
        check(self.target in ("posterior", "state"), "target", "'posterior' or 'state'")
        check(self.pool is None or (is_int(self.pool) and 1 <= self.pool <= 2**20), "pool", "null, or an integer in [1, 2^20]")
        check(is_int(self.pool_seed) and 0 <= self.pool_seed < 2**31, "pool_seed", "an integer in [0, 2^31)")

    def unpooled(self) -> "HMM | None":
        """The same task with fresh matrices every episode, or ``None`` without a pool.  The matrices are
        in the header, so both posteriors coincide on every episode: what a pool changes is which HMMs the
        model saw, and the evaluation on fresh ones tells whether it filters HMMs it never saw."""
        return None if self.pool is None else self.replace(pool=None)

    def pool_members(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The pool's matrices in hundredths, ``(T [pool, S, S], E [pool, S, O])`` (``None`` without a pool)."""
        return None if self.pool is None else _pool(self.S, self.O, self.pool, self.pool_seed)

    # --- sizes ----------------------------------------------------------------------------
    @property
    def header_len(self) -> int:
        return 3 + self.S * self.S + self.S * self.O

    @property
    def n_classes(self) -> int:
        return self.S

    @property
    def vocab_size(self) -> int:
        return OBS0 + self.O

    @property
    def seq_len(self) -> int:
        return self.header_len + self.K

    @property
    def soft_targets(self) -> bool:
        return self.target == "posterior"

    @property
    def length_param(self) -> str:
        return "K"

    # --- sampling -------------------------------------------------------------------------
    def sample(self, n: int, seed: int) -> Episodes:
        check(is_int(n) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        S, O, K, H = self.S, self.O, self.K, self.header_len
        cT, cE = draw_matrices(n, S, O, g)  # [n,S,S], [n,S,O] hundredths
        if self.pool is not None:  # members picked from a stream of their own: the paths are the fresh task's
            pick = torch.randint(0, self.pool, (n,), generator=torch.Generator().manual_seed(0x9002_0000_0000 + seed))
            pT, pE = self.pool_members()
            cT, cE = pT[pick], pE[pick]

        # paths by inverse CDF on integer hundredths: exact, p(j) = cents_j / 100
        uT = torch.randint(0, 100, (n, K), generator=g, dtype=torch.int64)
        uE = torch.randint(0, 100, (n, K), generator=g, dtype=torch.int64)
        s0 = torch.randint(0, S, (n,), generator=g, dtype=torch.int64)
        cumT = cT.cumsum(-1).view(n * S, S)
        cumE = cE.cumsum(-1).view(n * S, O)
        rowbase = torch.arange(n, dtype=torch.int64) * S
        states = torch.empty(n, K, dtype=torch.int64)
        states[:, 0] = s0
        s = s0
        for t in range(1, K):
            cdf = cumT.index_select(0, rowbase + s)
            s = (cdf <= uT[:, t : t + 1]).sum(-1)
            states[:, t] = s
        cdfE = cumE.index_select(0, (rowbase[:, None] + states).view(-1)).view(n, K, O)
        obs = (cdfE <= uE[:, :, None]).sum(-1)

        tokens = torch.empty(n, H + K, dtype=torch.int64)
        tokens[:, 0] = TRANS
        tokens[:, 1 : 1 + S * S] = cT.view(n, -1) - MIN_CENTS
        tokens[:, 1 + S * S] = EMIT
        tokens[:, 2 + S * S : 2 + S * S + S * O] = cE.view(n, -1) - MIN_CENTS
        tokens[:, H - 1] = SEP
        tokens[:, H:] = obs + OBS0

        targets = torch.full((n, H + K), IGNORE, dtype=torch.int64)
        targets[:, H:] = states
        return Episodes(
            tokens=tokens,
            targets=targets,
            posterior=self.lazy_posterior(tokens),
            mask=self.scored_mask(tokens),
            latent={
                "T": cT.double() / 100.0,
                "E": cE.double() / 100.0,
                "states": states,
                "observations": obs,
            },
        )

    # --- the exact answer from the inputs -------------------------------------------------
    def decode_header(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(T [B,S,S], E [B,S,O])`` float64 read off the header tokens (hundredths / 100)."""
        S, O = self.S, self.O
        B = tokens.shape[0]
        T = (tokens[:, 1 : 1 + S * S] + MIN_CENTS).double().div_(100.0).view(B, S, S)
        E = (tokens[:, 2 + S * S : 2 + S * S + S * O] + MIN_CENTS).double().div_(100.0).view(B, S, O)
        return T, E

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, self.header_len :] = True
        return mask

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        S, H = self.S, self.header_len
        B, L = tokens.shape
        out = torch.empty(B, L, S, dtype=torch.float64)
        out[:, : min(H, L)] = 1.0 / S
        if L <= H:
            return out
        T, E = self.decode_header(tokens)
        obs = tokens[:, H:] - OBS0  # [B,K]
        # likelihood of each observation under each state: lik[b,t,s] = E[b,s,o_t]
        lik = E.transpose(1, 2).gather(1, obs[:, :, None].expand(-1, -1, S))
        alpha = lik[:, 0] / S
        alpha = alpha / alpha.sum(-1, keepdim=True)
        out[:, H] = alpha
        for t in range(1, L - H):
            alpha = torch.bmm(alpha[:, None, :], T).squeeze(1) * lik[:, t]
            alpha = alpha / alpha.sum(-1, keepdim=True)
            out[:, H + t] = alpha
        return out

    def windowed_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                           window: int = 1) -> torch.Tensor:
        """The filter of an observer that reads the header but only the last ``window`` observations:
        at observation ``t`` (1-based) the state ``s_{t-w+1}`` (``w = min(window, t)``) has its prior
        marginal ``u Tʷ⁻¹…`` — uniform pushed ``t - w`` steps through ``T`` — and the forward algorithm
        runs over ``o_{t-w+1} … o_t`` alone.  ``window = 0``: the prior marginal of ``s_t``."""
        check(is_int(window) and window >= 0, "window", "a non-negative integer")
        S, H = self.S, self.header_len
        B, L = tokens.shape
        out = torch.full((B, L, S), 1.0 / S, dtype=torch.float64)
        if L <= H:
            return out
        T, E = self.decode_header(tokens)
        obs = tokens[:, H:] - OBS0
        lik = E.transpose(1, 2).gather(1, obs[:, :, None].expand(-1, -1, S))  # [B,K,S]
        marginal = [torch.full((B, S), 1.0 / S, dtype=torch.float64)]  # p(s_j) before any evidence
        for _ in range(1, L - H):
            marginal.append(torch.bmm(marginal[-1][:, None, :], T).squeeze(1))
        for t in range(L - H):  # 0-based observation index
            first = max(0, t - window + 1)
            alpha = marginal[min(first, t)]  # window 0: the prior marginal of s_t itself
            for j in range(first, t + 1):
                if j > first:
                    alpha = torch.bmm(alpha[:, None, :], T).squeeze(1)
                alpha = alpha * lik[:, j]
                alpha = alpha / alpha.sum(-1, keepdim=True)
            out[:, H + t] = alpha
        return out

    def counterfactual_edit(self, tokens: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """One observation per episode (any but the last, drawn uniformly) replaced by either of two other
        symbols: every later filtering posterior changes.  Needs ``O ≥ 3`` and two observations."""
        H = self.header_len
        K = tokens.shape[1] - H
        if self.O < 3 or K < 2:
            return None
        g = generator(seed)
        B = tokens.shape[0]
        rows = torch.arange(B)
        pos = H + torch.randint(0, K - 1, (B,), generator=g)
        present = torch.zeros(B, self.O, dtype=torch.bool)
        present[rows, (tokens[rows, pos] - OBS0).clamp(0, self.O - 1)] = True
        first, second = two_unused(present, g)  # type: ignore[misc]
        edited, other = tokens.clone(), tokens.clone()
        edited[rows, pos] = first + OBS0
        other[rows, pos] = second + OBS0
        return edited, other, pos

    # --- anatomy ---------------------------------------------------------------------------
    discrete_latent_state = True

    def belief(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """The filtering posterior *is* the belief over the hidden state (uniform over the header)."""
        return self.posterior(tokens, features)
    region_descriptions = {
        "observations": "observation positions (the evidence so far)",
        "transition": "transition-matrix entries of the header",
        "emission": "emission-matrix entries of the header",
        "emission_column": "the S emission entries E[s, o_t] of the current observation (what the "
                           "Bayes update multiplies by)",
        "specials": "[TRANS], [EMIT], [SEP]",
    }

    def hypothesis_tokens(self) -> tuple[list[int], str]:
        """The observation tokens: the hypotheses are hidden states, which have no tokens, so the
        evidence symbols stand in (flagged in the description)."""
        O = self.O
        return (list(range(OBS0, OBS0 + O)),
                f"observation tokens {OBS0}..{OBS0 + O - 1} (HMM hypotheses are hidden states, which have "
                "no tokens: the evidence symbols are used instead)")

    def attention_regions(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The header ``[TRANS] T [EMIT] E [SEP]`` then observations from position ``header_len``."""
        B, T = tokens.shape
        j = torch.arange(T)
        causal = (j[None, :] <= j[:, None])[None].expand(B, T, T)
        S, O, Hd = self.S, self.O, self.header_len
        out = {
            "observations": causal & (j >= Hd)[None, None, :],
            "transition": causal & ((j >= 1) & (j <= S * S))[None, None, :],
            "emission": causal & ((j >= 2 + S * S) & (j < 2 + S * S + S * O))[None, None, :],
            "specials": causal & ((j == 0) | (j == 1 + S * S) | (j == Hd - 1))[None, None, :],
        }
        o_t = (tokens - OBS0).clamp(0, O - 1)  # [B,T] current observation (only used at t >= Hd)
        col = torch.zeros(B, T, T, dtype=torch.bool)
        rows = 2 + S * S + torch.arange(S) * O  # start of each emission row
        col.scatter_(2, rows[None, None, :] + o_t[:, :, None], True)
        out["emission_column"] = col & (j[None, :, None] >= Hd) & causal
        return out

    def main_region(self, regions: dict[str, torch.Tensor]) -> str:
        return "emission_column"

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        S, O, H = self.S, self.O, self.header_len
        toks = [int(t) for t in episodes.tokens[index]]
        out = []
        for pos, tok in enumerate(toks):
            if pos >= H:
                out.append(f"o{tok - OBS0}")
            elif tok == TRANS:
                out.append("[TRANS]")
            elif tok == EMIT:
                out.append("[EMIT]")
            elif tok == SEP:
                out.append("[SEP]")
            elif pos <= S * S:
                i, j = divmod(pos - 1, S)
                out.append(f"T{i},{j}={(tok + MIN_CENTS) / 100:.2f}")
            else:
                i, j = divmod(pos - 2 - S * S, O)
                out.append(f"E{i},{j}={(tok + MIN_CENTS) / 100:.2f}")
        return out
