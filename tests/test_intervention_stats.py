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
