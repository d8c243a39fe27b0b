"""The value manifold: PCA of attention outputs and of the residual stream (Paper I)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..tasks.base import Episodes, Task
from . import _plot
from .registry import Diagnostic, Reading, needs, register
from ._common import GEOMETRY_SEED, Scored, clean, collect_scored, episodes_for, has_layer_hooks, n_layers, spearman
from .readouts import (TRAIN_FRAC, pca, position_onehot, r2, residualise_on_position, ridge_r2, split_rows,
                       variance_stats)

__all__ = ["value_manifold", "value_manifold_figure", "manifold_stats", "sources"]

SCATTER_POINTS = 1500


def sources(model: torch.nn.Module) -> dict[str, str]:
    """Representation sources: ``attn_out`` (``blocks.{l}.hook_attn_out``, transformers) and
    ``resid`` (``blocks.{l}.hook_resid_post``, every architecture) — name -> hook-name template."""
    out = {}
    if has_layer_hooks(model, "hook_attn_out"):
        out["attn_out"] = "blocks.{l}.hook_attn_out"
    if has_layer_hooks(model, "hook_resid_post"):
        out["resid"] = "blocks.{l}.hook_resid_post"
    return out


def manifold_stats(X: torch.Tensor, sc: Scored, train: torch.Tensor, test: torch.Tensor,
                   confounded: bool, seed: int = 0) -> tuple[dict[str, Any], torch.Tensor]:
    """The statistics of one representation ``X [N,d]``; also returns the (oriented) PC1/PC2 scores."""
    lam, vec = pca(X)
    Xc = X - X.mean(0)
    k = min(2, vec.shape[1])
    scores = Xc @ vec[:, :k]
    H = sc.entropy
    rho = spearman(scores[:, 0], H) if k >= 1 else None
    if rho is not None and rho < 0:  # orient PC1 to grow with entropy (the sign of a PC is arbitrary)
        scores[:, 0] = -scores[:, 0]
    out: dict[str, Any] = variance_stats(lam)
    out["spearman_pc1_entropy"] = None if rho is None else abs(rho)
    # a manifold folded at its middle (PC1 symmetric in H: a V) has |rho(PC1, H)| near 0 although PC1
    # determines H; the distance from PC1's median and the second component catch that shape
    if rho is not None:
        fold = (scores[:, 0] - scores[:, 0].median()).abs()
        out["spearman_abs_pc1_entropy"] = abs(spearman(fold, H))
        out["spearman_pc2_entropy"] = abs(spearman(scores[:, 1], H)) if k >= 2 else None
    out["r2_entropy"] = ridge_r2(X, H, sc.seq, train, test)
    g = torch.Generator().manual_seed(seed)
    Hs = H.clone()
    idx = train.nonzero().squeeze(1)
    Hs[idx] = H[idx[torch.randperm(len(idx), generator=g)]]
    out["r2_entropy_shuffled"] = ridge_r2(X, Hs, sc.seq, train, test)
    if confounded:
        out["partial_spearman_pc1_entropy_given_position"] = None
        out["r2_entropy_residual_on_position"] = None
    else:
        rp = residualise_on_position(_ranks(scores[:, 0]), sc.pos)
        rh = residualise_on_position(_ranks(H), sc.pos)
        from ._common import pearson

        out["partial_spearman_pc1_entropy_given_position"] = pearson(rp, rh)
        Hres = residualise_on_position(H, sc.pos, fit=train)
        out["r2_entropy_residual_on_position"] = ridge_r2(X, Hres, sc.seq, train, test)
    return out, scores


def _ranks(x: torch.Tensor) -> torch.Tensor:
    from ._common import rankdata

    return rankdata(x)


def _collect(model: torch.nn.Module, ep: Episodes, srcs: dict[str, str]) -> Scored:
    L = n_layers(model)
    names = [tmpl.format(l=l) for tmpl in srcs.values() for l in range(L)]
    return collect_scored(model, ep, names)


@needs("blocks.{l}.hook_resid_post")
def value_manifold(
    model: torch.nn.Module,
    task: Task,
    *,
    untrained: torch.nn.Module | None = None,
    n: int = 256,
    seed: int = GEOMETRY_SEED,
    episodes: Episodes | None = None,
    train_frac: float = TRAIN_FRAC,
) -> dict[str, Any]:
    r"""PCA geometry of the attention output and of the residual stream at the scored positions.

    **Definitions** (per source, per layer; ``X`` = the vectors at every scored position of ``n``
    episodes).  PCA is the eigen-decomposition of the covariance of the *centred, unstandardised*
    ``X`` (the "final hidden states" pipeline of the authors' ``geometric_analysis.py``, not their
    StandardScaler variant).  ``pc1_var``, ``pc12_var``: variance fractions; ``participation_ratio``
    :math:`(\sum\lambda)^2/\sum\lambda^2`; ``dims_90``: components for 90% of the variance;
    ``spearman_pc1_entropy``: :math:`|\rho_S(\mathrm{PC1}, H_\text{Bayes})|` (a PC's sign is arbitrary);
    ``r2_entropy``: held-out R² of a closed-form ridge read-out of :math:`H_\text{Bayes}` from ``X``
    (fit on the first ``train_frac`` of the sequences, scored on the rest).

    **Position control.**  ``entropy_position_r2`` is the R² of :math:`H_\text{Bayes}` on a
    one-hot of the position (in-sample).  When it is ≈1 (bijection without replacement:
    :math:`H = \log_2(V-t+1)`), entropy and position cannot be told apart and the controlled
    statistics are reported as ``None`` with ``confounded: true``.  Otherwise
    ``partial_spearman_pc1_entropy_given_position`` is the correlation of the ranks of PC1 and of
    :math:`H` after subtracting each rank's per-position mean, and
    ``r2_entropy_residual_on_position`` the held-out ridge R² of :math:`H - E[H\mid\text{position}]`
    (means from the training sequences).

    **Nulls.**  ``r2_entropy_shuffled`` (entropy permuted among training rows), ``r2_entropy_position_only``
    (held-out R² of the per-position mean: what position alone explains) and every statistic for
    ``untrained``.  Works for every architecture (``attn_out`` only where it exists).
    """
    srcs = sources(model)
    ep = episodes_for(task, n, seed, episodes)
    sc = _collect(model, ep, srcs)
    train, test = split_rows(sc.seq, train_frac)
    H = sc.entropy
    onehot = position_onehot(sc.pos)
    coef = torch.linalg.lstsq(onehot, H[:, None]).solution
    ent_pos_r2 = r2(H, (onehot @ coef).squeeze(1))
    confounded = ent_pos_r2 is None or ent_pos_r2 > 0.999
    Hpos = H - residualise_on_position(H, sc.pos, fit=train)  # per-position train means
    pos_only = r2(H[test], Hpos[test])

    usc = _collect(untrained, ep, srcs) if untrained is not None else None
    L = n_layers(model)
    out_src: dict[str, Any] = {}
    scatter = None
    for sname, tmpl in srcs.items():
        layers = []
        for l in range(L):
            name = tmpl.format(l=l)
            st, scores = manifold_stats(sc.acts[name], sc, train, test, confounded, seed=l)
            st["layer"] = l
            if usc is not None:
                ust, _ = manifold_stats(usc.acts[name], usc, train, test, confounded, seed=l)
                st["untrained"] = {k: ust[k] for k in ("pc1_var", "pc12_var", "participation_ratio",
                                                       "spearman_pc1_entropy", "r2_entropy")}
            layers.append(st)
            if l == L - 1 and (scatter is None or sname == "resid"):
                g = torch.Generator().manual_seed(1)
                pick = torch.randperm(len(H), generator=g)[:SCATTER_POINTS]
                sd = scores[pick]
                scatter = {
                    "source": sname, "layer": l,
                    "pc1": [round(float(x), 5) for x in sd[:, 0]],
                    "pc2": [round(float(x), 5) for x in (sd[:, 1] if sd.shape[1] > 1 else torch.zeros(len(sd)))],
                    "entropy": [round(float(x), 5) for x in H[pick]],
                }
        out_src[sname] = layers
    last = out_src["resid"][-1] if "resid" in out_src else next(iter(out_src.values()))[-1]
    summary = {
        "final_resid_pc1_var": last["pc1_var"],
        "final_resid_pc12_var": last["pc12_var"],
        "final_resid_spearman_pc1_entropy": last["spearman_pc1_entropy"],
        "final_resid_r2_entropy": last["r2_entropy"],
        "final_resid_untrained_spearman": last.get("untrained", {}).get("spearman_pc1_entropy"),
        "final_resid_untrained_r2": last.get("untrained", {}).get("r2_entropy"),
        "entropy_position_r2": ent_pos_r2,
        "confounded_with_position": confounded,
    }
    summary["final_resid_spearman_abs_pc1_entropy"] = last.get("spearman_abs_pc1_entropy")
    summary["final_resid_spearman_pc2_entropy"] = last.get("spearman_pc2_entropy")
    if "attn_out" in out_src:
        a = out_src["attn_out"][-1]
        summary["final_attn_out_pc1_var"] = a["pc1_var"]
        summary["final_attn_out_spearman_pc1_entropy"] = a["spearman_pc1_entropy"]
        summary["final_attn_out_spearman_abs_pc1_entropy"] = a.get("spearman_abs_pc1_entropy")
    if not confounded:
        summary["final_resid_partial_spearman_given_position"] = last["partial_spearman_pc1_entropy_given_position"]
    return clean({
        "applicable": True,
        "definition": "covariance PCA (centred, unstandardised) of vectors at scored positions; |Spearman| of PC1 "
                      "with Bayes entropy; held-out ridge R^2 of Bayes entropy",
        "n_points": len(H),
        "n_train_points": int(train.sum()),
        "entropy_position_r2": ent_pos_r2,
        "confounded": confounded,
        "confound_note": ("Bayes entropy is a deterministic function of position here (e.g. bijection without "
                          "replacement): PC1-entropy statistics cannot be separated from position; use "
                          "replacement=True (sawtooth) to separate them") if confounded else None,
        "null": {"r2_entropy_position_only": pos_only},
        "sources": out_src,
        "scatter": scatter,
        "summary": summary,
    })


def value_manifold_figure(result: dict[str, Any], path: str | Path) -> Path:
    """Left: PC1 vs PC2 of the final layer coloured by Bayes entropy.  Right: |ρ(PC1, H)| and PC1
    variance by layer (dashed: untrained)."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"value manifold: {result.get('reason', 'not applicable')}", path)
    fig, axes = _plot.figure(1, 2, w=5.4, h=4.2)
    ax = axes[0, 0]
    sc = result["scatter"]
    pts = ax.scatter(sc["pc1"], sc["pc2"], c=sc["entropy"], cmap="viridis", s=6)
    fig.colorbar(pts, ax=ax, label="Bayes entropy (bits)")
    ax.set_xlabel("PC1")
    ax.set_ylabel("PC2")
    ax.set_title(f"{sc['source']}, layer {sc['layer']}")
    ax = axes[0, 1]
    for i, (sname, layers) in enumerate(result["sources"].items()):
        xs = [lay["layer"] for lay in layers]
        ax.plot(xs, _plot.nan(lay["spearman_pc1_entropy"] for lay in layers), "o-", color=f"C{2 * i}",
                label=f"{sname} |ρ(PC1,H)|")
        ax.plot(xs, _plot.nan(lay["pc1_var"] for lay in layers), "s-", color=f"C{2 * i + 1}", label=f"{sname} PC1 var")
        if "untrained" in layers[0]:
            ax.plot(xs, _plot.nan(lay["untrained"]["spearman_pc1_entropy"] for lay in layers), "o--", color=f"C{2 * i}",
                    alpha=0.5, label=f"{sname} untrained |ρ|")
    ax.set_xlabel("layer")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    title = "Value manifold by layer"
    if result.get("confounded"):
        title += "\n(entropy = f(position): confounded)"
    ax.set_title(title)
    return _plot.save(fig, path)

def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    prefix = "final_attn_out" if s.get("final_attn_out_pc1_var") is not None else "final_resid"
    pc1 = s.get(f"{prefix}_pc1_var")
    rho = s.get(f"{prefix}_spearman_pc1_entropy")
    fold = s.get(f"{prefix}_spearman_abs_pc1_entropy")
    r2 = s.get("final_resid_r2_entropy")
    un = s.get("final_resid_untrained_spearman")
    flags = []
    if s.get("confounded_with_position"):
        flags.append("posterior entropy is a function of position on this task, so PC1 ~ entropy may only encode "
                     "position: measure on the sawtooth (bijection with replacement)")
    if rho is not None and fold is not None and rho < 0.3 and fold >= 0.5:
        flags.append(f"PC1 is folded (|rho(|PC1 - median|, H)| = {fold:.2f} while |rho(PC1, H)| = {rho:.2f}): a "
                     "V-shaped manifold that a monotone correlation misses")
    if rho is None or pc1 is None:
        return []
    consistent = None if flags and s.get("confounded_with_position") else (
        pc1 >= 0.5 and max(rho, fold or 0.0) >= 0.5 and (un is None or max(rho, fold or 0.0) > un))
    meaning = (f"PC1 carries {pc1:.0%} of the variance and tracks posterior entropy (|rho| {max(rho, fold or 0):.2f}): "
               "an entropy-parameterised manifold" if consistent else
               f"PC1 carries {pc1:.0%} of the variance; its rank correlation with entropy is {rho:.2f}"
               + (f" (ridge R² of entropy from the full vector {r2:.2f})" if r2 is not None else ""))
    return [Reading(f"value_manifold.{prefix}_spearman_pc1_entropy", rho, "untrained |rho|", un,
                    "PC1 share ≥ 0.5 and |rho| ≥ 0.5 above the untrained model is consistent", consistent, "B7",
                    meaning, tuple(flags))]


register(Diagnostic("value_manifold", value_manifold, value_manifold_figure, _interpret, untrained=True, order=30,
                    version=2, claims=("B7", "B16")))
