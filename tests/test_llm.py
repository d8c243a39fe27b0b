"""Paper III's signatures, offline: tiny random GPT-NeoX, Llama (grouped-query), Mistral (sliding
window) and GPT-2 models saved to folders with a word-level tokenizer built here, read back through
the same loader and command a user runs on a real model."""

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from windtunnel.cli import main  # noqa: E402
from windtunnel.errors import InvalidValue  # noqa: E402
from windtunnel.geometry.keys import gaussian_abs_cos  # noqa: E402
from windtunnel.llm import prompt_set  # noqa: E402
from windtunnel.llm.load import load_model  # noqa: E402
from windtunnel.llm.signatures import (attention_layout, focusing, key_orthogonality, read_final_token,  # noqa: E402
                                        stratify, value_manifold)

FAMILIES = {
    "gpt_neox": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4),
    "llama": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2),
    "mistral": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=1, sliding_window=3),
    "gpt2": dict(n_embd=32, n_layer=3, n_head=4),
}


def word_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({w for t in texts for w in t.split()})
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    texts = prompt_set("mixed") + prompt_set("math") + prompt_set("code")
    tokenizer = word_tokenizer(texts)
    out = {}
    for family, kw in FAMILIES.items():
        folder = tmp_path_factory.mktemp(family)
        torch.manual_seed(0)
        cfg = transformers.AutoConfig.for_model(family, vocab_size=len(tokenizer), **kw)
        transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        out[family] = folder
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_layout_keys_values_and_attention_of_every_family(family: str, saved_models: dict[str, Path]) -> None:
    model, tok, what = load_model(str(saved_models[family]))
    assert "folder" in what
    layout = attention_layout(model)
    kv = FAMILIES[family].get("num_key_value_heads", 4)
    assert (len(layout.layers), layout.n_heads, layout.n_kv_heads, layout.head_dim) == (3, 4, kv, 8)
    # the key columns are the rows of the key projection that produce each key coordinate:
    # k = W x, so the keys of a basis vector e_i are column i of W — check against a real forward pass
    cap = {}
    layer0 = layout.layers[0]
    name = {"separate": "k_proj", "neox": "query_key_value", "gpt2": "c_attn"}[layout.family]
    h = getattr(layer0, name).register_forward_hook(lambda m, i, o: cap.__setitem__("x", i[0]) or cap.__setitem__("y", o))
    with torch.no_grad():
        model(input_ids=tok("The capital of France is", return_tensors="pt", add_special_tokens=False)["input_ids"])
    h.remove()
    x, y = cap["x"][0, -1].double(), cap["y"][0, -1].double()
    K = layout.key_columns(0)  # [n_kv, d_k, d_model]
    keys = K @ x  # [n_kv, d_k]: the key of the last token, without bias
    if layout.family == "neox":
        bias = layer0.query_key_value.bias.detach().double().view(kv, 3, 8)[:, 1]
        want = y.view(kv, 3, 8)[:, 1] - bias
    elif layout.family == "gpt2":
        want = (y[32:64] - layer0.c_attn.bias.detach().double()[32:64]).view(kv, 8)
    else:
        want = y.view(kv, 8)
    assert torch.allclose(keys, want, atol=1e-5)
    prompts = prompt_set("math")[:6]
    ft = read_final_token(model, tok, prompts, layout)
    assert ft.values.shape == (6, kv * 8) and ft.attention_entropy.shape == (6, 3, 4)
    assert (ft.next_entropy > 0).all() and (ft.next_entropy <= torch.log2(torch.tensor(float(len(tok))))).all()


def test_sliding_window_bounds_the_attention_entropy(saved_models: dict[str, Path]) -> None:
    """With a window of 3 keys, no head can spread more than log2(3) bits at the final token."""
    model, tok, _ = load_model(str(saved_models["mistral"]))
    ft = read_final_token(model, tok, prompt_set("mixed")[:5])
    assert ft.attention_entropy.max() <= torch.log2(torch.tensor(3.0)) + 1e-6
    full, tok2, _ = load_model(str(saved_models["llama"]))
    long_prompts = [p for p in prompt_set("mixed") if len(p.split()) >= 8][:5]
    assert read_final_token(full, tok2, long_prompts).attention_entropy.max() > 1.6


