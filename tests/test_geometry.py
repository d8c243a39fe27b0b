"""windtunnel.geometry on hand-built models whose answers are known, and on every registered architecture."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from windtunnel import geometry as G
from windtunnel import models, tasks
from windtunnel.models.base import Block, HookPoint, ModelConfig, WindTunnelModel

from contracts import tiny_model as tiny  # an architecture's registered tiny instance (Arch.tiny), overrides on top

PNG = b"\x89PNG\r\n\x1a\n"
ARCHS = models.names()  # every registered architecture


def jsonable(result: dict) -> dict:
    return json.loads(json.dumps(result, allow_nan=False))


# --- key orthogonality ----------------------------------------------------------------------------
def _one_head(task: tasks.Task, d: int = 8) -> WindTunnelModel:
    return tiny("transformer", task, d_model=d, n_heads=1, n_layers=1)


def test_exactly_orthogonal_keys_score_zero() -> None:
    task = tasks.make("bijection", V=6, L=4)
    model = _one_head(task)
    d, V = 8, 6
    with torch.no_grad():
        model.embed.tok.weight[V : 2 * V] = torch.eye(d)[:V]  # value token V+i -> e_i
        model.blocks[0].attn.qkv.weight[d : 2 * d] = torch.eye(d)  # W_K = I
    r = G.key_orthogonality(model, task, n=32, n_null=500)
    jsonable(r)
    head = r["layers"][0]["heads"][0]
    assert head["mean_abs_cos"] < 1e-6
    assert head["p_gaussian"] == pytest.approx(1 / 501)
    assert r["null"]["gaussian_expected"] == pytest.approx(G.gaussian_abs_cos(8))
    assert r["null"]["gaussian_sampled_mean"] == pytest.approx(G.gaussian_abs_cos(8), rel=0.05)
    # parallel keys: the statistic is 1 and nothing in the Gaussian null is as large
    with torch.no_grad():
        model.embed.tok.weight[V : 2 * V] = torch.eye(d)[0]
    r = G.key_orthogonality(model, task, n=32, n_null=200)
    assert r["layers"][0]["heads"][0]["mean_abs_cos"] == pytest.approx(1.0, abs=1e-6)
    assert r["layers"][0]["heads"][0]["p_gaussian"] == pytest.approx(1.0)


def test_layer0_keys_equal_the_embedding_keys_under_rope() -> None:
    task = tasks.make("bijection", V=6, L=5)
    model = tiny("transformer", task)
    keys, present = G.token_keys(model, task.sample(32, 1), list(range(6, 12)))
    blk = model.blocks[0]
    d = model.config.d_model
    with torch.no_grad():
        direct = blk.ln1(model.embed.tok.weight[present]) @ blk.attn.qkv.weight[d : 2 * d].T
    assert torch.allclose(keys[0].transpose(0, 1).reshape(len(present), d).float(), direct, atol=1e-5)
    assert G.gaussian_abs_cos(1000) == pytest.approx(math.sqrt(2 / (math.pi * 1000)), rel=1e-3)


# --- attention ------------------------------------------------------------------------------------
def test_uniform_attention_matches_its_null() -> None:
    task = tasks.make("bijection", V=6, L=6, replacement=True)
    model = tiny("transformer", task)
    d = model.config.d_model
    with torch.no_grad():
        for b in model.blocks:
            b.attn.qkv.weight[:d] = 0.0  # q = 0: every score 0, attention uniform over the prefix
    r = G.attention_focusing(model, task, n=24)
    jsonable(r)
    assert {"value_positions", "repeat_answer"} <= set(r["regions"])
    for lay in r["layers"]:
        assert lay["mean_entropy_bits"] == pytest.approx(r["null"]["uniform_entropy_bits"], abs=1e-5)
        for reg, v in lay["mean_mass"].items():
            assert v == pytest.approx(r["null"]["uniform_mass"][reg], abs=1e-5), reg
        assert lay["mean_value_spread"] == pytest.approx(1.0, abs=1e-5)


# --- ablations ------------------------------------------------------------------------------------
def test_identical_heads_tie() -> None:
    task = tasks.make("bijection", V=4, L=4)
    model = tiny("transformer", task, n_layers=1, n_heads=2, d_model=16)
    attn = model.blocks[0].attn
    d, dh = 16, 8

    def symmetrise() -> None:
        with torch.no_grad():
            w = attn.qkv.weight.view(3, 2, dh, d)
            w[:, 1] = w[:, 0]
            o = attn.out_proj.weight.view(d, 2, dh)
            o[:, :, :] = o[:, 0:1, :]

    symmetrise()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(120):  # symmetric heads get identical gradients: they stay identical
        ep = task.sample(64, step)
        loss = nn.functional.cross_entropy(model(ep.tokens).flatten(0, 1), ep.targets.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    symmetrise()  # remove float drift
    model.eval()
    r = G.head_ablation(model, task, n=64, n_boot=200)
    jsonable(r)
    a, b = (h["entropy_mae"]["delta"] for h in r["heads"])
    assert a == pytest.approx(b, rel=1e-4, abs=1e-7)
    assert a > 0
    assert r["ratio_to_runner_up"] == pytest.approx(1.0, abs=1e-3)


def test_bypassing_an_inert_layer_changes_nothing() -> None:
    task = tasks.make("hmm", S=2, O=2, K=4)
    model = tiny("transformer", task)
    with torch.no_grad():
        model.blocks[1].attn.out_proj.weight.zero_()
        model.blocks[1].mlp.proj.weight.zero_()
    r = G.layer_ablation(model, task, n=16, n_boot=50)
    inert = r["layers"][1]
    assert inert["kl"]["delta"] == pytest.approx(0.0, abs=1e-6)
    assert inert["kl"]["fold"] == pytest.approx(1.0, abs=1e-5)
    assert inert["kl"]["p_value"] == 1.0  # identical conditions: every sign flip is as extreme
    assert r["summary"]["p_value_by_layer"][1] == 1.0
    assert r["most_damaging_layer"] == 0


# --- probes and the manifold on a residual stream that encodes the answer ------------------------
class Encoder(WindTunnelModel):
    """One identity block whose residual stream is ``[posterior, entropy] @ A + noise``."""

    def __init__(self, task: tasks.Task, d: int = 12, noise: float = 1e-4, only_entropy: bool = False,
                 token_imprint: float = 0.0):
        super().__init__(ModelConfig(arch="encoder", vocab_size=task.vocab_size, n_classes=task.n_classes))
        self.task, self.noise, self.only_entropy, self.token_imprint = task, noise, only_entropy, token_imprint
        g = torch.Generator().manual_seed(0)
        self.A = torch.randn(task.n_classes + 1, d, generator=g, dtype=torch.float64)
        # the current token's own direction in the stream (``token_imprint`` × a random vector per token)
        self.E = torch.randn(task.vocab_size, d, generator=g)
        self.blocks = nn.ModuleList([_Identity()])
        self.hook_final = HookPoint()
        self.head = nn.Linear(d, task.n_classes)
        self._finish_init()

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        post = self.task.posterior(tokens)
        ent = tasks.entropy_bits(post)[..., None]
        code = torch.cat([torch.zeros_like(post) if self.only_entropy else post, ent], -1)
        x = (code @ self.A).float() + self.token_imprint * self.E[tokens]
        x = x + self.noise * torch.randn(x.shape, generator=torch.Generator().manual_seed(int(tokens.sum())))
        x = self.hook_final(self.blocks[0](x))
        return self.head(x)


class _Identity(Block):
    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_probe_recovers_a_linearly_encoded_posterior() -> None:
    task = tasks.make("hmm", S=3, O=3, K=8)
    r = jsonable(G.probes(Encoder(task), task, n=200))
    lay = r["layers"][0]
    assert lay["posterior_kl_bits"] < 1e-3
    assert lay["posterior_r2"] > 0.999
    assert lay["entropy_r2"] > 0.999
    # the nulls do not recover it
    assert lay["posterior_kl_shuffled"] > 0.05 and lay["entropy_r2_shuffled"] < 0.2
    assert r["null"]["position_only_kl_bits"] > 0.05
    # k-means on a state that is a linear image of the posterior: clusters agree with the exact posteriors'
    c = r["clusters"]
    assert c["k"] == 3 and abs(c["null"]["ari_permuted_labels"]) < 0.05


def test_clusters_of_states_dominated_by_the_current_token() -> None:
    """A state that carries the posterior under a large imprint of the token just read clusters by token: the
    raw clusters match the current observation (ARI 1), not the state; with each token's mean removed, the
    imprint is gone and the clusters are exactly those of the same state without it.  Without the imprint the
    token does not explain the clusters, which follow the state."""
    task = tasks.make("hmm", S=3, O=3, K=8)
    c = jsonable(G.probes(Encoder(task, token_imprint=50.0), task, n=200))["clusters"]
    plain = jsonable(G.probes(Encoder(task), task, n=200))["clusters"]
    assert c["ari_current_token"] == pytest.approx(1.0)
    assert c["ari"] < 0.05 < 0.2 < plain["ari"]
    assert c["ari_token_removed"] == pytest.approx(plain["ari_token_removed"])
    assert c["ari_token_removed"] > 0.2
    assert plain["ari_current_token"] < 0.05


def test_manifold_of_a_one_dimensional_entropy_code() -> None:
    task = tasks.make("hmm", S=3, O=3, K=8)
    r = jsonable(G.value_manifold(Encoder(task, only_entropy=True), task, n=120))
    st = r["sources"]["resid"][0]
    assert st["pc1_var"] > 0.999 and st["participation_ratio"] < 1.01
    assert st["spearman_pc1_entropy"] > 0.999 and st["r2_entropy"] > 0.999
    assert not r["confounded"] and st["partial_spearman_pc1_entropy_given_position"] > 0.99
    assert st["r2_entropy_shuffled"] < 0.2
    # bijection without replacement: entropy is a function of position -> flagged, controls withheld
    bij = tasks.make("bijection", V=6, L=5)
    r = jsonable(G.value_manifold(Encoder(bij, only_entropy=True), bij, n=60))
    assert r["confounded"] and r["entropy_position_r2"] == pytest.approx(1.0)
    assert r["sources"]["resid"][0]["partial_spearman_pc1_entropy_given_position"] is None


# --- k-means and the adjusted Rand index -----------------------------------------------------------
def test_kmeans_and_ari_on_synthetic_clusters() -> None:
    g = torch.Generator().manual_seed(0)
    centres = 10 * torch.randn(5, 4, generator=g, dtype=torch.float64)
    truth = torch.arange(5).repeat_interleave(200)
    X = centres[truth] + 0.3 * torch.randn(1000, 4, generator=g, dtype=torch.float64)
    labels, _ = G.kmeans(X, 5, seed=1)
    assert G.adjusted_rand_index(labels, truth) == pytest.approx(1.0)
    assert G.adjusted_rand_index(truth, (truth + 2) % 5) == pytest.approx(1.0)  # relabelling
    rnd = torch.randint(0, 5, (1000,), generator=g)
    assert abs(G.adjusted_rand_index(rnd, truth)) < 0.02
    a = torch.tensor([0, 0, 0, 1, 1, 1])
    b = torch.tensor([0, 0, 1, 1, 2, 2])
    assert G.adjusted_rand_index(a, b) == pytest.approx(0.8 / 3.3)  # by hand (= sklearn's 0.2424)


def test_statistics_helpers() -> None:
    x = torch.tensor([3.0, 1.0, 2.0, 2.0, 5.0])
    y = torch.tensor([1.0, 0.0, 0.5, 0.7, 9.0])
    scipy = pytest.importorskip("scipy.stats")
    assert G.spearman(x, y) == pytest.approx(scipy.spearmanr(x, y).statistic)
    from windtunnel.geometry.dynamics import settle_step_first10pct

    assert settle_step_first10pct([0, 1, 2, 5], [1.0, 0.05, 0.5, 0.01]) == 5  # the old reading (tests/test_settle.py)
    assert settle_step_first10pct([0, 1, 2], [1.0, 0.05, 0.0]) == 1
    assert G.settle_step([0, 1, 2, 5], [1.0, 0.05, 0.5, 0.01]) is None  # within 0.2 decades of the end only at the end
    p = torch.tensor([[1.0, 0.0]])
    assert float(G.js_bits(p, torch.tensor([[0.0, 1.0]]))) == pytest.approx(1.0)


# --- every function on every architecture --------------------------------------------------------
ON_A_MODEL = [name for name, diag in G.DIAGNOSTICS.items() if not diag.checkpoints]
"""Every registered diagnostic that reads one model (one over checkpoints reads a run folder:
test_analyze_run_writes_json_figures_and_report)."""


@pytest.mark.parametrize("name", ON_A_MODEL)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.slow
def test_every_diagnostic_runs_on_every_architecture(arch: str, name: str, tmp_path: Path) -> None:
    """What docs/extending.md asks of a diagnostic, on every architecture: a dict ``json`` writes with finite
    numbers; "not applicable" with a reason on a model without what it declares, or on a task without what it
    reads (the reason then begins "task"); a PNG from its figure, where it has one."""
    diag = G.DIAGNOSTICS[name]
    for i, task in enumerate((tasks.make("bijection", V=5, L=6, replacement=True), tasks.make("hmm", S=2, O=2, K=4))):
        model, untrained = tiny(arch, task, 0), tiny(arch, task, 1)
        ep = task.sample(16, 3)
        kw = {**({"n_boot": 30} if diag.resamples else {}), **({"untrained": untrained} if diag.untrained else {})}
        r = jsonable(diag.compute(model, task, episodes=ep, **kw))
        applies = diag.applies(model)  # the capability each diagnostic declares
        if not applies:
            assert r.get("applicable") is False and r["reason"], (name, r)
        elif r.get("applicable", True) is False:  # the model has what it needs, the task does not
            assert r["reason"].startswith("task"), (name, r)
            applies = False
        if i == 0 and applies and diag.figure is not None:
            p = diag.figure(r, tmp_path / f"{name}.png")
            assert p.read_bytes()[:8] == PNG
        if name == "probes" and task.name == "hmm":
            assert "clusters" in r


@pytest.mark.slow
def test_analyze_run_writes_json_figures_and_report(tmp_path: Path) -> None:
    from windtunnel.training.loop import TrainConfig, train

    cfg = TrainConfig(task="bijection", task_params={"V": 5, "L": 4}, arch="transformer",
                      model={"d_model": 16, "n_layers": 2, "n_heads": 2}, steps=12, batch_size=16, eval_every=12,
                      ckpt_every=6, eval_n=16, progress=False, device="cpu", warmup=2)
    run = train(cfg, tmp_path / "run")
    from windtunnel.orchestration.stages import analyze_run

    untouched = {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.is_file()}
    doc = G.diagnose(run, n=24, n_boot=30, device="cpu")  # the analysis writes nothing: the stage does
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.is_file()} == untouched
    out = analyze_run(run, n=24, n_boot=30, device="cpu")
    assert json.loads(out.read_text())["summary"] == doc["summary"]
    doc = json.loads(out.read_text())
    assert set(G.DIAGNOSTICS) | {"summary", "meta", "interpretation"} <= set(doc)
    assert doc["meta"]["untrained_null"] == "step-0 checkpoint"
    fp = doc["frame_precision"]
    assert fp["steps"][0] == 0 and fp["steps"][-1] == 12 and fp["series"][-1]["js_mean"] == 0.0
    assert {"js_settle_step_first10pct", "error_settle_step_first10pct", "frame_before_error_first10pct",
            "kl_fold_last_interval"} <= set(fp["summary"])  # both readings of "settled" (tests/test_settle.py)
    assert fp["error_settle_step"] == G.settle_step(fp["steps"], [r["kl"] for r in fp["series"]])
    pngs = sorted(p.name for p in (run / "figures").glob("geometry_*.png"))
    assert pngs == sorted(f"geometry_{k}.png" for k, d in G.DIAGNOSTICS.items()
                          if doc[k].get("applicable", True) and d.figure is not None)
    assert doc["selection"]["applicable"] is False  # a transformer has no selective step sizes
    assert {r["claim"] for r in doc["interpretation"]} >= {"B1", "B3", "B5", "B6"}  # the readings
    assert doc["routing_law"]["summary"]["max_score_rel_error"] < 1e-4  # the law against autograd, float32
    assert len(doc["routing_law"]["heads"]) == 4
    html = (run / "report.html").read_text()
    assert "<h2>Geometry</h2>" in html and "key_orthogonality.layer0_mean_abs_cos" in html
    assert "alt='geometry_frame_precision'" in html


def test_diagnostics_read_the_tasks_anatomy_not_their_names() -> None:
    """A task registered under another name keeps its regions, hypothesis tokens and headline region."""
    import dataclasses

    from windtunnel.geometry.attention import attention_regions
    from windtunnel.geometry.keys import hypothesis_tokens
    from windtunnel.tasks.bijection import Bijection

    @dataclasses.dataclass(frozen=True)
    class Renamed(Bijection):
        name = "my_bijection"

    task = Renamed(V=5, L=6, replacement=True)
    regions = attention_regions(task, task.sample(4, 0).tokens)
    assert {"self", "value_positions", "key_positions", "repeat_key", "repeat_answer"} <= set(regions)
    assert hypothesis_tokens(task)[0] == [5, 6, 7, 8, 9]
    assert task.main_region(regions) == "repeat_answer"
    coin = tasks.make("coin")
    assert hypothesis_tokens(coin) is None and set(attention_regions(coin, coin.sample(2, 0).tokens)) == {"self"}
    r = G.key_orthogonality(tiny("transformer", coin, 0), coin, episodes=coin.sample(8, 0))
    assert r["applicable"] is False and "hypothesis tokens" in r["reason"]


def test_bayes_lens_reads_each_layer_through_the_readout() -> None:
    """The last layer's lens is the model's output; an inert layer reads the same as the one before it;
    layer 0's value is the hand-computed KL of head(norm(stream)) against the posterior."""
    from windtunnel.geometry.bayes_lens import bayes_lens
    from windtunnel.evaluation.metrics import kl_bits

    task = tasks.make("hmm", S=2, O=2, K=4)
    model = tiny("transformer", task)
    with torch.no_grad():
        model.blocks[1].attn.out_proj.weight.zero_()
        model.blocks[1].mlp.proj.weight.zero_()
    ep = task.sample(16, 3)
    r = bayes_lens(model, task, episodes=ep, untrained=tiny("transformer", task))
    assert r["layers"] == ["embed", "L0", "L1"]
    assert r["summary"]["final_kl_vs_output"] < 1e-5
    kl = r["kl_by_layer"]
    assert kl[2] == pytest.approx(kl[1], abs=1e-7)  # the inert block 1 adds nothing to the stream
    with torch.no_grad():
        _, cache = model.run_with_cache(**ep.inputs, names=["blocks.0.hook_resid_post"])
        q = torch.softmax(model.head(model.norm(cache["blocks.0.hook_resid_post"])).double(), -1)[ep.mask]
    assert kl[1] == pytest.approx(float(kl_bits(ep.posterior[ep.mask].double(), q).mean()), rel=1e-6)
    assert len(r["summary"]["kl_by_layer_untrained"]) == 3
    assert not bayes_lens(Encoder(task), task, episodes=ep)["applicable"]  # no final norm to read through
    with torch.no_grad():  # every block inert: the lens is flat, and no layer is said to form the posterior
        model.blocks[0].attn.out_proj.weight.zero_()
        model.blocks[0].mlp.proj.weight.zero_()
    s = bayes_lens(model, task, episodes=ep)["summary"]
    assert s["flat"] is True and s["formation_layer"] is None
    assert r["summary"]["flat"] is (r["kl_by_layer"][0] <= 2 * r["kl_by_layer"][-1])
    # the tuned lens of a stream equal to the output's starts at its optimum (the identity) and stays there
    tuned = r["tuned"]
    assert tuned["n_fit_episodes"] == tuned["n_held_out_episodes"] == 8
    assert tuned["kl_by_layer"][1] == pytest.approx(tuned["kl_by_layer"][2], rel=1e-5)  # L0 = L1 = the output
    assert tuned["kl_by_layer"][0] != pytest.approx(kl[0], rel=1e-3)  # the embedding's translator did move
    assert all(p.requires_grad for p in model.parameters())  # the model was frozen only while fitting


