r"""Paper III's cross-model value geometry: one PCA basis shared by several trained language models.

Paper III (§4.2) compares models in a *global* PCA basis built by concatenating each model's
standardised value vectors.  Here the rows are SULA prompts (:mod:`.sula`, the same prompts for
every model: labels that are one token in every tokenizer), the columns every model's final-token
value vectors at its last layer, ``[N, n_kv·d_v]`` for model ``m``:

.. math::

    Z_m = \frac{V_m - \bar V_m}{s_m}\,\frac{1}{\sqrt{d_m}},\qquad
    Z = [Z_1 \,|\, Z_2 \,|\, \dots],\qquad Z = U S W^\top ,

each coordinate z-scored over the prompts, and each model's block scaled by :math:`1/\sqrt{d_m}`
so every model brings the same total variance (per-coordinate standardisation alone would let the
wider model decide the axes).  Reported, with bootstrap intervals over prompts where they apply:

* ``global_pc1_share`` — PC1's share of the variance of ``Z``;
* ``rho_global_pc1_bayes_entropy`` — Spearman ρ of the prompts' PC1 scores with the exact posterior
  entropy (sign fixed to be positive), and the same for each model's *own* PC1;
* ``block_share`` — how PC1's squared loadings divide among the models (``Σ_{j∈m} w_{1j}²``, summing
  to 1): an axis the models share draws on each of them, one model's private axis on it alone;
* ``agreement`` — ρ between the models' own PC1 scores, pair by pair: whether they order the
  prompts the same way;
* the **misaligned null** — the same analysis with every model after the first given the prompts in
  a random order (``n_null`` permutations): what the global PC1 share and its entropy correlation
  are when nothing is shared across models but each model's own structure.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from ..errors import InvalidValue
from ..evaluation.stats import json_safe, spearman

__all__ = ["global_pca", "cross_model"]


def _standardise(V: torch.Tensor) -> torch.Tensor:
    """Per-coordinate z-scores over the rows, the block scaled by ``1/√d`` (equal total variance per model)."""
    V = V.double()
    return (V - V.mean(0)) / V.std(0).clamp_min(1e-12) / math.sqrt(V.shape[1])


def _pca(blocks: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(scores [N], loadings [D], variance shares [r])`` of PC1 of the concatenated blocks."""
    Z = torch.cat(list(blocks), dim=1)
    Z = Z - Z.mean(0)
    U, S, Wt = torch.linalg.svd(Z, full_matrices=False)
    var = S**2
    return Z @ Wt[0], Wt[0], var / var.sum()


def _abs_rho_ci(x: torch.Tensor, y: torch.Tensor, n_boot: int, seed: int) -> dict[str, Any]:
    """|Spearman ρ| of ``x`` with ``y`` and its bootstrap interval (the SULA interval, its sign fixed by the full sample)."""
    from .value_edits import rho_ci

    r = rho_ci(x, y, n_boot, seed)
    lo, hi = r["ci"]
    if r["rho"] is not None and r["rho"] < 0 and lo is not None:
        return {"rho": -r["rho"], "rho_ci": [-hi, -lo]}
    return {"rho": r["rho"], "rho_ci": [lo, hi]}