def test_statistics_by_hand() -> None:
    # a manifold that is one line: PC1 carries everything, and its score orders the entropies
    t = torch.arange(10, dtype=torch.float64)
    values = torch.stack([t, 2 * t, -t], 1)
    vm = value_manifold(values, entropy=t ** 2, n_boot=50)
    assert vm["pc1_share"] == pytest.approx(1.0) and vm["participation_ratio"] == pytest.approx(1.0)
    assert vm["pc1_share_null"] < 0.9  # permuting coordinates independently breaks the shared axis
    assert abs(vm["rho_pc1_entropy"]) == pytest.approx(1.0)
    att = torch.tensor([[[2.0, 2.0], [1.0, 1.0]], [[2.0, 2.0], [0.5, 0.5]]])  # [N=2, L=2, H=2]
    f = focusing(att, n_boot=50)
    assert f["entropy_by_layer"] == [2.0, 0.75] and f["reduction_first_to_last"] == pytest.approx(0.625)
    # orthonormal key columns: |cos| = 0
    class L:  # a layer with a k_proj whose rows are orthonormal
        k_proj = torch.nn.Linear(8, 8, bias=False)
        v_proj = k_proj
    with torch.no_grad():
        L.k_proj.weight.copy_(torch.eye(8))
    from windtunnel.llm.signatures import AttentionLayout
    assert key_orthogonality(AttentionLayout("separate", [L], 2, 2, 4, 8)) == [[0.0, 0.0]]
    assert gaussian_abs_cos(576) == pytest.approx((2 / (3.14159265 * 576)) ** 0.5, rel=0.01)


