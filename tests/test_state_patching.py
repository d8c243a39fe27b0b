"""State patching (windtunnel.geometry.state_patching) on models whose answers are known: an exact recurrent filter
whose state at a position *is* the belief (so a patched state makes every later prediction the filter started from
B's belief, exactly), a linear readout of the posterior, and the tiny model of every architecture."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from windtunnel import geometry as G
from windtunnel import models, tasks
from windtunnel.geometry.state_patching import spliced, state_patching
from windtunnel.geometry.steering import counterfactual_pairs
from windtunnel.models.base import HookPoint, ModelConfig, WindTunnelModel
from windtunnel.tasks.hmm import OBS0

from contracts import tiny_model, tiny_task


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_resid_post = HookPoint()


class ExactFilter(WindTunnelModel):
    """The HMM's forward filter, one position at a time, its state (the belief) passed through
    ``blocks.0.hook_resid_post`` after every step, so that a state replaced at ``t`` is the one step ``t + 1``
    updates (read as a distribution, :func:`_simplex`); the output is ``log((1 − mix) · belief + mix · uniform)``."""

    def __init__(self, task: tasks.Task, mix: float = 0.0) -> None:
        super().__init__(ModelConfig(arch="exact_filter", vocab_size=task.vocab_size, n_classes=task.n_classes))
        self.task, self.mix = task, mix
        self.blocks = nn.ModuleList([_Layer()])
        self._finish_init()

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        S, H = self.task.S, self.task.header_len
        B, T = tokens.shape
        trans, emit = self.task.decode_header(tokens)
        x = torch.full((B, T, S), 1.0 / S, dtype=torch.float64)
        hook = self.blocks[0].hook_resid_post
        x = hook(x)
        for t in range(H, T):
            prev = _simplex(x[:, t - 1]) if t > H else torch.full((B, S), 1.0 / S, dtype=torch.float64)
            if t > H:
                prev = torch.bmm(prev[:, None, :], trans).squeeze(1)
            lik = emit.gather(2, (tokens[:, t] - OBS0).clamp(0, self.task.O - 1)[:, None, None].expand(B, S, 1))[..., 0]
            a = prev * lik
            x = x.clone()
            x[:, t] = a / a.sum(-1, keepdim=True)
            x = hook(x)
        return ((1 - self.mix) * _simplex(x) + self.mix / S).log()


def _simplex(x: torch.Tensor) -> torch.Tensor:
    """A state read as a distribution: floored at 1e-12 and renormalised (a belief is left as it is, to rounding;
    a control's arbitrary vector becomes some distribution)."""
    x = x.clamp_min(1e-12)
    return x / x.sum(-1, keepdim=True)


def test_patching_an_exact_filters_state_follows_the_filter_from_bs_belief() -> None:
    """On a model whose state is the belief, the patched run *is* the spliced context's filter: KL 0 to p_B at t
    and to p_S after t, where no patch, a random vector, another pair's state and the mean state all stay away."""
    task = tasks.make("hmm", S=3, O=3, K=8)
    r = json.loads(json.dumps(state_patching(ExactFilter(task), task, n=60, n_boot=200), allow_nan=False))
    assert r["scored"] == ["at_t", "after_t"]
    for key in ("at_t", "after_t"):
        rec = r[key]
        lay = rec["layers"][0]
        assert rec["reads_counterfactual"]["mean"] < 1e-9
        assert lay["patch"]["mean"] < 1e-9, key
        assert rec["no_patch"]["mean"] > 0.005  # the filter forgets: after t the two contexts differ less
        for c in ("random", "shuffled", "mean"):
            assert lay[c]["mean"] > 1e-3, (key, c)
        for c in ("no_patch", "random", "shuffled", "mean"):
            assert lay["vs"][c]["p_value"] < 0.01 and lay["vs"][c]["diff"] < 0, (key, c)


def test_the_share_is_one_where_the_patch_reproduces_the_counterfactual() -> None:
    """A filter mixed with 10% uniform: reading the counterfactual is a little off the exact posterior, and the
    patched state reproduces the model reading it exactly, so the share recovered is 1 (log and linear)."""
    task = tasks.make("hmm", S=3, O=3, K=8)
    r = state_patching(ExactFilter(task, mix=0.1), task, n=60, n_boot=100)
    for key in ("at_t", "after_t"):
        lay = r[key]["layers"][0]
        assert lay["patch"]["mean"] == pytest.approx(r[key]["reads_counterfactual"]["mean"], rel=1e-9)
        assert lay["patch"]["recovered"] == pytest.approx(1.0, abs=1e-9)
        assert lay["patch"]["recovered_linear"] == pytest.approx(1.0, abs=1e-9)
        assert lay["shuffled"]["recovered"] < 0.9


@pytest.mark.parametrize("arch", models.names())
def test_patching_the_last_layer_at_t_reproduces_the_model_reading_b(arch: str) -> None:
    """The readout at t reads only the last layer's vector at t: patching B's there gives m(B)(t), so the KL at t
    equals reads_counterfactual exactly; the no-patch control is the same at every layer."""
    task = tiny_task("hmm")
    model = tiny_model(arch, task)
    r = state_patching(model, task, episodes=task.sample(24, 1), n_boot=30)
    if not G.DIAGNOSTICS["state_patching"].applies(model):
        assert r["applicable"] is False and "hook_resid_post" in r["reason"]
        return
    rec = r["at_t"]
    assert rec["layers"][-1]["patch"]["mean"] == pytest.approx(rec["reads_counterfactual"]["mean"], rel=1e-5)
    assert r["summary"]["at_t_best_layer"] < len(model.blocks) - 1  # the trivial last layer is left out
    readings = G.DIAGNOSTICS["state_patching"].interpret(r)
    assert [x.statistic for x in readings] == ["state_patching.at_t_best_patched_kl",
                                               "state_patching.after_t_best_patched_kl"]
    assert readings[1].consistent is None and all(x.claim == "B10" for x in readings)
    assert all(0 <= lay["vs"][c]["p_value"] <= 1 for lay in rec["layers"] for c in lay["vs"])
    assert "after_t" in r["scored"]


def test_the_spliced_context_is_b_up_to_t_then_a() -> None:
    task = tasks.make("hmm", S=3, O=3, K=6)
    ep = task.sample(10, 0)
    pairs = counterfactual_pairs(task, ep, torch.arange(10), 3)
    s = spliced(pairs)["tokens"]
    for i in range(len(pairs)):
        t = int(pairs.pos[i])
        assert torch.equal(s[i, : t + 1], pairs.b["tokens"][i, : t + 1])
        assert torch.equal(s[i, t + 1 :], pairs.a["tokens"][i, t + 1 :])
    # the spliced context's exact posterior after t is the filter from B's belief at t run on A's observations
    post = task.posterior(s)
    i, t = 0, int(pairs.pos[0])
    trans, emit = task.decode_header(pairs.a["tokens"][:1])
    alpha = pairs.post_b[0, t]
    for u in range(t + 1, s.shape[1]):
        alpha = (alpha @ trans[0]) * emit[0, :, int(s[0, u]) - OBS0]
        alpha = alpha / alpha.sum()
        assert torch.allclose(post[0, u], alpha, atol=1e-12)


@pytest.mark.parametrize("task_name", ["bijection", "recall", "regression", "mess3"])
def test_tasks_without_a_hidden_state_are_scored_at_t_only(task_name: str) -> None:
    task = tiny_task(task_name)
    model = tiny_model("transformer", task)
    r = json.loads(json.dumps(state_patching(model, task, episodes=task.sample(24, 1), n_boot=30), allow_nan=False))
    if r.get("applicable") is False:
        assert r["reason"].startswith("task")
        return
    hidden = task.belief(task.sample(1, 0).tokens) is not None
    assert r["scored"] == (["at_t", "after_t"] if hidden else ["at_t"])
