"""windtunnel.evaluation.evaluate: chunking, the oracle beside the model, bootstrap intervals, lengths, JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

from windtunnel.evaluation import metrics as M
from windtunnel import tasks
from windtunnel.evaluation.evaluate import (EvalResult, aggregate, evaluate, percentile_ci, predict, resample_weights)
from windtunnel.tasks.bijection import Bijection



class TinyCausal(torch.nn.Module):
    """Embedding → running mean over the prefix (causal by construction) → MLP head."""

    def __init__(self, vocab: int, n_classes: int, d: int = 16, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(vocab, d)
        self.drop = torch.nn.Dropout(0.5)
        self.head = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Tanh(), torch.nn.Linear(d, n_classes))
        self.calls: list[tuple[int, ...]] = []
        self.modes: list[bool] = []

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append(tuple(tokens.shape))
        self.modes.append(self.training)
        h = self.emb(tokens).cumsum(1) / torch.arange(1, tokens.shape[1] + 1)[:, None]
        return self.head(self.drop(h))


@pytest.fixture(scope="module")
def task() -> tasks.Task:
    return tasks.make("bijection", V=12, L=8)


def _model(task: tasks.Task) -> TinyCausal:
    return TinyCausal(task.vocab_size, task.n_classes)


def test_one_forward_per_chunk_and_modes_restored(task: tasks.Task) -> None:
    model = _model(task)
    model.train()
    model.drop.eval()  # a mixed state must come back exactly
    r = evaluate(model, task, n=50, chunk=7, n_boot=50)
    assert model.calls == [(7, task.seq_len)] * 7 + [(1, task.seq_len)]  # full sequences, never prefixes
    assert model.modes == [False] * 8
    assert model.training and not model.drop.training and model.head.training
    assert r.n == 50 and r.model["class"] == "TinyCausal" and r.model["n_params"] > 0


def test_chunked_equals_one_batch(task: tasks.Task) -> None:
    a = evaluate(_model(task), task, n=120, chunk=7, n_boot=200)
    b = evaluate(_model(task), task, n=120, chunk=10000, n_boot=200)
    for name in M.METRICS:
        assert a.metrics[name]["value"] == pytest.approx(b.metrics[name]["value"], rel=1e-6, abs=1e-9)
        assert a.metrics[name]["ci"] == pytest.approx(b.metrics[name]["ci"], rel=1e-6, abs=1e-9)
    torch.testing.assert_close(torch.tensor(a.curves["kl"]), torch.tensor(b.curves["kl"]), equal_nan=True)
    ep = task.sample(30, 1)
    torch.testing.assert_close(predict(_model(task), ep, chunk=4), predict(_model(task), ep, chunk=64))


def test_oracle_beside_model_and_as_model(task: tasks.Task) -> None:
    r = evaluate(_model(task), task, n=100, n_boot=100)
    assert r.metrics["kl"]["value"] > 0.01
    for name in M.ERROR_METRICS:
        assert abs(r.oracle[name]["value"]) < 1e-9, name
    o = evaluate(tasks.oracle(task), task, n=100, n_boot=100)
    for name in M.ERROR_METRICS:
        assert abs(o.metrics[name]["value"]) < 1e-9, name
        assert max(abs(c) for c in o.metrics[name]["ci"]) < 1e-9, name
    assert o.metrics["nll"]["value"] == pytest.approx(o.metrics["bayes_nll"]["value"], abs=1e-9)
    assert o.model["n_params"] == 0


def test_intervals_contain_estimate_and_curves_have_bands(task: tasks.Task) -> None:
    r = evaluate(_model(task), task, n=200, n_boot=300)
    for name, m in r.metrics.items():
        lo, hi = m["ci"]
        assert lo <= m["value"] + 1e-12 and m["value"] <= hi + 1e-12, name
    T = task.seq_len
    for name in ("kl", "entropy_model", "entropy_bayes", "entropy_mae_curve"):
        assert len(r.curves[name]) == T
        assert len(r.curve_ci[name]["lo"]) == T and len(r.curve_ci[name]["hi"]) == T
    assert math.isnan(r.curves["kl"][1])  # value positions are not scored
    # without replacement the Bayes entropy is a function of position: a degenerate band
    assert r.curve_ci["entropy_bayes"]["lo"][0] == pytest.approx(r.curve_ci["entropy_bayes"]["hi"][0])
    assert r.curve_ci["entropy_bayes"]["lo"][0] == pytest.approx(math.log2(task.V))


def test_interval_width_shrinks_like_root_n(task: tasks.Task) -> None:
    def width(n: int) -> float:
        lo, hi = evaluate(_model(task), task, n=n, n_boot=400, seed=5).metrics["kl"]["ci"]
        return hi - lo

    ratio = width(100) / width(1600)
    assert 2.5 < ratio < 6.0  # √16 = 4


def test_bootstrap_coverage_simulated() -> None:
    """Percentile intervals for a mean cover the truth ≈95% of the time (200 simulated data sets)."""
    g = torch.Generator().manual_seed(0)
    reps, n, mu = 200, 120, 0.3
    x = mu + torch.randn(reps, n, generator=g, dtype=torch.float64).exp()  # skewed, mean mu + e^{1/2}
    truth = mu + math.exp(0.5)
    covered = 0
    for i in range(reps):
        w = resample_weights(n, 1000, seed=i)
        means = (w @ x[i]) / n
        lo, hi = percentile_ci(means)
        covered += int(lo <= truth <= hi)
    assert 0.88 <= covered / reps <= 0.99


def test_resample_weights() -> None:
    w = resample_weights(30, 40, seed=1)
    assert w.shape == (40, 30)
    assert (w.sum(1) == 30).all() and (w >= 0).all()
    assert torch.equal(w, resample_weights(30, 40, seed=1))


def test_lengths(task: tasks.Task) -> None:
    r = evaluate(_model(task), task, n=60, n_boot=50, lengths=[10, 12])
    assert r.horizon == {"param": "L", "value": 8, "seq_len": 15}
    assert sorted(r.lengths) == [10, 12]
    for K in (10, 12):
        entry = r.lengths[K]
        assert entry["seq_len"] == 2 * K - 1
        assert len(entry["curves"]["kl"]) == 2 * K - 1
        assert set(entry["metrics"]) == set(M.METRICS)
        for name in M.ERROR_METRICS:
            assert abs(entry["oracle"][name]["value"]) < 1e-9
        # beyond the horizon only: positions 15.. of the longer episodes
        assert set(entry["beyond_horizon"]) == set(M.METRICS)
    far = r.lengths[12]["curves"]["kl"][15:]
    finite = [x for x in far if not math.isnan(x)]
    assert r.lengths[12]["beyond_horizon"]["kl"]["value"] == pytest.approx(sum(finite) / len(finite))
    same = evaluate(_model(task), task, n=60, n_boot=50, lengths=[8])
    assert same.lengths[8]["beyond_horizon"] == {}


@dataclass(frozen=True)
class NoKnob(Bijection):
    """A bijection that pretends to have no length parameter (not registered)."""

    @property
    def length_param(self) -> None:  # type: ignore[override]
        return None


def test_lengths_error_clearly() -> None:
    t = NoKnob(V=6, L=4)
    model = _model(t)
    with pytest.raises(ValueError, match="no length parameter"):
        evaluate(model, t, n=10, lengths=[6])
    assert model.calls == []  # refused before any work
    big = tasks.make("bijection", V=6, L=4)
    with pytest.raises(ValueError, match="L"):
        evaluate(_model(big), big, n=10, lengths=[7])  # L > V without replacement


def test_bad_arguments(task: tasks.Task) -> None:
    with pytest.raises(ValueError, match="n"):
        evaluate(_model(task), task, n=0)
    with pytest.raises(ValueError, match="chunk"):
        evaluate(_model(task), task, n=5, chunk=0)


def test_json_round_trip_and_aggregate(task: tasks.Task) -> None:
    results = [evaluate(TinyCausal(task.vocab_size, task.n_classes, seed=s), task, n=40, n_boot=30, lengths=[9])
               for s in (0, 1, 2)]
    d = results[0].to_dict()
    text = json.dumps(d, allow_nan=False)  # strict JSON: NaN became null
    back = EvalResult.from_dict(json.loads(text))
    for name in M.METRICS:
        assert back.metrics[name]["value"] == pytest.approx(results[0].metrics[name]["value"])
    assert math.isnan(back.curves["kl"][1]) and 9 in back.lengths
    agg = aggregate(results + [json.loads(text)])
    kls = [r.metrics["kl"]["value"] for r in results] + [results[0].metrics["kl"]["value"]]
    mean = sum(kls) / 4
    assert agg["n"] == 4
    assert agg["metrics"]["kl"]["mean"] == pytest.approx(mean)
    assert agg["metrics"]["kl"]["std"] == pytest.approx(math.sqrt(sum((k - mean) ** 2 for k in kls) / 3))
    assert agg["oracle"]["kl"]["mean"] < 1e-9
    assert 9 in agg["lengths"] and agg["lengths"][9]["kl"]["n"] == 4
    json.dumps(agg, allow_nan=False)


@pytest.mark.parametrize("name,params", [("bijection", {"V": 10, "L": 9}), ("bijection", {"V": 10, "L": 12, "replacement": True}),
                                         ("hmm", {"K": 6})])
def test_oracle_point_estimates_lie_inside_their_intervals(name, params) -> None:
    """The curve metric's point estimate and its bootstrap resamples sum the same signed gaps, so
    even at rounding-noise level (the oracle, ~1e-16 bits) the point is inside its interval."""
    task = tasks.make(name, **params)
    res = evaluate(tasks.oracle(task), task, n=500, n_boot=200)
    for metric in ("entropy_mae_curve", "entropy_mae", "kl"):
        m = res.metrics[metric]
        assert m["value"] < 1e-12
        slack = 1e-9 * abs(m["value"])  # summation order alone moves the last bits
        assert m["ci"][0] - slack <= m["value"] <= m["ci"][1] + slack, (metric, m)


def test_a_pooled_task_is_scored_against_both_priors() -> None:
    """The pool's oracle is exact in the pool and off on fresh latents; the true prior's oracle is the
    reverse; the distance of the two posteriors in the pool is the hand-computed mean total variation."""
    task = tasks.make("bijection", V=6, L=5, pool=4)
    pool_oracle, true_oracle = tasks.oracle(task), tasks.oracle(task, prior="true")
    memo = evaluate(pool_oracle, task, n=200, n_boot=20)
    infer = evaluate(true_oracle, task, n=200, n_boot=20)
    assert set(memo.priors) == {"in_pool_vs_true_prior", "task_oracle_vs_true_prior", "fresh", "task_oracle_on_fresh"}
    assert memo.value("kl") == 0 and infer.priors["fresh"]["kl"]["value"] == 0
    assert infer.priors["in_pool_vs_true_prior"]["kl"]["value"] == 0 and infer.value("kl") > 0.5
    for r in (memo, infer):  # the oracles' own rows do not depend on the model evaluated
        assert r.priors["task_oracle_on_fresh"] == memo.priors["fresh"]
        assert r.priors["task_oracle_vs_true_prior"] == memo.priors["in_pool_vs_true_prior"]
    ep = task.sample(200, memo.seed)
    p_pool, p_true = ep.posterior[ep.mask], tasks.make("bijection", V=6, L=5).posterior(ep.tokens)[ep.mask]
    tv = float(0.5 * (p_pool - p_true).abs().sum(-1).mean())
    assert memo.priors["in_pool_vs_true_prior"]["tv"]["value"] == pytest.approx(tv, rel=1e-9)
    assert infer.value("tv") == pytest.approx(tv, rel=1e-9)
    back = EvalResult.from_dict(json.loads(json.dumps(memo.to_dict())))
    assert back.priors["fresh"]["tv"]["value"] == pytest.approx(memo.priors["fresh"]["tv"]["value"])
    assert evaluate(tasks.oracle(tasks.make("bijection", V=6, L=5)), tasks.make("bijection", V=6, L=5),
                    n=20, n_boot=5).priors == {}
