"""What the quick table's training costs in FLOPs, and the fastest it could run on this machine.

    python benchmarks/table_budget.py [--table results/quick/table.json] [--preset quick] [--cores 2]

For every cell of the table (column × architecture) it builds the cell's model exactly as the
table does (``windtunnel.run.grid``, capacity-matched) and counts the model FLOPs of its training run:
``steps × batch × T × (6·N + attention)`` — 6·N per token for the weights (forward + backward),
plus ``12·n_layers·T·d_model`` per token for a transformer's attention scores and mixing (the
nanoGPT/PaLM convention of ``train_throughput.py``; a Mamba's scan and an LSTM's gates beyond
their weights are not counted, which flatters them).  With the table's measured training seconds
(each cell's least contended seed from its run folder, else ``table.json``'s mean over seeds) it prints each cell's achieved GFLOP/s and its MFU against a
dense fp32 matmul peak measured in the same run on one thread, then the table's total FLOPs and
the wall-time floor: total FLOPs ÷ (cores × peak), i.e. every core at 100% MFU on every cell —
the time no implementation of the same recipe can beat on this machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from common import matmul_peak_flops
from windtunnel.run import grid
from windtunnel import models, tasks


def cell_flops(preset: str, column: str, arch: str) -> tuple[int, float]:
    """(parameters, model FLOPs of the whole training run) of one table cell."""
    cfg = grid.preset(preset, column, arch)
    task = tasks.make(cfg["task"], **cfg["task_params"])
    model = models.make(arch, task, params=cfg["params"], **cfg["model"])
    n, T = model.n_params(), task.seq_len
    per_token = 6 * n
    if arch == "transformer":
        per_token += 12 * model.config.n_layers * T * model.config.d_model
    return n, float(cfg["steps"] * cfg["batch_size"] * T * per_token)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default="results/quick/table.json")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    measured: dict[tuple[str, str], float] = {}
    seeds = 1
    if Path(args.table).is_file():
        table = json.loads(Path(args.table).read_text())
        seeds = int(table["meta"]["seeds"])
        for c in table["cells"]:
            # the least contended seed where the run folders are here, else the mean over seeds
            times = [json.loads((Path(d) / "cell.json").read_text())["train_s"] for d in c.get("run_dirs", [])
                     if (Path(d) / "cell.json").is_file()]
            if times:
                measured[(c["task"], c["arch"])] = min(times)
            elif c.get("train_s") and c.get("seeds"):
                measured[(c["task"], c["arch"])] = c["train_s"] / len(c["seeds"])
    peak = matmul_peak_flops()
    print(f"# python benchmarks/table_budget.py --table {args.table}: each cell's training seconds from its least "
          "contended seed (the cell.json of its run folders where they are here), else the table's mean over seeds")
    print(f"dense fp32 matmul peak, one thread, measured now: {peak / 1e9:.1f} GFLOP/s")
    print(f"{'column':24s} {'arch':14s} {'params':>8s} {'TFLOP':>7s} {'train_s':>8s} {'GFLOP/s':>8s} {'MFU':>6s}")
    total_flops = total_s = 0.0
    for column in grid.TABLE_COLUMNS:
        for arch in grid.TABLE_ARCHS:
            n, flops = cell_flops(args.preset, column, arch)
            total_flops += flops
            s = measured.get((column, arch))
            if s:
                total_s += s
                rate = flops / s
                print(f"{column:24s} {arch:14s} {n:8d} {flops / 1e12:7.2f} {s:8.0f} {rate / 1e9:8.1f} {rate / peak:6.1%}")
            else:
                print(f"{column:24s} {arch:14s} {n:8d} {flops / 1e12:7.2f} {'—':>8s}")
    floor = total_flops * seeds / (args.cores * peak)
    print(f"one seed: {total_flops / 1e12:.1f} TFLOP; {seeds} seed(s): {total_flops * seeds / 1e12:.1f} TFLOP")
    if total_s:
        print(f"measured training per seed: {total_s / 60:.1f} core-min at {total_flops / total_s / 1e9:.1f} GFLOP/s "
              f"({total_flops / total_s / peak:.1%} MFU overall)")
    print(f"floor for {seeds} seed(s) on {args.cores} cores at 100% MFU: {floor / 60:.1f} min")


if __name__ == "__main__":
    main()
