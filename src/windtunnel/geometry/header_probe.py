"""Header probe (the sequel, arXiv 2607.19379, MS5): does the residual stream carry what each body symbol *means*?

In the model-selection task's opaque regime every episode draws a relabelling ``π`` of ``Z_n`` and states it in a
header (``ORD π(0) … π(n−1) SEP``); the body writes each value ``v`` as the symbol ``n + π(v)``.  A symbol's meaning,
the integer ``v = π⁻¹(symbol)``, is then in the header alone: the token by itself says nothing of it.  The sequel
places the failure of the arithmetic pair with opaque symbols "at composing header inversion with arithmetic, not at
parsing the header"; this diagnostic measures the first half of that sentence — whether ``v`` can be read back out of
the stream at the body positions, layer by layer.

**Target.**  At every body position (each query ``s(x_t)`` and each shown image ``s(y_t)``) the value ``v`` its
symbol stands for, ``π⁻¹(token − offset)``, from the episode's relabelling (``Episodes.latent["relabel"]``, which the
task draws; the task's ``body_start`` and ``offset`` say where the body starts and where its symbols begin).

**Probe.**  Ridge regression (intercept; strength chosen on an inner split of the training sequences) from
``blocks.{l}.hook_resid_post`` to the one-hot ``v``; its argmax is the read value.  Fitted on the first 70% of the
sequences, scored on the rest (split by sequence): held-out accuracy per layer.

**Nulls.**  ``chance`` — the most frequent value among the held-out targets (≈ 1/n); ``token_only`` — the best read
of ``v`` from the body token alone (each token's most frequent value on the training sequences): 1 where the
symbols' meaning is fixed (integers, one fixed relabelling), ≈ chance where it is drawn per episode, so an accuracy
above it is information the token does not carry (the header's); ``untrained`` — the same probe on the model at
initialisation, which reads whatever a random network's stream mixes of the header.

A task without a relabelling header (no ``relabel`` latent, no ``body_start``) is declined ("task … has no …").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..tasks.base import Episodes, Task
from . import _plot
from ._common import GEOMETRY_SEED, clean, device_of, episodes_for, eval_mode, inputs_on, n_layers, not_applicable
from .readouts import TRAIN_FRAC, ridge_fit, split_rows
from .registry import Diagnostic, Reading, needs, register

__all__ = ["header_probe", "header_probe_figure", "body_values"]


def body_values(task: Task, episodes: Episodes) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(mask [B, T] bool, values [B, T] long)``: the body positions and the value each one's symbol stands for,
    ``π⁻¹(token − offset)`` (−1 off the body); ``None`` for a task without a relabelling header."""
    latent = getattr(episodes, "latent", None) or {}
    relabel = latent.get("relabel") if isinstance(latent, dict) else None
    start, offset, n = getattr(task, "body_start", None), getattr(task, "offset", None), getattr(task, "n", None)
    if relabel is None or start is None or offset is None or n is None:
        return None
    tokens = episodes.tokens
    B, T = tokens.shape
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[:, int(start):] = True
    symbol = (tokens - int(offset)).clamp(0, int(n) - 1)
    inverse = torch.argsort(relabel.long(), dim=1)  # π⁻¹: symbol index → value
    values = torch.where(mask, inverse.gather(1, symbol), torch.full_like(tokens, -1))
    return mask, values


def _streams(model: torch.nn.Module, episodes: Episodes, mask: torch.Tensor, chunk: int = 128) -> list[torch.Tensor]:
    """Each layer's ``hook_resid_post`` at the ``mask`` positions, ``[N, d]`` float64 (sequence, position order)."""
    names = [f"blocks.{l}.hook_resid_post" for l in range(n_layers(model))]
    dev = device_of(model)
    acts: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    with eval_mode(model):
        for i, part in enumerate(episodes.chunks(chunk)):
            _, cache = model.run_with_cache(**inputs_on(part, dev), names=names)
            m = mask[i * chunk : i * chunk + part.tokens.shape[0]].to(dev)
            for name in names:
                acts[name].append(cache[name][m].flatten(1).double().cpu())
    return [torch.cat(acts[name]) for name in names]


def _probe(X: torch.Tensor, v: torch.Tensor, n: int, seq: torch.Tensor, train: torch.Tensor,
           test: torch.Tensor) -> float:
    """Held-out accuracy of the ridge probe from ``X`` to the one-hot of ``v`` (argmax read)."""
    Y = torch.nn.functional.one_hot(v, n).double()
    fit = ridge_fit(X[train], Y[train], seq[train])
    return float((fit.predict(X[test]).argmax(-1) == v[test]).double().mean())


def _token_only(token: torch.Tensor, v: torch.Tensor, n: int, train: torch.Tensor, test: torch.Tensor) -> float:
    """Held-out accuracy of reading ``v`` from the token alone: each token's most frequent training value (the
    overall most frequent for a token unseen in training)."""
    top = int(v.max()) + 1 if len(v) else 1
    vocab = int(token.max()) + 1
    counts = torch.zeros(vocab, max(n, top), dtype=torch.float64)
    counts.index_put_((token[train], v[train]), torch.ones(int(train.sum()), dtype=torch.float64), accumulate=True)
    overall = int(counts.sum(0).argmax())
    read = torch.where(counts.sum(1) > 0, counts.argmax(1), torch.full((vocab,), overall))
    return float((read[token[test]] == v[test]).double().mean())


