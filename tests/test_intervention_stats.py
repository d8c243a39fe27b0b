"""The statistics of every intervention (windtunnel.evaluation.stats): the bootstrap interval over episodes and the
paired sign-flip p-value, on inputs whose answers are known."""

from __future__ import annotations

import pytest
import torch

from windtunnel.evaluation.stats import bootstrap_mean, paired_effect, pooled_mean, sign_flip_p


def test_identical_conditions_give_p_one_and_a_zero_interval() -> None:
    x = torch.rand(40, generator=torch.Generator().manual_seed(0))
    assert sign_flip_p(torch.zeros(40)) == 1.0
    assert sign_flip_p(torch.zeros(5)) == 1.0  # exact enumeration
    eff = paired_effect(x, x.clone(), n_boot=200)
    assert eff["diff"] == 0.0 and eff["diff_ci"] == [0.0, 0.0] and eff["p_value"] == 1.0


def test_a_large_consistent_effect_has_a_small_p_value() -> None:
    g = torch.Generator().manual_seed(1)
    d = 1.0 + 0.1 * torch.randn(30, generator=g)
    p = sign_flip_p(d, n_perm=2000, seed=0)
    assert p == pytest.approx(1 / 2001)  # no random flip reaches the observed sum: the smallest p the test gives
    assert sign_flip_p(d, alternative="greater") < 0.001
    assert sign_flip_p(d, alternative="less") > 0.99


def test_exact_enumeration_for_few_episodes() -> None:
    """Five positive differences: of the 32 sign patterns only the observed one (and, two-sided, its mirror) is as
    extreme."""
    d = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert sign_flip_p(d) == pytest.approx(2 / 32)
    assert sign_flip_p(d, alternative="greater") == pytest.approx(1 / 32)
    assert sign_flip_p(-d, alternative="less") == pytest.approx(1 / 32)


def test_p_values_are_roughly_uniform_under_the_null() -> None:
    """Symmetric differences (no effect): about 5% of p-values fall below 0.05, and the mean p is near 1/2."""
    g = torch.Generator().manual_seed(2)
    ps = torch.tensor([sign_flip_p(torch.randn(25, generator=g), n_perm=400, seed=s) for s in range(300)])
    assert 0.01 <= float((ps < 0.05).double().mean()) <= 0.10
    assert 0.4 <= float(ps.mean()) <= 0.6


def test_pooled_mean_weights_episodes_by_their_positions() -> None:
    sums, counts = torch.tensor([3.0, 1.0]), torch.tensor([3.0, 1.0])
    assert pooled_mean(sums, counts) == pytest.approx(1.0)
    assert pooled_mean(torch.tensor([2.0, 0.0])) == pytest.approx(1.0)
    assert pooled_mean(torch.tensor([1.0]), torch.tensor([0.0])) is None


def test_bootstrap_interval_contains_the_mean_and_shrinks_with_more_episodes() -> None:
    g = torch.Generator().manual_seed(3)
    small = torch.randn(20, generator=g) + 2.0
    big = torch.randn(2000, generator=g) + 2.0
    a, b = bootstrap_mean(small, n_boot=500, seed=0), bootstrap_mean(big, n_boot=500, seed=0)
    for r in (a, b):
        assert r["ci"][0] <= r["mean"] <= r["ci"][1]
    assert (b["ci"][1] - b["ci"][0]) < 0.5 * (a["ci"][1] - a["ci"][0])
    assert b["ci"][0] < 2.0 < b["ci"][1]  # covers the true mean
    const = bootstrap_mean(torch.full((10,), 0.3), torch.full((10,), 2.0), n_boot=100)
    assert const["mean"] == pytest.approx(0.15) and const["ci"] == pytest.approx([0.15, 0.15])
    assert bootstrap_mean(torch.zeros(0))["mean"] is None


def test_the_sign_flip_test_pools_over_counts() -> None:
    """The statistic is Σd/Σc: a one-position episode with a large difference counts as one position."""
    d, c = torch.tensor([5.0, -1.0, -1.0, -1.0, -1.0, -1.0]), torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert sign_flip_p(d, c) == sign_flip_p(d)
    with pytest.raises(ValueError):
        sign_flip_p(d, torch.ones(3))
    with pytest.raises(ValueError):
        sign_flip_p(d, alternative="bigger")


# --- the statistics in the intervention records ----------------------------------------------------
def test_an_ablation_that_changes_nothing_has_p_one_and_one_that_breaks_the_model_a_small_p() -> None:
    """ablation_effects on two variants: a no-op (delta 0, interval [0, 0], p = 1) and the readout's input zeroed
    (every sequence's KL rises: p at the smallest the test gives)."""
    from contextlib import nullcontext

    from windtunnel import tasks
    from windtunnel.geometry.ablation import ablation_effects

    from contracts import tiny_model

    task = tasks.make("hmm", S=3, O=3, K=6)
    model = tiny_model("transformer", task)
    with torch.no_grad():  # a sharp readout, so that the intact model is far from uniform
        model.head.weight.mul_(20)
    ep = task.sample(40, 0)
    r = ablation_effects(model, task, ep, [({"what": "nothing"}, nullcontext),
                                           ({"what": "readout"}, lambda: model.hooks([("hook_final", lambda x, _: x * 0)]))],
                         n_boot=200, seed=0, metric="kl")
    same, broken = r["rows"]
    assert same["kl"]["delta"] == 0.0 and same["kl"]["delta_ci"] == [0.0, 0.0] and same["kl"]["p_value"] == 1.0
    assert broken["kl"]["delta"] != 0 and broken["kl"]["p_value"] < 0.01
    lo, hi = broken["kl"]["delta_ci"]
    assert lo <= broken["kl"]["delta"] <= hi


def test_counterfactual_records_intervals_and_p_values_that_bracket_its_estimates() -> None:
    """On a model that reads the posterior of the whole context at every position (test_steering.LinearBelief,
    mixed with 10% uniform so that its own error is not 0): the edit's evidence is never carried by the edited
    position's stream, so every patch recovers nothing (r = 0, inside its interval); after the last block the patch
    reaches no later query, so every control is identical to it there (p = 1); every interval holds its estimate."""
    from windtunnel import tasks
    from windtunnel.geometry.counterfactual import CONDITIONS, counterfactual

    from test_steering import LinearBelief

    task = tasks.make("hmm", S=3, O=3, K=8)
    r = counterfactual(LinearBelief(task, mix=0.1), task, n=64, n_boot=300)
    assert r["resolved"]
    for cond in CONDITIONS:
        for k, (lo, hi) in zip(r["kl_after_patch"][cond], r["kl_after_patch_ci"][cond]):
            assert lo <= k <= hi
        for x, (lo, hi) in zip(r["recovered"][cond], r["recovered_ci"][cond]):
            assert x == pytest.approx(0.0, abs=1e-6) and lo <= x + 1e-9 and x - 1e-9 <= hi
    assert all(r["p_vs_controls"][c][-1] == 1.0 for c in CONDITIONS[1:])
    assert r["p_max_vs_controls"][-1] == 1.0
    inp = r["input"]
    assert inp["follows_edit_ci"][0] <= inp["follows_edit"] <= inp["follows_edit_ci"][1]
    assert inp["p_follows_vs_ignores"] < 0.01  # the model follows the edit in every episode
