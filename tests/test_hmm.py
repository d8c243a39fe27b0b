"""The HMM wind tunnel: grid, tokens, and the filtering posterior against brute-force enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from windtunnel.tasks import IGNORE, make, oracle
from windtunnel.tasks.hmm import HMM, discretise



def brute_force_filter(T: np.ndarray, E: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """p(s_t | o_1..o_t) for every t by summing over all state paths s_1..s_t (uniform start).

    ``T [N,S,S]``, ``E [N,S,O]``, ``obs [N,K]`` → ``[N,K,S]``; vectorised over instances and paths.
    """
    N, S, _ = T.shape
    K = obs.shape[1]
    rows = np.arange(N)[:, None]
    out = np.empty((N, K, S))
    for t in range(1, K + 1):
        paths = np.array(list(itertools.product(range(S), repeat=t)))  # [P, t]
        w = np.full((N, len(paths)), 1.0 / S)
        for u in range(t):
            e = E[rows, :, obs[:, u : u + 1]][:, 0, :]  # [N,S]: E[n, s, o_u]
            w = w * e[:, paths[:, u]]
            if u > 0:
                w = w * T[:, paths[:, u - 1], paths[:, u]]
        joint = np.stack([w[:, paths[:, -1] == j].sum(1) for j in range(S)], axis=1)
        out[:, t - 1] = joint / joint.sum(1, keepdims=True)
    return out


@pytest.mark.parametrize("S,O,K,n,seed", [(2, 3, 6, 400, 1), (3, 2, 6, 400, 2), (5, 5, 5, 300, 3), (3, 4, 1, 50, 4)])
def test_posterior_equals_enumeration_over_all_paths(S, O, K, n, seed):
    task = make("hmm", S=S, O=O, K=K)
    ep = task.sample(n, seed)
    T, E = ep.latent["T"].numpy(), ep.latent["E"].numpy()
    want = brute_force_filter(T, E, ep.latent["observations"].numpy())
    got = ep.posterior[:, task.header_len :].numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_grid_and_header_decode_exactly():
    task = make("hmm", K=3)
    ep = task.sample(2000, 7)
    H = task.header_len
    for name, cols in (("T", task.S), ("E", task.O)):
        m = ep.latent[name]
        cents = torch.round(m * 100).long()
        assert torch.equal(m, cents.double() / 100)  # exactly k/100
        assert (cents >= 5).all()
        assert (cents.sum(-1) == 100).all()
        assert m.shape == (2000, task.S, cols)
    T_tok, E_tok = task.decode_header(ep.tokens)
    assert torch.equal(T_tok, ep.latent["T"]) and torch.equal(E_tok, ep.latent["E"])
    tok = ep.tokens
    assert (tok[:, 0] == 96).all() and (tok[:, 1 + 25] == 97).all() and (tok[:, H - 1] == 98).all()
    assert torch.equal(tok[:, 1:26], torch.round(ep.latent["T"] * 100).long().view(-1, 25) - 5)
    assert torch.equal(tok[:, H:], ep.latent["observations"] + 99)
    assert tok.min() >= 0 and tok.max() < task.vocab_size
    # the floor binds often enough to matter, and entries vary
    assert (tok[:, 1:H - 1] == 0).float().mean() > 0.05


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.integers(0, 2**31 - 1))
def test_discretise_always_valid(C, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.empty(64, C, dtype=torch.float64).exponential_(generator=g) ** 3  # spiky rows
    x = (x / x.sum(-1, keepdim=True)).clamp_min(0.05)
    cents = discretise(x / x.sum(-1, keepdim=True))
    assert (cents >= 5).all() and (cents.sum(-1) == 100).all()


def test_extreme_sizes():
    for S, O in ((20, 20), (2, 1), (20, 1), (19, 3)):
        task = make("hmm", S=S, O=O, K=4)
        ep = task.sample(50, 0)
        assert ep.tokens.shape == (50, 3 + S * S + S * O + 4)
        assert (torch.round(ep.latent["T"] * 100).long().sum(-1) == 100).all()
        assert torch.allclose(ep.posterior.sum(-1), torch.ones(1, dtype=torch.float64), atol=1e-12)
    tok = make("hmm", S=20, O=20, K=1).sample(3, 0).tokens
    assert (tok[:, 1:401] == 0).all() and (tok[:, 402:802] == 0).all()  # every entry is 0.05


def test_determinism_and_seed_difference():
    task = make("hmm")
    a, b, c = task.sample(64, 5), task.sample(64, 5), task.sample(64, 6)
    for x, y in ((a.tokens, b.tokens), (a.targets, b.targets), (a.posterior, b.posterior)):
        assert torch.equal(x, y)
    assert not torch.equal(a.tokens, c.tokens)
    assert not torch.equal(a.latent["states"], c.latent["states"])


@pytest.mark.parametrize(
    "params,name",
    [({"K": 0}, "K"), ({"K": 5000}, "K"), ({"K": 2.0}, "K"), ({"S": 30}, "S"), ({"S": 1}, "S"),
     ({"O": 21}, "O"), ({"O": 0}, "O"), ({"target": "x"}, "target"), ({"S": True}, "S")],
)
def test_invalid_params(params, name):
    with pytest.raises(ValueError, match=f"invalid {name}"):
        make("hmm", **params)


def test_invalid_n_and_unknown_param():
    with pytest.raises(ValueError, match="invalid n"):
        make("hmm").sample(0, 0)
    with pytest.raises(ValueError, match="min_prob"):
        make("hmm", min_prob=0.1)


@pytest.mark.parametrize("target", ["posterior", "state"])
def test_shapes_dtypes_mask_targets(target):
    task = make("hmm", target=target)
    assert task.soft_targets == (target == "posterior")
    assert (task.n_classes, task.vocab_size, task.seq_len) == (5, 104, 73)
    ep = task.sample(128, 0)
    B, L = 128, 73
    assert ep.tokens.shape == (B, L) and ep.tokens.dtype == torch.long
    assert ep.targets.shape == (B, L) and ep.targets.dtype == torch.long
    assert ep.posterior.shape == (B, L, 5) and ep.posterior.dtype == torch.float64
    assert ep.mask.dtype == torch.bool and torch.equal(ep.mask, task.scored_mask(ep.tokens))
    assert (ep.mask[:, 53:]).all() and not ep.mask[:, :53].any()
    assert torch.allclose(ep.posterior.sum(-1), torch.ones(B, L, dtype=torch.float64), rtol=0, atol=1e-12)
    assert (ep.posterior[:, :53] == 0.2).all() and (ep.posterior[:, 53:] > 0).all()
    assert (ep.targets[~ep.mask] == IGNORE).all()
    t = ep.targets[ep.mask]
    assert (t >= 0).all() and (t < 5).all()
    assert torch.equal(ep.targets[:, 53:], ep.latent["states"])
    assert ep.latent["states"].shape == (B, 20) and ep.latent["observations"].shape == (B, 20)
    dec = task.decode(ep, 3)
    assert len(dec) == L and dec[0] == "[TRANS]" and dec[52] == "[SEP]" and dec[53].startswith("o")
    assert dec[1] == f"T0,0={float(ep.latent['T'][3, 0, 0]):.2f}"


def test_oracle_and_causality():
    task = make("hmm", K=12)
    ep = task.sample(200, 3)
    logits = oracle(task)(ep.tokens)
    assert torch.allclose(torch.softmax(logits, -1), ep.posterior, rtol=0, atol=1e-12)
    # a prefix of the inputs gives the same posterior on that prefix
    H = task.header_len
    for k in (0, 1, 5):
        assert torch.equal(task.posterior(ep.tokens[:, : H + k]), ep.posterior[:, : H + k])


def test_length_generalisation():
    task = make("hmm").with_length(50)
    assert task.K == 50 and task.seq_len == 103
    ep = task.sample(10, 0)
    assert ep.tokens.shape == (10, 103) and ep.mask.sum() == 500


def test_sampled_paths_follow_the_matrices():
    """Transition/emission counts match the sampled matrices and the posterior is calibrated."""
    task = make("hmm", target="state")
    ep = task.sample(20000, 11)
    S, O = task.S, task.O
    s, o, T, E = ep.latent["states"], ep.latent["observations"], ep.latent["T"], ep.latent["E"]
    b = torch.arange(len(ep))[:, None].expand_as(s)
    # transitions: observed counts vs the expected count given the previous state
    obs_tr = torch.zeros(S, S, dtype=torch.float64)
    obs_tr.index_put_((s[:, :-1].reshape(-1), s[:, 1:].reshape(-1)), torch.ones(1, dtype=torch.float64), accumulate=True)
    exp_tr = torch.zeros(S, S, dtype=torch.float64).index_add_(0, s[:, :-1].reshape(-1), T[b[:, :-1], s[:, :-1]].reshape(-1, S))
    assert ((obs_tr - exp_tr).abs() / exp_tr.sqrt()).max() < 6
    obs_em = torch.zeros(S, O, dtype=torch.float64)
    obs_em.index_put_((s.reshape(-1), o.reshape(-1)), torch.ones(1, dtype=torch.float64), accumulate=True)
    exp_em = torch.zeros(S, O, dtype=torch.float64).index_add_(0, s.reshape(-1), E[b, s].reshape(-1, O))
    assert ((obs_em - exp_em).abs() / exp_em.sqrt()).max() < 6
    # the sampled state is a draw from the filtering posterior: E[onehot(s_t) - alpha_t] = 0
    post = ep.posterior[:, task.header_len :]
    diff = torch.nn.functional.one_hot(s, S).double() - post
    assert diff.mean((0, 1)).abs().max() < 0.006
    # the initial state is uniform
    counts = torch.bincount(s[:, 0], minlength=S).double()
    assert ((counts - 4000).abs() / 4000**0.5).max() < 6


def test_a_pool_of_hmms_draws_every_episode_from_its_members() -> None:
    """Every episode's matrices are one of the pool's; the posterior is the fresh task's (the header holds
    the matrices), and the observation stream is drawn as the fresh task draws it."""
    task = make("hmm", S=3, O=3, K=6, pool=4, pool_seed=2)
    T, E = task.pool_members()
    ep = task.sample(32, 5)
    got = torch.cat([(ep.latent["T"] * 100).round().long().flatten(1), (ep.latent["E"] * 100).round().long().flatten(1)], 1)
    members = torch.cat([T.flatten(1), E.flatten(1)], 1)
    assert all(any(torch.equal(row, m) for m in members) for row in got)
    assert len({tuple(r.tolist()) for r in got}) <= 4
    fresh = task.unpooled()
    assert fresh == make("hmm", S=3, O=3, K=6, pool_seed=2) and fresh.unpooled() is None
    assert torch.equal(ep.posterior, fresh.posterior(ep.tokens))
    assert torch.equal(make("hmm", S=3, O=3, K=6, pool=4, pool_seed=3).pool_members()[0], T) is False
