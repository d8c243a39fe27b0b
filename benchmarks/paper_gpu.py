"""The paper preset on one GPU: each table cell's training speed at paper size, paper-scale cells
trained against the clock, and the whole paper table's projected time on one GPU and on eight.

    python benchmarks/paper_gpu.py measure [--steps 100] [--jsonl F]       # on the GPU machine
    python benchmarks/paper_gpu.py cells --minutes M [--columns bijection hmm] [--out DIR]
    python benchmarks/paper_gpu.py summary [--jsonl F] [--cells DIR]        # anywhere: the projection

``measure`` trains every cell of the paper table (``windtunnel.run.grid``: the columns × the rows,
capacity-matched at ≈2.67M parameters, each on its own paper recipe) for ``--steps`` optimiser steps
through ``windtunnel.training.loop.train`` — the same loop, data stream, bf16 autocast and logging as a
real run — and reads the step time off ``metrics.jsonl`` between the first and the last logged step
(so start-up and the first steps' allocation are left out).  Each row: ms/step, tokens/s, the model
FLOPs per step (``table_budget.cell_flops``: 6·N per token plus the transformer's attention) and their
fraction of a dense bf16 matmul peak measured in the same run (MFU), and the cell's projected
training time (recipe steps × ms/step).  Rows are appended as they come, so a run stopped by its
time limit keeps what it measured.

``cells`` trains the named paper cells (seed 0) at once, each as ``windtunnel run COLUMN --preset
paper``, until they end or ``--minutes`` pass, then copies each run's ``config.json``,
``metrics.jsonl`` (and ``eval.json`` where it finished) to ``--out``: the held-out error against
wall time at the papers' scale, and, beside ``measure``'s solo rows, what running cells together on
one GPU costs each of them.

``summary`` writes ``benchmarks/results/paper_gpu.json`` and prints the table: per cell, solo speed
and MFU; the table's training time at 3 seeds on one GPU one cell at a time, on one GPU with the
cells run together as measured, and on eight GPUs (cells spread longest first, one at a time per GPU);
and the trained cells' trajectories and projected times to their recipes' ends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from common import matmul_peak_flops
from reproduce_budget import makespan
from table_budget import cell_flops
from windtunnel.run import grid
from windtunnel import tasks
from windtunnel.run.runs import RunDir
from windtunnel.training.loop import TrainConfig, train

SEEDS = 3
"""Seeds per cell of the paper table (as ``windtunnel table`` trains it)."""
GPUS = 8


def _append(path: str, row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def step_seconds(metrics: list[dict[str, Any]]) -> tuple[float, int]:
    """Seconds per step between the first and the last logged training line (start-up left out)."""
    logged = [m for m in metrics if "time" in m]
    if len(logged) < 2:
        raise ValueError("fewer than two logged steps")
    a, b = logged[0], logged[-1]
    return (b["time"] - a["time"]) / (b["step"] - a["step"]), b["step"] - a["step"]


def timing_config(fields: dict[str, Any], steps: int, device: str, **more: Any) -> TrainConfig:
    """The run ``fields`` describes, set up to be timed for ``steps`` steps: logged four times (the step time is read
    between the first and the last log), no progress bar, no evaluation or checkpoint on the way."""
    return TrainConfig.from_dict({**fields, "device": device, "progress": False, "log_every": max(1, steps // 4),
                                  "log_checkpoints": False, "eval_every": 10 * steps, "ckpt_every": 10 * steps, **more})


def timed_training(fields: dict[str, Any], steps: int, device: str) -> tuple[float, int, float]:
    """(seconds per step, steps timed, wall seconds) of ``steps`` steps of the run ``fields`` describes,
    trained in a scratch folder."""
    cfg = timing_config(fields, steps, device)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train(cfg, Path(tmp) / "run", until=steps)
        wall = time.perf_counter() - t0
        sec, timed = step_seconds(RunDir(Path(tmp) / "run").metrics())
    return sec, timed, wall


def measure_cell(column: str, arch: str, steps: int, device: str, scan_method: str | None = None) -> dict[str, Any]:
    """One paper cell trained ``steps`` steps; its speed (Mamba: with its scan walked by ``scan_method``)."""
    fields = grid.preset("paper", column, arch)
    if scan_method is not None:
        fields["model"] = {**fields["model"], "scan_method": scan_method}
    sec, timed, wall = timed_training(fields, steps, device)
    n_params, run_flops = cell_flops("paper", column, arch)
    step_flops = run_flops / fields["steps"]
    T = tasks.make(fields["task"], **fields["task_params"]).seq_len
    tokens = fields["batch_size"] * T
    return {"kind": "cell", "column": column, "arch": arch, **({"scan_method": scan_method} if scan_method else {}),
            "params": n_params, "steps": fields["steps"],
            "batch": fields["batch_size"], "seq_len": T, "timed_steps": timed, "ms_per_step": 1000 * sec,
            "tokens_per_s": tokens / sec, "model_tflops": step_flops / sec / 1e12, "wall_s": wall,
            "projected_cell_h": fields["steps"] * sec / 3600}


def cmd_measure(args: argparse.Namespace) -> None:
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    peak = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        n = 8192 if device != "cpu" else 512
        peak[name] = matmul_peak_flops(n=n, dtype=dtype, device=device)
    _append(args.jsonl, {"kind": "machine", "device": torch.cuda.get_device_name() if device != "cpu" else "cpu",
                         "torch": torch.__version__, "matmul_peak_tflops": {k: v / 1e12 for k, v in peak.items()}})
    # the authors' recipe for the bijection cell (their 2.67M transformer, 20,000 steps of batch 256), for the
    # ratio of its whole schedule to the paper preset's cell on the same GPU
    from time_to_bayes import config as time_to_bayes_config

    fields = time_to_bayes_config("authors")
    sec, timed, wall = timed_training(fields, args.steps, device)
    _append(args.jsonl, {"kind": "authors", "steps": fields["steps"], "batch": fields["batch_size"],
                         "timed_steps": timed, "ms_per_step": 1000 * sec, "projected_schedule_h": fields["steps"] * sec / 3600})
    for column in args.columns:
        for arch in args.archs:
            try:
                row = measure_cell(column, arch, args.steps, device)
            except Exception as e:  # one cell's failure is a row, not the end of the measurement
                row = {"kind": "cell", "column": column, "arch": arch, "error": f"{type(e).__name__}: {e}"}
            if "model_tflops" in row:
                row["mfu_bf16"] = row["model_tflops"] * 1e12 / peak["bf16"]
            _append(args.jsonl, row)
            for method in args.mamba_scans if arch == "mamba" else ():  # the scan's other walks, beside the default
                try:
                    row = measure_cell(column, arch, args.steps, device, scan_method=method)
                    row["mfu_bf16"] = row["model_tflops"] * 1e12 / peak["bf16"]
                except Exception as e:
                    row = {"kind": "cell", "column": column, "arch": arch, "scan_method": method,
                           "error": f"{type(e).__name__}: {e}"}
                _append(args.jsonl, row)


def cmd_cells(args: argparse.Namespace) -> None:
    out = Path(args.out)
    runs = Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen] = {}
    logs = {}
    for column in args.columns:
        rd = runs / f"{column}-transformer-paper"
        logs[column] = open(out / f"{column}.log", "w")
        procs[column] = subprocess.Popen(
            [sys.executable, "-m", "windtunnel", "run", column, "--preset", "paper", "--no-analyze", "--no-progress",
             "--out", str(rd)], stdout=logs[column], stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.time()
    while time.time() - t0 < 60 * args.minutes and any(p.poll() is None for p in procs.values()):
        time.sleep(5)
    for column, p in procs.items():
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # the run resumes from its last checkpoint when asked again
            p.wait()
        logs[column].close()
        rd = runs / f"{column}-transformer-paper"
        for name in ("config.json", "metrics.jsonl", "eval.json"):
            if (rd / name).is_file():
                shutil.copy(rd / name, out / f"{column}-{name}")
        print(f"{column}: exit {p.returncode}, {RunDir(rd).latest_step()} steps checkpointed", flush=True)


QUICK_COUNTERPART = {"hmm": "hmm_long", "bijection": "main_v20"}
"""The quick-preset cell each paper cell is compared with at equal steps: the same task at the same batch size
(HMM: 64, the 200k model's 8000-step budget control; bijection V=20: 128, the 200k main job's recipe)."""
GAP_STEPS = (2000, 4000, 6000, 8000)


def train_gap(metrics: list[dict[str, Any]], step: int, window: int = 500) -> float | None:
    """Mean logged Bayes gap (KL to the posterior on the training batches, bits) over the ``window`` steps up to
    ``step``; ``None`` where the run logged none there."""
    gaps = [m["bayes_gap"] for m in metrics if "bayes_gap" in m and step - window < m["step"] <= step]
    return sum(gaps) / len(gaps) if gaps else None


def gap_comparison(column: str, metrics: list[dict[str, Any]], quick_cells: Path) -> dict[str, Any] | None:
    """The paper cell's training Bayes gap beside its quick counterpart's seeds at the same steps and batch:
    capacity (and the paper recipe's rates) against the 200k model, budget held equal."""
    other = QUICK_COUNTERPART.get(column)
    if other is None:
        return None
    # a committed cell keeps its log as metrics.jsonl.gz: RunDir reads either form
    seeds = [RunDir(p) for p in sorted(quick_cells.glob(f"{other}-transformer-s*")) if RunDir(p).log_path.is_file()]
    if not seeds:
        return None
    quick = [[train_gap(run.metrics(), s) for s in GAP_STEPS] for run in seeds]
    return {"quick_cell": other, "steps": list(GAP_STEPS), "paper": [train_gap(metrics, s) for s in GAP_STEPS],
            "quick_seeds": quick,
            "quick_mean": [None if any(q[i] is None for q in quick) else sum(q[i] for q in quick) / len(quick)
                           for i in range(len(GAP_STEPS))]}


def _lpt(hours: list[float], machines: int) -> float:
    """Makespan of the jobs spread longest first, each to the least-loaded machine."""
    return makespan(sorted(hours, reverse=True), machines)


def summarise(jsonl: str, cells: str | None, quick_cells: str = "results/quick/cells") -> dict[str, Any]:
    rows = [json.loads(line) for line in Path(jsonl).read_text().splitlines() if line.strip()]
    machine = next(r for r in rows if r["kind"] == "machine")
    cell_rows = [r for r in rows if r["kind"] == "cell" and "ms_per_step" in r and "scan_method" not in r]
    scans = [r for r in rows if r["kind"] == "cell" and "ms_per_step" in r and "scan_method" in r]
    failed = [r for r in rows if r["kind"] == "cell" and "error" in r]
    hours = [r["projected_cell_h"] for r in cell_rows for _ in range(SEEDS)]
    authors = next((r for r in rows if r["kind"] == "authors"), None)
    if authors:
        authors = {**authors, "projected_schedule_min": 60 * authors["projected_schedule_h"]}
    mfu = [r["mfu_bf16"] for r in cell_rows]
    doc: dict[str, Any] = {
        "machine": machine, "authors": authors, "cells": {f"{r['column']}-{r['arch']}": r for r in cell_rows},
        "mamba_scans": {f"{r['column']}-{r['scan_method']}": r for r in scans},
        "failed": failed, "seeds": SEEDS, "mfu_min_pct": 100 * min(mfu) if mfu else None, "mfu_max_pct": 100 * max(mfu) if mfu else None,
        "table_hours_one_gpu_serial": sum(hours),
        f"table_hours_{GPUS}_gpus": _lpt(hours, GPUS),
        "longest_cell_h": max(r["projected_cell_h"] for r in cell_rows) if cell_rows else None,
    }
    trained = {}
    if cells and Path(cells).is_dir():
        solo = {(r["column"], r["arch"]): r["ms_per_step"] for r in cell_rows}
        for cfg_path in sorted(Path(cells).glob("*-config.json")):
            column = cfg_path.name[: -len("-config.json")]
            metrics_path = cfg_path.parent / f"{column}-metrics.jsonl"
            metrics = [json.loads(line) for line in metrics_path.read_text().splitlines()] if metrics_path.is_file() else []
            if sum("time" in m for m in metrics) < 2:
                continue  # killed before it logged twice: nothing to time
            cfg = json.loads(cfg_path.read_text())["train"]
            sec, _ = step_seconds(metrics)
            last = max(m["step"] for m in metrics if "time" in m)
            evals = [[m["step"], m["eval"]] for m in metrics if "eval" in m]
            entry = {"steps_done": last, "last_eval_step": evals[-1][0] if evals else None,
                     "last_eval": evals[-1][1] if evals else None, "recipe_steps": cfg["steps"], "train_s": max(m["time"] for m in metrics if "time" in m),
                     "ms_per_step_together": 1000 * sec, "projected_cell_h_together": cfg["steps"] * sec / 3600,
                     "eval": evals}
            if (column, cfg["arch"]) in solo:
                entry["slowdown_together"] = 1000 * sec / solo[(column, cfg["arch"])]
            ev = cfg_path.parent / f"{column}-eval.json"
            if ev.is_file():
                entry["final"] = {k: v["value"] for k, v in json.loads(ev.read_text())["metrics"].items()}
            compared = gap_comparison(column, metrics, Path(quick_cells))
            if compared:
                entry["gap_vs_quick"] = compared
            trained[column] = entry
        slow = [e["slowdown_together"] for e in trained.values() if "slowdown_together" in e]
        if slow:
            # cells run k at a time on one GPU, each slowed by the mean measured factor
            k = len(slow)
            mean = sum(slow) / k
            doc["together"] = {"cells_at_once": k, "mean_slowdown": mean, "throughput_gain": k / mean,
                               "table_hours_one_gpu_together": sum(hours) * mean / k,
                               f"table_hours_{GPUS}_gpus_together": _lpt(hours, GPUS * k) * mean}
    doc["trained"] = trained
    return doc


def cmd_summary(args: argparse.Namespace) -> None:
    doc = summarise(args.jsonl, args.cells)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    m = doc["machine"]
    print(f"{m['device']} (torch {m['torch']}), matmul peak bf16 {m['matmul_peak_tflops']['bf16']:.0f} TFLOP/s, "
          f"fp32 {m['matmul_peak_tflops']['fp32']:.0f}")
    print(f"{'cell':32s} {'params':>9s} {'ms/step':>8s} {'tokens/s':>10s} {'MFU':>6s} {'cell h':>7s}")
    for r in doc["cells"].values():
        print(f"{r['column'] + '/' + r['arch']:32s} {r['params']:9d} {r['ms_per_step']:8.1f} {r['tokens_per_s']:10.0f} "
              f"{100 * r.get('mfu_bf16', 0):5.2f}% {r['projected_cell_h']:7.2f}")
    for key, r in doc["mamba_scans"].items():
        print(f"{'mamba ' + key:32s} {r['params']:9d} {r['ms_per_step']:8.1f} {r['tokens_per_s']:10.0f} "
              f"{100 * r.get('mfu_bf16', 0):5.2f}% {r['projected_cell_h']:7.2f}")
    for r in doc["failed"]:
        print(f"{r['column'] + '/' + r['arch']:32s} failed: {r['error']}")
    if not doc["cells"]:
        return
    print(f"paper table, {doc['seeds']} seeds: {doc['table_hours_one_gpu_serial']:.1f} h on one GPU one cell at a time, "
          f"{doc[f'table_hours_{GPUS}_gpus']:.1f} h on {GPUS} GPUs (longest cell {doc['longest_cell_h']:.1f} h)")
    if doc["authors"]:
        a = doc["authors"]
        print(f"the authors' bijection recipe ({a['steps']} × {a['batch']}): {a['ms_per_step']:.1f} ms/step, "
              f"whole schedule {a['projected_schedule_h']:.2f} h")
    if "together" in doc:
        t = doc["together"]
        print(f"{t['cells_at_once']} cells at once on one GPU: each {t['mean_slowdown']:.2f}× slower, "
              f"{t['throughput_gain']:.2f}× the throughput → {t['table_hours_one_gpu_together']:.1f} h on one GPU, "
              f"{t[f'table_hours_{GPUS}_gpus_together']:.1f} h on {GPUS}")
    for column, e in doc["trained"].items():
        c = e.get("gap_vs_quick")
        if c:
            fmt = lambda xs: " / ".join("—" if x is None else f"{x:.4f}" for x in xs)  # noqa: E731
            print(f"training Bayes gap at steps {c['steps']}: paper {column} {fmt(c['paper'])}, "
                  f"quick {c['quick_cell']} {fmt(c['quick_mean'])} (mean of {len(c['quick_seeds'])} seeds)")
        last = e["eval"][-1] if e["eval"] else None
        print(f"trained {column}: {e['steps_done']}/{e['recipe_steps']} steps in {e['train_s']:.0f} s "
              f"({e['ms_per_step_together']:.1f} ms/step beside the others; whole recipe {e['projected_cell_h_together']:.2f} h)"
              + (f"; held-out at step {last[0]}: " + ", ".join(f"{k} {v:.4g}" for k, v in last[1].items()) if last else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    me = sub.add_parser("measure")
    me.add_argument("--steps", type=int, default=100)
    me.add_argument("--columns", nargs="+", default=list(grid.TABLE_COLUMNS))
    me.add_argument("--archs", nargs="+", default=list(grid.TABLE_ARCHS))
    me.add_argument("--jsonl", default="benchmarks/results/paper_gpu.jsonl")
    me.add_argument("--mamba-scans", dest="mamba_scans", nargs="*", default=[], choices=["loop", "doubling"],
                    help="also time Mamba with its scan walked this way (the default on a GPU is loop)")
    ce = sub.add_parser("cells")
    ce.add_argument("--minutes", type=float, required=True)
    ce.add_argument("--columns", nargs="+", default=["bijection", "hmm"])
    ce.add_argument("--runs", default="runs/paper_gpu")
    ce.add_argument("--out", default="benchmarks/results/paper_gpu_cells")
    su = sub.add_parser("summary")
    su.add_argument("--jsonl", default="benchmarks/results/paper_gpu.jsonl")
    su.add_argument("--cells", default="benchmarks/results/paper_gpu_cells")
    su.add_argument("--out", default="benchmarks/results/paper_gpu.json")
    args = ap.parse_args()
    {"measure": cmd_measure, "cells": cmd_cells, "summary": cmd_summary}[args.cmd](args)


if __name__ == "__main__":
    main()
