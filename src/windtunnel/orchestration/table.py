"""The architecture × inference-primitive table (Paper I v3, arXiv 2512.22471) in one command.

Columns are wind tunnels chosen to isolate a primitive:

==========================  ==========================================  ===================
column                      primitive                                   headline metric
==========================  ==========================================  ===================
``bijection``               accumulation (staircase)                    entropy_mae_curve
``bijection_replacement``   accumulation + binding (sawtooth)           entropy_mae_curve
``hmm``                     transport (+ KL at K=30, 50)                kl
``recall``                  random-access binding                       accuracy
==========================  ==========================================  ===================

Rows are the architectures, capacity-matched (``params``) — ``mlp`` sees its prefix through a
window, ``mlp_pointwise`` (the papers' MLP control) sees only its own position — and two
references computed on the same evaluation episodes: the Bayes oracle (0 by construction) and the
context-blind optimum (``tasks.context_blind``: the best any predictor can do from its position and
own input alone, the floor of "no in-context inference").  Each cell is the mean over seeds with a
95% interval across seeds (Student's t; the within-seed bootstrap interval is in table.json).  Each
(column, architecture, seed) cell is an ordinary run folder under ``OUT/runs/``; a cell whose
``eval.json`` exists is never redone, and an unfinished one resumes from its last checkpoint, so
a killed table restarted with the same command loses nothing.  A cell whose run folder is gone but
that ``windtunnel reproduce`` committed under ``OUT/cells/`` with the same recipe and evaluation is
taken from there (``committed_cell``): the committed cells and the table are one set of runs.  Cells run in parallel in worker
processes (``concurrent.futures`` from the standard library): on GPUs one graphed stack of a cell's seeds per GPU
(``grid.STACKS_PER_GPU``), or three cells per GPU unstacked (``grid.CELLS_PER_GPU``), otherwise CPU workers splitting
the cores (``executors.default_workers``).

The same command makes the sequel's table (``family="sequel"``, ``windtunnel table --family sequel``: Bayesian
model selection over function classes, the model-selection sequel of the wind-tunnel papers, arXiv 2607.19379):
columns :data:`grid.SEQUEL_COLUMNS` (a selection problem — one class, involutions vs 3-cycles, rotations vs
multiplications — under a symbol regime, and the arithmetic cell's two controls), rows :data:`grid.SEQUEL_ARCHS`,
headline metric ``kl`` (bits against the exact posterior predictive) and a second block with ``class_posterior_mae``
(the class posterior read from the model's predictive against the exact ``P(C | D)``) where the column has one.  Its
cells are the ones ``windtunnel reproduce sequel`` trains and commits (the in-context-facts control on the transformer
alone); it writes ``sequel_table.{md,html,json}`` and ``sequel_references.json`` beside the primitives table, whose
files it never touches.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from . import executors, stacking, table_pages
from ..run import grid, locks
from ..errors import InvalidValue, UserError, did_you_mean, is_int

from .table_families import FAMILIES

DEFAULT_SEEDS = 3
EVAL_N = grid.EVAL_N  # the grid decides the evaluation size of every cell


def cell_config(preset: str, column: str, arch: str, seed: int, params: int | None,
                steps: int | None = None) -> dict[str, Any]:
    """``TrainConfig`` fields of one cell (``grid.Cell.config``)."""
    return grid.Cell(preset, column, arch, seed, params, steps).config()


def run_cell(job: dict[str, Any]) -> dict[str, Any]:
    """Train (or resume) and evaluate one cell; returns its summary.  Runs in a worker process
    (or in this one with ``workers=1``: the thread count is restored afterwards)."""
    from ..run.config import threads_kept

    with threads_kept():
        return _run_cell(job)


def claimed_cell(job: dict[str, Any]) -> dict[str, Any]:
    """:func:`run_cell` holding the cell's claim (:mod:`windtunnel.run.locks`); ``{"held_by": …}`` where another worker
    holds it."""
    with locks.claimed(job["run_dir"]) as holder:
        if holder is not None:
            return {"held_by": holder.describe()}
        return run_cell(job)


def _run_cell(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from ..run.runs import RunDir
    from .stages import EVAL_SEED, evaluate_run, train_run
    from ..training.loop import TrainConfig

    torch.set_num_threads(job["threads"])
    if job.get("device"):
        job["config"]["device"] = job["device"]
    run = RunDir(job["run_dir"])
    cell = run.read_cell()
    if cell is None and run.eval_path.is_file():  # a cell finished by windtunnel 0.1, whose eval.json held it
        cell = run.read_eval().get("cell")
        if cell is not None:
            run.write_cell(cell)
    if cell is not None:
        run.read_eval()  # a finished cell whose evaluation is damaged is refused, not tabulated from its summary
        return cell
    cfg = TrainConfig.from_dict(job["config"])
    train_run(cfg, run, resume=run.is_run())
    # a cell is evaluated at its recipe's size whatever an earlier hand-made evaluation of the folder used
    result = evaluate_run(run, n=job["eval_n"], lengths=job.get("lengths"), seed=EVAL_SEED, device=job.get("device"),
                          force=True)
    cell = {
        "task": job["column"],
        "arch": job["arch"],
        "seed": job["seed"],
        "params": result.model.get("n_params"),
        "train_s": run.training_seconds(),
        "metrics": {k: v["value"] for k, v in result.metrics.items()},
        "ci": {k: v["ci"] for k, v in result.metrics.items()},
        "oracle": {k: v["value"] for k, v in result.oracle.items()},
        "lengths": {str(K): {k: v["value"] for k, v in d["metrics"].items()} for K, d in result.lengths.items()},
        "run_dir": str(run.path),
    }
    run.write_cell(cell)
    return cell


def aggregate_cells(cells: list[dict[str, Any]], family: str = "primitives") -> list[dict[str, Any]]:
    """Group seeds of the same (task, arch) into one table cell with mean/std (and the seed CI), in the order of
    ``family``'s columns and rows (others after them, by name)."""
    from ..evaluation.evaluate import mean_std

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    # the table's own order (its columns, then its rows, then seeds), whatever order the cells finished in,
    # so a cell's place in table.json and the order of its per-seed values are the same on every run
    columns, rows = list(FAMILIES[family].columns), list(FAMILIES[family].archs)

    def order(c: dict[str, Any]) -> tuple[Any, ...]:
        return (columns.index(c["task"]) if c["task"] in columns else len(columns), c["task"],
                rows.index(c["arch"]) if c["arch"] in rows else len(rows), c["arch"], c["seed"])

    for c in sorted(cells, key=order):
        groups.setdefault((c["task"], c["arch"]), []).append(c)
    out = []
    for (task, arch), cs in groups.items():
        names = list(cs[0]["metrics"])
        metrics = {}
        for name in names:
            ms = mean_std([c["metrics"].get(name) for c in cs])
            ms["bootstrap_ci"] = [c["ci"].get(name) for c in cs]  # within each seed, over sequences
            metrics[name] = ms
        for K in cs[0].get("lengths", {}):
            for name in ("kl", "entropy_mae", "entropy_mae_curve"):
                ms = mean_std([c["lengths"][K].get(name) for c in cs])
                metrics[f"{name}@K={K}"] = ms
        out.append({
            "task": task,
            "arch": arch,
            "seeds": sorted(c["seed"] for c in cs),
            "params": cs[0]["params"],
            "metrics": metrics,
            "run_dirs": [c["run_dir"] for c in cs],
            "train_s": sum(c["train_s"] for c in cs),
        })
    return out


