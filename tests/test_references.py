"""Reference predictors: the windowed posteriors against enumeration, the conditional means against
hand-computed values, and the diagnostic that tracks them over a real run's checkpoints."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from windtunnel.evaluation import metrics
from windtunnel.evaluation import references as R
from windtunnel import tasks
from windtunnel.geometry.reference_predictors import nearest_reference, reference_path, reference_predictors
from windtunnel.tasks.base import ConditionalMean, Task

from contracts import tiny_task


def _bijection_enumerated(task, tokens: torch.Tensor, window: int) -> torch.Tensor:
    """p(π(k_t) = y | the last ``window`` pairs before key t) by enumerating every permutation the task's
    prior can draw (all of S_V, or the pool's members with their multiplicity)."""
    V = task.V
    if task.pool is None:
        members = [torch.tensor(p) for p in itertools.permutations(range(V))]
    else:
        members = list(task.pool_members())
    B, T = tokens.shape
    out = torch.full((B, T, V), 1.0 / V, dtype=torch.float64)
    for b in range(B):
        for t in range(0, T, 2):
            pairs = [(int(tokens[b, j]), int(tokens[b, j + 1]) - V) for j in range(max(0, t - 2 * window), t, 2)]
            key = int(tokens[b, t])
            counts = torch.zeros(V, dtype=torch.float64)
            for perm in members:
                if all(int(perm[k]) == v for k, v in pairs):
                    counts[int(perm[key])] += 1
            out[b, t] = counts / counts.sum()
    return out


@pytest.mark.parametrize("params", [{"V": 4, "L": 4}, {"V": 4, "L": 4, "replacement": True},
                                    {"V": 4, "L": 4, "pool": 5, "pool_seed": 3}])
@pytest.mark.parametrize("window", [0, 1, 2, 5])
def test_bijection_windowed_posterior_equals_enumeration(params: dict, window: int) -> None:
    task = tasks.make("bijection", **params)
    ep = task.sample(12, 7)
    got = task.windowed_posterior(ep.tokens, window=window)
    want = _bijection_enumerated(task, ep.tokens, window)
    assert torch.allclose(got[ep.mask], want[ep.mask], atol=1e-12)
    if window >= task.L:  # a window as long as the episode is the full posterior
        assert torch.allclose(got[ep.mask], ep.posterior[ep.mask], atol=1e-12)


def test_bijection_window_by_hand() -> None:
    """V = 5, pairs (0→2), (1→4), then key 3: one remembered pair rules out value 4 only."""
    task = tasks.make("bijection", V=5, L=3)
    tokens = torch.tensor([[0, 5 + 2, 1, 5 + 4, 3]])
    w1 = task.windowed_posterior(tokens, window=1)[0, 4]
    assert torch.allclose(w1, torch.tensor([0.25, 0.25, 0.25, 0.25, 0.0], dtype=torch.float64))
    w2 = task.windowed_posterior(tokens, window=2)[0, 4]
    assert torch.allclose(w2, torch.tensor([1 / 3, 1 / 3, 0.0, 1 / 3, 0.0], dtype=torch.float64))


def test_bijection_query_layout_windows_the_same_pairs() -> None:
    plain, query = tasks.make("bijection", V=6, L=5), tasks.make("bijection_query", V=6, L=5)
    a, b = plain.sample(20, 3), query.sample(20, 3)  # layouts of the same draws share them
    for w in (0, 1, 3):
        assert torch.allclose(plain.windowed_posterior(a.tokens, window=w)[a.mask],
                              query.windowed_posterior(b.tokens, window=w)[b.mask], atol=1e-12)


def _hmm_enumerated(T: torch.Tensor, E: torch.Tensor, obs: list[int], window: int) -> torch.Tensor:
    """p(s_t | o_{t-w+1..t}) for every t by summing the joint over every state path (uniform start)."""
    S = T.shape[0]
    K = len(obs)
    out = torch.empty(K, S, dtype=torch.float64)
    for t in range(K):
        first = max(0, t - window + 1)
        mass = torch.zeros(S, dtype=torch.float64)
        for path in itertools.product(range(S), repeat=t + 1):
            p = 1.0 / S
            for j in range(1, t + 1):
                p *= float(T[path[j - 1], path[j]])
            for j in range(first, t + 1):
                p *= float(E[path[j], obs[j]])
            mass[path[t]] += p
        out[t] = mass / mass.sum()
    return out


@pytest.mark.parametrize("window", [0, 1, 2, 6])
def test_hmm_windowed_filter_equals_enumeration(window: int) -> None:
    task = tasks.make("hmm", S=3, O=2, K=5)
    ep = task.sample(4, 11)
    got = task.windowed_posterior(ep.tokens, window=window)
    H = task.header_len
    for b in range(4):
        obs = [int(o) for o in ep.latent["observations"][b]]
        want = _hmm_enumerated(ep.latent["T"][b], ep.latent["E"][b], obs, window)
        assert torch.allclose(got[b, H:], want, atol=1e-12)
    if window >= task.K:
        assert torch.allclose(got[ep.mask], ep.posterior[ep.mask], atol=1e-12)


def _mess3_enumerated(task, symbols: list[int], window: int) -> torch.Tensor:
    """p(x_{t+1} | the last ``window`` of x_1..x_t) by summing over every state path s_0..s_{t+1}."""
    A, E = task.transition(), task.emission()
    out = []
    for t in range(len(symbols) + 1):
        first = max(1, t - window + 1)
        mass = torch.zeros(3, dtype=torch.float64)
        for path in itertools.product(range(3), repeat=t + 2):
            p = 1.0 / 3
            for j in range(1, t + 2):
                p *= float(A[path[j - 1], path[j]])
            for j in range(first, t + 1):
                p *= float(E[path[j], symbols[j - 1]])
            mass += p * E[path[t + 1]]
        out.append(mass / mass.sum())
    return torch.stack(out)


@pytest.mark.parametrize("window", [0, 1, 3])
def test_mess3_windowed_predictive_equals_enumeration(window: int) -> None:
    task = tasks.make("mess3", n=5)
    ep = task.sample(3, 2)
    got = task.windowed_posterior(ep.tokens, window=window)
    for b in range(3):
        symbols = [int(x) for x in ep.tokens[b, 1:]]
        assert torch.allclose(got[b], _mess3_enumerated(task, symbols, window), atol=1e-12)


@pytest.mark.parametrize("window", [0, 2, 3])
def test_coin_windowed_predictive_equals_integration(window: int) -> None:
    """p(next = 1 | the last w flips) = ∫ p · Beta(p; a, b) pᴴ(1-p)ᵂ⁻ᴴ dp / ∫ Beta · pᴴ(1-p)ᵂ⁻ᴴ dp on a grid."""
    task = tasks.make("coin", a=2.0, b=3.0, n=8)
    ep = task.sample(5, 4)
    got = task.windowed_posterior(ep.tokens, window=window)
    p = torch.linspace(0, 1, 200001, dtype=torch.float64)
    prior = p ** (task.a - 1) * (1 - p) ** (task.b - 1)
    for b in range(5):
        for t in range(ep.tokens.shape[1]):
            seen = [int(x) for x in ep.tokens[b, max(1, t - window + 1) : t + 1]]
            h = sum(seen)
            like = prior * p**h * (1 - p) ** (len(seen) - h)
            p1 = torch.trapezoid(p * like, p) / torch.trapezoid(like, p)
            assert abs(float(got[b, t, 1]) - float(p1)) < 1e-8


def test_conditional_means_by_hand_on_a_fair_coin() -> None:
    """Uniform prior on the bias: p(next = 1 | last flip = 1) = E[p²] / E[p] = (1/3) / (1/2) = 2/3 at every
    position (exchangeability), 1/2 after BOS, and 1/2 with nothing seen."""
    task = tasks.make("coin", a=1.0, b=1.0, n=10)
    bigram = ConditionalMean(task, "token", n=40000)
    unigram = ConditionalMean(task, "none", n=40000)
    tokens = torch.tensor([[task.BOS, 1, 0]])
    q = torch.softmax(bigram(tokens).double(), -1)[0]
    assert abs(float(q[0, 1]) - 0.5) < 0.01 and abs(float(q[1, 1]) - 2 / 3) < 0.01 and abs(float(q[2, 1]) - 1 / 3) < 0.01
    u = torch.softmax(unigram(tokens).double(), -1)[0]
    assert torch.allclose(u, u[:1].expand_as(u)) and abs(float(u[0, 1]) - 0.5) < 0.01
    blind = tasks.context_blind(task)  # position and token: the same 2/3 at each position
    assert abs(float(torch.softmax(blind(tokens).double(), -1)[0, 1, 1]) - 2 / 3) < 0.02


def test_uniform_and_the_reference_set() -> None:
    task = tasks.make("bijection", V=5, L=4)
    refs = R.predictors(task, n=2000)
    assert list(refs) == ["uniform", "unigram", "bigram", "context_blind", "window_1", "window_4", "oracle"]
    tokens = task.sample(3, 0).tokens
    assert torch.allclose(refs["uniform"](tokens), torch.full((3, tokens.shape[1], 5), -math.log(5)))
    pooled = R.predictors(tasks.make("bijection", V=5, L=4, pool=4), n=2000)
    assert list(pooled)[-2:] == ["oracle_true_prior", "oracle"]
    assert not any(k.startswith("window") for k in R.predictors(tasks.make("recall"), n=500))  # no windowed posterior
    # real-valued inputs: the current input alone (window_0) is a reference below context_blind, which
    # averages the input away — on regression the prior predictive, a pointwise network's floor
    reg = tasks.make("regression", d=2, points=6, C=8)
    refs = R.predictors(reg, n=2000)
    assert list(refs) == ["uniform", "unigram", "bigram", "context_blind", "window_0", "window_1", "window_4", "oracle"]
    ep = reg.sample(400, 5)
    kl = {k: metrics.bayes_gap(refs[k](**ep.inputs), ep) for k in ("context_blind", "window_0", "window_1")}
    assert kl["window_1"] < kl["window_0"] < kl["context_blind"]


def test_nearest_and_path_by_hand() -> None:
    assert nearest_reference({"uniform": 0.104, "unigram": 0.100, "oracle": 0.5}) == "uniform"  # a tie within 5%
    assert nearest_reference({"uniform": 0.2, "unigram": 0.1, "oracle": 0.5}) == "unigram"
    assert nearest_reference({"uniform": 3e-5, "unigram": 1e-6, "oracle": 0.5}) == "uniform"  # within 1e-4 bits
    assert nearest_reference({"window_4": 2e-4, "oracle": 1e-5}) == "oracle"
    assert reference_path(["a", "a", "b", "a", "c", "c"]) == ["a", "b", "a", "c"]


def test_the_diagnostic_over_a_real_runs_checkpoints(tmp_path: Path) -> None:
    from windtunnel.evaluation import metrics
    from windtunnel.evaluation.evaluate import predict
    from windtunnel.geometry._common import GEOMETRY_SEED
    from windtunnel.run.runs import RunDir
    from windtunnel.training.loop import TrainConfig, train

    cfg = TrainConfig(task="hmm", task_params={"S": 3, "O": 3, "K": 6}, arch="transformer",
                      model={"d_model": 16, "n_layers": 2, "n_heads": 2}, steps=30, batch_size=16, eval_every=30,
                      ckpt_every=30, eval_n=16, progress=False, device="cpu", warmup=2)
    run = train(cfg, tmp_path / "run")
    r = reference_predictors(run, n=32, fit_n=2000)
    assert r["steps"][0] == 0 and r["steps"][-1] == 30 and len(r["series"]) >= 4
    assert r["references"] == ["uniform", "unigram", "bigram", "context_blind", "window_1", "window_4", "oracle"]
    task, model = RunDir(run).load()
    ep = task.sample(32, GEOMETRY_SEED)
    kl = metrics.compute(predict(model, ep), ep)["values"]["kl"]  # D_oracle is the run's own KL
    assert r["series"][-1]["kl_from"]["oracle"] == pytest.approx(kl, rel=1e-9)
    assert r["reference_kl_to_posterior"]["oracle"] < 1e-12
    # the windowed filter is between ignorance and Bayes
    q = r["reference_kl_to_posterior"]
    assert q["oracle"] < q["window_4"] < q["window_1"] < q["uniform"]
    assert r["series"][0]["nearest"] in ("uniform", "unigram", "bigram", "context_blind")  # untrained: no context
    assert r["summary"]["path"].split(" → ")[-1] == r["summary"]["nearest_final"]


# --- counterfactual edits and patching --------------------------------------------------------------
EDITING = [name for name in tasks.names()
           if tasks.get(name).name == name and tasks.get(name).counterfactual_edit is not Task.counterfactual_edit]
"""Every registered task that defines a counterfactual edit (``Task.counterfactual_edit``)."""


@pytest.mark.parametrize("name", EDITING)
def test_counterfactual_edits_change_one_token_into_a_valid_episode(name: str) -> None:
    """On its small instance, each task that defines the edit changes one token, at ``position``, into two
    different values, each a valid episode whose exact posterior moves at a later scored position."""
    task = tiny_task(name)
    ep = task.sample(64, 5)
    edited, other, pos = task.counterfactual_edit(ep.tokens, 9)
    rows = torch.arange(64)
    for e in (edited, other):
        diff = e != ep.tokens
        assert (diff.sum(1) == 1).all() and diff[rows, pos].all()  # one token, at `position`
    assert (edited[rows, pos] != other[rows, pos]).all()
    for e in (edited, other):
        post = task.posterior(e)
        assert torch.allclose(post.sum(-1), torch.ones(post.shape[:2], dtype=torch.float64))
        later = torch.arange(ep.tokens.shape[1])[None, :] > pos[:, None]
        changed = ((post - ep.posterior).abs().sum(-1) > 1e-12) & ep.mask & later
        assert changed.any(1).all()  # every edit moves a later posterior
        if name == "bijection":  # still a partial bijection: the shown values stay distinct
            values = e[:, 1::2]
            assert all(len(set(row.tolist())) == len(row) for row in values)
        if name == "recall":  # the edited key's queries now answer the new value, one-hot
            new = e[rows, pos] - task.n_keys
            assert torch.equal(post[changed].argmax(-1), new[changed.nonzero()[:, 0]])


def test_counterfactual_edit_is_declined_where_it_would_be_invalid() -> None:
    for name, params in (("bijection", {"replacement": True}), ("bijection", {"pool": 8}), ("hmm", {"O": 2}),
                         ("recall", {"pairs": 8, "n_values": 9}), ("coin", {})):
        task = tasks.make(name, **params)
        assert task.counterfactual_edit(task.sample(4, 0).tokens, 0) is None, (name, params)


def test_patching_brackets_the_edit_exactly() -> None:
    """Patched at the input, the edited token's residual *is* the edit: the run becomes the edited run; patched
    after the last block it reaches no later query: the run stays the unedited one."""
    from windtunnel import models
    from windtunnel.geometry.counterfactual import counterfactual

    task = tasks.make("bijection", V=6, L=5)
    torch.manual_seed(0)
    model = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2)
    r = counterfactual(model, task, n=48)
    after = r["kl_after_patch"]
    assert after["counterfactual"][0] == pytest.approx(r["input"]["follows_edit"], rel=1e-6)
    assert all(after[c][-1] == pytest.approx(r["input"]["unedited_model"], rel=1e-6) for c in after)
    assert r["layers"] == ["L0", "L1", "out"] and r["n_affected"] > 0
    assert 0 < r["edit_size_tv"] <= 1


