r"""Belief steering with an exact target: move the residual stream along a probe's directions until the probe
reads *another* context's posterior, let the rest of the model run, and score its prediction against that
context's exact posterior, in bits.

A probe (:mod:`windtunnel.geometry.probes`) shows that the posterior can be *read* from layer ``l``; steering asks
whether the model *uses* what the probe reads.  windtunnel knows the exact posterior of every context, so the
edit has an exact target.

**Pairs.**  The episodes are split as the probes split them (:func:`~windtunnel.geometry.readouts.split_rows`):
the first ``train_frac`` of the sequences fit the probe (held in), the rest are the held-out episodes ``A``.
Each ``A`` gets a counterfactual context ``B`` (:func:`counterfactual_pairs`) and one position ``t``, drawn
among the positions scored in both where the two exact posteriors differ (total variation above ``1e-6``):

* a task *without* a hidden state of its own (``Task.belief`` is ``None``: the bijection, recall, the coin …):
  ``B`` is another held-out episode, whole (a bijection with another permutation, read to the same position:
  the posterior is uniform over a different set of unseen values);
* a task *with* one (HMM, Mess3): ``B`` keeps ``A``'s tokens before the first scored position — what fixes the
  process, the HMM's header — and takes another held-out episode's tokens from there on: ``A``'s HMM, another
  episode's observations (any observation sequence is possible under every HMM of the task, whose emissions are
  at least 0.05).  The two posteriors are then distributions over the same hidden states.

**Probe and edit.**  At each layer ``l`` (``blocks.{l}.hook_resid_post``, and the embedding,
``blocks.0.hook_resid_pre``, as ``l = -1``) the posterior probe of
:mod:`~windtunnel.geometry.probes` (ridge with intercept, :func:`~windtunnel.geometry.readouts.ridge_fit`, on the
held-in episodes' scored positions) reads :math:`\hat P(x) = xW + b` (``W`` is ``d × C``).  The edit of ``A``'s
state :math:`x_A` at ``t`` is the smallest one (Euclidean norm) that makes the probe read ``B``'s exact posterior:

.. math:: \delta = (p_B(t) - \hat P(x_A))\, W^{+}, \qquad
          \hat P(x_A + \delta) = \hat P(x_A) + (p_B(t) - \hat P(x_A))\,\Pi

with :math:`W^{+}` the pseudo-inverse (singular values below ``1e-6`` of the largest dropped) and :math:`\Pi =
W^{+}W` the projector on the probe's row space.  Probabilities and the probe's readings both sum to 1, so the
difference is orthogonal to the all-ones vector, which ``W`` maps to 0; when ``W`` has rank ``C − 1`` the probe
then reads ``p_B(t)`` exactly (``probe_reads_target_tv``, the mean total variation between the edited state's
probe reading and ``p_B(t)``, checks it).  :math:`\delta` is added to the stream at
``(l, t)`` only and the model runs on from there.

The Euclidean norm is the stream's coordinates' own; a probe can lean on directions in which the stream barely
varies, and a tiny move along them can read as a large change of belief that the rest of the model never sees.
So the same constraint is also solved in the metric of the stream's spread (``data_metric``): with
:math:`\Sigma` the covariance of the held-in states, the edit minimising :math:`\delta\Sigma^{-1}\delta^\top`
subject to :math:`\delta W = p_B(t) - \hat P(x_A)` is

.. math:: \delta_\Sigma = (p_B(t) - \hat P(x_A))\,(W^\top \Sigma W)^{+}\, W^\top \Sigma,

a move along the directions the stream actually uses (its random control: a Gaussian draw with covariance
:math:`\Sigma`, scaled to :math:`\|\delta_\Sigma\|`).

**Scores** (bits, at position ``t``, against ``B``'s exact posterior ``p_B(t)``), per layer:

* ``steered`` — :math:`\mathrm{KL}(p_B \| m_{A+\delta})`;
* ``no_edit`` — :math:`\mathrm{KL}(p_B \| m(A))`, the model left alone (the same at every layer);
* ``random`` — :math:`\mathrm{KL}(p_B \| m_{A+\rho})`, :math:`\rho` a uniformly random direction with
  :math:`\|\rho\| = \|\delta\|` (per pair); both, and their comparisons, again under ``data_metric``;
* ``reads_B`` — :math:`\mathrm{KL}(p_B \| m(B))`, the model reading ``B`` itself: the floor a perfect edit reaches;
* the **probe-fails control**: the same edit at the site whose probe reads the posterior worst (lowest held-out
  R²; usually the embedding, which holds only the token and its position), compared with the best-probe layer
  (lowest held-out probe KL) on the same pairs.

The share of the counterfactual recovered, on a log scale as in :mod:`~windtunnel.geometry.counterfactual`,

.. math:: r(l) = \frac{\log \mathrm{KL}_{\text{no edit}} - \log \mathrm{KL}_{\text{steered}}(l)}{\log
          \mathrm{KL}_{\text{no edit}} - \log \mathrm{KL}_{\text{reads }B}}

(1: the edit moves the model as close to ``p_B`` as reading ``B`` does; 0: not at all; ``None`` when reading
``B`` brings the model less than 2× closer to ``p_B`` than reading ``A``).  **Statistics**: every mean has a
percentile bootstrap interval over the held-out pairs, and ``steered`` is compared with each matched control
(``no_edit``, ``random`` at the same layer; the probe-fails layer) by a paired sign-flip p-value
(:mod:`windtunnel.evaluation.stats`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch

from ..evaluation.metrics import _kl_from_log
from ..evaluation.stats import bootstrap_mean, paired_effect
from ..tasks.base import Episodes, Task
from ..evaluation.log_axis import drawable, log_scale, loggable
from . import _plot
from ._common import GEOMETRY_SEED, clean, collect_scored, device_of, episodes_for, eval_mode, n_layers, not_applicable
from .probes import posterior_probe
from .readouts import TRAIN_FRAC, ridge_fit, split_rows
from .registry import Diagnostic, Reading, needs, register

__all__ = ["steering", "steering_figure", "counterfactual_pairs", "Pairs", "run_patched", "setter", "adder",
           "share_recovered",
           "PINV_RTOL", "MIN_TV"]

PINV_RTOL = 1e-6
"""Singular values of the probe's ``W`` below this fraction of the largest are dropped from its pseudo-inverse."""