def out_of_step(out: Path, name: str = "table.json") -> list[str]:
    """The committed cells (``OUT/cells/``) whose numbers ``OUT/{name}`` (``table.json``, or the sequel's
    ``sequel_table.json``) no longer holds: for each table cell whose seeds are all committed, the folders of the
    seeds whose ``eval.json`` value of a table metric differs from the table's (a seed retrained since the table was
    made).  Empty where there is no table.  The table is then regenerated by ``windtunnel table``, which takes the
    committed cells."""
    try:
        table = json.loads((out / name).read_text())
        cells = table["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    stale: list[str] = []
    for c in cells:
        folders = [out / "cells" / f"{c['task']}-{c['arch']}-s{s}" for s in c.get("seeds", [])]
        try:
            evals = [json.loads((f / "eval.json").read_text()) for f in folders]
        except (OSError, ValueError):
            continue  # a seed not committed: the table holds a run this folder does not
        for i, (f, e) in enumerate(zip(folders, evals)):
            for name, m in c["metrics"].items():
                metric, _, K = name.partition("@K=")
                try:
                    got = (e["lengths"][K]["metrics"] if K else e["metrics"])[metric]["value"]
                    want = m["values"][i]
                except (KeyError, IndexError, TypeError):
                    continue
                if got != want and (got is None or want is None
                                    or not math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-15)):
                    stale.append(f.name)
                    break
    return stale


