"""The controls on routing the claims need, each on a case whose answer is known by hand.

Grouped-query attention (Paper III's MHA-vs-GQA focusing contrast, D10), uniform attention (Paper
II's primitive-to-EM mapping, C10), projections frozen at initialisation, and the grid experiments
and reproduction plan that train them.
"""

from __future__ import annotations

import pytest
import torch

from windtunnel.run import grid
from windtunnel import models, tasks
from windtunnel.orchestration import reproduce
from windtunnel.errors import InvalidValue


def tiny(task: tasks.Task, seed: int = 0, **kw) -> models.base.WindTunnelModel:
    torch.manual_seed(seed)
    return models.make("transformer", task, **{"d_model": 16, "n_layers": 2, "n_heads": 4, **kw}).eval()


# --- grouped-query attention ----------------------------------------------------------------------------
def test_grouped_query_attention_is_multi_head_attention_with_keys_and_values_copied_per_group() -> None:
    task = tasks.make("bijection", V=5, L=5)
    gqa = tiny(task, n_kv_heads=2)
    mha = tiny(task, seed=1)
    H, Hkv, dh, d = 4, 2, 4, 16
    with torch.no_grad():
        for name, p in mha.named_parameters():
            if not name.endswith("attn.qkv.weight"):
                p.copy_(dict(gqa.named_parameters())[name])
        for bg, bm in zip(gqa.blocks, mha.blocks):
            w = bg.attn.qkv.weight  # rows: q (H·dh), k (Hkv·dh), v (Hkv·dh)
            q, k, v = w[: H * dh], w[H * dh: (H + Hkv) * dh], w[(H + Hkv) * dh:]
            per_head = lambda m: m.view(Hkv, dh, d).repeat_interleave(H // Hkv, dim=0).reshape(H * dh, d)  # noqa: E731
            bm.attn.qkv.weight.copy_(torch.cat((q, per_head(k), per_head(v))))
    ep = task.sample(6, 2)
    assert torch.allclose(gqa(**ep.inputs), mha(**ep.inputs), atol=1e-6)
    # hooks see one key per query head (heads 0, 1 share key head 0); unrotated_keys the distinct ones
    _, cache = gqa.run_with_cache(ep.tokens, names=["blocks.0.attn.hook_k", "blocks.0.attn.hook_pattern"])
    k = cache["blocks.0.attn.hook_k"]
    assert k.shape[2] == H and torch.equal(k[:, :, 0], k[:, :, 1]) and not torch.equal(k[:, :, 1], k[:, :, 2])
    assert cache["blocks.0.attn.hook_pattern"].shape[1] == H
    assert [x.shape[2] for x in gqa.unrotated_keys(ep.tokens)] == [Hkv, Hkv]
    assert gqa.blocks[0].attn.qkv.weight.shape[0] == (H + 2 * Hkv) * dh
    with pytest.raises(ValueError, match="n_kv_heads"):
        tiny(task, n_kv_heads=3)


def test_capacity_matching_widens_the_grouped_query_model() -> None:
    task = tasks.make("bijection", V=10, L=9)
    mha = models.make("transformer", task, params=200_000, n_layers=4, n_heads=4)
    mqa = models.make("transformer", task, params=200_000, n_layers=4, n_heads=4, n_kv_heads=1)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert mqa.config.d_model > mha.config.d_model  # fewer key/value weights buy width
    assert abs(count(mqa) - 200_000) <= 6_000 and abs(count(mha) - 200_000) <= 6_000


# --- uniform attention ----------------------------------------------------------------------------------
def test_uniform_attention_averages_the_causal_prefix_and_leaves_queries_and_keys_untrained() -> None:
    task = tasks.make("recall")
    model = tiny(task, n_layers=2, uniform_attn=[0, 1]).train()
    ep = task.sample(4, 0)
    _, cache = model.run_with_cache(ep.tokens, names=["blocks.1.attn.hook_pattern", "blocks.0.attn.hook_v",
                                                      "blocks.0.attn.hook_z"])
    T = ep.tokens.shape[1]
    mean = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    assert torch.allclose(cache["blocks.1.attn.hook_pattern"], mean.expand(4, 4, T, T), atol=1e-6)
    v = cache["blocks.0.attn.hook_v"]  # z_t is the mean of v_{<=t}
    assert torch.allclose(cache["blocks.0.attn.hook_z"], v.cumsum(1) / torch.arange(1, T + 1)[None, :, None, None],
                          atol=1e-5)
    with model.explicit_attention():  # the fused and explicit paths agree
        explicit = model(**ep.inputs)
    assert torch.allclose(explicit, model(**ep.inputs), atol=1e-5)
    model(**ep.inputs).logsumexp(-1).mean().backward()
    dh, H = model.config.head_dim, model.config.n_heads
    g = model.blocks[0].attn.qkv.weight.grad
    assert g[: 2 * H * dh].abs().max() == 0 and g[2 * H * dh:].abs().max() > 0  # W_Q, W_K idle; W_V learns


# --- frozen projections ---------------------------------------------------------------------------------
def test_frozen_projections_keep_their_initial_values_under_adamw_and_weight_decay() -> None:
    task = tasks.make("bijection", V=5, L=5)
    model = tiny(task, frozen=["qk"]).train()
    same_seed = tiny(task)
    ep = task.sample(8, 0)
    assert torch.equal(model(**ep.inputs), same_seed(**ep.inputs))  # freezing changes no initial value
    H, dh = model.config.n_heads, model.config.head_dim
    before = [b.attn.weight().detach().clone() for b in model.blocks]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(**ep.inputs).logsumexp(-1).mean().backward()
        opt.step()
    for b, w0 in zip(model.blocks, before):
        w = b.attn.weight().detach()
        assert torch.equal(w[: 2 * H * dh], w0[: 2 * H * dh]) and not torch.equal(w[2 * H * dh:], w0[2 * H * dh:])
    again = tiny(task, frozen=["qk"])
    again.load_state_dict(model.state_dict())  # the frozen values travel with a checkpoint
    assert torch.equal(again.eval()(**ep.inputs), model.eval()(**ep.inputs))
    with pytest.raises(ValueError, match="frozen"):
        tiny(task, frozen=["w_o"])


# --- the grid and the plan ------------------------------------------------------------------------------
def test_grid_experiments_for_the_controls_change_only_the_routing() -> None:
    base = grid.preset("quick", "main", "transformer")
    gqa = grid.preset("quick", "main_gqa", "transformer")
    assert gqa["model"] == {**base["model"], "n_kv_heads": 1} and {k: v for k, v in gqa.items() if k != "model"} == \
        {k: v for k, v in base.items() if k != "model"}
    for column in ("main", "hmm", "recall"):
        full, uni = grid.preset("quick", column, "transformer"), grid.preset("quick", f"{column}_uniform", "transformer")
        layers = full["model"]["n_layers"]
        assert uni["model"] == {**full["model"], "uniform_attn": list(range(layers))}
        assert {k: v for k, v in uni.items() if k != "model"} == {k: v for k, v in full.items() if k != "model"}
    folders = lambda target: {j.cell.folder for j in reproduce.plan(target)}  # noqa: E731
    assert {"main_gqa-transformer-s0", "main-transformer-s2"} <= folders("paper3")
    assert {f"{c}_uniform-transformer-s{s}" for c in ("main", "hmm", "recall") for s in reproduce.SEEDS} <= folders("paper2")
    assert "main_gqa-transformer-s0" not in folders("paper1") and folders("paper1") | folders("paper2") | folders("beyond") | \
        folders("paper3") | folders("sequel") == folders("all")


def test_layer_norm_option_centres_and_keeps_a_bias() -> None:
    """``norm="layer"`` is LayerNorm at every norm site: the normalised stream has zero mean and unit
    variance per position (RMSNorm's has unit mean square only), and an unknown norm is refused."""
    task = tasks.make("bijection", V=4, L=4)
    torch.manual_seed(0)
    model = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2, norm="layer")
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 2 + 1 and all(n.bias is not None for n in norms)
    x = torch.randn(3, 5, 16) * 4 + 2
    y = model.blocks[0].ln1(x)
    assert torch.allclose(y.mean(-1), torch.zeros(3, 5), atol=1e-5)
    assert torch.allclose(y.var(-1, unbiased=False), torch.ones(3, 5), atol=1e-3)
    rms = models.make("transformer", task, d_model=16, n_layers=2, n_heads=2)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in rms.modules())
    with pytest.raises(InvalidValue, match="norm"):
        models.make("transformer", task, d_model=16, n_layers=2, n_heads=2, norm="batch")


