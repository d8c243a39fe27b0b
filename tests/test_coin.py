"""Coin (Beta–Bernoulli and noisy-label SULA): posterior against quadrature / enumeration, and contract."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from windtunnel.tasks import IGNORE, make, oracle



def quad_heads(a: float, b: float, h: int, t: int) -> float:
    """P(next = heads | h heads in t flips) by numerical integration over the coin bias p.

    ∫ p · p^h (1-p)^(t-h) Beta(p; a, b) dp / ∫ p^h (1-p)^(t-h) Beta(p; a, b) dp, with QUADPACK's
    algebraic-endpoint weight (x^α (1-x)^β) so that a, b < 1 stay accurate to ~1e-13.
    """
    w = (a + h - 1.0, b + t - h - 1.0)
    opts = dict(weight="alg", wvar=w, epsabs=0.0, epsrel=1e-13, limit=200)
    num, _ = integrate.quad(lambda p: p, 0.0, 1.0, **opts)
    den, _ = integrate.quad(lambda p: 1.0, 0.0, 1.0, **opts)
    return num / den


def test_flips_posterior_matches_quadrature():
    rng = torch.Generator().manual_seed(0)
    checked = 0
    for i in range(12):
        a = float(torch.empty(1).uniform_(0.2, 5.0, generator=rng))
        b = float(torch.empty(1).uniform_(0.2, 5.0, generator=rng))
        task = make("coin", a=a, b=b, n=16)
        ep = task.sample(16, seed=i)
        cache: dict[tuple[int, int], float] = {}
        for row in range(len(ep)):
            flips = ep.tokens[row, 1:].tolist()
            for t in range(task.n):
                h = sum(flips[:t])
                if (h, t) not in cache:
                    cache[(h, t)] = quad_heads(a, b, h, t)
                ref = cache[(h, t)]
                assert abs(float(ep.posterior[row, t, 1]) - ref) < 1e-9
                assert abs(float(ep.posterior[row, t, 0]) - (1 - ref)) < 1e-9
                checked += 1
    assert checked >= 1000


def test_noisy_posterior_matches_enumeration():
    checked = 0
    for i, eps in enumerate([0.1, 0.02, 0.3, 0.45, 0.7, 0.9]):
        task = make("coin", labels="noisy", label_noise=eps, n=20)
        ep = task.sample(12, seed=i)
        e = Fraction(eps)  # exact rational arithmetic: enumerate y ∈ {0, 1}
        for row in range(len(ep)):
            labels = ep.tokens[row, 1:].tolist()
            for t in range(task.n):
                joint = []
                for y in (0, 1):
                    like = Fraction(1, 2)
                    for l in labels[:t]:
                        like *= (1 - e) if l == y else e
                    joint.append(like)
                p1 = float(joint[1] / (joint[0] + joint[1]))
                assert abs(float(ep.posterior[row, t, 1]) - p1) < 1e-12
                assert abs(float(ep.posterior[row, t, 0]) - (1 - p1)) < 1e-12
                checked += 1
    assert checked >= 1000


def test_flips_monte_carlo():
    """Targets drawn by sample() are distributed as the mean posterior (position by position)."""
    task = make("coin", a=0.5, b=2.0, n=8)
    ep = task.sample(40000, seed=7)
    freq = ep.targets.double().mean(0)
    pred = ep.posterior[..., 1].mean(0)
    se = (pred * (1 - pred) / len(ep)).sqrt()
    assert ((freq - pred).abs() < 5 * se).all()
    assert abs(float(pred[0]) - 0.5 / 2.5) < 1e-12  # the prior mean
    # the latent bias is Beta(a, b): mean a/(a+b), variance ab/((a+b)^2 (a+b+1))
    p = ep.latent["p"]
    assert abs(float(p.mean()) - 0.2) < 5 * (0.2 * 0.8 / 3.5 / len(ep)) ** 0.5
    assert abs(float(p.var()) - 0.5 * 2 / (2.5**2 * 3.5)) < 0.003
    assert torch.equal(ep.latent["flips"], ep.targets)


def test_noisy_monte_carlo_and_latent():
    task = make("coin", labels="noisy", label_noise=0.2, n=6)
    ep = task.sample(40000, seed=8)
    y = ep.latent["label"]
    assert (ep.targets == y[:, None]).all()
    assert torch.equal(ep.tokens[:, 1:], ep.latent["labels"][:, :-1])
    agree = (ep.latent["labels"] == y[:, None]).double().mean()
    assert abs(float(agree) - 0.8) < 0.01
    freq = ep.targets.double().mean(0)
    pred = ep.posterior[..., 1].mean(0)
    se = (pred * (1 - pred) / len(ep)).sqrt()
    assert ((freq - pred).abs() < 5 * se).all()
    # calibration: among positions where p(y=1) is high, y=1 that often
    sel = ep.posterior[:, 3, 1] > 0.9
    assert abs(float(ep.targets[sel, 3].double().mean() - ep.posterior[sel, 3, 1].mean())) < 0.01


@settings(max_examples=30, deadline=None)
@given(
    a=st.floats(0.05, 20),
    b=st.floats(0.05, 20),
    n=st.integers(1, 40),
    labels=st.sampled_from(["flips", "noisy"]),
    eps=st.floats(0.01, 0.99),
    seed=st.integers(0, 2**31 - 1),
)
def test_contract_properties(a, b, n, labels, eps, seed):
    task = make("coin", a=a, b=b, n=n, labels=labels, label_noise=eps)
    ep = task.sample(6, seed=seed)
    assert ep.tokens.shape == ep.targets.shape == ep.mask.shape == (6, n)
    assert ep.posterior.shape == (6, n, 2) and ep.posterior.dtype == torch.float64
    assert ep.mask.dtype == torch.bool and ep.mask.all()
    assert (ep.tokens[:, 0] == task.BOS).all() and (ep.tokens[:, 1:] <= 1).all()
    assert ((ep.targets == 0) | (ep.targets == 1)).all()
    assert torch.allclose(ep.posterior.sum(-1), torch.ones(6, n, dtype=torch.float64), atol=1e-12)
    assert (ep.posterior >= 0).all()
    assert not (ep.targets == IGNORE).any()
    again = task.sample(6, seed=seed)
    assert torch.equal(again.tokens, ep.tokens) and torch.equal(again.targets, ep.targets)
    assert torch.equal(again.posterior, ep.posterior)
    assert task.with_length(n + 1).seq_len == n + 1


@pytest.mark.parametrize("labels", ["flips", "noisy"])
def test_different_seeds_differ(labels):
    task = make("coin", labels=labels)
    assert not torch.equal(task.sample(16, seed=0).tokens, task.sample(16, seed=1).tokens)


@pytest.mark.parametrize("labels", ["flips", "noisy"])
def test_no_leak_from_the_future(labels):
    task = make("coin", labels=labels, n=10)
    ep = task.sample(32, seed=6)
    g = torch.Generator().manual_seed(0)
    for t in range(task.n):
        tokens = ep.tokens.clone()
        tokens[:, t + 1 :] = torch.randint(0, 2, tokens[:, t + 1 :].shape, generator=g)
        assert torch.equal(task.posterior(tokens)[:, : t + 1], ep.posterior[:, : t + 1])
    # and the target of position t is the token at t+1 (flips) or the hidden label (noisy)
    if labels == "flips":
        assert torch.equal(ep.targets[:, :-1], ep.tokens[:, 1:])


def test_tiny_beta_parameters_stay_finite():
    ep = make("coin", a=0.003, b=0.003, n=4).sample(20000, seed=0)
    assert torch.isfinite(ep.latent["p"]).all() and torch.isfinite(ep.posterior).all()


@pytest.mark.parametrize(
    "params, name",
    [
        ({"a": -1}, "a"),
        ({"a": 0}, "a"),
        ({"b": 0.0}, "b"),
        ({"b": float("inf")}, "b"),
        ({"a": float("nan")}, "a"),
        ({"n": 0}, "n"),
        ({"n": 3.0}, "n"),
        ({"labels": "soft"}, "labels"),
        ({"label_noise": 0.0}, "label_noise"),
        ({"label_noise": 1.0}, "label_noise"),
        ({"label_noise": "0.1"}, "label_noise"),
    ],
)
def test_invalid_params_raise(params, name):
    with pytest.raises(ValueError, match=name):
        make("coin", **params)


@pytest.mark.parametrize("labels", ["flips", "noisy"])
def test_oracle_reproduces_posterior(labels):
    task = make("coin", labels=labels, a=0.7, b=1.3)
    ep = task.sample(64, seed=2)
    probs = torch.softmax(oracle(task)(ep.tokens), dim=-1)
    assert torch.allclose(probs, ep.posterior, atol=1e-12, rtol=0)


def test_decode():
    task = make("coin", n=3)
    ep = task.sample(1, seed=0)
    assert task.decode(ep)[0] == "BOS" and set(task.decode(ep)[1:]) <= {"H", "T"}


@pytest.mark.parametrize("pool,seed", [(1, 0), (3, 1), (17, 2)])
def test_pooled_predictive_equals_the_mixture_over_members(pool: int, seed: int) -> None:
    """p(next = 1 | flips) = Σ_i p_i Π_j p_i^{f_j}(1-p_i)^{1-f_j} / Σ_i Π_j …, member by member."""
    task = make("coin", a=0.7, b=1.3, n=9, pool=pool, pool_seed=seed)
    members = task.pool_members()
    ep = task.sample(6, seed)
    assert all(bool((members == p).any()) for p in ep.latent["p"])  # every episode's bias is a member
    for b in range(6):
        flips = [int(x) for x in ep.tokens[b, 1:]]
        for t in range(task.n):
            like = torch.ones(pool, dtype=torch.float64)
            for f in flips[:t]:
                like = like * (members if f == 1 else 1 - members)
            want = float((like * members).sum() / like.sum())
            assert float(ep.posterior[b, t, 1]) == pytest.approx(want, rel=1e-10, abs=1e-14)
    assert task.unpooled() == make("coin", a=0.7, b=1.3, n=9, pool_seed=seed)
    fresh = task.unpooled().posterior(ep.tokens)
    assert torch.allclose(fresh[:, 0], torch.tensor([0.65, 0.35], dtype=torch.float64).expand(6, 2))  # p1 = a / (a + b)


def test_a_pool_of_one_is_its_bias_and_noisy_labels_refuse_a_pool() -> None:
    task = make("coin", n=6, pool=1)
    ep = task.sample(4, 0)
    assert torch.allclose(ep.posterior[..., 1], task.pool_members().expand(4, 6))
    with pytest.raises(ValueError, match="pool"):
        make("coin", labels="noisy", pool=4)
