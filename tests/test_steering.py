"""Belief steering (windtunnel.geometry.steering) on a model whose answer is known: a stream that is a linear image
of the exact posterior, read out linearly in probability, where steering along the probe must land exactly on the
counterfactual's posterior; and on the tiny model of every architecture."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from windtunnel import geometry as G
from windtunnel import models, tasks
from windtunnel.evaluation.metrics import kl_bits
from windtunnel.geometry.steering import counterfactual_pairs, run_patched, share_recovered, steering
from windtunnel.models.base import Block, HookPoint, ModelConfig, WindTunnelModel

from contracts import tiny_model, tiny_task


class _Identity(Block):
    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return x


class LinearBelief(WindTunnelModel):
    """Two identity blocks over the stream ``x = p A`` (``p`` the exact posterior, ``A`` a random ``C × d`` map of
    full row rank); the output is the probability readout ``q = x A⁺`` (floored at 1e-12, renormalised) as log
    probabilities (mixed with ``mix`` of the uniform distribution): a model whose readout is linear in the stream,
    and exact at ``mix = 0``."""

    def __init__(self, task: tasks.Task, d: int = 11, mix: float = 0.0) -> None:
        super().__init__(ModelConfig(arch="linear_belief", vocab_size=task.vocab_size, n_classes=task.n_classes))
        self.task, self.mix = task, mix
        g = torch.Generator().manual_seed(0)
        self.A = torch.randn(task.n_classes, d, generator=g, dtype=torch.float64)
        self.R = torch.linalg.pinv(self.A)
        self.blocks = nn.ModuleList([_Identity(), _Identity()])
        self.hook_final = HookPoint()
        self._finish_init()

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        x = self.task.posterior(tokens) @ self.A
        for block in self.blocks:
            x = block(x)
        q = (self.hook_final(x) @ self.R).clamp_min(1e-12)
        return ((1 - self.mix) * q / q.sum(-1, keepdim=True) + self.mix / self.task.n_classes).log()


@pytest.mark.parametrize("name,params", [("hmm", {"S": 3, "O": 3, "K": 8}), ("bijection", {"V": 6, "L": 5})])
def test_steering_along_the_probe_of_a_linear_readout_lands_on_the_counterfactual(name: str, params: dict) -> None:
    """The probe of a stream that is a linear image of the posterior is the readout itself, so its minimum-norm edit
    makes the model output B's posterior exactly, at every layer; a random edit of the same norm does not, and
    leaving the model alone is as far from p_B as p_A is."""
    task = tasks.make(name, **params)
    r = json.loads(json.dumps(steering(LinearBelief(task), task, n=80, n_boot=200), allow_nan=False))
    assert r["applicable"] and r["n_pairs"] >= 10
    assert r["no_edit"]["mean"] > 0.05  # the pairs' posteriors differ
    assert r["reads_B"]["mean"] < 1e-6  # an exact model
    for lay in r["layers"]:
        assert lay["probe_r2"] > 0.999 and lay["probe_rank"] == task.n_classes - 1
        assert lay["probe_reads_target_tv"] < 1e-6
        assert lay["steered"]["mean"] < 1e-5, lay
        dm = lay["data_metric"]  # the same constraint in the stream's own metric: as exact
        assert dm["probe_reads_target_tv"] < 1e-6 and dm["steered"]["mean"] < 1e-5
        assert dm["vs_random"]["p_value"] < 0.01
        assert lay["random"]["mean"] > 0.05
        assert lay["vs_no_edit"]["p_value"] < 0.01 and lay["vs_random"]["p_value"] < 0.01
        assert lay["vs_no_edit"]["diff"] == pytest.approx(lay["steered"]["mean"] - r["no_edit"]["mean"], abs=1e-9)
        lo, hi = lay["random"]["ci"]
        assert lo <= lay["random"]["mean"] <= hi
    s = r["summary"]
    assert s["steered_kl"] < 1e-5 and s["p_vs_no_edit"] < 0.01


def test_the_no_edit_control_is_the_unedited_models_kl_at_the_pairs() -> None:
    """``no_edit`` is KL(p_B(t) ‖ m(A)(t)) computed here independently on the same pairs; ``reads_B`` is
    KL(p_B(t) ‖ m(B)(t))."""
    task = tasks.make("bijection", V=6, L=5)
    model = tiny_model("transformer", task)
    ep = task.sample(40, 5)
    r = steering(model, task, episodes=ep, seed=11, n_boot=50)
    from windtunnel.geometry.readouts import split_rows
    seq = ep.mask.nonzero(as_tuple=True)[0]
    _, test = split_rows(seq)
    pairs = counterfactual_pairs(task, ep, torch.unique(seq[test]), 12)
    ar = torch.arange(len(pairs))
    with torch.no_grad():
        q_a = torch.softmax(model(pairs.a["tokens"]).double(), -1)[ar, pairs.pos]
        q_b = torch.softmax(model(pairs.b["tokens"]).double(), -1)[ar, pairs.pos]
    p_b = pairs.post_b[ar, pairs.pos]
    assert r["n_pairs"] == len(pairs)
    assert r["no_edit"]["mean"] == pytest.approx(float(kl_bits(p_b, q_a).mean()), rel=1e-5)
    assert r["reads_B"]["mean"] == pytest.approx(float(kl_bits(p_b, q_b).mean()), rel=1e-5)


def test_counterfactual_pairs_keep_the_hmm_header_and_take_another_episodes_observations() -> None:
    task = tasks.make("hmm", S=3, O=3, K=6)
    ep = task.sample(12, 0)
    rows = torch.arange(4, 12)
    pairs = counterfactual_pairs(task, ep, rows, 1)
    H = task.header_len
    assert pairs.prefix == H and pairs.hidden_state
    assert torch.equal(pairs.b["tokens"][:, :H], ep.tokens[pairs.rows, :H])  # A's HMM
    donors = ep.tokens[rows][torch.roll(torch.arange(len(rows)), -1)]
    assert torch.equal(pairs.b["tokens"][:, H:], donors[:, H:][: len(pairs)])  # another episode's observations
    ar = torch.arange(len(pairs))
    assert (pairs.pos >= H).all() and pairs.mask_a[ar, pairs.pos].all() and pairs.mask_b[ar, pairs.pos].all()
    tv = 0.5 * (pairs.post_a[ar, pairs.pos] - pairs.post_b[ar, pairs.pos]).abs().sum(-1)
    assert (tv > 1e-6).all()
    assert torch.allclose(pairs.post_b, task.posterior(pairs.b["tokens"]))

    bij = tasks.make("bijection", V=6, L=5)
    ep = bij.sample(8, 0)
    pairs = counterfactual_pairs(bij, ep, torch.arange(8), 1)
    assert pairs.prefix == 0 and not pairs.hidden_state
    assert torch.equal(pairs.b["tokens"], ep.tokens[torch.roll(torch.arange(8), -1)][: len(pairs)])


def test_a_patched_run_changes_only_what_the_patch_reaches() -> None:
    """Patching the last block's output at t changes the prediction at t and no other (a causal model's later
    positions read position t only through earlier layers)."""
    task = tasks.make("bijection", V=6, L=5)
    model = tiny_model("transformer", task)
    ep = task.sample(6, 0)
    pos = torch.full((6,), 4)
    name = f"blocks.{len(model.blocks) - 1}.hook_resid_post"
    base, acts = run_patched(model, ep.inputs, pos, [name])
    from windtunnel.geometry.steering import adder
    moved, _ = run_patched(model, ep.inputs, pos, patch=(name, adder(torch.randn(6, acts[name].shape[1]))))
    others = torch.ones(ep.tokens.shape[1], dtype=torch.bool)
    others[4] = False
    assert torch.allclose(moved[:, others], base[:, others], atol=1e-6)
    assert not torch.allclose(moved[:, 4], base[:, 4], atol=1e-4)


def test_share_recovered_is_a_log_ratio_and_undefined_when_unresolved() -> None:
    assert share_recovered(1.0, 0.01, 0.01) == pytest.approx(1.0)
    assert share_recovered(1.0, 1.0, 0.01) == pytest.approx(0.0)
    assert share_recovered(1.0, 0.1, 0.01) == pytest.approx(0.5)
    assert share_recovered(1.0, 0.9, 0.6) is None  # reading B is less than 2x closer
    assert share_recovered(1.0, 0.5, 0.0) is None


@pytest.mark.parametrize("arch", models.names())
@pytest.mark.parametrize("task_name", ["bijection", "hmm", "regression"])
def test_steering_runs_on_every_architecture_or_declines(arch: str, task_name: str) -> None:
    """On each architecture's tiny model: strict JSON, and wherever the probe has full rank C − 1, the edit makes the
    probe read B's posterior exactly; a model without the stream is declined naming it."""
    task = tiny_task(task_name)
    model = tiny_model(arch, task)
    r = json.loads(json.dumps(G.DIAGNOSTICS["steering"].compute(model, task, episodes=task.sample(24, 2), n_boot=30),
                              allow_nan=False))
    if not G.DIAGNOSTICS["steering"].applies(model):
        assert r["applicable"] is False and "hook_resid_p" in r["reason"]
        return
    assert r["applicable"], r
    assert [lay["layer"] for lay in r["layers"]] == [-1, *range(len(model.blocks))]  # the embedding, then each block
    for lay in r["layers"]:
        if lay["probe_rank"] == task.n_classes - 1:
            assert lay["probe_reads_target_tv"] < 1e-6
        assert 0 <= lay["vs_no_edit"]["p_value"] <= 1


def test_steering_declines_a_model_without_layers() -> None:
    task = tasks.make("bijection", V=6, L=5)

    class NoLayers(nn.Module):
        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return torch.zeros(*tokens.shape, task.n_classes)

    r = steering(NoLayers(), task, n=8)
    assert r["applicable"] is False and "blocks.{l}.hook_resid_pre" in r["reason"]
