"""The stages of a run, each taking a :class:`~windtunnel.run.runs.RunDir`: the CLI and the table only call these.

* :func:`train_run` — train (or resume) and record the wall time (``timings.json``: ``train_s``);
* :func:`evaluate_run` — evaluate against the exact posterior, write ``eval.json`` and the figures
  (entropy, KL, learning curves, calibration), record ``eval_s``;
* :func:`analyze_run` — the geometric diagnostics (``geometry.json``);
* :func:`write_report` — ``report.html`` and ``summary.md``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from ..run.grid import ANALYZE_N
from ..run.runs import RunDir

from ..evaluation.evaluate import EVAL_SEED  # noqa: F401  (re-exported: the stages evaluate on it)


def _rundir(run: str | Path | RunDir) -> RunDir:
    return run if isinstance(run, RunDir) else RunDir(run)


def train_run(cfg: Any, run: str | Path | RunDir, resume: bool = False, until: int | None = None,
              log_lines: bool = False, built: tuple[Any, Any] | None = None) -> RunDir:
    """Train ``cfg`` in ``run`` (resuming from its last checkpoint if ``resume``) and record the
    training wall time in ``timings.json`` (under ``torchrun``, rank 0 alone writes).  ``log_lines`` and ``built``:
    see :func:`~windtunnel.training.loop.train`."""
    from ..training.loop import process_group, train

    rd = _rundir(run)
    t0 = time.perf_counter()
    train(cfg, rd, resume=resume, until=until, log_lines=log_lines, built=built)
    if process_group()[0] == 0:
        rd.add_timing(train_s=rd.training_seconds() or (time.perf_counter() - t0))
    return rd


def evaluate_run(run: str | Path | RunDir, n: int = 2000, lengths: list[int] | None = None,
                 seed: int = EVAL_SEED, device: str | None = None, force: bool = False) -> Any:
    """Evaluate the run's latest checkpoint on ``n`` episodes (and ``lengths``); write ``eval.json``
    and the figures; return the :class:`~windtunnel.evaluation.evaluate.EvalResult`.

    An ``eval.json`` of the same checkpoint made with more episodes, other episodes or lengths this one
    lacks is a better result than the one asked for: it is replaced only with ``force``
    (:class:`~windtunnel.run.runs.RunError` otherwise, before any work)."""
    from ..evaluation.evaluate import evaluate
    from ..report import figures
    from ..run.runs import load

    rd = _rundir(run)
    rd.read_config()  # a clear error for a folder that is not a run, before anything is written there
    with rd.lock():  # not while the run is being trained: the evaluation would be of a moving checkpoint
        if not force:
            _keep_better_eval(rd, n, seed, lengths or [])
        t0 = time.perf_counter()
        task, model = load(rd)
        if device:
            model.to(device)
        result = evaluate(model, task, n=n, seed=seed, lengths=lengths)
        rd.write_eval({**result.to_dict(), "provenance": {**rd.provenance(), "n": n, "seed": seed}})
        figs = rd.figures
        figures.entropy_curve(result, figs / "entropy.png")
        figures.kl_curve(result, figs / "kl.png")
        if rd.log_path.exists():
            figures.training_curves(rd.log_path, figs / "training.png")
        ep = task.sample(min(n, 512), seed)
        with torch.no_grad():
            logits = model(**{k: v.to(next(model.parameters()).device) for k, v in ep.inputs.items()}).cpu()
        figures.calibration(logits, ep, figs / "calibration.png")
        rd.add_timing(eval_s=time.perf_counter() - t0)
    return result


def _keep_better_eval(rd: RunDir, n: int, seed: int, lengths: list[int]) -> None:
    """:class:`RunError` if the run's ``eval.json`` is of its current checkpoint and configuration and was
    made with more episodes, another seed, or lengths that ``lengths`` lacks."""
    from ..run.runs import RunError

    if not rd.eval_path.is_file():
        return
    old = rd.read_eval()
    prov = old.get("provenance") if isinstance(old.get("provenance"), dict) else {}
    now = rd.provenance()
    if any(prov.get(k) not in (None, now[k]) for k in ("step", "config_sha256")):
        return  # stale: of another checkpoint or configuration, so a new evaluation replaces it
    had = sorted(int(k) for k in (old.get("lengths") or {}))
    lost = [K for K in had if K not in lengths]
    why = []
    if isinstance(old.get("n"), int) and old["n"] > n:
        why.append(f"{old['n']} sequences (this one: {n})")
    if old.get("seed") not in (None, seed):
        why.append(f"episode seed {old['seed']} (this one: {seed})")
    if lost:
        why.append(f"lengths {', '.join(map(str, lost))} that this one lacks")
    if why:
        raise RunError(f"{rd.eval_path} already holds an evaluation of this checkpoint with {'; '.join(why)}; "
                       "pass --force to replace it")


def analyze_run(run: str | Path | RunDir, n: int = ANALYZE_N, report: bool = True, force: bool = False, *,
                device: str | None = None, n_boot: int = 1000, dynamics: bool = True,
                only: list[str] | None = None) -> Path:
    """The geometric diagnostics of the run (:func:`windtunnel.geometry.diagnose`): write
    ``geometry.json`` and the figures, and the report unless ``report=False``; record ``analyze_s``
    (``reanalyze_s`` when ``only`` recomputes some diagnostics and keeps the others).  Returns the
    ``geometry.json`` path.  :class:`~windtunnel.errors.DiagnosticFailed` after writing them if any
    diagnostic raised.  A ``geometry.json`` of the same checkpoint computed on more episodes is replaced
    only with ``force`` (:class:`~windtunnel.run.runs.RunError` otherwise)."""
    from ..errors import DiagnosticFailed
    from ..geometry import diagnose, failed_diagnostics

    rd = _rundir(run)
    rd.read_config()  # a clear error for a damaged folder before any work
    if report and rd.eval_path.exists():
        rd.read_eval()  # the report reads it after the diagnostics are written: a damaged one refuses first
    with rd.lock():
        old = rd.read_geometry()
        meta = (old or {}).get("meta") or {}
        now = rd.provenance()
        same = all(meta.get(k) == now[k] for k in ("step", "config_sha256"))
        if not force and same and isinstance(meta.get("n_episodes"), int) and meta["n_episodes"] > n:
            from ..run.runs import RunError

            raise RunError(f"{rd.geometry_path} already holds the diagnostics of this checkpoint on {meta['n_episodes']} "
                           f"episodes (this one: {n}); pass --force to replace it")
        t0 = time.perf_counter()
        doc = diagnose(rd.path, n=n, device=device, n_boot=n_boot, dynamics=dynamics, only=only, figures=rd.figures)
        path = rd.write_geometry(doc)
        rd.add_timing(**{"analyze_s" if only is None else "reanalyze_s": time.perf_counter() - t0})
        if report:
            write_report(rd)
    failed = failed_diagnostics(doc)
    if failed:
        raise DiagnosticFailed(f"{len(failed)} diagnostic(s) failed ({', '.join(failed)}): their tracebacks are "
                               f"printed above; the others are in {path}")
    return path


def write_report(run: str | Path | RunDir) -> Path:
    """``report.html`` and ``summary.md`` of the run (:func:`windtunnel.report.render_report`)."""
    from ..report import render_report

    rd = _rundir(run)
    rd.read_config()
    with rd.lock():
        return rd.write_report(*render_report(rd))