def _is_table(path: Path) -> bool:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and {"meta", "cells"} <= set(d)


def _validate_cells(preset: str, columns: list[str], archs: list[str], params: int | None, steps: int | None) -> None:
    """Build the task and model of every (column, architecture) once: a bad ``params`` or ``steps``
    is refused before the table touches its folder."""
    from ..training.loop import TrainConfig, build

    for col in columns:
        for arch in archs:
            build(TrainConfig.from_dict(cell_config(preset, col, arch, 0, params, steps)))


def _refuse_changed_recipes(jobs: list[dict[str, Any]]) -> None:
    """A cell folder trained under another recipe is never reused as this table's cell, nor trained
    on: ``InvalidValue`` naming the first such folder and what changed, before any work starts."""
    from ..run.runs import RunDir
    from ..run.config import recipe

    for job in jobs:
        run = RunDir(job["run_dir"])
        if not run.is_run():
            continue
        stored, wanted = recipe(run.read_config()["train"]), recipe(job["config"])
        changed = sorted(k for k in wanted if stored.get(k) != wanted[k])
        if changed:
            raise InvalidValue(f"{run.path} was trained with another recipe ({', '.join(changed)} differ); "
                               "move it away to retrain that cell, or choose another --out")


def committed_cell(job: dict[str, Any], out: Path) -> dict[str, Any] | None:
    """The cell ``windtunnel reproduce`` committed for this job under ``OUT/cells/`` (the same folder name,
    the same summary ``run_cell`` returns), when its recipe, evaluation (size, episodes) and lengths are this
    job's and the job has no run folder of its own: the table takes it instead of retraining a cell whose
    (uncommitted) run folder is gone; its ``run_dir`` becomes the committed folder.  ``None`` otherwise — a
    damaged or older committed cell included, which the table then trains afresh."""
    from ..errors import UserError
    from ..evaluation.evaluate import EVAL_SEED
    from ..run.runs import RunDir

    if RunDir(job["run_dir"]).is_run():
        return None  # a run folder of its own (finished or resumable) is the cell
    d = out / "cells" / Path(job["run_dir"]).name
    try:
        if not RunDir(d).holds(job["config"]):  # the recipe test every resuming command applies
            return None
        cell = json.loads((d / "cell.json").read_text())
        evaluation = json.loads((d / "eval.json").read_text())
        if evaluation.get("n") != job["eval_n"] or evaluation.get("seed") != EVAL_SEED:
            return None
        if sorted(map(int, cell.get("lengths") or {})) != sorted(job.get("lengths") or []):
            return None  # evaluated at other lengths than the table's column
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UserError):  # damaged, or an older windtunnel's
        return None
    return {**cell, "run_dir": str(d)}