def global_pca(values: dict[str, torch.Tensor], entropy: torch.Tensor, n_boot: int = 1000, n_null: int = 200,
               seed: int = 0) -> dict[str, Any]:
    """The cross-model analysis of the module docstring: ``values[m]`` is ``[N, d_m]`` (the same ``N``
    prompts, in the same order, for every model), ``entropy [N]`` the exact posterior entropy in bits."""
    names = list(values)
    if len(names) < 2:
        raise InvalidValue(f"invalid models: a cross-model basis needs at least 2, got {len(names)}")
    N = len(entropy)
    if any(v.dim() != 2 or v.shape[0] != N for v in values.values()):
        raise InvalidValue(f"invalid values: every model needs one row per prompt ({N})")
    if N < 3:
        raise InvalidValue(f"invalid prompts: need at least 3, got {N}")
    blocks = [_standardise(values[m]) for m in names]
    scores, loadings, shares = _pca(blocks)
    widths = [b.shape[1] for b in blocks]
    parts = torch.split(loadings**2, widths)
    own_pca = {m: _pca([b]) for m, b in zip(names, blocks)}
    own = {m: p[0] for m, p in own_pca.items()}
    out: dict[str, Any] = {
        "models": names, "prompts": N, "widths": dict(zip(names, widths)),
        "global_pc1_share": float(shares[0]), "global_pc2_share": float(shares[1]) if len(shares) > 1 else None,
        "rho_global_pc1_bayes_entropy": _abs_rho_ci(scores, entropy, n_boot, seed),
        "block_share": {m: float(p.sum()) for m, p in zip(names, parts)},
        "own_pc1": {m: {"share": float(own_pca[m][2][0]), **_abs_rho_ci(own[m], entropy, n_boot, seed)} for m in names},
        "agreement": {f"{a}|{b}": abs(spearman(own[a], own[b]) or 0.0)
                      for i, a in enumerate(names) for b in names[i + 1:]},
    }
    # the misaligned null: rows of every model but the first shuffled, so only within-model structure remains
    g = torch.Generator().manual_seed(seed + 1)
    null_share, null_rho, null_min_block = [], [], []
    for _ in range(n_null):
        shuffled = [blocks[0]] + [b[torch.randperm(N, generator=g)] for b in blocks[1:]]
        s, w, sh = _pca(shuffled)
        null_share.append(float(sh[0]))
        null_rho.append(abs(spearman(s, entropy) or 0.0))
        null_min_block.append(float(min(p.sum() for p in torch.split(w**2, widths))))
    t = lambda xs: torch.tensor(xs, dtype=torch.float64)  # noqa: E731
    out["misaligned_null"] = {
        "permutations": n_null,
        "global_pc1_share_mean": float(t(null_share).mean()), "global_pc1_share_q95": float(t(null_share).quantile(0.95)),
        "rho_mean": float(t(null_rho).mean()), "min_block_share_mean": float(t(null_min_block).mean()),
    }
    return json_safe(out)


def cross_model(models: dict[str, tuple[Any, Any]], setup: Any = None, n_null: int = 200) -> dict[str, Any]:
    """Load nothing: ``models[name] = (model, tokenizer)`` already loaded.  Poses the same SULA prompts to
    each (labels single-token in every tokenizer), reads the last layer's final-token values and the
    label posterior, and returns :func:`global_pca` against the exact entropy, with each model's
    entropy MAE beside it."""
    from .signatures import attention_layout
    from .sula import LABEL_CANDIDATES, SulaSetup, _binary_entropy, model_posterior, prompts

    setup = setup or SulaSetup()
    common = [w for w in LABEL_CANDIDATES
              if all(len(tok(" " + w, add_special_tokens=False)["input_ids"]) == 1 for _, tok in models.values())]
    if len(common) < 2:
        raise InvalidValue("invalid models: fewer than two nonsense labels are single tokens in every tokenizer")
    pair = (common[0], common[1])
    items = prompts(setup, pair)
    exact = torch.tensor([x["p1"] for x in items], dtype=torch.float64)
    H = _binary_entropy(exact)
    values, mae = {}, {}
    for name, (model, tok) in models.items():
        last = len(attention_layout(model).layers) - 1
        p1, vals = model_posterior(model, tok, items, pair, [last])
        values[name] = vals[last]
        mae[name] = float((_binary_entropy(p1) - H).abs().mean())
    out = global_pca(values, H, setup.n_boot, n_null, setup.seed)
    out["labels"] = list(pair)
    out["setup"] = setup.__dict__
    out["entropy_mae"] = mae
    return out
