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

**The entropy-axis cut** (Paper III §4.5–4.6, §6.2, §7.1): at chosen layers, ``u`` = PC1 of the z-scored
final-token value vectors over the prompts (its sign set so that the projection grows with the model's entropy);
the cut :math:`\tilde z = z - \lambda (z\cdot u)u` with λ = 1 (:data:`CUT_LAMBDA`, the paper's "hard removal")
is applied to the values of **every position** of the edited layer — the layer's values, as the paper defines the
cut, not the final token's alone: the later positions' attention reads the earlier positions' values, so an edit of
the final token only leaves most of what the layer passes on untouched.  Two nulls go through the same code path on
the same prompts: the **no-op** (λ = 0: every value z-scored and mapped back, nothing removed; it must leave the
model's output where it was, to rounding) and the **random axis** (a Gaussian unit vector orthogonalised against
``u``: the same norm, another direction).  Behaviour (MAE, KL) is reported after each, for the layers cut together
and (``alone``, inside each edit's block, as the paper cuts) for each layer cut alone.  The edit is made where the
values are computed, on every attention layout the signatures read (separate ``v_proj``; the value slice of
GPT-NeoX's and GPT-2's fused projections).

**The space the cut is made in.**  Paper III defines ``u_ent`` as "PC1 of the standardized final-token
values" and the cut as :math:`\tilde v = v - \lambda (v\cdot u)u` with λ = 1.  ``u`` is a direction of the
standardised coordinates :math:`z = (v - \mu)/\sigma` (per coordinate, μ and σ over the uncut prompts' final
tokens); only there is ``v·u`` the prompt's coordinate along PC1.  The cut is therefore made on ``z`` and mapped back
as :math:`v \leftarrow \mu + \sigma \odot \tilde z`: after it every position sits at the prompts' mean along the axis
(``z·u = 0``) and every other standardised coordinate is untouched.  The axis-only projection (``z ← (z·u)u``) and
the shift (``z ← z ± σ_u u``) are made in the same coordinates, at every position too.

**Which layers.**  Paper III's interventions are on Pythia-410M, 24 layers numbered 0–23 (:data:`PAPER_DEPTH`):
the two "Bayesian" layers 12 and 23 one at a time (§7.1, :data:`PAPER_BAYESIAN_LAYERS`) and the five
layers 8, 12, 16, 20, 23 together (§6.2, :data:`PAPER_MULTI_LAYERS`).  On a model of ``L`` layers a
paper layer ``l`` becomes the layer at the same relative depth, :math:`\lfloor l\,(L-1)/23 + 1/2\rfloor`
(:func:`paper_layers`: the first layer stays the first, 23 becomes the last); the artifact records the
mapping (``cut.layer_map``).

**Where the geometry after a cut is read.**  Paper III §7.1 asks whether removing ``u`` at a layer
removes the entropy signal the model goes on to use, and concludes that the axis is "a privileged
readout ... rather than a bottleneck"; a correlation read on the very vector the cut just projected
cannot answer that: ``z·u`` there is zero up to rounding for the entropy axis and exactly unchanged
for the random axis (orthogonal to ``u``), whatever the model does.  The statistic after a cut is
therefore read where the cut can only act through the model's own computation, each against the
axis fitted (z-scoring included) on the uncut run and the model's entropy after the cut:

* ``rho_paper_after`` — **the paper's quantity** ρ(z·u, H_model) where the edit has not fixed it: at the values of
  the last layer downstream of every edited layer and not itself edited (for a cut at Paper III's layer 12 that is
  its other Bayesian layer, 23, the last), against that layer's uncut entropy axis; where the last layer is edited
  no values lie downstream, and the same statistic is read on the readout (``paper_read_at`` says which;
  ``rho_paper_before`` is the same reading on the uncut run, and the no-op edit reproduces it).
* ``rho_readout_after`` — at the **readout**: the final token's hidden state that the output head
  reads (after the final norm), downstream of every layer's values; its entropy axis is PC1 of those
  states over the uncut prompts, oriented like ``u`` (``rho_readout_before``).
* ``rho_downstream_after`` — at the values of every layer after the first edited layer and not itself
  edited, each against its own uncut entropy axis (``rho_values_before``: every layer, uncut).
* ``rho_axis_entropy_after`` — the edited layer's own values *after* the edit (the edit hook runs before any reading
  hook on that module).  It only checks that the edit was made (no value along the axis is left for the entropy-axis
  cut: the correlation of a constant is undefined, ``None``); it is not a measurement of the cut's effect.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from ..errors import InvalidValue
from ..evaluation.stats import finite_ci, json_safe, resample_weights
from .load import encode
from .signatures import AttentionLayout, _entropy_bits, _spearman, attention_layout
from .value_edits import (CUT_LAMBDA, axis_only_edit, cut_edit, entropy_axes, entropy_axis,  # noqa: F401
                          project, rho_ci, shift_edit, value_cut, value_edit, within_k_ci, within_k_rho)

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


PAPER_DEPTH = 24
"""The depth of the model Paper III intervenes on (Pythia-410M: layers 0–23)."""
PAPER_BAYESIAN_LAYERS = (12, 23)
"""Paper III §7.1: the two "Bayesian" layers, each cut, projected and shifted on its own."""
PAPER_MULTI_LAYERS = (8, 12, 16, 20, 23)
"""Paper III §6.2: the layers cut together."""


def paper_layers(layers: Sequence[int], n_layers: int, depth: int = PAPER_DEPTH) -> dict[int, int]:
    r"""Each of Paper III's layer numbers (of its ``depth``-layer model) mapped to the layer at the same
    relative depth of a model with ``n_layers``: :math:`l \mapsto \lfloor l\,(L-1)/(D-1) + 1/2\rfloor`."""
    if n_layers < 1:
        raise InvalidValue(f"invalid model: needs at least one layer, got {n_layers}")
    out = {}
    for layer in layers:
        if not isinstance(layer, int) or not 0 <= layer < depth:
            raise InvalidValue(f"invalid paper layer: must be in [0, {depth - 1}], got {layer!r}")
        out[layer] = int(layer * (n_layers - 1) / (depth - 1) + 0.5)
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


def _decoder_blocks(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's decoder blocks, in order: the module list as long as its depth (``layers`` or ``h``)."""
    depth = len(attention_layout(model).layers)
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == depth and name.rsplit(".", 1)[-1] in ("layers", "h"):
            return m
    raise InvalidValue(f"invalid model: {type(model).__name__} has no list of {depth} decoder blocks")


class Prefix:
    """Each prompt's output of chosen decoder blocks on the uncut run, replayed where an edit cannot reach.

    In a causal model an edit of layer ``l``'s values changes nothing computed by the blocks before ``l``, so a run
    under an edit whose first edited layer is ``l`` may take block ``l − 1``'s output from the uncut run and compute
    from block ``l`` on: the same numbers, at the cost of the blocks from ``l`` on only.  :meth:`record` keeps the
    outputs (of the blocks in ``keep``) during the uncut run; :meth:`replay` stands in for the blocks before ``first``
    (those before ``first − 1`` pass their input through untouched, block ``first − 1`` returns its recorded output for
    prompt :attr:`index`, which :func:`_forward` sets)."""

    def __init__(self, model: torch.nn.Module, keep: Sequence[int]) -> None:
        self.blocks = _decoder_blocks(model)
        self.out: dict[int, list[Any]] = {i: [] for i in sorted(set(keep)) if i >= 0}
        self.index = 0

    @contextmanager
    def record(self) -> Iterator[None]:
        def keep(m: Any, args: Any, o: Any, i: int) -> None:
            self.out[i].append(o.detach().clone() if isinstance(o, torch.Tensor)
                               else tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in o))

        handles = [self.blocks[i].register_forward_hook(lambda m, a, o, i=i: keep(m, a, o, i)) for i in self.out]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    @contextmanager
    def replay(self, first: int) -> Iterator[None]:
        if first - 1 not in self.out or not self.out[first - 1]:  # nothing recorded there: run every block
            yield
            return
        recorded = self.out[first - 1]
        as_tuple = not isinstance(recorded[0], torch.Tensor)

        def through(*args: Any, **kwargs: Any) -> Any:
            h = args[0] if args else kwargs["hidden_states"]
            return (h,) if as_tuple else h

        def replayed(*args: Any, **kwargs: Any) -> Any:
            o = recorded[self.index]
            return o.clone() if not as_tuple else tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in o)

        for i in range(first):
            self.blocks[i].forward = replayed if i == first - 1 else through
        try:
            yield
        finally:
            for i in range(first):
                del self.blocks[i].forward


@torch.no_grad()
def _forward(model: torch.nn.Module, tokenizer: Any, items: Sequence[dict[str, Any]], labels: tuple[str, str],
             layers: Sequence[int] = (), readout: bool = False, prefix: Prefix | None = None
             ) -> tuple[torch.Tensor, dict[int, torch.Tensor], torch.Tensor | None]:
    """``p1 [N]``, the final-token values at ``layers`` and (``readout``) the final-token readout ``[N, d]``;
    ``prefix``: told which prompt runs (:attr:`Prefix.index`), for a recording or a replay around the call."""
    ids = [tokenizer(" " + w, add_special_tokens=False)["input_ids"][0] for w in labels]
    layout = attention_layout(model)
    store: dict[Any, list[torch.Tensor]] = {}
    handles = _values_hook(layout, layers, store)
    if readout:
        handles.append(_readout_hook(model, store))
    device = next(model.parameters()).device
    p1 = []
    try:
        for j, item in enumerate(items):
            if prefix is not None:
                prefix.index = j
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


def _by_k(score: torch.Tensor, ks: torch.Tensor) -> dict[str, float]:
    return {str(k): float(score[ks == k].mean()) for k in sorted(set(ks.tolist()))}


READ_AT = {
    "rho_paper_after": "Paper III's own quantity, rho(z.u, model entropy) of a layer's final-token values against its "
                       "uncut entropy axis, read where the edit has not fixed it: the last layer downstream of every "
                       "edited layer and not itself edited, else (the last layer edited) the same statistic on the "
                       "readout; paper_read_at names which (compare with rho_paper_before)",
    "rho_readout_after": "the final token's hidden state read by the output head, against its uncut entropy axis: "
                         "downstream of every edited layer (the reading to compare with rho_readout_before)",
    "rho_downstream_after": "the values of each layer after the first edited layer and not itself edited, against "
                            "that layer's uncut entropy axis (compare with rho_values_before)",
    "rho_axis_entropy_after": "the edited layer's own values after the edit, against its uncut entropy axis: fixed by "
                              "the edit itself (the cut: none left for the entropy axis, ~before for the random one; the "
                              "axis-only projection: ~before for the entropy axis, ~0 for the random one); a check that "
                              "the edit was made, not a measurement of its effect",
    "rho_model_bayes_entropy": "rho(model entropy, H_Bayes) over the prompts after the edit: behaviour against the "
                               "exact posterior, not the axis"}
"""What each reading after an edit is (the artifact carries it as ``read_at``)."""


class _Probe:
    """The uncut run on the normal prompts, and the readings after an edit made against it.

    Held fixed under every edit: each layer's entropy axis (``probes``, fitted on ``values``) and the readout's
    (``readout_axis``), z-scoring included; each reading after an edit is against the model's entropy after it."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, setup: SulaSetup, pair: tuple[str, str],
                 items: Sequence[dict[str, Any]], p1: torch.Tensor, values: dict[int, torch.Tensor],
                 readout: torch.Tensor, prefix: Prefix | None = None) -> None:
        self.model, self.tokenizer, self.setup, self.pair, self.items = model, tokenizer, setup, pair, items
        self.prefix = prefix
        self.exact = torch.tensor([x["p1"] for x in items], dtype=torch.float64)
        self.ks = torch.tensor([x["k"] for x in items])
        self.H, self.H_bayes = _binary_entropy(p1), _binary_entropy(self.exact)
        self.every = sorted(values)
        self.probes = {m: entropy_axis(values[m], self.H) for m in self.every}
        self.readout_axis, self.rho_readout_before = entropy_axis(readout, self.H)
        self.rho_readout_before_ci = rho_ci(project(readout, self.readout_axis), self.H, setup.n_boot,
                                             setup.seed)["ci"]

    def paper_at(self, edited: Sequence[int]) -> int | None:
        """Where the paper's quantity is read after an edit of ``edited``: the last layer downstream of every edited
        layer and not itself edited (``None``: the last layer is edited, and the readout stands in)."""
        later = [m for m in self.every if m > max(edited) and m not in edited]
        return max(later) if later else None

    def paper_before(self, edited: Sequence[int]) -> dict[str, Any]:
        """The paper's quantity on the uncut run, where :meth:`after` reads it for an edit of ``edited``."""
        at = self.paper_at(edited)
        return {"paper_read_at": READOUT if at is None else f"values of layer {at}",
                "rho_paper_before": self.rho_readout_before if at is None else self.probes[at][1]}

    def after(self, axes: dict[int, tuple[torch.Tensor, ...]], edit: Any,
              ent: dict[int, tuple[torch.Tensor, ...]]) -> dict[str, Any]:
        """The readings (:data:`READ_AT`) and behaviour after ``edit`` at the layers of ``axes``; ``ent``: the
        entropy axes the edited layers' own values are read against."""
        with value_edit(self.model, axes, edit), (self.prefix.replay(min(axes)) if self.prefix else nullcontext()):
            q, after, R = _forward(self.model, self.tokenizer, self.items, self.pair, self.every, readout=True,
                                   prefix=self.prefix)
        Hq = _binary_entropy(q)
        first, n_boot, seed = min(axes), self.setup.n_boot, self.setup.seed
        at = self.paper_at(list(axes))
        paper = project(R, self.readout_axis) if at is None else project(after[at], self.probes[at][0])
        return {"behaviour": score(self.exact, q, self.ks, n_boot), "mean_model_entropy": float(Hq.mean()),
                **self.paper_before(list(axes)), "rho_paper_after": _spearman(paper, Hq),
                "rho_paper_after_ci": rho_ci(paper, Hq, n_boot, seed)["ci"],
                "rho_model_bayes_entropy": _spearman(Hq, self.H_bayes),
                "rho_axis_entropy_after": {str(l): _spearman(project(after[l], ent[l]), Hq) for l in axes},
                "rho_readout_after": _spearman(project(R, self.readout_axis), Hq),
                "rho_readout_after_ci": rho_ci(project(R, self.readout_axis), Hq, n_boot, seed)["ci"],
                "rho_downstream_after": {str(m): _spearman(project(after[m], self.probes[m][0]), Hq)
                                         for m in self.every if m > first and m not in axes}}


def sula_geometry(model: torch.nn.Module, tokenizer: Any, setup: SulaSetup, pair: tuple[str, str],
                  cut_layers: Sequence[int], normal: tuple[torch.Tensor, dict[int, torch.Tensor], torch.Tensor] | None = None,
                  prefix: Prefix | None = None) -> dict[str, Any]:
    r"""Paper III's SULA geometry at the last layer's final-token values, in one PCA basis shared by every k
    (z-scored over the normal prompts; PC1 oriented to grow with the Bayesian entropy), and the §7.1 edits
    other than the cut at ``cut_layers``:

    * ``pc1_vs_bayes_entropy`` — |ρ(PC1, H_Bayes)| over all prompts (Paper III: 0.65–0.80);
    * ``pc1_vs_bayes_entropy_within_k`` — the same within each example count where H_Bayes varies (k ≥ 2), averaged
      over the prompts (:func:`within_k_rho`): H_Bayes falls with k, so only this part says that PC1 follows the
      evidence rather than the number of examples;
    * ``movement`` — ρ(k, PC1): the state moving along the manifold as evidence accumulates (0.86 /
      0.60 / 0.32), and the same for the **shuffled** labels and the **masked** carriers projected on
      the normal basis (Paper III: little or no movement), with per-k means;
    * ``axis_only`` — the values reduced to their component along the entropy axis (``z ← (z·u)u``) or
      along a random axis orthogonal to it.  Paper III: the entropy axis "preserves or slightly sharpens
      the correlation", a random one "almost completely destroys it" — the axis–entropy correlation
      ρ(z·u, H_model).  Read as the cut is (:data:`READ_AT`): ``rho_readout_after``, the readout's ρ with the
      model's entropy after the edit, against ``rho_readout_before``; on the edited values themselves that
      ρ is fixed by the projection (kept, as ``rho_axis_entropy_after``).  Beside it
      ``rho_model_bayes_entropy``: ρ(model entropy, H_Bayes) after, against
      ``rho_model_bayes_entropy_before``;
    * ``shift`` — ``z ← z ± σ_u u`` (σ_u: the spread of the prompts along ``u``): the mean model entropy,
      entropy MAE and ρ(model entropy, H_Bayes) after (Paper III: a small change in the direction of the
      shift, +1σ "slightly improving correlation with the Bayesian entropy curve"), with the same readings.

    Both edits are made at every position of the edited layer, at each layer alone (``one_at_a_time``, where there
    are several: the paper edits "each of two Bayesian layers" on its own; the layers together only where there is
    one).  ``normal``: the uncut run on the normal prompts at every layer with the readout (``p1``, values,
    readout), where the caller has made it already, with the blocks' outputs it recorded (``prefix``).
    """
    layout = attention_layout(model)
    L = len(layout.layers)
    last = L - 1
    out: dict[str, Any] = {"layer": last}
    items = {c: prompts(setup, pair, c) for c in ("normal", "shuffled", "masked")}
    p, V = {}, {}
    if normal is None:
        prefix = Prefix(model, [l - 1 for l in cut_layers])
        with prefix.record():
            normal = _forward(model, tokenizer, items["normal"], pair, list(range(L)), readout=True, prefix=prefix)
    p["normal"], V["normal"], readout = normal
    for c in ("shuffled", "masked"):
        p[c], V[c] = model_posterior(model, tokenizer, items[c], pair, [last])
    ks = {c: torch.tensor([x["k"] for x in its]) for c, its in items.items()}
    H_bayes = _binary_entropy(torch.tensor([x["p1"] for x in items["normal"]], dtype=torch.float64))
    Vn = V["normal"][last]
    mu, sd = Vn.mean(0), Vn.std(0).clamp_min(1e-12)
    Z = (Vn - mu) / sd
    u = torch.linalg.svd(Z - Z.mean(0), full_matrices=False)[2][0]
    if (_spearman(Z @ u, H_bayes) or 0.0) < 0:
        u = -u
    out["pc1_vs_bayes_entropy"] = rho_ci(Z @ u, H_bayes, setup.n_boot, setup.seed)
    # H_Bayes falls with k, so a PC1 that only counts the examples correlates with it too: what PC1 knows beyond k
    out["pc1_vs_bayes_entropy_within_k"] = within_k_ci(Z @ u, H_bayes, ks["normal"], setup.n_boot, setup.seed)
    out["movement"] = {}
    for c in ("normal", "shuffled", "masked"):
        score_c = ((V[c][last] - mu) / sd) @ u
        out["movement"][c] = {**rho_ci(ks[c].double(), score_c, setup.n_boot, setup.seed), "pc1_by_k": _by_k(score_c, ks[c])}
    # interventions at the cut layers, on the normal prompts
    probe = _Probe(model, tokenizer, setup, pair, items["normal"], p["normal"], V["normal"], readout, prefix)
    H_model = probe.H
    layers = list(cut_layers)
    ent, rnd, rho = entropy_axes({l: V["normal"][l] for l in layers}, H_model, setup.seed)
    several = len(layers) > 1
    before = _spearman(H_model, H_bayes)
    out["axis_only"] = {"layers": layers, "rho_model_bayes_entropy_before": before,
                        "rho_axis_entropy_before": {str(l): rho[l] for l in layers},
                        "rho_readout_before": probe.rho_readout_before,
                        "rho_readout_before_ci": probe.rho_readout_before_ci, "read_at": READ_AT}

    def axis_only(axes: dict[int, tuple[torch.Tensor, ...]]) -> dict[str, Any]:
        r = probe.after(axes, axis_only_edit, ent)
        return {**r, "entropy_mae": r["behaviour"]["entropy_mae"]}

    if not several:
        for name, axes in (("entropy_axis", ent), ("random_axis", rnd)):
            out["axis_only"][name] = axis_only(axes)
    else:
        out["axis_only"]["one_at_a_time"] = {str(l): {name: axis_only({l: axes[l]})
                                                      for name, axes in (("entropy_axis", ent), ("random_axis", rnd))}
                                             for l in layers}
    sig = {l: float(project(V["normal"][l], ent[l]).std()) for l in layers}
    out["shift"] = {"layers": layers, "sigma": {str(l): sig[l] for l in layers},
                    "mean_model_entropy_before": float(H_model.mean()),
                    "entropy_mae_before": float((H_model - H_bayes).abs().mean()),
                    "rho_model_bayes_entropy_before": before, "rho_readout_before": probe.rho_readout_before,
                    "read_at": READ_AT}

    def shift(at: Sequence[int], sign: int) -> dict[str, Any]:
        r = probe.after({l: ent[l] for l in at}, {l: shift_edit(sign * sig[l]) for l in at}, ent)
        return {"entropy_mae": r["behaviour"]["entropy_mae"], **r}

    if not several:
        for sign, key in ((+1, "plus"), (-1, "minus")):
            out["shift"][key] = shift(layers, sign)
    else:
        out["shift"]["one_at_a_time"] = {str(l): {key: shift([l], sign) for sign, key in ((+1, "plus"), (-1, "minus"))}
                                         for l in layers}
    return out


def run_sula(model: torch.nn.Module, tokenizer: Any, setup: SulaSetup = SulaSetup(),
             cut_layers: Sequence[int] | None = None, cut_only: bool = False,
             paper: Sequence[int] | None = None) -> dict[str, Any]:
    """Every condition, and the entropy-axis cut against its two nulls (the random-axis cut and the no-op, λ = 0),
    each at every position of the edited layers, at ``cut_layers`` (this model's
    layer numbers) or at ``paper`` (Paper III's layer numbers, mapped to the same relative depth here by
    :func:`paper_layers`); with neither, the paper's two Bayesian layers (:data:`PAPER_BAYESIAN_LAYERS`).
    ``cut_only``: the normal prompts and the cut at the layers together, nothing else — the multi-layer cut
    (Paper III §6.2), whose controls, one-layer cuts and geometry the default run at the default layers
    already holds (a third of the model passes)."""
    layout = attention_layout(model)
    L = len(layout.layers)
    if cut_layers is not None and paper is not None:
        raise InvalidValue("invalid layers: give this model's layers or the paper's, not both")
    layer_map = None
    if cut_layers is None:
        layer_map = paper_layers(tuple(paper) if paper is not None else PAPER_BAYESIAN_LAYERS, L)
        layers = sorted(set(layer_map.values()))
    else:
        layers = list(cut_layers)
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
    prefix = Prefix(model, [l - 1 for l in layers])  # what every edit's run takes from the uncut one
    with prefix.record():
        p1, values, readout = _forward(model, tokenizer, base, pair, every, readout=True, prefix=prefix)
    out["conditions"]["normal"] = score(exact, p1, ks, setup.n_boot)
    controls = () if cut_only else (("remap", remap, "normal"), ("shuffled", pair, "shuffled"),
                                    ("no_evidence", pair, "no_evidence"))
    for name, lab, cond in controls:
        items = prompts(setup, lab, cond)
        q, _ = model_posterior(model, tokenizer, items, lab)
        out["conditions"][name] = score(torch.tensor([p["p1"] for p in items], dtype=torch.float64), q,
                                        torch.tensor([p["k"] for p in items]), setup.n_boot)
    # the probes: each layer's and the readout's entropy axis on the uncut run, held fixed under every cut
    probe = _Probe(model, tokenizer, setup, pair, base, p1, values, readout, prefix)
    ent, rnd, rho = entropy_axes({l: values[l] for l in layers}, probe.H, setup.seed)
    cut: dict[str, Any] = {
        "applicable": True, "layers": layers, "lambda": CUT_LAMBDA, "positions": "every position of the edited layers",
        "space": "z-scored values (the uncut prompts' final-token mean and spread per coordinate)",
        "layer_map": None if layer_map is None else {
            "paper_depth": PAPER_DEPTH, "model_depth": L,
            "rule": f"paper layer l -> floor(l*({L}-1)/({PAPER_DEPTH}-1) + 1/2): the same relative depth",
            "layers": {str(k): v for k, v in layer_map.items()}},
        "rho_axis_entropy_before": {str(l): rho[l] for l in layers},
        "rho_readout_before": probe.rho_readout_before, "rho_readout_before_ci": probe.rho_readout_before_ci,
        "rho_values_before": {str(m): probe.probes[m][1] for m in every},
        "rho_model_bayes_entropy_before": _spearman(probe.H, probe.H_bayes), "read_at": READ_AT}
    # the cut (λ = 1) along the entropy axis, and its two nulls through the same code path: the same cut along a
    # random axis, and the no-op (λ = 0 along the entropy axis)
    edits = (("entropy_axis", ent, cut_edit(CUT_LAMBDA)), ("random_axis", rnd, cut_edit(CUT_LAMBDA)),
             ("no_op", ent, cut_edit(0.0)))
    for name, axes, edit in edits:
        cut[name] = probe.after(axes, edit, ent)
        if len(layers) > 1 and not cut_only:  # the paper cuts one layer at a time: each layer alone, the others untouched
            cut[name]["alone"] = {}
            for l in layers:
                alone = probe.after({l: axes[l]}, edit, ent)
                alone["rho_axis_entropy_after"] = alone["rho_axis_entropy_after"][str(l)]  # a number: one layer
                cut[name]["alone"][str(l)] = alone
    out["cut"] = cut
    if not cut_only:
        out["geometry"] = sula_geometry(model, tokenizer, setup, pair, layers, (p1, values, readout), prefix)
    return json_safe(out)
