"""windtunnel.evaluation.metrics against distributions worked out by hand, analytic baselines and properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from windtunnel.evaluation import metrics as M
from windtunnel import tasks
from windtunnel.tasks.base import IGNORE, Episodes

L3 = math.log2(3)


def _episodes(post: list, targets: list, mask: list | None = None) -> Episodes:
    p = torch.tensor(post, dtype=torch.float64)
    B, T, _ = p.shape
    m = torch.ones(B, T, dtype=torch.bool) if mask is None else torch.tensor(mask)
    return Episodes(tokens=torch.zeros(B, T, dtype=torch.long), targets=torch.tensor(targets),
                    posterior=p, mask=m)


def _logits(q: list) -> torch.Tensor:
    return torch.tensor(q, dtype=torch.float64).log()


# Two sequences, two positions, three classes.
#   posterior p                              model q
#   s0: [1/2,1/2,0]   [1/3,1/3,1/3]          [1/3,1/3,1/3]   [1/2,1/4,1/4]
#   s1: [1,0,0]       [1/2,0,1/2]            [1/2,1/4,1/4]   [1/3,1/3,1/3]
# H(p) = [[1, log2 3], [0, 1]]; H(q) = [[log2 3, 1.5], [1.5, log2 3]]
P = [[[1 / 2, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3]], [[1, 0, 0], [1 / 2, 0, 1 / 2]]]
Q = [[[1 / 3, 1 / 3, 1 / 3], [1 / 2, 1 / 4, 1 / 4]], [[1 / 2, 1 / 4, 1 / 4], [1 / 3, 1 / 3, 1 / 3]]]
TARGETS = [[IGNORE, 0], [0, 2]]  # (s0, t0) scored but without a target: excluded from accuracy/nll


@pytest.fixture
def hand() -> dict:
    return M.compute(_logits(Q), _episodes(P, TARGETS))


def test_hand_entropy_metrics(hand: dict) -> None:
    v = hand["values"]
    # |ΔH| = [[log2 3 − 1, log2 3 − 1.5], [1.5, log2 3 − 1]]
    assert v["entropy_mae"] == pytest.approx((3 * L3 - 2) / 4, abs=1e-12)
    # H̄q − H̄p: position 0: (log2 3 + 1.5)/2 − 1/2; position 1: (1.5 + log2 3)/2 − (log2 3 + 1)/2 = 1/4
    assert v["entropy_mae_curve"] == pytest.approx(((L3 + 0.5) / 2 + 0.25) / 2, abs=1e-12)
    assert v["entropy_mae_curve"] < v["entropy_mae"]  # opposite signs at position 1 cancel
    torch.testing.assert_close(hand["entropy_bayes_curve"], torch.tensor([0.5, (L3 + 1) / 2], dtype=torch.float64))
    torch.testing.assert_close(hand["entropy_model_curve"], torch.tensor([(L3 + 1.5) / 2] * 2, dtype=torch.float64))
    torch.testing.assert_close(hand["curves"]["entropy_mae_curve"],
                               torch.tensor([(L3 + 0.5) / 2, 0.25], dtype=torch.float64))


def test_hand_kl_tv_support(hand: dict) -> None:
    v = hand["values"]
    # KL: log2(3/2), 5/3 − log2 3, 1, log2(3/2)
    kl = [[L3 - 1, 5 / 3 - L3], [1.0, L3 - 1]]
    assert v["kl"] == pytest.approx(sum(map(sum, kl)) / 4, abs=1e-12)
    torch.testing.assert_close(hand["per_position"]["kl"], torch.tensor(kl, dtype=torch.float64))
    torch.testing.assert_close(hand["curves"]["kl"], torch.tensor([L3 / 2, 1 / 3], dtype=torch.float64))
    torch.testing.assert_close(hand["per_sequence"]["kl"], torch.tensor([1 / 3, L3 / 2], dtype=torch.float64))
    # TV: 1/3, 1/6, 1/2, 1/3
    assert v["tv"] == pytest.approx(1 / 3, abs=1e-12)
    # mass where p = 0: 1/3, 0, 1/2, 1/3
    assert v["infeasible_mass"] == pytest.approx(7 / 24, abs=1e-12)


def test_hand_target_metrics(hand: dict) -> None:
    v = hand["values"]
    # targets at (s0,t1)=0, (s1,t0)=0, (s1,t1)=2; argmax q = 0, 0, 0 (a tie at (s1,t1): first index)
    assert v["accuracy"] == pytest.approx(2 / 3)
    assert v["nll"] == pytest.approx((1 + 1 + L3) / 3, abs=1e-12)
    assert v["bayes_nll"] == pytest.approx((L3 + 0 + 1) / 3, abs=1e-12)
    assert hand["masks"]["target"].tolist() == [[False, True], [True, True]]
    assert math.isnan(hand["per_position"]["nll"][0, 0])
    torch.testing.assert_close(hand["per_sequence"]["accuracy"], torch.tensor([1.0, 0.5], dtype=torch.float64))


def test_bayes_gap_is_kl(hand: dict) -> None:
    g = M.bayes_gap(_logits(Q), _episodes(P, TARGETS))
    assert g == pytest.approx(hand["values"]["kl"], abs=1e-12)
    assert g == pytest.approx((L3 + 2 / 3) / 4, abs=1e-12)


def test_unscored_positions_are_ignored() -> None:
    # add a third position scored nowhere, with junk in it, and unscore (s1, t1)
    post = [[*P[0], [1, 0, 0]], [*P[1], [0, 0, 1]]]
    q = [[*Q[0], [0.98, 0.01, 0.01]], [*Q[1], [0.98, 0.01, 0.01]]]
    mask = [[True, True, False], [True, False, False]]
    targets = [[IGNORE, 0, IGNORE], [0, IGNORE, IGNORE]]
    r = M.compute(_logits(q), _episodes(post, targets, mask))
    assert r["n_scored"] == 3
    assert math.isnan(r["curves"]["kl"][2]) and math.isnan(r["curves"]["entropy_mae_curve"][2])
    assert r["values"]["kl"] == pytest.approx((L3 - 1 + 5 / 3 - L3 + 1) / 3, abs=1e-12)
    # curve: position 0 over both sequences, position 1 over s0 only
    e0 = abs((L3 + 1.5) / 2 - 0.5)
    e1 = abs(1.5 - L3)
    assert r["values"]["entropy_mae_curve"] == pytest.approx((e0 + e1) / 2, abs=1e-12)
    assert r["values"]["accuracy"] == pytest.approx(1.0)


def test_helpers() -> None:
    p = torch.tensor([0.5, 0.5, 0.0])
    assert float(M.entropy_bits(p)) == pytest.approx(1.0)
    assert float(M.entropy_bits(torch.full((8,), 1 / 8))) == pytest.approx(3.0)
    assert float(M.kl_bits(p, torch.tensor([0.25, 0.25, 0.5]))) == pytest.approx(1.0)
    # 0·log 0 = 0 on the Bayes side, whatever q is there; q = p gives exactly 0
    assert float(M.kl_bits(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0]))) == 0.0
    # the model side is clipped at 1e-300: finite, ½·(log2 ½ − log2 1e-300) − ½
    k = float(M.kl_bits(p, torch.tensor([1.0, 0.0, 0.0])))
    assert k == pytest.approx(-1 + 150 * math.log2(10), rel=1e-9)


def test_model_zero_probability_stays_finite() -> None:
    logits = torch.tensor([[[0.0, -math.inf, 0.0]]])
    ep = _episodes([[[0.5, 0.5, 0.0]]], [[1]])
    r = M.compute(logits, ep)
    assert math.isfinite(r["values"]["kl"]) and r["values"]["kl"] > 400
    assert math.isfinite(r["values"]["nll"])
    assert r["values"]["infeasible_mass"] == pytest.approx(0.5)


def test_shape_mismatch_is_an_error() -> None:
    ep = _episodes(P, TARGETS)
    with pytest.raises(ValueError, match="shape"):
        M.compute(torch.zeros(2, 2, 4), ep)


@pytest.mark.parametrize("replacement", [False, True])
def test_oracle_scores_zero(replacement: bool) -> None:
    task = tasks.make("bijection", V=10, L=10 if not replacement else 25, replacement=replacement)
    ep = task.sample(300, 7)
    r = M.compute(tasks.oracle(task)(**ep.inputs), ep)
    for name in M.ERROR_METRICS:
        assert abs(r["values"][name]) < 1e-9, name
        finite = r["curves"][name][~r["curves"][name].isnan()]
        assert finite.abs().max() < 1e-9, name
    assert r["values"]["nll"] == pytest.approx(r["values"]["bayes_nll"], abs=1e-9)
    assert M.bayes_gap(tasks.oracle(task)(**ep.inputs), ep) < 1e-9


def test_uniform_model_on_bijection_is_analytic() -> None:
    V = L = 10
    task = tasks.make("bijection", V=V, L=L)
    ep = task.sample(200, 3)
    r = M.compute(torch.zeros(ep.posterior.shape), ep)
    ks = range(1, L + 1)  # k-th key, at token position 2(k−1)
    kl_k = [math.log2(V) - math.log2(V - k + 1) for k in ks]  # = H(uniform) − H(Bayes) = |ΔH|
    kl_curve = r["curves"]["kl"][0::2]
    torch.testing.assert_close(kl_curve, torch.tensor(kl_k, dtype=torch.float64), rtol=0, atol=1e-12)
    assert r["curves"]["kl"][1::2].isnan().all()
    mean_kl = sum(kl_k) / L
    for name in ("kl", "entropy_mae", "entropy_mae_curve"):
        assert r["values"][name] == pytest.approx(mean_kl, abs=1e-12), name
    assert r["values"]["infeasible_mass"] == pytest.approx(sum((k - 1) / V for k in ks) / L, abs=1e-12)
    assert r["values"]["tv"] == pytest.approx(sum((k - 1) / V for k in ks) / L, abs=1e-12)
    assert r["values"]["nll"] == pytest.approx(math.log2(V), abs=1e-12)
    assert r["values"]["bayes_nll"] == pytest.approx(sum(math.log2(V - k + 1) for k in ks) / L, abs=1e-12)
    # argmax of constant logits is class 0, which is the target exactly once per episode when L = V
    assert r["values"]["accuracy"] == pytest.approx(1 / V)


def test_uniform_model_default_bijection_matches_the_position_only_optimum() -> None:
    # the best position-only predictor scores MAE 1.107 bits (V=20, L=19)
    task = tasks.make("bijection")
    ep = task.sample(50, 0)
    r = M.compute(torch.zeros(ep.posterior.shape), ep)
    assert r["values"]["entropy_mae_curve"] == pytest.approx(1.107, abs=1e-3)


@st.composite
def _cases(draw):  # noqa: ANN202
    B = draw(st.integers(1, 5))
    T = draw(st.integers(1, 5))
    C = draw(st.integers(2, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    raw = torch.rand(B, T, C, generator=g, dtype=torch.float64)
    zero = torch.rand(B, T, C, generator=g) < draw(st.sampled_from([0.0, 0.3, 0.6]))
    zero[..., 0] = False  # at least one feasible class
    raw = torch.where(zero, 0.0, raw + 1e-3)
    post = raw / raw.sum(-1, keepdim=True)
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 30.0]))
    logits = torch.randn(B, T, C, generator=g, dtype=torch.float64) * scale
    col = torch.rand(T, generator=g) < 0.7
    col[draw(st.integers(0, T - 1))] = True
    mask = col.expand(B, T).clone()  # every task's mask depends on the position only
    targets = torch.where(mask, torch.multinomial(post.reshape(-1, C), 1, generator=g).reshape(B, T), IGNORE)
    ep = Episodes(tokens=torch.zeros(B, T, dtype=torch.long), targets=targets, posterior=post, mask=mask)
    return logits, ep


@settings(max_examples=150, deadline=None)
@given(_cases())
def test_properties(case) -> None:  # noqa: ANN001
    logits, ep = case
    r = M.compute(logits, ep)
    v = r["values"]
    assert v["entropy_mae_curve"] <= v["entropy_mae"] + 1e-12
    for name in M.ERROR_METRICS:
        assert v[name] >= 0
    assert v["tv"] <= 1 + 1e-12
    assert v["infeasible_mass"] <= v["tv"] + 1e-12  # mass on impossible classes is part of TV
    pp = r["per_position"]
    m = ep.mask
    # Pinsker, element-wise: KL (nats) ≥ 2 TV²
    assert (pp["kl"][m] * math.log(2) >= 2 * pp["tv"][m] ** 2 - 1e-12).all()
    assert M.bayes_gap(logits, ep) == pytest.approx(v["kl"], rel=1e-9, abs=1e-12)
    # pooled value = mean of the element map over the mask
    assert v["kl"] == pytest.approx(float(pp["kl"][m].mean()), rel=1e-12, abs=1e-15)
    # shifting logits by a constant per row changes nothing
    r2 = M.compute(logits + torch.randn(*logits.shape[:2], 1, dtype=torch.float64) * 10, ep)
    for name in M.ERROR_METRICS:
        assert r2["values"][name] == pytest.approx(v[name], rel=1e-7, abs=1e-9)


class _CountedMoves(torch.Tensor):
    """A posterior that records how many elements each ``.to`` of it (or of a part of it) carries."""

    moved: list[int] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.to:
            cls.moved.append(args[0].numel())
        return super().__torch_function__(func, types, args, kwargs or {})


def test_the_bayes_gap_moves_only_the_scored_rows_of_the_posterior() -> None:
    """A training log scores a few positions of a batch whose posterior is mostly unscored rows (recall: the queries
    only): only the scored rows are copied to the logits' device, and the gap is the same as from the whole."""
    task = tasks.make("recall", pairs=8, n_keys=16, n_values=16)
    ep = task.sample(6, 3)
    logits = torch.randn(*ep.posterior.shape, dtype=torch.float64)
    whole = M.bayes_gap(logits, ep)
    n, c = int(ep.mask.sum()), ep.posterior.shape[-1]
    assert n * c < ep.posterior.numel() // 4
    watched = Episodes(tokens=ep.tokens, targets=ep.targets, posterior=ep.posterior.as_subclass(_CountedMoves),
                       mask=ep.mask)
    _CountedMoves.moved = []
    assert M.bayes_gap(logits, watched) == pytest.approx(whole, rel=1e-12)
    assert _CountedMoves.moved and max(_CountedMoves.moved) == n * c
