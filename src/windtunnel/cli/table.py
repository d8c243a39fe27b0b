"""``windtunnel table``: the architecture × inference-primitive table, its cells trained, evaluated and read
(:func:`windtunnel.orchestration.table.run_table`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import UsageError, positive_int
from .cluster import add_executor_options, slurm_from
from .outputs import keep_result, out_path


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``table``."""
    from ..run import grid

    tb = sub.add_parser("table", help="the architecture × inference-primitive table")
    tb.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="quick (default) or paper")
    tb.add_argument("--seeds", type=positive_int, default=3, help="training seeds per cell (default 3)")
    tb.add_argument("--archs", nargs="+", help="rows (default: transformer mamba lstm mlp mlp_pointwise; also hf:… and module:factory)")
    tb.add_argument("--tasks", nargs="+", help="columns (default: bijection bijection_replacement hmm recall)")
    tb.add_argument("--params", type=positive_int,
                    help="capacity of every row in parameters (default: the preset's, 200k quick, 2.67M paper)")
    tb.add_argument("--out", help="table folder (default results/PRESET)")
    tb.add_argument("--workers", type=positive_int, help="cells trained at once (default: three per GPU, else one per core)")
    tb.add_argument("--steps", type=positive_int, help="override every cell's training steps (smoke runs)")
    tb.add_argument("--force", action="store_true", help="replace a finished table.json in the output folder")
    add_executor_options(tb)
    tb.set_defaults(func=cmd_table)


def cmd_table(args: argparse.Namespace, extra: list[str]) -> int:
    from ..orchestration.table import run_table

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")
    slurm = slurm_from(args)  # before anything is checked on disk: a flag the executor would ignore is a mistake
    out = out_path(args.out) or Path(f"results/{args.preset}")
    keep_result(out / "table.json", args.force)
    path = run_table(
        preset=args.preset, seeds=args.seeds, archs=args.archs, tasks=args.tasks, params=args.params,
        out=out, workers=args.workers, steps=args.steps, slurm=slurm, stack=args.stack, compile=args.compile,
    )
    print(f"wrote {path}")
    return 0
