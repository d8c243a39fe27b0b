"""Bayesian linear regression in context (Paper I; Garg et al. 2022, with a Gaussian prior).

Per episode ``w ~ N(0, σ_w² I_d)``; ``points`` inputs ``x_i ~ N(0, I_d)`` and responses
``y_i = w·x_i + e_i``, ``e_i ~ N(0, σ²)``.  The model reads real-valued ``features [B, 2·points, d+2]``:

* position ``2i``   (an *x-position*, token id 0): ``(x_i, 0, 0)``;
* position ``2i+1`` (a *y-position*,  token id 1): ``(0, …, 0, y_i, 1)``.

At x-position ``2i`` the model has seen ``(x_1, y_1, …, x_{i-1}, y_{i-1}, x_i)`` and predicts
*which bin* ``y_i`` falls in (only x-positions are scored).  The exact posterior predictive is

    y_i | data_{<i}, x_i ~ N(μᵀx_i, σ² + x_iᵀ Σ x_i),
    Σ = (I/σ_w² + XᵀX/σ²)⁻¹,   μ = Σ Xᵀy / σ²        (X, y: the first i-1 points),

integrated over each bin with the normal CDF in float64 (``Φ(z) = erfc(-z/√2)/2``; differences of
``Φ`` below the mean and of the survival function ``Φ(-z)`` above it, so tail bins keep full
relative precision).

Bins (``C`` classes): with ``R = y_range · sqrt(d σ_w² + σ²)`` (``y_range`` marginal standard
deviations of ``y``, whose variance is ``E[σ_w²‖x‖² + σ²] = d σ_w² + σ²``), the ``C-1`` inner edges
``e_0 < … < e_{C-2}`` are ``linspace(-R, R, C-1)``.  Bin 0 is ``(-∞, e_0)``, bin ``k`` for
``1 ≤ k ≤ C-2`` is ``[e_{k-1}, e_k)`` (``C-2`` equal inner bins) and bin ``C-1`` is ``[e_{C-2}, ∞)``.
The target is the bin of the sampled ``y_i``.

The posterior is computed from the float32 ``features`` (cast to float64), exactly what a network
and the Bayes oracle see; ``sample`` computes ``y`` from the float32-rounded ``x``.

``pool`` (memorisation vs inference): every episode's ``w`` is one of ``pool`` weight vectors drawn once
from the prior with ``pool_seed``.  The exact predictive is then a mixture over the members,

    p(bin | data_{<i}, x_i) = Σ_m π_m · ∫_bin N(y; w_mᵀx_i, σ²) dy,   π_m ∝ Π_{j<i} N(y_j; w_mᵀx_j, σ²),

(``pool · C`` bin masses per scored position: seconds per thousand episodes at a pool of a few thousand);
:meth:`Regression.unpooled` gives the Gaussian-prior predictive above.

``d_active`` (a dimension curriculum, as Garg et al. train in-context regression): only the first
``d_active`` coordinates of every ``x`` are drawn, the rest are 0.  The input stays ``d + 2`` wide and the
bins stay those of ``d``, so a curriculum can grow ``d_active`` to ``d`` under one model and one readout;
the posterior needs no change, since a coordinate that is 0 in every ``x`` is never observed and never
asked for (its rows of ``XᵀX`` are 0 and it adds nothing to ``xᵀΣx``).

``paired`` (a layout control): each y-position also carries its own input, ``(x_i, y_i, 1)``, so a point's input
and response meet in one token and no layer has to bring them together; the x-positions, the targets and the
posterior are unchanged (it reads ``x`` from the x-positions and ``y`` from the y-positions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .base import IGNORE, Episodes, Task, check, generator, register
from ..errors import InvalidValue, is_int, is_real


def _positive_real(x: object) -> bool:
    return is_real(x) and math.isfinite(x) and x > 0


def _ndtr(z: torch.Tensor) -> torch.Tensor:
    """Standard normal CDF with full relative precision in the lower tail (``torch.special.ndtr``
    computes ``(1 + erf)/2`` and underflows to 0 below about -8.3)."""
    return 0.5 * torch.special.erfc(-z * math.sqrt(0.5))


def normal_bin_mass(mean: torch.Tensor, std: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Mass of ``N(mean, std²)`` in the bins cut by ``edges`` (``len(edges)+1`` bins, outer ones unbounded).

    ``mean``, ``std`` ``[...]`` float64, ``edges [E]`` increasing; returns ``[..., E+1]`` float64.

    One ``erfc`` per edge: ``q_k = Q(|z_k|) = erfc(|z_k|/√2)/2`` is the mass beyond edge ``k`` on the
    side away from the mean.  A bin below the mean (``hi ≤ 0``) has mass ``q_hi − q_lo``, one above it
    (``lo ≥ 0``) ``q_lo − q_hi``, the bin holding the mean ``1 − q_lo − q_hi`` (``q = 0`` at ±∞): every
    difference is of two tail masses on the same side, so tail bins keep full relative precision.
    """
    E = edges.shape[0]
    # q padded with the tails beyond ±∞ (0); q[..., k+1] = Q(|z_k|)
    q = mean.new_zeros(*mean.shape, E + 2)
    z = q[..., 1:-1]
    torch.sub(edges, mean[..., None], out=z)
    z.mul_((math.sqrt(0.5) / std)[..., None]).abs_()
    torch.special.erfc(z, out=z)
    q_lo, q_hi = q[..., :-1], q[..., 1:]  # the tails at each bin's lower and upper edge
    # bins [0, m) lie below the mean, bin m holds it, bins (m, E] lie above it
    m = torch.searchsorted(edges, mean.contiguous())[..., None]  # edges below the mean
    below = torch.arange(E + 1, device=mean.device) < m
    mass = torch.where(below, q_hi - q_lo, q_lo - q_hi)
    mass.scatter_(-1, m, 2.0 - q_lo.gather(-1, m) - q_hi.gather(-1, m))
    return mass.mul_(0.5).clamp_min_(0.0)


