r"""SULA: Paper III's two-label in-context task, posed to a trained language model as text.

A latent label :math:`y \in \{L_1, L_2\}` (uniform prior); ``k`` examples ``"word: label"`` whose
labels equal ``y`` with probability :math:`1-\varepsilon` (``ε = 0.1``), then a test word:
``"bright: dax, gloomy: dax, calm: wug, quiet:"``.  The carrier words are sentiment words, which
the Bayes model ignores; the exact posterior is the ``coin`` task's noisy-label posterior
(``tasks.coin``, ``labels="noisy"``):
:math:`p(y = L_1 \mid D) = \sigma\bigl((n_1 - n_2)\log\frac{1-\varepsilon}{\varepsilon}\bigr)`.
The model's posterior is the probability of the two label tokens (with their leading space) at the
final position, renormalised; entropies are binary (at most 1 bit).

Reported, with bootstrap intervals over prompts: entropy MAE and KL(exact ‖ model) in bits, per
``k`` and overall.  Controls: **remap** (another pair of nonsense labels: the effect should
survive), **shuffled** (labels drawn independently of ``y``: the exact posterior of that process is
uniform, 1 bit), **no evidence** (only the test word: 1 bit).

**The entropy-axis cut** (Paper III §4.5–4.6, §7.1): at chosen layers, ``u`` = PC1 of the z-scored
final-token value vectors over the prompts (its sign set so that the projection grows with the
model's entropy); the cut replaces the final token's values ``v`` by ``v − (v·u)u`` in z-scored
coordinates.  A random unit axis orthogonal to ``u`` is the control.  Behaviour (MAE, KL) is reported
before and after, for the layers cut together and (``one_at_a_time``, as the paper cuts) for each
layer cut alone.  The edit is made where the values are computed, on every attention layout the
signatures read (separate ``v_proj``; the value slice of GPT-NeoX's and GPT-2's fused projections).

**Where the geometry after a cut is read.**  Paper III §7.1 asks whether removing ``u`` at a layer
removes the entropy signal the model goes on to use, and concludes that the axis is "a privileged
readout ... rather than a bottleneck"; a correlation read on the very vector the cut just projected
cannot answer that: ``z·u`` there is zero up to rounding for the entropy axis and exactly unchanged
for the random axis (orthogonal to ``u``), whatever the model does.  The statistic after a cut is
therefore read where the cut can only act through the model's own computation, each against the
axis fitted (z-scoring included) on the uncut run and the model's entropy after the cut:

* ``rho_readout_after`` — at the **readout**: the final token's hidden state that the output head
  reads (after the final norm), downstream of every layer's values; its entropy axis is PC1 of those
  states over the uncut prompts, oriented like ``u`` (``rho_readout_before``).  This is the one
  reading defined for every cut layer, the last included, and the one to compare a cut with.
* ``rho_downstream_after`` — at the values of every layer after the first cut layer and not itself
  cut, each against its own uncut entropy axis (``rho_values_before``: every layer, uncut).
* ``rho_axis_entropy_after`` — kept under its old name and meaning: the cut layer's own values
  *after* the edit (the edit hook runs before any reading hook on that module).  It only checks that
  the edit was made (≈ 0 by construction for the entropy axis, ≈ before for the random one); it is
  not a measurement of the cut's effect.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from ..errors import InvalidValue
from ..stats import finite_ci, json_safe, resample_weights
from .load import encode
from .signatures import AttentionLayout, _entropy_bits, _spearman, attention_layout

CARRIERS = ("bright", "lovely", "happy", "warm", "gentle", "brave", "kind", "calm", "joyful", "sunny", "sweet", "proud",
            "gloomy", "awful", "angry", "cold", "cruel", "bitter", "sad", "dull", "harsh", "grim", "nasty", "weary")
# the paper's eight nonsense labels first; then short non-words that are single tokens in other
# tokenizers (SmolLM2 splits every one of the paper's eight; pim, dop, lem, lun are whole there)
MASK = "[MASK]"
"""What replaces the carrier words in the evidence-ablation control (Paper III §5.2)."""
LABEL_CANDIDATES = ("dax", "lug", "mip", "zorb", "wug", "kep", "tuv", "gax", "pim", "dop", "lem", "lun", "fep", "blick",
                    "tov", "rax")


@dataclass(frozen=True)
class SulaSetup:
    """The task as posed: example counts, prompts per count, label noise, seed."""

    ks: tuple[int, ...] = (0, 1, 2, 4, 8)
    per_k: int = 50
    noise: float = 0.1
    seed: int = 0
    n_boot: int = 1000


def single_token_labels(tokenizer: Any, n: int = 4) -> list[str]:
    """The first ``n`` nonsense words that are one token with a leading space in this tokenizer."""
    out = [w for w in LABEL_CANDIDATES if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1]
    if len(out) < n:
        raise InvalidValue(f"invalid tokenizer: only {len(out)} of the nonsense labels {', '.join(LABEL_CANDIDATES)} "
                           f"are single tokens; SULA needs {n}")
    return out[:n]


def prompts(setup: SulaSetup, labels: tuple[str, str], condition: str = "normal") -> list[dict[str, Any]]:
    """Prompts with their exact posterior ``p1 = p(y = labels[0] | examples)``.

    ``condition``: ``normal``; ``shuffled`` (example labels independent of ``y``: exact ``p1 = 1/2``);
    ``no_evidence`` (the test word alone: ``p1 = 1/2``); ``masked`` (every carrier word replaced by
    :data:`MASK`, the labels kept: the exact posterior is unchanged, since the Bayes model ignores carriers).
    """
    from .. import tasks

    g = torch.Generator().manual_seed(setup.seed)
    out = []
    for k in setup.ks:
        coin = tasks.make("coin", labels="noisy", n=k + 1, label_noise=setup.noise)
        ep = coin.sample(setup.per_k, seed=setup.seed * 1000 + k)
        for i in range(setup.per_k):
            seq = ep.latent["labels"][i, :k]  # 1 = labels[0]
            p1 = float(ep.posterior[i, k, 1])
            if condition == "shuffled":
                seq = torch.randint(0, 2, (k,), generator=g)
                p1 = 0.5
            words = [CARRIERS[int(j)] for j in torch.randint(0, len(CARRIERS), (k + 1,), generator=g)]
            if condition == "masked":  # Paper III's evidence ablation: the carrier words masked, the labels kept
                words = [MASK] * (k + 1)
            if condition == "no_evidence":
                text, p1 = f"{words[-1]}:", 0.5
            else:
                shown = [f"{w}: {labels[0] if int(s) == 1 else labels[1]}" for w, s in zip(words[:k], seq)]
                text = ", ".join(shown + [f"{words[-1]}:"])
            out.append({"text": text, "k": k, "p1": p1})
    return out


READOUT = "readout"
"""The final token's hidden state as the output head reads it (after the final norm)."""


