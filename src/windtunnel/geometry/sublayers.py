"""Attention vs feed-forward: the division of labour inside each block (Paper I, "feed-forward networks
perform the posterior update", v1 abstract).

Each sublayer's output is removed in turn — ``blocks.{l}.hook_attn_out`` or ``blocks.{l}.hook_mlp_out``
replaced by zeros, so the residual stream skips just that half of the block — and the change in the
entropy error and the KL is scored against the intact model with paired bootstrap intervals
(:func:`windtunnel.geometry.ablation.ablation_effects`).  Also both kinds at once: every attention
sublayer after the first, and every feed-forward sublayer.

Reading: if the feed-forward networks compute the update of the belief from what attention routed
to them, removing a block's MLP hurts more than removing its attention, in the blocks after the
first (layer 0's attention is what brings the evidence in at all, so it is excluded from the
comparison).  ``mlp_over_attn`` is the geometric mean over those layers of the MLP ablation's fold
over the attention ablation's.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from ..tasks.base import Episodes, Task
from ..evaluation.log_axis import log_scale, loggable
from . import _plot
from ._common import GEOMETRY_SEED, clean, episodes_for, n_layers
from .ablation import ablation_effects
from .registry import Diagnostic, Reading, needs, register

__all__ = ["sublayer_ablation", "sublayer_ablation_figure"]


@contextmanager
def _zeroed(model: torch.nn.Module, names: list[str]) -> Iterator[None]:
    with model.hooks([(n, lambda t, _n: torch.zeros_like(t)) for n in names]):
        yield


@needs("blocks.{l}.hook_attn_out", "blocks.{l}.hook_mlp_out")
def sublayer_ablation(model: torch.nn.Module, task: Task, *, n: int = 256, seed: int = GEOMETRY_SEED,
                      episodes: Episodes | None = None, n_boot: int = 1000, metric: str = "entropy_mae") -> dict[str, Any]:
    r"""Zero each block's attention output and each block's MLP output in turn (and all later attention
    sublayers, and all MLPs, at once); ``fold = ablated / intact`` of ``metric`` with paired bootstrap
    intervals.  ``mlp_over_attn`` = :math:`\exp(\mathrm{mean}_{l \ge 1} \log(\mathrm{fold}^{mlp}_l /
    \mathrm{fold}^{attn}_l))`, > 1 when the feed-forward halves matter more.  Null: ``delta = 0``
    (an inert sublayer).  Models with both ``hook_attn_out`` and ``hook_mlp_out``."""
    ep = episodes_for(task, n, seed, episodes)
    L = n_layers(model)
    variants = []
    for l in range(L):
        for part, hook in (("attn", "hook_attn_out"), ("mlp", "hook_mlp_out")):
            variants.append(({"layer": l, "sublayer": part}, (lambda names=[f"blocks.{l}.{hook}"]: _zeroed(model, names))))
    later_attn = [f"blocks.{l}.hook_attn_out" for l in range(1, L)]
    all_mlp = [f"blocks.{l}.hook_mlp_out" for l in range(L)]
    if later_attn:
        variants.append(({"layer": "1..", "sublayer": "attn"}, lambda: _zeroed(model, later_attn)))
    variants.append(({"layer": "all", "sublayer": "mlp"}, lambda: _zeroed(model, all_mlp)))
    out = ablation_effects(model, task, ep, variants, n_boot, seed, metric)
    rows = out.pop("rows")
    for k in ("top", "runner_up", "top_share", "ratio_to_runner_up", "ratio_to_runner_up_ci"):
        out.pop(k, None)
    fold = {(r["layer"], r["sublayer"]): r[metric]["fold"] for r in rows}
    p_value = {(r["layer"], r["sublayer"]): r[metric]["p_value"] for r in rows}
    attn = [fold[(l, "attn")] for l in range(L)]
    mlp = [fold[(l, "mlp")] for l in range(L)]
    logs = [math.log(m / a) for m, a in zip(mlp[1:], attn[1:]) if m and a and m > 0 and a > 0]
    return clean({
        "applicable": True,
        "definition": "one sublayer's output (blocks.l.hook_attn_out or hook_mlp_out) replaced by zeros; fold = "
                      f"ablated / intact {metric} (bits), paired bootstrap over sequences",
        **out,
        "rows": rows,
        "summary": {
            "attn_fold_by_layer": attn,
            "mlp_fold_by_layer": mlp,
            "attn_p_value_by_layer": [p_value[(l, "attn")] for l in range(L)],
            "mlp_p_value_by_layer": [p_value[(l, "mlp")] for l in range(L)],
            "later_attn_fold": fold.get(("1..", "attn")),
            "all_mlp_fold": fold.get(("all", "mlp")),
            "mlp_over_attn": math.exp(sum(logs) / len(logs)) if logs else None,
            "baseline": out["baseline"][metric]["value"],
        },
    })


def sublayer_ablation_figure(result: dict[str, Any], path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    s = result["summary"]
    L = len(s["attn_fold_by_layer"])
    fig, ax = plt.subplots(figsize=(5, 3.2))
    x = range(L)
    ax.bar([i - 0.2 for i in x], loggable(s["attn_fold_by_layer"]), width=0.4, label="attention removed")
    ax.bar([i + 0.2 for i in x], loggable(s["mlp_fold_by_layer"]), width=0.4, label="MLP removed")
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    log_scale(ax, s["attn_fold_by_layer"], s["mlp_fold_by_layer"])
    # each bar's paired sign-flip p-value against the intact model, above it
    for part, shift in (("attn", -0.2), ("mlp", 0.2)):
        for i, (f, pv) in enumerate(zip(s[f"{part}_fold_by_layer"], s.get(f"{part}_p_value_by_layer") or [])):
            if f is not None and f > 0 and pv is not None:
                ax.annotate(f"p={pv:.2g}", (i + shift, f), ha="center", va="bottom", fontsize=5)
    ax.set_xlabel("layer")
    ax.set_ylabel(f"{result['metric']} ablated / intact")
    ax.set_title("sublayer ablation: attention vs feed-forward", fontsize=9)
    ax.legend(fontsize=7)
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    ratio = s.get("mlp_over_attn")
    if ratio is None:
        return [Reading("sublayer_ablation.mlp_over_attn", None, "equal importance", 1.0, "> 1 is consistent", None,
                        "B11", "one layer: no later layers to compare", ("a single block",))]
    return [Reading("sublayer_ablation.mlp_over_attn", ratio, "equal importance", 1.0,
                    "> 1 (the MLPs of layers ≥ 1 matter more than their attention) is consistent", ratio > 1, "B11",
                    f"removing a later block's MLP multiplies the error {ratio:.3g}× as much as removing its attention; "
                    f"all MLPs at once: ×{s.get('all_mlp_fold') or float('nan'):.3g}")]


register(Diagnostic("sublayer_ablation", sublayer_ablation, sublayer_ablation_figure, _interpret, resamples=True,
                    order=55, claims=("B11",), version=2))
