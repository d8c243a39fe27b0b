"""Read-outs of activations and their statistics, shared by the diagnostics: the split of rows into
fitting and held-out sequences, position one-hots and residualisation, PCA and its variance profile,
closed-form ridge regression with its strength chosen on held-out sequences, R², k-means and the
adjusted Rand index.  float64 throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..errors import InvalidValue

TRAIN_FRAC = 0.7
"""Fraction of *sequences* used to fit read-outs; the rest is held out (split by sequence, never
by position, so no sequence contributes to both sides)."""

RIDGE_ALPHAS = (1e-6, 1e-4, 1e-2, 1e-1, 1.0)
"""Ridge strengths, relative to ``tr(XᵀX)/d`` of the (centred) training design."""


def split_rows(seq: torch.Tensor, train_frac: float = TRAIN_FRAC) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean ``(train, test)`` row masks: the first ``train_frac`` of the sequences train."""
    n_seq = int(seq.max()) + 1
    n_train = min(max(1, int(round(train_frac * n_seq))), n_seq - 1)
    train = seq < n_train
    return train, ~train


# --- statistics ------------------------------------------------------------------------------------
def position_onehot(pos: torch.Tensor) -> torch.Tensor:
    """``[N, P]`` one-hot of the distinct positions in ``pos`` (float64)."""
    uniq, inv = torch.unique(pos, return_inverse=True)
    return torch.nn.functional.one_hot(inv, len(uniq)).double()


def residualise_on_position(y: torch.Tensor, pos: torch.Tensor, fit: torch.Tensor | None = None) -> torch.Tensor:
    """``y − mean(y | position)``, the group means estimated on rows ``fit`` (default: all).
    Positions absent from ``fit`` fall back to the overall ``fit`` mean."""
    y = y.double()
    fit = torch.ones_like(pos, dtype=torch.bool) if fit is None else fit
    uniq, inv = torch.unique(pos, return_inverse=True)
    P = len(uniq)
    s = torch.zeros(P, dtype=torch.float64).index_add_(0, inv[fit], y[fit])
    c = torch.zeros(P, dtype=torch.float64).index_add_(0, inv[fit], torch.ones_like(y[fit]))
    overall = y[fit].mean()
    means = torch.where(c > 0, s / c.clamp_min(1), overall)
    return y - means[inv]