def _values_hook(layout: AttentionLayout, layers: Sequence[int], store: dict[Any, list[torch.Tensor]]) -> list[Any]:
    handles = []
    for layer in layers:
        module, to_values = layout.value_module(layer)

        def keep(m: Any, i: Any, o: torch.Tensor, layer: int = layer, to_values: Any = to_values) -> None:
            store.setdefault(layer, []).append(to_values(o.detach())[0, -1].reshape(-1).double().cpu())

        handles.append(module.register_forward_hook(keep))
    return handles


def _readout_hook(model: torch.nn.Module, store: dict[Any, list[torch.Tensor]]) -> Any:
    """Keep the final position's input to the output head (the readout) under :data:`READOUT`."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise InvalidValue(f"invalid model: {type(model).__name__} has no output head to read the readout from")

    def keep(m: Any, args: tuple[Any, ...]) -> None:
        store.setdefault(READOUT, []).append(args[0].detach()[0, -1].reshape(-1).double().cpu())

    return head.register_forward_pre_hook(keep)


@torch.no_grad()
def _forward(model: torch.nn.Module, tokenizer: Any, items: Sequence[dict[str, Any]], labels: tuple[str, str],
             layers: Sequence[int] = (), readout: bool = False
             ) -> tuple[torch.Tensor, dict[int, torch.Tensor], torch.Tensor | None]:
    """``p1 [N]``, the final-token values at ``layers`` and (``readout``) the final-token readout ``[N, d]``."""
    ids = [tokenizer(" " + w, add_special_tokens=False)["input_ids"][0] for w in labels]
    layout = attention_layout(model)
    store: dict[Any, list[torch.Tensor]] = {}
    handles = _values_hook(layout, layers, store)
    if readout:
        handles.append(_readout_hook(model, store))
    device = next(model.parameters()).device
    p1 = []
    try:
        for item in items:
            x = encode(tokenizer, item["text"]).to(device)
            logits = _last_logits(model, x)[ids].double()
            p1.append(float(torch.softmax(logits, -1)[0]))
    finally:
        for h in handles:
            h.remove()
    R = torch.stack(store.pop(READOUT)) if readout else None
    return torch.tensor(p1, dtype=torch.float64), {l: torch.stack(v) for l, v in store.items()}, R


def model_posterior(model: torch.nn.Module, tokenizer: Any, items: Sequence[dict[str, Any]], labels: tuple[str, str],
                    layers: Sequence[int] = ()) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """``p1 [N]`` (renormalised over the two label tokens) and the final-token values at ``layers``.

    Under :func:`value_edit` (or :func:`value_cut`) the values read at an edited layer are the edited ones."""
    p1, values, _ = _forward(model, tokenizer, items, labels, layers)
    return p1, values


def _last_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The final position's logits ``[vocab]``; only that position goes through the output head where the
    family allows it (``logits_to_keep``: the head is most of a small model's cost over a large vocabulary)."""
    try:
        out = model(input_ids=x, use_cache=False, logits_to_keep=1)
    except TypeError:  # an older transformers or a family without the option
        out = model(input_ids=x, use_cache=False)
    return out.logits[0, -1]