@needs("blocks.{l}.hook_resid_post")
def header_probe(model: torch.nn.Module, task: Task, *, untrained: torch.nn.Module | None = None, n: int = 256,
                 seed: int = GEOMETRY_SEED, episodes: Episodes | None = None,
                 train_frac: float = TRAIN_FRAC) -> dict[str, Any]:
    """Per layer, the held-out accuracy of a linear probe reading each body symbol's value ``π⁻¹(symbol)`` from
    the stream, beside chance, the token-only read-out and the untrained model (module docstring)."""
    ep = episodes_for(task, n, seed, episodes)
    got = body_values(task, ep)
    if got is None:
        return not_applicable(f"task {task.name!r} has no relabelling header (no Episodes.latent['relabel'] and "
                              "body_start): nothing to read back")
    mask, values = got
    size = int(getattr(task, "n"))
    seq, pos = mask.nonzero(as_tuple=True)
    v = values[mask]
    token = ep.tokens[mask]
    train, test = split_rows(seq, train_frac)
    chance = float(torch.bincount(v[test], minlength=size).max()) / max(1, int(test.sum()))
    token_only = _token_only(token, v, size, train, test)
    layers = [{"layer": l, "accuracy": _probe(X, v, size, seq, train, test)}
              for l, X in enumerate(_streams(model, ep, mask))]
    if untrained is not None:
        for lay, X in zip(layers, _streams(untrained, ep, mask)):
            lay["untrained_accuracy"] = _probe(X, v, size, seq, train, test)
    best = max(layers, key=lambda r: r["accuracy"])
    summary = {
        "best_layer": best["layer"],
        "best_accuracy": best["accuracy"],
        "final_accuracy": layers[-1]["accuracy"],
        "best_accuracy_untrained": max((r["untrained_accuracy"] for r in layers), default=None)
        if untrained is not None else None,
        "chance_accuracy": chance,
        "token_only_accuracy": token_only,
    }
    return clean({
        "applicable": True,
        "definition": "ridge from blocks.l.hook_resid_post at the body positions to the one-hot value pi^-1(symbol) "
                      "each symbol stands for (argmax read), fitted on 70% of the sequences, held-out accuracy; nulls: "
                      "chance (most frequent held-out value), the token alone, the untrained model",
        "symbols": getattr(task, "symbols", None),
        "n_points": int(len(v)),
        "n_train_points": int(train.sum()),
        "layers": layers,
        "summary": summary,
    })


def header_probe_figure(result: dict[str, Any], path: str | Path) -> Path:
    """Held-out accuracy of the value probe per layer: trained, untrained, the token alone, chance."""
    if not result.get("applicable", False):
        return _plot.placeholder(f"header_probe: {result.get('reason', 'not applicable')}", path)
    fig, axes = _plot.figure(1, 1, w=5.4, h=4.0)
    ax = axes[0, 0]
    layers = result["layers"]
    xs = [r["layer"] for r in layers]
    s = result["summary"]
    ax.plot(xs, _plot.nan(r["accuracy"] for r in layers), "o-", label="probe (trained)")
    if "untrained_accuracy" in layers[0]:
        ax.plot(xs, _plot.nan(r["untrained_accuracy"] for r in layers), "x--", color="0.5", label="untrained")
    ax.axhline(s["token_only_accuracy"], color="C3", ls="--", label="the token alone")
    ax.axhline(s["chance_accuracy"], color="C1", ls=":", label="chance")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xticks(xs)
    ax.set_xlabel("layer")
    ax.set_ylabel("held-out accuracy of π⁻¹(symbol)")
    ax.set_title(f"Header probe ({result.get('symbols')} symbols)")
    ax.legend(fontsize=7)
    return _plot.save(fig, path)


MARGIN = 0.1
"""The probe reads the header where its best accuracy exceeds both the token-only read-out and the untrained
model's best by at least this much (accuracy points)."""


def reads_header(summary: dict[str, Any]) -> bool | None:
    """Whether a header probe's summary shows the symbols' meaning read from the header: its best accuracy at least
    :data:`MARGIN` above the token-only read-out and above the untrained model's best (``None`` where a number is
    missing)."""
    best, token, un = (summary.get(k) for k in ("best_accuracy", "token_only_accuracy", "best_accuracy_untrained"))
    if best is None or token is None:
        return None
    return best >= token + MARGIN and (un is None or best >= un + MARGIN)


def _interpret(r: dict[str, Any]) -> list[Reading]:
    s = r["summary"]
    fixed_meaning = s["token_only_accuracy"] >= 1.0 - MARGIN  # integers, one fixed relabelling: nothing to parse
    ok = None if fixed_meaning else reads_header(s)
    meaning = (f"a linear probe of layer {s['best_layer']} reads each body symbol's value to {s['best_accuracy']:.0%} "
               f"held out (the token alone {s['token_only_accuracy']:.0%}, chance {s['chance_accuracy']:.0%})")
    flags = ("the token alone gives the value (the symbols' meaning is fixed): there is no header to parse",) \
        if fixed_meaning else ()
    return [Reading("header_probe.best_accuracy", s["best_accuracy"], "the token alone", s["token_only_accuracy"],
                    f"at least {MARGIN:.0%} above the token alone and the untrained model: the header is parsed", ok,
                    "MS5", meaning, flags)]


register(Diagnostic("header_probe", header_probe, header_probe_figure, _interpret, untrained=True, order=62,
                    claims=("MS5",)))
