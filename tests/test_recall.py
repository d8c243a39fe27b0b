"""Associative recall: posterior against a plain-Python scan of the store, and contract properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from windtunnel.tasks import IGNORE, make, oracle



def brute_force(task, tokens: list[int]) -> dict[int, list[float]]:
    """Scan the sequence left to right as a human would: read the store, then answer each query."""
    K, V = task.n_keys, task.n_values
    store: dict[int, int] = {}
    out: dict[int, list[float]] = {}
    t = 0
    while t < len(tokens) and tokens[t] < K:  # the store: k v k v …
        store[tokens[t]] = tokens[t + 1] - K
        t += 2
    for pos in range(t, len(tokens)):
        if tokens[pos - 1] == K + V + 1:  # the token after QUERY is the key asked for
            row = [0.0] * V
            row[store[tokens[pos]]] = 1.0
            out[pos] = row
    return out


small = st.fixed_dictionaries(
    {
        "n_keys": st.integers(1, 12),
        "n_values": st.integers(2, 12),
        "queries": st.integers(1, 6),
        "filler": st.integers(0, 4),
        "gap": st.integers(0, 3),
    }
).flatmap(lambda p: st.builds(dict, pairs=st.integers(1, min(p["n_keys"], p["n_values"])), **{k: st.just(v) for k, v in p.items()}))


def test_posterior_matches_brute_force_on_many_instances():
    rng = torch.Generator().manual_seed(1)
    checked = 0
    for i in range(40):
        n_keys = int(torch.randint(1, 14, (1,), generator=rng))
        n_values = int(torch.randint(2, 14, (1,), generator=rng))
        pairs = int(torch.randint(1, min(n_keys, n_values) + 1, (1,), generator=rng))
        task = make("recall", pairs=pairs, n_keys=n_keys, n_values=n_values,
                    queries=int(torch.randint(1, 6, (1,), generator=rng)),
                    filler=int(torch.randint(0, 4, (1,), generator=rng)),
                    gap=int(torch.randint(0, 3, (1,), generator=rng)))
        ep = task.sample(30, seed=i)
        for b in range(len(ep)):
            ref = brute_force(task, ep.tokens[b].tolist())
            assert sorted(ref) == ep.mask[b].nonzero().flatten().tolist()
            for pos, row in ref.items():
                assert ep.posterior[b, pos].tolist() == row  # exact (one-hot)
                assert ep.targets[b, pos] == row.index(1.0)
                checked += 1
    assert checked >= 1000


def test_layout_and_latent():
    task = make("recall", pairs=3, n_keys=5, n_values=6, queries=2, filler=2, gap=1)
    ep = task.sample(50, seed=0)
    assert task.seq_len == 2 * 3 + 2 + 2 * 2 + 1 == ep.tokens.shape[1]
    F, Q = task.FILLER, task.QUERY
    assert (ep.tokens[:, 6:8] == F).all() and (ep.tokens[:, 8] == Q).all()
    assert (ep.tokens[:, 10] == F).all() and (ep.tokens[:, 11] == Q).all()
    assert ep.mask[0].nonzero().flatten().tolist() == [9, 12]
    keys, values, queries = ep.latent["keys"], ep.latent["values"], ep.latent["queries"]
    assert keys.shape == values.shape == (50, 3) and queries.shape == (50, 2)
    for b in range(50):
        assert len(set(keys[b].tolist())) == 3 and len(set(values[b].tolist())) == 3  # unique
        assert set(queries[b].tolist()) <= set(keys[b].tolist())
    assert task.vocab_size == 5 + 6 + 2 and task.n_classes == 6
    assert (ep.tokens < task.vocab_size).all() and (ep.tokens >= 0).all()


def test_queries_are_uniform_over_stored_pairs():
    task = make("recall", pairs=4, n_keys=4, n_values=4, queries=50, filler=0)
    ep = task.sample(400, seed=3)
    which = (ep.latent["queries"][:, :, None] == ep.latent["keys"][:, None, :]).float().argmax(-1)
    freq = torch.bincount(which.flatten(), minlength=4).double() / which.numel()
    assert torch.allclose(freq, torch.full((4,), 0.25, dtype=torch.float64), atol=0.01)


@settings(max_examples=25, deadline=None)
@given(params=small, seed=st.integers(0, 2**31 - 1))
def test_contract_properties(params, seed):
    task = make("recall", **params)
    ep = task.sample(8, seed=seed)
    B, T, C = 8, task.seq_len, task.n_classes
    assert ep.tokens.shape == (B, T) and ep.tokens.dtype == torch.long
    assert ep.posterior.shape == (B, T, C) and ep.posterior.dtype == torch.float64
    assert ep.mask.dtype == torch.bool and ep.targets.dtype == torch.long
    assert torch.allclose(ep.posterior.sum(-1), torch.ones(B, T, dtype=torch.float64), atol=1e-12)
    assert (ep.targets[~ep.mask] == IGNORE).all() and (ep.targets[ep.mask] >= 0).all()
    post = ep.posterior[ep.mask]
    # exact zeros everywhere but the bound value
    assert ((post == 0) | (post == 1)).all() and (post.sum(-1) == 1).all()
    assert (post.gather(1, ep.targets[ep.mask][:, None]) == 1).all()
    assert torch.equal(task.scored_mask(ep.tokens), ep.mask)
    # determinism in the seed
    again = task.sample(8, seed=seed)
    assert torch.equal(again.tokens, ep.tokens) and torch.equal(again.posterior, ep.posterior)


def test_different_seeds_differ():
    task = make("recall")
    assert not torch.equal(task.sample(16, seed=0).tokens, task.sample(16, seed=1).tokens)


@pytest.mark.parametrize(
    "params, name",
    [
        ({"pairs": 0}, "pairs"),
        ({"pairs": 17}, "pairs"),
        ({"pairs": 8, "n_values": 4}, "pairs"),
        ({"n_keys": 0}, "n_keys"),
        ({"n_values": 1, "pairs": 1}, "n_values"),
        ({"queries": 0}, "queries"),
        ({"filler": -1}, "filler"),
        ({"gap": -1}, "gap"),
        ({"pairs": 2.0}, "pairs"),
        ({"queries": True}, "queries"),
    ],
)
def test_invalid_params_raise(params, name):
    with pytest.raises(ValueError, match=name):
        make("recall", **params)


def test_invalid_sample_size():
    with pytest.raises(ValueError, match="n"):
        make("recall").sample(0, seed=0)
    with pytest.raises(ValueError, match="seed"):
        make("recall").sample(4, seed=1.5)


def test_oracle_reproduces_posterior():
    task = make("recall", gap=2)
    ep = task.sample(32, seed=5)
    probs = torch.softmax(oracle(task)(ep.tokens), dim=-1)
    assert torch.allclose(probs, ep.posterior, atol=1e-12, rtol=0)


def test_no_leak_from_the_future():
    task = make("recall", pairs=4, n_keys=6, n_values=6, queries=4, filler=1, gap=1)
    ep = task.sample(32, seed=6)
    g = torch.Generator().manual_seed(0)
    for t in ep.mask[0].nonzero().flatten().tolist():
        tokens = ep.tokens.clone()
        tokens[:, t + 1 :] = torch.randint(0, task.vocab_size, tokens[:, t + 1 :].shape, generator=g)
        assert torch.equal(task.posterior(tokens)[:, : t + 1], ep.posterior[:, : t + 1])


def test_unstored_query_gives_uniform_row():
    task = make("recall", pairs=2, n_keys=4, n_values=4, queries=1, filler=0)
    tokens = torch.tensor([[0, 4 + 1, 1, 4 + 2, task.QUERY, 3]])
    post = task.posterior(tokens)
    assert torch.allclose(post[0, 5], torch.full((4,), 0.25, dtype=torch.float64))


def test_paper_preset_builds():
    task = make("recall_paper")
    assert (task.pairs, task.n_keys, task.n_values, task.queries, task.filler, task.gap) == (64, 256, 256, 3, 32, 16)
    ep = task.sample(4, seed=0)
    assert ep.tokens.shape == (4, 2 * 64 + 32 + 2 * 3 + 2 * 16)
    assert ep.mask.sum() == 4 * 3
    assert make("recall_paper", queries=5).queries == 5
    assert task.with_length(6).queries == 6
