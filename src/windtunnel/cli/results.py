"""What ``results/`` holds: ``windtunnel reproduce`` works the cells the papers' claims need and the folder
lacks; ``windtunnel claims`` renders every claim's verdict from the committed artifacts; ``windtunnel
diversity`` writes the task-diversity sweep's table and figure from its cells (neither trains anything)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .args import UsageError, positive_int
from .cluster import add_executor_options, array_lines, slurm_from
from .names import REPRODUCE_TARGETS
from .outputs import out_path, writable_file


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``reproduce``, ``claims``, ``check`` and ``diversity``, in that order."""
    from ..run import grid

    rep = sub.add_parser("reproduce", help="train, evaluate and analyse what the papers' claims need and results/ lacks")
    rep.add_argument("target", choices=list(REPRODUCE_TARGETS),
                     help="whose claims: paper1 (Paper I's cells and their controls), paper2, paper3, sequel (the "
                          "model-selection sequel's cells on four architectures, with its controls), beyond (the "
                          "tests beyond the papers: belief geometry on Mess3, the task-diversity sweeps), scale (the "
                          "cells the claims read at the papers' size: the main job's recipe, HMM in the authors' "
                          "regime, the paper table's cells a claim reads; --preset paper, a GPU's work), or all")
    rep.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="quick (2 CPU cores, default) or paper (GPU)")
    rep.add_argument("--results", help="the results folder whose artifacts are checked and written (default results)")
    rep.add_argument("--workers", type=positive_int, help="cells worked at once (default: one stack of a cell's seeds per GPU, three cells per GPU with --stack off, else one per core)")
    rep.add_argument("--threads", type=positive_int,
                     help="torch threads per worker on CPU (default: the cores shared out among the workers; "
                          "1 where other jobs share the machine, since a thread that waits for a busy core "
                          "stalls every step)")
    rep.add_argument("--dry-run", dest="dry_run", action="store_true",
                     help="list the missing cells and where each stands (not started, trained to step S of N, "
                          "trained with artifacts missing); work nothing")
    rep.add_argument("--only", nargs="+", metavar="PATTERN",
                     help="work only the cells whose folder matches one of these shell patterns "
                          "(e.g. 'hmm_pool_*-mamba-s0': one seed of a sweep's row)")
    add_executor_options(rep)
    rep.set_defaults(func=cmd_reproduce)

    cl = sub.add_parser("claims", help="render results/CLAIMS.md: every claim's verdict from the committed artifacts")
    cl.add_argument("--results", help="the results folder (default results)")
    cl.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="whose cells the verdicts read (default quick)")
    cl.add_argument("--out", help="the Markdown file (default RESULTS/CLAIMS.md)")
    cl.set_defaults(func=cmd_claims)

    ck = sub.add_parser("check", help="regenerate the evidence of the claims you name in a folder of your own (at the "
                                      "committed scale, or a laptop's) and judge them there beside the committed verdict")
    ck.add_argument("claims", nargs="+", metavar="ID", help="claim ids, as in results/CLAIMS.md (A1 B1 …)")
    ck.add_argument("--out", default="checks", help="the folder the cells are trained and judged in (default checks; "
                                                    "results/ only if named)")
    ck.add_argument("--steps", type=positive_int, help="train every cell this many steps (a laptop's scale; default: "
                                                       "each recipe's own)")
    ck.add_argument("--seeds", type=positive_int, default=len(grid.SEEDS),
                    help=f"train the first N of the grid's seeds (default {len(grid.SEEDS)})")
    ck.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="the preset the claims are judged at "
                                                                                "(default quick)")
    ck.add_argument("--results", help="the committed results the verdicts are compared with, and where what is not a "
                                      "cell is read (default results)")
    ck.add_argument("--workers", type=positive_int, help="cells worked at once (default: one per core)")
    ck.add_argument("--threads", type=positive_int, help="torch threads per worker on CPU")
    ck.add_argument("--dry-run", dest="dry_run", action="store_true", help="list the cells it would train; train nothing")
    ck.set_defaults(func=cmd_check)

    dv = sub.add_parser("diversity", help="memorisation vs inference: the task-diversity sweep's table and figure "
                                          "from its committed cells")
    dv.add_argument("--results", help="the results folder (default results)")
    dv.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="whose cells it reads (default quick)")
    dv.set_defaults(func=cmd_diversity)


