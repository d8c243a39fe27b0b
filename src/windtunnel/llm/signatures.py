r"""Paper III's signatures in a trained language model, read at the final input token.

For a Hugging Face causal LM and a prompt set, one forward pass per prompt (Paper III, arXiv
2512.23752, §4):

* **key orthogonality** (static) — per layer and key head, the ``d_k`` columns of ``W_K`` (vectors
  in :math:`\mathbb{R}^{d_{model}}`, one per key coordinate), normalised; the mean absolute
  off-diagonal cosine.  Grouped-query attention has one ``W_K`` per *key* head, so that is what is
  measured.  Nulls: :math:`E|\cos|` of two Gaussian vectors in :math:`\mathbb{R}^{d_{model}}`
  (``geometry.keys.gaussian_abs_cos``, ≈ :math:`\sqrt{2/(\pi d)}`) and the same model family at
  random initialisation (same config, ``torch.manual_seed(0)``);
* **value manifold** (static) — the last layer's value vectors at the final token, all key/value
  heads concatenated (``n_kv · d_v``), each coordinate z-scored across prompts, PCA:
  PC1 and PC1+PC2 shares of variance (null: the same shares after permuting each coordinate across
  prompts independently, which keeps ``n`` and the dimension — with few prompts even noise has a
  large PC1), participation ratio :math:`(\sum\lambda)^2/\sum\lambda^2`,
  and Spearman :math:`\rho` between the PC1 score and the model's next-token entropy (bits), with
  a bootstrap interval over prompts;
* **attention focusing** (dynamic) — per layer, the entropy (bits) of each query head's attention
  at the final token, averaged over heads, with a bootstrap interval over prompts; the score is
  the reduction ``1 − H_last / H_first`` (Paper III reports −82% for Pythia-410M).  Sliding-window
  attention is what the model computes (eager attention, the model's own mask).

Supported layouts: separate ``k_proj``/``v_proj`` (Llama, Mistral, Qwen2, SmolLM, ...), fused
``query_key_value`` (GPT-NeoX / Pythia) and GPT-2's ``c_attn``; others are refused in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..errors import InvalidValue
from ..evaluation.stats import finite_ci, json_safe, resample_weights
from .load import encode


from ..models.hf_layout import AttentionLayout, attention_layout  # noqa: E402,F401  (owned by models)


def key_orthogonality(layout: AttentionLayout) -> list[list[float]]:
    """``[layer][kv head]`` mean ``|cos|`` among the ``d_k`` columns of ``W_K``."""
    out = []
    for layer in range(len(layout.layers)):
        K = layout.key_columns(layer)
        K = K / K.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        C = (K @ K.transpose(-1, -2)).abs()
        n = K.shape[-2]
        off = (C.sum((-1, -2)) - C.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
        out.append([float(x) for x in off])
    return out


def _entropy_bits(p: torch.Tensor) -> torch.Tensor:
    p = p.double()
    return -(torch.where(p > 0, p * torch.log2(p.clamp_min(1e-300)), torch.zeros_like(p))).sum(-1)


@dataclass
class FinalToken:
    """What one pass per prompt yields at the final token: values ``[N, n_kv·d_v]`` (last layer),
    next-token entropy ``[N]`` (bits), attention entropy ``[N, L, H]`` (bits)."""

    values: torch.Tensor
    next_entropy: torch.Tensor
    attention_entropy: torch.Tensor


@torch.no_grad()
def read_final_token(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str],
                     layout: AttentionLayout | None = None) -> FinalToken:
    """One forward pass per prompt (eager attention, so the weights exist); everything at the last token."""
    layout = layout or attention_layout(model)
    module, to_values = layout.value_module(len(layout.layers) - 1)
    seen: dict[str, torch.Tensor] = {}
    handle = module.register_forward_hook(lambda m, i, o: seen.__setitem__("v", o.detach()))
    values, ents, atts = [], [], []
    device = next(model.parameters()).device
    try:
        model.eval()
        for text in prompts:
            ids = encode(tokenizer, text).to(device)
            if ids.shape[1] == 0:
                raise InvalidValue(f"invalid prompt: {text!r} has no tokens")
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
            if out.attentions is None or any(a is None for a in out.attentions):
                raise InvalidValue("invalid model: it returned no attention weights (eager attention is needed)")
            values.append(to_values(seen["v"])[0, -1].reshape(-1).double().cpu())
            ents.append(_entropy_bits(torch.softmax(out.logits[0, -1].double(), -1)).cpu())
            atts.append(torch.stack([_entropy_bits(a[0, :, -1]) for a in out.attentions]).cpu())  # [L, H]
    finally:
        handle.remove()
    return FinalToken(torch.stack(values), torch.stack(ents), torch.stack(atts))


def _spearman(x: torch.Tensor, y: torch.Tensor) -> float | None:
    from ..evaluation.stats import spearman

    return spearman(x, y)


def value_manifold(values: torch.Tensor, entropy: torch.Tensor, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """PCA of z-scored final-token values across prompts; PC1 vs next-token entropy (see module docstring)."""
    X = values.double()
    X = (X - X.mean(0)) / X.std(0).clamp_min(1e-12)
    n = X.shape[0]
    if n < 3:
        raise InvalidValue(f"invalid prompts: the value manifold needs at least 3 prompts, got {n}")
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    lam = S**2 / (n - 1)
    share = lam / lam.sum()
    pc1 = X @ Vh[0]
    rho = _spearman(pc1, entropy)
    W = resample_weights(n, n_boot, seed)
    boot = []
    for w in W:  # rank correlation on each resample of prompts (duplicates kept as ties)
        idx = torch.repeat_interleave(torch.arange(n), w.long())
        boot.append(_spearman(pc1[idx], entropy[idx]))
    boot_t = torch.tensor([math.nan if b is None else b for b in boot], dtype=torch.float64)
    # null: each coordinate permuted across prompts independently (no shared axis), same n and dim —
    # with few prompts PC1 is large even for noise (at most n - 1 components exist)
    g = torch.Generator().manual_seed(seed)
    null = []
    for _ in range(20):
        P = torch.stack([X[torch.randperm(n, generator=g), j] for j in range(X.shape[1])], 1)
        ln = torch.linalg.svdvals(P - P.mean(0)) ** 2
        null.append([float(ln[0] / ln.sum()), float(ln[:2].sum() / ln.sum())])
    null_t = torch.tensor(null, dtype=torch.float64).mean(0)
    return {"pc1_share": float(share[0]), "pc1_pc2_share": float(share[:2].sum()),
            "pc1_share_null": float(null_t[0]), "pc1_pc2_share_null": float(null_t[1]),
            "participation_ratio": float(lam.sum() ** 2 / (lam**2).sum()),
            "rho_pc1_entropy": rho, "rho_ci": finite_ci(boot_t), "n_prompts": n, "dim": X.shape[1]}


def focusing(attention_entropy: torch.Tensor, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Mean-over-heads attention entropy per layer with bootstrap intervals; reduction first → last layer."""
    per = attention_entropy.double().mean(-1)  # [N, L]
    n = per.shape[0]
    W = resample_weights(n, n_boot, seed) / n  # [R, N]
    boot = W @ per  # [R, L]
    red = 1 - boot[:, -1] / boot[:, 0]
    mean = per.mean(0)
    return {"entropy_by_layer": [float(x) for x in mean],
            "entropy_ci_by_layer": [finite_ci(boot[:, l]) for l in range(per.shape[1])],
            "reduction_first_to_last": float(1 - mean[-1] / mean[0]) if mean[0] > 0 else None,
            "reduction_ci": finite_ci(red)}


