"""Mamba's effective attention (``windtunnel.models.mamba``): the scan unrolled into per-channel attention
matrices, exact in float64, and its channel aggregate exposed as ``blocks.{l}.attn.hook_pattern`` so that the
attention diagnostics read Mamba."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from contracts import tiny_model, tiny_task
from windtunnel import routing
from windtunnel.errors import InvalidValue
from windtunnel.geometry import attention_focusing
from windtunnel.geometry.registry import discover
from windtunnel.models import mamba as M
from windtunnel.models.scans import selective_scan_ref

TASKS = ("bijection", "hmm")


def _spread_selection(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Decay rates over four orders of magnitude and step sizes around 1, so that the decays between positions
    range from ~1 to ~0 (at initialisation they are all near 1 and ``α`` hardly depends on the distance)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in model.blocks:
            block.A_log.copy_(torch.empty(block.A_log.shape, dtype=block.A_log.dtype).uniform_(-3, 3, generator=g))
            block.dt_proj.bias.copy_(torch.empty(block.dt_proj.bias.shape, dtype=block.dt_proj.bias.dtype)
                                     .uniform_(-2, 1, generator=g))
            block.D.copy_(torch.randn(block.D.shape, dtype=block.D.dtype, generator=g))
    return model


def _layer_inputs(model: torch.nn.Module, ep) -> list[torch.Tensor]:
    names = [f"blocks.{l}.hook_resid_pre" for l in range(len(model.blocks))]
    _, cache = model.run_with_cache(**ep.inputs, names=names)
    return [model.blocks[l].norm(cache[n]) for l, n in enumerate(names)]


@pytest.mark.parametrize("scan", ["fast", "ref"])
@pytest.mark.parametrize("task_name", TASKS)
def test_alpha_and_the_skip_reconstruct_each_layers_mixer_output(task_name: str, scan: str) -> None:
    """``y_t[i] = Σ_s α_i[t,s] u_s[i] + D_i u_t[i]``, gated and projected, is the block's mixer output to 1e-10
    (float64), on every layer; ``α`` is causal and carries real distance dependence (not a trivial case)."""
    task = tiny_task(task_name)
    model = _spread_selection(tiny_model("mamba", task, seed=1, scan=scan).double(), seed=2)
    ep = task.sample(4, 3)
    with torch.no_grad():
        for l, x in enumerate(_layer_inputs(model, ep)):
            block = model.blocks[l]
            u, delta_raw, A, B, C, z = block.scan_inputs(x)
            alpha = M.selective_attention(F.softplus(delta_raw), A, B, C)
            Bsz, T, Di = u.shape
            assert alpha.shape == (Bsz, Di, T, T) and alpha.dtype == torch.float64
            future = ~torch.ones(T, T, dtype=torch.bool).tril()
            assert (alpha[..., future] == 0).all()
            y = torch.einsum("bits,bsi->bti", alpha, u) + block.D * u
            got, want = block.out_proj(y * F.silu(z)), block.mixer(x)
            assert want.abs().max() > 1e-3
            assert (got - want).abs().max() <= 1e-10 * want.abs().max(), (l, (got - want).abs().max())
            # the decays span the range: a row is neither constant over the past nor all on the diagonal
            off = alpha[..., ~future & ~torch.eye(T, dtype=torch.bool)].abs()
            assert off.max() > 1e-3 * alpha.abs().max() and off.min() < 1e-6 * alpha.abs().max()


def test_alpha_is_the_recurrences_impulse_response() -> None:
    """Column ``s`` of ``α`` is the reference scan's response to a unit input at ``s`` (``D = 0``): the closed
    form against the recurrence itself, independent of the model, with channels taken in any blocks; and the
    pattern, computed another way, is the closed form's aggregate."""
    g = torch.Generator().manual_seed(0)
    Bsz, T, Di, N = 2, 7, 5, 3
    delta = F.softplus(torch.randn(Bsz, T, Di, generator=g, dtype=torch.float64))
    A = -torch.exp(torch.randn(Di, N, generator=g, dtype=torch.float64))
    B, C = (torch.randn(Bsz, T, N, generator=g, dtype=torch.float64) for _ in range(2))
    alpha = M.selective_attention(delta, A, B, C)
    zero = torch.zeros(Di, dtype=torch.float64)
    for s in range(T):
        u = torch.zeros(Bsz, T, Di, dtype=torch.float64)
        u[:, s] = 1.0
        column = selective_scan_ref(u, delta, A, B, C, zero)  # [Bsz,T,Di]: y_t[i] for a unit u_s[i]
        torch.testing.assert_close(alpha[:, :, :, s], column.transpose(1, 2), rtol=0, atol=1e-13)
    blocks = torch.cat([M.selective_attention(delta, A, B, C, slice(i, i + 2)) for i in range(0, Di, 2)], 1)
    torch.testing.assert_close(blocks, alpha, rtol=0, atol=0)
    # the pattern, run by the recurrence over every source at once, is the closed form's |α| pooled and normalised
    weight = alpha.abs().sum(1)
    for budget in (1, 2 * Bsz * T * N, M.PATTERN_BUDGET):  # one channel at a time, two, all
        P = M.selective_attention_pattern(delta, A, B, C, budget=budget)
        torch.testing.assert_close(P[:, 0], weight / weight.sum(-1, keepdim=True), rtol=0, atol=1e-14)


