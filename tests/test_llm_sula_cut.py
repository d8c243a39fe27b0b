"""Paper III's value cut as the paper makes it: on the layer's values at every position, λ = 1, against two nulls
through the same code path (the no-op, λ = 0, and the same cut along a random axis).  A tiny random Llama built from
a config (no download) and a word tokenizer that knows every word of the prompts."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from windtunnel.llm import sula  # noqa: E402
from windtunnel.llm.signatures import attention_layout  # noqa: E402
from test_llm import word_tokenizer  # noqa: E402  (the word-level tokenizer the LLM tests share)

PAIR = ("dax", "lug")


def sula_vocabulary() -> list[str]:
    """Every word of every SULA prompt as the word tokenizer splits it ("calm:", "dax,"), and the bare labels."""
    return ([" ".join(sula.CARRIERS), " ".join(sula.LABEL_CANDIDATES), sula.MASK]
            + [f"{w}:" for w in (*sula.CARRIERS, sula.MASK)] + [f"{w}," for w in sula.LABEL_CANDIDATES])


@pytest.fixture(scope="module")
def tiny() -> tuple:
    items = sula.prompts(sula.SulaSetup(ks=(1, 2, 4), per_k=6), PAIR)
    tok = word_tokenizer(sula_vocabulary())
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model("llama", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    p1, vals = sula.model_posterior(model, tok, items, PAIR, [1])
    entropy = -(p1 * torch.log2(p1) + (1 - p1) * torch.log2(1 - p1))  # the model's binary entropy (bits)
    ent, rnd, _ = sula.entropy_axes(vals, entropy, seed=0)
    return model, tok, items, ent, rnd


def _run(model, tok, text: str, layer: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """All positions' logits ``[T, vocab]`` and ``layer``'s values at every position ``[T, d]`` as the model computes
    them (a reading hook registered after any edit hook, so it sees the edited values)."""
    layout = attention_layout(model)
    module, to_values = layout.value_module(layer)
    seen = {}
    h = module.register_forward_hook(lambda m, i, o: seen.__setitem__("v", to_values(o.detach())[0].reshape(o.shape[1], -1).double()))
    try:
        x = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logits = model(input_ids=x, use_cache=False).logits[0].double()
    finally:
        h.remove()
    return logits, seen["v"]


def test_the_cut_edits_the_values_of_every_position(tiny: tuple) -> None:
    """After the cut no position of the edited layer keeps a component along the axis (an edit of the final token
    alone leaves every earlier position as it was), and the earlier positions' outputs change with it."""
    model, tok, items, ent, _ = tiny
    u, mu, sd = ent[1]
    text = items[-1]["text"]  # k = 4: several positions before the final one
    logits0, v0 = _run(model, tok, text)
    with sula.value_cut(model, {1: ent[1]}):
        logits1, v1 = _run(model, tok, text)
    assert v0.shape[0] > 3
    z0, z1 = ((v0 - mu) / sd) @ u, ((v1 - mu) / sd) @ u
    assert z0[:-1].abs().min() > 1e-3  # before: every earlier position has a component along the axis ...
    assert z1.abs().max() < 1e-4  # ... after: none has, the earlier ones included
    assert (v1[:-1] - v0[:-1]).abs().max() > 1e-3  # the earlier positions' values were edited
    assert not torch.allclose(logits1[:-1], logits0[:-1], atol=1e-6)  # and what they feed changes


def test_the_no_op_leaves_the_model_as_it_was(tiny: tuple) -> None:
    """λ = 0 through the same code path (z-scored, edited, mapped back) leaves every logit within 1e-6."""
    model, tok, items, ent, _ = tiny
    for item in items[::5]:
        logits0, v0 = _run(model, tok, item["text"])
        with sula.value_cut(model, {1: ent[1]}, lam=0.0):
            logits1, v1 = _run(model, tok, item["text"])
        assert (logits1 - logits0).abs().max() < 1e-6
        assert (v1 - v0).abs().max() < 1e-6


def test_the_random_axis_is_another_direction_of_the_same_norm(tiny: tuple) -> None:
    """The random axis: unit norm like the entropy axis, orthogonal to it; its cut changes the model, differently."""
    model, tok, items, ent, rnd = tiny
    u, r = ent[1][0], rnd[1][0]
    assert float(r.norm()) == pytest.approx(float(u.norm())) == pytest.approx(1.0)
    assert abs(float(r @ u)) < 1e-12
    text = items[-1]["text"]
    logits0, _ = _run(model, tok, text)
    with sula.value_cut(model, {1: ent[1]}):
        by_ent, _ = _run(model, tok, text)
    with sula.value_cut(model, {1: rnd[1]}):
        by_rnd, v = _run(model, tok, text)
    assert not torch.allclose(by_rnd, logits0, atol=1e-6) and not torch.allclose(by_rnd, by_ent, atol=1e-6)
    mu, sd = rnd[1][1], rnd[1][2]
    assert (((v - mu) / sd) @ r).abs().max() < 1e-4  # the random axis is what it removed


def test_the_record_holds_the_cut_and_both_nulls_with_the_papers_quantity(tiny: tuple) -> None:
    """``run_sula``'s cut block: λ, every position, the entropy-axis cut, the random-axis cut and the no-op, each with
    the paper's quantity read where the edit has not fixed it; the no-op reproduces the uncut readings."""
    model, tok, _, _, _ = tiny
    doc = sula.run_sula(model, tok, sula.SulaSetup(per_k=6, n_boot=20), cut_layers=[0, 2], cut_only=True)
    cut = doc["cut"]
    assert cut["lambda"] == sula.CUT_LAMBDA == 1.0 and "every position" in cut["positions"]
    assert {"entropy_axis", "random_axis", "no_op"} <= set(cut)
    mae = doc["conditions"]["normal"]["entropy_mae"]
    noop = cut["no_op"]
    assert noop["behaviour"]["entropy_mae"] == pytest.approx(mae, abs=1e-6)
    assert noop["rho_readout_after"] == pytest.approx(cut["rho_readout_before"], abs=1e-6)
    # layer 2 is the last: nothing but the readout lies downstream of both cuts, so the paper's quantity is read there
    assert noop["paper_read_at"] == "readout" and noop["rho_paper_before"] == cut["rho_readout_before"]
    assert noop["rho_paper_after"] == pytest.approx(noop["rho_paper_before"], abs=1e-6)
    assert cut["entropy_axis"]["rho_axis_entropy_after"]["0"] in (None, pytest.approx(0.0, abs=0.5))
    assert cut["entropy_axis"]["behaviour"]["entropy_mae"] != pytest.approx(mae, abs=1e-9)
