"""Paper I's code paths added for the claims: each diagnostic on a case whose answer is known by hand.

The sublayer ablation (B11), query–key alignment (B6), Mamba's selection (B17), the Paper-I bijection
layout with a query token (B3), and training with attention switched off in chosen layers (B12).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from windtunnel import geometry as G
from windtunnel import models, tasks
from windtunnel.geometry.qk_alignment import qk_alignment
from windtunnel.geometry.selection import _eta2, information_gain, selection
from windtunnel.geometry.sublayers import sublayer_ablation


def tiny(arch: str, task: tasks.Task, seed: int = 0, **kw) -> models.base.WindTunnelModel:
    torch.manual_seed(seed)
    over = {"d_model": 16, "n_layers": 2, **({"n_heads": 2} if arch == "transformer" else {}), **kw}
    return models.make(arch, task, **over).eval()


# --- the Paper-I bijection layout ---------------------------------------------------------------------
def test_bijection_query_posterior_equals_enumeration_over_permutations() -> None:
    V = 4
    for replacement in (False, True):
        task = tasks.make("bijection_query", V=V, L=5 if replacement else 4, replacement=replacement)
        ep = task.sample(6, 11)
        assert ep.tokens[:, 0::3].eq(V).all() and task.vocab_size == V + 1
        for b in range(6):
            toks = ep.tokens[b].tolist()
            for i in range(1, len(toks), 3):
                shown = [(toks[j], toks[j + 1]) for j in range(1, i, 3)]
                count = [0] * V
                for perm in itertools.permutations(range(V)):
                    if all(perm[k] == v for k, v in shown):
                        count[perm[toks[i]]] += 1
                want = torch.tensor([c / sum(count) for c in count], dtype=torch.float64)
                assert torch.allclose(ep.posterior[b, i], want, atol=1e-15), (replacement, b, i)
            assert ep.mask[b].nonzero().squeeze(1).tolist() == list(range(1, len(toks), 3))


def test_bijection_query_shares_the_production_layouts_pairs() -> None:
    a, b = tasks.make("bijection_query", V=7, L=6).sample(5, 3), tasks.make("bijection", V=7, L=6).sample(5, 3)
    assert torch.equal(a.posterior[:, 1::3], b.posterior[:, 0::2])
    assert torch.equal(a.targets[:, 1::3], b.targets[:, 0::2])


# --- attention switched off in chosen layers ----------------------------------------------------------
def test_attention_off_layers_ignore_their_attention_weights_and_train() -> None:
    task = tasks.make("hmm", S=3, O=3, K=5)
    model = tiny("transformer", task, n_layers=3, attn_off=[1, 2])
    ep = task.sample(4, 0)
    with torch.no_grad():
        before = model(**ep.inputs)
        for l in (1, 2):
            for p in model.blocks[l].attn.parameters():
                p.add_(torch.randn_like(p))
        after = model(**ep.inputs)
        assert torch.equal(before, after)  # layers 1 and 2 read nothing through attention
        for p in model.blocks[0].attn.parameters():
            p.add_(torch.randn_like(p))
        assert not torch.equal(after, model(**ep.inputs))
    _, cache = model.run_with_cache(ep.inputs["tokens"], names=["blocks.1.hook_attn_out"])
    assert cache["blocks.1.hook_attn_out"].abs().max() == 0
    with pytest.raises(ValueError, match="attn_off"):
        tiny("transformer", task, n_layers=2, attn_off=[2])


# --- sublayer ablation (B11) --------------------------------------------------------------------------
def test_sublayer_ablation_of_a_dead_mlp_changes_nothing_and_matches_a_manual_zeroing() -> None:
    task = tasks.make("bijection", V=5, L=5)
    model = tiny("transformer", task, n_layers=2)
    with torch.no_grad():
        model.blocks[1].mlp.proj.weight.zero_()  # layer 1's MLP contributes exactly nothing
    ep = task.sample(32, 1)
    r = sublayer_ablation(model, task, episodes=ep, n_boot=20, metric="kl")
    s = r["summary"]
    assert s["mlp_fold_by_layer"][1] == pytest.approx(1.0, abs=1e-12)
    row = next(x for x in r["rows"] if x["layer"] == 0 and x["sublayer"] == "attn")
    from windtunnel.evaluation import metrics as M

    with model.hooks([("blocks.0.hook_attn_out", lambda t, n: torch.zeros_like(t))]), torch.no_grad():
        per = M.compute(model(**ep.inputs), ep)["per_position"]["kl"]
    manual = per[~torch.isnan(per)].mean()  # pooled over every scored position
    assert row["kl"]["ablated"] == pytest.approx(float(manual), rel=1e-6)
    assert s["mlp_over_attn"] == pytest.approx(s["mlp_fold_by_layer"][1] / s["attn_fold_by_layer"][1])
    assert not sublayer_ablation(tiny("lstm", task), task, episodes=ep)["applicable"]


# --- query–key alignment (B6) -------------------------------------------------------------------------
def _alignment_by_hand(model, task, ep, region: str) -> torch.Tensor:
    L = len(model.blocks)
    names = [f"blocks.{l}.attn.hook_{x}" for l in range(L) for x in "qk"]
    _, cache = model.run_with_cache(ep.inputs["tokens"], names=names)
    regions = G.attention_regions(task, ep.tokens)
    H = model.config.n_heads
    tot, cnt = torch.zeros(L, H, dtype=torch.float64), 0
    for b, t in ep.mask.nonzero().tolist():
        R = [j for j in range(ep.tokens.shape[1]) if regions[region][b, t, j]]
        E = list(range(t))
        if not R or not E:
            continue
        cnt += 1
        for l in range(L):
            for h in range(H):
                q = cache[f"blocks.{l}.attn.hook_q"][b, t, h].double()
                k = cache[f"blocks.{l}.attn.hook_k"][b, :, h].double()
                cos = [float(torch.dot(q, k[j]) / (q.norm() * k[j].norm())) for j in range(len(k))]
                tot[l, h] += sum(cos[j] for j in R) / len(R) - sum(cos[j] for j in E) / len(E)
    return tot / cnt


def test_qk_alignment_equals_a_loop_by_hand_and_is_zero_for_identical_keys() -> None:
    task = tasks.make("bijection", V=6, L=6)
    model = tiny("transformer", task)
    ep = task.sample(6, 2)
    r = qk_alignment(model, task, episodes=ep, untrained=tiny("transformer", task, seed=5))
    assert r["region"] == "value_positions"
    want = _alignment_by_hand(model, task, ep, "value_positions")
    assert torch.allclose(torch.tensor(r["by_layer_head"], dtype=torch.float64), want, atol=1e-6)
    assert r["summary"]["alignment_by_layer"] == pytest.approx(want.max(1).values.tolist(), abs=1e-6)
    assert len(r["summary"]["untrained_alignment_by_layer"]) == 2
    const = lambda t, n: torch.ones_like(t)  # noqa: E731 - every key the same vector: no contrast
    with model.hooks([("blocks.0.attn.hook_k", const)]):
        r0 = qk_alignment(model, task, episodes=ep)
    assert r0["by_layer_head"][0] == pytest.approx([0.0, 0.0], abs=1e-12)


# --- Mamba's selection (B17) --------------------------------------------------------------------------
def test_information_gain_and_eta2_by_hand() -> None:
    post = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
    seq = torch.tensor([0, 0, 1, 1])
    g = information_gain(post, seq)
    assert math.isnan(g[0]) and math.isnan(g[2])
    assert float(g[1]) == pytest.approx(1.0)  # KL([1,0] || [.5,.5]) = 1 bit
    want = 0.25 * math.log2(0.25 / 0.5) + 0.75 * math.log2(0.75 / 0.5)
    assert float(g[3]) == pytest.approx(want)
    x = torch.tensor([1.0, 1.0, 3.0, 3.0])
    assert _eta2(x, torch.tensor([0, 0, 1, 1])) == pytest.approx(1.0)
    assert _eta2(x, torch.tensor([0, 1, 0, 1])) == pytest.approx(0.0)


def test_selection_reads_the_step_sizes_a_hook_sets() -> None:
    task = tasks.make("hmm", S=3, O=3, K=8)
    model = tiny("mamba", task)
    ep = task.sample(24, 4)
    gain = information_gain(ep.posterior[ep.mask], ep.mask.nonzero(as_tuple=True)[0])
    # make layer 0's step size a monotone function of the information gain: rho must be exactly 1
    g = torch.nan_to_num(gain, nan=-1.0).float()
    full = torch.zeros(ep.tokens.shape)
    full[ep.mask] = g
    patch = lambda t, n: (full[..., None] + 2.0).expand_as(t).to(t.dtype)  # noqa: E731
    with model.hooks([("blocks.0.hook_delta", patch)]):
        r = selection(model, task, episodes=ep, untrained=tiny("mamba", task, seed=3))
    assert r["layers"]["delta_info_rho"][0] == pytest.approx(1.0)
    assert r["summary"]["best_abs_delta_info_rho"] == pytest.approx(1.0)
    assert "untrained_best_abs_delta_info_rho" in r["summary"]
    assert not selection(tiny("transformer", task), task, episodes=ep)["applicable"]


# --- Paper II's EM reading (C9) ---------------------------------------------------------------------
def test_em_reading_responsibility_is_the_attention_on_the_posteriors_support() -> None:
    from windtunnel.geometry.em_reading import em_reading

    task = tasks.make("bijection", V=5, L=12, replacement=True)
    model = tiny("transformer", task)
    ep = task.sample(16, 3)
    region = G.attention_regions(task, ep.tokens)["repeat_answer"]  # [B,T,T]

    def onto_support(t, n):  # every head puts all its attention on the earlier answer, where there is one
        R = region.to(t.dtype)[:, None]
        has = R.sum(-1, keepdim=True) > 0
        return torch.where(has, R / R.sum(-1, keepdim=True).clamp_min(1), t)

    def uniform(t, n):
        T = t.shape[-1]
        causal = torch.ones(T, T).tril()
        return (causal / causal.sum(-1, keepdim=True)).expand_as(t).to(t.dtype)

    with model.hooks([("blocks.1.attn.hook_pattern", onto_support)]):
        r = em_reading(model, task, episodes=ep)
    assert r["region"] == "repeat_answer" and r["summary"]["responsibility_by_layer"][1] == pytest.approx(1.0)
    with model.hooks([("blocks.0.attn.hook_pattern", uniform)]):
        r = em_reading(model, task, episodes=ep)
    assert r["summary"]["responsibility_by_layer"][0] == pytest.approx(r["summary"]["uniform_responsibility"])
    acc = torch.tensor(r["prototype_accuracy"])
    assert ((acc >= 0) & (acc <= 1)).all() and r["summary"]["chance"] == pytest.approx(1 / 5)
    assert not em_reading(model, tasks.make("bijection", V=5, L=5), episodes=tasks.make("bijection", V=5, L=5).sample(4, 0))["applicable"]


def test_scale_target_is_the_cells_the_claims_read_at_paper_size(tmp_path) -> None:
    """``reproduce scale --preset paper``: the cells the claims read at the papers' size — the main job's recipe at
    2.67M parameters, and HMM as the authors' recipe trains (7,813 steps of batch 64 over one fixed set of 10,000
    episodes) with learned and rotary positions, with attention off in the top two layers (B12) and grouped-query
    attention — and the paper table's HMM cell of the per-position MLP (A8): three seeds, analysed where a claim reads
    their geometry."""
    from windtunnel.orchestration import reproduce

    jobs = reproduce.plan("scale", "paper")
    columns = (("main_paper_size", "transformer"), ("hmm_fixed", "transformer"), ("hmm", "mlp_pointwise"),
               ("hmm_fixed_rotary", "transformer"), ("hmm_fixed_attn_off", "transformer"),
               ("hmm_fixed_gqa", "transformer"))
    assert [j.cell.folder for j in jobs] == [f"{c}-{a}-s{s}" for c, a in columns for s in reproduce.SEEDS]
    analysed = {j.cell.column for j in jobs if j.analyze}
    assert analysed == {"main_paper_size", "hmm_fixed", "hmm_fixed_gqa"}  # B1–B11 and C3; A6; D10's note
    main, learned, mlp, rotary, attn_off, gqa = (jobs[3 * i].cell.config() for i in range(6))
    assert (mlp["steps"], mlp.get("train_set"), mlp["params"]) == (50_000, None, 2_680_000)  # the paper table's recipe
    assert (main["params"], main["model"]["n_layers"], main["model"]["n_heads"], main["steps"]) == (2_670_000, 6, 6, 6000)
    assert (learned["steps"], learned["batch_size"], learned["train_set"], learned["params"]) == (7813, 64, 10_000, 2_680_000)
    assert learned["model"]["n_layers"] == 9 and learned["model"]["pos"] == "learned"
    assert rotary["model"]["pos"] == "rotary"
    assert gqa["model"]["n_kv_heads"] == 1 and gqa["model"]["pos"] == "learned"
    assert attn_off["model"]["attn_off"] == [7, 8] and attn_off["model"]["pos"] == "learned"  # the top two of 9
    assert {k: v for k, v in attn_off.items() if k != "model"} == {k: v for k, v in learned.items() if k != "model"}
    # several workers take the longest first; where costs tie the plan's order stands
    assert [j.cell.folder for j in reproduce.schedule(jobs, tmp_path, workers=3)][:6] == [
        f"{c}-s{s}" for c in ("hmm-mlp_pointwise", "hmm_fixed-transformer") for s in reproduce.SEEDS]
    assert {k: v for k, v in rotary.items() if k != "model"} == {k: v for k, v in learned.items() if k != "model"}


def test_reproduce_hands_out_the_longest_cells_first_to_several_workers(tmp_path) -> None:
    """One worker: cheapest first (a stopped run has the most cells); several: longest first, so no core is
    left alone on a long cell at the end."""
    from windtunnel.orchestration import reproduce

    jobs = reproduce.plan("paper1")
    cost = [reproduce._cost(j, tmp_path) for j in reproduce.schedule(jobs, tmp_path, workers=1)]
    assert cost == sorted(cost) and cost[0] < cost[-1]
    cost = [reproduce._cost(j, tmp_path) for j in reproduce.schedule(jobs, tmp_path, workers=2)]
    assert cost == sorted(cost, reverse=True)