def test_signatures_command_end_to_end(saved_models: dict[str, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "sig.json"
    assert main(["llm", "signatures", str(saved_models["llama"]), "--prompts", "code", "--n-boot", "50",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["model"]["kv_heads"] == 2 and doc["source"]["n_prompts"] == len(prompt_set("code"))
    assert len(doc["key_orthogonality"]["by_layer_head"]) == 3 and len(doc["key_orthogonality"]["by_layer_head"][0]) == 2
    assert 0 < doc["value_manifold"]["pc1_share"] <= doc["value_manifold"]["pc1_pc2_share"] <= 1
    assert len(doc["focusing"]["entropy_by_layer"]) == 3
    printed = capsys.readouterr().out
    assert "key orthogonality" in printed and "value manifold" in printed and "focusing" in printed
    # one line and exit 2 for what a user gets wrong
    for argv in (["llm", "signatures", str(tmp_path / "missing")], ["llm", "signatures", str(saved_models["llama"]),
                                                                   "--prompts", "nope"],
                 ["llm", "signatures", str(saved_models["llama"]), "--n-boot", "0"], ["llm", "frobnicate", "x"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("windtunnel: error:") and "\n" not in err, err
    with pytest.raises(InvalidValue, match="not available"):
        load_model("certainly/not-a-cached-model")


# --- SULA ------------------------------------------------------------------------------------------
from windtunnel.llm import example_count, sula  # noqa: E402


def test_sula_prompts_carry_the_exact_noisy_label_posterior() -> None:
    setup = sula.SulaSetup(ks=(0, 1, 3), per_k=20, seed=1)
    items = sula.prompts(setup, ("dax", "wug"))
    assert [i["k"] for i in items] == [0] * 20 + [1] * 20 + [3] * 20
    for item in items:
        n1 = item["text"].count(": dax")
        n2 = item["text"].count(": wug")
        assert n1 + n2 == item["k"] and item["text"].endswith(":")
        want = 1 / (1 + 9.0 ** (n2 - n1))  # p(y = dax) ∝ 0.9^n1 0.1^n2
        assert item["p1"] == pytest.approx(want, rel=1e-12)
    assert all(i["p1"] == 0.5 for i in sula.prompts(setup, ("dax", "wug"), "shuffled"))
    assert all(i["text"].count(":") == 1 for i in sula.prompts(setup, ("dax", "wug"), "no_evidence"))


def test_k_only_rho_is_the_best_any_function_of_k_reaches() -> None:
    """The length-only null of a SULA correlation: brute force over every map of the example counts to numbers (here
    three counts and levels 0..2, 27 maps, each a weak ordering or a relabelling of one), none beats it and one
    reaches it; and where the exact entropy is a function of k (one example count per level of H), it is 1."""
    import itertools

    from windtunnel.evaluation.stats import spearman

    setup = sula.SulaSetup(ks=(0, 2, 5), per_k=12, seed=3)
    H, ks = example_count.bayes_entropy(setup)
    best = max(abs(spearman(torch.tensor([g[(0, 2, 5).index(int(k))] for k in ks], dtype=torch.float64), H) or 0.0)
               for g in itertools.product(range(3), repeat=3))
    assert example_count.k_only_rho(setup) == pytest.approx(best, abs=1e-12)
    assert example_count.k_only_rho(setup) >= abs(spearman(ks.double(), H)) - 1e-12
    assert example_count.k_only_rho(sula.SulaSetup(ks=(0, 1), per_k=8)) == pytest.approx(1.0)  # H(k=0) = 1, H(k=1) one value


def test_within_k_rho_sees_only_what_is_known_beyond_the_example_count() -> None:
    """By hand: a score equal to the entropy correlates with it within every k (1); a score that is a function of k
    alone has nothing within a k (no value); within-k ρ weighs each k by its prompts, and the groups where the entropy
    is constant (k = 0, 1) add nothing."""
    ks = torch.tensor([0, 0, 0, 2, 2, 2, 2, 4, 4, 4])
    H = torch.tensor([1.0, 1.0, 1.0, 0.1, 1.0, 0.1, 1.0, 0.0, 0.1, 1.0], dtype=torch.float64)
    assert sula.within_k_rho(H, H, ks) == pytest.approx(1.0)
    assert sula.within_k_rho(ks.double(), H, ks) is None
    x = torch.tensor([5.0, 6.0, 7.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    from windtunnel.evaluation.stats import spearman
    by_hand = (4 * spearman(x[3:7], H[3:7]) + 3 * spearman(x[7:], H[7:])) / 7
    assert sula.within_k_rho(x, H, ks) == pytest.approx(by_hand)


def test_the_exact_posteriors_state_moves_with_k_unless_the_labels_carry_nothing() -> None:
    """The exact posterior as a state: masking the carriers leaves it where the normal prompts put it (the Bayes model
    ignores carriers), shuffled labels and no evidence leave it at 1 bit on every prompt (no movement)."""
    setup = sula.SulaSetup(ks=(0, 1, 2, 4), per_k=10)
    normal = example_count.oracle_movement(setup, "normal")
    assert normal < -0.5 and example_count.oracle_movement(setup, "masked") == pytest.approx(normal)
    assert example_count.oracle_movement(setup, "shuffled") == 0.0 and example_count.oracle_movement(setup, "no_evidence") == 0.0
    H, _ = example_count.bayes_entropy(setup, "shuffled")
    assert torch.all(H == 1.0)


def test_sula_scores_by_hand() -> None:
    exact = torch.tensor([0.5, 0.9], dtype=torch.float64)
    model = torch.tensor([0.5, 0.5], dtype=torch.float64)
    s = sula.score(exact, model, torch.tensor([0, 1]), n_boot=20)
    h09 = -(0.9 * torch.log2(torch.tensor(0.9)) + 0.1 * torch.log2(torch.tensor(0.1))).item()
    assert s["entropy_mae"] == pytest.approx((1 - h09) / 2)
    assert s["kl"] == pytest.approx((1 - h09) / 2)  # KL(p ‖ uniform) = 1 − H(p)
    assert s["by_k"]["1"]["bayes_entropy"] == pytest.approx(h09)


def sula_model(folder: Path, seed: int, layers: int = 2, silent: int | None = None) -> Path:
    """A tiny random Llama whose word tokenizer knows the SULA words, saved to ``folder``.  ``silent``: a
    layer whose attention output projection is zero, so that nothing its values hold reaches the rest
    of the model; its tokenizer also knows the prompts' words as they stand ("calm:", "dax,"), so that
    the final-token values differ from prompt to prompt by more than rounding."""
    texts = prompt_set("mixed") + [" ".join(sula.CARRIERS), " ".join(sula.LABEL_CANDIDATES), sula.MASK]
    if silent is not None:
        texts += [f"{w}:" for w in (*sula.CARRIERS, sula.MASK)] + [f"{w}," for w in sula.LABEL_CANDIDATES]
    tok = word_tokenizer(texts)
    torch.manual_seed(seed)
    cfg = transformers.AutoConfig.for_model("llama", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    if silent is not None:
        with torch.no_grad():
            model.model.layers[silent].self_attn.o_proj.weight.zero_()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_an_llm_result_that_could_not_be_written_is_refused_before_the_model_is_read(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Minutes of forward passes must not end on an --out that cannot be written: an --out under a file (or in a
    folder that is not writable) is refused in one line before the model is even loaded, and nothing is created."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for action in ("sula", "signatures"):
        capsys.readouterr()
        assert main(["llm", action, str(tmp_path / "no-model-here"), "--out", str(blocker / "deep" / "x.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "invalid out" in err and "no-model-here" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.slow
def test_sula_end_to_end_with_the_cut(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = sula_model(tmp_path / "llama", 0)
    out = tmp_path / "sula.json"
    assert main(["llm", "sula", str(folder), "--per-k", "6", "--n-boot", "30", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["conditions"]) == {"normal", "remap", "shuffled", "no_evidence"}
    assert doc["labels"] != doc["remap_labels"]
    assert doc["cut"]["applicable"] and doc["cut"]["layers"] == [1]
    for name in ("entropy_axis", "random_axis"):
        assert 0 <= doc["cut"][name]["behaviour"]["entropy_mae"] <= 1
    # the no-evidence control's exact posterior is uniform: its KL is 1 − H(model)
    assert doc["conditions"]["no_evidence"]["by_k"]["0"]["bayes_entropy"] == pytest.approx(1.0)
    assert "SULA" in capsys.readouterr().out
    assert set(doc["geometry"]["pc1_vs_bayes_entropy_within_k"]) == {"rho", "ci"}
    model, tk, _ = load_model(str(folder))
    items = sula.prompts(sula.SulaSetup(ks=(2,), per_k=5), ("dax", "lug"))
    p1, vals = sula.model_posterior(model, tk, items, ("dax", "lug"), [1])
    ent, rnd, _ = sula.entropy_axes(vals, torch.rand(5, dtype=torch.float64))
    with sula.value_cut(model, {1: ent[1]}):
        _, cut_vals = sula.model_posterior(model, tk, items, ("dax", "lug"), [1])
    u, mu, sd = ent[1]
    assert (((cut_vals[1] - mu) / sd) @ u).abs().max() < 1e-5  # the axis is gone from the values
    assert abs(float(rnd[1][0] @ u)) < 1e-12 and float(rnd[1][0].norm()) == pytest.approx(1.0)
    # axis-only projection keeps exactly the component along an axis; a shift moves the values along it
    d = vals[1].shape[1]
    w = torch.randn(d, dtype=torch.float64)
    axis = (w / w.norm(), torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64))
    with sula.value_edit(model, {1: axis}, sula.axis_only_edit):
        _, only = sula.model_posterior(model, tk, items, ("dax", "lug"), [1])
    assert torch.allclose(only[1], (vals[1] @ axis[0])[:, None] * axis[0][None], atol=1e-5)
    with sula.value_edit(model, {1: axis}, {1: lambda z, u: z + 0.5 * u}):
        _, moved = sula.model_posterior(model, tk, items, ("dax", "lug"), [1])
    assert torch.allclose(moved[1] - vals[1], 0.5 * axis[0].expand_as(vals[1]), atol=1e-5)
    # the SULA geometry: one shared basis, movement with k for every condition, the interventions
    g = doc["geometry"]
    assert g["layer"] == 1 and set(g["movement"]) == {"normal", "shuffled", "masked"}
    assert set(g["movement"]["normal"]["pc1_by_k"]) == {"0", "1", "2", "4", "8"}
    assert -1 <= g["pc1_vs_bayes_entropy"]["rho"] <= 1 and len(g["pc1_vs_bayes_entropy"]["ci"]) == 2
    assert {"entropy_axis", "random_axis"} <= set(g["axis_only"]) and {"plus", "minus"} <= set(g["shift"])
    masked = sula.prompts(sula.SulaSetup(ks=(4,), per_k=3), ("dax", "lug"), "masked")
    assert all(not any(w in m["text"] for w in sula.CARRIERS) and m["text"].count(sula.MASK) == 5 for m in masked)
    assert [m["p1"] for m in masked] == [i["p1"] for i in sula.prompts(sula.SulaSetup(ks=(4,), per_k=3), ("dax", "lug"))]


def test_stratify_takes_equal_shares_of_each_entropy_quintile() -> None:
    from windtunnel.llm.signatures import stratify

    entropy = torch.arange(50, dtype=torch.float64).flip(0)  # prompt i has entropy 49 - i
    idx = stratify(entropy, 3)
    assert len(idx) == 15
    quintile_of = {int(i): (49 - int(i)) // 10 for i in idx}  # entropy rank / 10
    assert sorted(list(quintile_of.values()).count(q) for q in range(5)) == [3] * 5
    with pytest.raises(InvalidValue, match="per_quintile"):
        stratify(entropy, 11)


# --- the cross-model basis (D24) and the BOS rule ----------------------------------------------------------
from windtunnel.llm.cross_model import global_pca  # noqa: E402
from windtunnel.llm.load import BOS_ATTR, encode  # noqa: E402


def test_global_pca_by_hand() -> None:
    g = torch.Generator().manual_seed(0)
    H = torch.rand(200, generator=g, dtype=torch.float64)
    a = H + 0.3 * torch.randn(200, generator=g, dtype=torch.float64)
    b = -5.0 * H + 2.0 * torch.randn(200, generator=g, dtype=torch.float64)
    out = global_pca({"a": a[:, None], "b": b[:, None]}, H, n_boot=50, n_null=50)
    # two standardised columns with correlation r: PC1 carries (1 + |r|) / 2, loads 1/√2 on each
    r = abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1]))
    assert out["global_pc1_share"] == pytest.approx((1 + r) / 2, abs=1e-12)
    assert out["block_share"]["a"] == pytest.approx(0.5, abs=1e-12) == out["block_share"]["b"]
    assert out["agreement"]["a|b"] > 0.3 and out["rho_global_pc1_bayes_entropy"]["rho"] > 0.5
    # misaligned, the two columns are uncorrelated: PC1 falls to about half the variance
    assert out["misaligned_null"]["global_pc1_share_mean"] == pytest.approx(0.5, abs=0.05)
    assert out["global_pc1_share"] > out["misaligned_null"]["global_pc1_share_q95"]
    # per-model standardisation: a model's units and width do not decide the axes
    wide = torch.cat([b[:, None] * 1e3, torch.randn(200, 3, generator=g, dtype=torch.float64)], 1)
    scaled = global_pca({"a": a[:, None], "b": b[:, None] * 1e3}, H, n_boot=10, n_null=5)
    assert scaled["global_pc1_share"] == pytest.approx(out["global_pc1_share"], abs=1e-12)
    assert sum(global_pca({"a": a[:, None], "b": wide}, H, n_boot=10, n_null=5)["block_share"].values()) == \
        pytest.approx(1.0)
    with pytest.raises(InvalidValue, match="at least 2"):
        global_pca({"a": a[:, None]}, H)
    with pytest.raises(InvalidValue, match="one row per prompt"):
        global_pca({"a": a[:, None], "b": b[:50, None]}, H)


def test_encode_prepends_bos_only_where_the_loader_found_the_model_expects_it() -> None:
    tok = word_tokenizer(["hello world"])
    plain = encode(tok, "hello world")
    assert plain.shape == (1, 2)
    setattr(tok, BOS_ATTR, 0)
    assert encode(tok, "hello world").tolist() == [[0] + plain[0].tolist()]


def test_llm_global_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    texts = [" ".join(sula.CARRIERS), " ".join(sula.LABEL_CANDIDATES)]
    tok = word_tokenizer(texts)
    folders = []
    for i, (family, kv) in enumerate((("llama", 2), ("mistral", 1))):
        torch.manual_seed(i)
        cfg = transformers.AutoConfig.for_model(family, vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=kv)
        folder = tmp_path / family
        transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
        tok.save_pretrained(folder)
        folders.append(str(folder))
    out = tmp_path / "global.json"
    assert main(["llm", "global", *folders, "--per-k", "6", "--n-boot", "20", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["models"] == ["llama", "mistral"] and doc["prompts"] == 30
    assert doc["widths"] == {"llama": 2 * 8, "mistral": 1 * 8}  # key/value heads × head width, last layer
    assert sum(doc["block_share"].values()) == pytest.approx(1.0)
    assert 0 < doc["global_pc1_share"] <= 1 and set(doc["entropy_mae"]) == {"llama", "mistral"}
    assert "global PCA" in capsys.readouterr().out
    for argv in (["llm", "global", folders[0]], ["llm", "signatures", *folders],
                 ["llm", "global", folders[0], folders[0]], ["llm", "global", *folders, "--out", str(tmp_path / "no" / "g.json")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("windtunnel: error:") and "\n" not in err, err


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gpt2"])
def test_value_cut_on_every_attention_layout(family: str, tmp_path: Path) -> None:
    """The cut edits the values of every position, on separate and on fused (GPT-NeoX, GPT-2)
    projections: afterwards the entropy axis is gone from the values read, the keys of the same
    module are untouched, and the model's output changes."""
    items = sula.prompts(sula.SulaSetup(ks=(1, 4), per_k=4), ("dax", "lug"))
    tok = word_tokenizer([i["text"] for i in items] + ["dax lug"])  # every word of the prompts in the vocabulary
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(family, vocab_size=len(tok), **{**FAMILIES[family]})
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    layout = attention_layout(model)
    idx_v, idx_k = layout.indices("v"), layout.indices("k")
    if layout.family != "separate":  # one fused module: the value and key slices must not overlap
        assert len(set(idx_v.tolist()) | set(idx_k.tolist())) == 2 * len(idx_v)
    p1, vals = sula.model_posterior(model, tok, items, ("dax", "lug"), [1])
    ent, _, _ = sula.entropy_axes(vals, torch.rand(len(items), dtype=torch.float64))
    keys: dict[str, list[torch.Tensor]] = {"before": [], "after": []}
    module, to_keys = layout.key_module(1)
    phase = ["before"]
    h = module.register_forward_hook(lambda m, i, o: keys[phase[0]].append(to_keys(o.detach())[0, -1].clone()))
    try:
        sula.model_posterior(model, tok, items, ("dax", "lug"))
        phase[0] = "after"
        with sula.value_cut(model, {1: ent[1]}):
            q, cut_vals = sula.model_posterior(model, tok, items, ("dax", "lug"), [1])
    finally:
        h.remove()
    u, mu, sd = ent[1]
    assert (((cut_vals[1] - mu) / sd) @ u).abs().max() < 1e-5
    assert all(torch.equal(a, b) for a, b in zip(keys["before"], keys["after"]))
    assert not torch.allclose(q, p1)


@pytest.mark.slow
def test_docs_pool_is_real_documentation_text_cut_at_word_boundaries() -> None:
    """The shipped ``docs`` set: 1,200 distinct openings of prose sentences of Python's own
    documentation; on the Python it was built with, the builder regenerates it exactly."""
    import sys

    from windtunnel.llm import pool

    shipped = prompt_set("docs")
    assert len(shipped) == len(set(shipped)) == 1200 and all(len(p.split()) >= 3 for p in shipped)
    sentences = pool.documentation_sentences()
    assert len(sentences) >= 1200
    if sys.version_info[:2] == (3, 11):
        assert pool.docs_pool() == shipped
        by_start: dict[str, list[str]] = {}
        for s in sentences:
            by_start.setdefault(s.split()[0], []).append(s)
        assert all(any(s.startswith(p) for s in by_start[p.split()[0]]) for p in shipped)  # openings of sentences
    assert all(not any(c in p for c in "{}[]=<>`") for p in shipped)
    # Paper III's sampling: 15 from each entropy quintile of the pool
    entropy = torch.linspace(0, 5, len(shipped))
    picked = stratify(entropy, 15)
    assert len(picked) == 75 and all(((picked >= 240 * q) & (picked < 240 * (q + 1))).sum() == 15 for q in range(5))


@pytest.mark.slow
def test_sula_cuts_each_layer_alone_as_the_paper_does(tmp_path: Path) -> None:
    folder = sula_model(tmp_path / "llama", 1)
    out = tmp_path / "sula.json"
    assert main(["llm", "sula", str(folder), "--per-k", "6", "--n-boot", "30", "--layers", "0", "1", "--out", str(out)]) == 0
    cut = json.loads(out.read_text())["cut"]
    assert all(set(cut[name]["alone"]) == {"0", "1"} for name in ("entropy_axis", "random_axis", "no_op"))
    # recomputed by hand: the axes from the normal prompts, then layer 1's entropy axis cut alone
    model, tk, _ = load_model(str(folder))
    setup = sula.SulaSetup(per_k=6, n_boot=30)
    pair = tuple(json.loads(out.read_text())["labels"])
    base = sula.prompts(setup, pair)
    exact = torch.tensor([p["p1"] for p in base], dtype=torch.float64)
    ks = torch.tensor([p["k"] for p in base])
    p1, values = sula.model_posterior(model, tk, base, pair, [0, 1])
    ent, _, _ = sula.entropy_axes(values, sula._binary_entropy(p1), setup.seed)
    with sula.value_cut(model, {1: ent[1]}):
        q, _ = sula.model_posterior(model, tk, base, pair, [1])
    alone = cut["entropy_axis"]["alone"]["1"]["behaviour"]
    assert alone["entropy_mae"] == pytest.approx(sula.score(exact, q, ks, 30)["entropy_mae"], abs=1e-9)
    assert alone["entropy_mae"] != cut["entropy_axis"]["behaviour"]["entropy_mae"]  # both layers cut is another edit
    # --cut-only: the same normal scores and the same cut at the layers together, nothing else
    only = tmp_path / "cut-only.json"
    assert main(["llm", "sula", str(folder), "--per-k", "6", "--n-boot", "30", "--layers", "0", "1", "--cut-only",
                 "--out", str(only)]) == 0
    full, part = json.loads(out.read_text()), json.loads(only.read_text())
    assert set(part["conditions"]) == {"normal"} and "geometry" not in part
    assert all("alone" not in part["cut"][name] for name in ("entropy_axis", "random_axis", "no_op"))
    assert part["conditions"]["normal"] == full["conditions"]["normal"]
    for name in ("entropy_axis", "random_axis", "no_op"):
        assert part["cut"][name] == {k: v for k, v in full["cut"][name].items() if k != "alone"}


@pytest.mark.slow
def test_sula_cut_is_read_downstream_not_on_the_values_it_projected(tmp_path: Path) -> None:
    """Claim D19's reading after the cut.  The cut layer's own values, read after the edit, have no
    component along u whatever the cut does to the model, so ρ there is rounding residue, not a
    measurement.  On a model whose layer 1 reaches nothing downstream (its attention output projection
    is zero), cutting layer 0 provably changes nothing the model computes: the readings after the cut —
    at the readout the output head reads and at the values of the later layers — must equal the
    readings before."""
    folder = sula_model(tmp_path / "llama", 0, layers=4, silent=1)
    out = tmp_path / "sula.json"
    assert main(["llm", "sula", str(folder), "--per-k", "6", "--n-boot", "30", "--layers", "1", "3",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    cut = doc["cut"]
    assert set(cut["rho_values_before"]) == {"0", "1", "2", "3"} and abs(cut["rho_readout_before"]) > 0.1
    assert cut["rho_values_before"]["1"] == pytest.approx(cut["rho_axis_entropy_before"]["1"])
    for name in ("entropy_axis", "random_axis"):  # the two layers cut together: layer 2 lies between them
        assert set(cut[name]["rho_downstream_after"]) == {"2"}
    # the cut at layer 1 is inert, recomputed through the same code path (the axes from the normal prompts) ...
    model, tk, _ = load_model(str(folder))
    setup = sula.SulaSetup(per_k=6, n_boot=30)
    pair = tuple(doc["labels"])
    base = sula.prompts(setup, pair)
    p1, values = sula.model_posterior(model, tk, base, pair, [1, 2, 3])
    ent, _, rho = sula.entropy_axes({1: values[1], 3: values[3]}, sula._binary_entropy(p1), setup.seed)
    assert rho[1] == pytest.approx(cut["rho_axis_entropy_before"]["1"])
    with sula.value_cut(model, {1: ent[1]}):
        q, after = sula.model_posterior(model, tk, base, pair, [1, 2, 3])
    assert torch.equal(q, p1) and torch.equal(after[2], values[2]) and torch.equal(after[3], values[3])
    assert sula.project(after[1], ent[1]).abs().max() < 1e-5  # ... yet the cut layer's own values lost the axis
    # so the readings after it equal those before, at every point downstream, for either axis
    for name in ("entropy_axis", "random_axis", "no_op"):
        a = cut[name]["alone"]["1"]
        assert a["behaviour"]["entropy_mae"] == pytest.approx(doc["conditions"]["normal"]["entropy_mae"], abs=1e-12)
        assert set(a["rho_downstream_after"]) == {"2", "3"}
        for m, r in a["rho_downstream_after"].items():
            assert r == pytest.approx(cut["rho_values_before"][m], abs=1e-9), (name, m)
        assert a["rho_readout_after"] == pytest.approx(cut["rho_readout_before"], abs=1e-9), name
    # layer 3 is the last: only the readout lies downstream of it
    assert cut["entropy_axis"]["alone"]["3"]["rho_downstream_after"] == {}
    # the paper's quantity is read at layer 3's values for the cut at layer 1 (inert here: as before), and at the
    # readout for the cut at the last layer
    one = cut["entropy_axis"]["alone"]["1"]
    assert one["paper_read_at"] == "values of layer 3" and one["rho_paper_before"] == pytest.approx(cut["rho_values_before"]["3"])
    assert one["rho_paper_after"] == pytest.approx(one["rho_paper_before"], abs=1e-9)
    assert cut["entropy_axis"]["alone"]["3"]["paper_read_at"] == "readout"


@pytest.mark.slow
def test_sula_cuts_the_papers_layers_at_the_same_relative_depth(tmp_path: Path) -> None:
    """Paper III cuts layers of its 24-layer Pythia-410M (the Bayesian layers 12 and 23; the five layers 8, 12,
    16, 20, 23); on a model of L layers each becomes the layer at the same relative depth, round(l·(L−1)/23),
    and the artifact says which layer stands for which."""
    assert sula.paper_layers(sula.PAPER_MULTI_LAYERS, 30) == {8: 10, 12: 15, 16: 20, 20: 25, 23: 29}  # SmolLM2
    assert sula.paper_layers(sula.PAPER_MULTI_LAYERS, 18) == {8: 6, 12: 9, 16: 12, 20: 15, 23: 17}  # Gemma-3-270M
    assert sula.paper_layers(list(range(24)), 24) == {l: l for l in range(24)}  # the paper's own depth: unchanged
    with pytest.raises(InvalidValue):
        sula.paper_layers([24], 30)
    folder = sula_model(tmp_path / "llama", 0, layers=12)
    five = tmp_path / "five.json"
    assert main(["llm", "sula", str(folder), "--per-k", "2", "--n-boot", "10", "--paper-layers", "8", "12", "16", "20",
                 "23", "--cut-only", "--out", str(five)]) == 0
    doc = json.loads(five.read_text())
    # 8·11/23 = 3.83, 12·11/23 = 5.74, 16·11/23 = 7.65, 20·11/23 = 9.57, 23·11/23 = 11
    assert doc["cut"]["layers"] == [4, 6, 8, 10, 11]
    m = doc["cut"]["layer_map"]
    assert m["layers"] == {"8": 4, "12": 6, "16": 8, "20": 10, "23": 11}
    assert (m["paper_depth"], m["model_depth"]) == (24, 12)
    assert doc["source"]["arguments"]["paper_layers"] == [8, 12, 16, 20, 23]
    # with no layers named: the paper's two Bayesian layers, mapped the same way
    two = tmp_path / "two.json"
    assert main(["llm", "sula", str(folder), "--per-k", "2", "--n-boot", "10", "--cut-only", "--out", str(two)]) == 0
    cut = json.loads(two.read_text())["cut"]
    assert cut["layers"] == [6, 11] and cut["layer_map"]["layers"] == {"12": 6, "23": 11}
    # --layers names this model's own layers: nothing is mapped
    own = tmp_path / "own.json"
    assert main(["llm", "sula", str(folder), "--per-k", "2", "--n-boot", "10", "--layers", "2", "5", "--cut-only",
                 "--out", str(own)]) == 0
    cut = json.loads(own.read_text())["cut"]
    assert cut["layers"] == [2, 5] and cut["layer_map"] is None
    # one or the other
    assert main(["llm", "sula", str(folder), "--layers", "2", "--paper-layers", "8", "--out", str(tmp_path / "x.json")]) != 0
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_sula_axis_only_and_shift_are_read_downstream_and_per_layer(tmp_path: Path) -> None:
    """Claims D21 and D22.  Paper III projects and shifts "each of two Bayesian layers" on its own, and its
    axis-only statement is about the axis–entropy correlation.  On the projected values themselves that
    correlation is fixed by the projection (kept for the entropy axis, gone for a random one orthogonal to
    it) whatever the model does, so it is read at the readout, downstream.  On a model whose layer 1 reaches
    nothing downstream (its attention output projection is zero), projecting or shifting layer 1 alone
    changes nothing the model computes: every reading after it equals the reading before, and neither
    claim can agree on that layer."""
    from windtunnel import claims
    from windtunnel.claims.evidence import Evidence

    folder = sula_model(tmp_path / "llama", 0, layers=4, silent=1)
    results = tmp_path / "results"
    out = results / "llm" / "smollm2-135m-instruct-q4-sula.json"  # the file the claims read
    assert main(["llm", "sula", str(folder), "--per-k", "6", "--n-boot", "30", "--layers", "1", "3",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    a, sh = doc["geometry"]["axis_only"], doc["geometry"]["shift"]
    assert a["rho_readout_before"] == pytest.approx(doc["cut"]["rho_readout_before"], abs=1e-12)
    assert set(a["one_at_a_time"]) == set(sh["one_at_a_time"]) == {"1", "3"}
    assert "entropy_axis" not in a and "plus" not in sh  # the paper edits each layer alone: no joint edit is made
    inert = a["one_at_a_time"]["1"]
    for name in ("entropy_axis", "random_axis"):
        r = inert[name]
        assert r["rho_readout_after"] == pytest.approx(a["rho_readout_before"], abs=1e-9), name
        assert r["rho_model_bayes_entropy"] == pytest.approx(a["rho_model_bayes_entropy_before"], abs=1e-9), name
        assert r["entropy_mae"] == pytest.approx(doc["conditions"]["normal"]["entropy_mae"], abs=1e-12), name
    # on the projected values the random axis "destroys" the correlation by construction, the entropy axis keeps it
    assert inert["random_axis"]["rho_axis_entropy_after"]["1"] in (None, pytest.approx(0.0, abs=0.35))
    assert inert["entropy_axis"]["rho_axis_entropy_after"]["1"] == pytest.approx(a["rho_axis_entropy_before"]["1"],
                                                                                 abs=1e-6)
    for key in ("plus", "minus"):
        assert sh["one_at_a_time"]["1"][key]["mean_model_entropy"] == pytest.approx(sh["mean_model_entropy_before"],
                                                                                    abs=1e-12)
    # layer 3 alone, recomputed through the same code path: the axis from the normal prompts, the projection
    model, tk, _ = load_model(str(folder))
    setup = sula.SulaSetup(per_k=6, n_boot=30)
    pair = tuple(doc["labels"])
    base = sula.prompts(setup, pair)
    exact = torch.tensor([p["p1"] for p in base], dtype=torch.float64)
    p1, values = sula.model_posterior(model, tk, base, pair, [1, 3])
    ent, _, _ = sula.entropy_axes(values, sula._binary_entropy(p1), setup.seed)
    with sula.value_edit(model, {3: ent[3]}, sula.axis_only_edit):
        q, _ = sula.model_posterior(model, tk, base, pair)
    Hq, Hb = sula._binary_entropy(q), sula._binary_entropy(exact)
    alone = a["one_at_a_time"]["3"]["entropy_axis"]
    assert alone["entropy_mae"] == pytest.approx(float((Hq - Hb).abs().mean()), abs=1e-9)
    assert alone["rho_model_bayes_entropy"] == pytest.approx(sula._spearman(Hq, Hb), abs=1e-9)
    # the verdicts: judged on each layer alone; the inert layer fails both rules, so neither claim agrees
    d21 = claims.CLAIMS["D21"].assess(Evidence(results))
    assert d21.kind == claims.DISAGREE and "L1 fails" in d21.why and "L3" in d21.ours_text
    # the paper's quantity: at layer 3's values for layer 1 projected alone (inert: unchanged), at the readout for layer 3
    assert "L1 projected, read at L3 values" in d21.ours_text and "L3 projected, read at readout" in d21.ours_text
    assert inert["entropy_axis"]["rho_paper_after"] == pytest.approx(inert["entropy_axis"]["rho_paper_before"], abs=1e-9)
    d22 = claims.CLAIMS["D22"].assess(Evidence(results))
    assert d22.kind == claims.DISAGREE and "L1 fails" in d22.why and "L3" in d22.ours_text


def test_gguf_dequantisation_bar_is_silenced_while_loading_and_restored_after(capsys: pytest.CaptureFixture) -> None:
    gguf_utils = pytest.importorskip("transformers.modeling_gguf_pytorch_utils")
    from windtunnel.llm.load import _quiet_gguf

    bar = gguf_utils.tqdm
    with _quiet_gguf():
        assert list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...")) == [0, 1, 2]
    assert "de-quantizing" not in capsys.readouterr().err
    assert gguf_utils.tqdm is bar  # restored: nothing else in the process loses its bar
