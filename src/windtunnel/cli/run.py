"""``windtunnel run``: the main job, train → evaluate → report (re-running it resumes it, and redoes only what
is not current); and the steps it is made of, each on a run folder: ``eval``, ``report``, ``analyze``."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import DiagnosticFailed
from .args import UsageError, parse_params, positive_int, seed_int
from .names import EVAL_SEED
from .outputs import check_out, divergence_note, out_path
from .train import first_line, train_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run``, ``eval``, ``report`` and ``analyze``, in that order."""
    from ..run import grid

    r = sub.add_parser("run", help="the main job: train → evaluate → report")
    r.add_argument("task", nargs="?", help="experiment or task (default: the main job, a transformer on bijection V=10; "
                   "with --V 20 the main job on the papers' cell V=20, L=19, on its own recipe)")
    r.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="quick (a laptop CPU, default) or paper (the papers' sizes, GPU)")
    r.add_argument("--n", type=positive_int, help="evaluation sequences (default: the preset's, "
                   + ", ".join(f"{v} {k}" for k, v in grid.EVAL_N.items()) + ")")
    r.add_argument("--no-analyze", dest="no_analyze", action="store_true",
                   help="skip the geometric diagnostics (by default they run after the evaluation)")
    train_args(r, "the recipe's under --preset: 200k quick", "the recipe's under --preset")
    r.set_defaults(func=cmd_run)

    e = sub.add_parser("eval", help="evaluate a run against the exact posterior")
    e.add_argument("run", help="run folder")
    e.add_argument("--n", type=positive_int, help="evaluation sequences (default: the run's earlier evaluation's, "
                   f"else {grid.EVAL_N['quick']}, as windtunnel run evaluates)")
    e.add_argument("--lengths", type=positive_int, nargs="+",
                   help="also evaluate at these lengths (HMM: K; length generalisation; default: those of the run's "
                        "eval.json, else the trained length only)")
    e.add_argument("--seed", type=seed_int, default=EVAL_SEED,
                   help=f"seed of the evaluation episodes (default {EVAL_SEED}, shared by every run)")
    e.add_argument("--force", action="store_true",
                   help="replace an eval.json of this checkpoint made with more sequences, another seed or more lengths")
    e.set_defaults(func=cmd_eval)

    rp = sub.add_parser("report", help="(re)write a run's report.html and summary.md")
    rp.add_argument("run", help="run folder")
    rp.set_defaults(func=cmd_report)

    a = sub.add_parser("analyze", help="geometric diagnostics of a trained run (geometry.json)")
    a.add_argument("run", help="run folder")
    a.add_argument("--n", type=positive_int, default=grid.ANALYZE_N,
                   help=f"episodes the diagnostics read (default {grid.ANALYZE_N})")
    a.add_argument("--force", action="store_true", help="replace a geometry.json of this checkpoint made on more episodes")
    a.set_defaults(func=cmd_analyze)


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    """The main job: train → evaluate → report.  Re-running the same command resumes it."""
    from ..run import grid
    from ..training.loop import TrainConfig, build

    from ..run.runs import RunDir
    from ..evaluation.evaluate import EVAL_SEED
    from ..orchestration.stages import evaluate_run, train_run, write_report

    arch = args.arch or grid.DEFAULT_ARCH
    task_name = args.task if args.task is not None else grid.DEFAULT_TASK
    overrides = parse_params(extra) if extra else {}
    # the main job is the grid's ``main`` experiment (``main_v20`` at the papers' V=20): its own recipe
    # (readout multiplier only for windtunnel's architectures: a Hugging Face or user model has no
    # separate readout); bijection named as a task is the main job too
    experiment = grid.main_job(args.task, overrides)
    fields = grid.preset(args.preset, experiment, arch)
    if overrides:
        fields["task_params"] = {**fields["task_params"], **overrides}
    if args.steps is not None:  # the preset's schedule shortened or stretched, curriculum included
        fields = grid.with_steps(fields, args.steps)
    if args.seed is not None:
        fields["seed"] = args.seed
    if args.params is not None:
        fields["params"] = args.params
    fields["progress"] = not args.no_progress
    if args.log:
        fields["trackers"] = list(dict.fromkeys(args.log))
    cfg = TrainConfig.from_dict(fields)
    run = RunDir(out_path(args.out) or _default_run_folder(args, task_name, arch, overrides))
    _, model = build(cfg)  # validate before touching the folder
    resume = False
    if not run.is_empty():
        if args.force:
            check_out(run, False, True)
        elif not run.is_run():
            raise UsageError(f"{run.path} exists and is not a windtunnel run folder; choose another --out")
        else:
            if not run.holds(cfg.to_dict()):
                raise UsageError(f"{run.path} holds a run with a different configuration; pass --force to replace it or choose another --out")
            resume = True
    done = run.latest_step() if resume else 0
    n = args.n or grid.EVAL_N[args.preset]
    if done < cfg.steps:
        print(first_line(cfg, model, run, done), flush=True)
        train_run(cfg, run, resume=resume, log_lines=True)
    lengths = grid.eval_lengths(experiment, cfg.task_params)
    current = _current_results(run, n) if done >= cfg.steps else set()
    if current == {"eval.json", "geometry.json", "report.html"} or (args.no_analyze and "eval.json" in current
                                                                   and "report.html" in current):
        print(f"{run.path} already finished (step {done} of {cfg.steps}) and evaluated"
              + ("" if args.no_analyze else " and analysed") + ": nothing to do", flush=True)
        result = _EvalRecord(run.read_eval())
    else:
        if done >= cfg.steps:
            print(f"{run.path} already trained (step {done} of {cfg.steps}); redoing only what is not current: "
                  + ", ".join(x for x in ("eval.json", "geometry.json", "report.html")
                              if x not in current and not (args.no_analyze and x == "geometry.json")), flush=True)
        result = (_EvalRecord(run.read_eval()) if "eval.json" in current else
                  evaluate_run(run, n=n, lengths=lengths, seed=EVAL_SEED))
        if not args.no_analyze and "geometry.json" not in current:  # the mechanism beside the number
            from ..orchestration.stages import analyze_run

            analyze_run(run, report=False)
    geometry = run.geometry_path if not args.no_analyze and run.geometry_path.is_file() else None
    report = write_report(run)
    t_train = run.training_seconds() or 0.0
    print(f"\n{cfg.arch} on {cfg.task} {cfg.task_params}: {cfg.steps} steps in {t_train:.0f} s")
    _print_metrics(result)
    if geometry is not None:
        _print_readings(geometry)
    print(f"report: {report}")
    return 0


