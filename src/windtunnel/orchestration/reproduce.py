"""``windtunnel reproduce``: run whatever the papers' claims need and their committed artifacts lack.

A *target* (``paper1``, ``paper2``, ``paper3``, ``sequel``, ``all``) is a list of grid cells
(:class:`~windtunnel.run.grid.Cell`: preset, experiment, architecture, seed), each with the stages it
needs — train and evaluate, and for the geometry claims ``analyze``.  A cell is worked in an
ordinary run folder under ``results/{preset}/runs/`` (git-ignored; the same folders the table
uses, so a cell trained by either is reused by both) and its small artifacts are exported to
``results/{preset}/cells/{folder}/``, which is committed::

    config.json       what rebuilt the task, model and optimiser
    cell.json         the cell's summary (task, arch, seed, metrics, intervals, training seconds)
    eval.json         the evaluation against the exact posterior (per-position curves included)
    geometry.json     the geometric diagnostics, when the cell is analysed
    references.json   the Bayes oracle and the context-blind floor on the cell's evaluation episodes
    metrics.jsonl.gz  the training log, gzip-compressed (read wherever ``metrics.jsonl`` is named)

Kilobytes each, never checkpoints; the tables compact JSON (:meth:`RunDir.export`), since every copy of the
repository carries them.  A cell whose artifacts are all present is skipped without
touching anything; a missing one is regenerated from the run folder if that still holds it, else
the cell is trained (resuming from its last checkpoint), evaluated and analysed again.  The claims
registry (:mod:`windtunnel.claims`) reads its numbers from these files only.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import executors, stacking
from ..run import grid, locks, stopping
from ..errors import InvalidValue
from ..run.runs import RunDir, stored

TARGETS = ("paper1", "paper2", "paper3", "sequel", "beyond", "scale", "all")
ARTIFACTS = ("config.json", "cell.json", "eval.json", "metrics.jsonl", "references.json")
GEOMETRY = "geometry.json"
REFERENCES = "references.json"
SEEDS = grid.SEEDS
"""Every claim is measured on at least three training seeds."""
ANALYZE_N = grid.ANALYZE_N
"""Episodes every diagnostic of a cell is computed on (``windtunnel analyze``'s default)."""


@dataclass(frozen=True)
class Job:
    """One cell of a target and the stages it needs."""

    cell: grid.Cell
    analyze: bool
    #: the diagnostics the cell is analysed with (``None``: every registered one; ``windtunnel check``: those its
    #: claims read)
    diagnostics: tuple[str, ...] | None = None

    def stale(self, doc: dict[str, Any] | None) -> list[str]:
        """The diagnostics of this job that ``doc`` (a ``geometry.json``, ``None`` for none) lacks or holds from an
        older version of the code."""
        return _stale(doc, self.diagnostics)

    def artifacts(self) -> tuple[str, ...]:
        return ARTIFACTS + ((GEOMETRY,) if self.analyze else ())


def _stale(doc: dict[str, Any] | None, diagnostics: Sequence[str] | None) -> list[str]:
    """The diagnostics among ``diagnostics`` (``None``: every registered one) that ``doc`` lacks or holds stale."""
    from ..geometry.run import stale_diagnostics

    return [d for d in stale_diagnostics(doc) if diagnostics is None or d in diagnostics]


PAPERS = {"paper1": "I", "paper2": "II", "paper3": "III", "sequel": "sequel"}
"""The reproduction targets that are one paper's claims, and the paper each stands for (``sequel``: the model-selection
sequel, arXiv 2607.19379, whose claims are registered with paper ``"sequel"``)."""


def plan(target: str, preset: str = "quick") -> list[Job]:
    """The cells ``target`` needs under ``preset``, in the order the claims read them.

    A paper's target is the union of the cells its claims declare (``Claim.cells``; a test holds each declaration
    equal to what the claim reads), analysed where a claim reads their geometry (``sequel`` also every sequel column
    on each of the papers' four architectures, :data:`SEQUEL_CELLS`: the same budget for each); ``scale`` is the cells the claims
    read at the papers' size whatever preset they are judged at (``main_paper_size@paper``, ``hmm_fixed@paper`` …:
    meant for ``--preset paper``, a GPU's work); ``beyond`` holds the tests beyond the papers, which no claim reads
    (belief-state geometry on Mess3, the task-diversity sweeps); ``all`` every cell of the papers and beyond.
    """
    if target not in TARGETS:
        raise InvalidValue(f"unknown target {target!r}: choose from {', '.join(TARGETS)}")
    if preset not in grid.PRESETS:
        raise InvalidValue(f"unknown preset {preset!r}: choose from {', '.join(grid.PRESETS)}")
    beyond = {**{c: False for c in DIVERSITY_CELLS + HMM_DIVERSITY_CELLS}, **{c: True for c in BELIEF_CELLS}}
    from ..claims import declared

    if target in PAPERS:
        cells = declared((PAPERS[target],))
        if target == "sequel":
            for cell in SEQUEL_CELLS:
                cells.setdefault(cell, False)
    elif target == "scale":
        cells = declared(tuple(PAPERS.values()), fixed="paper")
    elif target == "beyond":
        cells = beyond
    else:
        cells = declared(tuple(PAPERS.values()))
        for cell in SEQUEL_CELLS:
            cells.setdefault(cell, False)
        for cell, analysed in beyond.items():
            cells[cell] = cells.get(cell, False) or analysed
    return [Job(grid.Cell(preset, column, arch, seed), analyze=analysed)
            for (column, arch), analysed in cells.items() for seed in SEEDS]


SEQUEL_CELLS = tuple((column, arch) for column in grid.SEQUEL_COLUMNS for arch in grid.SEQUEL_ARCHS
                     if column not in grid.SEQUEL_TRANSFORMER_ONLY or arch == "transformer")
"""The sequel's cells (model selection, arXiv 2607.19379): every sequel column — {involution alone, involutions vs
3-cycles, rotations vs multiplications} × {integer, opaque, fixed} symbols, and the budget control of the opaque
arithmetic cell — on each of the papers' four architectures, one recipe for all; on the transformer alone
(:data:`grid.SEQUEL_TRANSFORMER_ONLY`: the architecture the claims read, and *In-Context Algebra* trained) the budget
control of the involution cells and the in-context-facts control, whose episodes are 412 tokens against 20 (two
operation tables of 49 facts, four tokens each), so a step costs some twenty times a cell's and the cell takes hours
on one CPU core (each committed cell's ``timings.json`` records its seconds).  Its claims read the transformer's
cells (and the header probe on the opaque arithmetic cells)."""

BELIEF_CELLS = (("mess3", "transformer"), ("mess3", "mamba"), ("mess3", "lstm"))
"""Beyond the papers: the Mess3 process (one fixed 3-state hidden Markov process whose beliefs form a fractal)
for each of the papers' sequence architectures, analysed — does the stream hold the belief linearly
(``belief_geometry``), beyond what a random network's features already give?"""

DIVERSITY_CELLS = tuple((column, arch) for arch in ("transformer", "mamba", "lstm")
                        for column in (*(f"pool_{size}" for size in grid.POOL_SIZES), "bijection"))
"""Beyond the papers, memorisation vs inference (task diversity): the bijection column trained on a finite pool of
permutations, for each pool size and each of the papers' sequence architectures; trained and evaluated (both
priors, in the pool and on fresh permutations).  The fresh column (``bijection``, the table's recipe) is the
infinite pool; its cells are worked here so that every seed's evaluation is committed beside the pools'."""

HMM_DIVERSITY_CELLS = tuple((column, arch) for arch in ("transformer", "mamba", "lstm")
                            for column in (*(f"hmm_pool_{size}" for size in grid.POOL_SIZES), "hmm"))
"""The diversity sweep on HMM filtering: the HMM column trained on a finite pool of HMMs, for each pool size and
architecture, trained and evaluated (on the pool's HMMs and on fresh ones); the ``hmm`` column is the infinite
pool (its cells are Paper I's, analysed)."""

EXTERNAL: dict[str, tuple[tuple[str, str], ...]] = {
    "paper1": (("{preset}/table.json", "windtunnel table --preset {preset} --seeds 3"),
               ("{preset}/references.json", "windtunnel table --preset {preset} --seeds 3")),
    "paper2": (("routing/em.json", "windtunnel routing em --seeds 5"),
               ("routing/deep/em.json", "windtunnel routing em --deep --seeds 5 --arms sgd em_like sgd_matched alternating"),
               ("routing/deep-authors/em.json", "windtunnel routing em --deep --authors-model --seeds 5"),
               ("routing/timescales/timescales.json", "windtunnel routing timescales"),
               ("routing/timescales-constant/timescales.json", "windtunnel routing timescales --constant-lr")),
    "paper3": (("llm/smollm2-135m-instruct-q4-mixed.json", "windtunnel llm signatures MODEL.gguf --prompts mixed --out …"),
               ("llm/smollm2-135m-instruct-q4-sula.json", "windtunnel llm sula MODEL.gguf --out …"),
               ("llm/gemma-3-270m-q4-mixed.json", "windtunnel llm signatures GEMMA3-270M.gguf --prompts mixed --out …"),
               ("llm/gemma-3-270m-q4-sula.json", "windtunnel llm sula GEMMA3-270M.gguf --out …"),
               ("llm/smollm2-135m-instruct-q4-docs.json",
                "windtunnel llm signatures MODEL.gguf --prompts docs --per-quintile 15 --out …"),
               ("llm/gemma-3-270m-q4-docs.json",
                "windtunnel llm signatures GEMMA3-270M.gguf --prompts docs --per-quintile 15 --out …"),
               ("llm/global-smollm2-135m-instruct-q4-gemma-3-270m-q4.json",
                "windtunnel llm global SMOLLM2.gguf GEMMA3-270M.gguf --out …"),
               ("llm/matched/summary.json", "windtunnel llm matched --workers 2")),
    "sequel": (("{preset}/sequel_table.json", "windtunnel table --family sequel --preset {preset} --seeds 3"),
               ("{preset}/sequel_references.json", "windtunnel table --family sequel --preset {preset} --seeds 3")),
}
"""Artifacts the claims read that other commands make (hours of work, or a model file): ``reproduce`` checks
them and names the command of each missing one, without running it."""


def external(target: str, preset: str, results: Path) -> list[tuple[str, str, str]]:
    """The (file, command, what is wrong) triples of ``target``'s other artifacts that are missing under ``results``,
    or, for a table, that no longer hold the numbers of the committed cells they aggregate (a seed retrained since)."""
    from .table import out_of_step

    names = ("paper1", "paper2", "paper3", "sequel") if target == "all" else (target,)
    out = []
    for name in names:
        for rel, cmd in EXTERNAL.get(name, ()):
            rel, cmd = rel.format(preset=preset), cmd.format(preset=preset)
            if not (results / rel).is_file():
                out.append((rel, cmd, "is missing"))
            elif rel.endswith("table.json") and (stale := out_of_step((results / rel).parent, Path(rel).name)):
                out.append((rel, cmd, f"no longer holds the numbers of the committed cells {', '.join(stale)} "
                                      "(retrained since); the table takes them as they are now"))
    return out


def cell_dir(results: Path, cell: grid.Cell) -> Path:
    """Where a cell's committed artifacts live."""
    return results / cell.preset / "cells" / cell.folder


def run_dir(results: Path, cell: grid.Cell) -> Path:
    """The cell's (ignored) working run folder, shared with ``windtunnel table``."""
    return results / cell.preset / "runs" / cell.folder


def missing(job: Job, results: Path) -> list[str]:
    """The artifacts of ``job`` not yet committed under ``results`` (a ``geometry.json`` that lacks a
    registered diagnostic, or holds an older version of one, counts as missing)."""
    d = cell_dir(results, job.cell)
    out = [a for a in job.artifacts() if stored(d / a) is None]  # the log is committed packed
    if REFERENCES not in out and _stale_references(job, d / REFERENCES):
        out.append(REFERENCES)
    if job.analyze and GEOMETRY not in out and job.stale(json.loads((d / GEOMETRY).read_text())):
        out.append(GEOMETRY)
    return out


def progress(job: Job, results: Path) -> str:
    """Where a cell whose artifacts are missing stands, from its run folder: ``"not started"``, ``"trained to
    step S of N"`` (a killed or paused run, resumed from there), ``"trained; eval.json missing"``, or — a cell
    committed with an artifact missing whose run folder is elsewhere (trained on another machine) — that it is
    trained again."""
    from ..run.runs import RunDir

    steps, folder = job.cell.config()["steps"], run_dir(results, job.cell)
    done = RunDir(folder).latest_step() if folder.is_dir() else 0
    cell = cell_dir(results, job.cell)
    if not done and (cell / "cell.json").is_file():  # trained elsewhere, its checkpoints not here
        # an artifact there but out of date (a diagnostic added or changed since) is not one that is absent
        said = [f"an outdated {a}" if stored(cell / a) is not None else f"no {a}" for a in missing(job, results)]
        return "committed with " + ", ".join(said) + "; no run folder here, so trained again"
    if done >= steps:
        return "trained; " + ", ".join(missing(job, results)) + " missing"
    return f"trained to step {done} of {steps}" if done else "not started"


def _stale_references(job: Job, path: Path) -> bool:
    """Whether a committed ``references.json`` lacks a row the code now writes (``table.reference_rows``)."""
    from . import table

    try:
        have = json.loads(path.read_text())
    except (OSError, ValueError):
        return True
    return not isinstance(have, dict) or not set(table.reference_rows(job.cell.preset, job.cell.column)) <= set(have)


def refresh_references(job: Job, results: Path) -> None:
    """Write a committed cell's ``references.json`` anew (in its cell folder, and its run folder where there is
    one): the references are the task's alone, evaluated on the cell's evaluation episodes, so a cell whose
    only missing artifact they are needs no training."""
    from . import table
    from ..run.runs import RunDir

    record = table.references(job.cell.preset, job.cell.column, _eval_n(job.cell.preset),
                              list(job.cell.experiment.lengths or []) or None)
    for folder in (cell_dir(results, job.cell), run_dir(results, job.cell)):
        if folder.is_dir():
            RunDir(folder).write_references(record)


def _work(job: dict[str, Any]) -> dict[str, Any]:
    """Train, evaluate and analyse one cell in its run folder and export its artifacts to its cell folder (in a
    worker process, on this machine or a cluster node), holding the cell's claim (:mod:`windtunnel.run.locks`): a cell
    another worker holds is left to it (``{"held_by": …}``), one whose artifacts are all there is skipped
    (``{"skipped": …}``: another task finished it)."""
    with locks.claimed(job["run_dir"]) as holder:
        if holder is not None:
            return {"run_dir": job["run_dir"], "held_by": holder.describe(), "wall_s": 0.0}
        if "job" in job and not missing(job["job"], Path(job["results"])):
            return {"run_dir": job["run_dir"], "skipped": "its artifacts are all there", "wall_s": 0.0}
        failure = failure_path(job["run_dir"])
        try:
            out = _work_claimed(job)
        except stopping.TrainingStopped:
            raise  # not a failure: checkpointed where it stood, resumed by the next run
        except Exception as exc:
            # the one line `windtunnel status` shows, wherever the cell ran (a node's error is not lost with its
            # task); a later success removes it
            from ..io import write_text_atomic

            write_text_atomic(failure, json.dumps({"error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                                                   "job": locks.slurm_job(), "host": locks.Holder.me().host,
                                                   "when": time.time()}))
            raise
        if "job" in job:
            export(job["job"], Path(job["results"]))
        failure.unlink(missing_ok=True)
        return out


def failure_path(run_dir: str | Path) -> Path:
    """Where a cell's last failure is recorded (beside its run folder, like its claim)."""
    run_dir = Path(run_dir)
    return run_dir.with_name(run_dir.name + ".failed")


def status(target: str, preset: str, results: Path) -> list[tuple[str, str, str]]:
    """Every cell of ``target``: ``(folder, state, detail)`` with state ``done`` (its artifacts all committed),
    ``running`` (a live holder has its claim: where), ``failed`` (its last attempt raised: the error, and the SLURM
    job or host) or ``waiting`` (where it stands: :func:`progress`)."""
    rows = []
    for j in plan(target, preset):
        folder, run = j.cell.folder, run_dir(results, j.cell)
        if not missing(j, results):
            rows.append((folder, "done", ""))
            continue
        holder = locks.read_holder(locks.claim_path(run))
        if holder is not None and locks.alive(holder):
            rows.append((folder, "running", holder.describe()))
            continue
        try:
            failed = json.loads(failure_path(run).read_text())
        except (OSError, ValueError):
            failed = None
        if failed:
            where = f"SLURM job {failed['job']}" if failed.get("job") else f"on {failed.get('host', '?')}"
            rows.append((folder, "failed", f"{failed['error']}; {where}; {progress(j, results)}"))
            continue
        rows.append((folder, "waiting", progress(j, results)))
    return rows


def _work_claimed(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from . import table
    from ..run.runs import RunDir
    from .stages import analyze_run

    torch.set_num_threads(job["threads"])
    t0 = time.perf_counter()
    table.run_cell(job)
    rd = RunDir(job["run_dir"])
    if not rd.references_path.is_file():  # the Bayes oracle and the context-blind floor on the cell's own evaluation episodes
        rd.write_references(table.references(job.get("preset", "quick"), job["column"], job["eval_n"], job.get("lengths")))
    if job["analyze"]:
        # the trained cell's files now, before its analysis: a run stopped while analysing (a GPU lease that ends)
        # keeps its error, and its geometry is what is missing where it is resumed (analysed from the run folder
        # if that is there, else trained again).  A committed geometry.json the run folder lacks is another run's:
        # removed, so the cell's files never mix two runs
        if not (rd.path / GEOMETRY).is_file():
            (Path(job["cell_dir"]) / GEOMETRY).unlink(missing_ok=True)
        _copy_artifacts(rd.path, Path(job["cell_dir"]), ARTIFACTS)
    if job["analyze"]:
        doc = rd.read_geometry()
        only = job.get("diagnostics")
        stale = _stale(doc, only)
        if doc is None:
            analyze_run(rd, n=job.get("analyze_n", ANALYZE_N), only=only)
        elif stale:  # only what changed since the cell was analysed (analyze_s keeps the full analysis's time)
            analyze_run(rd, n=job.get("analyze_n", ANALYZE_N), only=stale, report=False)
    return {"run_dir": job["run_dir"], "wall_s": time.perf_counter() - t0}


def _copy_artifacts(src: Path, dst: Path, names: Sequence[str]) -> None:
    """Copy ``names`` and the run's ``timings.json`` (where written) from run folder ``src`` to cell folder ``dst``,
    light (:meth:`RunDir.export`: compact tables, the log gzip-compressed; the numbers bit for bit the run's)."""
    RunDir(src).export(dst, names)


def export(job: Job, results: Path) -> Path:
    """Copy the cell's small artifacts from its run folder into ``results/{preset}/cells/{folder}/``."""
    dst = cell_dir(results, job.cell)
    _copy_artifacts(run_dir(results, job.cell), dst, job.artifacts())
    return dst


def reproduce(target: str, preset: str = "quick", results: str | Path = "results", workers: int | None = None,
              dry_run: bool = False, analyze_n: int = ANALYZE_N, threads: int | None = None,
              only: Sequence[str] = (), slurm: executors.SlurmOptions | None = None,
              stack: str = "auto", compile: bool = False, jobs: Sequence[Job] | None = None) -> dict[str, Any]:
    """Work every cell of ``target`` whose artifacts are missing; returns what was done and how long it took.
    ``threads``: torch threads per worker on CPU (default: the machine's cores shared out among the workers).
    ``only``: shell patterns on the cell folders (``hmm_pool_*-mamba-s0``); when given, just the cells that
    match one of them are worked (a row of a sweep, one seed of every cell).  ``slurm``: work them as a SLURM job
    array instead (:func:`windtunnel.orchestration.executors.run_slurm`), each task a shard of cells run by the local pool on its
    node; with ``dry_run``, the array's plan (:func:`array_plan`).  ``stack``: train the seeds of a cell as one
    stacked model (:mod:`windtunnel.orchestration.stacking`): ``auto`` where the cells run on GPUs, ``on``, ``off``.
    ``compile``: each cell's model through ``torch.compile`` (not part of its recipe).  ``jobs``: these cells (all of
    ``preset``) instead of the target's plan (``windtunnel check``: the cells of named claims)."""
    import torch

    results = Path(results)
    if slurm is not None and not dry_run:  # refused before anything is written (a plan needs no cluster)
        executors.environment_ok()
    jobs = plan(target, preset) if jobs is None else list(jobs)
    if only:
        jobs = [j for j in jobs if any(fnmatch.fnmatchcase(j.cell.folder, p) for p in only)]
    if not dry_run:  # references made stale by a newer version: remade from the task, no training needed
        for j in jobs:
            if missing(j, results) == [REFERENCES]:
                refresh_references(j, results)
                print(f"  references {j.cell.folder}", flush=True)
    todo = schedule([j for j in jobs if missing(j, results)], results, workers=1)
    summary: dict[str, Any] = {"target": target, "preset": preset, "cells": len(jobs), "missing": len(todo),
                               "done": [], "wall_s": 0.0, "external": external(target, preset, results)}
    if dry_run or not todo:
        summary["todo"] = [j.cell.folder for j in todo]
        summary["progress"] = {j.cell.folder: progress(j, results) for j in todo}
        if slurm is not None:
            summary["array"] = array_plan(todo, results, slurm)
        return summary
    cores = os.cpu_count() or 1
    n_gpu = torch.cuda.device_count() if slurm is None else slurm.gpus
    workers = (slurm.at_once(stacking.wanted(stack, n_gpu)) if slurm is not None else
               workers or min(executors.default_workers(n_gpu, stacking.wanted(stack, n_gpu), cores), len(todo)))
    threads = 1 if n_gpu else threads or max(1, (slurm.cpus if slurm is not None else cores) // workers)
    summary.update(workers=workers, threads=threads)
    todo = schedule(todo, results, workers)
    payload = []
    for i, j in enumerate(todo):
        payload.append({
            "column": j.cell.column, "arch": j.cell.arch, "seed": j.cell.seed, "preset": preset,
            "config": {**j.cell.config(), "compile": compile}, "run_dir": str(run_dir(results, j.cell)), "cell_dir": str(cell_dir(results, j.cell)),
            "eval_n": _eval_n(preset), "lengths": list(j.cell.experiment.lengths or []) or None,
            "threads": threads, "device": f"cuda:{i % n_gpu}" if n_gpu else None, "analyze": j.analyze,
            "diagnostics": None if j.diagnostics is None else list(j.diagnostics),
            "analyze_n": analyze_n, "job": j, "results": str(results),
        })
    t0 = time.perf_counter()
    by_dir = {p["run_dir"]: j for p, j in zip(payload, todo)}
    work: executors.Work = _work
    if stacking.wanted(stack, n_gpu):
        payload, work = stacking.group(payload, n_gpu), functools.partial(stacking.work_stack, _work)
    if slurm is not None:
        seconds = {r: estimate_seconds(j, results) for r, j in by_dir.items()}
        found = executors.run_slurm(work, payload, slurm,
                                    lambda p: sum(seconds[m["run_dir"]] for m in stacking.members(p)),
                                    Path(slurm.folder) if slurm.folder else executors.default_folder(results))
    else:
        found = executors.run_local(work, payload, workers)
    outcomes = stacking.outcomes(found)

    # each cell is exported by its worker as it finishes; a failed one is reported and the others go on, so a long
    # unattended reproduction never loses its finished cells to one that broke
    failed: list[tuple[str, Exception]] = []
    summary["held"] = {}
    for p, out, error in outcomes:
        job = by_dir[p["run_dir"]]
        if error is not None:
            failed.append((job.cell.folder, error))
            print(f"  {executors.what_became(error)} {job.cell.folder}: {error}", flush=True)
            continue
        if "held_by" in out:
            summary["held"][job.cell.folder] = out["held_by"]
            print(f"  left {job.cell.folder} to {out['held_by']}", flush=True)
            continue
        summary["done"].append(job.cell.folder)
        said = "finished by another task" if "skipped" in out else f"{out['wall_s']:.0f} s"
        print(f"  done {job.cell.folder} ({len(summary['done'])}/{len(todo)}, {said})", flush=True)
    summary["wall_s"] = time.perf_counter() - t0
    summary["external"] = external(target, preset, results)  # a retrained table cell leaves its table out of step
    if failed:  # the first failure as itself: a user's mistake stays one line, a bug keeps its traceback
        # a real failure before a stop (a stopped or unstarted cell is only waiting for the next run)
        failed.sort(key=lambda f: executors.what_became(f[1]) != "failed")
        if len(failed) > 1:
            words = [executors.what_became(e) for _, e in failed]
            said = ", ".join(f"{words.count(w)} {w}" for w in ("failed", "stopped", "left") if w in words)
            print(f"{len(failed)} cells not finished ({said}): {', '.join(f for f, _ in failed)}; the others are "
                  "exported, and the same command resumes these", flush=True)
        raise failed[0][1]
    return summary


def schedule(todo: list[Job], results: Path, workers: int) -> list[Job]:
    """The order the cells are handed out.  One worker takes the cheapest first, so a stopped reproduction has
    the most cells done; several take the longest first (longest processing time first, handed out in that
    order as workers come free), so the cells left at the end are short ones and no core waits alone on a
    long cell while the others idle."""
    return sorted(todo, key=lambda j: _cost(j, results), reverse=workers > 1)


def _cost(job: Job, results: Path) -> float:
    """Tokens the cell still has to train on times its parameters (a step's arithmetic, 6·N per token),
    weighted by its architecture's step cost (a trained cell costs nothing): what :func:`schedule` orders the
    cells by.  At the quick preset's 200k parameters a step is partly fixed overhead, so this overstates a
    larger model's seconds beside them."""
    from .. import tasks

    cfg = job.cell.config()
    rd = RunDir(run_dir(results, job.cell))
    if rd.read_cell() is not None:
        return 0.0
    done = rd.latest_step()
    T = tasks.make(cfg["task"], **cfg["task_params"]).seq_len
    from ..models.catalog import step_cost

    return step_cost(job.cell.arch) * (cfg.get("params") or 1) * max(cfg["steps"] - done, 0) * cfg["batch_size"] * T


def _timings(folder: Path) -> float | None:
    """Seconds a committed cell took, from its ``timings.json`` (training, evaluation and analysis)."""
    try:
        t = json.loads((folder / "timings.json").read_text())
    except (OSError, ValueError):
        return None
    return sum(float(t.get(k) or 0.0) for k in ("train_s", "eval_s", "analyze_s")) or None


def estimate_seconds(job: Job, results: Path) -> float:
    """Seconds ``job`` is expected to take, from committed timings: its sibling seeds' mean (``timings.json``) where
    committed; else the benchmarked step time of its column and architecture (:func:`_benchmarked`); else its cost
    (:func:`_cost`) at the median seconds per unit of cost of the preset's committed cells (every preset's, where its
    own has none) — on the devices those were measured on, not the one it will run on."""
    own = [t for s in grid.SEEDS if (t := _timings(cell_dir(results, grid.Cell(job.cell.preset, job.cell.column,
                                                                                job.cell.arch, s)))) is not None]
    if own:
        return statistics.fmean(own) * _remaining(job, results)
    measured = _benchmarked(results).get((job.cell.preset, job.cell.column, job.cell.arch))
    if measured is not None:
        return measured * _remaining(job, results)
    return _cost(job, results) * _rate(results, job.cell.preset)


def _benchmarked(results: Path) -> dict[tuple[str, str, str], float]:
    """Seconds a paper-preset cell is projected to take alone on a GPU, by (preset, column, architecture), from the
    committed step timings of ``benchmarks/paper_gpu.py`` (``benchmarks/results/paper_gpu.json``), where present."""
    try:
        doc = json.loads((results.parent / "benchmarks" / "results" / "paper_gpu.json").read_text())
    except (OSError, ValueError):
        return {}
    return {("paper", c["column"], c["arch"]): 3600 * c["projected_cell_h"] for c in (doc.get("cells") or {}).values()
            if isinstance(c, dict) and c.get("projected_cell_h")}


def _remaining(job: Job, results: Path) -> float:
    """The share of its steps a cell still has to train (an analysis still to do counts as a tenth)."""
    steps = job.cell.config()["steps"]
    done = RunDir(run_dir(results, job.cell)).latest_step()
    return max(1 - done / steps, 0.1) if steps else 1.0


def _rate(results: Path, preset: str) -> float:
    """Median seconds per unit of :func:`_cost` over the committed cells of ``preset`` (every preset's, if none)."""
    rates: dict[str, list[float]] = {}
    for folder in sorted(results.glob("*/cells/*")):
        seconds = _timings(folder)
        try:
            cfg = json.loads((folder / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if seconds is None:
            continue
        from .. import tasks
        from ..models.catalog import step_cost

        try:
            T = tasks.make(cfg["task"]["name"], **cfg["task"]["params"]).seq_len
            full = step_cost(cfg["model"]["arch"]) * (cfg["train"].get("params") or 1) * cfg["train"]["steps"] \
                * cfg["train"]["batch_size"] * T
        except Exception:  # noqa: BLE001 - a record of an older layout: no rate from it
            continue
        if full > 0:
            rates.setdefault(folder.parent.parent.name, []).append(seconds / full)
    pool = rates.get(preset) or [r for rs in rates.values() for r in rs]
    return statistics.median(pool) if pool else 0.0


def array_plan(todo: Sequence[Job], results: Path, opts: executors.SlurmOptions) -> dict[str, Any]:
    """The job array ``todo`` would be submitted as: each task's cells and estimated hours (its cells' seconds
    shared over the cells it works at once), the array's makespan, and the same cells worked one at a time."""
    seconds = {j.cell.folder: estimate_seconds(j, results) for j in todo}
    parts = executors.shards([{"folder": j.cell.folder} for j in todo], opts.tasks, lambda p: seconds[p["folder"]])
    tasks = []
    for part in parts:
        total = sum(seconds[p["folder"]] for p in part)
        tasks.append({"cells": [p["folder"] for p in part], "serial_h": total / 3600,
                      "hours": max(total / min(opts.at_once(stacked=False), len(part)),  # a stack's cells train at once
                                   max(seconds[p["folder"]] for p in part)) / 3600})
    return {"tasks": tasks, "makespan_h": max((t["hours"] for t in tasks), default=0.0),
            "serial_h": sum(seconds.values()) / 3600, "options": opts.parameters()}


def _eval_n(preset: str) -> int:
    return grid.EVAL_N[preset]


if __name__ == "__main__":  # pragma: no cover - the CLI is `windtunnel reproduce`
    import sys

    print(json.dumps(reproduce(*sys.argv[1:2] or ["paper1"]), indent=1))
