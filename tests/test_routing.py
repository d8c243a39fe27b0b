"""Paper II's routing law against autograd; the single attention layer; the shared statistics."""

import math
from pathlib import Path

import pytest
import torch

from windtunnel import models, routing, tasks
from windtunnel.errors import InvalidValue
from windtunnel.stats import mean_std, paired, t975
from windtunnel.training import TrainConfig, load, train


def _double(ep):
    if ep.features is not None:
        ep.features = ep.features.double()
    return ep


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_law_equals_autograd_on_random_float64_single_head_layers(seed: int) -> None:
    task = tasks.make("sticky", length=24)
    torch.manual_seed(seed)
    model = models.attention_layer(task, init_std=0.5).double()
    ep = _double(task.sample(6, seed=seed))
    g = routing.head_gradients(model, ep, layer=0, head=0)
    assert g.score_grad.shape == (6, 24, 24) and g.value_grad.shape == (6, 24, 15)
    assert g.score_grad.abs().max() > 1e-6  # not trivially zero
    assert g.score_rel_error < 1e-10 and g.value_rel_error < 1e-10
    # the test has power: the uncentred law (no baseline E_α[b]) or the flipped sign are far off
    assert (g.pattern * g.compatibility - g.score_grad_autograd).abs().max() > 1e-3 * g.score_grad_autograd.abs().max()
    assert (-g.score_grad - g.score_grad_autograd).abs().max() > 0.5 * g.score_grad_autograd.abs().max()
    # rows of ∂L/∂s sum to zero (softmax is shift invariant) and vanish above the diagonal
    assert g.score_grad.sum(-1).abs().max() < 1e-14
    assert g.score_grad.triu(1).abs().max() == 0


def test_law_on_a_random_float64_transformer_every_head() -> None:
    task = tasks.make("bijection", V=5, L=5)
    torch.manual_seed(0)
    model = models.make("transformer", task, n_layers=2, n_heads=2, d_model=16).double()
    rows = routing.check_all_heads(model, task.sample(4, seed=0))
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert max(max(r["score_rel_error"], r["value_rel_error"]) for r in rows) < 1e-10


def test_score_gradients_is_the_gradient_of_the_mean_scored_cross_entropy() -> None:
    """Finite differences on one score, through a patched pattern: the contract's L, not another loss."""
    task = tasks.make("sticky", length=10)
    torch.manual_seed(3)
    model = models.attention_layer(task, init_std=0.5).double()
    ep = _double(task.sample(3, seed=3))
    grad = routing.score_gradients(model, ep, 0, 0)
    b, i, j, eps = 1, 7, 4, 1e-6

    def loss_with(delta: float) -> float:
        def bump(s, name):
            s = s.clone()
            s[b, 0, i, j] += delta
            return s

        with torch.no_grad(), model.hooks([("blocks.0.attn.hook_scores", bump)]):
            return float(routing.scored_cross_entropy(model(**ep.inputs), ep))

    numeric = (loss_with(eps) - loss_with(-eps)) / (2 * eps)
    assert abs(numeric - float(grad[b, i, j])) < 1e-8 * max(1.0, abs(numeric))


def test_law_on_a_trained_transformer_to_float_precision(tmp_path: Path) -> None:
    cfg = TrainConfig(task="bijection", task_params={"V": 5, "L": 5}, arch="transformer",
                      model={"n_layers": 2, "n_heads": 2, "d_model": 32}, steps=60, lr=3e-3, warmup=5,
                      progress=False, eval_every=60, ckpt_every=60, log_checkpoints=False)
    train(cfg, tmp_path / "run")
    task, model = load(tmp_path / "run")
    ep = task.sample(64, seed=9)
    routing.scored_cross_entropy(model(**ep.inputs), ep).backward()  # gradients a user may be holding
    grads_before = [p.grad.clone() for p in model.parameters()]
    rows = routing.check_all_heads(model, ep)
    assert len(rows) == 4
    for r in rows:
        assert r["score_rel_error"] < 1e-5 and r["value_rel_error"] < 1e-5, r
        assert 0 < r["advantage_positive_share"] < 1
    # the check leaves the model's own gradients alone
    for p, before in zip(model.parameters(), grads_before):
        assert torch.equal(p.grad, before)


def test_models_without_attention_and_bad_heads_are_refused() -> None:
    task = tasks.make("bijection", V=4, L=4)
    ep = task.sample(2, seed=0)
    with pytest.raises(InvalidValue, match="no attention heads"):
        routing.score_gradients(models.make("lstm", task, n_layers=1, d_model=8), ep, 0, 0)
    tf = models.make("transformer", task, n_layers=1, n_heads=2, d_model=8)
    with pytest.raises(InvalidValue, match="invalid head"):
        routing.score_gradients(tf, ep, 0, 2)
    with pytest.raises(InvalidValue, match="invalid layer"):
        routing.score_gradients(tf, ep, 3, 0)


def test_single_attention_layer_is_causal_and_reads_raw_features() -> None:
    task = tasks.make("sticky", length=12)
    model = models.attention_layer(task)
    assert model.n_params() == 20 * 10 * 2 + 20 * 15 + 15 * 8  # Paper II's W_Q, W_K, W_V, W_O
    ep = task.sample(2, seed=0)
    a = model(**ep.inputs)
    f = ep.features.clone()
    f[:, 6:] += 1.0
    b = model(ep.tokens, f)
    assert torch.equal(a[:, :6], b[:, :6]) and not torch.allclose(a[:, 6:], b[:, 6:])
    with pytest.raises(InvalidValue):
        with model.bypass_layer(0):
            pass


def test_shared_statistics_by_hand() -> None:
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert abs(t975(60) - 2.0003) < 1e-3 and abs(t975(1000) - 1.9623) < 1e-3
    m = mean_std([1.0, 2.0, 4.0, None, math.nan])
    assert m["n"] == 3 and m["mean"] == pytest.approx(7 / 3)
    s = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    assert m["std"] == pytest.approx(s)
    assert m["ci95"] == pytest.approx([7 / 3 - 4.303 * s / math.sqrt(3), 7 / 3 + 4.303 * s / math.sqrt(3)])
    d = paired([3.0, 5.0, 7.0], [1.0, 2.0, 3.0])
    assert d["mean"] == pytest.approx(3.0) and d["ci95"][0] < 3.0 < d["ci95"][1]
