"""Mamba's selection against the posterior (Paper I v3: Mamba realises the Bayesian geometry through
input-dependent Δ, B, C).

A selective state-space layer decides at every step how much to write the current input into its
state and how much of the past to keep: the step size :math:`\\Delta_t` (large Δ = overwrite,
small = keep), the input map :math:`B_t` and the read-out :math:`C_t`, all functions of the input.
If that selection implements Bayesian filtering it should track how informative each observation
is.  At every scored position, per layer:

* ``delta_info_rho`` — Spearman ρ between the mean step size :math:`\\bar\\Delta_t` (over channels)
  and the information the observation brought, :math:`\\mathrm{KL}(p_t \\,\\|\\, p_{t-1})` in bits
  between consecutive exact posteriors of the same sequence; ``delta_channel_abs_info_rho`` — the
  mean over channels of each channel's |ρ| (channels may open for opposite reasons; the headline,
  ``best_abs_delta_info_rho``, is its largest value over layers);
* ``delta_entropy_rho`` — ρ between :math:`\\bar\\Delta_t` and the posterior entropy :math:`H_t`;
* ``delta_token_eta2`` — the share of the variance of :math:`\\bar\\Delta_t` explained by the
  current input token (η²): how input-dependent the selection is at all;
* ``B_info_rho``, ``C_entropy_rho`` — the same correlations for :math:`\\|B_t\\|` and :math:`\\|C_t\\|`.

Nulls: ρ = 0, and the same statistics of the untrained model (whose Δ already depends on the token
through random weights).  Models exposing ``blocks.{l}.hook_delta`` (windtunnel's Mamba).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..evaluation.metrics import kl_bits
from ..tasks.base import Episodes, Task
from . import _plot
from ._common import GEOMETRY_SEED, clean, collect_scored, episodes_for, n_layers, pearson, rankdata, spearman
from .registry import Diagnostic, Reading, missing, needs, register

__all__ = ["selection", "selection_figure", "information_gain"]


def information_gain(posterior: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
    """``KL(p_i ‖ p_{i-1})`` in bits between consecutive scored rows of the same sequence (NaN for a
    sequence's first row)."""
    out = torch.full((len(seq),), float("nan"), dtype=torch.float64)
    same = seq[1:] == seq[:-1]
    out[1:][same] = kl_bits(posterior[1:][same], posterior[:-1][same])
    return out


def _eta2(x: torch.Tensor, groups: torch.Tensor) -> float:
    """Share of ``x``'s variance explained by the group means (correlation ratio η²)."""
    total = float(((x - x.mean()) ** 2).sum())
    if total <= 0:
        return 0.0
    between = 0.0
    for g in groups.unique():
        sel = groups == g
        between += float(sel.sum()) * float((x[sel].mean() - x.mean()) ** 2)
    return between / total


def _stats(model: torch.nn.Module, ep: Episodes) -> dict[str, list[float | None]]:
    L = n_layers(model)
    names = [f"blocks.{l}.hook_{x}" for l in range(L) for x in ("delta", "B", "C")]
    sc = collect_scored(model, ep, names)
    gain = information_gain(sc.posterior, sc.seq)
    ok = ~torch.isnan(gain)
    token = ep.tokens[ep.mask]
    out: dict[str, list[float | None]] = {k: [] for k in ("delta_info_rho", "delta_channel_abs_info_rho",
                                                            "delta_entropy_rho", "delta_token_eta2",
                                                            "B_info_rho", "C_entropy_rho")}
    gain_ranks = rankdata(gain[ok])
    for l in range(L):
        D = sc.acts[f"blocks.{l}.hook_delta"]
        # channels may open and close for opposite reasons, so their mean can hide selection: per channel too
        rhos = [pearson(rankdata(D[ok, c]), gain_ranks) for c in range(D.shape[1])]
        rhos = [abs(r) for r in rhos if r is not None]
        out["delta_channel_abs_info_rho"].append(sum(rhos) / len(rhos) if rhos else None)
        d = D.mean(1)
        b = sc.acts[f"blocks.{l}.hook_B"].norm(dim=1)
        c = sc.acts[f"blocks.{l}.hook_C"].norm(dim=1)
        out["delta_info_rho"].append(spearman(d[ok], gain[ok]))
        out["delta_entropy_rho"].append(spearman(d, sc.entropy))
        out["delta_token_eta2"].append(_eta2(d, token))
        out["B_info_rho"].append(spearman(b[ok], gain[ok]))
        out["C_entropy_rho"].append(spearman(c, sc.entropy))
    return out


@needs("blocks.{l}.hook_delta", "blocks.{l}.hook_B", "blocks.{l}.hook_C")
def selection(model: torch.nn.Module, task: Task, *, untrained: torch.nn.Module | None = None, n: int = 256,
              seed: int = GEOMETRY_SEED, episodes: Episodes | None = None) -> dict[str, Any]:
    """The selection statistics of the module docstring, per layer, with the untrained model's."""
    ep = episodes_for(task, n, seed, episodes)
    trained = _stats(model, ep)
    out: dict[str, Any] = {
        "applicable": True,
        "definition": "Spearman rho of the channel-mean step size (and |B|, |C|) with the information gain "
                      "KL(p_t || p_t-1) and the entropy of the exact posterior, at scored positions; eta² of the "
                      "step size by input token; per layer",
        "layers": trained,
    }
    best = max((abs(x) for x in trained["delta_channel_abs_info_rho"] if x is not None), default=None)
    out["summary"] = {"delta_info_rho_by_layer": trained["delta_info_rho"],
                      "delta_channel_abs_info_rho_by_layer": trained["delta_channel_abs_info_rho"],
                      "delta_entropy_rho_by_layer": trained["delta_entropy_rho"],
                      "delta_token_eta2_by_layer": trained["delta_token_eta2"], "best_abs_delta_info_rho": best}
    if untrained is not None and not missing(untrained, selection.requires):
        un = _stats(untrained, ep)
        out["untrained"] = un
        out["summary"]["untrained_best_abs_delta_info_rho"] = max(
            (abs(x) for x in un["delta_channel_abs_info_rho"] if x is not None), default=None)
    return clean(out)


def selection_figure(result: dict[str, Any], path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    lay = result["layers"]
    L = len(lay["delta_info_rho"])
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key, style in (("delta_info_rho", "o-"), ("delta_entropy_rho", "s-"), ("B_info_rho", "^-"),
                       ("C_entropy_rho", "v-")):
        ax.plot(range(L), _plot.nan(lay[key]), style, label=key)
    if "untrained" in result:
        ax.plot(range(L), _plot.nan(result["untrained"]["delta_info_rho"]), "x:", color="grey",
                label="delta_info_rho, untrained")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("layer")
    ax.set_ylabel("Spearman ρ")
    ax.set_title("Mamba selection vs the exact posterior", fontsize=9)
    ax.legend(fontsize=6)
    return _plot.save(fig, path)


SELECTION_RHO = 0.3
"""|ρ| from which the step size is said to track the information of an observation."""


def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    best, un = s.get("best_abs_delta_info_rho"), s.get("untrained_best_abs_delta_info_rho")
    if best is None:
        return []
    ok = best >= SELECTION_RHO and (un is None or best > un)
    return [Reading("selection.best_abs_delta_info_rho", best, "untrained model", un,
                    f"|rho| ≥ {SELECTION_RHO} and above the untrained model is consistent", ok, "B17",
                    "the step size Δ follows how much each observation moves the posterior" if ok else
                    "the step size Δ does not track how informative an observation is")]


register(Diagnostic("selection", selection, selection_figure, _interpret, untrained=True, order=65, claims=("B17",),
                    version=2))
