"""Belief-state geometry: does the residual stream hold the hidden state's belief linearly?

For a task whose process has a hidden state (:meth:`~windtunnel.tasks.Task.belief`: HMM filtering,
Mess3), the exact belief ``η`` at every scored position is a point of the ``(S−1)``-simplex.  It is
regressed on

* each layer's stream — ``embed`` (``blocks.0.hook_resid_pre``), then ``Lℓ`` (``blocks.ℓ.hook_resid_post``),
* all of them concatenated (``all_layers``),

by ridge regression with an intercept, fitted on the first 70% of the sequences and scored on the
rest: the held-out ``R² = 1 − Σ‖η − η̂‖² / Σ‖η − η̄‖²`` (pooled over the ``S`` coordinates) and the
root-mean-square distance ``‖η − η̂‖``.

Nulls: the same readouts of the untrained model (a random network's features are rich: this is
the floor a trained one must beat), the per-position mean belief (``position_only``: what knowing only
the position gives), and the all-layers readout fitted to beliefs shuffled among the training rows.
For reference, the readout from the model's own output probabilities (``output``): for Mess3 the
predictive is an invertible affine image of the belief, so an exact model's output determines it; a
stream that beats its own output holds more of the belief than the network says.

For a 3-state process the figure draws the held-out true beliefs and their all-layers readout in the
triangle (each point coloured by its true belief), beside ``R²`` by layer.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..tasks.base import Episodes, Task
from . import _plot
from ._common import GEOMETRY_SEED, clean, collect_scored, episodes_for, n_layers, not_applicable
from .readouts import TRAIN_FRAC, r2, residualise_on_position, ridge_fit, split_rows
from .registry import Diagnostic, Reading, needs, register

__all__ = ["belief_geometry", "belief_geometry_figure", "belief_readout", "simplex_xy"]

FIGURE_POINTS = 400
"""Held-out points kept in the result for the simplex figure, each one string of its coordinates (3 decimals)."""


def simplex_xy(eta: torch.Tensor) -> torch.Tensor:
    """Points of the 2-simplex ``[N, 3]`` → the plane: vertices at (0, 0), (1, 0) and (½, √3/2)."""
    eta = eta.double()
    return torch.stack([eta[:, 1] + 0.5 * eta[:, 2], eta[:, 2] * math.sqrt(3) / 2], -1)


def belief_readout(X: torch.Tensor, B: torch.Tensor, seq: torch.Tensor, train: torch.Tensor,
                   test: torch.Tensor) -> dict[str, Any]:
    """Ridge readout of the beliefs ``B [N, S]`` from ``X [N, d]`` fitted on ``train`` rows: held-out
    ``r2`` (pooled over coordinates), ``rmse`` (root mean squared Euclidean distance) and the held-out
    predictions ``pred``."""
    model = ridge_fit(X[train], B[train], seq[train])
    pred = model.predict(X[test])
    dist2 = ((pred - B[test]) ** 2).sum(-1)
    return {"r2": r2(B[test], pred), "rmse": float(dist2.mean().sqrt()), "alpha": model.alpha, "pred": pred}


def _streams(model: torch.nn.Module) -> list[tuple[str, str]]:
    return [("embed", "blocks.0.hook_resid_pre")] + [(f"L{l}", f"blocks.{l}.hook_resid_post") for l in range(n_layers(model))]


def _readouts(model: torch.nn.Module, ep: Episodes, B: torch.Tensor, train: torch.Tensor,
              test: torch.Tensor) -> dict[str, Any]:
    streams = _streams(model)
    sc = collect_scored(model, ep, [name for _, name in streams])
    layers = []
    for label, name in streams:
        r = belief_readout(sc.acts[name], B, sc.seq, train, test)
        layers.append({"layer": label, "r2": r["r2"], "rmse": r["rmse"], "ridge_alpha": r["alpha"]})
    every = torch.cat([sc.acts[name] for _, name in streams], 1)
    full = belief_readout(every, B, sc.seq, train, test)
    out = belief_readout(torch.softmax(sc.logits, -1), B, sc.seq, train, test)
    return {"layers": layers, "all_layers": {"r2": full["r2"], "rmse": full["rmse"]}, "all_layers_pred": full["pred"],
            "output": {"r2": out["r2"], "rmse": out["rmse"]}, "every": every, "seq": sc.seq, "pos": sc.pos}


def _best(layers: list[dict[str, Any]]) -> dict[str, Any]:
    return max(layers, key=lambda r: -math.inf if r["r2"] is None else r["r2"])


@needs("blocks.{l}.hook_resid_pre", "blocks.{l}.hook_resid_post")
def belief_geometry(model: torch.nn.Module, task: Task, *, untrained: torch.nn.Module | None = None, n: int = 256,
                    seed: int = GEOMETRY_SEED, episodes: Episodes | None = None,
                    train_frac: float = TRAIN_FRAC) -> dict[str, Any]:
    """Held-out linear readouts of the exact belief from every layer and from all layers together,
    beside the untrained model's, the position-only and shuffled nulls and the model's own output (see
    the module docstring)."""
    ep = episodes_for(task, n, seed, episodes)
    belief = task.belief(ep.tokens, ep.features)
    if belief is None:
        return not_applicable(f"task {task.name!r} has no hidden state whose belief it computes (Task.belief)")
    B = belief[ep.mask].double()
    seq, pos = ep.mask.nonzero(as_tuple=True)
    train, test = split_rows(seq, train_frac)
    trained = _readouts(model, ep, B, train, test)

    g = torch.Generator().manual_seed(1)
    idx = train.nonzero().squeeze(1)
    Bs = B.clone()
    Bs[idx] = B[idx[torch.randperm(len(idx), generator=g)]]
    shuffled = belief_readout(trained["every"], Bs, seq, train, test)
    by_pos = B - torch.stack([residualise_on_position(B[:, s], pos, fit=train) for s in range(B.shape[1])], 1)
    pos_r2 = r2(B[test], by_pos[test])
    best = _best(trained["layers"])
    summary: dict[str, Any] = {
        "n_states": int(B.shape[1]),
        "r2_by_layer": [r["r2"] for r in trained["layers"]],
        "best_layer": best["layer"],
        "best_layer_r2": best["r2"],
        "all_layers_r2": trained["all_layers"]["r2"],
        "all_layers_rmse": trained["all_layers"]["rmse"],
        "output_r2": trained["output"]["r2"],
        "position_only_r2": pos_r2,
        "shuffled_r2": shuffled["r2"],
    }
    res: dict[str, Any] = {
        "applicable": True,
        "definition": "ridge from each layer's stream (and all layers concatenated) to the exact belief over the "
                      "hidden state at scored positions; held-out R^2 pooled over states and RMS distance",
        "n_points": len(B),
        "n_train_points": int(train.sum()),
        "layers": trained["layers"],
        "all_layers": trained["all_layers"],
        "output": trained["output"],
        "null": {"position_only_r2": pos_r2, "shuffled_r2": shuffled["r2"]},
    }
    if untrained is not None:
        null = _readouts(untrained, ep, B, train, test)
        res["untrained"] = {"layers": null["layers"], "all_layers": null["all_layers"]}
        summary["r2_by_layer_untrained"] = [r["r2"] for r in null["layers"]]
        summary["best_layer_r2_untrained"] = _best(null["layers"])["r2"]
        summary["all_layers_r2_untrained"] = null["all_layers"]["r2"]
    k = min(FIGURE_POINTS, int(test.sum()))
    res["points"] = {"true": [" ".join(f"{float(v):.3f}" for v in row) for row in B[test][:k]],
                     "all_layers": [" ".join(f"{float(v):.3f}" for v in row) for row in trained["all_layers_pred"][:k]]}
    res["summary"] = summary
    return clean(res)


def _plane(points: torch.Tensor, basis: torch.Tensor | None) -> torch.Tensor:
    return simplex_xy(points) if basis is None else (points - points.mean(0)) @ basis


def belief_geometry_figure(result: dict[str, Any], path: Path) -> Path:
    """True beliefs and their all-layers readout (the simplex for 3 states, else the true beliefs' first
    two principal axes), and held-out R² by layer beside the untrained model's."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"belief geometry: {result.get('reason', 'not applicable')}", path)
    true, pred = (torch.tensor([[float(v) for v in p.split()] for p in result["points"][key]], dtype=torch.float64)
                  for key in ("true", "all_layers"))
    S = true.shape[1]
    basis = None
    if S != 3:
        _, _, v = torch.linalg.svd(true - true.mean(0), full_matrices=False)
        basis = v[:2].T
    colour = true[:, :3].clamp(0, 1).numpy() if S >= 3 else None
    fig, ax = _plot.figure(ncols=3, w=3.8, h=3.6)
    for a, pts, title in ((ax[0, 0], true, "exact belief"), (ax[0, 1], pred, "read from all layers (held out)")):
        xy = _plane(pts, basis).numpy()
        a.scatter(xy[:, 0], xy[:, 1], s=3, c=colour, linewidths=0)
        if basis is None:
            a.plot([0, 1, 0.5, 0], [0, 0, math.sqrt(3) / 2, 0], color="0.6", lw=0.8)
        a.set_aspect("equal")
        a.set_xticks([])
        a.set_yticks([])
        a.set_title(title + ("" if basis is None else " (first two principal axes)"), fontsize=9)
    a = ax[0, 2]
    labels = [r["layer"] for r in result["layers"]] + ["all"]
    x = list(range(len(labels)))
    a.plot(x, _plot.nan([r["r2"] for r in result["layers"]] + [result["all_layers"]["r2"]]), "o-", label="trained")
    if "untrained" in result:
        u = result["untrained"]
        a.plot(x, _plot.nan([r["r2"] for r in u["layers"]] + [u["all_layers"]["r2"]]), "s--", color="0.5", label="untrained")
    if result["output"]["r2"] is not None:
        a.axhline(result["output"]["r2"], color="C2", lw=0.8, ls=":", label="from the output")
    a.set_xticks(x, labels)
    a.set_ylabel("held-out R² of the belief")
    a.legend(fontsize=7)
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    """B10 for a hidden-state process: the stream holds the belief linearly, well beyond a random network's."""
    s = r["summary"]
    best, null = s.get("best_layer_r2"), s.get("best_layer_r2_untrained")
    if best is None or null is None:
        return []
    consistent = (1 - best) <= 0.5 * (1 - null)

    def f(v: Any) -> str:
        return "–" if v is None else f"{v:.3g}"

    return [Reading("belief_geometry.best_layer_r2", best, "untrained model's best layer", null,
                    "unexplained belief variance at most half the untrained model's is consistent", consistent, "B10",
                    f"layer {s['best_layer']} reads the belief over the {s['n_states']} hidden states with held-out R² "
                    f"{best:.3g} (all layers {f(s['all_layers_r2'])}, the model's output {f(s['output_r2'])}, "
                    f"position only {f(s['position_only_r2'])})")]


register(Diagnostic("belief_geometry", belief_geometry, belief_geometry_figure, _interpret, untrained=True, order=62, version=2,
                    claims=("B10",)))