def normal_bin_mass_reference(mean: torch.Tensor, std: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """``normal_bin_mass`` computed bin by bin from four normal CDFs (the test and benchmark oracle):
    differences of ``Φ`` below the mean, of the survival function ``Φ(-z)`` above it."""
    z = (edges - mean[..., None]) / std[..., None]
    inf = torch.full_like(z[..., :1], math.inf)
    lo, hi = torch.cat([-inf, z], dim=-1), torch.cat([z, inf], dim=-1)
    below = _ndtr(hi) - _ndtr(lo)
    above = _ndtr(-lo) - _ndtr(-hi)
    return torch.where(lo >= 0, above, below).clamp_min(0.0)


@register
@dataclass(frozen=True)
class Regression(Task):
    """In-context Bayesian linear regression in ``d`` dimensions, ``y`` discretised into ``C`` bins."""

    name = "regression"
    summary = "Bayesian linear regression in context; predict each y's bin (continuous accumulation)"
    tiny = {"d": 2, "points": 4, "C": 8}

    d: int = 8
    points: int = 32
    C: int = 64
    sigma_w: float = 1.0
    sigma: float = 0.5
    y_range: float = 4.0
    pool: int | None = None
    pool_seed: int = 0
    d_active: int | None = None
    paired: bool = False

    def validate(self) -> None:
        check(is_int(self.d) and 1 <= self.d <= 1024, "d", "an integer in [1, 1024]")
        check(is_int(self.points) and 1 <= self.points <= 4096, "points", "an integer in [1, 4096]")
        check(is_int(self.C) and 3 <= self.C <= 65536, "C", "an integer in [3, 65536]")
        # scales outside [1e-6, 1e6] make the float64 precision matrices singular or overflow
        for name in ("sigma_w", "sigma", "y_range"):
            v = getattr(self, name)
            check(_positive_real(v) and 1e-6 <= v <= 1e6, name, "a number in [1e-6, 1e6]")
        # the prior's precision I/σ_w² sits beside XᵀX/σ²: at σ_w/σ = 1e4 the posterior already loses
        # 9 of float64's 16 digits (measured 1e-7 relative); far beyond it, it loses them all
        check(self.sigma_w / self.sigma <= 1e4, "sigma_w", "at most 1e4 × sigma (float64 conditioning of the posterior)")
        check(self.pool is None or (is_int(self.pool) and 1 <= self.pool <= 2**16), "pool", "null, or an integer in [1, 2^16]")
        check(is_int(self.pool_seed) and 0 <= self.pool_seed < 2**31, "pool_seed", "an integer in [0, 2^31)")
        check(self.d_active is None or (is_int(self.d_active) and 1 <= self.d_active <= self.d), "d_active",
              "null, or an integer in [1, d]")
        check(isinstance(self.paired, bool), "paired", "true or false")

    def unpooled(self) -> "Regression | None":
        """The same task with ``w`` from the Gaussian prior every episode (``None`` without a pool)."""
        return None if self.pool is None else self.replace(pool=None)

    def pool_members(self) -> torch.Tensor | None:
        """The pool's weight vectors ``[pool, d]`` float64 (``None`` without a pool)."""
        if self.pool is None:
            return None
        g = torch.Generator().manual_seed(0x9001_0000_0000 + self.pool_seed)
        return torch.randn(self.pool, self.d, generator=g, dtype=torch.float64) * self.sigma_w

    @property
    def n_classes(self) -> int:
        return self.C

    @property
    def vocab_size(self) -> int:
        return 2

    @property
    def seq_len(self) -> int:
        return 2 * self.points

    @property
    def n_features(self) -> int:
        return self.d + 2

    @property
    def length_param(self) -> str:
        return "points"

    def bin_edges(self) -> torch.Tensor:
        """The ``C-1`` inner bin edges, float64 (see the module docstring)."""
        R = self.y_range * math.sqrt(self.d * self.sigma_w**2 + self.sigma**2)
        return torch.linspace(-R, R, self.C - 1, dtype=torch.float64)

    def bin_of(self, y: torch.Tensor) -> torch.Tensor:
        """Bin index of each value of ``y`` (long, same shape)."""
        edges = self.bin_edges()
        return torch.searchsorted(edges, y.double().contiguous(), right=True)

    def sample(self, n: int, seed: int) -> Episodes:
        check(isinstance(n, int) and n >= 1, "n", "a positive integer")
        g = generator(seed)
        d, P = self.d, self.points
        w = torch.randn(n, d, generator=g, dtype=torch.float64) * self.sigma_w
        if self.pool is not None:  # members picked from a stream of their own: x and the noise are the fresh task's
            pick = torch.randint(0, self.pool, (n,), generator=torch.Generator().manual_seed(0x9002_0000_0000 + seed))
            w = self.pool_members()[pick]
        x = torch.randn(n, P, d, generator=g, dtype=torch.float64).float().double()  # float32 values
        if self.d_active is not None:  # drawn in full and then cut, so every d_active sees the same stream
            x[..., self.d_active:] = 0.0
        noise = torch.randn(n, P, generator=g, dtype=torch.float64) * self.sigma
        y = ((x @ w[:, :, None])[..., 0] + noise).float()  # [n, P] float32

        features = torch.zeros(n, 2 * P, d + 2, dtype=torch.float32)
        features[:, 0::2, :d] = x.float()
        features[:, 1::2, d] = y
        features[:, 1::2, d + 1] = 1.0
        if self.paired:
            features[:, 1::2, :d] = x.float()
        tokens = torch.zeros(n, 2 * P, dtype=torch.long)
        tokens[:, 1::2] = 1
        targets = torch.full(tokens.shape, IGNORE, dtype=torch.long)
        targets[:, 0::2] = self.bin_of(y)
        return Episodes(
            tokens=tokens,
            targets=targets,
            posterior=self.lazy_posterior(tokens, features),
            mask=self.scored_mask(tokens, features),
            latent={"w": w, "x": x.float(), "y": y},
            features=features,
        )

    def scored_mask(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, 0::2] = True
        return mask

    def predictive(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior-predictive mean and std of ``y_i`` at every x-position, ``[B, n_x]`` float64 each.

        Sequential (Kalman / recursive least-squares) form of the posterior above, one rank-1 update
        per observed point instead of a factorisation per position: with ``s = σ² + xᵀΣx`` (the
        predictive variance at ``x``) and ``k = Σx / s``, observing ``(x, y)`` gives
        ``μ ← μ + k (y − μᵀx)`` and ``Σ ← Σ − s k kᵀ`` (symmetric by construction).  Equal to the
        per-position Cholesky solve (``predictive_reference``) to float64 rounding.
        """
        d = self.d
        f = features.double()
        X = f[:, 0::2, :d]  # [B, nx, d]
        Y = f[:, 1::2, d]  # [B, ny]
        B, nx, _ = X.shape
        s2 = self.sigma**2
        cov = (torch.eye(d, dtype=torch.float64) * self.sigma_w**2).repeat(B, 1, 1)  # Σ [B, d, d]
        mu = torch.zeros(B, d, dtype=torch.float64)
        mean = torch.empty(B, nx, dtype=torch.float64)
        var = torch.empty(B, nx, dtype=torch.float64)
        for i in range(nx):
            xi = X[:, i]  # [B, d]
            cx = (cov * xi[:, None, :]).sum(-1)  # Σx (elementwise: faster than bmm for tiny matrices)
            s = s2 + (cx * xi).sum(-1).clamp_min(0.0)  # σ² + xᵀΣx ≥ σ² (rounding cannot make it less)
            mean[:, i] = (mu * xi).sum(-1)
            var[:, i] = s
            if i < Y.shape[1]:
                k = cx / s[:, None]
                mu = mu + k * (Y[:, i] - mean[:, i])[:, None]
                cov = cov - k[:, :, None] * cx[:, None, :]
        return mean, var.sqrt()

    def predictive_reference(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``predictive`` from the precision form, a Cholesky factorisation per position (the test
        and benchmark oracle): ``Σ⁻¹ = I/σ_w² + XᵀX/σ²``, ``μ = Σ Xᵀy/σ²``."""
        d = self.d
        f = features.double()
        X = f[:, 0::2, :d]
        Y = f[:, 1::2, d]
        B, nx, _ = X.shape
        s2 = self.sigma**2
        prec = torch.eye(d, dtype=torch.float64).expand(B, d, d) / self.sigma_w**2
        rhs = torch.zeros(B, d, 1, dtype=torch.float64)
        mean = torch.empty(B, nx, dtype=torch.float64)
        var = torch.empty(B, nx, dtype=torch.float64)
        for i in range(nx):
            L = torch.linalg.cholesky(prec)
            xi = X[:, i, :, None]
            mu = torch.cholesky_solve(rhs, L)
            v = torch.linalg.solve_triangular(L, xi, upper=False)  # ‖L⁻¹x‖² = xᵀΣx
            mean[:, i] = (mu * xi).sum((1, 2))
            var[:, i] = s2 + (v * v).sum((1, 2))
            if i < Y.shape[1]:
                prec = prec + xi @ xi.transpose(1, 2) / s2
                rhs = rhs + xi * Y[:, i, None, None] / s2
        return mean, var.sqrt()

    def posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        if features is None:
            raise InvalidValue("invalid features: the regression task needs real-valued features")
        B, T = tokens.shape
        out = torch.empty(B, T, self.C, dtype=torch.float64)
        out[:, 1::2] = 1.0 / self.C  # y-positions are not scored: uniform rows
        if self.pool is not None:
            out[:, 0::2] = self._pool_predictive(features)
            return out
        mean, std = self.predictive(features)
        out[:, 0::2] = normal_bin_mass(mean, std, self.bin_edges())
        return out

    def windowed_posterior(self, tokens: torch.Tensor, features: torch.Tensor | None = None,
                           window: int = 1) -> torch.Tensor:
        """The predictive of an observer that sees only the last ``window`` points ``(x_j, y_j)`` before
        each x-position, and that position's ``x_i``: :meth:`posterior` of the episode cut to those points
        (the points are exchangeable given ``w``, so the older ones carry nothing the window's rule needs).
        ``window = 0`` is the prior predictive ``N(0, σ_w²‖x_i‖² + σ²)`` binned — a predictor that reads
        the current input and infers nothing from the context."""
        check(is_int(window) and window >= 0, "window", "a non-negative integer")
        if features is None:
            raise InvalidValue("invalid features: the regression task needs real-valued features")
        B, T = tokens.shape
        out = torch.full((B, T, self.C), 1.0 / self.C, dtype=torch.float64)
        for t in range(0, T, 2):
            first = max(0, t - 2 * window)
            out[:, t] = self.posterior(tokens[:, first : t + 1], features[:, first : t + 1])[:, -1]
        return out

    def _pool_predictive(self, features: torch.Tensor, batch: int = 64, members: int = 512) -> torch.Tensor:
        """The mixture over the pool (module docstring) at every x-position ``[B, n_x, C]``, in chunks of
        ``batch`` episodes × ``members`` pool members (the bin masses of a chunk are ``batch·n_x·members·C``)."""
        d, s2, W, edges = self.d, self.sigma**2, self.pool_members(), self.bin_edges()
        f = features.double()
        X, Y = f[:, 0::2, :d], f[:, 1::2, d]
        B, nx = X.shape[:2]
        out = torch.empty(B, nx, self.C, dtype=torch.float64)
        for b0 in range(0, B, batch):
            means = X[b0 : b0 + batch] @ W.T  # [b, nx, pool]: each member's predicted y
            sq = (Y[b0 : b0 + batch, : nx - 1, None] - means[:, : nx - 1]) ** 2  # the points before the last x
            loglik = torch.zeros_like(means)
            loglik[:, 1:] = -torch.cumsum(sq, 1) / (2 * s2)  # x-position i has seen y_0 … y_{i-1}
            weight = torch.softmax(loglik, -1)
            acc = torch.zeros(means.shape[0], nx, self.C, dtype=torch.float64)
            for m0 in range(0, W.shape[0], members):
                mu = means[..., m0 : m0 + members]
                mass = normal_bin_mass(mu, torch.full_like(mu, self.sigma), edges)  # [b, nx, m, C]
                acc += (weight[..., m0 : m0 + members, None] * mass).sum(-2)
            out[b0 : b0 + batch] = acc
        return out

    def decode(self, episodes: Episodes, index: int = 0) -> list[str]:
        assert episodes.features is not None
        f = episodes.features[index]
        d = self.d
        out = []
        for t in range(f.shape[0]):
            if t % 2 == 0:
                out.append("x=(" + ", ".join(f"{float(v):.2f}" for v in f[t, :d]) + ")")
            else:
                out.append(f"y={float(f[t, d]):.3f}")
        return out