MIN_TV = 1e-6
"""A pair's position must move the exact posterior by more than this (total variation) to be drawn."""

EMBED = -1
"""The ``layer`` of the embedding site, ``blocks.0.hook_resid_pre`` (what enters block 0: the token and its position
alone), steered beside each block's output as the place where a probe should fail."""

RESOLVED = math.log(2.0)
"""A share is defined where reading ``B`` brings the model at least 2× closer to ``p_B`` than reading ``A``."""


# --- pairs and patched runs (shared with state_patching) -------------------------------------------
class Pairs:
    """Held-out episodes ``A``, their counterfactual contexts ``B`` and one position each (module docstring).

    ``rows``: the ``A`` episodes' indices in the episodes read; ``a``/``b``: the inputs (``tokens``, and
    ``features`` for a task with real-valued inputs); ``post_a``/``post_b``: the exact posteriors ``[n, T, C]``;
    ``pos``: the position ``t`` of each pair; ``donor``: the index, among the pairs, of the episode ``B`` was
    taken from; ``prefix``: how many leading tokens ``B`` keeps from ``A`` (the HMM's header; 0 for a whole other
    episode)."""

    def __init__(self, rows: torch.Tensor, a: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                 post_a: torch.Tensor, post_b: torch.Tensor, mask_a: torch.Tensor, mask_b: torch.Tensor,
                 pos: torch.Tensor, donor: torch.Tensor, prefix: int, hidden_state: bool) -> None:
        self.rows, self.a, self.b, self.post_a, self.post_b = rows, a, b, post_a, post_b
        self.mask_a, self.mask_b, self.pos, self.donor, self.prefix = mask_a, mask_b, pos, donor, prefix
        self.hidden_state = hidden_state

    def __len__(self) -> int:
        return len(self.rows)

    def at_t(self, post: torch.Tensor) -> torch.Tensor:
        """``post [n, T, C]`` at each pair's position: ``[n, C]``."""
        return post[torch.arange(len(self)), self.pos]


