"""Paper II's sticky chain: the predictive against brute-force enumeration, the chain, the inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from windtunnel.tasks import make, oracle



def reference_P(n: int, self_prob: float) -> np.ndarray:
    P = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                P[i, j] = 1.0 / min(abs(i - j), n - abs(i - j))
        P[i] *= (1 - self_prob) / P[i].sum()
        P[i, i] = self_prob
    return P


def brute_force_predictive(x: np.ndarray, mu: np.ndarray, P: np.ndarray, noise: float) -> np.ndarray:
    """p(y_t | x_1..x_t) for t = 1..L by summing over every path y_0..y_t (uniform y_0).

    ``x [N,L,D]`` float64 → ``[N,L,V]``; the full Gaussian log density, paths vectorised.
    """
    N, L, D = x.shape
    V = len(P)
    with np.errstate(divide="ignore"):
        logP = np.log(P)
    sq = ((x[:, :, None, :] - mu[None, None]) ** 2).sum(-1)  # [N,L,V]
    loglik = -0.5 * sq / noise**2 - D * np.log(noise * np.sqrt(2 * np.pi))
    out = np.empty((N, L, V))
    for t in range(1, L + 1):
        paths = np.array(list(itertools.product(range(V), repeat=t + 1)))  # y_0..y_t
        logw = np.full((N, len(paths)), -np.log(V))
        for u in range(1, t + 1):
            logw = logw + logP[paths[:, u - 1], paths[:, u]] + loglik[:, u - 1, paths[:, u - 1]]
        w = np.exp(logw - logw.max(1, keepdims=True))
        joint = np.stack([w[:, paths[:, -1] == k].sum(1) for k in range(V)], axis=1)
        out[:, t - 1] = joint / joint.sum(1, keepdims=True)
    return out


@pytest.mark.parametrize(
    "params,n,batch",
    [
        ({"length": 4}, 1000, 250),  # the paper's chain, 8^5 paths
        ({"n_symbols": 3, "self_prob": 0.9, "dim": 2, "noise": 0.5, "length": 5, "means_seed": 3}, 400, 400),
        ({"n_symbols": 4, "self_prob": 0.0, "dim": 3, "noise": 2.0, "length": 5}, 300, 300),
        ({"n_symbols": 2, "self_prob": 1.0, "dim": 1, "noise": 0.2, "length": 6}, 200, 200),
    ],
)
def test_posterior_equals_enumeration_over_all_paths(params, n, batch):
    task = make("sticky", **params)
    P = reference_P(task.n_symbols, task.self_prob)
    ep = task.sample(n, 17)
    np.testing.assert_allclose(ep.latent["P"].numpy(), P, rtol=0, atol=1e-15)
    mu = ep.latent["means"].numpy()
    for part in ep.chunks(batch):
        want = brute_force_predictive(part.features.double().numpy(), mu, P, task.noise)
        np.testing.assert_allclose(part.posterior.numpy(), want, rtol=0, atol=1e-9)


def test_chain_transition_frequencies_match_P():
    task = make("sticky")
    y = task.sample(20000, 1).latent["symbols"]
    V = task.n_symbols
    counts = torch.zeros(V, V, dtype=torch.float64)
    counts.index_put_((y[:, :-1].reshape(-1), y[:, 1:].reshape(-1)), torch.ones(1, dtype=torch.float64), accumulate=True)
    freq = counts / counts.sum(-1, keepdim=True)
    assert (freq - torch.from_numpy(reference_P(V, 0.3))).abs().max() < 0.01
    start = torch.bincount(y[:, 0], minlength=V).double() / len(y)
    assert (start - 1 / V).abs().max() < 0.01
    assert (torch.bincount(y[:, -1], minlength=V).double() / len(y) - 1 / V).abs().max() < 0.01  # stationary


def test_features_are_means_plus_noise():
    task = make("sticky", noise=0.7)
    ep = task.sample(4000, 2)
    y, mu = ep.latent["symbols"], ep.latent["means"]
    resid = ep.features.double() - mu[y[:, :-1]]
    assert abs(resid.mean()) < 0.005
    assert abs(resid.std() - 0.7) < 0.005
    assert torch.equal(mu, make("sticky", means_seed=0).means())
    assert not torch.equal(mu, make("sticky", means_seed=1).means())


def test_calibration():
    """The sampled target is a draw from the predictive: E[onehot(y_t) - p_t] = 0."""
    task = make("sticky")
    ep = task.sample(10000, 3)
    diff = torch.nn.functional.one_hot(ep.targets, task.n_symbols).double() - ep.posterior
    assert diff.mean((0, 1)).abs().max() < 0.004


def test_shapes_dtypes_mask_and_oracle():
    task = make("sticky")
    assert (task.n_classes, task.vocab_size, task.seq_len, task.n_features) == (8, 1, 32, 20)
    assert not task.soft_targets
    ep = task.sample(64, 0)
    assert ep.tokens.shape == (64, 32) and ep.tokens.dtype == torch.long and (ep.tokens == 0).all()
    assert ep.features.shape == (64, 32, 20) and ep.features.dtype == torch.float32
    assert ep.posterior.shape == (64, 32, 8) and ep.posterior.dtype == torch.float64
    assert ep.mask.dtype == torch.bool and ep.mask.all()
    assert torch.allclose(ep.posterior.sum(-1), torch.ones(64, 32, dtype=torch.float64), rtol=0, atol=1e-12)
    assert ep.targets.dtype == torch.long and torch.equal(ep.targets, ep.latent["symbols"][:, 1:])
    assert ep.latent["symbols"].shape == (64, 33)
    assert ep.latent["means"].shape == (8, 20) and ep.latent["P"].shape == (8, 8)
    logits = oracle(task)(**ep.inputs)
    assert torch.allclose(torch.softmax(logits, -1), ep.posterior, rtol=0, atol=1e-12)
    # causal: a prefix of the features gives the same predictive on that prefix
    assert torch.equal(task.posterior(ep.tokens[:, :5], ep.features[:, :5]), ep.posterior[:, :5])
    with pytest.raises(ValueError, match="features"):
        task.posterior(ep.tokens)


def test_determinism_and_seed_difference():
    task = make("sticky")
    a, b, c = task.sample(32, 5), task.sample(32, 5), task.sample(32, 6)
    assert torch.equal(a.features, b.features) and torch.equal(a.posterior, b.posterior)
    assert torch.equal(a.targets, b.targets)
    assert not torch.equal(a.features, c.features) and not torch.equal(a.targets, c.targets)


def test_length_generalisation():
    task = make("sticky").with_length(100)
    ep = task.sample(8, 0)
    assert ep.features.shape == (8, 100, 20) and ep.latent["symbols"].shape == (8, 101)


@pytest.mark.parametrize(
    "params,name",
    [({"n_symbols": 1}, "n_symbols"), ({"self_prob": 1.5}, "self_prob"), ({"self_prob": float("nan")}, "self_prob"),
     ({"dim": 0}, "dim"), ({"length": 0}, "length"), ({"means_seed": 1.5}, "means_seed"),
     ({"noise": 0.0}, "noise"), ({"noise": float("inf")}, "noise"), ({"n_symbols": True}, "n_symbols")],
)
def test_invalid_params(params, name):
    with pytest.raises(ValueError, match=f"invalid {name}"):
        make("sticky", **params)
