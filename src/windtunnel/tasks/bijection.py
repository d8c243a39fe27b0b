"""Bijection elimination (Paper I, arXiv 2512.22471, "bijection elimination"): belief *accumulation*.

A fresh permutation ``π`` of ``[V]`` per episode.  Tokens ``[k1, v1, k2, v2, …, kL]`` with keys in
ids ``0..V-1`` and values in ids ``V..2V-1`` (separate ranges; the final value is never shown
because nothing after it is scored).  At the ``t``-th key position the model predicts ``π(k_t)``.

Exact posterior after the pairs ``(k_j, π(k_j))_{j<t}``:

* ``k_t`` seen before → one-hot on its value (entropy 0; only possible with ``replacement``);
* otherwise uniform over the values not yet seen: ``p(π(k_t)=y) = 1/(V - m_t)`` for unseen ``y``
  where ``m_t`` is the number of distinct values shown so far.

Without replacement ``m_t = t - 1`` and ``H_Bayes(t) = log2(V - t + 1)``: the staircase.  With
replacement a repeated key drops to 0 bits: the sawtooth (accumulation plus binding).

``key_pool`` (with replacement): each episode first draws a random set of ``key_pool`` keys and
samples its keys from that set only, so keys repeat more often.  The posterior above is unchanged
(keys are drawn independently of ``π``, so the shown pairs are all the evidence).  What changes is
the reward for *partial* use of the context.  With the full pool (``key_pool = V``) a predictor
that knows which ``m`` values were shown but cannot match keys does no better than uniform: the
seen values carry on average exactly their uniform share ``m/V`` of the posterior mass.  With a
small pool they carry more, so reading the shown values already pays — a stepping stone towards
binding that the full sawtooth lacks.  A curriculum (``TrainConfig.curriculum``) uses it early in
training.

``pool`` (memorisation vs inference): every episode's permutation is one of a finite set of ``pool``
permutations, drawn once (uniformly, with replacement: a permutation drawn twice is twice as likely)
from ``pool_seed`` — the same set in every episode, every process and every seed of the run.  The exact posterior is then the posterior *under the pool*: with ``C_t`` the pool
members that agree with every pair shown before key ``t``,

    p(π(k_t) = y) = |{σ ∈ C_t : σ(k_t) = y}| / |C_t|,

which is one-hot once the pairs single out one member.  A model that memorised the pool can reach it; a
model that infers — whatever the pool — matches the posterior under the true (uniform) prior instead,
which :meth:`unpooled` gives (``tasks.oracle(task, prior="true")``).  ``pool = null``: a fresh
permutation every episode (the wind tunnel proper).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .base import IGNORE, Episodes, Task, check, generator, register, register_preset, two_unused, uniform_rows
from ..errors import is_int


@register
@dataclass(frozen=True)
class Bijection(Task):
    """Bijection elimination with ``V`` values and ``L`` key→value pairs per episode."""

    name = "bijection"
    summary = "fresh random bijection per episode; predict each key's value (accumulation)"
    tiny = {"V": 6, "L": 5}

    V: int = 20
    L: int = 19
    replacement: bool = False
    key_pool: int | None = None
    pool: int | None = None
    pool_seed: int = 0

    def validate(self) -> None:
        check(is_int(self.V) and 2 <= self.V <= 1024, "V", "an integer in [2, 1024]")
        check(isinstance(self.replacement, bool), "replacement", "true or false")
        hi = 4096 if self.replacement else self.V
        check(is_int(self.L) and 1 <= self.L <= hi, "L", f"an integer in [1, {hi}]")
        check(
            self.key_pool is None
            or (self.replacement and is_int(self.key_pool) and 1 <= self.key_pool <= self.V),
            "key_pool",
            f"null, or with replacement an integer in [1, V] = [1, {self.V}]",
        )
        check(self.pool is None or (is_int(self.pool) and 1 <= self.pool <= min(MAX_POOL_ENTRIES // self.V, 2**20)),
              "pool", f"null, or an integer in [1, {min(MAX_POOL_ENTRIES // self.V, 2**20)}] (pool × V ≤ 2^24)")
        check(is_int(self.pool_seed) and 0 <= self.pool_seed < 2**31, "pool_seed", "an integer in [0, 2^31)")

    @property
    def n_classes(self) -> int:
        return self.V

    @property
    def vocab_size(self) -> int:
        return 2 * self.V

    @property
    def seq_len(self) -> int:
        return 2 * self.L - 1

    @property
    def length_param(self) -> str:
        return "L"

    def pool_members(self) -> torch.Tensor | None:
        """The pool's permutations ``[pool, V]`` (``None`` without a pool)."""
        return None if self.pool is None else _pool(self.V, self.pool, self.pool_seed)

    def unpooled(self) -> "Task | None":
        """The same task with a fresh permutation per episode (the true prior), or ``None`` without a pool."""
        return None if self.pool is None else self.replace(pool=None)

    def draw(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The latent draws of ``n`` episodes: ``perm [n, V]`` (``perm[b, key]`` = value) and the
        keys asked ``[n, L]`` (deterministic in ``seed``; layouts of the same pairs share them)."""
        check(isinstance(n, int) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        V, L = self.V, self.L
        perm = torch.argsort(torch.rand(n, V, generator=g), dim=1)  # perm[b, key] = value index
        if self.pool is not None:  # members picked from a stream of their own: the keys are the fresh task's
            pick = torch.Generator().manual_seed(0x9002_0000_0000 + seed)
            perm = self.pool_members()[torch.randint(0, self.pool, (n,), generator=pick)]
        if self.replacement and self.key_pool is not None:
            pool = torch.argsort(torch.rand(n, V, generator=g), dim=1)[:, : self.key_pool]
            keys = pool.gather(1, torch.randint(0, self.key_pool, (n, L), generator=g))
        elif self.replacement:
            keys = torch.randint(0, V, (n, L), generator=g)
        else:
            keys = torch.argsort(torch.rand(n, V, generator=g), dim=1)[:, :L]
        return perm, keys

    def sample(self, n: int, seed: int) -> Episodes:
        perm, keys = self.draw(n, seed)
        V, L = self.V, self.L
        values = perm.gather(1, keys)
        tokens = torch.empty(n, 2 * L, dtype=torch.long)
        tokens[:, 0::2] = keys
        tokens[:, 1::2] = values + V
        tokens = tokens[:, : 2 * L - 1]
        mask = self.scored_mask(tokens)
        targets = torch.full(tokens.shape, IGNORE, dtype=torch.long)
        targets[:, 0::2] = values
        return Episodes(
            tokens=tokens,
            targets=targets,
            posterior=self.lazy_posterior(tokens),
            mask=mask,
            latent={"perm": perm, "keys": keys},
        )

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, 0::2] = True
        return mask

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        fresh = self._fresh_posterior(tokens)
        return fresh if self.pool is None else self._pool_posterior(tokens, fresh)

    def windowed_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                           window: int = 1) -> torch.Tensor:
        """The posterior given only the last ``window`` shown pairs before each key: the same rule as
        :meth:`posterior` applied to those pairs alone (π is independent of which keys are asked, so the
        unseen pairs carry no evidence about ``π(k_t)`` beyond what the window holds) — uniform over the
        ``V − window`` values the window does not show, one-hot when the key repeats inside the window,
        and under a pool the members that agree with the window."""
        check(is_int(window) and window >= 0, "window", "a non-negative integer")
        out = uniform_rows(tuple(tokens.shape), self.V)
        for t in range(0, tokens.shape[1], 2):
            out[:, t] = self.posterior(tokens[:, max(0, t - 2 * window) : t + 1])[:, -1]
        return out

    def counterfactual_edit(self, tokens: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """One shown value per episode (a pair drawn uniformly) replaced by either of two values the episode
        never shows: still a partial bijection, and every later key's posterior changes (the new value is
        ruled out, the old one is back).  Defined without replacement and without a pool (there an edit can
        contradict a repeated key or every pool member)."""
        if self.replacement or self.pool is not None or tokens.shape[1] < 3:
            return None
        return _edit_a_value(tokens, positions=torch.arange(1, tokens.shape[1] - 1, 2), offset=self.V, n_values=self.V,
                             seed=seed)

    def _pool_posterior(self, tokens: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """The posterior under the pool (module docstring); a context no pool member agrees with (not one
        the task samples) keeps the true-prior posterior ``fresh``.

        Exact integer counts, without touching the whole pool per sequence: the members agreeing with
        the first pair are one block of the pool sorted by ``σ(k_1)``; each later pair filters that list."""
        pool, V = self.pool_members(), self.V
        order, starts = _pool_index(V, self.pool, self.pool_seed)
        out = fresh.clone()
        keys, values = tokens[:, 0::2].clamp(0, V - 1), tokens[:, 1::2] - V
        B, Lk = keys.shape
        out[:, 0] = (starts[:, 1:] - starts[:, :-1]).double()[keys[:, 0]] / len(pool)  # every member agrees
        if values.shape[1] == 0:
            return out
        v0 = values[:, 0].clamp(0, V - 1)
        lo, hi = starts[keys[:, 0], v0], starts[keys[:, 0], v0 + 1]
        n = torch.where((values[:, 0] >= 0) & (values[:, 0] < V), hi - lo, torch.zeros_like(lo))
        seq = torch.repeat_interleave(torch.arange(B), n)
        within = torch.arange(len(seq)) - torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
        member = order[keys[seq, 0], lo[seq] + within]  # (sequence, agreeing member) pairs
        for t in range(1, Lk):
            assigned = pool[member, keys[seq, t]]
            counts = torch.zeros(B, V, dtype=torch.float64).index_put_((seq, assigned), torch.ones(len(seq), dtype=torch.float64),
                                                                       accumulate=True)
            total = counts.sum(-1)
            ok = total > 0
            out[ok, 2 * t] = counts[ok] / total[ok, None]
            if t < values.shape[1]:
                keep = assigned == values[seq, t]
                member, seq = member[keep], seq[keep]
        return out

    def _fresh_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        V = self.V
        B, T = tokens.shape
        keys = tokens[:, 0::2]  # [B, Lk]
        Lk = keys.shape[1]
        values = torch.full((B, Lk), -1, dtype=torch.long)
        shown = tokens[:, 1::2] - V  # [B, Lk-1] (or Lk when T is even)
        values[:, : shown.shape[1]] = shown[:, : Lk]
        # seen[b, t, y]: value y was shown before key t (strictly earlier pairs)
        onehot = torch.zeros(B, Lk, V, dtype=torch.float64)
        valid = values >= 0
        onehot[valid.nonzero(as_tuple=True) + (values[valid],)] = 1.0
        seen = torch.cumsum(onehot, dim=1) - onehot  # exclusive prefix
        seen = seen > 0
        unseen = (~seen).double()
        post = unseen / unseen.sum(-1, keepdim=True)
        # a key shown before pins its value
        earlier = torch.ones(Lk, Lk, dtype=torch.bool).tril(-1)  # j < t
        match = (keys[:, :, None] == keys[:, None, :]) & earlier & valid[:, None, :]  # [B, t, j]
        repeat = match.any(-1)
        if repeat.any():
            j = match.double().argmax(-1)  # first earlier occurrence
            pinned = values.gather(1, j)
            one = torch.zeros(B, Lk, V, dtype=torch.float64).scatter_(2, pinned.clamp_min(0)[..., None], 1.0)
            post = torch.where(repeat[..., None], one, post)
        out = uniform_rows((B, T), V)
        out[:, 0::2] = post
        return out

    # --- anatomy ---------------------------------------------------------------------------
    region_descriptions = {
        "value_positions": "positions of the values already shown (every one ruled out for a new key: "
                           "the elimination set); new-key queries only",
        "key_positions": "positions of earlier keys; new-key queries only",
        "repeat_key": "earlier occurrences of the query key (repeated keys only, replacement=True)",
        "repeat_answer": "the value positions right after earlier occurrences of the query key: the only "
                         "feasible hypothesis (repeated keys only)",
    }

    def hypothesis_tokens(self) -> tuple[list[int], str]:
        """The value tokens ``V..2V-1``: the candidate images ``π(k)``."""
        V = self.V
        return list(range(V, 2 * V)), f"value tokens {V}..{2 * V - 1} (the hypotheses pi(k))"

    def attention_regions(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Keys sit at even positions, values at odd ones; a query is a key (new or repeated)."""
        B, T = tokens.shape
        j = torch.arange(T)
        before = (j[None, :] < j[:, None])[None].expand(B, T, T)
        same = (tokens[:, :, None] == tokens[:, None, :]) & before  # earlier occurrence of the query token
        odd = (j % 2 == 1)[None, None, :]
        is_repeat = same.any(-1, keepdim=True)
        out = {"value_positions": before & odd & ~is_repeat, "key_positions": before & ~odd & ~is_repeat}
        if self.replacement:
            out["repeat_key"] = same
            after = torch.zeros_like(same)
            after[:, :, 1:] = same[:, :, :-1]
            out["repeat_answer"] = after & before
        return out

    def main_region(self, regions: dict[str, torch.Tensor]) -> str:
        return "repeat_answer" if "repeat_answer" in regions else "value_positions"

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        V = self.V
        return [f"k{int(t)}" if t < V else f"→v{int(t) - V}" for t in episodes.tokens[index]]