def _binary_entropy(p: torch.Tensor) -> torch.Tensor:
    return _entropy_bits(torch.stack([p, 1 - p], -1))


def _kl_bits(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    P, Q = torch.stack([p, 1 - p], -1), torch.stack([q, 1 - q], -1).clamp_min(1e-300)
    return torch.where(P > 0, P * (torch.log2(P.clamp_min(1e-300)) - torch.log2(Q)), torch.zeros_like(P)).sum(-1)


def score(exact: torch.Tensor, model_p1: torch.Tensor, ks: torch.Tensor, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """Entropy MAE and KL (bits) with bootstrap intervals, overall and per ``k``."""
    gap = (_binary_entropy(model_p1) - _binary_entropy(exact)).abs()
    kl = _kl_bits(exact, model_p1)
    W = resample_weights(len(gap), n_boot, seed) / len(gap)
    out: dict[str, Any] = {"entropy_mae": float(gap.mean()), "entropy_mae_ci": finite_ci(W @ gap),
                           "kl": float(kl.mean()), "kl_ci": finite_ci(W @ kl), "by_k": {}}
    for k in sorted(set(ks.tolist())):
        m = ks == k
        out["by_k"][str(k)] = {"model_entropy": float(_binary_entropy(model_p1[m]).mean()),
                               "bayes_entropy": float(_binary_entropy(exact[m]).mean()),
                               "entropy_mae": float(gap[m].mean()), "kl": float(kl[m].mean())}
    return out


@contextmanager
def value_cut(model: torch.nn.Module, axes: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> Iterator[None]:
    """At each layer ``l`` with ``(u, mean, std)``, replace the final token's values ``v`` by the
    values whose z-scores have their component along ``u`` removed: ``z ← z − (z·u)u``."""
    with value_edit(model, axes, lambda z, u: z - (z @ u) * u):
        yield


@contextmanager
def value_edit(model: torch.nn.Module, axes: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
               edit: Any) -> Iterator[None]:
    """At each layer with ``(u, mean, std)``, the final token's values ``v`` become ``mean + std · edit(z, u)``
    with ``z = (v − mean) / std``: the cut (``z − (z·u)u``), the axis-only projection (``(z·u)u``) or a
    shift along the axis (``z + c·u``)."""
    layout = attention_layout(model)
    idx = layout.indices("v")
    handles = []
    for layer, (u, mu, sd) in axes.items():
        f = edit[layer] if isinstance(edit, dict) else edit  # one edit for every layer, or one per layer

        def cut(m: Any, i: Any, o: torch.Tensor, u: torch.Tensor = u, mu: torch.Tensor = mu, sd: torch.Tensor = sd,
                f: Any = f) -> torch.Tensor:
            o = o.clone()
            where = idx.to(o.device)
            v = o[0, -1, where].double().cpu()
            z = f((v - mu) / sd, u)
            o[0, -1, where] = (mu + sd * z).to(o.dtype).to(o.device)
            return o

        # prepended: whatever else reads this module's output (a capture hook) sees the edited values
        handles.append(layout.module(layer, "v").register_forward_hook(cut, prepend=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _entropy_axis(V: torch.Tensor, entropy: torch.Tensor
                  ) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], float | None]:
    """``(u, mean, std)``: PC1 of the z-scored rows of ``V``, oriented so that ``z·u`` grows with ``entropy``;
    and ρ(z·u, entropy)."""
    mu, sd = V.mean(0), V.std(0).clamp_min(1e-12)
    Z = (V - mu) / sd
    u = torch.linalg.svd(Z - Z.mean(0), full_matrices=False)[2][0]
    r = _spearman(Z @ u, entropy)
    if r is not None and r < 0:
        u, r = -u, -r
    return (u, mu, sd), r


def _project(V: torch.Tensor, axis: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``z·u`` for each row of ``V``, z-scored with the axis's own mean and spread."""
    u, mu, sd = axis
    return ((V - mu) / sd) @ u


def entropy_axes(values: dict[int, torch.Tensor], model_entropy: torch.Tensor, seed: int = 0
                 ) -> tuple[dict[int, tuple[torch.Tensor, ...]], dict[int, tuple[torch.Tensor, ...]], dict[int, float | None]]:
    """Per layer: the entropy axis ``(u, mean, std)``, a random unit axis orthogonal to it, and ρ(z·u, H)."""
    g = torch.Generator().manual_seed(seed)
    ent, rnd, rho = {}, {}, {}
    for layer, V in values.items():
        (u, mu, sd), r = _entropy_axis(V, model_entropy)
        x = torch.randn(u.shape, generator=g, dtype=torch.float64)
        x = x - (x @ u) * u
        ent[layer], rnd[layer], rho[layer] = (u, mu, sd), (x / x.norm(), mu, sd), r
    return ent, rnd, rho


def _rho_ci(x: torch.Tensor, y: torch.Tensor, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """Spearman ρ(x, y) with a percentile bootstrap interval over prompts."""
    g = torch.Generator().manual_seed(seed)
    rho = _spearman(x, y)
    boots = []
    for _ in range(n_boot):
        i = torch.randint(0, len(x), (len(x),), generator=g)
        r = _spearman(x[i], y[i])
        if r is not None:
            boots.append(r)
    ci = finite_ci(torch.tensor(boots, dtype=torch.float64)) if boots else [None, None]
    return {"rho": rho, "ci": ci}


def _by_k(score: torch.Tensor, ks: torch.Tensor) -> dict[str, float]:
    return {str(k): float(score[ks == k].mean()) for k in sorted(set(ks.tolist()))}


def sula_geometry(model: torch.nn.Module, tokenizer: Any, setup: SulaSetup, pair: tuple[str, str],
                  cut_layers: Sequence[int]) -> dict[str, Any]:
    """Paper III's SULA geometry at the last layer's final-token values, in one PCA basis shared by every k
    (z-scored over the normal prompts; PC1 oriented to grow with the Bayesian entropy):

    * ``pc1_vs_bayes_entropy`` — |ρ(PC1, H_Bayes)| over all prompts (Paper III: 0.65–0.80);
    * ``movement`` — ρ(k, PC1): the state moving along the manifold as evidence accumulates (0.86 /
      0.60 / 0.32), and the same for the **shuffled** labels and the **masked** carriers projected on
      the normal basis (Paper III: little or no movement), with per-k means;
    * ``axis_only`` — at ``cut_layers``, the values reduced to their component along the entropy axis
      (``z ← (z·u)u``) or along a random axis: ρ(model entropy, H_Bayes) after, against before
      (Paper III: the entropy axis keeps it, a random one destroys it);
    * ``shift`` — ``z ← z ± σ u`` (σ: the spread of the prompts along ``u``): the change in mean model
      entropy and entropy MAE (Paper III: a small change in the direction of the shift).
    """
    layout = attention_layout(model)
    last = len(layout.layers) - 1
    out: dict[str, Any] = {"layer": last}
    items = {c: prompts(setup, pair, c) for c in ("normal", "shuffled", "masked")}
    p, V = {}, {}
    for c, its in items.items():
        p[c], vals = model_posterior(model, tokenizer, its, pair, sorted({last, *cut_layers}))
        V[c] = vals
    ks = {c: torch.tensor([x["k"] for x in its]) for c, its in items.items()}
    H_bayes = _binary_entropy(torch.tensor([x["p1"] for x in items["normal"]], dtype=torch.float64))
    Vn = V["normal"][last]
    mu, sd = Vn.mean(0), Vn.std(0).clamp_min(1e-12)
    Z = (Vn - mu) / sd
    u = torch.linalg.svd(Z - Z.mean(0), full_matrices=False)[2][0]
    if (_spearman(Z @ u, H_bayes) or 0.0) < 0:
        u = -u
    out["pc1_vs_bayes_entropy"] = _rho_ci(Z @ u, H_bayes, setup.n_boot, setup.seed)
    out["movement"] = {}
    for c in ("normal", "shuffled", "masked"):
        score_c = ((V[c][last] - mu) / sd) @ u
        out["movement"][c] = {**_rho_ci(ks[c].double(), score_c, setup.n_boot, setup.seed), "pc1_by_k": _by_k(score_c, ks[c])}
    # interventions at the cut layers, on the normal prompts
    H_model = _binary_entropy(p["normal"])
    ent, rnd, _ = entropy_axes({l: V["normal"][l] for l in cut_layers}, H_model, setup.seed)
    before = _spearman(H_model, H_bayes)
    out["axis_only"] = {"layers": list(cut_layers), "rho_model_bayes_entropy_before": before}
    for name, axes in (("entropy_axis", ent), ("random_axis", rnd)):
        with value_edit(model, axes, lambda z, u: (z @ u) * u):
            q, _ = model_posterior(model, tokenizer, items["normal"], pair)
        out["axis_only"][name] = {"rho_model_bayes_entropy": _spearman(_binary_entropy(q), H_bayes),
                                  "entropy_mae": float((_binary_entropy(q) - H_bayes).abs().mean())}
    out["shift"] = {"layers": list(cut_layers), "mean_model_entropy_before": float(H_model.mean()),
                    "entropy_mae_before": float((H_model - H_bayes).abs().mean())}
    for sign in (+1, -1):
        sig = {l: float((((V["normal"][l] - ent[l][1]) / ent[l][2]) @ ent[l][0]).std()) for l in cut_layers}
        shifts = {l: (lambda z, u, c=sign * sig[l]: z + c * u) for l in cut_layers}
        with value_edit(model, {l: ent[l] for l in cut_layers}, shifts):
            q, _ = model_posterior(model, tokenizer, items["normal"], pair)
        Hq = _binary_entropy(q)
        out["shift"]["plus" if sign > 0 else "minus"] = {"mean_model_entropy": float(Hq.mean()),
                                                        "entropy_mae": float((Hq - H_bayes).abs().mean())}
    return out


def run_sula(model: torch.nn.Module, tokenizer: Any, setup: SulaSetup = SulaSetup(),
             cut_layers: Sequence[int] | None = None, cut_only: bool = False) -> dict[str, Any]:
    """Every condition, and the entropy-axis cut against the random-axis cut at ``cut_layers``
    (default: the middle and the last layer).  ``cut_only``: the normal prompts and the cut at the
    layers together, nothing else — the multi-layer cut (Paper III §6.2), whose controls, one-layer
    cuts and geometry the default run at the default layers already holds (a third of the model passes)."""
    layout = attention_layout(model)
    L = len(layout.layers)
    layers = list(cut_layers) if cut_layers is not None else sorted({L // 2, L - 1})
    for layer in layers:
        if not isinstance(layer, int) or not 0 <= layer < L:
            raise InvalidValue(f"invalid layer: must be in [0, {L - 1}], got {layer!r}")
    labels = single_token_labels(tokenizer, 4)
    pair, remap = (labels[0], labels[1]), (labels[2], labels[3])
    out: dict[str, Any] = {"labels": list(pair), "remap_labels": list(remap), "setup": setup.__dict__, "conditions": {}}
    base = prompts(setup, pair)
    ks = torch.tensor([p["k"] for p in base])
    exact = torch.tensor([p["p1"] for p in base], dtype=torch.float64)
    every = list(range(L))
    p1, values, readout = _forward(model, tokenizer, base, pair, every, readout=True)
    out["conditions"]["normal"] = score(exact, p1, ks, setup.n_boot)
    controls = () if cut_only else (("remap", remap, "normal"), ("shuffled", pair, "shuffled"),
                                    ("no_evidence", pair, "no_evidence"))
    for name, lab, cond in controls:
        items = prompts(setup, lab, cond)
        q, _ = model_posterior(model, tokenizer, items, lab)
        out["conditions"][name] = score(torch.tensor([p["p1"] for p in items], dtype=torch.float64), q,
                                        torch.tensor([p["k"] for p in items]), setup.n_boot)
    H = _binary_entropy(p1)
    ent, rnd, rho = entropy_axes({l: values[l] for l in layers}, H, setup.seed)
    # the probes: each layer's and the readout's entropy axis on the uncut run, held fixed under every cut
    probes = {m: _entropy_axis(values[m], H) for m in every}
    read_axis, read_rho = _entropy_axis(readout, H)
    cut: dict[str, Any] = {
        "applicable": True, "layers": layers, "rho_axis_entropy_before": {str(l): rho[l] for l in layers},
        "rho_readout_before": read_rho, "rho_readout_before_ci": _rho_ci(_project(readout, read_axis), H, setup.n_boot,
                                                                         setup.seed)["ci"],
        "rho_values_before": {str(m): probes[m][1] for m in every},
        "read_at": {
            "rho_readout_after": "the final token's hidden state read by the output head, against its uncut entropy "
                                 "axis: downstream of every cut layer (the reading to compare with rho_readout_before)",
            "rho_downstream_after": "the values of each layer after the first cut layer and not itself cut, against "
                                    "that layer's uncut entropy axis (compare with rho_values_before)",
            "rho_axis_entropy_after": "the cut layer's own values after the edit: ~0 (entropy axis) or ~before "
                                      "(random axis, orthogonal to it) by construction; a check that the edit was made, "
                                      "not a measurement of its effect"}}

    def after_cut(axes: dict[int, tuple[torch.Tensor, ...]]) -> dict[str, Any]:
        with value_cut(model, axes):
            q, after, R = _forward(model, tokenizer, base, pair, every, readout=True)
        Hq = _binary_entropy(q)
        first = min(axes)
        return {"behaviour": score(exact, q, ks, setup.n_boot),
                "rho_axis_entropy_after": {str(l): _spearman(_project(after[l], ent[l]), Hq) for l in axes},
                "rho_readout_after": _spearman(_project(R, read_axis), Hq),
                "rho_readout_after_ci": _rho_ci(_project(R, read_axis), Hq, setup.n_boot, setup.seed)["ci"],
                "rho_downstream_after": {str(m): _spearman(_project(after[m], probes[m][0]), Hq)
                                         for m in every if m > first and m not in axes}}

    for name, axes in (("entropy_axis", ent), ("random_axis", rnd)):
        cut[name] = after_cut(axes)
    if len(layers) > 1 and not cut_only:  # the paper cuts one layer at a time: each layer alone, the others untouched
        cut["one_at_a_time"] = {}
        for l in layers:
            alone = {}
            for name, axes in (("entropy_axis", ent), ("random_axis", rnd)):
                alone[name] = after_cut({l: axes[l]})
                alone[name]["rho_axis_entropy_after"] = alone[name]["rho_axis_entropy_after"][str(l)]  # a number, as before
            cut["one_at_a_time"][str(l)] = alone
    out["cut"] = cut
    if not cut_only:
        out["geometry"] = sula_geometry(model, tokenizer, setup, pair, layers)
    return json_safe(out)