def _default_run_folder(args: argparse.Namespace, task: str, arch: str, task_params: dict[str, Any]) -> str:
    """``runs/main`` for the main job as shipped; otherwise a portable name that differs whenever the
    task, architecture, preset, seed, steps, size or task parameters do (so sweeps do not collide)."""
    from ..run import grid

    changed = [f"s{args.seed}" if args.seed is not None else "", f"{args.steps}steps" if args.steps is not None else "",
               f"{args.params}p" if args.params is not None else "",
               *(f"{k}{v}" for k, v in sorted(task_params.items()))]
    parts = [task if args.task is not None else "main", arch, args.preset, *filter(None, changed)]
    name = "-".join(parts) if parts[1:] != [grid.DEFAULT_ARCH, "quick"] else parts[0]
    return "runs/" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _current_results(run: "Any", n: int) -> set[str]:
    """Which of ``eval.json`` (of ``n`` sequences or more), ``geometry.json`` and ``report.html`` are current
    (:meth:`~windtunnel.run.runs.RunDir.result_states`)."""
    out = {name for name, state in run.result_states().items() if state == "current"}
    if "eval.json" in out:
        ev = run.read_eval()
        prov = ev.get("provenance") if isinstance(ev.get("provenance"), dict) else {}
        if prov.get("step") is None or not isinstance(ev.get("n"), int) or ev["n"] < n:
            out.discard("eval.json")
    return out if "eval.json" in out else set()