def cmd_reproduce(args: argparse.Namespace, extra: list[str]) -> int:
    """Work every cell the target's claims need that its committed artifacts lack, then rewrite CLAIMS.md."""
    from .. import claims
    from ..orchestration.reproduce import reproduce

    results = Path(out_path(args.results) or "results")
    if results.exists() and not results.is_dir():
        raise UsageError(f"invalid results: {results} is a file")
    slurm = slurm_from(args)
    summary = reproduce(args.target, args.preset, results, workers=args.workers, dry_run=args.dry_run,
                        threads=args.threads, only=args.only or (), slurm=slurm, stack=args.stack,
                        compile=args.compile)
    if args.only and not summary["cells"]:
        raise UsageError(f"invalid only: no cell of {args.target} matches {' '.join(args.only)} "
                         f"(`windtunnel reproduce {args.target} --dry-run` lists the missing ones)")
    for rel, cmd, why in summary["external"]:
        print(f"{results / rel} {why}: it is made by `{cmd}`", file=sys.stderr)
    if args.dry_run:
        print(f"{args.target} ({args.preset}): {summary['cells']} cells, {summary['missing']} missing"
              + ("".join(f"\n  {f}  ({summary['progress'][f]})" for f in summary["todo"])))
        if summary.get("array", {}).get("tasks"):
            print("\n".join(array_lines(summary["array"], slurm)))
        return 0
    print(f"{args.target} ({args.preset}): {summary['cells']} cells, {len(summary['done'])} worked "
          f"in {summary['wall_s'] / 60:.1f} min; the rest were committed already")
    # the scale cells are controls of the quick preset's claims (read at their own preset), so those are rewritten
    path, counts = claims.write(results, preset=claims.DOCS_PRESET if args.target == "scale" else args.preset)
    print(f"wrote {path}: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in claims.VERDICTS))
    if summary.get("held"):  # not finished here: another worker has them (exit 3, so a script can wait and rerun)
        print(f"{len(summary['held'])} cell(s) left to the workers that hold them: "
              + "; ".join(f"{f} ({h})" for f, h in summary["held"].items()) + "; `windtunnel status` follows them",
              file=sys.stderr)
        return 3
    return 0


def cmd_claims(args: argparse.Namespace, extra: list[str]) -> int:
    """Render results/CLAIMS.md from the committed artifacts (nothing is trained)."""
    from .. import claims

    results = Path(out_path(args.results) or "results")
    if not results.is_dir():
        raise UsageError(f"invalid results: {results} is not a folder")
    held = ("quick", "paper", "routing", "llm")
    if not any((results / name).is_dir() for name in held):  # a wrong folder would get a page of 'not measured'
        raise UsageError(f"invalid results: {results} holds none of windtunnel's results folders "
                         f"({', '.join(h + '/' for h in held)})")
    out = out_path(args.out)
    page = out if out is not None else results / "CLAIMS.md"
    writable_file(page)
    details = claims.pages.details_folder(Path(page))
    if details.exists() and not details.is_dir():
        raise UsageError(f"invalid out: {details}, where the claims' detail files go, is not a folder")
    if details.is_dir():
        writable_file(details / "A1.md")
    path, counts = claims.write(results, out, preset=args.preset)
    print(f"wrote {path}: {sum(counts.values())} claims — " + ", ".join(f"{k} {counts.get(k, 0)}" for k in claims.VERDICTS))
    return 0


def cmd_check(args: argparse.Namespace, extra: list[str]) -> int:
    """Train the named claims' cells under ``--out`` and judge them there, beside the committed verdicts."""
    from ..orchestration import check

    results = Path(out_path(args.results) or "results")
    if not results.is_dir():
        raise UsageError(f"invalid results: {results} is not a folder")
    out = Path(out_path(args.out))
    if out.exists() and not out.is_dir():
        raise UsageError(f"invalid out: {out} is not a folder")
    if out.resolve() == results.resolve() and args.out != args.results:
        raise UsageError(f"invalid out: {out} is the committed results; name it with --results too to check there")
    scale = check.Scale(args.steps, args.seeds)
    check.jobs(args.claims, args.preset, scale)  # an unknown claim is refused before anything is said or written
    print(f"checking {' '.join(args.claims)} at {scale.text()} in {out}/", flush=True)
    wanted = check.diagnostics_read(args.claims, results, args.preset)
    if wanted:
        names = sorted(set().union(*wanted.values()))
        print(f"analysed with the diagnostics these claims read of the committed cells: {', '.join(names)}", flush=True)
    worked, checked = check.check(args.claims, out, args.preset, scale, results, args.workers, args.threads,
                                  args.dry_run, wanted)
    for at, cells in worked.items():
        said = "would train" if args.dry_run else "trained"
        print(f"{at} cells at {scale.text()}: {said} {len(cells)}" + (f" ({', '.join(cells)})" if cells else ""))
    for c in checked:
        print(c.line(scale))
    return 0


def cmd_diversity(args: argparse.Namespace, extra: list[str]) -> int:
    """The task-diversity sweep's table and figure from its committed cells (nothing is trained)."""
    from ..orchestration import diversity

    results = Path(out_path(args.results) or "results")
    if not results.is_dir():
        raise UsageError(f"invalid results: {results} is not a folder")
    for stem in ("diversity", "diversity_hmm"):
        writable_file(results / args.preset / f"{stem}.md")
    for sweep in diversity.SWEEPS:
        path, doc = diversity.write(results, preset=args.preset, sweep=sweep)
        for arch in doc["summary"]:
            print(diversity.headline(doc, arch))
        if doc["missing"]:
            print(f"{len(doc['missing'])} {sweep} cells not yet made: windtunnel reproduce beyond")
        print(f"wrote {path}")
    return 0
