"""Bijection posterior vs brute-force enumeration of all permutations, and its properties."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from windtunnel import tasks
from windtunnel.tasks.base import entropy_bits


def brute_force(V: int, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """p(π(k_t)=y | pairs before t) by counting every permutation consistent with the pairs.

    keys, values: [B, L] (values[:, j] = π(keys[:, j])).  Returns [B, L, V] float64.
    """
    perms = np.array(list(itertools.permutations(range(V))))  # [P, V]
    B, L = keys.shape
    # agree[b, p, j]: permutation p maps key j to the shown value
    agree = perms[:, keys].transpose(1, 0, 2) == values[:, None, :]  # [B, P, L]
    prefix = np.ones((B, perms.shape[0], L), dtype=bool)
    prefix[:, :, 1:] = np.cumprod(agree[:, :, :-1], axis=2).astype(bool)
    predicted = perms[:, keys].transpose(1, 0, 2)  # [B, P, L] value each perm gives key t
    out = np.zeros((B, L, V))
    for y in range(V):
        out[:, :, y] = (prefix & (predicted == y)).sum(1)
    return out / out.sum(-1, keepdims=True)


@pytest.mark.parametrize("replacement", [False, True])
@pytest.mark.parametrize("V", [2, 4, 6])
def test_posterior_equals_enumeration(V: int, replacement: bool) -> None:
    L = V if not replacement else 2 * V
    task = tasks.make("bijection", V=V, L=L, replacement=replacement)
    ep = task.sample(1000, seed=V * 10 + replacement)
    keys = ep.latent["keys"].numpy()
    values = ep.latent["perm"].gather(1, ep.latent["keys"]).numpy()
    expect = brute_force(V, keys, values)
    got = ep.posterior[:, 0::2].numpy()
    assert np.abs(got - expect).max() < 1e-12
    # targets are the true values at key positions
    assert torch.equal(ep.targets[:, 0::2], torch.from_numpy(values))


def test_staircase_and_sawtooth() -> None:
    task = tasks.make("bijection", V=20, L=19)
    ep = task.sample(64, 0)
    H = entropy_bits(ep.posterior)[:, 0::2]
    expect = torch.tensor([math.log2(20 - k) for k in range(19)], dtype=torch.float64)
    assert torch.allclose(H, expect.expand_as(H), atol=1e-12)
    saw = tasks.make("bijection", V=20, L=40, replacement=True).sample(256, 1)
    Hs = entropy_bits(saw.posterior)[:, 0::2]
    keys = saw.latent["keys"]
    repeated = torch.tensor([[bool((keys[b, :t] == keys[b, t]).any()) for t in range(40)] for b in range(256)])
    distinct = torch.tensor([[len(set(keys[b, :t].tolist())) for t in range(40)] for b in range(256)])
    assert (Hs[repeated] == 0).all()
    assert torch.allclose(Hs[~repeated], torch.log2(20.0 - distinct[~repeated].double()), atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(V=st.integers(2, 30), frac=st.floats(0.05, 1.0), replacement=st.booleans(), seed=st.integers(0, 2**31))
def test_properties(V: int, frac: float, replacement: bool, seed: int) -> None:
    L = max(1, int(V * frac)) if not replacement else max(1, int(2 * V * frac))
    task = tasks.make("bijection", V=V, L=L, replacement=replacement)
    ep = task.sample(8, seed)
    assert ep.tokens.shape == (8, 2 * L - 1) and ep.tokens.dtype == torch.long
    assert ep.posterior.shape == (8, 2 * L - 1, V) and ep.posterior.dtype == torch.float64
    assert torch.allclose(ep.posterior.sum(-1), torch.ones(8, 2 * L - 1, dtype=torch.float64), atol=1e-12)
    assert int(ep.tokens.max()) < task.vocab_size
    # eliminated values are exact zeros at every key position
    perm_values = ep.latent["perm"].gather(1, ep.latent["keys"])
    for t in range(1, L):
        shown = perm_values[:, :t]
        rows = ep.posterior[:, 2 * t]
        for b in range(8):
            if not replacement or not bool((ep.latent["keys"][b, :t] == ep.latent["keys"][b, t]).any()):
                assert (rows[b, shown[b]] == 0).all()
    again = task.sample(8, seed)
    assert torch.equal(again.tokens, ep.tokens) and torch.equal(again.posterior, ep.posterior)


def test_invalid_parameters() -> None:
    for bad, name in [({"V": 1}, "V"), ({"V": 5, "L": 6}, "L"), ({"L": 0}, "L"), ({"replacement": "yes"}, "replacement")]:
        with pytest.raises(ValueError, match=name):
            tasks.make("bijection", **bad)
    with pytest.raises(ValueError, match="unknown parameter"):
        tasks.make("bijection", W=3)
    with pytest.raises(ValueError, match="unknown task"):
        tasks.make("nope")


def test_oracle_is_a_model_of_the_inputs() -> None:
    task = tasks.make("bijection", V=8, L=12, replacement=True)
    ep = task.sample(32, 3)
    logits = tasks.oracle(task)(**ep.inputs)
    assert torch.allclose(torch.softmax(logits.double(), -1), ep.posterior, atol=1e-12)


def _pool_posterior_by_hand(pool: list[list[int]], keys: list[int], values: list[int], V: int) -> list[list[float]]:
    """For each key position: the share of pool members (with multiplicity) agreeing with every earlier
    pair that map the key to each value."""
    rows = []
    for t, k in enumerate(keys):
        agree = [m for m in pool if all(m[keys[j]] == values[j] for j in range(t))]
        rows.append([sum(m[k] == y for m in agree) / len(agree) for y in range(V)])
    return rows


@pytest.mark.parametrize("params", [{"V": 5, "L": 4, "pool": 3}, {"V": 4, "L": 4, "pool": 40},
                                    {"V": 6, "L": 8, "replacement": True, "pool": 7, "pool_seed": 5}])
def test_pool_posterior_matches_counting_members(params: dict) -> None:
    task = tasks.make("bijection", **params)
    pool = task.pool_members().tolist()
    ep = task.sample(20, 3)
    V = task.V
    for b in range(20):
        keys = ep.tokens[b, 0::2].tolist()
        values = [v - V for v in ep.tokens[b, 1::2].tolist()]
        assert ep.latent["perm"][b].tolist() in pool  # every episode's permutation is a member
        want = torch.tensor(_pool_posterior_by_hand(pool, keys, values, V), dtype=torch.float64)
        assert torch.allclose(ep.posterior[b, 0::2], want, rtol=0, atol=1e-15)


def test_the_true_prior_oracle_of_a_pooled_task_is_the_fresh_tasks_posterior() -> None:
    task = tasks.make("bijection", V=6, L=5, pool=2)
    ep = task.sample(16, 0)
    fresh = tasks.make("bijection", V=6, L=5)
    got = torch.softmax(tasks.oracle(task, prior="true")(**ep.inputs).double(), -1)
    assert torch.allclose(got[ep.mask], fresh.posterior(ep.tokens)[ep.mask], atol=1e-12)
    assert task.unpooled() == fresh and fresh.unpooled() is None
    assert not torch.allclose(ep.posterior[ep.mask], got[ep.mask], atol=1e-3)  # two members: the pool tells more
    # the keys asked do not depend on the pool: a pooled run's episodes ask what the fresh run's ask
    assert torch.equal(ep.tokens[:, 0::2], fresh.sample(16, 0).tokens[:, 0::2])
    with pytest.raises(ValueError, match="prior"):
        tasks.oracle(task, prior="pool")


def test_a_pool_of_every_permutation_many_times_approaches_the_true_prior() -> None:
    """With all 24 permutations of 4 drawn 2^14 times the pool posterior is within sampling noise of the
    fresh task's (the multiset is close to uniform)."""
    task = tasks.make("bijection", V=4, L=4, pool=2**14)
    ep = task.sample(64, 1)
    fresh = tasks.make("bijection", V=4, L=4).posterior(ep.tokens)
    assert float((ep.posterior - fresh).abs()[ep.mask].max()) < 0.05


@pytest.mark.parametrize("params", [{"V": 6, "L": 5, "pool": 5}, {"V": 5, "L": 9, "replacement": True, "pool": 2}])
def test_a_pooled_task_keeps_the_task_contract(params: dict) -> None:
    from contracts import check_task_contract

    for seed in (0, 1, 2):
        check_task_contract(tasks.make("bijection", **params), seed, 7)