def has_hidden_state(task: Task, ep: Episodes) -> bool:
    """Whether ``task`` defines an exact belief over a hidden state (``Task.belief`` not ``None``) here."""
    return task.belief(ep.tokens[:1], None if ep.features is None else ep.features[:1]) is not None


def counterfactual_pairs(task: Task, ep: Episodes, rows: torch.Tensor, seed: int) -> Pairs | None:
    r"""The counterfactual context ``B`` of each episode ``A`` of ``ep[rows]`` and one position ``t`` of each
    (module docstring): ``B`` takes the tokens of the next episode of ``rows`` (cyclically) — whole for a task
    without a hidden state, from the first scored position on (``A``'s prefix kept) for a task with one; ``t`` is
    drawn uniformly (``seed``) among the positions scored in both whose exact posteriors differ by more than
    :data:`MIN_TV` in total variation.  Pairs without such a position are dropped; ``None`` when fewer than two
    are left."""
    rows = rows.long()
    n = len(rows)
    if n < 2:
        return None
    donor = torch.roll(torch.arange(n), -1)
    tok_a = ep.tokens[rows]
    feat_a = None if ep.features is None else ep.features[rows]
    hidden = has_hidden_state(task, ep)
    scored_any = ep.mask.any(0).nonzero()
    prefix = int(scored_any[0]) if hidden and len(scored_any) else 0
    tok_b = tok_a.clone()
    tok_b[:, prefix:] = tok_a[donor, prefix:]
    feat_b = None
    if feat_a is not None:
        feat_b = feat_a.clone()
        feat_b[:, prefix:] = feat_a[donor, prefix:]
    post_a = ep.posterior[rows].double()
    post_b = task.posterior(tok_b, feat_b).double()
    mask_a, mask_b = ep.mask[rows], task.scored_mask(tok_b, feat_b)
    tv = 0.5 * (post_a - post_b).abs().sum(-1)
    ok = mask_a & mask_b & (tv > MIN_TV)
    g = torch.Generator().manual_seed(int(seed))
    score = torch.rand(ok.shape, generator=g).masked_fill(~ok, -1.0)
    pos = score.argmax(1)
    keep = ok.any(1)
    if int(keep.sum()) < 2:
        return None
    # the donor index is kept as an index among the kept pairs where the donor survives (else -1)
    new_index = torch.full((n,), -1, dtype=torch.long)
    new_index[keep] = torch.arange(int(keep.sum()))
    a = {"tokens": tok_a[keep]} | ({"features": feat_a[keep]} if feat_a is not None else {})
    b = {"tokens": tok_b[keep]} | ({"features": feat_b[keep]} if feat_b is not None else {})
    return Pairs(rows[keep], a, b, post_a[keep], post_b[keep], mask_a[keep], mask_b[keep], pos[keep],
                 new_index[donor[keep]], prefix, hidden)


