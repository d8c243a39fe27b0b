"""Bijection elimination, Paper I's own layout: one shared vocabulary and an explicit query token.

The production layout (:mod:`windtunnel.tasks.bijection`) gives keys and values separate token
ranges.  Paper I's variant writes both with the same ``V`` tokens and marks each question with a
query token ``Q`` (id ``V``)::

    Q k1 v1  Q k2 v2  …  Q kL          (3L - 1 tokens; the last value is never shown)

so a token alone does not say whether it is a key or a value: the model must read the structure.
The model predicts ``π(k_t)`` at each key position (right after a ``Q``).  The evidence is the same
pairs as in the production layout, so the exact posterior is too: uniform over the values not yet
shown, or one-hot on the value of a key shown before (``replacement``).  The authors report that
the single layer-0 "hypothesis-frame head" replicates on this layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import IGNORE, Episodes, check, register, uniform_rows
from ..errors import is_int
from .bijection import Bijection, _edit_a_value


@register
@dataclass(frozen=True)
class BijectionQuery(Bijection):
    """Bijection elimination with keys and values in one vocabulary and a query token before each key."""

    name = "bijection_query"
    summary = "bijection elimination in Paper I's layout: shared key/value tokens, a query token before each key"
    tiny = {"V": 6, "L": 5}

    @property
    def vocab_size(self) -> int:
        return self.V + 1

    @property
    def query_token(self) -> int:
        return self.V

    @property
    def seq_len(self) -> int:
        return 3 * self.L - 1

    def _production(self, tokens: torch.Tensor) -> torch.Tensor:
        """The same pairs in the production layout ``[k1, v1+V, k2, …]`` (what the parent scores)."""
        keys, values = tokens[:, 1::3], tokens[:, 2::3]
        B, Lk = keys.shape
        out = torch.empty(B, 2 * Lk, dtype=torch.long)
        out[:, 0::2] = keys
        out[:, 1::2][:, : values.shape[1]] = values + self.V
        return out[:, : Lk + values.shape[1]]

    def sample(self, n: int, seed: int) -> Episodes:
        perm, keys = self.draw(n, seed)  # the production layout's random stream: the same pairs
        values = perm.gather(1, keys)
        L = self.L
        tokens = torch.empty(n, 3 * L, dtype=torch.long)
        tokens[:, 0::3] = self.query_token
        tokens[:, 1::3] = keys
        tokens[:, 2::3] = values
        tokens = tokens[:, : 3 * L - 1]
        targets = torch.full(tokens.shape, IGNORE, dtype=torch.long)
        targets[:, 1::3] = values
        return Episodes(tokens=tokens, targets=targets, posterior=self.lazy_posterior(tokens),
                        mask=self.scored_mask(tokens), latent={"perm": perm, "keys": keys})

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, 1::3] = True
        return mask

    def counterfactual_edit(self, tokens: torch.Tensor, seed: int) -> "tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None":
        """The bijection's edit (:meth:`Bijection.counterfactual_edit`) on this layout's value positions."""
        if self.replacement or self.pool is not None or tokens.shape[1] < 4:
            return None
        return _edit_a_value(tokens, positions=torch.arange(2, tokens.shape[1] - 2, 3), offset=0, n_values=self.V,
                             seed=seed)

    def windowed_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                           window: int = 1) -> torch.Tensor:
        """The bijection's windowed posterior (:meth:`Bijection.windowed_posterior`) on this layout: each
        key read with the ``window`` query–key–value triples before it."""
        check(is_int(window) and window >= 0, "window", "a non-negative integer")
        out = uniform_rows(tuple(tokens.shape), self.V)
        for t in range(1, tokens.shape[1], 3):
            out[:, t] = self.posterior(tokens[:, max(0, t - 1 - 3 * window) : t + 1])[:, -1]
        return out

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        B, T = tokens.shape
        prod = Bijection.posterior(self, self._production(tokens))
        out = uniform_rows((B, T), self.V)
        out[:, 1::3] = prod[:, 0::2]
        return out

    # --- anatomy ---------------------------------------------------------------------------
    region_descriptions = {
        "value_positions": "positions of the values already shown (the elimination set); new-key queries only",
        "key_positions": "positions of earlier keys; new-key queries only",
        "query_positions": "positions of earlier query tokens",
    }

    def hypothesis_tokens(self) -> tuple[list[int], str]:
        """Tokens ``0..V-1``, which stand for keys and values alike here."""
        return list(range(self.V)), f"tokens 0..{self.V - 1} (keys and the hypotheses pi(k), one vocabulary)"

    def attention_regions(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        B, T = tokens.shape
        j = torch.arange(T)
        before = (j[None, :] < j[:, None])[None].expand(B, T, T)
        # an earlier occurrence of the query key at a key position (repeated keys, replacement=True)
        keypos = (j % 3 == 1)
        same = (tokens[:, :, None] == tokens[:, None, :]) & before & keypos[None, None, :] & keypos[None, :, None]
        is_repeat = same.any(-1, keepdim=True)
        out = {"value_positions": before & (j % 3 == 2)[None, None, :] & ~is_repeat,
               "key_positions": before & keypos[None, None, :] & ~is_repeat,
               "query_positions": before & (j % 3 == 0)[None, None, :]}
        return out

    def main_region(self, regions: dict[str, torch.Tensor]) -> str:
        return "value_positions"

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        toks = episodes.tokens[index].tolist()
        return ["Q" if t == self.V else (f"k{t}" if i % 3 == 1 else f"→v{t}") for i, t in enumerate(toks)]