def stratify(entropy: torch.Tensor, per_quintile: int, seed: int = 0) -> torch.Tensor:
    """Indices of ``per_quintile`` prompts from each fifth of the prompts ordered by next-token
    entropy (Paper III's sampling of its prompt sets), drawn with a seeded permutation."""
    n = len(entropy)
    if per_quintile * 5 > n:
        raise InvalidValue(f"invalid per_quintile: {per_quintile} × 5 exceeds the {n} candidate prompts")
    order = torch.argsort(entropy, stable=True)
    g = torch.Generator().manual_seed(seed)
    picks = []
    for q in range(5):
        group = order[q * n // 5:(q + 1) * n // 5]
        picks.append(group[torch.randperm(len(group), generator=g)[:per_quintile]])
    return torch.sort(torch.cat(picks)).values


def signatures(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str], n_boot: int = 1000,
               per_quintile: int | None = None) -> dict[str, Any]:
    """All three signatures with their nulls; JSON-safe.  ``per_quintile``: measure on that many
    prompts from each next-token-entropy quintile of ``prompts`` (``None``: all of them)."""
    from transformers import AutoModelForCausalLM

    from ..geometry.keys import gaussian_abs_cos

    layout = attention_layout(model)
    ft = read_final_token(model, tokenizer, prompts, layout)
    chosen = None
    if per_quintile is not None:
        chosen = stratify(ft.next_entropy, per_quintile)
        ft = FinalToken(ft.values[chosen], ft.next_entropy[chosen], ft.attention_entropy[chosen])
    keys = key_orthogonality(layout)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        fresh = AutoModelForCausalLM.from_config(model.config)
    finally:
        torch.random.set_rng_state(state)
    keys_init = key_orthogonality(attention_layout(fresh))
    by_layer = [sum(k) / len(k) for k in keys]
    gauss = gaussian_abs_cos(layout.d_model)
    return json_safe({
        "model": {"class": type(model).__name__, "layers": len(layout.layers), "heads": layout.n_heads,
                  "kv_heads": layout.n_kv_heads, "head_dim": layout.head_dim, "d_model": layout.d_model,
                  "layout": layout.family, "sliding_window": getattr(model.config, "sliding_window", None)},
        "key_orthogonality": {"by_layer_head": keys, "by_layer": by_layer,
                              "random_init_by_layer": [sum(k) / len(k) for k in keys_init],
                              "gaussian_baseline": gauss,
                              "share_of_layers_below_0.20": sum(x < 0.2 for x in by_layer) / len(by_layer)},
        "value_manifold": value_manifold(ft.values, ft.next_entropy, n_boot),
        "focusing": focusing(ft.attention_entropy, n_boot),
        "next_token_entropy_mean": float(ft.next_entropy.mean()),
        "prompts_used": None if chosen is None else [int(i) for i in chosen],
    })
