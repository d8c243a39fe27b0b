"""Key orthogonality of the hypothesis tokens (Paper I's "hypothesis frame")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..tasks.base import Episodes, Task
from . import _plot
from .registry import Diagnostic, Reading, needs, register
from ._common import GEOMETRY_SEED, clean, device_of, episodes_for, eval_mode, inputs_on, not_applicable

__all__ = ["hypothesis_tokens", "key_orthogonality", "key_orthogonality_figure", "gaussian_abs_cos"]


def hypothesis_tokens(task: Task) -> tuple[list[int], str] | None:
    """Token ids that stand for the task's hypotheses, with a description (``None``: no such tokens).

    * bijection — the value tokens ``V..2V-1`` (the candidate images ``π(k)``);
    * recall — the value tokens ``n_keys..n_keys+n_values-1``;
    * hmm — the observation tokens ``99..99+O-1``.  The HMM's hypotheses are hidden states, which
      have no tokens; the observation symbols (the evidence) are the closest analogue, flagged so.
    """
    return task.hypothesis_tokens()


def gaussian_abs_cos(d: int) -> float:
    r"""Exact :math:`E|\cos(x, y)|` for independent isotropic Gaussian ``x, y`` in ``R^d``:
    :math:`\Gamma(d/2) / (\sqrt{\pi}\,\Gamma((d+1)/2))`, which is :math:`\approx\sqrt{2/(\pi d)}`."""
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def _mean_abs_offdiag_cos(K: torch.Tensor) -> torch.Tensor:
    """``K [..., n, dh]`` -> mean over ``i != j`` of ``|cos(k_i, k_j)|``, ``[...]``."""
    Kn = K / K.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    C = (Kn @ Kn.transpose(-1, -2)).abs()
    n = K.shape[-2]
    off = C.sum((-1, -2)) - C.diagonal(dim1=-2, dim2=-1).sum(-1)
    return off / (n * (n - 1))


def _centre(K: torch.Tensor) -> torch.Tensor:
    """Subtract the mean key over the hypothesis tokens (axis -2)."""
    return K - K.mean(-2, keepdim=True)


def token_keys(model: torch.nn.Module, episodes: Episodes, token_ids: list[int], chunk: int = 128) -> tuple[torch.Tensor, list[int]]:
    r"""Per-layer, per-head pre-rotary keys of each hypothesis token, averaged over its occurrences.

    :math:`k^{l,h}_i = \mathrm{mean}_{(b,t):\,x_{bt}=i}\; W_K^{l,h}\,\mathrm{Norm}_1^l(r^l_{bt})` with
    :math:`r^l` the residual stream entering block ``l``, as the model's ``unrotated_keys`` gives it
    (our transformer; ``hf:`` attention families, whose grouped-query models have fewer key heads).
    Returns ``(keys [L, H_k, n_present, dh] float64, present token ids)``; tokens that never occur
    are dropped.
    """
    dev = device_of(model)
    ids = torch.tensor(token_ids)
    index = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long)
    index[ids] = torch.arange(len(ids))
    sums: torch.Tensor | None = None
    counts = torch.zeros(len(ids), dtype=torch.float64)
    with eval_mode(model):
        for part in episodes.chunks(chunk):
            tok = part.tokens
            sel = (tok <= int(ids.max())) & (index[tok.clamp(0, int(ids.max()))] >= 0)
            if not sel.any():
                continue
            layers = model.unrotated_keys(**inputs_on(part, dev))  # L × [B, T, H_k, dh]
            which = index[tok[sel]]
            counts.index_add_(0, which, torch.ones(len(which), dtype=torch.float64))
            if sums is None:
                _, _, H, dh = layers[0].shape
                sums = torch.zeros(len(layers), len(ids), H, dh, dtype=torch.float64)
            for l, k in enumerate(layers):
                sums[l].index_add_(0, which, k[sel.to(k.device)].double().cpu())
    present = counts > 0
    if sums is None:
        return torch.zeros(0, 0, 0, 0, dtype=torch.float64), []
    keys = (sums[:, present] / counts[present][None, :, None, None]).transpose(1, 2)
    return keys, [int(i) for i in ids[present]]


@needs("unrotated_keys()")
def key_orthogonality(
    model: torch.nn.Module,
    task: Task,
    *,
    untrained: torch.nn.Module | None = None,
    n: int = 256,
    seed: int = GEOMETRY_SEED,
    episodes: Episodes | None = None,
    n_null: int = 2000,
) -> dict[str, Any]:
    r"""Mean absolute off-diagonal cosine among the keys of the hypothesis tokens, per layer and head.

    **Definition.**  For layer ``l`` and head ``h`` the key of hypothesis token ``i`` is the
    *pre-rotary* key :math:`k_i = W_K^{l,h}\,\mathrm{RMSNorm}_1^l(r^l)` of the residual stream
    entering the layer at the positions holding token ``i``, averaged over its occurrences in ``n``
    sampled episodes (:func:`token_keys`).  At layer 0 with rotary or no position embedding this is
    exactly ``W_K RMSNorm(E[i])``, the embedding-based key (position-free; RoPE would otherwise make
    the key depend on where the token sits).  The statistic is
    :math:`S = \frac{1}{n(n-1)}\sum_{i\ne j} |\cos(k_i, k_j)|` (raw keys, not centred).
    Hypothesis tokens: :func:`hypothesis_tokens`.  ``centred_*`` repeats everything after
    subtracting the mean key over the hypothesis tokens (removes the component they all share, e.g.
    "this is a value token", which raw cosines count as non-orthogonality); its Gaussian null is
    sampled with the same centring (centring ``n`` vectors biases cosines by about ``-1/(n-1)``).

    **Nulls.** (1) the same statistic for ``untrained`` (the run's step-0 weights or a rebuild with
    the training seed; skipped when not given); (2) isotropic Gaussian vectors of the head
    dimension ``d_h``: the exact expectation :math:`E|\cos| = \Gamma(d_h/2)/(\sqrt\pi\,\Gamma((d_h+1)/2))
    \approx \sqrt{2/(\pi d_h)}` and ``n_null`` Monte Carlo draws of ``n`` Gaussian vectors (mean and
    95% interval of ``S``).  ``p_gaussian`` is the one-sided Monte Carlo test of "more orthogonal
    than random": :math:`p = (1 + \#\{S_\text{null} \le S\}) / (1 + n_\text{null})`.

    Models that implement ``unrotated_keys`` (our transformer, ``hf:`` attention families, a model of
    one's own that defines it); the others have no keys: a "not applicable" entry.
    """
    hyp = hypothesis_tokens(task)
    if hyp is None:
        return not_applicable(f"task {getattr(task, 'name', '?')!r} has no hypothesis tokens")
    ids, desc = hyp
    ep = episodes_for(task, n, seed, episodes)
    keys, present = token_keys(model, ep, ids)
    n_tok = len(present)
    if n_tok < 2:
        return not_applicable("fewer than two hypothesis tokens occur in the sampled episodes")
    stat = _mean_abs_offdiag_cos(keys)  # [L, H]
    cstat = _mean_abs_offdiag_cos(_centre(keys))
    L, H, _, dh = keys.shape

    g = torch.Generator().manual_seed(int(seed) % (2**63))
    null, cnull = [], []
    per = max(1, min(n_null, 2_000_000 // max(1, n_tok * n_tok)))
    done = 0
    while done < n_null:
        m = min(per, n_null - done)
        draw = torch.randn(m, n_tok, dh, generator=g, dtype=torch.float64)
        null.append(_mean_abs_offdiag_cos(draw))
        cnull.append(_mean_abs_offdiag_cos(_centre(draw)))
        done += m
    null_t, cnull_t = torch.cat(null), torch.cat(cnull)
    qs = torch.tensor([0.025, 0.975], dtype=torch.float64)
    lo, hi = torch.quantile(null_t, qs).tolist()
    clo, chi = torch.quantile(cnull_t, qs).tolist()

    un = cun = None
    if untrained is not None:
        ukeys, upresent = token_keys(untrained, ep, ids)
        if len(upresent) >= 2:
            un, cun = _mean_abs_offdiag_cos(ukeys), _mean_abs_offdiag_cos(_centre(ukeys))

    layers = []
    for l in range(L):
        heads = []
        for h in range(H):
            s = float(stat[l, h])
            heads.append({
                "head": h,
                "mean_abs_cos": s,
                "untrained": None if un is None else float(un[l, h]),
                "p_gaussian": (1 + int((null_t <= s).sum())) / (1 + len(null_t)),
                "centred_mean_abs_cos": float(cstat[l, h]),
                "centred_untrained": None if cun is None else float(cun[l, h]),
                "centred_p_gaussian": (1 + int((cnull_t <= float(cstat[l, h])).sum())) / (1 + len(cnull_t)),
            })
        layers.append({
            "layer": l,
            "mean_abs_cos": float(stat[l].mean()),
            "untrained": None if un is None else float(un[l].mean()),
            "centred_mean_abs_cos": float(cstat[l].mean()),
            "centred_untrained": None if cun is None else float(cun[l].mean()),
            "heads": heads,
        })
    l0 = stat[0]
    best = int(l0.argmin())
    return clean({
        "applicable": True,
        "definition": "mean_{i!=j} |cos(k_i,k_j)| of pre-rotary keys W_K RMSNorm(resid_pre) of the hypothesis "
                      "tokens, averaged per token id over occurrences",
        "tokens": desc,
        "n_tokens": n_tok,
        "head_dim": dh,
        "n_episodes": len(ep),
        "layers": layers,
        "null": {
            "gaussian_expected": gaussian_abs_cos(dh),
            "gaussian_approx_sqrt_2_over_pi_d": math.sqrt(2 / (math.pi * dh)),
            "gaussian_sampled_mean": float(null_t.mean()),
            "gaussian_sampled_ci": [lo, hi],
            "n_null": len(null_t),
            "untrained_layer0": None if un is None else float(un[0].mean()),
            "centred_gaussian_sampled_mean": float(cnull_t.mean()),
            "centred_gaussian_sampled_ci": [clo, chi],
        },
        "summary": {
            "layer0_mean_abs_cos": float(l0.mean()),
            "layer0_untrained": None if un is None else float(un[0].mean()),
            "gaussian_expected": gaussian_abs_cos(dh),
            "layer0_most_orthogonal_head": best,
            "layer0_most_orthogonal_value": float(l0[best]),
            "layer0_p_gaussian_of_mean": (1 + int((null_t <= float(l0.mean())).sum())) / (1 + len(null_t)),
            "layer0_centred_mean_abs_cos": float(cstat[0].mean()),
            "layer0_centred_untrained": None if cun is None else float(cun[0].mean()),
            "centred_gaussian_mean": float(cnull_t.mean()),
        },
    })


def key_orthogonality_figure(result: dict[str, Any], path: str | Path) -> Path:
    """Per layer: each head's statistic (dots), the untrained model's (crosses) and the Gaussian
    null (line and 95% band)."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"key orthogonality: {result.get('reason', 'not applicable')}", path)
    fig, axes = _plot.figure(w=7.0, h=4.0)
    ax = axes[0, 0]
    layers = result["layers"]
    for lay in layers:
        l = lay["layer"]
        H = len(lay["heads"])
        xs = [l + (h - (H - 1) / 2) * 0.6 / max(H, 1) for h in range(H)]
        ax.scatter(xs, [hd["mean_abs_cos"] for hd in lay["heads"]], color="C0", s=22,
                   label="trained (per head)" if l == 0 else None, zorder=3)
        ax.scatter(xs, [hd["centred_mean_abs_cos"] for hd in lay["heads"]], facecolors="none", edgecolors="C2",
                   s=22, label="trained, centred" if l == 0 else None, zorder=3)
        if lay["heads"][0].get("untrained") is not None:
            ax.scatter(xs, [hd["untrained"] for hd in lay["heads"]], color="0.5", marker="x", s=22,
                       label="untrained" if l == 0 else None, zorder=2)
    nl = result["null"]
    ax.axhline(nl["gaussian_expected"], color="C3", ls="--", label=f"Gaussian E|cos| (d_h={result['head_dim']})")
    lo, hi = nl["gaussian_sampled_ci"]
    if lo is not None:
        ax.axhspan(lo, hi, color="C3", alpha=0.12, label="Gaussian 95%")
    ax.axhline(nl["centred_gaussian_sampled_mean"], color="C2", ls=":", label="Gaussian, centred")
    ax.set_xticks([lay["layer"] for lay in layers])
    ax.set_xlabel("layer")
    ax.set_ylabel("mean |off-diagonal cos| of hypothesis keys")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Key orthogonality — {result['n_tokens']} hypothesis tokens")
    ax.legend(fontsize=8)
    return _plot.save(fig, path)

def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    v, un, ga = s.get("layer0_mean_abs_cos"), s.get("layer0_untrained"), s.get("gaussian_expected")
    if v is None:
        return []
    nulls = [x for x in (un, ga) if x is not None]
    null = min(nulls) if nulls else None
    consistent = None if null is None else v < null
    meaning = ("the trained hypothesis keys are more orthogonal than random keys: an orthogonal frame"
               if consistent else "the trained hypothesis keys are LESS orthogonal than random keys of this width: "
               "no orthogonal frame in layer 0" if consistent is False else "no null to compare with")
    return [Reading("key_orthogonality.layer0_mean_abs_cos", v, "min(untrained, Gaussian E|cos|)", null,
                    "lower is consistent", consistent, "B1", meaning)]


register(Diagnostic("key_orthogonality", key_orthogonality, key_orthogonality_figure, _interpret, untrained=True,
                    order=10, claims=("B1", "B2", "B4")))