MAX_POOL_ENTRIES = 2**24
"""A pool holds at most this many (permutation, key) entries (128 MiB of int64)."""


@functools.lru_cache(maxsize=8)
def _edit_a_value(tokens: torch.Tensor, positions: torch.Tensor, offset: int, n_values: int,
                  seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Replace the value token (id ``offset + v``) at one of ``positions`` per row, drawn uniformly, by two
    values no value position of the row holds (:meth:`Task.counterfactual_edit`)."""
    g = generator(seed)
    B = tokens.shape[0]
    shown = tokens[:, positions] - offset
    present = torch.zeros(B, n_values, dtype=torch.bool).scatter_(1, shown.clamp(0, n_values - 1), True)
    pair = two_unused(present, g)
    if pair is None:
        return None
    pos = positions[torch.randint(0, len(positions), (B,), generator=g)]
    rows = torch.arange(B)
    edited, other = tokens.clone(), tokens.clone()
    edited[rows, pos] = pair[0] + offset
    other[rows, pos] = pair[1] + offset
    return edited, other, pos


def _pool(V: int, size: int, seed: int) -> torch.Tensor:
    """``size`` uniformly random permutations of ``[V]`` from their own stream (never an episode's)."""
    g = torch.Generator().manual_seed(0x9001_0000_0000 + seed)
    return torch.argsort(torch.rand(size, V, generator=g), dim=1)


@functools.lru_cache(maxsize=8)
def _pool_index(V: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each key ``k``: the members sorted by the value they give it (``order [V, size]``) and where each
    value's block starts (``starts [V, V + 1]``)."""
    pool = _pool(V, size, seed)
    order = torch.argsort(pool.T, dim=1, stable=True)
    counts = torch.stack([torch.bincount(pool[:, k], minlength=V) for k in range(V)])
    return order, torch.cat([torch.zeros(V, 1, dtype=torch.long), counts.cumsum(1)], 1)


# the sawtooth (Paper I v3): keys drawn with replacement, so a repeated key's answer is certain and the
# posterior entropy falls and jumps back up — accumulation and binding in one wind tunnel
register_preset("sawtooth", "bijection", V=10, L=12, replacement=True)
