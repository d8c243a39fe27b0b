"""Bayesian linear regression: bin probabilities against direct quadrature over w, and contract.

The reference integrates ``∫ p(w | data) [Φ(hi; w·x, σ) − Φ(lo; w·x, σ)] dw`` numerically, with
``p(w | data) ∝ N(w; 0, σ_w² I) Π_j N(y_j; w·x_j, σ²)`` evaluated pointwise (no conjugate algebra):
an adaptive tensor Gauss–Legendre grid locates the posterior from its own numerical moments, then a
final grid (composite Gauss–Legendre along the direction of ``x``) gives the bin masses.  The
two agree to ~3e-15 on the cases below (1560 (sequence, position) instances, d = 1 and 2); the
tests hold the implementation to 1e-12, the margin the quadrature leaves when Φ is steep in w.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from windtunnel.tasks import IGNORE, make, oracle
from windtunnel.tasks.regression import normal_bin_mass, normal_bin_mass_reference


TOL = 1e-12


def _gl(n: int, half: float) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return x * half, w * half


def _composite_gl(panels: int, per: int, half: float) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(per)
    h = 2 * half / panels
    left = -half + h * np.arange(panels)
    nodes = (left[:, None] + h / 2 * (x[None, :] + 1)).ravel()
    return nodes, np.tile(w * h / 2, panels)


def _bin_masses(mu: np.ndarray, sigma: float, edges: np.ndarray) -> np.ndarray:
    """Mass of N(mu, σ²) in each bin (outer bins unbounded), upper tail via the survival function."""
    z = (edges - mu[..., None]) / sigma
    lo = np.concatenate([np.full(z.shape[:-1] + (1,), -np.inf), z], -1)
    hi = np.concatenate([z, np.full(z.shape[:-1] + (1,), np.inf)], -1)
    return np.where(lo >= 0, stats.norm.sf(lo) - stats.norm.sf(hi), stats.norm.cdf(hi) - stats.norm.cdf(lo))


def quadrature_bins(X, Y, xq, edges, sigma_w, sigma):
    """Reference bin probabilities by quadrature over w.  X [N,m,d], Y [N,m], xq [N,d]; d in {1, 2}."""
    N, m, d = X.shape

    def log_post(W):  # W [N, K, d] -> unnormalised log p(w | data)
        lp = -(W**2).sum(-1) / (2 * sigma_w**2)
        if m:
            r = Y[:, None, :] - W @ X.transpose(0, 2, 1)
            lp = lp - (r**2).sum(-1) / (2 * sigma**2)
        return lp

    # 1) locate the posterior: tensor Gauss–Legendre in the current whitened box, moments, repeat;
    #    the box keeps a sliver of its old size so a posterior narrower than the node spacing is not lost
    u, wu = _gl(48, 10.0)
    U = np.stack(np.meshgrid(*([u] * d), indexing="ij"), -1).reshape(-1, d)
    logWU = np.log(np.prod(np.stack(np.meshgrid(*([wu] * d), indexing="ij"), -1).reshape(-1, d), -1))
    mean = np.zeros((N, d))
    S = np.broadcast_to(np.eye(d) * sigma_w**2, (N, d, d)).copy()
    for _ in range(7):
        A = np.linalg.cholesky(S)
        W = mean[:, None, :] + U[None] @ A.transpose(0, 2, 1)
        lp = log_post(W) + logWU
        p = np.exp(lp - lp.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        mean = (p[:, None, :] @ W)[:, 0]
        D = W - mean[:, None, :]
        S = (D * p[:, :, None]).transpose(0, 2, 1) @ D + 0.02 * S

    # 2) final grid: whitened coordinates rotated so that u1 runs along A^T xq (the only direction the
    #    bin masses depend on); composite GL along u1 (Φ may be steep there), plain GL along u2
    A = np.linalg.cholesky(S)
    v = np.einsum("nde,nd->ne", A, xq)  # A^T xq
    vn = np.linalg.norm(v, axis=1)
    e1 = v / vn[:, None]
    R = e1[:, :, None] if d == 1 else np.stack([e1, np.stack([-e1[:, 1], e1[:, 0]], 1)], 2)
    u1, w1 = _composite_gl(200, 10, 10.0)
    if d == 1:
        U2, w2 = np.zeros((1, 0)), np.ones(1)
    else:
        u2, w2 = _gl(40, 10.0)
        U2 = u2[:, None]
    K1, K2 = len(u1), len(w2)
    UU = np.concatenate([np.repeat(u1[:, None], K2, 0), np.tile(U2, (K1, 1))], 1)  # [K1*K2, d]
    W = mean[:, None, :] + UU[None] @ (A @ R).transpose(0, 2, 1)
    lp = log_post(W).reshape(N, K1, K2) + np.log(w2)[None, None, :]
    lp = lp - lp.max((1, 2), keepdims=True)
    marg = np.exp(lp).sum(2) * w1[None, :]  # [N, K1]: integrate u2 first (Fubini)
    marg /= marg.sum(1, keepdims=True)
    mu = (mean * xq).sum(1)[:, None] + u1[None, :] * vn[:, None]  # w·xq at the nodes
    return np.einsum("nk,nkc->nc", marg, _bin_masses(mu, sigma, edges))


def instances(task, ep):
    """Every scored position as (X_<i, Y_<i, x_i, posterior row), grouped by i (so arrays stack)."""
    d = task.d
    f = ep.features.double().numpy()
    X, Y = f[:, 0::2, :d], f[:, 1::2, d]
    for i in range(task.points):
        yield X[:, :i], Y[:, :i], X[:, i], ep.posterior[:, 2 * i].numpy()


@pytest.mark.parametrize(
    "params, n_seq",
    [
        (dict(d=1, points=6, C=10, sigma_w=1.0, sigma=0.5, y_range=2.0), 120),
        (dict(d=1, points=5, C=7, sigma_w=2.0, sigma=0.3, y_range=1.0), 60),
        (dict(d=2, points=5, C=8, sigma_w=1.0, sigma=0.5, y_range=2.0), 60),
        (dict(d=2, points=4, C=6, sigma_w=0.7, sigma=0.8, y_range=1.5), 60),
    ],
)
@pytest.mark.slow
def test_posterior_matches_quadrature(params, n_seq):
    task = make("regression", **params)
    ep = task.sample(n_seq, seed=11)
    edges = task.bin_edges().numpy()
    worst = 0.0
    for X, Y, xq, post in instances(task, ep):
        for s in range(0, n_seq, 30):  # chunks keep the d=2 grids small
            ref = quadrature_bins(X[s : s + 30], Y[s : s + 30], xq[s : s + 30], edges, task.sigma_w, task.sigma)
            worst = max(worst, float(np.abs(ref - post[s : s + 30]).max()))
    print(f"worst |posterior - quadrature| = {worst:.2e}")
    assert worst < TOL, worst


def test_monte_carlo_bin_frequencies():
    task = make("regression", d=2, points=4, C=8, y_range=1.5)
    ep = task.sample(30000, seed=3)
    N = len(ep)
    for t in range(0, task.seq_len, 2):
        freq = torch.bincount(ep.targets[:, t], minlength=task.C).double() / N
        pred = ep.posterior[:, t].mean(0)
        se = (pred * (1 - pred) / N).sqrt()
        assert ((freq - pred).abs() < 5 * se + 1e-4).all(), (t, freq, pred)


def test_latent_and_layout():
    task = make("regression", d=3, points=5)
    ep = task.sample(2000, seed=4)
    f, d = ep.features, 3
    assert ep.features.dtype == torch.float32 and ep.features.shape == (2000, 10, 5)
    assert torch.equal(f[:, 0::2, :d], ep.latent["x"]) and torch.equal(f[:, 1::2, d], ep.latent["y"])
    assert (f[:, 0::2, d:] == 0).all() and (f[:, 1::2, :d] == 0).all() and (f[:, 1::2, d + 1] == 1).all()
    assert (ep.tokens[:, 0::2] == 0).all() and (ep.tokens[:, 1::2] == 1).all()
    assert ep.latent["w"].shape == (2000, 3) and ep.latent["w"].dtype == torch.float64
    resid = ep.latent["y"].double() - (ep.latent["x"].double() @ ep.latent["w"][:, :, None])[..., 0]
    assert abs(float(resid.std()) - task.sigma) < 0.02
    assert abs(float(ep.latent["w"].std()) - task.sigma_w) < 0.03
    assert torch.equal(ep.targets[:, 0::2], task.bin_of(ep.latent["y"]))


def test_bin_edges_and_bin_of():
    task = make("regression", d=2, C=6, sigma_w=1.5, sigma=0.5, y_range=2.0)
    e = task.bin_edges()
    R = 2.0 * math.sqrt(2 * 1.5**2 + 0.5**2)
    assert e.dtype == torch.float64 and e.shape == (5,)
    assert torch.allclose(e, torch.linspace(-R, R, 5, dtype=torch.float64))
    y = torch.tensor([-1e9, -R - 1e-9, -R, 0.0, R - 1e-9, R, 1e9], dtype=torch.float64)
    assert task.bin_of(y).tolist() == [0, 0, 1, 3, 4, 5, 5]


def test_tail_bins_keep_relative_precision():
    edges = torch.tensor([10.0, 11.0, 12.0], dtype=torch.float64)
    m = normal_bin_mass(torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64), edges)[0]
    ref = [stats.norm.sf(10) - stats.norm.sf(11), stats.norm.sf(11) - stats.norm.sf(12), stats.norm.sf(12)]
    assert np.allclose(m[1:].numpy(), ref, rtol=1e-12, atol=0)
    m = normal_bin_mass(torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64), -edges.flip(0))[0]
    assert np.allclose(m[:3].numpy(), ref[::-1], rtol=1e-12, atol=0)


def test_no_leak_from_the_future():
    """The posterior at x-position 2i is unchanged when y_i and everything after it changes."""
    task = make("regression", d=2, points=5, C=9)
    ep = task.sample(16, seed=5)
    for t in range(0, task.seq_len, 2):
        f = ep.features.clone()
        f[:, t + 1 :] = torch.randn(f[:, t + 1 :].shape, generator=torch.Generator().manual_seed(t))
        post = task.posterior(ep.tokens, f)
        assert torch.equal(post[:, : t + 1], ep.posterior[:, : t + 1])


@settings(max_examples=25, deadline=None)
@given(
    d=st.integers(1, 5),
    points=st.integers(1, 8),
    C=st.integers(3, 20),
    sigma_w=st.floats(0.1, 5.0),
    sigma=st.floats(0.05, 3.0),
    y_range=st.floats(0.2, 6.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_contract_properties(d, points, C, sigma_w, sigma, y_range, seed):
    task = make("regression", d=d, points=points, C=C, sigma_w=sigma_w, sigma=sigma, y_range=y_range)
    ep = task.sample(5, seed=seed)
    T = 2 * points
    assert task.seq_len == T and task.n_features == d + 2 and task.vocab_size == 2 and task.n_classes == C
    assert ep.tokens.shape == (5, T) and ep.tokens.dtype == torch.long
    assert ep.features.shape == (5, T, d + 2)
    assert ep.posterior.shape == (5, T, C) and ep.posterior.dtype == torch.float64
    assert ep.mask.dtype == torch.bool and ep.mask[:, 0::2].all() and not ep.mask[:, 1::2].any()
    assert torch.allclose(ep.posterior.sum(-1), torch.ones(5, T, dtype=torch.float64), atol=1e-12)
    assert (ep.posterior >= 0).all()
    assert (ep.targets[~ep.mask] == IGNORE).all()
    tgt = ep.targets[ep.mask]
    assert ((tgt >= 0) & (tgt < C)).all()
    assert (ep.posterior[ep.mask].gather(1, tgt[:, None]) > 0).all()
    again = task.sample(5, seed=seed)
    assert torch.equal(again.features, ep.features) and torch.equal(again.posterior, ep.posterior)
    assert task.with_length(points + 2).seq_len == T + 4


def test_different_seeds_differ():
    task = make("regression")
    assert not torch.equal(task.sample(4, seed=0).features, task.sample(4, seed=1).features)


@pytest.mark.parametrize(
    "params, name",
    [
        ({"d": 0}, "d"),
        ({"d": 1.5}, "d"),
        ({"points": 0}, "points"),
        ({"C": 2}, "C"),
        ({"sigma": 0.0}, "sigma"),
        ({"sigma_w": -1.0}, "sigma_w"),
        ({"y_range": 0}, "y_range"),
        ({"sigma": float("nan")}, "sigma"),
    ],
)
def test_invalid_params_raise(params, name):
    with pytest.raises(ValueError, match=name):
        make("regression", **params)


def test_posterior_needs_features():
    task = make("regression", d=1, points=2)
    with pytest.raises(ValueError, match="features"):
        task.posterior(torch.zeros(1, 4, dtype=torch.long))


def test_oracle_reproduces_posterior():
    task = make("regression", d=3, points=6, C=12)
    ep = task.sample(32, seed=9)
    probs = torch.softmax(oracle(task)(**ep.inputs), dim=-1)
    # float64 softmax of log p: exact up to rounding, plus the (≤1e-300) floor on zero-mass tail bins
    assert torch.allclose(probs, ep.posterior, atol=1e-12, rtol=1e-9)


def test_prior_to_noise_ratios_float64_cannot_hold_are_refused_and_the_rest_sample() -> None:
    """σ_w/σ = 1e12 used to pass validation and crash in the Cholesky factor; the limit is 1e4."""
    with pytest.raises(ValueError, match="sigma_w"):
        make("regression", sigma_w=1e6, sigma=1e-6)
    for sw, s in [(1e4, 1.0), (1.0, 1e-4), (1e6, 1e2)]:
        ep = make("regression", d=8, points=64, sigma_w=sw, sigma=s).sample(4, 0)
        assert torch.allclose(ep.posterior.sum(-1), torch.ones(4, 128, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("params, tol", [({}, 1e-12), (dict(d=1, points=40), 1e-12),
                                         (dict(d=32, points=64, sigma_w=2.0, sigma=0.1), 1e-10)])
def test_sequential_updates_equal_the_cholesky_solve(params, tol) -> None:
    """The rank-1 (Kalman) predictive equals the per-position Cholesky solve of the precision form
    (to rounding, which grows with d and σ_w²/σ²: 1.5e-11 measured at d = 32, σ_w/σ = 20)."""
    task = make("regression", **params)
    f = task.sample(64, seed=2).features
    mean, std = task.predictive(f)
    mean_ref, std_ref = task.predictive_reference(f)
    assert float(((mean - mean_ref) / std_ref).abs().max()) < tol
    assert float((std / std_ref - 1).abs().max()) < tol


def test_sequential_updates_at_the_conditioning_limit() -> None:
    """At σ_w/σ = 1e4 both forms lose digits to conditioning; they stay within 1e-5 of each other
    (measured against a long-double Gauss–Jordan solve: Kalman 1e-7, Cholesky 2e-7 relative)."""
    task = make("regression", d=4, points=16, sigma_w=1e4, sigma=1.0)
    f = task.sample(64, seed=3).features
    (mean, std), (mean_ref, std_ref) = task.predictive(f), task.predictive_reference(f)
    assert float(((mean - mean_ref) / std_ref).abs().max()) < 1e-5
    assert float((std / std_ref - 1).abs().max()) < 1e-5


def test_one_erfc_per_edge_equals_four_cdfs_per_bin() -> None:
    """``normal_bin_mass`` (one tail mass per edge) against the bin-by-bin reference: random means
    and widths, means exactly on an edge, beyond every edge, and tails to 1e-300."""
    g = torch.Generator().manual_seed(0)
    edges = torch.linspace(-11.0, 11.0, 63, dtype=torch.float64)
    mean = torch.cat([torch.randn(500, generator=g, dtype=torch.float64) * 8, edges[[0, 20, 31, 62]],
                      torch.tensor([-40.0, 40.0], dtype=torch.float64)])
    std = torch.cat([torch.rand(500, generator=g, dtype=torch.float64) * 3 + 0.05,
                     torch.full((6,), 0.37, dtype=torch.float64)])
    got, ref = normal_bin_mass(mean, std, edges), normal_bin_mass_reference(mean, std, edges)
    assert torch.allclose(got.sum(-1), torch.ones(506, dtype=torch.float64), atol=1e-14)
    tiny = ref < 1e-3
    assert float((got - ref).abs().max()) < 1e-15
    assert float(((got - ref).abs() / ref)[tiny & (ref > 1e-300)].max()) < 1e-12  # relative, in the tails


@pytest.mark.parametrize("pool", [1, 3, 700])
def test_pooled_predictive_equals_the_mixture_over_members(pool: int) -> None:
    """p(bin | data) = Σ_m π_m N-mass(bin; w_m·x, σ²), π_m ∝ Π_j N(y_j; w_m·x_j, σ²), member by member (the
    700-member pool crosses a chunk of the implementation)."""
    from windtunnel.tasks.regression import normal_bin_mass_reference

    task = make("regression", d=2, points=4, C=6, sigma=0.7, pool=pool, pool_seed=5)
    W = task.pool_members()
    ep = task.sample(3, 11)
    assert all(bool((W == w).all(-1).any()) for w in ep.latent["w"])  # every episode's w is a member
    f = ep.features.double()
    for b in range(3):
        for i in range(4):
            log_w = torch.zeros(pool, dtype=torch.float64)
            for j in range(i):
                x, y = f[b, 2 * j, :2], f[b, 2 * j + 1, 2]
                log_w += -((y - W @ x) ** 2) / (2 * 0.49)
            pi = torch.softmax(log_w, 0)
            mean = W @ f[b, 2 * i, :2]
            mass = normal_bin_mass_reference(mean, torch.full_like(mean, 0.7), task.bin_edges())  # [pool, C]
            assert torch.allclose(ep.posterior[b, 2 * i], (pi[:, None] * mass).sum(0), rtol=0, atol=1e-12)
    assert task.unpooled() == make("regression", d=2, points=4, C=6, sigma=0.7, pool_seed=5)


def test_d_active_is_the_smaller_regression_embedded_in_the_wider_input() -> None:
    """With ``d_active = 2`` of ``d = 4`` the trailing coordinates of every x are 0, and the posterior is
    the one of a 2-dimensional task on the first two coordinates with the same bin edges (``y_range``
    rescaled so the edges, which depend on d, coincide) — the quadrature-checked task, embedded."""
    wide = make("regression", d=4, points=5, C=9, d_active=2)
    ep = wide.sample(64, seed=3)
    x = ep.features[:, 0::2, :4]
    assert torch.all(x[..., 2:] == 0) and torch.all(x[..., :2] != 0)
    scale = math.sqrt((4 + 0.25) / (2 + 0.25))
    narrow = make("regression", d=2, points=5, C=9, y_range=4.0 * scale)
    assert torch.allclose(narrow.bin_edges(), wide.bin_edges(), rtol=1e-14, atol=0)
    f = torch.cat([ep.features[..., :2], ep.features[..., 4:]], dim=-1)  # drop the two zero coordinates
    assert torch.allclose(narrow.posterior(ep.tokens, f), ep.posterior, rtol=0, atol=1e-13)
    # the same stream as the full task: only the cut coordinates differ
    full = wide.replace(d_active=None).sample(64, seed=3)
    assert torch.equal(full.features[:, 0::2, :2], x[..., :2])
    with pytest.raises(ValueError, match="d_active"):
        make("regression", d=4, d_active=5)


def test_paired_layout_adds_each_input_to_its_response_and_nothing_else() -> None:
    """``paired``: every y-position carries the x of the x-position before it; the x-positions, tokens, targets
    and the posterior are those of the interleaved task, from the same stream."""
    task = make("regression", d=3, points=5, C=9)
    plain, paired = task.sample(32, seed=5), task.replace(paired=True).sample(32, seed=5)
    assert torch.equal(paired.features[:, 1::2, :3], plain.features[:, 0::2, :3])
    assert torch.equal(paired.features[:, 1::2, 3:], plain.features[:, 1::2, 3:])
    assert torch.equal(paired.features[:, 0::2], plain.features[:, 0::2])
    assert torch.equal(paired.tokens, plain.tokens) and torch.equal(paired.targets, plain.targets)
    assert torch.equal(paired.posterior, plain.posterior)
    assert torch.equal(task.posterior(paired.tokens, paired.features), plain.posterior)
    with pytest.raises(ValueError, match="paired"):
        make("regression", paired=1)


def test_windowed_posterior_is_the_quadrature_on_the_window_alone() -> None:
    """The observer that keeps the last ``m`` points: against quadrature over w given only those points
    (d = 2), the prior predictive at ``m = 0`` in closed form, and the full posterior once ``m`` spans the episode."""
    task = make("regression", d=2, points=5, C=8, y_range=2.0)
    ep = task.sample(6, seed=11)
    f = ep.features.double().numpy()
    X, Y = f[:, 0::2, :2], f[:, 1::2, 2]
    edges = task.bin_edges().numpy()
    for m in (0, 1, 3):
        got = task.windowed_posterior(ep.tokens, ep.features, window=m)
        for i in range(task.points):
            lo = max(0, i - m)
            want = quadrature_bins(X[:, lo:i], Y[:, lo:i], X[:, i], edges, task.sigma_w, task.sigma)
            assert np.allclose(got[:, 2 * i].numpy(), want, rtol=0, atol=TOL), (m, i)
        assert torch.all(got[:, 1::2] == 1.0 / task.C)  # y-positions are not scored
    x = ep.features[:, 0::2, :2].double()
    prior = normal_bin_mass(torch.zeros(x.shape[:2], dtype=torch.float64),
                            (x.pow(2).sum(-1) * task.sigma_w**2 + task.sigma**2).sqrt(), task.bin_edges())
    assert torch.allclose(task.windowed_posterior(ep.tokens, ep.features, window=0)[:, 0::2], prior, rtol=0, atol=1e-15)
    assert torch.equal(task.windowed_posterior(ep.tokens, ep.features, window=task.points)[:, 0::2],
                       ep.posterior[:, 0::2])


def test_dimension_curriculum_grows_the_inputs_over_the_first_third() -> None:
    """``grid.dimension_curriculum(4, 3000)``: d_active 1, 2, 3 for 333 steps each, then the full task; the
    stream's task at each step (``streams.curriculum_task``) draws inputs with exactly that many dimensions."""
    from windtunnel.run import grid
    from windtunnel.training.streams import curriculum_task
    from windtunnel.run.config import TrainConfig

    stages = grid.dimension_curriculum(4, 3000)
    assert stages == [{"until": 333, "task_params": {"d_active": 1}}, {"until": 666, "task_params": {"d_active": 2}},
                      {"until": 999, "task_params": {"d_active": 3}}]
    cfg = TrainConfig.from_dict(grid.Cell("quick", "regression_curriculum", "transformer", 0).config())
    task = make("regression", d=4, points=16, C=32)
    for step, used in ((0, 1), (332, 1), (333, 2), (998, 3), (999, 4), (2999, 4)):
        x = curriculum_task(cfg, task, step).sample(8, seed=step).features[:, 0::2, :4]
        assert int((x != 0).any(dim=(0, 1)).sum()) == used, step
