"""The main job as one library call: the plan from the grid, then train → evaluate → analyse → report.

``windtunnel run`` is :func:`plan_main_job` and :func:`run_main_job` with the command's flags; a notebook calls the
same two functions (or :func:`main_job`, both at once) and gets a :class:`MainJobResult` back.  What is current in the
run folder is decided here, once: a finished run whose evaluation (of at least the plan's size), analysis and report
are current is left as it is; otherwise only what is not current is redone, and an unfinished run resumes from its
last checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from ..evaluation.evaluate import EVAL_SEED
from ..run import grid
from ..run.config import TrainConfig
from ..run.runs import RunDir
from ..training.loop import build
from .stages import analyze_run, evaluate_run, train_run, write_report

RESULTS = ("eval.json", "geometry.json", "report.html")
"""What a finished main job leaves beside its checkpoints: the evaluation, the analysis and the report."""


@dataclass(frozen=True)
class MainJobPlan:
    """One main job, planned from the grid: its training configuration, its run folder, the experiment whose recipe
    it is (``main``, or ``main_v20`` at the papers' V=20), how many sequences it is evaluated on, the lengths it is
    evaluated at (``None``: its training length), and the task and untrained model it built to check the config and
    count the parameters (``n_params``) — handed to training, so the model is built once; :func:`run_main_job` trains
    that model in place, and a second run of the same plan builds its own."""

    config: TrainConfig
    run: RunDir
    experiment: str
    eval_n: int
    lengths: list[int] | None
    built: tuple[Any, Any] = field(repr=False, compare=False)
    _handed: list[bool] = field(default_factory=list, repr=False, compare=False)

    @property
    def n_params(self) -> int:
        """The parameter count of the model the plan builds."""
        return int(self.built[1].n_params())

    def take_built(self) -> tuple[Any, Any] | None:
        """The plan's task and untrained model, the first time they are asked for; ``None`` after (trained since)."""
        if self._handed:
            return None
        self._handed.append(True)
        return self.built


@dataclass
class MainJobResult:
    """What :func:`run_main_job` did and what it left: the run, the step it trained from and to (equal where nothing
    was trained), which results it made anew (``redone``, from :data:`RESULTS`), the evaluation's metrics (and a
    pooled task's memorisation-versus-inference block, ``priors``), where the analysis and the report are, and the
    training wall time in seconds."""

    plan: MainJobPlan
    trained_from: int
    trained_to: int
    redone: tuple[str, ...]
    metrics: dict[str, Any]
    priors: dict[str, Any] | None
    geometry: Path | None
    report: Path
    train_seconds: float
    lines: list[str] = field(default_factory=list)

    @property
    def run(self) -> RunDir:
        return self.plan.run


def default_folder(task: str | None = None, arch: str | None = None, preset: str = "quick", *,
                   task_params: dict[str, Any] | None = None, steps: int | None = None, seed: int | None = None,
                   params: int | None = None) -> Path:
    """``runs/main`` for the main job as shipped; otherwise a portable name that differs whenever the task,
    architecture, preset, seed, steps, size or task parameters do (so sweeps do not collide)."""
    changed = [f"s{seed}" if seed is not None else "", f"{steps}steps" if steps is not None else "",
               f"{params}p" if params is not None else "",
               *(f"{k}{v}" for k, v in sorted((task_params or {}).items()))]
    parts = [task if task is not None else "main", arch or grid.DEFAULT_ARCH, preset, *filter(None, changed)]
    name = "-".join(parts) if parts[1:] != [grid.DEFAULT_ARCH, "quick"] else parts[0]
    return Path("runs") / re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def plan_main_job(task: str | None = None, arch: str | None = None, preset: str = "quick", *,
                  task_params: dict[str, Any] | None = None, steps: int | None = None, seed: int | None = None,
                  params: int | None = None, out: str | Path | None = None, eval_n: int | None = None,
                  progress: bool = True, trackers: tuple[str, ...] = ()) -> MainJobPlan:
    """The main job's plan: the grid's ``main`` recipe (``main_v20`` where ``task_params`` name V=20; bijection named
    as a task is the main job too) for ``arch`` under ``preset``, with the task parameters, steps (the schedule
    shortened or stretched, curriculum included), seed and size changed where given, into ``out`` (default
    :func:`default_folder`).  The model is built once here, so that a bad configuration is refused before any
    folder is touched."""
    overrides = dict(task_params or {})
    experiment = grid.main_job(task, overrides)
    fields = grid.preset(preset, experiment, arch or grid.DEFAULT_ARCH)
    if overrides:
        fields["task_params"] = {**fields["task_params"], **overrides}
    if steps is not None:
        fields = grid.with_steps(fields, steps)
    if seed is not None:
        fields["seed"] = seed
    if params is not None:
        fields["params"] = params
    fields["progress"] = progress
    if trackers:
        fields["trackers"] = list(dict.fromkeys(trackers))
    cfg = TrainConfig.from_dict(fields)
    built = build(cfg)
    folder = Path(out) if out is not None else default_folder(task, arch, preset, task_params=overrides, steps=steps,
                                                              seed=seed, params=params)
    return MainJobPlan(cfg, RunDir(folder), experiment, eval_n or grid.EVAL_N[preset],
                       grid.eval_lengths(experiment, cfg.task_params), built)


def current_results(run: RunDir, n: int) -> set[str]:
    """Which of :data:`RESULTS` are current (:meth:`~windtunnel.run.runs.RunDir.result_states`), an evaluation only
    where it is of at least ``n`` sequences and of a recorded step; nothing is current without a current
    evaluation (the analysis and the report read it)."""
    out = {name for name, state in run.result_states().items() if state == "current"}
    if "eval.json" in out:
        ev = run.read_eval()
        prov = ev.get("provenance") if isinstance(ev.get("provenance"), dict) else {}
        if prov.get("step") is None or not isinstance(ev.get("n"), int) or ev["n"] < n:
            out.discard("eval.json")
    return out if "eval.json" in out else set()


def run_main_job(plan: MainJobPlan, *, force: bool = False, analyse: bool = True,
                 say: Callable[[str], None] = lambda line: None, log_lines: bool = False) -> MainJobResult:
    """Carry out ``plan``: train (or resume, or leave a finished run alone), evaluate, analyse (unless ``analyse``
    is false) and write the report, redoing only what is not current.  A folder that holds something else is
    refused (:class:`~windtunnel.errors.UserError`) unless ``force``, which replaces only a windtunnel run folder.
    ``say`` receives each line worth telling a user as it happens (the command line prints them)."""
    run, cfg = plan.run, plan.config
    lines: list[str] = []

    def tell(line: str) -> None:
        lines.append(line)
        say(line)

    resume = _prepare(run, cfg, force)
    done = run.latest_step() if resume else 0
    if done < cfg.steps:
        where = f"resuming from step {done}" if done else "from step 0"
        params = ", ".join(f"{k}={v}" for k, v in cfg.task_params.items())
        tell(f"training {cfg.arch} ({plan.n_params:,} parameters) on {cfg.task}" + (f" ({params})" if params else "")
             + f" for {cfg.steps} steps of batch {cfg.batch_size}, {where}, into {run.path}")
        train_run(cfg, run, resume=resume, log_lines=log_lines, built=plan.take_built())
    wanted = set(RESULTS) - (set() if analyse else {"geometry.json"})
    current = current_results(run, plan.eval_n) if done >= cfg.steps else set()
    missing = tuple(name for name in RESULTS if name in wanted and name not in current)
    if not missing:
        tell(f"{run.path} already finished (step {done} of {cfg.steps}) and evaluated"
             + (" and analysed" if analyse else "") + ": nothing to do")
    elif done >= cfg.steps:
        tell(f"{run.path} already trained (step {done} of {cfg.steps}); redoing only what is not current: "
             + ", ".join(missing))
    if "eval.json" in missing:
        evaluate_run(run, n=plan.eval_n, lengths=plan.lengths, seed=EVAL_SEED)
    if "geometry.json" in missing:  # the mechanism beside the number
        analyze_run(run, report=False)
    report = write_report(run)
    record = run.read_eval()
    return MainJobResult(plan, done, max(done, run.latest_step()), missing, record["metrics"], record.get("priors"),
                         run.geometry_path if analyse and run.geometry_path.is_file() else None, report,
                         run.training_seconds() or 0.0, lines)


def main_job(task: str | None = None, arch: str | None = None, preset: str = "quick", *, force: bool = False,
             analyse: bool = True, say: Callable[[str], None] = print, **planned: Any) -> MainJobResult:
    """:func:`plan_main_job` and :func:`run_main_job` in one call: ``windtunnel run`` from a notebook
    (``planned``: the plan's keywords, e.g. ``steps=300``, ``out="runs/mine"``)."""
    return run_main_job(plan_main_job(task, arch, preset, **planned), force=force, analyse=analyse, say=say)


def _prepare(run: RunDir, cfg: TrainConfig, force: bool) -> bool:
    """Whether ``run`` resumes: an empty (or absent) folder starts afresh, a run of the same configuration resumes,
    and anything else is refused unless ``force`` (which replaces a windtunnel run folder only)."""
    if run.path.exists() and not run.path.is_dir():
        raise UserError(f"cannot use {run.path} as a run folder: it is a file")
    if run.is_empty():
        return False
    if force:
        _replace(run)
        return False
    if not run.is_run():
        raise UserError(f"{run.path} exists and is not a windtunnel run folder; choose another --out")
    if not run.holds(cfg.to_dict()):
        raise UserError(f"{run.path} holds a run with a different configuration; pass --force to replace it or "
                        "choose another --out")
    return True


def _replace(run: RunDir) -> None:
    """Empty a windtunnel run folder (not while another process trains there); refuse any other folder."""
    import shutil

    if not run.is_run():
        raise UserError(f"refusing to --force over {run.path}: it is not a windtunnel run folder")
    with run.lock():
        shutil.rmtree(run.checkpoints, ignore_errors=True)
        for p in run.path.iterdir():
            if p.name != run.LOCK:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