def run_patched(model: torch.nn.Module, inputs: dict[str, torch.Tensor], pos: torch.Tensor,
                names: list[str] | None = None,
                patch: tuple[str, Callable[[torch.Tensor, slice], torch.Tensor]] | None = None,
                chunk: int = 128) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""Run ``model`` on ``inputs`` (rows ``[n, T]``): natural-log probabilities ``[n, T, C]`` (float64, CPU) and,
    for each of ``names``, the activation at each row's position ``pos`` (``[n, d]``, float64, CPU).

    ``patch = (name, edit)``: at hook ``name`` the vectors at the rows' positions, ``x [m, d]`` (float64) for the
    rows ``sl`` of a chunk, are replaced by ``edit(x, sl)`` (:func:`setter`, :func:`adder`) — the rest of the
    model then runs on the edited stream; every other position is left as it is."""
    dev = device_of(model)
    outs: list[torch.Tensor] = []
    caches: dict[str, list[torch.Tensor]] = {nm: [] for nm in names or []}
    n = len(pos)
    with eval_mode(model):
        for i in range(0, n, chunk):
            sl = slice(i, min(i + chunk, n))
            p = pos[sl].to(dev)
            ar = torch.arange(len(p), device=dev)
            hooks = []
            cache: dict[str, torch.Tensor] = {}
            if patch is not None:
                pname, edit = patch

                def put(x: torch.Tensor, _: str, p: torch.Tensor = p, ar: torch.Tensor = ar, sl: slice = sl,
                        edit: Callable[[torch.Tensor, slice], torch.Tensor] = edit) -> torch.Tensor:
                    x = x.clone()
                    new = edit(x[ar, p].double().cpu(), sl)
                    x[ar, p] = new.to(device=x.device, dtype=x.dtype)
                    return x

                hooks.append((pname, put))
            for nm in names or []:
                hooks.append((nm, lambda x, key, c=cache, p=p, ar=ar:
                              c.__setitem__(key, x[ar, p].detach().double().cpu())))
            with model.hooks(hooks):
                logits = model(**{k: v[sl].to(dev) for k, v in inputs.items()})
            outs.append(torch.log_softmax(logits.double().cpu(), -1))
            for nm in names or []:
                caches[nm].append(cache[nm])
    return torch.cat(outs), {nm: torch.cat(v) for nm, v in caches.items()}


def setter(vectors: torch.Tensor) -> Callable[[torch.Tensor, slice], torch.Tensor]:
    """An edit for :func:`run_patched` that replaces each row's vector by ``vectors [n, d]`` (patching)."""
    return lambda x, rows: vectors[rows]


def adder(deltas: torch.Tensor) -> Callable[[torch.Tensor, slice], torch.Tensor]:
    """An edit for :func:`run_patched` that adds ``deltas [n, d]`` to each row's vector (steering)."""
    return lambda x, rows: x + deltas[rows]


def same_norm_random(like: torch.Tensor, g: torch.Generator, cov: torch.Tensor | None = None) -> torch.Tensor:
    """Per row, a random direction scaled to that row's norm in ``like`` ``[n, d]``: uniform on the sphere (a
    normalised standard Gaussian), or, given ``cov`` ``[d, d]``, a normalised draw of the Gaussian with that
    covariance (a direction along which the stream itself varies)."""
    z = torch.randn(like.shape, generator=g, dtype=torch.float64)
    if cov is not None:
        evals, evecs = torch.linalg.eigh(cov.double())
        z = z @ (evecs * evals.clamp_min(0).sqrt()).T
    return z / z.norm(dim=-1, keepdim=True).clamp_min(1e-300) * like.double().norm(dim=-1, keepdim=True)


def share_recovered(k_none: float | None, k_edit: float | None, k_ref: float | None) -> float | None:
    r"""The log-scale share of the way from ``k_none`` (no intervention) to ``k_ref`` (the model reading the
    counterfactual itself) that ``k_edit`` covers: :math:`\log(k_{none}/k_{edit}) / \log(k_{none}/k_{ref})`;
    ``None`` unless :math:`k_{none} \ge 2 k_{ref}` (module docstring) or a value is missing."""
    if k_none is None or k_edit is None or k_ref is None or k_none <= 0 or k_ref <= 0:
        return None
    span = math.log(k_none / k_ref)
    if span < RESOLVED:
        return None
    return math.log(k_none / max(k_edit, 1e-300)) / span


