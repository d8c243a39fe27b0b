"""Paper II's routing law against autograd; the single attention layer; the shared statistics."""

import json
import math
from pathlib import Path

import pytest
import torch

from windtunnel.evaluation import metrics
from windtunnel import models, routing, tasks
from windtunnel.routing.law import scored_cross_entropy
from windtunnel.errors import InvalidValue
from windtunnel.evaluation.stats import mean_std, paired, t975
from windtunnel.training.loop import TrainConfig, train
from windtunnel.run.runs import load


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


@pytest.mark.slow
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


# --- EM-like vs SGD -----------------------------------------------------------------------------------
from windtunnel.routing import em  # noqa: E402


def test_em_arms_start_paired_and_the_control_matches_the_em_step_norm() -> None:
    setup = em.EMSetup(length=48, steps=1, seeds=(5,))
    runs = {arm: em.train_arm(arm, 5, setup) for arm in em.ARMS}
    assert len({r["gap"][0] for r in runs.values()}) == 1  # same data, same initial weights
    assert runs["sgd_matched"]["update_norm_mean"] == pytest.approx(runs["em_like"]["update_norm_mean"], rel=1e-9)
    assert runs["sgd_fast"]["update_norm_mean"] == pytest.approx(10 * runs["sgd"]["update_norm_mean"], rel=1e-9)
    assert runs["em_like"]["update_norm_mean"] > runs["sgd"]["update_norm_mean"]


def test_alternation_moves_values_then_routing() -> None:
    setup = em.EMSetup(length=32, steps=2)
    task = setup.task()
    ep = task.sample(1, seed=1)
    torch.manual_seed(1)
    model = models.attention_layer(task)
    entries = em.value_masks(model)
    n_v = sum(int(m.sum()) for _, m in entries)
    n_r = sum(int((~m).sum()) for _, m in entries)
    assert n_v == model.blocks[0].attn.W_V.weight.numel() and n_v + n_r == sum(p.numel() for p in model.parameters())
    sq = {"value": float(n_v), "routing": float(n_r)}  # a direction of ones
    assert em._step_sizes("alternating", 0, setup)(sq) == {"value": 0.1, "routing": 0.0}
    assert em._step_sizes("alternating", 1, setup)(sq) == {"value": 0.0, "routing": 0.01}
    eta = em._step_sizes("sgd_matched", 0, setup)(sq)
    assert eta["value"] == eta["routing"] == pytest.approx(math.sqrt((0.01 * n_v + 1e-4 * n_r) / (n_v + n_r)))
    assert ep.features.shape == (1, 32, 20)


def test_deep_variant_masks_the_value_rows_and_rescales_adamw() -> None:
    """Deep variant: the value entries are exactly the W_V rows of every block's fused qkv; AdamW's
    first step has the norm lr·‖m̂/(√v̂+ε)‖ ≈ lr·√n; em_like's is larger and sgd_matched equals it."""
    setup = em.EMSetup.deep(length=40, steps=1, seeds=(3,))
    task = setup.task()
    torch.manual_seed(3)
    model = em.build_model(task, setup)
    assert model.config.n_layers == 4 and model.config.n_heads == 4 and model.config.d_model == 64
    entries = em.value_masks(model)
    n_v = sum(int(m.sum()) for _, m in entries)
    assert n_v == 4 * 64 * 64  # 4 blocks × the 64 v-rows of a [192, 64] projection
    runs = {arm: em.train_arm(arm, 3, setup) for arm in ("sgd", "em_like", "sgd_matched", "sgd_fast")}
    assert len({r["gap"][0] for r in runs.values()}) == 1
    n = sum(p.numel() for p, _ in entries)
    # Adam's first direction is sign(g) wherever |g| ≫ ε: its norm is ≈ √n (entries with g = 0 give 0)
    assert runs["sgd"]["update_norm_mean"] == pytest.approx(3e-4 * math.sqrt(n), rel=0.05)
    assert runs["sgd_matched"]["update_norm_mean"] == pytest.approx(runs["em_like"]["update_norm_mean"], rel=1e-9)
    assert runs["sgd_fast"]["update_norm_mean"] == pytest.approx(10 * runs["sgd"]["update_norm_mean"], rel=1e-9)
    assert runs["sgd"]["gap"][1] < runs["sgd"]["gap"][0]  # one AdamW step already lowers the gap
    assert setup.criterion == "loss" and runs["sgd"]["loss"][1] < runs["sgd"]["loss"][0]
    # the loss curve is the cross-entropy in bits: the Bayes gap plus the exact posterior's cross-entropy ≥ gap
    assert all(l >= g for l, g in zip(runs["sgd"]["loss"], runs["sgd"]["gap"]))