def reference_rows(preset: str, column: str) -> list[str]:
    """The names of the rows :func:`references` writes for ``column`` (a ``references.json`` without one of
    them was written by an older version and is made again)."""
    from .. import tasks
    from ..evaluation.references import has_header_blind, window_sizes

    name, params = grid.task_spec(column, preset)
    task = tasks.make(name, **params)
    return ["oracle", "context_blind", *(f"window_{m}" for m in window_sizes(task)),
            *(["header_blind"] if has_header_blind(task) else [])]


def references(preset: str, column: str, eval_n: int, lengths: list[int] | None) -> dict[str, Any]:
    """The reference rows of one column, on the cells' own evaluation episodes: the Bayes oracle and the
    context-blind optimum (``tasks.context_blind``); on a task that defines a windowed posterior also the windowed
    references (``references.Windowed``): ``window_m``, the posterior from the last ``m`` pieces of evidence
    (:data:`references.WINDOWS`; on HMM filtering ``window_1`` is the filter of the current observation alone),
    the yardsticks of how much of its context a model reads — and on a task with real-valued inputs
    ``window_0``, the answer given the current input alone, the floor of a network without cross-position mixing
    there; on a task whose header states a relabelling (model selection, opaque symbols) ``header_blind``, the
    posterior of a reader who does not read the header."""
    from .. import tasks
    from ..evaluation.evaluate import EVAL_SEED, evaluate
    from ..evaluation.references import HeaderBlind, Windowed

    name, params = grid.task_spec(column, preset)
    task = tasks.make(name, **params)
    out = {}
    for ref in reference_rows(preset, column):
        model = (tasks.oracle(task) if ref == "oracle" else tasks.context_blind(task) if ref == "context_blind"
                 else HeaderBlind(task) if ref == "header_blind" else Windowed(task, int(ref.removeprefix("window_"))))
        r = evaluate(model, task, n=eval_n, seed=EVAL_SEED, lengths=lengths if ref == "oracle" else None, n_boot=200)
        out[ref] = {
            "metrics": {k: v["value"] for k, v in r.metrics.items()},
            "lengths": {str(K): {k: v["value"] for k, v in d["metrics"].items()} for K, d in r.lengths.items()},
        }
    if lengths:  # the context-blind table is fitted per length
        for K in lengths:
            tK = task.with_length(K)
            rK = evaluate(tasks.context_blind(tK), tK, n=eval_n, seed=EVAL_SEED, n_boot=200)
            out["context_blind"]["lengths"][str(K)] = {k: v["value"] for k, v in rK.metrics.items()}
    return out


