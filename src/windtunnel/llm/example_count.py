r"""What the number of examples alone explains on the SULA prompts.

The exact posterior entropy of a SULA prompt falls with its number of examples ``k`` (no example: 1 bit; many:
near 0), so a representation that merely counts the examples correlates with it.  These are the measures that
separate counting from inference: each prompt's exact posterior entropy (:func:`bayes_entropy`, from the task alone,
no model); the best correlation any function of ``k`` reaches (:func:`k_only_rho`, the length-only null of a
correlation with the entropy); how the exact posterior itself moves with ``k`` under each condition
(:func:`oracle_movement`, what exact inference would show).  The SULA record's own answer to the question, a
correlation read within each ``k`` where only the evidence moves the entropy, is
:func:`windtunnel.llm.value_edits.within_k_rho`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import torch

from ..evaluation.stats import spearman as _spearman

if TYPE_CHECKING:
    from .sula import SulaSetup


def bayes_entropy(setup: SulaSetup, condition: str = "normal") -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt's exact posterior entropy (bits) under ``condition`` and its ``k``, in the order of
    :func:`prompts` — what the task alone fixes, with no model (the labels' words do not enter it)."""
    from .sula import _binary_entropy, prompts

    items = prompts(setup, ("a", "b"), condition)
    p1 = torch.tensor([x["p1"] for x in items], dtype=torch.float64)
    # rounded to 12 decimals: p and 1 − p give one entropy up to the last bits, a tie for a rank correlation
    return torch.round(_binary_entropy(p1), decimals=12), torch.tensor([x["k"] for x in items])


def _levels(n: int) -> Iterator[tuple[int, ...]]:
    """Every weak ordering of ``n`` items, as the level of each (levels 0, 1, … used without gaps)."""
    import itertools

    for lv in itertools.product(range(n), repeat=n):
        if set(lv) == set(range(max(lv) + 1)):
            yield lv


def k_only_rho(setup: SulaSetup) -> float:
    r"""The highest :math:`|\rho|` (Spearman) with the exact posterior entropy that a representation knowing only
    how many examples a prompt shows can reach: :math:`\max_g |\rho(g(k), H_{\text{Bayes}})|` over every function
    ``g`` of ``k`` (each weak ordering of the example counts; a rank correlation sees nothing else of ``g``).

    H_Bayes falls with ``k`` on these prompts, so a PC1 that only counts the examples correlates with it; a
    model's |ρ(PC1, H_Bayes)| tells that it follows the evidence only where it exceeds this."""
    H, ks = bayes_entropy(setup)
    values = sorted(set(ks.tolist()))
    index = torch.tensor([values.index(int(k)) for k in ks])
    best = 0.0
    for lv in _levels(len(values)):
        r = _spearman(torch.tensor(lv, dtype=torch.float64)[index], H)
        best = max(best, abs(r or 0.0))
    return best


def oracle_movement(setup: SulaSetup, condition: str) -> float:
    """ρ(k, H_Bayes) over ``condition``'s prompts: how the Bayes oracle's state (its posterior) moves as examples
    accumulate — 0 where the exact posterior does not depend on the prompt (shuffled labels, no evidence)."""
    H, ks = bayes_entropy(setup, condition)
    return _spearman(ks.double(), H) or 0.0