def test_authors_deep_variant_trains_with_dropout_but_measures_without_it() -> None:
    """The authors' model (LayerNorm, dropout 0.1, clip 1): the gaps are the dropout-free network's —
    the first equals the fresh model's eval-mode gap — and a seeded run repeats exactly."""
    setup = em.EMSetup.authors_deep(length=40, steps=2, seeds=(3,), eval_every=1)
    assert setup.arms == ("sgd",) and (setup.norm, setup.dropout, setup.clip, setup.pos) == ("layer", 0.1, 1.0, "none")
    task = setup.task()
    torch.manual_seed(3)
    fresh = em.build_model(task, setup).eval()
    assert isinstance(fresh.blocks[0].ln1, torch.nn.LayerNorm) and fresh.config.dropout == 0.1
    assert fresh.config.pos == "none"
    ep = task.sample(1, seed=3)
    with torch.no_grad():
        expected = metrics.bayes_gap(fresh(**ep.inputs), ep)
    a, b = em.train_arm("sgd", 3, setup), em.train_arm("sgd", 3, setup)
    assert a["gap"][0] == pytest.approx(expected, rel=1e-6)
    assert a["gap"] == b["gap"] and a["loss"] == b["loss"]
    # the training loss is the dropout forward's: at step 0 it differs from the dropout-free cross-entropy
    with torch.no_grad():
        clean = float(scored_cross_entropy(fresh(**ep.inputs), ep)) / math.log(2)
    assert a["loss"][0] != pytest.approx(clean, rel=1e-9)


