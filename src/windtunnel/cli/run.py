"""``windtunnel run``: the main job, train → evaluate → report (re-running it resumes it, and redoes only what
is not current); and the steps it is made of, each on a run folder: ``eval``, ``report``, ``analyze``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import DiagnosticFailed
from .args import UsageError, parse_params, positive_int, seed_int
from .names import EVAL_SEED
from .outputs import divergence_note, out_path
from .train import train_args


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
    """The main job: train → evaluate → analyse → report (:mod:`windtunnel.orchestration.main_job`).  Re-running
    the same command resumes it."""
    from ..orchestration.main_job import plan_main_job, run_main_job

    plan = plan_main_job(args.task, args.arch, args.preset, task_params=parse_params(extra) if extra else None,
                         steps=args.steps, seed=args.seed, params=args.params, out=out_path(args.out), eval_n=args.n,
                         progress=not args.no_progress, trackers=tuple(args.log or ()))
    done = run_main_job(plan, force=args.force, analyse=not args.no_analyze, log_lines=True,
                        say=lambda line: print(line, flush=True))
    cfg = plan.config
    print(f"\n{cfg.arch} on {cfg.task} {cfg.task_params}: {cfg.steps} steps in {done.train_seconds:.0f} s")
    _print_metrics(done)
    if done.geometry is not None:
        _print_readings(done.geometry)
    print(f"report: {done.report}")
    return 0


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
    _print_not_applicable(run)
    diverged = divergence_note(run, "analysed")
    if diverged:
        print(diverged, file=sys.stderr)
    print(f"wrote {run.geometry_path}")
    if failure is not None:
        print(f"windtunnel analyze: {failure}", file=sys.stderr)
        return 1
    return 0


def _print_not_applicable(run: Any) -> None:
    """Print, one line each, the diagnostics of the run's ``geometry.json`` that did not apply and why (the part
    of the model or task each lacks); for a model of the user's own (``module:factory``), one line more saying
    where its stream comes from: the layers stream discovery found and what it exposes, or why none was found."""
    doc = json.loads(Path(run.geometry_path).read_text())
    skipped = [(k, v.get("reason", "")) for k, v in doc.items()
               if k not in ("summary", "meta") and isinstance(v, dict) and v.get("applicable", True) is False]
    if skipped:
        print(f"{len(skipped)} diagnostic(s) did not apply:")
        for name, reason in skipped:
            print(f"  {name}: {reason}")
    model = run.read_config().get("model") or {}
    arch = str(model.get("arch", ""))
    if ":" in arch and not arch.startswith("hf:"):
        from .. import models
        from ..errors import InvalidValue

        try:
            built = models.build(model)
        except InvalidValue as exc:
            print(f"the model's stream: not known (rebuilding {arch} failed: {exc})")
            return
        describe = getattr(built, "describe_stream", None)
        if callable(describe):
            print(f"the model's stream: {describe()}")


def _print_readings(path: Path) -> None:
    """Print what each diagnostic in ``geometry.json`` says about its claim."""
    from ..geometry.run import readings

    print("what the geometry says about the papers' claims:")
    for r in readings(json.loads(Path(path).read_text())):
        print("  " + r.line())
