"""Hugging Face families in the tunnel (``--arch hf:MODEL_TYPE``), offline, on tiny random configs:
grouped-query attention (Llama), GPT-NeoX, sliding-window attention (Mistral), state-space (Mamba)."""

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from windtunnel import models, tasks  # noqa: E402
from windtunnel.cli import main  # noqa: E402
from windtunnel.errors import InvalidValue  # noqa: E402
from windtunnel.orchestration.table import run_table  # noqa: E402

FAMILIES = [
    ("hf:llama", {"num_key_value_heads": 1}),  # grouped-query: 4 query heads share one KV head
    ("hf:gpt_neox", {}),
    ("hf:mistral", {"num_key_value_heads": 2, "sliding_window": 3}),  # a window shorter than the episode
    ("hf:mamba", {}),
]


@pytest.mark.parametrize("arch, options", FAMILIES)
def test_family_is_sized_causal_and_rebuilt(arch: str, options: dict) -> None:
    task = tasks.make("bijection", V=6, L=6)
    torch.manual_seed(0)
    model = models.make(arch, task, params=30_000, n_layers=2, n_heads=4, **options)
    assert abs(model.n_params() - 30_000) <= 0.03 * 30_000
    for k, v in options.items():
        assert getattr(model.net.config, k) == v
    ep = task.sample(3, seed=0)
    logits = model(**ep.inputs)
    assert logits.shape == (3, task.seq_len, task.n_classes) and logits.dtype == torch.float32
    # causal (also checked at build): later inputs never move earlier logits
    other = ep.tokens.clone()
    other[:, 7:] = task.sample(3, seed=1).tokens[:, 7:]
    assert torch.allclose(model(other)[:, :7], logits[:, :7], atol=1e-5)
    rebuilt = models.build(json.loads(json.dumps(model.config_dict())))
    rebuilt.load_state_dict(model.state_dict())
    assert torch.equal(rebuilt(**ep.inputs), logits)


def test_sliding_window_is_in_force() -> None:
    """With a window of 2, position 6 cannot see position 0: changing it leaves logits at 6+ alone
    in a one-layer Mistral (and changes them with full attention, the control)."""
    task = tasks.make("bijection", V=6, L=6)
    ep = task.sample(2, seed=0)
    changed = ep.tokens.clone()
    changed[:, 0] = (changed[:, 0] + 1) % task.V
    for window, moves in ((2, False), (None, True)):
        torch.manual_seed(0)
        opts = {"sliding_window": window} if window else {}
        m = models.make("hf:mistral", task, n_layers=1, n_heads=2, d_model=16, **opts)
        delta = (m(changed)[:, 6:] - m(ep.tokens)[:, 6:]).abs().max().item()
        assert (delta > 1e-6) is moves, (window, delta)


def test_features_reach_the_model() -> None:
    task = tasks.make("sticky", length=10)
    model = models.make("hf:llama", task, n_layers=1, n_heads=2, d_model=16)
    ep = task.sample(2, seed=0)
    a = model(**ep.inputs)
    b = model(ep.tokens, ep.features + 1.0)
    assert a.shape == (2, 10, task.n_classes) and not torch.allclose(a, b)