def pca(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Covariance PCA of the centred rows of ``X [N,d]`` (not standardised).

    Returns ``(eigenvalues descending [d'], components [d, d'])`` with ``d' = min(d, N-1)``.
    """
    X = X.double()
    Xc = X - X.mean(0)
    N, d = Xc.shape
    if d <= N:
        cov = Xc.T @ Xc / max(N - 1, 1)
        lam, vec = torch.linalg.eigh(cov)
        lam, vec = lam.flip(0), vec.flip(1)
    else:  # Gram trick
        G = Xc @ Xc.T / max(N - 1, 1)
        lam, u = torch.linalg.eigh(G)
        lam, u = lam.flip(0), u.flip(1)
        keep = lam > 1e-12 * max(float(lam[0]), 1e-300)
        lam, u = lam[keep], u[:, keep]
        vec = Xc.T @ u / torch.sqrt(lam * max(N - 1, 1))
    lam = lam.clamp_min(0.0)
    k = min(len(lam), max(N - 1, 1))
    return lam[:k], vec[:, :k]


def variance_stats(lam: torch.Tensor) -> dict[str, float | None]:
    """PC1 and PC1+PC2 variance fractions, participation ratio ``(Σλ)²/Σλ²``, dims for 90% variance."""
    tot = float(lam.sum())
    if tot <= 0:
        return {"pc1_var": None, "pc12_var": None, "participation_ratio": None, "dims_90": None}
    frac = lam / tot
    cum = torch.cumsum(frac, 0)
    return {
        "pc1_var": float(frac[0]),
        "pc12_var": float(frac[: 2].sum()),
        "participation_ratio": tot**2 / float((lam**2).sum()),
        "dims_90": int((cum < 0.9).sum()) + 1,
    }


# --- ridge -----------------------------------------------------------------------------------------
@dataclass
class Ridge:
    W: torch.Tensor  # [d, k]
    b: torch.Tensor  # [k]
    alpha: float

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        return X.double() @ self.W + self.b


def _ridge_solve(X: torch.Tensor, Y: torch.Tensor, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    mx, my = X.mean(0), Y.mean(0)
    Xc, Yc = X - mx, Y - my
    N, d = Xc.shape
    if d <= N:
        A = Xc.T @ Xc + lam * torch.eye(d, dtype=X.dtype)
        W = torch.linalg.solve(A, Xc.T @ Yc)
    else:  # dual form
        K = Xc @ Xc.T + lam * torch.eye(N, dtype=X.dtype)
        W = Xc.T @ torch.linalg.solve(K, Yc)
    return W, my - mx @ W


def ridge_fit(X: torch.Tensor, Y: torch.Tensor, groups: torch.Tensor | None = None,
              alphas: Sequence[float] = RIDGE_ALPHAS) -> Ridge:
    r"""Closed-form ridge regression with an (unpenalised) intercept, float64.

    :math:`W = (X_c^\top X_c + \lambda I)^{-1} X_c^\top Y_c` with
    :math:`\lambda = \alpha\,\mathrm{tr}(X_c^\top X_c)/d`; ``α`` is chosen from ``alphas`` by the
    mean squared error on an inner validation split (the last 20% of the ``groups``, i.e.
    sequences, of the training rows), then refitted on all training rows.
    """
    X, Y = X.double(), Y.double()
    squeeze = Y.dim() == 1
    if squeeze:
        Y = Y[:, None]
    scale = float(((X - X.mean(0)) ** 2).sum()) / max(X.shape[1], 1)
    scale = scale if scale > 0 else 1.0
    best = alphas[0]
    if len(alphas) > 1 and groups is not None and int(groups.max()) - int(groups.min()) >= 4:
        g0, g1 = int(groups.min()), int(groups.max())
        cut = g0 + int(0.8 * (g1 - g0 + 1))
        fit, val = groups < cut, groups >= cut
        errs = []
        for a in alphas:
            W, b = _ridge_solve(X[fit], Y[fit], a * scale * float(fit.sum()) / len(X))
            errs.append(float(((X[val] @ W + b - Y[val]) ** 2).mean()))
        best = alphas[int(np.argmin(errs))]
    W, b = _ridge_solve(X, Y, best * scale)
    if squeeze:
        W, b = W[:, 0:1], b[0:1]
    return Ridge(W=W, b=b, alpha=float(best))


def r2(y: torch.Tensor, pred: torch.Tensor) -> float | None:
    """Coefficient of determination ``1 − SS_res/SS_tot`` (``None`` when ``y`` is constant)."""
    y, pred = y.double().reshape(len(y), -1), pred.double().reshape(len(y), -1)
    ss_tot = float(((y - y.mean(0)) ** 2).sum())
    if ss_tot <= 1e-12 * len(y):
        return None
    return 1.0 - float(((y - pred) ** 2).sum()) / ss_tot


def ridge_r2(X: torch.Tensor, y: torch.Tensor, seq: torch.Tensor, train: torch.Tensor,
             test: torch.Tensor) -> float | None:
    """Held-out R² of a ridge read-out of ``y`` from ``X`` (fitted on ``train`` rows)."""
    if r2(y[train], y[train]) is None:
        return None
    model = ridge_fit(X[train], y[train], seq[train])
    return r2(y[test], model.predict(X[test]).squeeze(-1))


# --- clustering ------------------------------------------------------------------------------------
def kmeans(X: torch.Tensor, k: int, n_init: int = 4, iters: int = 100, seed: int = 0) -> tuple[torch.Tensor, float]:
    """Lloyd's k-means with k-means++ seeding; the best of ``n_init`` restarts (lowest inertia).

    Returns ``(labels [N] long, inertia)`` where inertia is the summed squared distance to the
    assigned centroid.  Deterministic in ``seed``.
    """
    X = X.double()
    N = len(X)
    if not 1 <= k <= N:
        raise InvalidValue(f"invalid k: must be in [1, {N}], got {k!r}")
    g = torch.Generator().manual_seed(int(seed))
    best_labels, best_inertia = None, math.inf
    for _ in range(n_init):
        idx = [int(torch.randint(0, N, (1,), generator=g))]
        d2 = ((X - X[idx[0]]) ** 2).sum(1)
        for _ in range(1, k):
            tot = float(d2.sum())
            if tot <= 0:
                nxt = int(torch.randint(0, N, (1,), generator=g))
            else:
                nxt = int(torch.multinomial(d2 / tot, 1, generator=g))
            idx.append(nxt)
            d2 = torch.minimum(d2, ((X - X[nxt]) ** 2).sum(1))
        C = X[idx].clone()
        labels = torch.full((N,), -1, dtype=torch.long)
        for _ in range(iters):
            dist = torch.cdist(X, C) ** 2
            new = dist.argmin(1)
            if torch.equal(new, labels):
                break
            labels = new
            for j in range(k):
                sel = labels == j
                if sel.any():
                    C[j] = X[sel].mean(0)
        inertia = float(((X - C[labels]) ** 2).sum())
        if inertia < best_inertia:
            best_labels, best_inertia = labels.clone(), inertia
    assert best_labels is not None
    return best_labels, best_inertia


def adjusted_rand_index(a: torch.Tensor, b: torch.Tensor) -> float:
    r"""Adjusted Rand index of two labellings (Hubert & Arabie 1985).

    With contingency counts :math:`n_{ij}`, row sums :math:`a_i`, column sums :math:`b_j`:
    :math:`\mathrm{ARI} = \frac{\sum_{ij}\binom{n_{ij}}{2} - E}{\frac12[\sum_i\binom{a_i}{2}+\sum_j\binom{b_j}{2}] - E}`,
    :math:`E = \sum_i\binom{a_i}{2}\sum_j\binom{b_j}{2} / \binom{n}{2}`.  1 for identical partitions
    (up to relabelling), about 0 for independent ones; 1 when both are a single cluster.
    """
    a = torch.as_tensor(a).long().reshape(-1)
    b = torch.as_tensor(b).long().reshape(-1)
    if len(a) != len(b):
        raise InvalidValue("labellings must have the same length")
    _, ia = torch.unique(a, return_inverse=True)
    _, ib = torch.unique(b, return_inverse=True)
    table = torch.zeros(int(ia.max()) + 1, int(ib.max()) + 1, dtype=torch.float64)
    table.index_put_((ia, ib), torch.ones(len(a), dtype=torch.float64), accumulate=True)

    def c2(x: torch.Tensor) -> torch.Tensor:
        return x * (x - 1) / 2

    n = float(len(a))
    s_ij = float(c2(table).sum())
    s_a = float(c2(table.sum(1)).sum())
    s_b = float(c2(table.sum(0)).sum())
    expected = s_a * s_b / (n * (n - 1) / 2) if n > 1 else 0.0
    top = 0.5 * (s_a + s_b)
    if top == expected:
        return 1.0
    return (s_ij - expected) / (top - expected)