def test_alibi_adds_the_distance_penalty_and_both_attention_paths_agree() -> None:
    """ALiBi by hand: head h's score for query i and key j ≤ i is q·k/√d − m_h (i − j), m_h = 2^(−8h/H);
    the fast path (a float mask in scaled_dot_product_attention) equals the explicit softmax."""
    task = tasks.make("bijection", V=4, L=4)
    model = tiny(task, pos="alibi").double()
    attn = model.blocks[0].attn
    bias = attn.alibi_bias(5, torch.device("cpu"), torch.float64)
    slopes = [2.0 ** (-8 * h / 4) for h in range(1, 5)]
    for h, m in enumerate(slopes):
        for i in range(5):
            for j in range(5):
                want = -m * (i - j) if j <= i else float("-inf")
                assert bias[h, i, j].item() == want
    ep = task.sample(3, seed=1)
    fast = model(**ep.inputs)
    attn_all = [b.attn for b in model.blocks]
    for a in attn_all:
        a.explicit = True
    slow = model(**ep.inputs)
    assert torch.allclose(fast, slow, atol=1e-10)
    # the hooked scores carry the penalty: they differ from the same weights without positions by the bias alone
    _, cache = model.run_with_cache(**ep.inputs)
    rope_free = tiny(task, pos="none").double()
    rope_free.load_state_dict(model.state_dict())
    _, plain = rope_free.run_with_cache(**ep.inputs)
    T = ep.inputs["tokens"].shape[1]
    diff = cache["blocks.0.attn.hook_scores"] - plain["blocks.0.attn.hook_scores"]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    assert torch.allclose(diff[..., causal], attn.alibi_bias(T, torch.device("cpu"), torch.float64)[None][..., causal]
                          .expand_as(diff[..., causal]))


def test_em_runs_are_the_same_runs_on_any_device(tmp_path) -> None:
    """The device is where an arm trains, not what it is: a finished run is kept when the sweep is asked again
    on another device, each run records the device it used, and em.json's setup leaves it out."""
    import json

    from windtunnel.routing.em import EMSetup, run_em

    setup = EMSetup(steps=3, seeds=(42,), arms=("sgd",), length=64, eval_every=1)
    run_em(setup, tmp_path, progress=False)
    log = (tmp_path / "runs.jsonl").read_text()
    assert json.loads(log)["device"] == "cpu"
    run_em(EMSetup(steps=3, seeds=(42,), arms=("sgd",), length=64, eval_every=1, device="auto"), tmp_path, progress=False)
    assert (tmp_path / "runs.jsonl").read_text() == log
    assert "device" not in json.loads((tmp_path / "em.json").read_text())["setup"]
    with pytest.raises(InvalidValue, match="device"):
        EMSetup(device="tpu").validate()
