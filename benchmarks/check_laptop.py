"""What checking claims yourself costs: ``windtunnel check`` run from nothing, timed, its verdicts kept.

    python benchmarks/check_laptop.py [--claims B1 A6] [--steps 300] [--seeds 1] [--workers 2]
                                      [--record benchmarks/results/check_laptop.json]

Runs ``windtunnel check CLAIMS --steps S --seeds K`` in a new empty folder (a resumed check's wall time is not the
check's cost, so a folder is never reused) and writes a record: the command, its wall time, the machine's cores
and its load when it started (a shared machine's wall time is not its floor), the lines the check printed (each
claim's verdict at this scale beside the committed one) and each cell's training, evaluation and analysis
seconds from the cell's own ``timings.json``.  The analysis is of the diagnostics the claims read, which is what
``windtunnel check`` does; the record names them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cells(out: Path) -> dict[str, dict[str, float]]:
    """Each cell the check wrote (``preset/column-arch-sN``) with its recorded seconds."""
    found = {}
    for t in sorted(out.glob("*/cells/*/timings.json")):
        found[f"{t.parent.parent.parent.name}/{t.parent.name}"] = json.loads(t.read_text())
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", nargs="+", default=["B1", "A6"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None, help="the check's workers (default: its own choice)")
    ap.add_argument("--record", default=str(REPO / "benchmarks" / "results" / "check_laptop.json"))
    args = ap.parse_args(argv)
    record = Path(args.record)
    if record.parent.exists() and not record.parent.is_dir():
        print(f"invalid record: {record.parent} is not a folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="windtunnel-check-") as tmp:
        out = Path(tmp) / "check"
        command = ["windtunnel", "check", *args.claims, "--steps", str(args.steps), "--seeds", str(args.seeds),
                   "--out", str(out), "--results", str(REPO / "results")]
        if args.workers:
            command += ["--workers", str(args.workers)]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "windtunnel", *command[1:]], capture_output=True, text=True,
                              cwd=REPO)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            return done.returncode
        seconds = cells(out)
    doc = {
        # the repository's results first: a checkout may itself lie under the temporary folder
        "command": " ".join("results" if c == str(REPO / "results") else
                            "<new folder>" if c.startswith(str(Path(tempfile.gettempdir()))) else c for c in command),
        "wall_s": wall,
        "cores": os.cpu_count(),
        "load_at_start": load,
        "printed": done.stdout.splitlines(),
        "cells": seconds,
        "cells_work_s": sum(t.get("train_s", 0.0) + t.get("eval_s", 0.0) + t.get("analyze_s", 0.0)
                            + t.get("reanalyze_s", 0.0) for t in seconds.values()),
    }
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(doc, indent=1) + "\n")
    for line in doc["printed"]:
        print(line)
    print(f"wall {wall:.0f} s on {doc['cores']} cores (load {load:.2f} at start); wrote {record}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