@pytest.mark.parametrize("scan", ["fast", "ref"])
def test_the_pattern_hook_is_the_normalised_channel_sum_of_abs_alpha(scan: str) -> None:
    """``blocks.{l}.attn.hook_pattern`` is ``Σ_i |α_i[t,s]|`` normalised per row, ``[B,1,T,T]`` float64: causal
    rows summing to 1, the same whatever block of channels it is computed in; caching it leaves the logits
    exactly as they were."""
    task = tiny_task("bijection")
    model = _spread_selection(tiny_model("mamba", task, seed=4, scan=scan), seed=5)
    ep = task.sample(3, 1)
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(len(model.blocks))]
    with torch.no_grad():
        plain = model(**ep.inputs)
        logits, cache = model.run_with_cache(**ep.inputs, names=names)
        assert torch.equal(logits, plain)
        for l, x in enumerate(_layer_inputs(model, ep)):
            _, delta_raw, A, B, C, _ = model.blocks[l].scan_inputs(x)
            delta = F.softplus(delta_raw)
            weight = M.selective_attention(delta, A, B, C).abs().sum(1)
            want = (weight / weight.sum(-1, keepdim=True))[:, None]
            P = cache[names[l]]
            T = P.shape[-1]
            assert P.shape == (3, 1, T, T) and P.dtype == torch.float64
            torch.testing.assert_close(P, want, rtol=0, atol=1e-6)  # float32 model: its own Δ, B, C
            torch.testing.assert_close(P.sum(-1), torch.ones(3, 1, T, dtype=torch.float64), rtol=0, atol=1e-12)
            assert (P[..., ~torch.ones(T, T, dtype=torch.bool).tril()] == 0).all()
            one_by_one = M.selective_attention_pattern(delta, A, B, C, budget=1)  # one channel at a time
            torch.testing.assert_close(one_by_one, M.selective_attention_pattern(delta, A, B, C), rtol=0, atol=1e-14)


def test_the_pattern_is_computed_only_while_hooked_and_cannot_be_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    task = tiny_task("bijection")
    model = tiny_model("mamba", task)
    ep = task.sample(2, 0)
    calls = []
    real = M.selective_attention_pattern
    monkeypatch.setattr(M, "selective_attention_pattern", lambda *a, **k: calls.append(1) or real(*a, **k))
    with torch.no_grad():
        model(**ep.inputs)
        model.run_with_cache(**ep.inputs, names=lambda n: not n.endswith("attn.hook_pattern"))
        assert calls == []  # no cost to a forward pass that does not read it
        model.run_with_cache(**ep.inputs, names="blocks.1.attn.hook_pattern")
        assert calls == [1]
        with model.hooks([("blocks.0.attn.hook_pattern", lambda p, _: p)]):  # observing returns the same tensor
            model(**ep.inputs)
        with pytest.raises(InvalidValue, match="cannot be replaced"):
            with model.hooks([("blocks.0.attn.hook_pattern", lambda p, _: torch.zeros_like(p))]):
                model(**ep.inputs)


def test_attention_focusing_reads_mamba_and_a_scan_that_forgets_at_once_attends_to_itself() -> None:
    """The registry applies ``attention_focusing`` to Mamba through its declaration alone; with decays so strong
    that nothing survives one step (``α_i[t,s] = 0`` for ``s < t``) every layer's pattern is the identity: 0 bits
    and all the mass on the query position, where the model at initialisation spreads it."""
    task = tiny_task("bijection")
    diag = discover()["attention_focusing"]
    model = tiny_model("mamba", task)
    assert diag.applies(model)
    ep = task.sample(16, 2)
    fresh = attention_focusing(model, task, episodes=ep)
    assert fresh["applicable"] and all(len(lay["heads"]) == 1 for lay in fresh["layers"])
    with torch.no_grad():
        for block in model.blocks:
            block.A_log.fill_(math.log(1e4))
            block.dt_proj.bias.fill_(5.0)  # Δ ≈ 5: exp(-5e4) = 0
    r = attention_focusing(model, task, episodes=ep, untrained=tiny_model("mamba", task))
    uniform = r["null"]["uniform_entropy_bits"]
    for lay in r["layers"]:
        assert lay["mean_entropy_bits"] == pytest.approx(0.0, abs=1e-9)
        assert lay["mean_mass"]["self"] == pytest.approx(1.0, abs=1e-9)
        assert 0.1 * uniform < lay["untrained_mean_entropy_bits"] <= uniform + 1e-9


def test_the_routing_law_still_refuses_mamba() -> None:
    """A pattern without scores is not softmax attention: the routing law says Mamba has no heads it can read."""
    task = tiny_task("bijection")
    with pytest.raises(InvalidValue, match="no attention heads"):
        routing.score_gradients(tiny_model("mamba", task), task.sample(2, 0), 0, 0)
