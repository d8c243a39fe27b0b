"""``windtunnel runs``: where each run folder under a folder stands; ``windtunnel compare``: several runs'
metrics side by side and their per-position curves overlaid in one figure."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .args import UsageError, positive_int
from .outputs import out_path, writable_file


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``runs`` and ``compare``."""
    rs = sub.add_parser("runs", help="the runs under a folder: task, architecture, step of steps, which results are stale")
    rs.add_argument("folder", nargs="?", default="runs", help="where to look (default runs)")
    rs.set_defaults(func=cmd_runs)

    cp = sub.add_parser("compare", help="several runs' metrics side by side and their curves overlaid")
    cp.add_argument("runs", nargs="+", help="run folders with an eval.json")
    cp.add_argument("--length", type=positive_int,
                    help="overlay the evaluation at this length (HMM: 30, 50; default: the trained length)")
    cp.add_argument("--out", help="the overlay figure (default compare.png in the folder the runs share)")
    cp.set_defaults(func=cmd_compare)


def cmd_runs(args: argparse.Namespace, extra: list[str]) -> int:
    """``runs [DIR]``: one line per run folder under DIR — where it stands and what is left to do."""
    from ..run.survey import survey

    root = Path(args.folder)
    if not root.is_dir():
        raise UsageError(f"invalid folder: {root} is not a folder")
    rows = survey(root)
    if not rows:
        print(f"no run folders under {root}")
        return 0
    for row in rows:
        if "error" in row:
            print(f"{row['run']}  unreadable: {row['error']}")
            continue
        todo = [f"{name} {state}" for name, state in row["results"].items() if state != "current"]
        done = ("finished" if row["finished"] else "diverged" if row.get("diverged") else "unfinished") + (
            ", exported: no checkpoints" if row.get("exported") else "")
        print(f"{row['run']}  {row['task']} / {row['arch']}  step {row['step']} of {row['steps']} ({done})"
              + (f"; {', '.join(todo)}" if todo else "; eval, geometry and report current"))
    return 0


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    """Several runs' metrics side by side, and their per-position curves overlaid in one figure."""
    from ..orchestration.compare import compare, default_figure
    from ..run.runs import RunDir

    for r in args.runs:  # every run is read before a figure is written anywhere
        RunDir(r).read_eval()
    out = out_path(args.out) or default_figure(args.runs)
    if out.exists() and out.is_dir():
        raise UsageError(f"invalid out: {out} is a folder; give a .png file")
    writable_file(out)
    res = compare(args.runs, out, length=args.length)
    width = max(len(r) for r in res["runs"])
    col = max(width, 18)
    print(f"{'run':18s}" + "".join(f"  {r:>{col}s}" for r in res["runs"]))
    about = res["about"]
    for label, get in (("task", lambda a: a["task"]), ("architecture", lambda a: a["arch"]),
                       ("parameters", lambda a: f"{a['n_params']:,}" if a["n_params"] else "—"),
                       ("step / steps", lambda a: f"{a['step'] if a['step'] is not None else '?'} / {a['steps']}")):
        print(f"{label:18s}" + "".join(f"  {str(get(a)):>{col}s}" for a in about))
    print(f"{'metric':18s}" + "".join(f"  {r:>{col}s}" for r in res["runs"]))
    for m, vals in res["metrics"].items():
        cells = []
        for v in vals:
            cells.append("—" if v is None else f"{v['value']:.4g} [{v['ci'][0]:.3g}, {v['ci'][1]:.3g}]"
                         if v.get("ci") else f"{v['value']:.4g}")
        print(f"{m:18s}" + "".join(f"  {c:>{col}s}" for c in cells))
    for line in res["differences"]:  # said, not refused: comparing across them may be the point
        print(f"note: {line}", file=sys.stderr)
    print(f"wrote {res['figure']}")
    return 0