@pytest.mark.slow
def test_a_killed_em_run_resumes_from_its_partial_file_and_ends_bitwise_as_an_unbroken_one(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The authors' model (dropout: the masks' random state must be carried over too), killed after its state
    at step 4 is written, resumed from that file: every curve and final number equal the unbroken run's, and
    the file is gone at the end; a file of another seed is not resumed."""
    setup = em.EMSetup.authors_deep(length=40, steps=7, seeds=(3,), eval_every=2)
    whole = em.train_arm("sgd", 3, setup)
    partial = tmp_path / "partial-sgd-s3.safetensors"
    real, calls = metrics.bayes_gap, {"n": 0}

    def dies(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 8:  # inside step 5, after the state of step 4 was written
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(metrics, "bayes_gap", dies)
    with pytest.raises(KeyboardInterrupt):
        em.train_arm("sgd", 3, setup, partial=partial)
    monkeypatch.setattr(metrics, "bayes_gap", real)
    from safetensors import safe_open

    with safe_open(str(partial), framework="pt") as f:  # tensors and a JSON header: nothing that runs code
        assert json.loads(f.metadata()["state"])["step"] == 4 and any(k.startswith("adam.m.") for k in f.keys())
    resumed = em.train_arm("sgd", 3, setup, partial=partial)
    assert not partial.exists()
    for k in ("gap", "loss", "held_out_gap", "held_out_steps", "update_norm_mean", "final_entropy_bits"):
        assert resumed[k] == whole[k], k
    # a leftover of seed 4 is ignored by seed 3's run: it starts from step 0 and still matches
    monkeypatch.setattr(metrics, "bayes_gap", dies)
    calls["n"] = 0
    other = tmp_path / "partial-sgd-s4.safetensors"
    with pytest.raises(KeyboardInterrupt):
        em.train_arm("sgd", 4, setup, partial=other)
    monkeypatch.setattr(metrics, "bayes_gap", real)
    assert em.train_arm("sgd", 3, setup, partial=other)["gap"] == whole["gap"]
    other.write_bytes(b"not a checkpoint")  # a damaged file: the run starts over, no traceback
    assert em.train_arm("sgd", 3, setup, partial=other)["gap"] == whole["gap"] and not other.exists()


def test_gradient_clipping_bounds_the_plain_gradient_step() -> None:
    """With plain gradient steps the update is lr·g; clipped at c it has norm lr·c exactly (when ‖g‖ > c)."""
    free = em.train_arm("sgd", 1, em.EMSetup(length=32, steps=1, seeds=(1,)))
    clipped = em.train_arm("sgd", 1, em.EMSetup(length=32, steps=1, seeds=(1,), clip=1e-3))
    assert free["update_norm_mean"] > 0.01 * 1e-3 * 10
    assert clipped["update_norm_mean"] == pytest.approx(0.01 * 1e-3, rel=1e-3)
    for bad, match in (({"clip": 0.0}, "clip"), ({"norm": "layer"}, "norm"), ({"dropout": 0.1}, "norm/dropout"),
                       ({"model": "deep", "pos": "sinusoid"}, "pos"),
                       ({"model": "deep", "dropout": 1.5}, "dropout")):
        with pytest.raises(InvalidValue, match=match):
            em.EMSetup(**bad).validate()


def test_loss_criterion_sets_the_threshold_from_the_loss_curve() -> None:
    setup = em.EMSetup(seeds=(1,), arms=("sgd", "em_like"), criterion="loss")

    def run(arm, gap, loss):
        return {"arm": arm, "seed": 1, "gap": gap, "loss": loss, "final_gap": gap[-1], "final_loss": loss[-1],
                "final_held_out_gap": 0.3, "final_entropy_bits": 1.0, "exact_entropy_bits": 0.9,
                "update_norm_mean": 0.5, "best_held_out_gap": 0.1, "best_held_out_step": 10}

    s = em.summarise([run("sgd", [0.5, 0.1, 0.9], [3.0, 2.0, 1.0]), run("em_like", [0.5, 2.0, 3.0], [3.0, 1.0, 0.5])],
                     setup)
    assert s["criterion"] == "loss" and s["threshold_bits"] == 1.0  # SGD's final loss, not its final gap
    assert s["arms"]["em_like"]["steps_to_threshold"] == {"1": 1}
    assert s["arms"]["em_like"]["speedup_vs_sgd"]["geometric_mean"] == pytest.approx(2.0)


def test_em_markdown_gives_each_seeds_best_held_out_step() -> None:
    """A mean of the seeds' best steps (50 and 0 → 25) is a step never evaluated: the table lists each."""
    setup = em.EMSetup(seeds=(1, 2), arms=("sgd",), criterion="loss")

    def run(seed, best_step):
        return {"arm": "sgd", "seed": seed, "gap": [0.5, 0.2], "loss": [3.0, 1.0], "final_gap": 0.2, "final_loss": 1.0,
                "final_held_out_gap": 0.3, "final_entropy_bits": 1.0, "exact_entropy_bits": 0.9,
                "update_norm_mean": 0.5, "best_held_out_gap": 0.1, "best_held_out_step": best_step}

    md = em.markdown(em.summarise([run(1, 50), run(2, 0)], setup), setup, 1.0)
    assert "(steps 50/0)" in md and "step 25" not in md