class _OneStream(nn.Module):
    """A user's model with one ``hook_resid_post`` outside any ``blocks``: a stream, not layers."""

    def __init__(self, task: tasks.Task) -> None:
        super().__init__()
        self.embed = nn.Embedding(task.vocab_size, 8)
        self.hook_resid_post = HookPoint()
        self.head = nn.Linear(8, task.n_classes)

    def hook_names(self) -> list[str]:
        return ["hook_resid_post"]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.hook_resid_post(self.embed(tokens)))


def test_per_layer_diagnostics_say_what_a_model_without_layers_lacks() -> None:
    """A residual hook outside ``blocks`` is not a layer: the per-layer diagnostics answer "not
    applicable" naming the hooks they read, instead of crashing on zero layers."""
    task = tasks.make("bijection", V=4, L=3)
    model, ep = _OneStream(task), task.sample(8, 0)
    for diag in (G.probes, G.value_manifold):
        r = diag(model, task, episodes=ep)
        assert r["applicable"] is False and "blocks.{l}.hook_resid_post" in r["reason"]


@pytest.mark.parametrize("pos", ["rotary", "alibi"])
def test_a_model_evaluated_first_can_still_be_differentiated(pos: str) -> None:
    """Evaluation runs under inference mode; the position caches it builds must not leak into the
    autograd graph of a diagnostic run on the same model afterwards (the routing law)."""
    from windtunnel.evaluation.evaluate import predict

    task = tasks.make("bijection", V=4, L=3)
    model = models.make("transformer", task, d_model=16, n_layers=1, n_heads=2, pos=pos)
    predict(model, task.sample(4, 0))
    from windtunnel.geometry.routing_law import routing_law

    assert routing_law(model, task, n=4)["summary"]["max_score_rel_error"] < 1e-4
