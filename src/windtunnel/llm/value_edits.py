"""The value manifold's axes in a language model's attention values, and the edits made along them (Paper III §4.5).

For each edited layer, the *entropy axis* is PC1 of the z-scored values of the prompts' final tokens, oriented so that
``z·u`` grows with the model's predictive entropy; a *random axis* is a unit vector orthogonal to it.  An edit
rewrites the values ``v`` of every position of the layer through their z-scores ``z = (v − mean) / std``: the cut
``z − λ(z·u)u`` (λ = 1 removes the axis, λ = 0 is the no-op through the same path), the axis-only projection
``(z·u)u``, or a shift ``z + c·u``.  What is read along an axis is a Spearman ρ with a bootstrap interval over prompts, overall
or within each example count.  :mod:`windtunnel.llm.sula` runs the SULA protocol with them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

from ..evaluation.stats import finite_ci
from .signatures import _spearman, attention_layout


CUT_LAMBDA = 1.0
"""Paper III's λ in the cut ``ṽ = v − λ(v·u)u``: 1, the hard removal (λ = 0 is the no-op through the same path)."""


def cut_edit(lam: float = CUT_LAMBDA) -> Any:
    """The cut as an edit of z-scored values ``z [..., d]``: ``z − λ(z·u)u`` (λ = 1 removes the axis, λ = 0 is
    the identity)."""

    def edit(z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return z - lam * (z @ u).unsqueeze(-1) * u

    return edit


def axis_only_edit(z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The axis-only projection of z-scored values ``z [..., d]``: ``(z·u)u``."""
    return (z @ u).unsqueeze(-1) * u


def shift_edit(c: float) -> Any:
    """The shift of z-scored values along the axis: ``z + c·u``."""

    def edit(z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return z + c * u

    return edit


@contextmanager
def value_cut(model: torch.nn.Module, axes: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
              lam: float = CUT_LAMBDA) -> Iterator[None]:
    """At each layer ``l`` with ``(u, mean, std)``, replace the values ``v`` of every position by the values whose
    z-scores have λ times their component along ``u`` removed: ``z ← z − λ(z·u)u``."""
    with value_edit(model, axes, cut_edit(lam)):
        yield


@contextmanager
def value_edit(model: torch.nn.Module, axes: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
               edit: Any) -> Iterator[None]:
    """At each layer with ``(u, mean, std)``, the values ``v`` of every position (every prompt of the batch, every
    token) become ``mean + std · edit(z, u)`` with ``z = (v − mean) / std`` (``z [batch, tokens, d]``): the cut
    (``z − λ(z·u)u``), the axis-only projection (``(z·u)u``) or a shift along the axis (``z + c·u``)."""
    layout = attention_layout(model)
    idx = layout.indices("v")
    handles = []
    for layer, (u, mu, sd) in axes.items():
        f = edit[layer] if isinstance(edit, dict) else edit  # one edit for every layer, or one per layer

        def cut(m: Any, i: Any, o: torch.Tensor, u: torch.Tensor = u, mu: torch.Tensor = mu, sd: torch.Tensor = sd,
                f: Any = f) -> torch.Tensor:
            o = o.clone()
            where = idx.to(o.device)
            v = o[..., where].double().cpu()  # every position's values, not the final token's alone
            z = f((v - mu) / sd, u)
            o[..., where] = (mu + sd * z).to(o.dtype).to(o.device)
            return o

        # prepended: whatever else reads this module's output (a capture hook) sees the edited values
        handles.append(layout.module(layer, "v").register_forward_hook(cut, prepend=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def entropy_axis(V: torch.Tensor, entropy: torch.Tensor
                  ) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], float | None]:
    """``(u, mean, std)``: PC1 of the z-scored rows of ``V``, oriented so that ``z·u`` grows with ``entropy``;
    and ρ(z·u, entropy)."""
    mu, sd = V.mean(0), V.std(0).clamp_min(1e-12)
    Z = (V - mu) / sd
    u = torch.linalg.svd(Z - Z.mean(0), full_matrices=False)[2][0]
    r = _spearman(Z @ u, entropy)
    if r is not None and r < 0:
        u, r = -u, -r
    return (u, mu, sd), r


def project(V: torch.Tensor, axis: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``z·u`` for each row of ``V``, z-scored with the axis's own mean and spread."""
    u, mu, sd = axis
    return ((V - mu) / sd) @ u


def entropy_axes(values: dict[int, torch.Tensor], model_entropy: torch.Tensor, seed: int = 0
                 ) -> tuple[dict[int, tuple[torch.Tensor, ...]], dict[int, tuple[torch.Tensor, ...]], dict[int, float | None]]:
    """Per layer: the entropy axis ``(u, mean, std)``, a random unit axis orthogonal to it, and ρ(z·u, H)."""
    g = torch.Generator().manual_seed(seed)
    ent, rnd, rho = {}, {}, {}
    for layer, V in values.items():
        (u, mu, sd), r = entropy_axis(V, model_entropy)
        x = torch.randn(u.shape, generator=g, dtype=torch.float64)
        x = x - (x @ u) * u
        ent[layer], rnd[layer], rho[layer] = (u, mu, sd), (x / x.norm(), mu, sd), r
    return ent, rnd, rho


# --- reading an axis: rank correlations with bootstrap intervals over prompts ---------------------------------------

def rho_ci(x: torch.Tensor, y: torch.Tensor, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """Spearman ρ(x, y) with a percentile bootstrap interval over prompts."""
    g = torch.Generator().manual_seed(seed)
    rho = _spearman(x, y)
    boots = []
    for _ in range(n_boot):
        i = torch.randint(0, len(x), (len(x),), generator=g)
        r = _spearman(x[i], y[i])
        if r is not None:
            boots.append(r)
    ci = finite_ci(torch.tensor(boots, dtype=torch.float64)) if boots else [None, None]
    return {"rho": rho, "ci": ci}


def within_k_rho(x: torch.Tensor, y: torch.Tensor, ks: torch.Tensor) -> float | None:
    """Spearman ρ(x, y) within each example count ``k`` where ``y`` varies, averaged with the prompts as weights:
    what ``x`` knows of ``y`` beyond ``k`` (``None`` where ``y`` is a function of ``k``)."""
    total, weight = 0.0, 0
    for k in sorted(set(ks.tolist())):
        sel = ks == k
        r = _spearman(x[sel], y[sel]) if int(sel.sum()) >= 3 else None
        if r is not None:
            total += r * int(sel.sum())
            weight += int(sel.sum())
    return total / weight if weight else None


def within_k_ci(x: torch.Tensor, y: torch.Tensor, ks: torch.Tensor, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """:func:`within_k_rho` with a percentile bootstrap interval, prompts resampled within each ``k``."""
    g = torch.Generator().manual_seed(seed)
    groups = [torch.nonzero(ks == k).flatten() for k in sorted(set(ks.tolist()))]
    boots = []
    for _ in range(n_boot):
        i = torch.cat([grp[torch.randint(0, len(grp), (len(grp),), generator=g)] for grp in groups])
        r = within_k_rho(x[i], y[i], ks[i])
        if r is not None:
            boots.append(r)
    ci = finite_ci(torch.tensor(boots, dtype=torch.float64)) if boots else [None, None]
    return {"rho": within_k_rho(x, y, ks), "ci": ci}