def test_em_summary_by_hand() -> None:
    setup = em.EMSetup(seeds=(1, 2), arms=("sgd", "em_like"))

    def run(arm, seed, gap):
        return {"arm": arm, "seed": seed, "gap": gap, "final_gap": gap[-1], "final_held_out_gap": gap[-1] + 0.1,
                "final_entropy_bits": 1.0, "exact_entropy_bits": 0.9, "update_norm_mean": 0.5}

    runs = [run("sgd", 1, [1.0, 0.8, 0.6, 0.4]), run("sgd", 2, [1.0, 0.9, 0.7, 0.6]),
            run("em_like", 1, [1.0, 0.5, 0.3, 0.2]), run("em_like", 2, [1.0, 0.4, 0.35, 0.3])]
    s = em.summarise(runs, setup)
    assert s["threshold_bits"] == pytest.approx(0.5)  # SGD's mean final gap
    a = s["arms"]["em_like"]
    assert a["steps_to_threshold"] == {"1": 1, "2": 1}
    assert s["arms"]["sgd"]["steps_to_threshold"] == {"1": 3, "2": None}  # seed 2 never reaches 0.5
    # seed 2: SGD censored at the budget (1000 steps): speed-up 1000/1, a lower bound
    assert s["sgd_censored_seeds"] == [2] and a["speedup_vs_sgd"]["lower_bound_seeds"] == [2]
    assert a["speedup_vs_sgd"]["per_seed"] == {"1": 3.0, "2": 1000.0}
    assert a["speedup_vs_sgd"]["geometric_mean"] == pytest.approx(math.sqrt(3000.0))
    assert a["held_out_gap_minus_sgd"]["mean"] == pytest.approx(((0.2 - 0.4) + (0.3 - 0.6)) / 2)


def test_run_em_resumes_and_writes_its_table(tmp_path: Path) -> None:
    setup = em.EMSetup(length=32, steps=6, seeds=(1, 2), eval_every=3)
    md = em.run_em(setup, tmp_path, progress=False)
    assert {"em.json", "em.md", "em.png", "runs.jsonl"} <= {p.name for p in tmp_path.iterdir()}
    text = md.read_text()
    for arm in em.ARMS:
        assert f"| {arm} |" in text
    doc = json.loads((tmp_path / "em.json").read_text())
    assert doc["summary"]["em_like_vs_sgd_matched"]["n"] >= 0 and "final_gap_difference" in doc["summary"]["em_like_vs_sgd_matched"]
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 2 * len(em.ARMS)
    em.run_em(setup, tmp_path, progress=False)  # nothing to redo
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == len(lines)
    with pytest.raises(InvalidValue, match="invalid steps"):
        em.run_em(em.EMSetup(steps=0), tmp_path)


def test_single_attention_layer_fused_and_explicit_paths_agree() -> None:
    task = tasks.make("sticky", length=40)
    torch.manual_seed(0)
    model = models.attention_layer(task, init_std=0.5).double()
    ep = _double(task.sample(3, seed=0))
    fused = model(**ep.inputs)
    explicit, cache = model.run_with_cache(**ep.inputs, names="blocks.0.attn.hook_pattern")
    assert torch.allclose(fused, explicit, atol=1e-12, rtol=0)
    assert torch.allclose(cache["blocks.0.attn.hook_pattern"].sum(-1), torch.ones(3, 1, 40, dtype=torch.float64))


# --- frame before precision ------------------------------------------------------------------------
from windtunnel.orchestration import timescales as TS  # noqa: E402


def test_timescales_of_a_known_exponential() -> None:
    steps = list(range(0, 501, 10))
    values = [2 + 3 * math.exp(-t / 50) for t in steps]
    fit = TS.fit_tau(steps, values)
    assert fit["tau"] == pytest.approx(50, rel=0.03) and fit["c"] == pytest.approx(2, abs=0.01) and fit["r2"] > 0.999
    assert TS.t90(steps, values) == 120  # 50·ln 10 = 115.1, the next checkpoint
    assert TS.t90(steps, [1.0] * len(steps)) is None
    assert TS.t90([0, 10, 20, 30], [1.0, 0.0, 1.0, 0.5]) == 30  # comes back: settles only at the end
    # a curve falling 1000-fold: 90% of the linear fall comes at once, 90% of the log fall only late
    st = [0, 10, 100, 1000]
    s = TS.seed_timescales(st, [1.0, 0.5, 0.1, 0.0], [1.0, 0.01, 0.003, 0.001])
    assert s["precision_t90"] == 10 and s["precision_log_t90"] == 1000 and s["frame_t90"] == 100


