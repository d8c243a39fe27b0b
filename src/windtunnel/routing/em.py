r"""EM-like training against SGD on the sticky chain, with the control that separates "EM" from "bigger steps".

Paper II (arXiv 2512.22473, §5.2) trains its single attention layer (``models.attention_layer``)
full-batch on one sticky-chain sequence and reports that an "EM-like" schedule — the same
gradient, but a 10× learning rate on the value matrix ``W_V`` — converges ≈2.3× faster than SGD.
A larger learning rate on some parameters is also a larger step, so the comparison alone cannot say
whether the *split* (values fast, routing slow) or the *size* is what helps.  The arms here:

==================  =========================================================================
``sgd``             ``θ ← θ − η g`` on every parameter (``η = lr``)
``em_like``         ``η_V = value_lr`` on ``W_V``, ``η = lr`` elsewhere, applied together
``sgd_matched``     the SGD direction ``g`` scaled so that each step has the *norm of the
                    em_like step on the same gradient*: ``Δ = −(‖Δ_em‖/‖g‖) g`` (the control)
``sgd_fast``        ``value_lr`` on every parameter (the "just bigger steps" arm)
``alternating``     true alternation: even steps move only ``W_V`` (``value_lr``, the M-step),
                    odd steps only ``W_Q, W_K, W_O`` (``lr``, routing); a step is one gradient
==================  =========================================================================

**The deep variant** (``EMSetup.deep()``, the paper's second experiment): a 4-layer, 4-head
transformer (``d_model = 64``, our ``transformer``) trained with AdamW (LR 3e-4, cosine to 0, 2000
full-batch steps, weight decay 0.01).  The arms are the same with the Adam direction
``m̂/(√v̂+ε)`` in place of ``g`` (one Adam state per run, fed the same gradients whatever the arm):
``sgd`` is then plain AdamW, ``em_like`` multiplies the step of the value projections (the ``W_V``
rows of every block) by ``value_lr/lr``, ``sgd_matched`` rescales the whole AdamW step to the
em_like step's norm, ``sgd_fast`` multiplies every step.  Everything else the paper's deep model has
(LayerNorm, dropout 0.1, gradient clipping at norm 1) is our transformer's own by default (RMSNorm,
no dropout, no clipping, rotary positions); ``EMSetup.authors_deep()`` (``--deep --authors-model``)
restores all of them and drops the positions as the papers' model does, the control for whether they
decide between memorising the one sequence and generalising.  With dropout the loss and its gradient
come from the dropout forward pass; every Bayes gap is measured without dropout.  Attention dropout
on a 2000-token full batch has no fused CPU kernel, so a seed takes over an hour on one CPU core (its
``seconds`` in ``runs.jsonl``); every run writes its state as it goes and a killed one resumes.

Every arm of a seed starts from the same weights on the same sequence (``torch.manual_seed(seed)``
before building; the training sequence is ``task.sample(1, seed)``, the held-out one
``task.sample(1, seed + HELD_OUT)``), so arms are compared *paired*.  Progress is the Bayes gap
``KL(posterior ‖ model)`` in bits against the exact filtering posterior (``metrics.bayes_gap``), on
the training sequence at every step and on the held-out sequence every ``eval_every`` steps.

Speed: the threshold is SGD's mean final training gap (the paper's criterion, "the loss SGD ends
at", in bits above the Bayes floor instead of raw loss; the deep variant, which memorises its one
training sequence — its Bayes gap bottoms out within ~50 steps, then rises — uses the raw training
cross-entropy, ``criterion = "loss"``, and reports the best held-out gap and its step); ``steps_to_threshold`` is the first step
at or below it (``None``: not reached in the budget).  The speed-up of an arm is the paired ratio
``steps_sgd / steps_arm`` over the seeds where the arm reached it (SGD's count censored at the
budget where it did not: a lower bound), with a Student-t interval on its logarithm; and EM-like
is compared directly with ``sgd_matched``, the question the paper's experiment could not answer.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..evaluation import metrics
from .. import models, tasks
from ..errors import InvalidValue, is_int
from ..models.attention_layer import attention_layer
from ..evaluation.stats import json_safe, mean_std, paired
from ..tasks.base import entropy_bits
from .law import scored_cross_entropy

ARMS = ("sgd", "em_like", "sgd_matched", "sgd_fast", "alternating")
MODELS = ("single", "deep")
CRITERIA = ("bayes_gap", "loss")
PAPER_SEEDS = (42, 2024, 1337, 7777, 9999)
HELD_OUT = 1_000_003


@dataclass(frozen=True)
class EMSetup:
    """The experiment: the paper's chain, model, learning rates and budget (defaults = Paper II §5.2)."""

    n_symbols: int = 8
    self_prob: float = 0.3
    dim: int = 20
    length: int = 2000
    means_seed: int = 0
    steps: int = 1000
    lr: float = 0.01
    value_lr: float = 0.1
    init_std: float = 0.1
    seeds: tuple[int, ...] = PAPER_SEEDS
    arms: tuple[str, ...] = ARMS
    eval_every: int = 10
    #: ``single``: the paper's one attention layer, plain gradient steps; ``deep``: a 4×4 transformer, AdamW + cosine
    model: str = "single"
    weight_decay: float = 0.0
    #: what "progress" means for the threshold: ``bayes_gap`` (KL to the exact posterior) or ``loss``
    #: (the training cross-entropy, the paper's own criterion; the deep variant, which memorises the
    #: training sequence, needs it: its Bayes gap rises again after a few dozen steps)
    criterion: str = "bayes_gap"
    #: deep variant only: the transformer's normalisation (``rms`` or ``layer``), dropout rate and
    #: position encoding (the papers' deep model has none: the input is a linear map of the features)
    norm: str = "rms"
    dropout: float = 0.0
    pos: str = "rotary"
    #: clip the gradient to this global norm before the update (``None``: no clipping)
    clip: float | None = None
    #: where the arms train (``cpu``, ``cuda``, ``auto``); not part of the experiment: a run is the same run
    #: on any device (to float rounding and the dropout masks' stream), so finished runs are kept across devices
    device: str = "cpu"

    @classmethod
    def deep(cls, **changes: Any) -> "EMSetup":
        """The paper's deep variant: 4 layers × 4 heads, d = 64, AdamW 3e-4 (W_V 3e-3) with cosine, 2000 steps."""
        return cls(**{"model": "deep", "steps": 2000, "lr": 3e-4, "value_lr": 3e-3, "weight_decay": 0.01,
                      "eval_every": 50, "criterion": "loss", **changes})

    @classmethod
    def authors_deep(cls, **changes: Any) -> "EMSetup":
        """The deep variant as the papers' own code builds it: LayerNorm, dropout 0.1 (on the attention
        weights and the MLP), no position encoding, gradient clipping at norm 1, and one arm (plain AdamW —
        the code has no EM-like arm)."""
        return cls.deep(**{"norm": "layer", "dropout": 0.1, "pos": "none", "clip": 1.0, "arms": ("sgd",), **changes})

    def validate(self) -> None:
        for name in ("steps", "eval_every", "length"):
            v = getattr(self, name)
            if not is_int(v) or v < 1:
                raise InvalidValue(f"invalid {name}: must be a positive integer, got {v!r}")
        for name in ("lr", "value_lr", "init_std"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise InvalidValue(f"invalid {name}: must be a positive number, got {v!r}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise InvalidValue(f"invalid seeds: need distinct seeds, got {list(self.seeds)!r}")
        if self.criterion not in CRITERIA:
            raise InvalidValue(f"invalid criterion: choose from {', '.join(CRITERIA)}, got {self.criterion!r}")
        if self.model not in MODELS:
            raise InvalidValue(f"invalid model: choose from {', '.join(MODELS)}, got {self.model!r}")
        if not isinstance(self.weight_decay, (int, float)) or not 0 <= self.weight_decay < 1:
            raise InvalidValue(f"invalid weight_decay: must be in [0, 1), got {self.weight_decay!r}")
        if self.norm not in ("rms", "layer"):
            raise InvalidValue(f"invalid norm: choose from rms, layer, got {self.norm!r}")
        if not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise InvalidValue(f"invalid dropout: must be in [0, 1), got {self.dropout!r}")
        if self.pos not in ("rotary", "learned", "alibi", "none"):
            raise InvalidValue(f"invalid pos: choose from rotary, learned, alibi, none, got {self.pos!r}")
        if self.model == "single" and (self.norm != "rms" or self.dropout or self.pos != "rotary"):
            raise InvalidValue("invalid norm/dropout/pos: the single attention layer has none of them; use the deep variant")
        if self.clip is not None and (not isinstance(self.clip, (int, float)) or not math.isfinite(self.clip)
                                      or self.clip <= 0):
            raise InvalidValue(f"invalid clip: must be a positive number or null, got {self.clip!r}")
        if self.device not in ("cpu", "cuda", "auto"):
            raise InvalidValue(f"invalid device: choose from cpu, cuda, auto, got {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise InvalidValue("invalid device: cuda asked for, but this machine has no CUDA GPU")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or "sgd" not in self.arms:
            raise InvalidValue(f"invalid arms: choose from {', '.join(ARMS)} (sgd included, it sets the threshold)")

    def task(self) -> Any:
        return tasks.make("sticky", n_symbols=self.n_symbols, self_prob=self.self_prob, dim=self.dim,
                          length=self.length, means_seed=self.means_seed)


def build_model(task: Any, setup: EMSetup) -> torch.nn.Module:
    """The setup's network, freshly initialised from the global torch seed."""
    if setup.model == "deep":
        return models.make("transformer", task, d_model=64, n_layers=4, n_heads=4, max_len=task.seq_len,
                           norm=setup.norm, dropout=setup.dropout, pos=setup.pos)
    return attention_layer(task, init_std=setup.init_std)


def value_masks(model: torch.nn.Module) -> list[tuple[torch.nn.Parameter, torch.Tensor]]:
    """Every trained parameter with a boolean mask of its *value* entries (``W_V``; the rest routes:
    ``W_Q, W_K, W_O`` of the single layer; everything but the ``W_V`` rows of the fused ``qkv`` in a
    transformer)."""
    if hasattr(model, "W_O"):  # the single attention layer
        attn = model.blocks[0].attn
        value = attn.W_V.weight
        params = [value, attn.W_Q.weight, attn.W_K.weight, model.W_O.weight]
        return [(p, torch.full_like(p, p is value, dtype=torch.bool)) for p in params]
    out = []
    v_rows = model.config.kv_heads * model.config.head_dim
    values = {id(block.attn.qkv.weight) for block in model.blocks}
    for p in model.parameters():
        mask = torch.zeros_like(p, dtype=torch.bool)
        if id(p) in values:
            mask[-v_rows:] = True  # the last rows of the fused projection make v
        out.append((p, mask))
    return out


def _step_sizes(arm: str, step: int, setup: EMSetup) -> Callable[[dict[str, float]], dict[str, float]]:
    """The learning rate of the value and routing entries at this step, from the squared norms of
    the step direction on each (``sgd_matched`` needs them: a closure)."""
    lr, fast = setup.lr, setup.value_lr

    def sizes(sq: dict[str, float]) -> dict[str, float]:
        if arm == "sgd":
            return {"value": lr, "routing": lr}
        if arm == "em_like":
            return {"value": fast, "routing": lr}
        if arm == "sgd_fast":
            return {"value": fast, "routing": fast}
        if arm == "alternating":
            return {"value": fast, "routing": 0.0} if step % 2 == 0 else {"value": 0.0, "routing": lr}
        if arm == "sgd_matched":
            em_norm = math.sqrt(fast**2 * sq["value"] + lr**2 * sq["routing"])
            g_norm = math.sqrt(sq["value"] + sq["routing"])
            eta = em_norm / g_norm if g_norm > 0 else lr
            return {"value": eta, "routing": eta}
        raise InvalidValue(f"unknown arm {arm!r}")

    return sizes


class _Adam:
    """Adam's direction ``m̂ / (√v̂ + ε)`` (β = 0.9, 0.999; ε = 1e-8), without its learning rate."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def direction(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        self.t += 1
        out = []
        for m, v, g in zip(self.m, self.v, grads):
            m.mul_(0.9).add_(g, alpha=0.1)
            v.mul_(0.999).addcmul_(g, g, value=0.001)
            out.append((m / (1 - 0.9**self.t)) / ((v / (1 - 0.999**self.t)).sqrt() + 1e-8))
        return out


def _record_key(setup: EMSetup) -> dict[str, Any]:
    """What makes two runs the same run: the setup without its seeds, arms and device (JSON-safe)."""
    return json_safe({k: v for k, v in asdict(setup).items() if k not in ("seeds", "arms", "device")})


def _load_partial(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The state in ``path`` if it is this run's; ``None`` for another run's leftover or a damaged file (the
    run then starts over: the file only ever saves time).  Tensors and JSON only: nothing in the file can run code."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = json.loads((f.metadata() or {}).get("state", "null"))
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except (OSError, SafetensorError, ValueError, json.JSONDecodeError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None
    model = {name.removeprefix("model."): t for name, t in tensors.items() if name.startswith("model.")}
    adam = meta.pop("adam_t")
    if adam is not None:
        n = sum(name.startswith("adam.m.") for name in tensors)
        adam = {"t": adam, "m": [tensors[f"adam.m.{i}"] for i in range(n)], "v": [tensors[f"adam.v.{i}"] for i in range(n)]}
    return {**meta, "model": model, "adam": adam}


def _save_partial(path: Path, state: dict[str, Any]) -> None:
    """One safetensors file — the weights and Adam moments as tensors, the rest as JSON in its header — replaced
    atomically: a kill while writing leaves the previous one whole."""
    from safetensors.torch import save

    from ..io import write_bytes_atomic

    tensors = {f"model.{k}": v.contiguous() for k, v in state["model"].items()}
    adam = state["adam"]
    if adam is not None:
        tensors.update({f"adam.m.{i}": m.contiguous() for i, m in enumerate(adam["m"])})
        tensors.update({f"adam.v.{i}": v.contiguous() for i, v in enumerate(adam["v"])})
    meta = {k: v for k, v in state.items() if k not in ("model", "adam")}
    meta["adam_t"] = None if adam is None else adam["t"]
    write_bytes_atomic(path, save(tensors, metadata={"state": json.dumps(meta)}))


def train_arm(arm: str, seed: int, setup: EMSetup, partial: Path | None = None) -> dict[str, Any]:
    """Train one arm on one seed; returns the training-gap curve (every step), the held-out curve,
    the update norms and the final entropies (model vs exact predictive, held-out, bits).

    ``partial``: a file the run's state is written to every ``eval_every`` steps (weights, the Adam moments,
    the random-number state that the dropout masks draw from, the curves so far) and resumed from when it holds
    this setup's run, so a killed run goes on from there and ends bitwise as an unbroken one would; it is
    deleted when the run ends."""
    from ..run.checkpoint import rng_state, set_rng_state
    from ..run.config import pick_device

    device = pick_device(setup.device)
    task = setup.task()
    train_ep = task.sample(1, seed=seed).to(device)
    held_ep = task.sample(1, seed=seed + HELD_OUT).to(device)
    torch.manual_seed(seed)
    model = build_model(task, setup).to(device)  # initialised on the CPU: the same weights on every device
    entries = value_masks(model)
    params = [p for p, _ in entries]
    adam = _Adam(params) if setup.model == "deep" else None
    gap, loss_bits, held, norms, held_steps = [], [], [], [], []
    key = {"arm": arm, "seed": seed, "setup": _record_key(setup)}
    start, spent = 0, 0.0
    state = _load_partial(partial, key) if partial is not None and partial.is_file() else None
    if state is not None:
        model.load_state_dict(state["model"])
        if adam is not None:
            adam.m = [m.to(device) for m in state["adam"]["m"]]
            adam.v = [v.to(device) for v in state["adam"]["v"]]
            adam.t = state["adam"]["t"]
        gap, loss_bits, held, norms, held_steps = (state[k] for k in ("gap", "loss", "held", "norms", "held_steps"))
        start, spent = state["step"], state["seconds"]
        set_rng_state(state["rng"])
    t0 = time.perf_counter() - spent
    for step in range(start, setup.steps + 1):
        if partial is not None and step > start and step % setup.eval_every == 0:
            _save_partial(partial, {
                "key": key, "step": step, "seconds": time.perf_counter() - t0, "rng": rng_state(),
                "model": {k: v.cpu() for k, v in model.state_dict().items()},
                "adam": None if adam is None else {"m": [m.cpu() for m in adam.m], "v": [v.cpu() for v in adam.v],
                                                   "t": adam.t},
                "gap": gap, "loss": loss_bits, "held": held, "norms": norms, "held_steps": held_steps})
        model.train()
        logits = model(**train_ep.inputs)
        loss = scored_cross_entropy(logits, train_ep)
        loss_bits.append(float(loss.detach()) / math.log(2))
        model.eval()  # gaps are the network's, not one dropout mask's
        if setup.dropout:
            with torch.no_grad():
                gap.append(metrics.bayes_gap(model(**train_ep.inputs), train_ep))
        else:
            gap.append(metrics.bayes_gap(logits.detach(), train_ep))
        if step % setup.eval_every == 0 or step == setup.steps:
            with torch.no_grad():
                held.append(metrics.bayes_gap(model(**held_ep.inputs), held_ep))
            held_steps.append(step)
        if step == setup.steps:
            break
        grads = list(torch.autograd.grad(loss, params))
        if setup.clip is not None:  # torch.nn.utils.clip_grad_norm_'s rule: scale by clip / (‖g‖ + 1e-6) when above
            total = math.sqrt(sum(float((g * g).sum()) for g in grads))
            if total > setup.clip:
                grads = [g * (setup.clip / (total + 1e-6)) for g in grads]
        directions = grads if adam is None else adam.direction(grads)
        sq = {"value": sum(float((u * u)[mask].sum()) for u, (_, mask) in zip(directions, entries)),
              "routing": sum(float((u * u)[~mask].sum()) for u, (_, mask) in zip(directions, entries))}
        eta = _step_sizes(arm, step, setup)(sq)
        if adam is not None:  # AdamW's cosine schedule, to 0 at the budget
            decay = 0.5 * (1 + math.cos(math.pi * step / setup.steps))
            eta = {k: v * decay for k, v in eta.items()}
        with torch.no_grad():
            for (p, mask), u in zip(entries, directions):
                rate = torch.where(mask, eta["value"], eta["routing"])
                if setup.weight_decay:
                    p.sub_(rate * setup.weight_decay * p)
                p.sub_(rate * u)
        norms.append(math.sqrt(eta["value"] ** 2 * sq["value"] + eta["routing"] ** 2 * sq["routing"]))
        if not math.isfinite(gap[-1]):
            break
    with torch.no_grad():
        q = torch.softmax(model(**held_ep.inputs).double(), -1)[held_ep.mask]
    if partial is not None:
        partial.unlink(missing_ok=True)
    return {
        "arm": arm, "seed": seed, "gap": gap, "loss": loss_bits, "held_out_gap": held, "held_out_steps": held_steps,
        "final_loss": loss_bits[-1], "best_held_out_gap": min(held), "best_held_out_step": held_steps[held.index(min(held))],
        "update_norm_mean": sum(norms) / max(1, len(norms)),
        "final_gap": gap[-1], "final_held_out_gap": held[-1],
        "final_entropy_bits": float(entropy_bits(q).mean()),
        "exact_entropy_bits": float(entropy_bits(held_ep.posterior[held_ep.mask].double()).mean()),
        "seconds": time.perf_counter() - t0, "device": str(device),
    }


def steps_to(curve: list[float], threshold: float) -> int | None:
    """First step whose value is ``<= threshold`` (``None`` if none)."""
    return next((i for i, v in enumerate(curve) if v <= threshold), None)


def summarise(runs: list[dict[str, Any]], setup: EMSetup) -> dict[str, Any]:
    """Per arm: steps to the threshold, paired speed-up against SGD, final gaps and their paired
    differences against SGD, with Student-t 95% intervals over seeds."""
    by = {(r["arm"], r["seed"]): r for r in runs}
    seeds = [s for s in setup.seeds if all((a, s) in by for a in setup.arms)]
    curve, final = ("gap", "final_gap") if setup.criterion == "bayes_gap" else ("loss", "final_loss")
    threshold = mean_std([by[("sgd", s)][final] for s in seeds])["mean"]
    out: dict[str, Any] = {"threshold_bits": threshold, "criterion": setup.criterion, "seeds": seeds, "arms": {}}

    def reach(arm: str, s: int) -> int | None:
        return steps_to(by[(arm, s)][curve], threshold)

    # SGD sets the threshold with its *mean* final gap, so on some seeds it does not reach it within
    # the budget: its step count is then censored at the budget, which makes that seed's speed-up a
    # lower bound (flagged in "censored")
    sgd_steps = {s: reach("sgd", s) or setup.steps for s in seeds}
    censored = [s for s in seeds if reach("sgd", s) is None]
    out["sgd_censored_seeds"] = censored
    for arm in setup.arms:
        steps = {s: reach(arm, s) for s in seeds}
        both = [s for s in seeds if steps[s]]
        log_ratio = mean_std([math.log(sgd_steps[s] / steps[s]) for s in both])
        speedup = {
            "n": len(both),
            "geometric_mean": math.exp(log_ratio["mean"]) if both else None,
            "ci95": [math.exp(x) for x in log_ratio["ci95"]] if log_ratio["ci95"] else None,
            "per_seed": {str(s): (sgd_steps[s] / steps[s]) if s in both else None for s in seeds},
            "lower_bound_seeds": [s for s in both if s in censored],
        }
        out["arms"][arm] = {
            "steps_to_threshold": {str(s): steps[s] for s in seeds},
            "reached": sum(steps[s] is not None for s in seeds),
            "speedup_vs_sgd": speedup,
            "final_gap": mean_std([by[(arm, s)]["final_gap"] for s in seeds]),
            "final_criterion": mean_std([by[(arm, s)][final] for s in seeds]),
            "best_held_out_gap": mean_std([by[(arm, s)].get("best_held_out_gap", math.nan) for s in seeds]),
            "best_held_out_step": mean_std([by[(arm, s)].get("best_held_out_step", math.nan) for s in seeds]),
            "final_held_out_gap": mean_std([by[(arm, s)]["final_held_out_gap"] for s in seeds]),
            "held_out_gap_minus_sgd": paired([by[(arm, s)]["final_held_out_gap"] for s in seeds],
                                             [by[("sgd", s)]["final_held_out_gap"] for s in seeds]),
            "final_entropy_bits": mean_std([by[(arm, s)]["final_entropy_bits"] for s in seeds]),
            "exact_entropy_bits": mean_std([by[(arm, s)]["exact_entropy_bits"] for s in seeds]),
            "update_norm_mean": mean_std([by[(arm, s)]["update_norm_mean"] for s in seeds]),
        }
    if {"em_like", "sgd_matched"} <= set(setup.arms):  # the question: does EM-like beat the same-size SGD step?
        em_s = {s: reach("em_like", s) for s in seeds}
        mt_s = {s: reach("sgd_matched", s) for s in seeds}
        ok = [s for s in seeds if em_s[s] and mt_s[s]]
        lr = mean_std([math.log(mt_s[s] / em_s[s]) for s in ok])
        out["em_like_vs_sgd_matched"] = {
            "speedup": math.exp(lr["mean"]) if ok else None,
            "ci95": [math.exp(x) for x in lr["ci95"]] if lr["ci95"] else None, "n": len(ok),
            "final_gap_difference": paired([by[("em_like", s)][final] for s in seeds],
                                           [by[("sgd_matched", s)][final] for s in seeds]),
        }
    return out


def _fmt_ci(m: dict[str, Any], f: str = ".4f") -> str:
    if m.get("ci95"):
        return f"{m['mean']:{f}} [{m['ci95'][0]:{f}}, {m['ci95'][1]:{f}}]"
    return f"{m['mean']:{f}}"


def seed_steps(m: dict[str, Any]) -> str:
    """The per-seed steps of a :func:`mean_std` record, ``50/0/0``."""
    return "/".join("–" if v is None or v != v else f"{v:.0f}" for v in m["values"])


def markdown(summary: dict[str, Any], setup: EMSetup, wall_s: float) -> str:
    """The table: one row per arm."""
    if setup.model == "deep":
        norm = {"rms": "RMSNorm", "layer": "LayerNorm"}[setup.norm]
        clip = f", gradient clipped at norm {setup.clip:g}" if setup.clip is not None else ""
        model = (f"Deep variant: transformer 4 layers × 4 heads, d = 64, {norm}, dropout {setup.dropout:g}, positions "
                 f"{setup.pos}; AdamW "
                 f"(β 0.9/0.999, weight decay {setup.weight_decay}{clip}) with cosine to 0 — the `sgd` arm is plain "
                 "AdamW, the others rescale its step")
    else:
        model = f"Single attention layer (W_Q, W_K 20×10, W_V 20×15, W_O 15×8, init N(0, {setup.init_std}²))"
    by_loss = summary.get("criterion", "bayes_gap") == "loss"
    what = "cross-entropy (the paper's criterion)" if by_loss else "Bayes gap"
    loss_cols = " final loss, train (bits) | best held-out gap (each seed's step) |" if by_loss else ""
    lines = [
        "# EM-like vs SGD on the sticky chain (Paper II §5.2), with the step-size control",
        "",
        f"{model}, full batch on one sequence of T = {setup.length}, {setup.steps} steps, lr {setup.lr}, value lr "
        f"{setup.value_lr}; seeds {', '.join(map(str, summary['seeds']))} (paired: same data and initial weights "
        f"across arms). Threshold = SGD's mean final training {what} = {summary['threshold_bits']:.4f} bits. "
        "Intervals: Student-t 95% over seeds (speed-up: on the log ratio, seeds where both reached the threshold).",
        "",
        f"| arm | reached | speed-up vs SGD |{loss_cols} final gap, train (bits) | final gap, held-out (bits) | "
        "held-out − SGD | entropy, model / exact (bits) | mean step norm |",
        "|---|---|---|" + "---|" * (2 if by_loss else 0) + "---|---|---|---|---|",
    ]
    for arm, a in summary["arms"].items():
        sp = a["speedup_vs_sgd"]
        sp_s = "–" if sp["geometric_mean"] is None else (
            f"{sp['geometric_mean']:.2f}×" + (f" [{sp['ci95'][0]:.2f}, {sp['ci95'][1]:.2f}]" if sp["ci95"] else "")
            + (f" (n={sp['n']})" if sp["n"] < len(summary["seeds"]) else ""))
        # each seed's step, not their mean: a mean of evaluated steps need not be one
        extra = (f" {_fmt_ci(a['final_criterion'])} | {a['best_held_out_gap']['mean']:.4f} "
                 f"(steps {seed_steps(a['best_held_out_step'])}) |") if by_loss else ""
        lines.append(
            f"| {arm} | {a['reached']}/{len(summary['seeds'])} | {sp_s} |{extra} {_fmt_ci(a['final_gap'])} | "
            f"{_fmt_ci(a['final_held_out_gap'])} | {_fmt_ci(a['held_out_gap_minus_sgd'], '+.4f')} | "
            f"{a['final_entropy_bits']['mean']:.3f} / {a['exact_entropy_bits']['mean']:.3f} | "
            f"{a['update_norm_mean']['mean']:.4f} |")
    if summary.get("sgd_censored_seeds"):
        lines += ["", f"SGD did not reach its own mean final {'loss' if by_loss else 'gap'} within {setup.steps} steps on seeds "
                  f"{', '.join(map(str, summary['sgd_censored_seeds']))}: its step count there is the budget, so "
                  "those seeds' speed-ups are lower bounds."]
    c = summary.get("em_like_vs_sgd_matched")
    if c and c["speedup"] is not None:
        ci = f" [{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}]" if c["ci95"] else ""
        d = c["final_gap_difference"]
        lines += ["", f"**EM-like against the same-size SGD step** (`sgd_matched`, paired): EM-like reaches the "
                  f"threshold {c['speedup']:.2f}×{ci} as fast (n={c['n']}); final training {'loss' if by_loss else 'gap'} EM-like − matched = "
                  f"{_fmt_ci(d, '+.4f')} bits."]
    deep = " --deep" if setup.model == "deep" else ""
    if (setup.norm, setup.dropout, setup.clip, setup.pos) == ("layer", 0.1, 1.0, "none"):
        deep += " --authors-model"
    arms = "" if tuple(setup.arms) == ARMS else " --arms " + " ".join(setup.arms)
    lines += ["", f"Wall time: {wall_s:.0f} s (summed over runs). Command: `windtunnel routing em{deep}` "
              f"(`--steps {setup.steps} --seeds {len(setup.seeds)}{arms}`)."]
    return "\n".join(lines) + "\n"


def figure(runs: list[dict[str, Any]], setup: EMSetup, summary: dict[str, Any], path: Path) -> Path:
    """Training Bayes gap against step, per arm (median over seeds, band: min to max), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..evaluation.log_axis import log_scale, loggable

    fig, ax = plt.subplots(figsize=(7, 4.2))
    medians = []
    for arm in setup.arms:
        curves = [r["gap" if setup.criterion == "bayes_gap" else "loss"] for r in runs if r["arm"] == arm]
        n = min(len(c) for c in curves)
        y = np.array([c[:n] for c in curves], dtype=float)
        x = np.arange(n)
        medians.append(np.median(y, 0).tolist())
        line, = ax.plot(x, loggable(medians[-1]), label=arm)
        ax.fill_between(x, loggable(y.min(0)), loggable(y.max(0)), color=line.get_color(), alpha=0.15)
    threshold = loggable([summary["threshold_bits"]])[0]
    if not np.isnan(threshold):  # a level a log axis can show
        ax.axhline(threshold, color="k", lw=0.8, ls="--", label="threshold (SGD's mean final)")
    log_scale(ax, *medians)  # an arm that diverged has NaN or infinite gaps
    ax.set_xlabel("step (one full-batch gradient)")
    ax.set_ylabel(("Bayes gap" if setup.criterion == "bayes_gap" else "cross-entropy") + ", training sequence (bits)")
    ax.set_title(f"EM-like vs SGD, sticky chain ({setup.model}): median over seeds, band min–max")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_em(setup: EMSetup, out: Path, progress: bool = True) -> Path:
    """Run every (arm, seed), resuming finished ones from ``out/runs.jsonl``; write ``em.json``,
    ``em.md`` and ``em.png`` into ``out``.  Returns the markdown path."""
    import json

    from ..io import write_text_atomic
    from ..run.runs import read_jsonl

    setup.validate()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InvalidValue(f"invalid out: {out} is a file")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    key = _record_key(setup)
    # a record written before a field existed ran at that field's default
    defaults = _record_key(EMSetup())
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if log.is_file():
        for r in read_jsonl(log):
            if isinstance(r.get("setup"), dict) and {**defaults, **r["setup"]} == key:
                done[(r["arm"], r["seed"])] = r
    for seed in setup.seeds:
        for arm in setup.arms:
            if (arm, seed) in done:
                continue
            r = train_arm(arm, seed, setup, partial=out / f"partial-{arm}-s{seed}.safetensors")
            r["setup"] = key
            with log.open("a") as f:  # one line per finished (arm, seed); a run in progress resumes from its partial file
                f.write(json.dumps(json_safe(r)) + "\n")
            done[(arm, seed)] = r
            if progress:
                print(f"  {arm:12s} seed {seed}: final gap {r['final_gap']:.4f} bits, loss {r['final_loss']:.4f} bits "
                      f"({r['seconds']:.0f} s)", flush=True)
    runs = [done[(a, s)] for s in setup.seeds for a in setup.arms]
    summary = summarise(runs, setup)
    wall = sum(r["seconds"] for r in runs)
    recorded = {k: v for k, v in asdict(setup).items() if k != "device"}  # each run records its own device
    write_text_atomic(out / "em.json", json.dumps(json_safe({"setup": recorded, "summary": summary,
                                                             "train_s": wall}), indent=1))
    figure(runs, setup, summary, out / "em.png")
    md = out / "em.md"
    write_text_atomic(md, markdown(summary, setup, wall))
    return md
