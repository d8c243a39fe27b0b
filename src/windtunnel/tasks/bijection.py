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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import IGNORE, Episodes, Task, check, generator, register, register_preset, uniform_rows
from ..errors import is_int


@register
@dataclass(frozen=True)
class Bijection(Task):
    """Bijection elimination with ``V`` values and ``L`` key→value pairs per episode."""

    name = "bijection"
    summary = "fresh random bijection per episode; predict each key's value (accumulation)"

    V: int = 20
    L: int = 19
    replacement: bool = False
    key_pool: int | None = None

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

    def draw(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The latent draws of ``n`` episodes: ``perm [n, V]`` (``perm[b, key]`` = value) and the
        keys asked ``[n, L]`` (deterministic in ``seed``; layouts of the same pairs share them)."""
        check(isinstance(n, int) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        V, L = self.V, self.L
        perm = torch.argsort(torch.rand(n, V, generator=g), dim=1)  # perm[b, key] = value index
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
            posterior=self.posterior(tokens),
            mask=mask,
            latent={"perm": perm, "keys": keys},
        )

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, 0::2] = True
        return mask

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
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


# the sawtooth (Paper I v3): keys drawn with replacement, so a repeated key's answer is certain and the
# posterior entropy falls and jumps back up — accumulation and binding in one wind tunnel
register_preset("sawtooth", "bijection", V=10, L=12, replacement=True)
