"""Associative recall (Paper I v3, arXiv 2512.22471): random-access *binding*.

Each episode stores ``N = pairs`` key→value bindings with distinct keys (drawn from ``n_keys``)
and distinct values (drawn from ``n_values``), written as ``k v`` token pairs; then ``filler``
FILLER tokens; then ``queries`` query blocks ``QUERY k``, each ``k`` a stored key drawn uniformly
(with repetition across queries), consecutive blocks separated by ``gap`` FILLER tokens.  At the
key position of each query block the model predicts the value bound to ``k``.

Token ids: keys ``0..n_keys-1``, values ``n_keys..n_keys+n_values-1``, then ``FILLER``, ``QUERY``.
Layout (``P = pairs``, ``Q = queries``, ``F = filler``, ``G = gap``)::

    k1 v1 k2 v2 … kP vP  FILLER×F  QUERY q1  FILLER×G  QUERY q2  …  FILLER×G  QUERY qQ

so ``T = 2P + F + 2Q + (Q-1)G`` and query ``j`` (0-based) has its key at
``2P + F + j(2+G) + 1``, the only scored positions.

Exact posterior: the store lists every binding, so ``p(v | inputs) = 1[v = value stored with q]``
— one-hot, entropy 0 bits; the task measures whether a model can *retrieve*, not accumulate.
(A query key absent from the store has probability 0 under the task; ``posterior`` returns a
uniform row there rather than fail, so arbitrary inputs stay well defined.)

The authors' generator (``src/data/associative_recall.py``) writes ``STORE k SEP v`` and uses
N=64 pairs over 256-token key and value vocabularies, 32 fillers, 3 queries and 16 fillers
between queries: the preset ``recall_paper`` has those sizes in our compact ``k v`` format.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import IGNORE, Episodes, Task, check, generator, register, register_preset, two_unused, uniform_rows
from ..errors import is_int


@register
@dataclass(frozen=True)
class Recall(Task):
    """Associative recall: ``pairs`` stored bindings, then ``queries`` lookups."""

    name = "recall"
    summary = "store unique key→value pairs, then look keys up (random-access binding)"
    tiny = {"pairs": 4, "n_keys": 8, "n_values": 8, "queries": 3, "filler": 1}

    pairs: int = 8
    n_keys: int = 16
    n_values: int = 16
    queries: int = 8
    filler: int = 2
    gap: int = 0

    def validate(self) -> None:
        check(is_int(self.n_keys) and 1 <= self.n_keys <= 65536, "n_keys", "an integer in [1, 65536]")
        check(is_int(self.n_values) and 2 <= self.n_values <= 65536, "n_values", "an integer in [2, 65536]")
        hi = min(self.n_keys, self.n_values)
        check(is_int(self.pairs) and 1 <= self.pairs <= hi, "pairs", f"an integer in [1, min(n_keys, n_values)] = [1, {hi}]")
        check(is_int(self.queries) and 1 <= self.queries <= 4096, "queries", "an integer in [1, 4096]")
        check(is_int(self.filler) and 0 <= self.filler <= 4096, "filler", "an integer in [0, 4096]")
        check(is_int(self.gap) and 0 <= self.gap <= 4096, "gap", "an integer in [0, 4096]")

    # token ids
    @property
    def FILLER(self) -> int:
        return self.n_keys + self.n_values

    @property
    def QUERY(self) -> int:
        return self.n_keys + self.n_values + 1

    @property
    def n_classes(self) -> int:
        return self.n_values

    @property
    def vocab_size(self) -> int:
        return self.n_keys + self.n_values + 2

    @property
    def seq_len(self) -> int:
        P, Q = self.pairs, self.queries
        return 2 * P + self.filler + 2 * Q + (Q - 1) * self.gap

    @property
    def length_param(self) -> str:
        return "queries"

    def query_positions(self) -> torch.Tensor:
        """Positions of the query keys (the scored positions), ``[queries]`` long."""
        start = 2 * self.pairs + self.filler
        return start + torch.arange(self.queries) * (2 + self.gap) + 1

    def sample(self, n: int, seed: int) -> Episodes:
        check(isinstance(n, int) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        P, Q = self.pairs, self.queries
        keys = torch.argsort(torch.rand(n, self.n_keys, generator=g), dim=1)[:, :P]
        values = torch.argsort(torch.rand(n, self.n_values, generator=g), dim=1)[:, :P]
        which = torch.randint(0, P, (n, Q), generator=g)  # index of the stored pair each query asks
        qkeys = keys.gather(1, which)
        answers = values.gather(1, which)

        tokens = torch.full((n, self.seq_len), self.FILLER, dtype=torch.long)
        tokens[:, 0 : 2 * P : 2] = keys
        tokens[:, 1 : 2 * P : 2] = values + self.n_keys
        qpos = self.query_positions()
        tokens[:, qpos - 1] = self.QUERY
        tokens[:, qpos] = qkeys
        targets = torch.full(tokens.shape, IGNORE, dtype=torch.long)
        targets[:, qpos] = answers
        return Episodes(
            tokens=tokens,
            targets=targets,
            posterior=self.lazy_posterior(tokens),
            mask=self.scored_mask(tokens),
            latent={"keys": keys, "values": values, "queries": qkeys},
        )

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, self.query_positions()] = True
        return mask

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        P, V = self.pairs, self.n_values
        B, T = tokens.shape
        keys = tokens[:, 0 : 2 * P : 2]  # [B, P]
        values = tokens[:, 1 : 2 * P : 2] - self.n_keys  # [B, P]
        qpos = self.query_positions()
        qkeys = tokens[:, qpos]  # [B, Q]
        match = qkeys[:, :, None] == keys[:, None, :]  # [B, Q, P]
        found = match.any(-1)
        j = match.long().argmax(-1)  # the (unique) stored pair of each query
        bound = values.gather(1, j).clamp(0, V - 1)
        one = torch.zeros(B, len(qpos), V, dtype=torch.float64).scatter_(2, bound[..., None], 1.0)
        post = torch.where(found[..., None], one, torch.full_like(one, 1.0 / V))
        out = uniform_rows((B, T), V)
        out[:, qpos] = post
        return out

    def counterfactual_edit(self, tokens: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The stored value of one queried pair per episode (drawn uniformly among the pairs some query asks)
        replaced by either of two values the store does not hold: the queries for that key now answer the
        new value.  Needs ``n_values ≥ pairs + 2``."""
        P, K = self.pairs, self.n_keys
        if self.n_values < P + 2:
            return None
        g = generator(seed)
        B = tokens.shape[0]
        rows = torch.arange(B)
        keys, values = tokens[:, 0 : 2 * P : 2], tokens[:, 1 : 2 * P : 2] - K
        asked = (tokens[:, self.query_positions()][:, None, :] == keys[:, :, None]).any(-1)  # [B, P]
        pick = (torch.rand(B, P, generator=g) + asked.double()).argmax(1)  # uniform among the asked pairs
        present = torch.zeros(B, self.n_values, dtype=torch.bool).scatter_(1, values.clamp(0, self.n_values - 1), True)
        first, second = two_unused(present, g)  # type: ignore[misc]
        pos = 2 * pick + 1
        edited, other = tokens.clone(), tokens.clone()
        edited[rows, pos] = first + K
        other[rows, pos] = second + K
        return edited, other, pos

    # --- anatomy ---------------------------------------------------------------------------
    region_descriptions = {
        "stored_key": "the stored key equal to the query key",
        "stored_value": "the stored value bound to the query key (the answer)",
        "store": "all key/value store positions",
    }

    def hypothesis_tokens(self) -> tuple[list[int], str]:
        """The value tokens ``n_keys..n_keys+n_values-1``."""
        k, v = self.n_keys, self.n_values
        return list(range(k, k + v)), f"value tokens {k}..{k + v - 1}"

    def attention_regions(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The store is the first ``2·pairs`` positions, keys at even ones, each value after its key."""
        B, T = tokens.shape
        j = torch.arange(T)
        before = (j[None, :] < j[:, None])[None].expand(B, T, T)
        in_store = (j < 2 * self.pairs)[None, None, :]
        key_slot = in_store & (j % 2 == 0)[None, None, :]
        match = (tokens[:, :, None] == tokens[:, None, :]) & key_slot & before
        answer = torch.zeros_like(match)
        answer[:, :, 1:] = match[:, :, :-1]
        return {"stored_key": match, "stored_value": answer, "store": in_store & before}

    def main_region(self, regions: dict[str, torch.Tensor]) -> str:
        return "stored_value"

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        K = self.n_keys

        def name(t: int) -> str:
            if t < K:
                return f"k{t}"
            if t < K + self.n_values:
                return f"v{t - K}"
            return "FILLER" if t == self.FILLER else "QUERY"

        return [name(int(t)) for t in episodes.tokens[index]]


register_preset("recall_paper", "recall", pairs=64, n_keys=256, n_values=256, queries=3, filler=32, gap=16)
