"""Linear probes of the posterior and of its entropy, per layer; k-means of the final states on HMM
(the papers' "5-cluster" Mamba geometry, Paper I v3)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..evaluation.metrics import kl_bits
from ..tasks.base import Episodes, Task
from . import _plot
from .registry import Diagnostic, Reading, needs, register
from ._common import GEOMETRY_SEED, Scored, clean, collect_scored, episodes_for, has_hooks, n_layers
from .readouts import (TRAIN_FRAC, adjusted_rand_index, kmeans, r2, residualise_on_position, ridge_fit, ridge_r2,
                       split_rows)

__all__ = ["probes", "probes_figure", "posterior_probe", "cluster_states", "PROBE_FLOOR"]

PROBE_FLOOR = 1e-6
"""Probe probabilities are clipped at this floor before renormalising (keeps the KL finite)."""


def _probe_q(pred: torch.Tensor) -> torch.Tensor:
    q = pred.clamp_min(PROBE_FLOOR)
    return q / q.sum(-1, keepdim=True)


def posterior_probe(X: torch.Tensor, P: torch.Tensor, seq: torch.Tensor, train: torch.Tensor,
                    test: torch.Tensor) -> dict[str, float | None]:
    r"""Ridge regression of the posterior probabilities ``P [N,C]`` on ``X [N,d]`` (fitted on ``train``),
    predictions clipped at :data:`PROBE_FLOOR` and renormalised to ``q``; returns the held-out mean
    ``KL(p‖q)`` in bits, the held-out R² of the probabilities and the chosen ridge strength."""
    model = ridge_fit(X[train], P[train], seq[train])
    pred = model.predict(X[test])
    q = _probe_q(pred)
    return {"kl_bits": float(kl_bits(P[test], q).mean()), "r2": r2(P[test], pred), "alpha": model.alpha}


def cluster_states(X: torch.Tensor, labels: torch.Tensor, k: int, seed: int = 0) -> dict[str, Any]:
    """k-means of ``X`` into ``k`` clusters vs ``labels``: the adjusted Rand index, and a permuted-label
    null (ARI of the same clustering against randomly permuted labels)."""
    got, inertia = kmeans(X, k, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    perm = labels[torch.randperm(len(labels), generator=g)]
    return {"ari": adjusted_rand_index(got, labels), "ari_permuted_labels": adjusted_rand_index(got, perm),
            "inertia": inertia, "labels": got}


def _minus_token_means(X: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    r"""``X`` with each row's token-class mean removed: :math:`x_i - \bar x_{\text{token}(i)}` (what is left of
    a state once the imprint of the token it has just read is taken out)."""
    out = X.clone()
    for t in token.unique():
        sel = token == t
        out[sel] -= X[sel].mean(0)
    return out


def _layer_names(model: torch.nn.Module) -> list[str]:
    return [f"blocks.{l}.hook_resid_post" for l in range(n_layers(model))]


def _probe_layers(sc: Scored, names: list[str], train: torch.Tensor, test: torch.Tensor, seed: int) -> list[dict[str, Any]]:
    P, H = sc.posterior, sc.entropy
    g = torch.Generator().manual_seed(seed)
    idx = train.nonzero().squeeze(1)
    shuf = idx[torch.randperm(len(idx), generator=g)]
    Ps, Hs = P.clone(), H.clone()
    Ps[idx], Hs[idx] = P[shuf], H[shuf]
    out = []
    for l, name in enumerate(names):
        X = sc.acts[name]
        pp = posterior_probe(X, P, sc.seq, train, test)
        sh = posterior_probe(X, Ps, sc.seq, train, test)
        out.append({
            "layer": l,
            "posterior_kl_bits": pp["kl_bits"],
            "posterior_r2": pp["r2"],
            "posterior_kl_shuffled": sh["kl_bits"],
            "entropy_r2": ridge_r2(X, H, sc.seq, train, test),
            "entropy_r2_shuffled": ridge_r2(X, Hs, sc.seq, train, test),
            "ridge_alpha": pp["alpha"],
        })
    return out


@needs("blocks.{l}.hook_resid_post")
def probes(
    model: torch.nn.Module,
    task: Task,
    *,
    untrained: torch.nn.Module | None = None,
    n: int = 256,
    seed: int = GEOMETRY_SEED,
    episodes: Episodes | None = None,
    train_frac: float = TRAIN_FRAC,
    clusters: bool | None = None,
) -> dict[str, Any]:
    r"""Closed-form linear probes of the residual stream, per layer, at the scored positions.

    **Representation.**  ``blocks.{l}.hook_resid_post`` (the block output: the residual stream for
    the transformer and MLP, ``x + h`` for the LSTM, ``x + mixer`` for Mamba, whose full SSM state
    ``[d_inner, d_state]`` is not probed).

    **Posterior probe.**  Ridge regression (intercept; strength chosen on an inner validation split
    of the training sequences) from the representation to the posterior *probability* vector;
    the prediction is clipped at ``1e-6`` and renormalised to ``q``; reported: held-out mean
    ``KL(p_Bayes ‖ q)`` in bits (``posterior_kl_bits``) and the probabilities' held-out R².
    **Entropy probe.**  Ridge read-out of ``H_Bayes`` (bits), held-out R².  Train/test: the first
    ``train_frac`` of the sequences vs the rest.

    **Nulls.**  The same probes on ``untrained``; on targets permuted among training rows
    (``*_shuffled``); the per-position mean posterior fitted on the training sequences
    (``position_only``: what knowing only the position gives); the uniform distribution
    (``KL = log2 C − H``); and, for reference, the model's own output ``model_kl_bits``.

    **Clusters** (HMM; the papers' claim concerns Mamba, computed for every architecture to compare):
    k-means (``k = S``, k-means++, 4 restarts) of the final normed states (``hook_final``, what the
    output head reads) at the observation positions against the posterior's argmax state, scored by
    the adjusted Rand index; nulls: permuted labels, the untrained model, and k-means of the exact
    posterior vectors themselves (how clustered the targets already are).  The competing explanation is
    scored beside it: the ARI of the same clusters against the token just read (``ari_current_token``: a
    state dominated by its input clusters by observation, whatever it knows of the hidden state), and the
    ARI of k-means run again after each token's mean state is removed (``ari_token_removed``, with its
    untrained null).  ``entropy_within_cluster_std``
    vs ``entropy_std``: entropy still varies inside each cluster (the papers' observation).
    """
    ep = episodes_for(task, n, seed, episodes)
    do_clusters = task.discrete_latent_state if clusters is None else clusters
    names = _layer_names(model)
    extra = ["hook_final"] if do_clusters and has_hooks(model, "hook_final") else []
    sc = collect_scored(model, ep, names + extra)
    train, test = split_rows(sc.seq, train_frac)
    P, H = sc.posterior, sc.entropy
    C = P.shape[1]

    layers = _probe_layers(sc, names, train, test, seed=1)
    usc = None
    if untrained is not None:
        usc = collect_scored(untrained, ep, names + extra)
        for lay, ul in zip(layers, _probe_layers(usc, names, train, test, seed=1)):
            lay["untrained"] = {k: ul[k] for k in ("posterior_kl_bits", "posterior_r2", "entropy_r2")}

    # position-only null: the per-position mean posterior / entropy of the training sequences
    Ppos = P - torch.stack([residualise_on_position(P[:, c], sc.pos, fit=train) for c in range(C)], 1)
    Hpos = H - residualise_on_position(H, sc.pos, fit=train)
    model_q = torch.softmax(sc.logits, -1)
    null = {
        "position_only_kl_bits": float(kl_bits(P[test], _probe_q(Ppos[test])).mean()),
        "position_only_entropy_r2": r2(H[test], Hpos[test]),
        "uniform_kl_bits": float((math.log2(C) - H[test]).mean()),
        "model_kl_bits": float(kl_bits(P[test], model_q[test]).mean()),
    }
    best = min(layers, key=lambda r: r["posterior_kl_bits"])
    summary: dict[str, Any] = {
        "best_layer": best["layer"],
        "best_posterior_kl_bits": best["posterior_kl_bits"],
        "final_posterior_kl_bits": layers[-1]["posterior_kl_bits"],
        "final_entropy_r2": layers[-1]["entropy_r2"],
        "final_untrained_posterior_kl_bits": layers[-1].get("untrained", {}).get("posterior_kl_bits"),
        "final_untrained_entropy_r2": layers[-1].get("untrained", {}).get("entropy_r2"),
        "position_only_kl_bits": null["position_only_kl_bits"],
        "model_kl_bits": null["model_kl_bits"],
    }
    out: dict[str, Any] = {
        "applicable": True,
        "definition": "ridge from blocks.l.hook_resid_post at scored positions to the posterior probabilities "
                      "(clipped at 1e-6, renormalised; held-out KL(Bayes||probe) bits) and to Bayes entropy "
                      "(held-out R^2)",
        "n_points": len(H),
        "n_train_points": int(train.sum()),
        "layers": layers,
        "null": null,
    }
    if do_clusters and extra:
        k = C
        labels = P.argmax(-1)
        X = sc.acts["hook_final"]
        token = ep.tokens[sc.seq, sc.pos]  # the observation each state has just read
        cl = cluster_states(X, labels, k, seed=0)
        got = cl.pop("labels")
        # the competing explanation: a state is dominated by the token it has just read, so k clusters can be
        # the k observations rather than the k states; scored against the current token, and the clusters
        # found again once each token's mean state is removed
        token_removed = cluster_states(_minus_token_means(X, token), labels, k, seed=0)
        within = [float(H[got == j].std()) for j in range(k) if int((got == j).sum()) > 1]
        post_cl = cluster_states(P, labels, k, seed=0)
        post_cl.pop("labels")
        res = {
            "representation": "hook_final (final RMSNorm/LayerNorm output) at scored positions",
            "k": k,
            "ari": cl["ari"],
            "null": {
                "ari_permuted_labels": cl["ari_permuted_labels"],
                "ari_kmeans_on_exact_posteriors": post_cl["ari"],
            },
            "ari_current_token": adjusted_rand_index(got, token),
            "ari_token_removed": token_removed["ari"],
            "entropy_std": float(H.std()),
            "entropy_within_cluster_std": sum(within) / len(within) if within else None,
            "cluster_sizes": [int((got == j).sum()) for j in range(k)],
        }
        if usc is not None:
            ucl = cluster_states(usc.acts["hook_final"], labels, k, seed=0)
            res["null"]["ari_untrained"] = ucl["ari"]
            res["null"]["ari_token_removed_untrained"] = cluster_states(
                _minus_token_means(usc.acts["hook_final"], token), labels, k, seed=0)["ari"]
        out["clusters"] = res
        summary["cluster_ari"] = cl["ari"]
        summary["cluster_ari_untrained"] = res["null"].get("ari_untrained")
        summary["cluster_ari_exact_posteriors"] = post_cl["ari"]
        summary["cluster_ari_current_token"] = res["ari_current_token"]
        summary["cluster_ari_token_removed"] = res["ari_token_removed"]
        summary["cluster_ari_token_removed_untrained"] = res["null"].get("ari_token_removed_untrained")
    out["summary"] = summary
    return clean(out)


def probes_figure(result: dict[str, Any], path: str | Path) -> Path:
    """Left: held-out probe KL per layer (log) with its nulls.  Right: entropy-probe R² per layer."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"probes: {result.get('reason', 'not applicable')}", path)
    fig, axes = _plot.figure(1, 2, w=5.4, h=4.0)
    layers = result["layers"]
    xs = [r["layer"] for r in layers]
    nl = result["null"]
    ax = axes[0, 0]
    ax.plot(xs, _plot.nan(r["posterior_kl_bits"] for r in layers), "o-", label="probe (trained)")
    if "untrained" in layers[0]:
        ax.plot(xs, _plot.nan(r["untrained"]["posterior_kl_bits"] for r in layers), "x--", color="0.5", label="untrained")
    ax.plot(xs, _plot.nan(r["posterior_kl_shuffled"] for r in layers), ":", color="C1", label="shuffled targets")
    ax.axhline(nl["position_only_kl_bits"], color="C3", ls="--", label="position only")
    ax.axhline(nl["model_kl_bits"], color="C2", ls="-.", label="model output")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xlabel("layer")
    ax.set_ylabel("held-out KL(Bayes ‖ probe), bits")
    ax.set_xticks(xs)
    ax.legend(fontsize=7)
    ax.set_title("Posterior probe")
    ax = axes[0, 1]
    ax.plot(xs, _plot.nan(r["entropy_r2"] for r in layers), "o-", label="probe (trained)")
    if "untrained" in layers[0]:
        ax.plot(xs, _plot.nan(r["untrained"]["entropy_r2"] for r in layers), "x--", color="0.5", label="untrained")
    ax.plot(xs, _plot.nan(r["entropy_r2_shuffled"] for r in layers), ":", color="C1", label="shuffled")
    if nl.get("position_only_entropy_r2") is not None:
        ax.axhline(nl["position_only_entropy_r2"], color="C3", ls="--", label="position only")
    ax.set_ylim(-0.1, 1.02)
    ax.set_xlabel("layer")
    ax.set_ylabel("held-out R² of Bayes entropy")
    ax.set_xticks(xs)
    title = "Entropy probe"
    if "clusters" in result:
        c = result["clusters"]
        title += f"\nk-means ARI {c['ari']:.2f} (exact posteriors {c['null']['ari_kmeans_on_exact_posteriors']:.2f})"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return _plot.save(fig, path)

def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    out = []
    best, pos = s.get("best_posterior_kl_bits"), s.get("position_only_kl_bits")
    if best is not None and pos is not None:
        un = s.get("final_untrained_posterior_kl_bits")
        ok = best <= 0.5 * pos and (un is None or best < un)
        out.append(Reading("probes.best_posterior_kl_bits", best, "position-only probe", pos,
                           "at most half the position-only probe's KL is consistent", ok, "B10",
                           f"a linear probe of layer {s.get('best_layer')} reads the posterior to {best:.3g} bits"))
    ari, ceil = s.get("cluster_ari"), s.get("cluster_ari_exact_posteriors")
    if ari is not None and ceil is not None:
        ok = ari >= 0.5 * ceil and ari > (s.get("cluster_ari_untrained") or 0.0)
        out.append(Reading("probes.cluster_ari", ari, "exact posteriors' ARI (the ceiling)", ceil,
                           "at least half the ceiling is consistent", ok, "B14",
                           "k-means of the final states recovers the argmax hidden state" if ok else
                           "the final states do not cluster by hidden state"))
    return out


register(Diagnostic("probes", probes, probes_figure, _interpret, untrained=True, order=60, claims=("B10", "B14", "B15")))
