"""Mess3: the belief and the predictive against brute-force enumeration of hidden paths, a hand-computed
step, and the sampler against the process's own statistics."""

from __future__ import annotations

import itertools

import pytest
import torch

from windtunnel import tasks


def brute_force(task, symbols: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``p(s_t | x_1..x_t)`` and ``p(x_{t+1} | x_1..x_t)`` by summing the joint over every hidden path
    ``s_0 … s_{t+1}`` (3^(t+2) of them) — no recursion, no normalisation until the end."""
    x, a = float(task.x), float(task.alpha)

    def move(i: int, j: int) -> float:
        return 1 - 2 * x if i == j else x

    def emit(j: int, o: int) -> float:
        return a if o == j else (1 - a) / 2

    t = len(symbols)
    belief = torch.zeros(3, dtype=torch.float64)
    nxt = torch.zeros(3, dtype=torch.float64)
    for path in itertools.product(range(3), repeat=t + 2):
        w = 1.0 / 3
        for k in range(t):
            w *= move(path[k], path[k + 1]) * emit(path[k + 1], symbols[k])
        belief[path[t]] += w * move(path[t], path[t + 1])  # summing out the next state leaves w
        for o in range(3):
            nxt[o] += w * move(path[t], path[t + 1]) * emit(path[t + 1], o)
    return belief / belief.sum(), nxt / nxt.sum()


@pytest.mark.parametrize("params", [{}, {"x": 0.15, "alpha": 0.6}, {"x": 0.3, "alpha": 0.2}])
def test_belief_and_predictive_match_enumeration(params: dict) -> None:
    task = tasks.make("mess3", n=6, **params)
    ep = task.sample(12, 7)
    belief = task.belief(ep.tokens)
    for b in range(12):
        seq = ep.tokens[b, 1:].tolist()
        for t in range(6):
            want_belief, want_next = brute_force(task, seq[:t])
            assert torch.allclose(belief[b, t], want_belief, rtol=0, atol=1e-13), (b, t)
            assert torch.allclose(ep.posterior[b, t], want_next, rtol=0, atol=1e-13), (b, t)


def test_one_step_by_hand() -> None:
    """From the uniform start (A is doubly stochastic) the first symbol's belief is E's column, normalised:
    seeing 0 with α = 0.85 gives (0.85, 0.075, 0.075); the prediction before any symbol is uniform, and
    after it (η A E)[0] = 0.85·(0.9·0.85 + 0.1·0.075) + 2·0.075·(0.05·0.85 + 0.95·0.075)."""
    task = tasks.make("mess3", n=2)
    tokens = torch.tensor([[task.BOS, 0]])
    belief, post = task.belief(tokens)[0], task.posterior(tokens)[0]
    assert torch.allclose(belief[1], torch.tensor([0.85, 0.075, 0.075], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(post[0], torch.full((3,), 1 / 3, dtype=torch.float64), atol=1e-15)
    p0 = 0.85 * (0.9 * 0.85 + 0.1 * 0.075) + 2 * 0.075 * (0.05 * 0.85 + 0.95 * 0.075)
    assert float(post[1, 0]) == pytest.approx(p0, abs=1e-15)


def test_sampler_follows_the_process() -> None:
    """Symbols equal their hidden state with probability α, the state stays with probability 1 − 2x,
    and the targets are the next symbols shown."""
    task = tasks.make("mess3", n=32)
    ep = task.sample(4000, 3)
    s, sym = ep.latent["states"], ep.targets
    assert float((sym == s).double().mean()) == pytest.approx(0.85, abs=0.01)
    assert float((s[:, 1:] == s[:, :-1]).double().mean()) == pytest.approx(0.9, abs=0.01)
    assert torch.equal(ep.tokens[:, 1:], sym[:, :-1]) and bool((ep.tokens[:, 0] == task.BOS).all())


def test_the_beliefs_are_not_the_predictive_but_determine_it() -> None:
    """The predictive is an affine image of the belief (η A E): the two differ, yet one fixes the other."""
    task = tasks.make("mess3", n=8)
    ep = task.sample(64, 0)
    belief = task.belief(ep.tokens)
    assert not torch.allclose(belief, ep.posterior, atol=1e-3)
    back = ep.posterior @ torch.linalg.inv(task.transition() @ task.emission())
    assert torch.allclose(back, belief, atol=1e-12)


def test_hmm_belief_is_its_posterior() -> None:
    task = tasks.make("hmm", S=3, O=3, K=5)
    ep = task.sample(4, 0)
    assert torch.equal(task.belief(ep.tokens), ep.posterior)
    assert tasks.make("bijection", V=4, L=3).belief(ep.tokens) is None