@pytest.mark.slow
def test_run_timescales_on_real_tiny_runs(tmp_path: Path) -> None:
    setup = TS.TimescaleSetup(task_params={"V": 4, "L": 4}, model={"n_layers": 1, "n_heads": 2, "d_model": 16},
                              steps=40, checkpoints=4, seeds=(0, 1), n=16)
    md = TS.run_timescales({"bijection": setup}, tmp_path, progress=False)
    doc = json.loads((tmp_path / "timescales.json").read_text())
    seeds = doc["results"]["bijection"]["seeds"]
    assert [s["seed"] for s in seeds] == [0, 1]
    assert seeds[0]["steps"] == [0, 1, 2, 5, 10, 20, 30, 40]  # every 40/4 steps, plus the log-spaced early ones
    assert seeds[0]["frame"][-1] == 0.0  # JS to the final checkpoint vanishes there
    assert "| bijection | 2 |" in md.read_text()
    assert set(seeds[0]) >= {"t90_ratio", "log_t90_ratio", "tau_ratio", "log_tau_ratio", "precision_log_t90"}
    from windtunnel.run.runs import RunDir

    stamp = (tmp_path / "runs" / "bijection-s0.curves.json").stat().st_mtime_ns
    TS.run_timescales({"bijection": setup}, tmp_path, progress=False)  # resumes: nothing redone
    assert (tmp_path / "runs" / "bijection-s0.curves.json").stat().st_mtime_ns == stamp
    assert "train_s" in RunDir(tmp_path / "runs" / "bijection-s0").timings()  # trained through the stage
    # another configuration in the same folder is refused, not answered with the old curves
    from dataclasses import replace

    from windtunnel.errors import InvalidValue

    with pytest.raises(InvalidValue, match="another configuration"):
        TS.run_timescales({"bijection": replace(setup, steps=60)}, tmp_path, progress=False)
    assert (tmp_path / "runs" / "bijection-s0.curves.json").stat().st_mtime_ns == stamp


def test_constant_lr_timescales_hold_the_rate_after_warmup(tmp_path: Path) -> None:
    """``min_lr = lr``: the run's logged learning rate is the peak at every step after warmup."""
    setup = TS.TimescaleSetup(task_params={"V": 4, "L": 4}, model={"n_layers": 1, "n_heads": 2, "d_model": 16},
                              steps=40, checkpoints=4, seeds=(0,), n=16, min_lr=2e-3)
    md = TS.run_timescales({"bijection": setup}, tmp_path, progress=False)
    assert "constant after warmup" in md.read_text()
    from windtunnel.run.runs import RunDir, read_jsonl
    run = RunDir(tmp_path / "runs" / "bijection-s0")
    assert run.read_config()["train"]["min_lr"] == 2e-3
    logged = [r["lr"] for r in read_jsonl(run.path / "metrics.jsonl") if "lr" in r and r["step"] >= 4]
    assert logged and all(lr == pytest.approx(2e-3) for lr in logged)  # warmup is min(100, steps/10) = 4
    assert "cosine" in TS.markdown({"b": {"setup": {"lr": 2e-3, "min_lr": None}, "seeds": [{"train_s": 1.0}],
                                          **{k: {"geometric_mean": None} for k in ("t90_ratio", "log_t90_ratio",
                                                                                   "tau_ratio", "log_tau_ratio")}}})


def test_no_state_is_ever_unpickled() -> None:
    """Resume state is safetensors and JSON everywhere: a file dropped into a results folder cannot run code when a
    run resumes from it.  No module of the package unpickles anything itself (the SLURM executor's submitit
    exchanges its own submission and result pickles, only in the fresh folder each submission creates)."""
    import re

    src = Path(em.__file__).resolve().parents[1]
    for path in src.rglob("*.py"):
        text = path.read_text()
        assert "weights_only=False" not in text, path
        assert not re.search(r"^\s*(import pickle|from pickle import|import dill)", text, re.M), path
        for call in re.findall(r"torch\.load\(([^)]*)\)", text):
            assert "weights_only=True" in call, (path, call)
