"""The routing law as a run diagnostic: Paper II's score and value gradients on every head of the
trained model, checked against autograd, with the split of the gradient between routing and values.

A thin adapter over :mod:`windtunnel.routing` so ``windtunnel analyze`` and the report show it
beside the other geometry; the law itself lives there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..evaluation.log_axis import log_scale, loggable
from . import _plot
from .registry import Diagnostic, Reading, needs, register
from ._common import GEOMETRY_SEED, episodes_for, n_layers
from ..tasks.base import Episodes, Task


@needs("blocks.{l}.attn.hook_scores", "blocks.{l}.attn.hook_pattern", "blocks.{l}.attn.hook_v",
       "blocks.{l}.attn.hook_z")
def routing_law(model: torch.nn.Module, task: Task, n: int = 64, seed: int = GEOMETRY_SEED,
                episodes: Episodes | None = None) -> dict[str, Any]:
    """Per head: max relative error of the law against autograd (∂L/∂s and ∂L/∂v), the share of
    attended pairs with positive advantage ``b_ij > E_α[b]``, and the norms of ∂L/∂s and ∂L/∂v, on
    at most ``n`` episodes.  ``summary``: the largest errors over heads (float32: ~1e-6 expected)."""
    from ..routing.law import layer_gradients

    ep = episodes_for(task, n, seed, episodes)
    ep = ep[: min(n, len(ep))]
    rows = [g.summary() for layer in range(n_layers(model)) for g in layer_gradients(model, ep, layer)]
    return {
        "applicable": True,
        "n_episodes": len(ep),
        "heads": rows,
        "summary": {
            "max_score_rel_error": max(r["score_rel_error"] for r in rows),
            "max_value_rel_error": max(r["value_rel_error"] for r in rows),
            "routing_to_value_grad_norm": [r["routing_grad_norm"] / r["value_grad_norm"] if r["value_grad_norm"] else None
                                           for r in rows],
        },
    }


def routing_law_figure(result: dict[str, Any], path: Path) -> Path:
    """Per head: the gradient norms of routing (∂L/∂s) and values (∂L/∂v), log scale."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"routing law: {result.get('reason', 'not applicable')}", path)
    rows = result["heads"]
    fig, ax = _plot.figure(w=max(4.0, 0.5 * len(rows) + 2), h=3.4)
    a = ax[0, 0]
    x = list(range(len(rows)))
    routing, values = [r["routing_grad_norm"] for r in rows], [r["value_grad_norm"] for r in rows]
    a.bar([i - 0.2 for i in x], loggable(routing), width=0.4, label="|∂L/∂s| (routing)")
    a.bar([i + 0.2 for i in x], loggable(values), width=0.4, label="|∂L/∂v| (values)")
    a.set_xticks(x, [f"L{r['layer']}H{r['head']}" for r in rows], rotation=90, fontsize=7)
    log_scale(a, routing, values)  # a saturated readout's gradients are 0 or NaN on every head
    a.set_title(f"routing law per head (law vs autograd: max rel. error "
                f"{result['summary']['max_score_rel_error']:.1e})", fontsize=9)
    a.legend(fontsize=7)
    return _plot.save(fig, path)

def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    e = s.get("max_score_rel_error")
    if e is None:
        return []
    return [Reading("routing_law.max_score_rel_error", e, "float32 rounding", 1e-4, "below 1e-4 is consistent",
                    e < 1e-4, "C1", "the closed-form routing gradient equals autograd's on every head")]


register(Diagnostic("routing_law", routing_law, routing_law_figure, _interpret, order=70, claims=("C1", "C2", "C3")))