def kl_at(post: torch.Tensor, log_q: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Per pair, ``KL(post ‖ q)`` in bits at its position: ``[n]``."""
    ar = torch.arange(len(pos))
    return _kl_from_log(post[ar, pos], log_q[ar, pos])


# --- the diagnostic --------------------------------------------------------------------------------
@needs("blocks.{l}.hook_resid_pre", "blocks.{l}.hook_resid_post")
def steering(model: torch.nn.Module, task: Task, *, episodes: Episodes | None = None, n: int = 256,
             seed: int = GEOMETRY_SEED, n_boot: int = 1000, train_frac: float = TRAIN_FRAC,
             chunk: int = 128) -> dict[str, Any]:
    """Belief steering along each layer's posterior probe toward a counterfactual context's exact posterior,
    scored against it with its controls, intervals and p-values (module docstring), on ``episodes`` (or ``n``
    sampled with ``seed``)."""
    ep = episodes_for(task, n, seed, episodes)
    L = n_layers(model)
    # the embedding (what enters block 0: token and position alone) then each block's output
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(L)]
    sites = [EMBED] + list(range(L))
    sc = collect_scored(model, ep, names)
    if sc.n_seq < 4:
        return not_applicable("task episodes too few to hold some out (steering needs at least 4)")
    train, test = split_rows(sc.seq, train_frac)
    held_out = torch.unique(sc.seq[test])
    pairs = counterfactual_pairs(task, ep, held_out, seed + 1)
    if pairs is None:
        return not_applicable(f"task {task.name!r}: no held-out pair of episodes whose exact posteriors differ at a "
                              "position scored in both")
    log_a, acts_a = run_patched(model, pairs.a, pairs.pos, names, chunk=chunk)
    log_b, _ = run_patched(model, pairs.b, pairs.pos, chunk=chunk)
    target = pairs.at_t(pairs.post_b)
    k_none = kl_at(pairs.post_b, log_a, pairs.pos)
    k_ref = kl_at(pairs.post_b, log_b, pairs.pos)
    g = torch.Generator().manual_seed(seed + 3)

    def mean_ci(x: torch.Tensor, s: int) -> dict[str, Any]:
        return bootstrap_mean(x, n_boot=n_boot, seed=s)

    none_stats, ref_stats = mean_ci(k_none, seed + 4), mean_ci(k_ref, seed + 4)
    layers: list[dict[str, Any]] = []
    steered_by_layer: list[torch.Tensor] = []
    steered_dm_by_layer: list[torch.Tensor] = []
    for l, name in zip(sites, names):
        X, P = sc.acts[name], sc.posterior
        pp = posterior_probe(X, P, sc.seq, train, test)
        probe = ridge_fit(X[train], P[train], sc.seq[train])
        W, b = probe.W.double(), probe.b.double()
        W_pinv = torch.linalg.pinv(W, rtol=PINV_RTOL)
        x_a = acts_a[name]
        read_a = x_a @ W + b
        delta = (target - read_a) @ W_pinv
        read_edit = (x_a + delta) @ W + b
        log_s, _ = run_patched(model, pairs.a, pairs.pos, patch=(name, adder(delta)), chunk=chunk)
        log_r, _ = run_patched(model, pairs.a, pairs.pos,
                               patch=(name, adder(same_norm_random(delta, g))), chunk=chunk)
        k_s = kl_at(pairs.post_b, log_s, pairs.pos)
        k_r = kl_at(pairs.post_b, log_r, pairs.pos)
        steered_by_layer.append(k_s)
        s_stats, r_stats = mean_ci(k_s, seed + 4), mean_ci(k_r, seed + 4)
        # the same constraint in the metric of the stream's own spread: min δ Σ⁻¹ δᵀ s.t. δW = Δ,
        # solved by δ = Δ (WᵀΣW)⁺ WᵀΣ
        Xc = X[train] - X[train].mean(0)
        cov = Xc.T @ Xc / max(len(Xc) - 1, 1)
        M = torch.linalg.pinv(W.T @ cov @ W, rtol=PINV_RTOL) @ W.T @ cov
        delta_d = (target - read_a) @ M
        log_d, _ = run_patched(model, pairs.a, pairs.pos, patch=(name, adder(delta_d)), chunk=chunk)
        rand_d = same_norm_random(delta_d, g, cov)
        log_rd, _ = run_patched(model, pairs.a, pairs.pos, patch=(name, adder(rand_d)), chunk=chunk)
        k_d, k_rd = kl_at(pairs.post_b, log_d, pairs.pos), kl_at(pairs.post_b, log_rd, pairs.pos)
        d_stats, rd_stats = mean_ci(k_d, seed + 4), mean_ci(k_rd, seed + 4)
        steered_dm_by_layer.append(k_d)
        layers.append({
            "layer": l,
            "probe_r2": pp["r2"],
            "probe_kl_bits": pp["kl_bits"],
            "probe_rank": int(torch.linalg.matrix_rank(W, rtol=PINV_RTOL)),
            "edit_norm": float(delta.norm(dim=-1).mean()),
            "edit_norm_relative": float((delta.norm(dim=-1) / x_a.norm(dim=-1).clamp_min(1e-300)).mean()),
            "probe_reads_target_tv": float(0.5 * (read_edit - target).abs().sum(-1).mean()),
            "steered": s_stats,
            "random": r_stats,
            "recovered": share_recovered(none_stats["mean"], s_stats["mean"], ref_stats["mean"]),
            "random_recovered": share_recovered(none_stats["mean"], r_stats["mean"], ref_stats["mean"]),
            "vs_no_edit": paired_effect(k_s, k_none, n_boot=n_boot, seed=seed + 5),
            "vs_random": paired_effect(k_s, k_r, n_boot=n_boot, seed=seed + 6),
            "data_metric": {
                "edit_norm_relative": float((delta_d.norm(dim=-1) / x_a.norm(dim=-1).clamp_min(1e-300)).mean()),
                "probe_reads_target_tv": float(0.5 * ((x_a + delta_d) @ W + b - target).abs().sum(-1).mean()),
                "steered": d_stats,
                "random": rd_stats,
                "recovered": share_recovered(none_stats["mean"], d_stats["mean"], ref_stats["mean"]),
                "vs_no_edit": paired_effect(k_d, k_none, n_boot=n_boot, seed=seed + 5),
                "vs_random": paired_effect(k_d, k_rd, n_boot=n_boot, seed=seed + 6),
            },
        })
    every = range(len(layers))
    best = min(every, key=lambda i: layers[i]["probe_kl_bits"])
    r2s = [lay["probe_r2"] if lay["probe_r2"] is not None else -math.inf for lay in layers]
    worst = min(every, key=lambda i: r2s[i])
    vs_fails = paired_effect(steered_by_layer[best], steered_by_layer[worst], n_boot=n_boot, seed=seed + 7) \
        if worst != best else None
    vs_fails_dm = paired_effect(steered_dm_by_layer[best], steered_dm_by_layer[worst], n_boot=n_boot, seed=seed + 7) \
        if worst != best else None
    bl = layers[best]
    best_l, worst_l = bl["layer"], layers[worst]["layer"]
    return clean({
        "applicable": True,
        "definition": "at layer l (blocks.l.hook_resid_post; l = -1: the embedding, blocks.0.hook_resid_pre) and a "
                      "held-out position t, A's state moved by the "
                      "minimum-norm edit delta = (p_B(t) - probe(x_A)) W^+ that makes the layer's ridge probe read "
                      "B's exact posterior; KL(p_B(t) || model) in bits at t; controls: no edit, a random direction "
                      "of |delta|, the layer whose probe reads worst; reads_B: the model reading B; recovered = "
                      "log(KL_none/KL_steered)/log(KL_none/KL_reads_B); 95% bootstrap intervals over pairs, "
                      "paired sign-flip p-values",
        "counterfactual_context": ("A's prefix (before the first scored position) kept, another held-out episode's "
                                   "tokens after it" if pairs.hidden_state else
                                   "another held-out episode, whole, at the same position"),
        "n_pairs": len(pairs),
        "n_train_episodes": int(torch.unique(sc.seq[train]).numel()),
        "pair_tv": float(0.5 * (target - pairs.at_t(pairs.post_a)).abs().sum(-1).mean()),
        "no_edit": none_stats,
        "reads_B": ref_stats,
        "reads_A_kl_to_own": float(kl_at(pairs.post_a, log_a, pairs.pos).mean()),
        "layers": layers,
        "best_probe_layer": best_l,
        "fails_layer": worst_l,
        "best_vs_fails": vs_fails,
        "best_vs_fails_data_metric": vs_fails_dm,
        "summary": {
            "best_probe_layer": best_l,
            "fails_layer": worst_l,
            "no_edit_kl": none_stats["mean"],
            "reads_B_kl": ref_stats["mean"],
            "steered_kl": bl["steered"]["mean"],
            "steered_kl_ci": bl["steered"]["ci"],
            "random_kl": bl["random"]["mean"],
            "fails_layer_steered_kl": layers[worst]["steered"]["mean"],
            "recovered": bl["recovered"],
            "p_vs_no_edit": bl["vs_no_edit"]["p_value"],
            "p_vs_random": bl["vs_random"]["p_value"],
            "p_vs_fails_layer": vs_fails["p_value"] if vs_fails else None,
            "data_metric_steered_kl": bl["data_metric"]["steered"]["mean"],
            "data_metric_random_kl": bl["data_metric"]["random"]["mean"],
            "data_metric_recovered": bl["data_metric"]["recovered"],
            "data_metric_p_vs_no_edit": bl["data_metric"]["vs_no_edit"]["p_value"],
            "data_metric_p_vs_random": bl["data_metric"]["vs_random"]["p_value"],
            "data_metric_fails_layer_steered_kl": layers[worst]["data_metric"]["steered"]["mean"],
            "data_metric_p_vs_fails_layer": vs_fails_dm["p_value"] if vs_fails_dm else None,
            "data_metric_steered_kl_by_layer": [lay["data_metric"]["steered"]["mean"] for lay in layers],
            "steered_kl_by_layer": [lay["steered"]["mean"] for lay in layers],
            "recovered_by_layer": [lay["recovered"] for lay in layers],
        },
    })


def _err(stats: list[dict[str, Any]]) -> tuple[list[float], list[list[float]]]:
    """Means and asymmetric error bars (``[[below], [above]]``) from ``bootstrap_mean`` records."""
    m = _plot.nan(s["mean"] for s in stats)
    lo = [max(0.0, a - (s["ci"][0] if s["ci"][0] is not None else a)) for a, s in zip(m, stats)]
    hi = [max(0.0, (s["ci"][1] if s["ci"][1] is not None else a) - a) for a, s in zip(m, stats)]
    return m, [lo, hi]


def steering_figure(result: dict[str, Any], path: str | Path) -> Path:
    """KL to the counterfactual's exact posterior per steered layer (95% bootstrap error bars) beside the no-edit,
    random-direction and reads-B levels; each layer's p-value against no edit and against random in the text."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"steering: {result.get('reason', 'not applicable')}", path)
    fig, ax = _plot.figure(w=5.6, h=3.8)
    a = ax[0, 0]
    lays = result["layers"]
    x = [lay["layer"] for lay in lays]
    # a log axis draws only positive finite values (loggable: the rest become gaps; log_scale says how many)
    m, e = _err([lay["steered"] for lay in lays])
    a.errorbar(x, loggable(m), yerr=e, fmt="o-", color="C0", capsize=3, label="steered along the probe")
    m, e = _err([lay["random"] for lay in lays])
    a.errorbar(x, loggable(m), yerr=e, fmt="x:", color="0.5", capsize=3, label="random direction, same norm")
    if all("data_metric" in lay for lay in lays):
        m, e = _err([lay["data_metric"]["steered"] for lay in lays])
        m = loggable(m)
        a.errorbar(x, m, yerr=e, fmt="s-", color="C4", capsize=3, label="steered, data metric")
        for lay, y in zip(lays, m):
            p1, p2 = lay["data_metric"]["vs_no_edit"]["p_value"], lay["data_metric"]["vs_random"]["p_value"]
            if p1 is not None and p2 is not None and y == y:
                a.annotate(f"p={p1:.2g}/{p2:.2g}", (lay["layer"], y), fontsize=6, color="C4",
                           textcoords="offset points", xytext=(3, -9))
        m, e = _err([lay["data_metric"]["random"] for lay in lays])
        a.errorbar(x, loggable(m), yerr=e, fmt="+:", color="C5", capsize=3, label="random, data metric")
    for key, style, label in (("no_edit", ("C3", "--"), "no edit"), ("reads_B", ("C2", "-."), "model reading B")):
        s = result[key]
        if not drawable(s["mean"]):
            continue  # not computed, or not positive and finite: no level to draw
        a.axhline(s["mean"], color=style[0], ls=style[1], label=f"{label} {s['mean']:.3g}")
        if s["ci"][0] is not None and all(drawable(v) for v in s["ci"]):
            a.axhspan(s["ci"][0], s["ci"][1], color=style[0], alpha=0.12)
    for lay in lays:
        p1, p2 = lay["vs_no_edit"]["p_value"], lay["vs_random"]["p_value"]
        if p1 is not None and p2 is not None and lay["steered"]["mean"] is not None:
            a.annotate(f"p={p1:.2g}/{p2:.2g}", (lay["layer"], lay["steered"]["mean"]), fontsize=6,
                       textcoords="offset points", xytext=(3, 5))
    shown = [v for v in (*(lay["steered"]["mean"] for lay in lays), *(lay["random"]["mean"] for lay in lays),
                         *(lay.get("data_metric", {}).get("steered", {}).get("mean") for lay in lays),
                         result["no_edit"]["mean"], result["reads_B"]["mean"]) if v is not None]
    log_scale(a, shown)
    a.set_xticks(x, ["embed" if v == EMBED else str(v) for v in x])
    a.set_xlabel("layer steered (blocks.l.hook_resid_post; embed: blocks.0.hook_resid_pre)")
    a.set_ylabel("KL(p_B ‖ model) at t, bits")
    a.set_title(f"Belief steering, {result['n_pairs']} held-out pairs (p: vs no edit / vs random)", fontsize=8)
    a.legend(fontsize=6)
    return _plot.save(fig, path)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    """B10 read causally: if the stream is the belief substrate, writing another context's posterior into it
    along the probe's directions moves the model to that posterior, and a random edit of the same size does not.
    Judged on the data-metric edit (the Euclidean minimum-norm edit can sit in directions of negligible variance
    that the rest of the model never reads; both are stated)."""
    s = r["summary"]
    k, none = s.get("data_metric_steered_kl"), s.get("no_edit_kl")
    if k is None or none is None:
        return []
    rnd, p1, p2 = s.get("data_metric_random_kl"), s.get("data_metric_p_vs_no_edit"), s.get("data_metric_p_vs_random")
    ok = None
    if p1 is not None and p2 is not None and rnd is not None:
        ok = k < 0.5 * none and k < rnd and p1 < 0.05 and p2 < 0.05

    def g(x: float | None) -> str:
        return "—" if x is None else f"{x:.3g}"

    rec = s.get("data_metric_recovered")
    rec_txt = f"; {rec:.2f} of the way to the model reading B (log scale)" if rec is not None else ""
    return [Reading("steering.data_metric_steered_kl", k, "no edit", none,
                    "below half the no-edit KL and below the random edit, both at p < 0.05, is consistent", ok, "B10",
                    f"steering layer {s['best_probe_layer']} along its probe to B's posterior (in the stream's own "
                    f"metric) leaves the model {k:.3g} bits from it (no edit {none:.3g}, a random edit of the same "
                    f"size {g(rnd)}, the model reading B {g(s.get('reads_B_kl'))}){rec_txt}; the Euclidean "
                    f"minimum-norm edit leaves it {g(s.get('steered_kl'))} bits away; the probe-fails site (layer "
                    f"{s['fails_layer']}) {g(s.get('data_metric_fails_layer_steered_kl'))} "
                    f"(p {g(s.get('data_metric_p_vs_fails_layer'))})")]


register(Diagnostic("steering", steering, steering_figure, _interpret, resamples=True, order=97, version=3,
                    claims=("B10",)))
