"""``windtunnel table``: the architecture × inference-primitive table, or with ``--family sequel`` the
model-selection sequel's table, its cells trained, evaluated and read
(:func:`windtunnel.orchestration.table.run_table`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import UsageError, positive_int
from .cluster import add_executor_options, slurm_from
from .outputs import keep_result, out_path


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``table``."""
    from ..orchestration.table import FAMILIES
    from ..run import grid

    tb = sub.add_parser("table", help="the architecture × inference-primitive table (--family sequel: the sequel's)")
    tb.add_argument("--family", default="primitives", choices=list(FAMILIES),
                    help="primitives (default: Paper I's table, table.{md,html,json}) or sequel (model selection: "
                         "sequel_table.{md,html,json})")
    tb.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="quick (default) or paper")
    tb.add_argument("--seeds", type=positive_int, default=3, help="training seeds per cell (default 3)")
    tb.add_argument("--archs", nargs="+",
                    help=f"rows (default: {' '.join(FAMILIES['primitives'].archs)}; with --family sequel "
                         f"{' '.join(FAMILIES['sequel'].archs)}; also hf:… and module:factory)")
    tb.add_argument("--tasks", nargs="+",
                    help=f"columns (default: {' '.join(FAMILIES['primitives'].columns)}; with --family sequel every "
                         "sequel column, ms_involution_integer … ms_arith_opaque_long: the family's own only)")
    tb.add_argument("--params", type=positive_int,
                    help="capacity of every row in parameters (default: the preset's, 200k quick, 2.67M paper)")
    tb.add_argument("--out", help="table folder (default results/PRESET)")
    tb.add_argument("--workers", type=positive_int, help="cells trained at once (default: one stack of a cell's seeds per GPU, three cells per GPU with --stack off, else one per core)")
    tb.add_argument("--steps", type=positive_int, help="override every cell's training steps (smoke runs)")
    tb.add_argument("--force", action="store_true",
                    help="replace a finished table.json (with --family sequel: sequel_table.json) in the output folder")
    add_executor_options(tb)
    tb.set_defaults(func=cmd_table)


def cmd_table(args: argparse.Namespace, extra: list[str]) -> int:
    from ..orchestration.table import FAMILIES, run_table

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")
    slurm = slurm_from(args)  # before anything is checked on disk: a flag the executor would ignore is a mistake
    out = out_path(args.out) or Path(f"results/{args.preset}")
    keep_result(out / f"{FAMILIES[args.family].stem}.json", args.force)  # the family's own table, not the other's
    path = run_table(
        preset=args.preset, seeds=args.seeds, archs=args.archs, tasks=args.tasks, params=args.params,
        out=out, workers=args.workers, steps=args.steps, slurm=slurm, stack=args.stack, compile=args.compile,
        family=args.family,
    )
    print(f"wrote {path}")
    return 0
