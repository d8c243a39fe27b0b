"""The Jacobian lens (windtunnel.geometry.jacobian_lens): its average Jacobian against autograd at each position,
its identity case (the logit lens), its exactness for an affine later block, and its held-out scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from windtunnel import models, tasks
from windtunnel.evaluation.metrics import kl_bits
from windtunnel.geometry.bayes_lens import _lens, bayes_lens
from windtunnel.geometry.jacobian_lens import average_jacobians, jacobian_lens, jacobian_lens_figure, jacobian_readout
from windtunnel.models.base import Block

from contracts import tiny_model as tiny

PNG = b"\x89PNG\r\n\x1a\n"


def _hmm() -> tasks.Task:
    return tasks.make("hmm", S=2, O=2, K=4)


def _stream_at(model: nn.Module, tokens: torch.Tensor, name: str) -> torch.Tensor:
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names=[name])
    return cache[name]


def _final_given(model: nn.Module, tokens: torch.Tensor, name: str, final: str, t: int, v: torch.Tensor,
                 all_positions: bool = False) -> torch.Tensor:
    """``x_L[0, t]`` of one episode when stream ``name`` is replaced at position ``t`` by ``v`` (or, with
    ``all_positions``, at every position by ``v [T, d]``), every other entry of it as the model computes it."""
    seen: dict[str, torch.Tensor] = {}

    def put(x: torch.Tensor, _name: str) -> torch.Tensor:
        y = x.clone()
        if all_positions:
            y[0] = v
        else:
            y[0, t] = v
        return y

    def keep(x: torch.Tensor, _name: str) -> None:
        seen["x"] = x

    with model.hooks([(name, put), (final, keep)]):
        model(tokens)
    return seen["x"][0, t]


@pytest.mark.parametrize("arch", models.names())
@pytest.mark.slow
def test_the_average_jacobian_is_autograds_same_position_jacobian_averaged(arch: str) -> None:
    """``J̄_l`` is the mean over scored (episode, position) of ``∂x_L[t]/∂x_l[t]`` computed one position at a time
    by ``torch.autograd.functional.jacobian`` (the other positions held fixed), in float64; the mean streams are
    the means at the same positions."""
    task = _hmm()
    model = tiny(arch, task).double()
    ep = task.sample(3, 5)
    fit = average_jacobians(model, ep)
    names = [name for _, name in fit.layers]
    final = names[-1]
    assert set(fit.jacobian) == set(names[:-1]) and fit.n_positions == int(ep.mask.sum())
    for name in names[:-1]:
        expected = torch.zeros_like(fit.jacobian[name])
        mean = torch.zeros_like(fit.mean[name])
        for b, t in ep.mask.nonzero().tolist():
            tokens = ep.tokens[b:b + 1]
            x = _stream_at(model, tokens, name)[0, t]
            jac = torch.autograd.functional.jacobian(lambda v: _final_given(model, tokens, name, final, t, v), x)
            expected += jac
            mean += x
        n = fit.n_positions
        assert torch.allclose(fit.jacobian[name], expected / n, atol=1e-10, rtol=1e-9), (arch, name)
        assert torch.allclose(fit.mean[name], mean / n, atol=1e-12)
        assert not torch.allclose(fit.jacobian[name], torch.eye(len(mean), dtype=torch.float64), atol=1e-3)
    assert all(p.grad is None for p in model.parameters())  # nothing accumulated into the model


def test_the_cross_position_terms_are_left_out() -> None:
    """Through attention the final stream at ``t`` depends on earlier positions' streams: the lens keeps the
    diagonal block ``∂x_L[t]/∂x_l[t]`` of the full Jacobian, which differs from the sum over positions."""
    task = _hmm()
    model = tiny("transformer", task).double()
    ep = task.sample(1, 5)
    name, final = "blocks.0.hook_resid_pre", "blocks.1.hook_resid_post"
    x = _stream_at(model, ep.tokens, name)[0]
    t = int(ep.mask[0].nonzero()[-1])
    full = torch.autograd.functional.jacobian(
        lambda v: _final_given(model, ep.tokens, name, final, t, v, all_positions=True), x)  # [d, T, d]
    fit = average_jacobians(model, ep[:1])
    same = torch.zeros_like(full[:, 0])
    for s in ep.mask[0].nonzero().flatten().tolist():  # the fit's average over this episode's scored positions
        xs = x[s]
        same += torch.autograd.functional.jacobian(lambda v: _final_given(model, ep.tokens, name, final, s, v), xs)
    assert torch.allclose(fit.jacobian[name], same / int(ep.mask.sum()), atol=1e-10)
    diagonal = full[:, t]
    later_only = torch.autograd.functional.jacobian(lambda v: _final_given(model, ep.tokens, name, final, t, v), x[t])
    assert torch.allclose(diagonal, later_only, atol=1e-12)
    assert (full.sum(1) - diagonal).abs().max() > 1e-3  # the earlier positions do reach x_L[t]


def test_where_the_later_blocks_are_the_identity_the_jacobian_lens_is_the_logit_lens() -> None:
    """Every block bypassed: ``x_L = x_l`` for every stream, ``J̄ = I`` and the Jacobian lens reads exactly what
    the logit lens reads, at every layer.  Only the last block bypassed: the stream entering it is read identically
    by both, the embedding is not; and the last layer's Jacobian lens is the model's output in any model."""
    task = _hmm()
    model, ep = tiny("transformer", task), task.sample(16, 3)
    with model.bypass_layer(0), model.bypass_layer(1):
        r = jacobian_lens(model, task, episodes=ep, tuned=False)
        fit = average_jacobians(model, ep[:8])
    d = model.config.d_model
    for j in fit.jacobian.values():
        assert torch.equal(j, torch.eye(d, dtype=torch.float64))
    assert r["kl_by_layer"] == pytest.approx(r["logit_kl_by_layer"], abs=1e-12, rel=0)
    assert r["entropy_error_by_layer"] == pytest.approx(r["logit_entropy_error_by_layer"], abs=1e-12, rel=0)
    assert r["kl_by_layer"][0] == pytest.approx(r["output_kl"], abs=1e-12)

    with model.bypass_layer(1):
        r = jacobian_lens(model, task, episodes=ep, tuned=False)
        fit = average_jacobians(model, ep[:8])
    assert torch.equal(fit.jacobian["blocks.0.hook_resid_post"], torch.eye(d, dtype=torch.float64))
    assert not torch.allclose(fit.jacobian["blocks.0.hook_resid_pre"], torch.eye(d, dtype=torch.float64), atol=1e-3)
    kl, logit = r["kl_by_layer"], r["logit_kl_by_layer"]
    assert kl[1] == pytest.approx(logit[1], abs=1e-12) and kl[1] == pytest.approx(r["output_kl"], abs=1e-12)
    assert r["jacobian_distance_from_identity_by_layer"][1] == 0.0
    assert r["linear_error_by_layer"][1] == pytest.approx(0.0, abs=1e-12)
    assert kl[0] != pytest.approx(logit[0], rel=1e-6)  # block 0 still acts on the embedding

    r = jacobian_lens(model, task, episodes=ep, tuned=False)  # nothing bypassed: the last layer is still exact
    assert r["kl_by_layer"][-1] == r["logit_kl_by_layer"][-1] == pytest.approx(r["output_kl"], abs=1e-12)
    assert r["summary"]["final_kl_vs_output"] < 1e-12


class _Affine(Block):
    """``x ↦ A x + c`` at every position: a linear residual map with an offset."""

    def __init__(self, d: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.A = nn.Parameter(torch.eye(d) + 0.3 * torch.randn(d, d, generator=g))
        self.c = nn.Parameter(2.0 * torch.randn(d, generator=g))

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.A.T + self.c


def test_the_jacobian_lens_is_exact_for_an_affine_later_block() -> None:
    """Last block ``A x + c``: ``J̄ = A`` and the offset ``x̄_L − A x̄_l = c`` make the lens of the stream entering
    it the output itself, while the logit lens (and the bare ``A x_l``, without the offset) read something else."""
    task = _hmm()
    model = tiny("transformer", task)
    d = model.config.d_model
    model.blocks[1] = _Affine(d)
    model._finish_init()
    ep = task.sample(16, 3)
    fit = average_jacobians(model, ep[:8])
    name = "blocks.0.hook_resid_post"
    A, c = model.blocks[1].A.detach().double(), model.blocks[1].c.detach().double()
    assert torch.allclose(fit.jacobian[name], A, atol=1e-6)
    held = ep[8:]
    x = _stream_at(model, held.tokens, name)[held.mask].double()
    x_final = _stream_at(model, held.tokens, "blocks.1.hook_resid_post")[held.mask].double()
    assert torch.allclose(jacobian_readout(fit, name, x), x_final, atol=1e-4)
    assert (x @ fit.jacobian[name].T - x_final).abs().max() > 0.5 * c.abs().max()  # the offset is needed

    r = jacobian_lens(model, task, episodes=ep, tuned=False)
    kl, logit = r["kl_by_layer"], r["logit_kl_by_layer"]
    assert kl[1] == pytest.approx(r["output_kl"], abs=1e-5)
    assert abs(logit[1] - r["output_kl"]) > 100 * abs(kl[1] - r["output_kl"])
    assert r["linear_error_by_layer"][1] < 1e-9
    assert r["jacobian_distance_from_identity_by_layer"][1] == pytest.approx(
        float((A - torch.eye(d, dtype=torch.float64)).norm()) / d ** 0.5, rel=1e-5)


def test_the_lens_is_fitted_on_half_and_scored_beside_the_logit_and_tuned_lenses(tmp_path: Path) -> None:
    """The held-out half is the Bayes lens's: its logit-lens KL there is the Bayes lens's, its tuned lens the Bayes
    lens's tuned lens; the Jacobian lens's KL at a layer is the hand-computed KL of its readout; the result is
    JSON with finite numbers, the figure a PNG, and the model's parameters keep their flags and gain no gradient."""
    task = _hmm()
    model = tiny("transformer", task)
    ep = task.sample(16, 3)
    r = json.loads(json.dumps(jacobian_lens(model, task, episodes=ep), allow_nan=False))
    assert r["n_fit_episodes"] == r["n_held_out_episodes"] == 8
    assert r["n_fit_positions"] == int(ep[:8].mask.sum())
    assert r["layers"] == ["embed", "L0", "L1"]
    held = _lens(model, ep[8:])
    assert r["logit_kl_by_layer"] == pytest.approx(held["kl_by_layer"], rel=1e-12)
    assert r["tuned_kl_by_layer"] == pytest.approx(bayes_lens(model, task, episodes=ep)["tuned"]["kl_by_layer"],
                                                   rel=1e-9)
    fit = average_jacobians(model, ep[:8])
    name = "blocks.0.hook_resid_pre"
    x = _stream_at(model, ep[8:].tokens, name)[ep[8:].mask]
    with torch.no_grad():
        q = torch.softmax(model.unembed(jacobian_readout(fit, name, x).float()).double(), -1)
    assert r["kl_by_layer"][0] == pytest.approx(float(kl_bits(ep[8:].posterior[ep[8:].mask], q).mean()), rel=1e-9)
    s = r["summary"]
    assert s["kl_by_layer"] == r["kl_by_layer"] and s["final_kl"] == r["kl_by_layer"][-1]
    assert s["kl_before_last_block"] == r["kl_by_layer"][-2]
    assert all(p.requires_grad and p.grad is None for p in model.parameters())
    assert jacobian_lens_figure(r, tmp_path / "j.png").read_bytes()[:8] == PNG
    with pytest.raises(Exception, match="at least 2"):
        jacobian_lens(model, task, episodes=ep[:1])
