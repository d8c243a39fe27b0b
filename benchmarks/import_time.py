"""How long ``import windtunnel`` and ``windtunnel --help`` take in a fresh interpreter, against ``import torch``.

    python benchmarks/import_time.py [--reps 7] [--json benchmarks/results/import_time.json]

Each command runs in a new Python process, ``--reps`` rounds of all of them in turn (so that a change in the
machine's load falls on every command alike); the figure is each command's median wall time, and its ratio to
``python -c "import torch"`` measured in the same run: what any command that touches a model pays before it
starts.  ``python -c pass`` is the interpreter alone.  The package timed is the one this interpreter imports:
``PYTHONPATH=OTHER/src python benchmarks/import_time.py`` times another checkout (a ``git worktree`` of an earlier
commit, say) with the same interpreter and packages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import torch": ["-c", "import torch"],
    "import windtunnel": ["-c", "import windtunnel"],
    "windtunnel --help": ["-m", "windtunnel", "--help"],
    "windtunnel tasks": ["-m", "windtunnel", "tasks"],
}
"""Each timed command, as the arguments of ``python``."""

BASELINE = "import torch"


def wall_seconds(args: list[str]) -> float:
    """Wall seconds of one ``python ARGS`` in a fresh process (it must exit 0)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def torch_imported(args: list[str]) -> bool:
    """Whether ``python ARGS`` leaves torch among the modules it imported."""
    code = ("import runpy, sys\nsys.argv = {argv!r}\ntry:\n    {run}\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    if args[0] == "-c":
        script = code.format(argv=["-c"], run=f"exec({args[1]!r})")
    else:
        script = code.format(argv=[args[1], *args[2:]], run=f"runpy.run_module({args[1]!r}, run_name='__main__', alter_sys=True)")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1] == "True"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json")
    args = ap.parse_args()
    where = subprocess.run([sys.executable, "-c", "import windtunnel; print(windtunnel.__file__)"], check=True,
                           capture_output=True, text=True).stdout.strip()
    for argv in COMMANDS.values():  # the first run of each warms the file cache, and is not counted
        wall_seconds(argv)
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.reps):
        for name, argv in COMMANDS.items():
            walls[name].append(wall_seconds(argv))
    median = {name: statistics.median(w) for name, w in walls.items()}
    loads_torch = {name: torch_imported(argv) for name, argv in COMMANDS.items()}
    print(f"# {where}; {args.reps} rounds, median wall seconds of a fresh process")
    print(f"{'command':20s} {'median s':>9s} {'min s':>7s} {'/ torch':>8s}  imports torch")
    for name in COMMANDS:
        print(f"{name:20s} {median[name]:9.3f} {min(walls[name]):7.3f} {median[name] / median[BASELINE]:8.2f}  "
              f"{'yes' if loads_torch[name] else 'no'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"package": where, "reps": args.reps, "wall_s": walls, "median_wall_s": median,
                       "imports_torch": loads_torch}, f, indent=1)


if __name__ == "__main__":
    main()