class _EvalRecord:
    """An ``eval.json`` read back where ``windtunnel run`` prints its metrics without evaluating again."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.metrics = record["metrics"]
        self.priors = record.get("priors")


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from ..run.runs import RunDir

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")
    from ..orchestration.stages import evaluate_run

    from ..run import grid

    run = RunDir(args.run)
    record = run.read_config()
    lengths, n = args.lengths, args.n
    earlier = run.read_eval() if run.eval_path.is_file() else {}
    if lengths is None and earlier:  # a re-evaluation keeps the lengths evaluated before
        lengths = sorted(int(k) for k in earlier.get("lengths") or {}) or None
    if n is None:  # one evaluation size across run and eval unless asked
        n = earlier.get("n") if isinstance(earlier.get("n"), int) else grid.EVAL_N["quick"]
    result = evaluate_run(run, n=n, lengths=lengths, seed=args.seed, force=args.force)
    step, steps = run.latest_step(), (record.get("train") or {}).get("steps")
    diverged = divergence_note(run, "evaluated")
    if diverged:  # said once the evaluation stands, not before a refusal
        print(diverged, file=sys.stderr)
    elif isinstance(steps, int) and step < steps:
        print(f"note: {run.path} is at step {step} of {steps} (unfinished): evaluated its newest checkpoint",
              file=sys.stderr)
    print(f"evaluated {run.path} on {n} sequences:")
    _print_metrics(result)
    return 0


def _print_metrics(result: Any) -> None:
    for name, m in result.metrics.items():
        ci = m.get("ci")
        ci_s = f"  [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else ""
        print(f"  {name:18s} {m['value']:.6g}{ci_s}")
    pri = getattr(result, "priors", None) or {}
    if pri:  # a pooled task: memorising or inferring?
        tv = result.metrics["tv"]["value"]
        print(f"  memorisation vs inference: total variation to the pool's posterior {tv:.4g}, to the true prior's "
              f"{pri['in_pool_vs_true_prior']['tv']['value']:.4g}; on fresh latents KL {pri['fresh']['kl']['value']:.4g} "
              f"bits, total variation {pri['fresh']['tv']['value']:.4g} (the pool's oracle: {pri['task_oracle_on_fresh']['tv']['value']:.4g})")


def cmd_report(args: argparse.Namespace, extra: list[str]) -> int:
    from ..run.runs import RunDir
    from ..orchestration.stages import write_report

    run = RunDir(args.run)
    path = write_report(run)
    diverged = divergence_note(run, "reported on")
    if diverged:
        print(diverged, file=sys.stderr)
    print(f"wrote {path}")
    return 0


def cmd_analyze(args: argparse.Namespace, extra: list[str]) -> int:
    from ..run.runs import RunDir
    from ..orchestration.stages import analyze_run

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")

    run = RunDir(args.run)
    try:
        analyze_run(run, n=args.n, force=args.force)
        failure = None
    except DiagnosticFailed as exc:  # a crash is not a result: the command fails (the other diagnostics are kept)
        failure = exc
    _print_readings(run.geometry_path)
    diverged = divergence_note(run, "analysed")
    if diverged:
        print(diverged, file=sys.stderr)
    print(f"wrote {run.geometry_path}")
    if failure is not None:
        print(f"windtunnel analyze: {failure}", file=sys.stderr)
        return 1
    return 0


def _print_readings(path: Path) -> None:
    """Print what each diagnostic in ``geometry.json`` says about its claim."""
    from ..geometry.run import readings

    print("what the geometry says about the papers' claims:")
    for r in readings(json.loads(Path(path).read_text())):
        print("  " + r.line())