def run_table(
    preset: str = "quick",
    seeds: int = DEFAULT_SEEDS,
    archs: list[str] | None = None,
    tasks: list[str] | None = None,
    params: int | None = None,
    out: Path | None = None,
    workers: int | None = None,
    steps: int | None = None,
    eval_n: int | None = None,
    slurm: "executors.SlurmOptions | None" = None,
    stack: str = "auto",
    compile: bool = False,
    family: str = "primitives",
) -> Path:
    """Train and evaluate every cell (resuming what exists) and write table.{md,html,json}; with ``slurm``, the
    cells are worked as a SLURM job array (:func:`windtunnel.orchestration.executors.run_slurm`) and the table is written once
    every one has come back.  ``stack``: a cell's seeds as one stacked model (:mod:`windtunnel.orchestration.stacking`):
    ``auto`` where the cells run on GPUs, ``on``, ``off``.  ``compile``: each cell's model through ``torch.compile``
    (not part of its recipe: a cell trained either way is the same cell).  ``family``: ``primitives`` (Paper I's
    table, the default) or ``sequel`` (the model-selection sequel's: its columns and rows, written to
    ``sequel_table.{md,html,json}`` with its reference rows in ``sequel_references.json``; :data:`FAMILIES`).
    Returns the markdown's path."""
    import functools

    import torch

    from .. import models
    from ..io import write_text_atomic

    if family not in FAMILIES:
        raise InvalidValue(f"unknown table family {family!r}: choose from {', '.join(FAMILIES)}")
    fam = FAMILIES[family]
    archs = archs or list(fam.archs)
    columns = tasks or list(fam.columns)
    for a in archs:
        if models.is_external(a):
            models.load_factory(a)
        elif a not in models.names():
            raise InvalidValue(f"unknown arch {a!r}{did_you_mean(a, models.names())}: choose from "
                               f"{', '.join(models.names())} or package.module:factory")
    for c in columns:
        if c not in fam.columns:
            other = next((f.name for f in FAMILIES.values() if c in f.columns), None)
            if other is not None:
                raise InvalidValue(f"{c!r} is a column of the {other} table, not of the {family} table: pass "
                                   f"--family {other}, or choose from {', '.join(fam.columns)}")
            raise InvalidValue(f"unknown table column {c!r}: choose from {', '.join(fam.columns)}")
    if not any(fam.has_cell(c, a) for c in columns for a in archs):
        raise InvalidValue(f"no cells to make: {', '.join(columns)} is trained on the transformer alone; "
                           "add transformer to --archs")
    if not isinstance(seeds, int) or seeds < 1:
        raise InvalidValue(f"invalid seeds: must be a positive integer, got {seeds!r}")
    if out is not None and str(out).strip() == "":
        raise InvalidValue("invalid out: the output folder is empty")
    out = Path(out or f"results/{preset}")
    if workers is not None and (not is_int(workers) or workers < 1):
        raise InvalidValue(f"invalid workers: must be a positive integer, got {workers!r}")
    if eval_n is not None and (not is_int(eval_n) or eval_n < 1):
        raise InvalidValue(f"invalid eval_n: must be a positive integer, got {eval_n!r}")
    _validate_cells(preset, columns, archs, params, steps)  # every config builds, before anything is written
    if out.exists() and not out.is_dir():
        raise InvalidValue(f"invalid out: {out} is a file")
    if (out / f"{fam.stem}.md").exists() and not _is_table(out / f"{fam.stem}.json"):
        raise InvalidValue(f"invalid out: {out} holds a {fam.stem}.md that windtunnel did not write; "
                           "choose another folder")
    if slurm is not None:  # refused before the table touches its folder
        executors.environment_ok()
    try:
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidValue(f"invalid out: cannot write {out}: {exc.strerror or exc}") from None

    n_gpu = torch.cuda.device_count() if slurm is None else slurm.gpus
    cores = (os.cpu_count() or 1) if slurm is None else slurm.cpus
    if slurm is not None:
        workers = slurm.at_once(stacking.wanted(stack, n_gpu))
    elif workers is None:
        workers = executors.default_workers(n_gpu, stacking.wanted(stack, n_gpu), cores)
    threads = 1 if n_gpu else max(1, cores // workers)
    jobs = []
    for seed in range(seeds):
        for col in columns:
            for arch in (a for a in archs if fam.has_cell(col, a)):
                jobs.append({
                    "column": col, "arch": arch, "seed": seed,
                    "config": {**cell_config(preset, col, arch, seed, params, steps), "compile": compile},
                    "run_dir": str(out / "runs" / grid.Cell(preset, col, arch, seed).folder),
                    "eval_n": eval_n or EVAL_N[preset],
                    "lengths": fam.columns[col].get("lengths"),
                    "threads": threads,
                    "device": f"cuda:{len(jobs) % n_gpu}" if n_gpu else None,
                })
    _refuse_changed_recipes(jobs)
    from ..run.runs import RunDir

    # a cell finished in its run folder is reused there; one whose run folder is gone but that reproduce
    # committed (the same recipe) is taken from OUT/cells/
    adopted = {}
    for i, j in enumerate(jobs):
        if (c := committed_cell(j, out)) is not None:
            adopted[i] = c
    finished_before = {j["run_dir"] for j in jobs if RunDir(j["run_dir"]).read_cell() is not None}
    reused = len(finished_before) + len(adopted)
    cells: list[dict[str, Any]] = list(adopted.values())
    n_cells = len(jobs)
    if reused:  # a resumed table says what it resumed, not only "done" for cells it did not work
        print(f"resuming the table: {reused} of {n_cells} cells finished earlier are reused, "
              f"{n_cells - reused} to work", flush=True)
    jobs = [j for i, j in enumerate(jobs) if i not in adopted]
    # seed by seed (a table stopped early has whole seeds), the slowest cells first within a seed
    from ..models.catalog import step_cost

    jobs.sort(key=lambda j: (j["seed"], -step_cost(j["arch"]), j["column"]))
    t0 = time.perf_counter()
    work: executors.Work = claimed_cell
    if stacking.wanted(stack, n_gpu):
        jobs, work = stacking.group(jobs, n_gpu), functools.partial(stacking.work_stack, claimed_cell)
    if slurm is not None:
        found = executors.run_slurm(work, jobs, slurm, lambda j: sum(step_cost(m["arch"]) * m["config"]["steps"]
                                                                     for m in stacking.members(j)),
                                    Path(slurm.folder) if slurm.folder else executors.default_folder(out))
    else:
        found = executors.run_local(work, jobs, workers)
    outcomes = stacking.outcomes(found)
    held, failed = [], []
    for job, cell, error in outcomes:
        name = f"{job['column']}/{job['arch']}/s{job['seed']}"
        if error is not None:  # the others go on; the first failure is raised once every cell is back
            failed.append(error)
            print(f"  {executors.what_became(error)} {name}: {error}", flush=True)
        elif "held_by" in cell:
            held.append(f"{name} ({cell['held_by']})")
        else:
            cells.append(cell)
            print(f"  {'reused' if job['run_dir'] in finished_before else 'done'} {name} ({len(cells)}/{n_cells})",
                  flush=True)
    if failed:  # a real failure before a stop (a stopped or unstarted cell is only waiting for the next run)
        failed.sort(key=lambda e: executors.what_became(e) != "failed")
        raise failed[0]
    if held:
        raise UserError(f"{len(held)} cell(s) are being worked by another windtunnel process: {'; '.join(held)}; "
                        "run the table again when they finish (finished cells are reused)")
    wall = time.perf_counter() - t0
    wall_total = sum(c["train_s"] for c in cells)
    table = aggregate_cells(cells, family)
    argv = ["windtunnel", "table", *(["--family", family] if family != "primitives" else []),
            "--preset", preset, "--seeds", str(seeds)]
    if archs != list(fam.archs):
        argv += ["--archs", *archs]
    if columns != list(fam.columns):
        argv += ["--tasks", *columns]
    if params is not None:
        argv += ["--params", str(params)]
    if steps is not None:
        argv += ["--steps", str(steps)]
    meta = {
        "preset": preset,
        "seeds": seeds,
        "wall_s": wall,  # this invocation (cells finished earlier are not redone)
        "train_s_total": wall_total,
        "cells": n_cells,
        "cells_reused": reused,
        "device": f"{n_gpu} GPU(s)" if n_gpu else f"{cores} CPU cores",
        "workers": workers,
        "command": " ".join(argv),
        **({"family": family} if family != "primitives" else {}),
    }
    refs_path = out / fam.references
    refs = json.loads(refs_path.read_text()) if refs_path.is_file() else {}
    key = {"eval_n": eval_n or EVAL_N[preset]}
    for col in columns:
        if refs.get(col, {}).get("key") != key:
            refs[col] = {"key": key, **references(preset, col, key["eval_n"], fam.columns[col].get("lengths"))}
    write_text_atomic(refs_path, json.dumps(refs, indent=1))
    md = (table_pages.markdown if family == "primitives" else table_pages.sequel_markdown)(table, columns, archs, meta,
                                                                                        refs)
    write_text_atomic(out / f"{fam.stem}.md", md)
    write_text_atomic(out / f"{fam.stem}.html", table_pages.page(md, table, columns, archs, family))
    write_text_atomic(out / f"{fam.stem}.json",
                      json.dumps({"meta": meta, "cells": table, "references": refs}, indent=1))
    return out / f"{fam.stem}.md"
