"""Batched evaluation against the exact posterior, with bootstrap intervals and length generalisation.

``evaluate(model, task)`` samples ``n`` fresh episodes (deterministic in ``seed``), runs the model
once per chunk of sequences under ``torch.inference_mode`` — a causal model's logits at every position
come from that single pass; prefixes are never re-run one by one, unlike the authors'
``evaluate_entropy_calibration`` (the authors' released evaluator) — and scores the concatenated logits
with ``windtunnel.evaluation.metrics.compute``.  The Bayes oracle is evaluated beside the model on the same
episodes: its errors must be ~0 and are reported, not asserted.

Uncertainty: a 95% percentile bootstrap over *sequences* (the independent unit), vectorised.
With resampling counts ``W [n_boot, n]`` (multinomial, ``Σ_b W_rb = n``) and an element map
``X [n, T]`` with mask ``M``, resample ``r`` of a pooled metric is
``Σ_t (W X)_rt / Σ_t (W M)_rt`` and its per-position curve ``(W X)_rt / (W M)_rt``;
``entropy_mae_curve`` is re-derived per resample from the re-averaged entropy curves
(the papers' average-over-sequences-first order).

Length generalisation (the papers' protocol): ``lengths=[K, …]``
evaluates ``task.with_length(K)`` for each ``K``, records metrics and curves per length, and
also the metrics over the positions *beyond* the training horizon only, since the aggregate over
all positions understates extrapolation error.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import torch

from . import metrics as M
from ..tasks.base import IGNORE, Episodes, Task, oracle as make_oracle
from ..errors import InvalidValue, UserError, is_int
from .stats import LEVEL, finite, mean_std, percentile_ci, resample_weights

__all__ = ["EvalResult", "aggregate", "bootstrap", "evaluate", "held_out_metrics", "mean_std", "percentile_ci", "predict", "resample_weights"]

def bootstrap(result: Mapping[str, Any], weights: torch.Tensor, level: float = LEVEL) -> dict[str, Any]:
    """Percentile intervals for every metric and curve of a ``metrics.compute`` result.

    ``weights [n_boot, B]`` from ``resample_weights``.  Returns ``{"metrics": {name: (lo, hi)},
    "curves": {name: (lo [T], hi [T])}}`` (curve names as in ``result["curves"]``).
    """
    masks = result["masks"]
    scored = masks["scored"].double()
    target = masks["target"].double()
    w = weights.double()
    counts = {"scored": w @ scored, "target": w @ target}  # [n_boot, T]
    which = {"accuracy": "target", "nll": "target", "bayes_nll": "target"}
    metric_samples: dict[str, torch.Tensor] = {}
    curve_samples: dict[str, torch.Tensor] = {}
    for name, x in result["per_position"].items():
        key = which.get(name, "scored")
        cnt = counts[key]
        s = w @ torch.nan_to_num(x, nan=0.0)
        total = cnt.sum(1)
        metric_samples[name] = torch.where(total > 0, s.sum(1) / total.clamp_min(1e-300), math.nan)
        curve_samples[name] = torch.where(cnt > 0, s / cnt.clamp_min(1e-300), math.nan)
    # the papers' number: re-average the entropy curves per resample, then mean |gap| over positions
    gap = curve_samples.pop("entropy_gap").abs()
    curve_samples["entropy_mae_curve"] = gap
    metric_samples["entropy_mae_curve"] = torch.nanmean(gap, dim=1)
    out_m = {k: tuple(float(v) for v in percentile_ci(s, level)) for k, s in metric_samples.items()}
    out_c = {k: percentile_ci(s, level) for k, s in curve_samples.items()}
    return {"metrics": out_m, "curves": out_c}


# --- the result object ---------------------------------------------------------------------------
def _num(x: Any) -> float | None:
    """JSON-safe float: NaN/inf → None."""
    return finite(float(x))


def _list(t: torch.Tensor | Sequence[float]) -> list[float | None]:
    return [_num(v) for v in (t.tolist() if isinstance(t, torch.Tensor) else t)]


def _unnum(x: Any) -> float:
    return math.nan if x is None else float(x)


@dataclass
class EvalResult:
    """What ``evaluate`` measured.  Metric values in bits (``tv``, ``infeasible_mass`` and
    ``accuracy`` are probabilities), with 95% percentile-bootstrap intervals over sequences.

    * ``metrics``: name → ``{"value": float, "ci": [lo, hi]}`` for every name in
      ``windtunnel.evaluation.metrics.METRICS``;
    * ``oracle``: the same for the Bayes oracle on the same episodes (errors ~0);
    * ``curves``: name → per-position list ``[T]`` (``None``/NaN at unscored positions): every metric
      plus ``entropy_model`` and ``entropy_bayes`` (mean entropies, bits);
      ``curve_ci``: name → ``{"lo": [T], "hi": [T]}``;
    * ``lengths``: ``K`` → ``{"seq_len", "metrics", "oracle", "curves", "curve_ci",
      "beyond_horizon"}`` for each evaluated length (``beyond_horizon``: metrics over positions
      ``≥ horizon["seq_len"]`` only; empty when there are none);
    * ``horizon``: the training length: ``{"param": name or None, "value": K or None,
      "seq_len": T}`` (token positions ``< seq_len`` were seen in training);
    * ``task``: ``{"name", "params"}``; ``model``: ``{"class", "n_params"}``; ``timings``:
      ``sample_s``, ``forward_s``, ``oracle_s``, ``metrics_s`` (incl. bootstrap), ``total_s`` and
      ``sequences_per_s`` (model forward throughput);
    * ``priors`` (a task whose latent comes from a finite pool, :meth:`~windtunnel.tasks.Task.unpooled`;
      empty otherwise): ``in_pool_vs_true_prior`` — the model on the same episodes scored against the
      posterior under the *true* prior instead of the pool's; ``task_oracle_vs_true_prior`` — the pool's
      Bayes oracle scored the same way (how far apart the two posteriors are); ``fresh`` — the model on
      episodes of the true prior (fresh latents), against their posterior; ``task_oracle_on_fresh`` — the
      pool's oracle there (the pool's posterior while some member agrees with the context, the true
      prior's once none does).  Memorising shows as a small distance to the pool's posterior and a large
      one on fresh latents; inferring as ``fresh`` near 0.  A KL against a posterior that gives a value
      zero mass is bounded only by the probability floor: compare such rows by total variation (``tv``).

    ``to_dict()`` is JSON-serialisable (NaN → null); ``EvalResult.from_dict`` reads it back.
    """

    task: dict[str, Any]
    n: int
    seed: int
    n_boot: int
    metrics: dict[str, dict[str, Any]]
    curves: dict[str, list[float]]
    curve_ci: dict[str, dict[str, list[float]]]
    oracle: dict[str, dict[str, Any]]
    horizon: dict[str, Any]
    lengths: dict[int, dict[str, Any]] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    priors: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def value(self, name: str) -> float:
        """Point estimate of metric ``name``."""
        return float(self.metrics[name]["value"])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (NaN and inf become ``None``; length keys become strings)."""

        def table(d: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
            return {k: {"value": _num(v["value"]), "ci": [_num(c) for c in v["ci"]]} for k, v in d.items()}

        def curves(d: Mapping[str, Sequence[float]]) -> dict[str, Any]:
            return {k: _list(v) for k, v in d.items()}

        def bands(d: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, Any]:
            return {k: {"lo": _list(v["lo"]), "hi": _list(v["hi"])} for k, v in d.items()}

        return {
            "task": self.task,
            "n": self.n,
            "seed": self.seed,
            "n_boot": self.n_boot,
            "level": LEVEL,
            "metrics": table(self.metrics),
            "oracle": table(self.oracle),
            "curves": curves(self.curves),
            "curve_ci": bands(self.curve_ci),
            "horizon": dict(self.horizon),
            "lengths": {
                str(k): {
                    "seq_len": v["seq_len"],
                    "metrics": table(v["metrics"]),
                    "oracle": table(v["oracle"]),
                    "beyond_horizon": table(v["beyond_horizon"]),
                    "curves": curves(v["curves"]),
                    "curve_ci": bands(v["curve_ci"]),
                }
                for k, v in self.lengths.items()
            },
            "model": dict(self.model),
            "timings": {k: _num(v) for k, v in self.timings.items()},
            "priors": {k: table(v) for k, v in self.priors.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EvalResult":
        """Inverse of ``to_dict`` (``None`` → NaN)."""

        def table(t: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
            return {k: {"value": _unnum(v["value"]), "ci": [_unnum(c) for c in v["ci"]]} for k, v in t.items()}

        def curves(c: Mapping[str, Any]) -> dict[str, list[float]]:
            return {k: [_unnum(x) for x in v] for k, v in c.items()}

        def bands(b: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
            return {k: {"lo": [_unnum(x) for x in v["lo"]], "hi": [_unnum(x) for x in v["hi"]]} for k, v in b.items()}

        return cls(
            task=dict(d["task"]),
            n=int(d["n"]),
            seed=int(d["seed"]),
            n_boot=int(d["n_boot"]),
            metrics=table(d["metrics"]),
            curves=curves(d["curves"]),
            curve_ci=bands(d.get("curve_ci", {})),
            oracle=table(d.get("oracle", {})),
            horizon=dict(d.get("horizon", {})),
            lengths={
                int(k): {
                    "seq_len": v["seq_len"],
                    "metrics": table(v["metrics"]),
                    "oracle": table(v.get("oracle", {})),
                    "beyond_horizon": table(v.get("beyond_horizon", {})),
                    "curves": curves(v["curves"]),
                    "curve_ci": bands(v.get("curve_ci", {})),
                }
                for k, v in d.get("lengths", {}).items()
            },
            model=dict(d.get("model", {})),
            timings={k: _unnum(v) for k, v in d.get("timings", {}).items()},
            priors={k: table(v) for k, v in d.get("priors", {}).items()},
        )


# --- running a model -----------------------------------------------------------------------------
def _model_device(model: torch.nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def _as_logits(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits") and isinstance(out.logits, torch.Tensor):
        return out.logits
    raise TypeError(f"model must return a logits tensor [B, T, C], got {type(out).__name__}")


class NonFiniteOutput(UserError, ValueError):
    """A model whose logits at scored positions are NaN or infinite: no metric of it means anything."""


def refuse_non_finite(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """:class:`NonFiniteOutput` if the logits at scored positions hold NaN, +inf, or a row with no finite
    value.  −inf is a legitimate zero probability (an oracle's log-posterior); the rest is a model that
    diverged (finite weights can still overflow)."""
    scored = logits[mask]
    if bool((scored.isnan() | scored.isposinf()).any() or (~scored.isfinite()).all(-1).any()):
        raise NonFiniteOutput("the model's outputs are not finite on these episodes (NaN or +inf logits at "
                              "scored positions): its weights have diverged; use an earlier checkpoint")


def predict(model: torch.nn.Module, episodes: Episodes, chunk: int = 256,
            device: torch.device | str | None = None) -> torch.Tensor:
    """Logits ``[B,T,C]`` (on CPU) of ``model`` on ``episodes``: one forward per chunk of ``chunk``
    sequences, in eval mode under ``torch.inference_mode`` (every module's train/eval flag is restored)."""
    if not isinstance(chunk, int) or chunk < 1:
        raise InvalidValue(f"invalid chunk: must be a positive integer, got {chunk!r}")
    dev = torch.device(device) if device is not None else _model_device(model)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        outs = []
        with torch.inference_mode():
            for part in episodes.chunks(chunk):
                inputs = {k: v.to(dev) for k, v in part.inputs.items()}
                outs.append(_as_logits(model(**inputs)).detach().cpu())
        logits = torch.cat(outs)
        refuse_non_finite(logits, episodes.mask)
        return logits
    finally:
        for m, mode in modes:
            m.training = mode


def _table(values: Mapping[str, float], cis: Mapping[str, tuple[float, float]]) -> dict[str, dict[str, Any]]:
    return {k: {"value": float(values[k]), "ci": [float(cis[k][0]), float(cis[k][1])]} for k in M.METRICS}


def _score(logits: torch.Tensor, episodes: Episodes, weights: torch.Tensor,
           task: Task | None = None) -> tuple[dict, dict, dict]:
    """(metrics table, curves, curve bands) of logits on episodes; with ``task``, also the metrics only some tasks
    define (:func:`_task_metrics`)."""
    res = M.compute(logits, episodes)
    boot = bootstrap(res, weights)
    table = _table(res["values"], boot["metrics"])
    curves = {k: v.tolist() for k, v in res["curves"].items()}
    bands = {k: {"lo": lo.tolist(), "hi": hi.tolist()} for k, (lo, hi) in boot["curves"].items()}
    if task is not None:
        _task_metrics(task, logits, episodes, weights, table, curves, bands)
    return table, curves, bands


def _task_metrics(task: Task, logits: torch.Tensor, episodes: Episodes, weights: torch.Tensor, table: dict,
                  curves: dict, bands: dict) -> None:
    """Add the class-posterior metrics (:func:`windtunnel.evaluation.metrics.class_posterior_metrics`) of a task
    that defines them to ``table``, ``curves`` and ``bands``, with the same bootstrap resamples of the sequences as
    every other metric: each pooled over its own mask (a resample with none of its positions gives NaN).  Any other
    task's record is left as it was."""
    extra = M.class_posterior_metrics(task, logits, episodes)
    if extra is None:
        return
    w = weights.double()
    for name, x in extra["per_position"].items():
        m = extra["masks"][name].double()
        s, cnt = w @ torch.nan_to_num(x, nan=0.0), w @ m  # [n_boot, T]
        total = cnt.sum(1)
        samples = torch.where(total > 0, s.sum(1) / total.clamp_min(1e-300), math.nan)
        curve_samples = torch.where(cnt > 0, s / cnt.clamp_min(1e-300), math.nan)
        lo, hi = percentile_ci(samples)
        c_lo, c_hi = percentile_ci(curve_samples)
        value = M.pooled_mean(x, m)
        col = m.sum(0)
        table[name] = {"value": value, "ci": [float(lo), float(hi)]}
        curves[name] = torch.where(col > 0, torch.nan_to_num(x, nan=0.0).sum(0) / col.clamp_min(1), math.nan).tolist()
        bands[name] = {"lo": c_lo.tolist(), "hi": c_hi.tolist()}


def _beyond(episodes: Episodes, start: int) -> Episodes | None:
    """The same episodes scored only at token positions ``≥ start`` (None if nothing is left)."""
    keep = torch.zeros_like(episodes.mask)
    keep[:, start:] = True
    mask = episodes.mask & keep
    if not bool(mask.any()):
        return None
    targets = torch.where(mask, episodes.targets, torch.full_like(episodes.targets, IGNORE))
    return dataclasses.replace(episodes, mask=mask, targets=targets)


def _n_params(model: torch.nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))


EVAL_SEED = 12345
"""The seed of every run's evaluation episodes (so runs, seeds and architectures are scored on the same ones)."""


def evaluate(
    model: torch.nn.Module,
    task: Task,
    n: int = 2000,
    seed: int = EVAL_SEED,
    lengths: Iterable[int] | None = None,
    chunk: int = 256,
    device: torch.device | str | None = None,
    n_boot: int = 1000,
) -> EvalResult:
    """Evaluate ``model`` (called as ``model(**episodes.inputs) -> logits [B,T,C]``) on ``task``.

    Samples ``n`` episodes with ``task.sample(n, seed)``, runs the model once per chunk of
    ``chunk`` sequences on ``device`` (default: the model's own device), scores the logits with
    ``windtunnel.evaluation.metrics.compute`` and attaches 95% bootstrap intervals (``n_boot`` resamples of
    the sequences, drawn with seed ``seed + 1``; the same resamples for the model, the oracle and
    every length).  ``lengths=[K, …]`` also
    evaluates ``task.with_length(K)`` for each ``K`` (``ValueError`` if the task has no length
    parameter).  The model's train/eval state is restored afterwards.
    """
    if not is_int(n) or n < 1:
        raise InvalidValue(f"invalid n: must be a positive integer, got {n!r}")
    if not is_int(n_boot) or n_boot < 1:
        raise InvalidValue(f"invalid n_boot: must be a positive integer, got {n_boot!r}")
    lengths = list(lengths) if lengths is not None else []
    if lengths and task.length_param is None:
        raise InvalidValue(
            f"invalid lengths: task {task.name!r} has no length parameter, so lengths={lengths} cannot be evaluated"
        )
    tasks = {int(K): task.with_length(int(K)) for K in lengths}  # validates every K up front
    from ..tasks.base import check_memory

    for t in [task, *tasks.values()]:
        check_memory(t, n, "n")

    t_start = time.perf_counter()
    timings: dict[str, float] = {"forward_s": 0.0, "oracle_s": 0.0, "metrics_s": 0.0, "sample_s": 0.0}
    weights = resample_weights(n, n_boot, seed + 1)
    horizon = {
        "param": task.length_param,
        "value": getattr(task, task.length_param) if task.length_param else None,
        "seq_len": task.seq_len,
    }

    def run(t: Task) -> tuple[Episodes, torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        ep = t.sample(n, seed)
        t1 = time.perf_counter()
        logits = predict(model, ep, chunk=chunk, device=device)
        t2 = time.perf_counter()
        orc = predict(make_oracle(t), ep, chunk=max(chunk, 1024), device="cpu")
        t3 = time.perf_counter()
        timings["sample_s"] += t1 - t0
        timings["forward_s"] += t2 - t1
        timings["oracle_s"] += t3 - t2
        return ep, logits, orc

    ep, logits, orc = run(task)
    t0 = time.perf_counter()
    table, curves, bands = _score(logits, ep, weights, task)
    oracle_table, _, _ = _score(orc, ep, weights, task)
    timings["metrics_s"] += time.perf_counter() - t0

    per_length: dict[int, dict[str, Any]] = {}
    for K, tk in tasks.items():
        ep_k, logits_k, orc_k = run(tk)
        t0 = time.perf_counter()
        tab_k, curves_k, bands_k = _score(logits_k, ep_k, weights)
        orc_tab_k, _, _ = _score(orc_k, ep_k, weights)
        far = _beyond(ep_k, task.seq_len)
        beyond = {} if far is None else _score(logits_k, far, weights)[0]
        timings["metrics_s"] += time.perf_counter() - t0
        per_length[K] = {
            "seq_len": tk.seq_len,
            "metrics": tab_k,
            "oracle": orc_tab_k,
            "beyond_horizon": beyond,
            "curves": curves_k,
            "curve_ci": bands_k,
        }

    priors: dict[str, dict[str, Any]] = {}
    true_task = task.unpooled()
    if true_task is not None:  # memorisation vs inference: both posteriors, in the pool and on fresh latents
        ep_f, logits_f, orc_f = run(true_task)
        t0 = time.perf_counter()
        pool_orc_f = predict(make_oracle(task), ep_f, chunk=max(chunk, 1024), device="cpu")
        in_pool_true = dataclasses.replace(ep, posterior=true_task.posterior(ep.tokens, ep.features))
        priors = {"in_pool_vs_true_prior": _score(logits, in_pool_true, weights)[0],
                  "task_oracle_vs_true_prior": _score(orc, in_pool_true, weights)[0],
                  "fresh": _score(logits_f, ep_f, weights)[0],
                  "task_oracle_on_fresh": _score(pool_orc_f, ep_f, weights)[0]}
        timings["metrics_s"] += time.perf_counter() - t0

    timings["total_s"] = time.perf_counter() - t_start
    timings["sequences_per_s"] = n * (1 + len(tasks) + bool(priors)) / max(timings["forward_s"], 1e-12)
    return EvalResult(
        task={"name": task.name, "params": task.params()},
        n=n,
        seed=seed,
        n_boot=n_boot,
        metrics=table,
        curves=curves,
        curve_ci=bands,
        oracle=oracle_table,
        horizon=horizon,
        lengths=per_length,
        model={"class": type(model).__name__, "n_params": _n_params(model)},
        timings=timings,
        priors=priors,
    )


# --- across seeds ---------------------------------------------------------------------------------
@torch.no_grad()
def held_out_metrics(model: torch.nn.Module, ep: Episodes) -> dict[str, float]:
    """Entropy error, KL and accuracy of ``model`` on one fixed batch (no intervals): the training loop's
    periodic held-out evaluation.  Leaves the model in eval mode."""
    model.eval()
    values = M.compute(model(**ep.inputs).float().cpu(), ep.to("cpu"))["values"]
    return {k: float(values[k]) for k in ("entropy_mae_curve", "entropy_mae", "kl", "accuracy") if k in values}


def aggregate(results: Sequence[EvalResult | Mapping[str, Any]]) -> dict[str, Any]:
    """Mean ± sample standard deviation (ddof = 1; 0 for a single result) of each metric over results
    (typically training seeds), for the model, the oracle and each evaluated length.

    Returns ``{"n": k, "metrics": {name: {"mean", "std", "n", "values"}}, "oracle": {...},
    "lengths": {K: {name: {...}}}}``; a metric or length missing from some result is aggregated over
    the results that have it; NaN values are skipped.
    """
    rs = [r if isinstance(r, EvalResult) else EvalResult.from_dict(r) for r in results]
    if not rs:
        raise InvalidValue("invalid results: need at least one EvalResult to aggregate")

    def agg(tables: list[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
        names: list[str] = []
        for t in tables:
            names += [k for k in t if k not in names]
        return {k: mean_std([float(t[k]["value"]) for t in tables if k in t]) for k in names}

    lengths: list[int] = sorted({K for r in rs for K in r.lengths})
    return {
        "n": len(rs),
        "metrics": agg([r.metrics for r in rs]),
        "oracle": agg([r.oracle for r in rs]),
        "lengths": {K: agg([r.lengths[K]["metrics"] for r in rs if K in r.lengths]) for K in lengths},
    }