def test_unknown_family_and_bad_options_are_one_line_errors(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    task = tasks.make("bijection", V=4, L=4)
    with pytest.raises(InvalidValue, match="no causal LM 'nope'"):
        models.make("hf:nope", task)
    with pytest.raises(InvalidValue):
        models.make("hf:llama", task, n_layers=1, n_heads=3, d_model=16)  # 16 is no multiple of 2·3
    assert main(["train", "--task", "bijection", "--arch", "hf:nope", "--steps", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "hf:nope" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_train_resume_eval_and_table_rows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["train", "--task", "bijection", "--V", "4", "--L", "4", "--arch", "hf:gpt_neox", "--params", "20000",
            "--out", str(out), "--no-progress"]
    assert main([*base, "--steps", "12"]) == 0
    assert main(["train", "--resume", str(out), "--steps", "20", "--no-progress"]) == 0
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_00000020"
    assert main(["eval", str(out), "--n", "32"]) == 0
    assert json.loads((out / "config.json").read_text())["model"]["arch"] == "hf:gpt_neox"

    md = run_table(preset="quick", archs=["transformer", "hf:llama", "hf:mamba"], tasks=["recall"], out=tmp_path / "t",
                   workers=2, steps=6, eval_n=32, seeds=1, params=20_000)
    cells = {c["arch"]: c for c in json.loads((tmp_path / "t" / "table.json").read_text())["cells"]}
    assert set(cells) == {"transformer", "hf:llama", "hf:mamba"}
    assert all(abs(c["params"] - 20_000) <= 600 for c in cells.values())
    assert "hf:llama" in md.read_text()
    assert (tmp_path / "t" / "runs" / "recall-hf-llama-s0" / "config.json").is_file()


@pytest.mark.parametrize("arch, options", FAMILIES)
def test_hook_names_patterns_and_patching(arch: str, options: dict) -> None:
    """Our hook names on Hugging Face layers: the residual stream chains layer to layer, attention
    patterns are causal probability rows per query head (zero beyond a sliding window), reading them
    leaves the logits alone, and a patched residual stream flows downstream."""
    task = tasks.make("bijection", V=6, L=6)
    torch.manual_seed(0)
    model = models.make(arch, task, params=30_000, n_layers=2, n_heads=4, **options).eval()
    attention = arch != "hf:mamba"
    want = [f"blocks.{l}.{n}" for l in range(2) for n in ("hook_resid_pre", "hook_resid_post")
            + (("attn.hook_pattern",) if attention else ())] + ["hook_final"]
    assert sorted(model.hook_names()) == sorted(want)
    ep = task.sample(3, seed=0)
    T = task.seq_len
    with torch.no_grad():
        plain = model(ep.tokens)
        logits, cache = model.run_with_cache(ep.tokens)
    assert torch.allclose(logits, plain, atol=1e-5)  # the eager path taken for the patterns agrees
    assert torch.equal(cache["blocks.0.hook_resid_post"], cache["blocks.1.hook_resid_pre"])
    if attention:
        window = options.get("sliding_window")
        for l in range(2):
            P = cache[f"blocks.{l}.attn.hook_pattern"]
            assert P.shape == (3, 4, T, T)  # query heads, also where key heads are shared
            assert torch.allclose(P.sum(-1), torch.ones(3, 4, T), atol=1e-5)
            assert float(P.triu(1).abs().max()) == 0.0
            if window:
                t, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
                assert float(P[..., t - j >= window].abs().max()) == 0.0
                assert float(P[..., (t - j < window) & (t >= j)].min()) > 0.0
        with pytest.raises(InvalidValue, match="read, not replaced"), model.hooks(
                [("blocks.0.attn.hook_pattern", lambda p, _: torch.zeros_like(p))]):
            model(ep.tokens)
    with torch.no_grad(), model.hooks([("blocks.1.hook_resid_post", lambda x, _: torch.zeros_like(x))]):
        patched = model(ep.tokens)
    assert not torch.allclose(patched, plain)
    assert torch.allclose(patched, patched[:, :1].expand_as(patched), atol=1e-5)  # every position sees the same 0
    final = cache["hook_final"]  # what the output head reads
    assert torch.allclose(model.net.get_output_embeddings()(final)[..., :task.n_classes], plain, atol=1e-5)
    with torch.no_grad(), model.bypass_layer(1):
        _, bypassed = model.run_with_cache(ep.tokens)
    assert torch.equal(bypassed["blocks.1.hook_resid_post"], bypassed["blocks.1.hook_resid_pre"])


@pytest.mark.slow
def test_trained_hf_model_gets_the_attention_diagnostics(tmp_path: Path) -> None:
    """``windtunnel analyze`` on a trained hf:llama run: focusing, value manifold, probes and layer
    ablation apply; the diagnostics that need our transformer's projections say why they do not."""
    out = tmp_path / "run"
    assert main(["train", "--task", "bijection", "--V", "4", "--L", "4", "--arch", "hf:llama", "--params", "20000",
                 "--steps", "30", "--out", str(out), "--no-progress"]) == 0
    assert main(["analyze", str(out), "--n", "64"]) == 0
    geometry = json.loads((out / "geometry.json").read_text())
    for name in ("key_orthogonality", "attention_focusing", "value_manifold", "probes", "layer_ablation",
                 "frame_precision"):
        assert geometry[name]["applicable"] is True, (name, geometry[name])
    keys = geometry["key_orthogonality"]
    assert keys["n_tokens"] == 4 and len(keys["layers"]) == 2 and all(len(l["heads"]) == 4 for l in keys["layers"])
    layers = geometry["attention_focusing"]["layers"]
    assert [row["layer"] for row in layers] == [0, 1] and all(len(row["heads"]) == 4 for row in layers)
    assert all(0 < row["mean_entropy_bits"] <= row["untrained_mean_entropy_bits"] + 1.0 for row in layers)
    assert all(len(point["js_by_layer"]) == 2 for point in geometry["frame_precision"]["series"])
    for name in ("head_ablation", "routing_law"):
        assert geometry[name]["applicable"] is False and geometry[name]["reason"]


@pytest.mark.parametrize("arch, options", FAMILIES[:3])
def test_unrotated_keys_are_the_key_projection_of_the_normed_stream(arch: str, options: dict) -> None:
    """``unrotated_keys`` = the layer's key projection applied to its normalised input, per *key* head
    (one shared head in the grouped-query Llama), recomputed here from the weights."""
    task = tasks.make("bijection", V=6, L=6)
    torch.manual_seed(0)
    model = models.make(arch, task, params=30_000, n_layers=2, n_heads=4, **options).eval()
    ep = task.sample(3, seed=0)
    keys = model.unrotated_keys(ep.tokens)
    _, cache = model.run_with_cache(ep.tokens, names=lambda n: n.endswith("resid_pre"))
    n_kv = options.get("num_key_value_heads", 4)
    layers = [m for m in model.net.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == 2][0]
    for l, layer in enumerate(layers):
        x = cache[f"blocks.{l}.hook_resid_pre"]
        if arch == "hf:gpt_neox":
            out = layer.attention.query_key_value(layer.input_layernorm(x))
            want = out.view(3, task.seq_len, 4, 3, -1)[:, :, :, 1]
        else:
            want = layer.self_attn.k_proj(layer.input_layernorm(x)).view(3, task.seq_len, n_kv, -1)
        assert keys[l].shape == want.shape and torch.allclose(keys[l], want, atol=1e-6)


@pytest.mark.parametrize("arch, options", FAMILIES)
@pytest.mark.slow
def test_unembed_of_the_last_layer_is_the_output_and_the_bayes_lens_reads_every_family(arch: str, options: dict) -> None:
    """``unembed`` (the family's final norm, then its head) applied to the last decoder layer's output
    gives the model's logits, so the Bayes lens is the logit lens on every family."""
    from windtunnel.geometry.bayes_lens import bayes_lens

    task = tasks.make("bijection", V=6, L=6)
    torch.manual_seed(0)
    model = models.make(arch, task, params=30_000, n_layers=2, n_heads=4, **options).eval()
    ep = task.sample(4, seed=0)
    with torch.no_grad():
        logits, cache = model.run_with_cache(**ep.inputs, names=["blocks.1.hook_resid_post"])
        assert torch.allclose(model.unembed(cache["blocks.1.hook_resid_post"]), logits, atol=1e-4)
    r = bayes_lens(model, task, episodes=ep)
    assert r["applicable"] and r["layers"] == ["embed", "L0", "L1"] and r["summary"]["final_kl_vs_output"] < 1e-4