def test_counterfactual_is_not_applicable_without_the_stream_or_an_edit() -> None:
    from windtunnel import models
    from windtunnel.geometry.counterfactual import counterfactual

    task = tasks.make("bijection", V=6, L=5, replacement=True)
    model = models.make("lstm", task, d_model=8, n_layers=1)
    assert "counterfactual_edit" in counterfactual(model, task, n=8)["reason"]
    reg = tasks.make("regression")
    assert counterfactual(models.make("lstm", reg, d_model=8, n_layers=1), reg, n=8)["applicable"] is False


def test_evenly_spaced_checkpoints_keep_both_ends() -> None:
    from windtunnel.geometry._common import evenly_spaced

    assert evenly_spaced(list(range(10)), 4) == [0, 3, 6, 9]
    assert evenly_spaced(list(range(3)), 5) == [0, 1, 2] and evenly_spaced(list(range(7)), None) == list(range(7))


def test_edit_reach_by_distance_by_hand_and_for_the_exact_and_one_step_filters() -> None:
    from windtunnel.geometry.counterfactual import _by_distance

    # by hand: one episode, edit at 0; queries 1 and 2; the posterior moves 0.5 then 0.2 (TV), the model 0.5 then 0.05
    # (and a task that scores every other position: the memory runs over the distances present)
    gap = _by_distance(torch.zeros(1, 4, 2, dtype=torch.float64).index_fill_(2, torch.tensor([0]), 1.0),
                       torch.zeros(1, 4, 2, dtype=torch.float64).index_fill_(2, torch.tensor([1]), 1.0),
                       torch.full((1, 4, 2), 0.5, dtype=torch.float64).log(),
                       torch.tensor([[[0.5, 0.5], [0.0, 1.0], [0.5, 0.5], [0.0, 1.0]]], dtype=torch.float64).log(),
                       torch.tensor([[False, True, False, True]]), torch.tensor([0]))
    assert gap["distance"] == [1, 3] and gap["moved_share"] == pytest.approx([0.5, 0.5]) and gap["memory"] == 3
    pa = torch.tensor([[[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    pb = torch.tensor([[[0.0, 1.0], [0.0, 1.0], [0.3, 0.7]]], dtype=torch.float64)
    ma = torch.tensor([[[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    mb = torch.tensor([[[0.5, 0.5], [0.0, 1.0], [0.45, 0.55]]], dtype=torch.float64)
    affected = torch.tensor([[False, True, True]])
    r = _by_distance(pa, pb, ma.log(), mb.log(), affected, torch.tensor([0]))
    assert r["distance"] == [1, 2] and r["n"] == [1, 1]
    assert r["should_move"] == pytest.approx([0.5, 0.2]) and r["model_moved"] == pytest.approx([0.5, 0.05])
    assert r["moved_share"] == pytest.approx([1.0, 0.25]) and r["memory"] == 1
    # the exact filter moves with the edit at every distance; the one-observation filter at none
    task = tasks.make("hmm", S=3, O=4, K=10)
    ep = task.sample(200, 3)
    edited, _, pos = task.counterfactual_edit(ep.tokens, 4)
    post_b = task.posterior(edited)
    later = torch.arange(ep.tokens.shape[1])[None, :] > pos[:, None]
    affected = ep.mask & later & ((post_b - ep.posterior).abs().sum(-1) > 1e-12)
    exact = _by_distance(ep.posterior, post_b, ep.posterior.log(), post_b.log(), affected, pos)
    assert exact["moved_share"] == pytest.approx([1.0] * len(exact["distance"])) and exact["memory"] == max(exact["distance"])
    w_a, w_b = task.windowed_posterior(ep.tokens, window=1), task.windowed_posterior(edited, window=1)
    one_step = _by_distance(ep.posterior, post_b, w_a.log(), w_b.log(), affected, pos)
    assert max(one_step["moved_share"]) < 1e-9 and one_step["memory"] == 0
