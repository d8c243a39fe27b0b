"""The ``windtunnel`` command.

``windtunnel run [TASK]`` is the main job (train → evaluate → report); ``tasks``, ``train``,
``eval``, ``report``, ``analyze`` and ``table`` expose the steps.  Every user error — an unknown
name, an impossible parameter, a missing or corrupt checkpoint, a run folder that would be
overwritten — prints one line on stderr and exits with status 2; earlier results are never
destroyed.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from .errors import DiagnosticFailed, UserError, did_you_mean

EXIT_USAGE = 2


class UsageError(UserError):
    """A command-line mistake: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--step 1` is not `--steps 1`: a prefix is refused, never guessed
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:  # the nearest choice, as for unknown task and architecture names
            hint = did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
            message = message.replace(f"invalid choice: '{m.group(1)}'", f"invalid choice: '{m.group(1)}'{hint}", 1)
        raise UsageError(message)


def _value(text: str) -> Any:
    """Parse a command-line parameter value: int, float, bool, or string."""
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _params(extra: Sequence[str]) -> dict[str, Any]:
    """``--V 6 --replacement true`` (or ``--V=6``) → ``{"V": 6, "replacement": True}``."""
    out: dict[str, Any] = {}
    items = list(extra)
    i = 0
    while i < len(items):
        item = items[i]
        if not item.startswith("--") or item == "--":
            raise UsageError(f"unexpected argument {item!r}: task parameters look like --NAME VALUE")
        key = item[2:]
        if "=" in key:
            key, val = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(items):
                raise UsageError(f"task parameter --{key} needs a value")
            val = items[i + 1]
            i += 2
        out[key.replace("-", "_")] = _value(val)
    return out


# --- tasks ----------------------------------------------------------------------------------


def cmd_tasks(args: argparse.Namespace, extra: list[str]) -> int:
    from . import tasks
    from .tasks.base import entropy_bits

    if args.action is None:
        if extra:
            raise UsageError(f"unexpected argument {extra[0]!r}")
        for name in tasks.names():
            cls = tasks.get(name)
            params = ", ".join(f"{k}={v!r}" for k, v in tasks.defaults(name).items())
            print(f"{name:22s} {cls.summary}")
            print(f"{'':22s}   {params}")
        return 0
    task = tasks.make(args.name, **_params(extra))
    from .tasks.base import check_memory

    check_memory(task, 1, "task size")
    ep = task.sample(1, args.seed)
    decoded = task.decode(ep, 0)
    H = entropy_bits(ep.posterior[0])
    print(f"# {task.name}  {task.params()}")
    print(f"# {task.summary}")
    print(f"# {task.seq_len} positions, {task.n_classes} classes; seed {args.seed}")
    print("# target: the class to predict at a scored position; H_Bayes: entropy of the exact posterior "
          "(bits); p(c): the exact posterior of class c (the three largest when there are more than 12)")
    C = task.n_classes
    show = C <= 12
    header = f"{'pos':>4}  {'input':<14} {'target':>6}  {'H_Bayes':>8}"
    if show:
        header += "  " + " ".join(f"{f'p({c})':>5}" for c in range(C))
    else:
        header += "  largest p(c)"
    print(header)
    for t, label in enumerate(decoded):
        if not bool(ep.mask[0, t]):
            print(f"{t:>4}  {label:<14}")
            continue
        target = int(ep.targets[0, t])
        line = f"{t:>4}  {label:<14} {target if target >= 0 else '':>6}  {float(H[t]):8.4f}"
        if show:
            line += "  " + " ".join(f"{float(p):5.3f}" for p in ep.posterior[0, t])
        else:
            top = ep.posterior[0, t].topk(3)
            line += "  " + ", ".join(f"p({int(i)})={float(v):.3f}" for v, i in zip(top.values, top.indices))
        print(line)
    return 0


# --- train / run ----------------------------------------------------------------------------


def _check_out(run: "Any", resume: bool, force: bool) -> None:
    """Refuse to write over an existing folder unless resuming or forced; ``--force`` only ever
    removes a windtunnel run folder (called after the new configuration has been validated)."""
    if run.path.exists() and not run.path.is_dir():
        raise UsageError(f"cannot use {run.path} as a run folder: it is a file")
    if not run.is_empty() and not (resume or force):
        raise UsageError(f"{run.path} already exists; pass --resume to continue it or --force to start over")
    if force and not run.is_empty():
        import shutil

        if not run.is_run():
            raise UsageError(f"refusing to --force over {run.path}: it is not a windtunnel run folder")
        with run.lock():  # not while another process trains there
            shutil.rmtree(run.checkpoints, ignore_errors=True)
            for p in run.path.iterdir():
                if p.name != run.LOCK:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()


def _keep_result(result: Path, force: bool) -> None:
    """Refuse, before any work, to replace a finished result (a table, an EM or timescales experiment, a
    model's signatures) unless ``--force``: a default output folder may hold hours of committed work, and a
    smoke run with ``--steps 5`` must not silently take its place.  An unfinished one (killed before it
    wrote ``result``) is resumed as before."""
    if result.exists() and not force:
        raise UsageError(f"{result} already holds a finished result; pass --force to replace it or --out to write elsewhere")


def _out_path(text: str | None) -> Path | None:
    """``--out`` as given (``None``: the command's default); an empty string is a mistake, not ``.``."""
    if text is not None and text.strip() == "":
        raise UsageError("invalid --out: the folder name is empty")
    return None if text is None else Path(text)


def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (every count, size and budget flag), checked once at parsing."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if not 1 <= value < 2**63:  # the largest count a tensor index or a numpy generator holds
        raise argparse.ArgumentTypeError(f"must be a positive integer below 2^63, got {text!r}")
    return value


SEED_LIMIT = 2**31
"""Seeds are integers in [0, 2^31): what ``TrainConfig.seed`` accepts and every generator can hold."""


def seed_int(text: str) -> int:
    """An argparse type: a seed, an integer in [0, 2^31)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer seed, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be a seed in [0, 2^31), got {text!r}")
    return value


def seed_list(text: str) -> tuple[int, ...]:
    """An argparse type: distinct seeds, comma-separated (``0,1,2``)."""
    seeds = tuple(seed_int(part.strip()) for part in text.split(","))
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"the seeds must be distinct, got {text!r}")
    return seeds


def _train_stacked(args: argparse.Namespace, extra: list[str]) -> int:
    """``train --out DIR --seeds 0,1,2``: the seeds as one stacked model (:func:`windtunnel.stacked.train_stacked`),
    each seed's run in ``DIR-sSEED``."""
    from dataclasses import replace

    from .runs import RunDir
    from .stacked import train_stacked
    from .training import build, process_group

    if args.resume is not None or args.seed is not None:
        raise UsageError("--seeds trains new runs: it takes neither --resume (resume each run alone) nor --seed")
    if process_group()[1] > 1:
        raise UsageError("--seeds trains in one process: run it without torchrun")
    if args.out is None:
        raise UsageError("train --seeds needs --out DIR (each seed's run is DIR-sSEED)")
    base = _train_config(args, extra)
    cfgs = [replace(base, seed=seed) for seed in args.seeds]
    runs = [RunDir(f"{str(args.out).rstrip('/')}-s{seed}") for seed in args.seeds]
    build(base)  # validate task and model before anything on disk is touched
    for run in runs:
        _check_out(run, False, args.force)
    print(f"training {base.arch} on {base.task} for {base.steps} steps, seeds {', '.join(map(str, args.seeds))} "
          f"stacked into one model: {', '.join(str(r.path) for r in runs)}", flush=True)
    train_stacked(cfgs, runs, log_lines=True)
    print(f"trained {base.arch} on {base.task}: {', '.join(str(r.path) for r in runs)}")
    return 0


def _train_config(args: argparse.Namespace, extra: list[str]) -> "Any":
    from .training import TrainConfig, load_config_file

    d: dict[str, Any] = {}
    if args.config is not None:
        if not args.config.strip():
            raise UsageError("--config needs a file name (got an empty one)")
        d.update(load_config_file(args.config))
    for key in ("task", "arch", "params", "steps", "seed", "batch_size", "lr"):
        val = getattr(args, key, None)
        if val is not None:  # flags given override the file; flags not given leave it alone
            d[key] = val
    if extra:
        d["task_params"] = {**d.get("task_params", {}), **_params(extra)}
    if getattr(args, "no_progress", False):
        d["progress"] = False
    if getattr(args, "log", None):
        d["trackers"] = list(dict.fromkeys(args.log))
    return TrainConfig.from_dict(d)


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from .runs import RunDir
    from .stages import train_run
    from .training import TrainConfig, build, process_group

    if getattr(args, "seeds", None):
        return _train_stacked(args, extra)
    rank, _ = process_group()  # under torchrun only rank 0 touches the folder
    if args.resume is not None:
        given = [f"--{k.replace('_', '-')}" for k in ("task", "arch", "params", "seed", "batch_size", "lr", "config", "out")
                 if getattr(args, k, None) is not None] + (["--force"] if args.force else []) + list(extra[:1])
        if given:
            raise UsageError(f"{given[0]} cannot be changed on --resume (the run keeps its configuration; only --steps may extend it)")
        run = RunDir(args.resume)
        record = run.read_config()
        fields = dict(record["train"])
        if args.steps is not None:
            done = run.latest_step()
            if args.steps < done:
                raise UsageError(f"invalid steps: {run.path} is already at step {done}; --steps must be ≥ {done}")
            fields["steps"] = args.steps
        fields["progress"] = not args.no_progress and fields.get("progress", True)
        if args.log:  # trackers change no result: a resumed run may add or change them
            fields["trackers"] = list(dict.fromkeys(args.log))
        cfg = TrainConfig.from_dict(fields)
        if rank == 0:
            print(f"resuming {run.path} from step {run.latest_step()} of {cfg.steps} ({cfg.arch} on {cfg.task})", flush=True)
        train_run(cfg, run, resume=True, log_lines=True)
        if rank == 0:
            print(f"resumed and finished {run.path}")
            for line in run.stale_results():  # results of the earlier checkpoint are not silently kept as current
                print(f"note: {line}; re-run `windtunnel eval` / `windtunnel analyze`", file=sys.stderr)
        return 0
    if args.out is None:
        raise UsageError("train needs --out DIR (or --resume DIR)")
    cfg = _train_config(args, extra)
    run = RunDir(args.out)
    _, model = build(cfg)  # validate task and model before anything on disk is touched
    if rank == 0:
        _check_out(run, False, args.force)
        print(_first_line(cfg, model, run, 0), flush=True)
    train_run(cfg, run, log_lines=True)
    if rank == 0:
        print(f"trained {cfg.arch} on {cfg.task}: {run.path}")
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


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from .runs import RunDir

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")
    from .stages import evaluate_run

    from . import grid

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
    if isinstance(steps, int) and step < steps:  # said once the evaluation stands, not before a refusal
        print(f"note: {run.path} is at step {step} of {steps} (unfinished): evaluated its newest checkpoint",
              file=sys.stderr)
    print(f"evaluated {run.path} on {n} sequences:")
    _print_metrics(result)
    return 0


def cmd_report(args: argparse.Namespace, extra: list[str]) -> int:
    from .runs import RunDir
    from .stages import write_report

    path = write_report(RunDir(args.run))
    print(f"wrote {path}")
    return 0


def _default_run_folder(args: argparse.Namespace, task: str, arch: str, task_params: dict[str, Any]) -> str:
    """``runs/main`` for the main job as shipped; otherwise a portable name that differs whenever the
    task, architecture, preset, seed, steps, size or task parameters do (so sweeps do not collide)."""
    from . import grid

    changed = [f"s{args.seed}" if args.seed is not None else "", f"{args.steps}steps" if args.steps is not None else "",
               f"{args.params}p" if args.params is not None else "",
               *(f"{k}{v}" for k, v in sorted(task_params.items()))]
    parts = [task if args.task is not None else "main", arch, args.preset, *filter(None, changed)]
    name = "-".join(parts) if parts[1:] != [grid.DEFAULT_ARCH, "quick"] else parts[0]
    return "runs/" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _first_line(cfg: "Any", model: "Any", run: "Any", done: int) -> str:
    """What is about to be trained, said before the first step: the run folder, task, architecture, size, steps."""
    params = ", ".join(f"{k}={v}" for k, v in cfg.task_params.items())
    where = f"resuming from step {done}" if done else "from step 0"
    return (f"training {cfg.arch} ({model.n_params():,} parameters) on {cfg.task}" + (f" ({params})" if params else "")
            + f" for {cfg.steps} steps of batch {cfg.batch_size}, {where}, into {run.path}")


def _current_results(run: "Any", n: int) -> set[str]:
    """Which of ``eval.json`` (of ``n`` sequences or more), ``geometry.json`` and ``report.html`` are current
    (:meth:`~windtunnel.runs.RunDir.result_states`)."""
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


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    """The main job: train → evaluate → report.  Re-running the same command resumes it."""
    from . import grid
    from .training import TrainConfig, build

    from .runs import RunDir
    from .evaluation import EVAL_SEED
    from .stages import evaluate_run, train_run, write_report

    arch = args.arch or grid.DEFAULT_ARCH
    task_name = args.task if args.task is not None else grid.DEFAULT_TASK
    overrides = _params(extra) if extra else {}
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
    run = RunDir(_out_path(args.out) or _default_run_folder(args, task_name, arch, overrides))
    _, model = build(cfg)  # validate before touching the folder
    resume = False
    if not run.is_empty():
        if args.force:
            _check_out(run, False, True)
        elif not run.is_run():
            raise UsageError(f"{run.path} exists and is not a windtunnel run folder; choose another --out")
        else:
            if not run.holds(cfg.to_dict()):
                raise UsageError(f"{run.path} holds a run with a different configuration; pass --force to replace it or choose another --out")
            resume = True
    done = run.latest_step() if resume else 0
    n = args.n or grid.EVAL_N[args.preset]
    if done < cfg.steps:
        print(_first_line(cfg, model, run, done), flush=True)
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
            from .stages import analyze_run

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


def _print_readings(path: Path) -> None:
    """Print what each diagnostic in ``geometry.json`` says about its claim."""
    from .geometry.run import readings

    print("what the geometry says about the papers' claims:")
    for r in readings(json.loads(Path(path).read_text())):
        print("  " + r.line())


def cmd_analyze(args: argparse.Namespace, extra: list[str]) -> int:
    from .runs import RunDir
    from .stages import analyze_run

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")

    run = RunDir(args.run)
    try:
        analyze_run(run, n=args.n, force=args.force)
        failure = None
    except DiagnosticFailed as exc:  # a crash is not a result: the command fails (the other diagnostics are kept)
        failure = exc
    _print_readings(run.geometry_path)
    print(f"wrote {run.geometry_path}")
    if failure is not None:
        print(f"windtunnel analyze: {failure}", file=sys.stderr)
        return 1
    return 0


def cmd_table(args: argparse.Namespace, extra: list[str]) -> int:
    from .table import run_table

    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r}")
    out = _out_path(args.out) or Path(f"results/{args.preset}")
    _keep_result(out / "table.json", args.force)
    path = run_table(
        preset=args.preset, seeds=args.seeds, archs=args.archs, tasks=args.tasks, params=args.params,
        out=out, workers=args.workers, steps=args.steps,
    )
    print(f"wrote {path}")
    return 0


def cmd_routing_law(args: argparse.Namespace, extra: list[str]) -> int:
    """``routing law RUN``: Paper II's gradient law checked against autograd on every head of a run."""
    from .evaluation import EVAL_SEED
    from .routing import check_all_heads
    from .runs import RunDir
    from .training import load

    run = RunDir(args.run)
    task, model = load(run)
    rows = check_all_heads(model, task.sample(args.n, EVAL_SEED))
    print(f"routing law on {run.path} ({args.n} episodes): law vs autograd, max relative error")
    print(f"{'layer':>5} {'head':>4} {'dL/ds':>10} {'dL/dv':>10} {'b>E[b]':>7} {'|dL/ds|':>9} {'|dL/dv|':>9}")
    for r in rows:
        share = r["advantage_positive_share"]
        print(f"{r['layer']:>5} {r['head']:>4} {r['score_rel_error']:>10.2e} {r['value_rel_error']:>10.2e} "
              f"{'–' if share is None else f'{share:.3f}':>7} {r['routing_grad_norm']:>9.3g} {r['value_grad_norm']:>9.3g}")
    return 0


def cmd_routing_timescales(args: argparse.Namespace, extra: list[str]) -> int:
    """``routing timescales``: when attention settles against when the error does, over training."""
    import dataclasses

    from .timescales import DEFAULT_SETUPS, run_timescales

    setups = {}
    for name, setup in DEFAULT_SETUPS.items():
        change: dict = {}
        if args.seeds is not None:
            change["seeds"] = tuple(range(args.seeds))
        if args.steps is not None:
            change["steps"] = args.steps
        if args.constant_lr:
            change["min_lr"] = setup.lr
        setups[name] = dataclasses.replace(setup, **change)
    default_out = "results/routing/timescales-constant" if args.constant_lr else "results/routing/timescales"
    out = _out_path(args.out) or Path(default_out)
    _keep_result(out / "timescales.json", args.force)
    md = run_timescales(setups, out)
    print(md.read_text())
    print(f"wrote {md}")
    return 0


def cmd_routing_em(args: argparse.Namespace, extra: list[str]) -> int:
    """``routing em``: EM-like updates against SGD, with the same-norm and 10× controls."""
    from .routing.em import PAPER_SEEDS, EMSetup, run_em

    if args.authors_model and not args.deep:
        raise UsageError("--authors-model changes the deep variant: use it with --deep")
    seeds = PAPER_SEEDS if args.seeds is None else None
    if seeds is None:
        seeds = PAPER_SEEDS[: args.seeds] + tuple(range(1, max(0, args.seeds - len(PAPER_SEEDS)) + 1))
    fields: dict[str, Any] = {"seeds": seeds}
    if args.steps is not None:
        fields["steps"] = args.steps
    if args.arms:
        fields["arms"] = tuple(args.arms)
    if args.device is not None:
        fields["device"] = args.device
    if args.authors_model:
        setup, default_out = EMSetup.authors_deep(**fields), "results/routing/deep-authors"
    elif args.deep:
        setup, default_out = EMSetup.deep(**fields), "results/routing/deep"
    else:
        setup, default_out = EMSetup(**fields), "results/routing"
    out = _out_path(args.out) or Path(default_out)
    if not _adds_seeds(out / "em.json", setup):
        _keep_result(out / "em.json", args.force)
    md = run_em(setup, out)
    print(md.read_text())
    print(f"wrote {md}")
    return 0


def _adds_seeds(result: Path, setup: "Any") -> bool:
    """True when ``result`` (a finished ``em.json``) holds this very setup on a proper subset of the
    requested seeds: asking for more seeds extends the experiment (its finished runs are kept in
    ``runs.jsonl`` and reused), so it needs no ``--force``.  Anything else is a replacement.  A field the
    record lacks was written before the field existed and ran at its default, as ``run_em`` reads it."""
    import json
    from dataclasses import asdict

    from .routing.em import EMSetup
    from .stats import json_safe

    def recorded(s: Any) -> dict[str, Any]:
        return json.loads(json.dumps(json_safe({k: v for k, v in asdict(s).items() if k != "device"})))

    try:
        old = {**recorded(EMSetup()), **json.loads(result.read_text())["setup"]}
        old_seeds, new = set(old.pop("seeds")), recorded(setup)
        new_seeds = set(new.pop("seeds"))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return old == new and old_seeds < new_seeds


def cmd_llm_signatures(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm signatures MODEL``: Paper III's static and dynamic signatures of a trained LM."""
    from .checkpoint import write_text_atomic
    from .llm import prompt_set
    from .llm.load import load_model
    from .llm.signatures import signatures

    prompts = prompt_set(args.prompts)
    if len(prompts) < 3:
        raise UsageError(f"invalid prompts: need at least 3, got {len(prompts)}")
    out = _out_path(args.out) or Path("results/llm") / f"{Path(args.model).stem or 'model'}-{Path(args.prompts).stem}.json"
    if not out.is_dir():
        _keep_result(out, args.force)
    if out.exists() and out.is_dir():
        raise UsageError(f"invalid out: {out} is a folder; give a .json file")
    model, tokenizer, what = load_model(args.model)
    result = signatures(model, tokenizer, prompts, n_boot=args.n_boot, per_quintile=args.per_quintile)
    result["source"] = {"model": args.model, "loaded_from": what, "prompts": args.prompts, "n_prompts": len(prompts)}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps(result, indent=1))
    except OSError as exc:
        raise UsageError(f"invalid out: cannot write {out}: {exc.strerror or exc}") from None
    m, k, v, f = result["model"], result["key_orthogonality"], result["value_manifold"], result["focusing"]
    print(f"{m['class']}: {m['layers']} layers, {m['heads']} heads ({m['kv_heads']} key/value heads), d_model {m['d_model']}"
          f"; {len(prompts)} prompts ({args.prompts})")
    print(f"key orthogonality, mean |cos| of W_K columns: layers {min(k['by_layer']):.3f}–{max(k['by_layer']):.3f} "
          f"(random init {sum(k['random_init_by_layer']) / len(k['random_init_by_layer']):.3f}, Gaussian "
          f"{k['gaussian_baseline']:.3f}); below 0.20 in {k['share_of_layers_below_0.20']:.0%} of layers")
    ci = v["rho_ci"]
    print(f"value manifold (last layer, final token): PC1 {v['pc1_share']:.1%}, PC1+PC2 {v['pc1_pc2_share']:.1%}, "
          f"participation ratio {v['participation_ratio']:.1f}; Spearman(PC1, next-token entropy) "
          f"{v['rho_pc1_entropy']:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]")
    rc = f["reduction_ci"]
    print(f"attention focusing at the final token: entropy {f['entropy_by_layer'][0]:.2f} → {f['entropy_by_layer'][-1]:.2f} bits, "
          f"reduction {f['reduction_first_to_last']:.0%} [{rc[0]:.0%}, {rc[1]:.0%}]")
    print(f"wrote {out}")
    return 0


def cmd_llm_global(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm global MODEL MODEL …``: one PCA basis across models on the same SULA prompts."""
    from .checkpoint import write_text_atomic
    from .llm.cross_model import cross_model
    from .llm.load import load_model
    from .llm.sula import SulaSetup

    if len(args.model) < 2:
        raise UsageError(f"invalid model: llm global compares at least 2 models, got {len(args.model)}")
    # each model is named by its file name, dots and spaces made dashes (the name is a key in the JSON)
    stems = [re.sub(r"[^\w-]+", "-", Path(m).stem) or "model" for m in args.model]
    if len(set(stems)) != len(stems):
        raise UsageError(f"invalid model: the models need distinct file names, got {', '.join(stems)}")
    out = _out_path(args.out) or Path("results/llm") / f"global-{'-'.join(stems)}.json"
    if not out.is_dir():
        _keep_result(out, args.force)
    _writable_file(out)
    loaded = {stem: load_model(m)[:2] for stem, m in zip(stems, args.model)}
    result = cross_model(loaded, SulaSetup(per_k=args.per_k, n_boot=args.n_boot))
    result["source"] = {stem: m for stem, m in zip(stems, args.model)}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps(result, indent=1))
    except OSError as exc:
        raise UsageError(f"invalid out: cannot write {out}: {exc.strerror or exc}") from None
    r, null = result["rho_global_pc1_bayes_entropy"], result["misaligned_null"]
    print(f"global PCA over {result['prompts']} SULA prompts (labels {' / '.join(result['labels'])}), "
          f"models {', '.join(stems)}:")
    print(f"  PC1 {result['global_pc1_share']:.1%} of the variance (misaligned null {null['global_pc1_share_mean']:.1%}); "
          f"|ρ(PC1, H_Bayes)| {r['rho']:.2f} [{r['rho_ci'][0]:.2f}, {r['rho_ci'][1]:.2f}] (null {null['rho_mean']:.2f})")
    for m in stems:
        o = result["own_pc1"][m]
        print(f"  {m}: PC1 block share {result['block_share'][m]:.2f}; own PC1 {o['share']:.1%}, |ρ| {o['rho']:.2f}; "
              f"entropy MAE {result['entropy_mae'][m]:.3f} bits")
    print(f"wrote {out}")
    return 0


def cmd_llm_matched(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm matched``: LMs trained here on the same text, differing only in key/value heads; their signatures."""
    from .llm.matched import SUMMARY, MatchedSetup, run_matched

    out = Path(_out_path(args.out) or "results/llm/matched")
    runs = Path(_out_path(args.runs) or "runs/llm-matched")
    for path, what in ((out, "out"), (runs, "runs")):
        if path.exists() and not path.is_dir():
            raise UsageError(f"invalid {what}: {path} is a file; give a folder")
    kw = {k: getattr(args, k) for k in ("steps", "width", "layers", "heads") if getattr(args, k) is not None}
    if args.steps is not None:  # the warm-up is a tenth of a short run
        kw["warmup"] = min(MatchedSetup.warmup, args.steps // 10)
    setup = MatchedSetup(kv_heads=tuple(args.kv), seeds=tuple(range(args.seeds)), **kw)
    for path, what in ((out, "out"), (runs, "runs")):  # hours of training must not end on an unwritable folder
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"invalid {what}: cannot create {path}: {exc.strerror or exc}") from None
        if not os.access(path, os.W_OK):
            raise UsageError(f"invalid {what}: {path} is not writable")
    summary_path = out / SUMMARY
    if summary_path.is_file() and json.loads(summary_path.read_text()).get("complete"):
        _keep_result(summary_path, args.force)
    run_matched(setup, runs, out, workers=args.workers, remeasure=args.force)
    print((out / "summary.md").read_text())
    print(f"wrote {out / SUMMARY}")
    return 0


def cmd_llm_sula(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm sula MODEL``: the two-label in-context task, its controls and the entropy-axis cut."""
    from .checkpoint import write_text_atomic
    from .llm.load import load_model
    from .llm.sula import SulaSetup, run_sula

    out = _out_path(args.out) or Path("results/llm") / f"{Path(args.model).stem or 'model'}-sula.json"
    if not out.is_dir():
        _keep_result(out, args.force)
    if out.exists() and out.is_dir():
        raise UsageError(f"invalid out: {out} is a folder; give a .json file")
    model, tokenizer, what = load_model(args.model)
    result = run_sula(model, tokenizer, SulaSetup(per_k=args.per_k, n_boot=args.n_boot), args.layers, args.cut_only,
                      args.paper_layers)
    result["source"] = {"model": args.model, "loaded_from": what,
                        "arguments": {"per_k": args.per_k, "n_boot": args.n_boot, "layers": args.layers,
                                      "paper_layers": args.paper_layers, "cut_only": args.cut_only}}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps(result, indent=1))
    except OSError as exc:
        raise UsageError(f"invalid out: cannot write {out}: {exc.strerror or exc}") from None
    print(f"SULA, labels {' / '.join(result['labels'])}, {args.per_k} prompts per k:")
    for name, c in result["conditions"].items():
        mci, kci = c["entropy_mae_ci"], c["kl_ci"]
        print(f"  {name:12s} entropy MAE {c['entropy_mae']:.3f} [{mci[0]:.3f}, {mci[1]:.3f}] bits, "
              f"KL {c['kl']:.3f} [{kci[0]:.3f}, {kci[1]:.3f}] bits")
    if result["cut"].get("applicable"):
        for name in ("entropy_axis", "random_axis"):
            b = result["cut"][name]["behaviour"]
            print(f"  cut {name:12s} at layers {result['cut']['layers']}: entropy MAE {b['entropy_mae']:.3f}, KL {b['kl']:.3f}")
    print(f"wrote {out}")
    return 0


def cmd_reproduce(args: argparse.Namespace, extra: list[str]) -> int:
    """Work every cell the target's claims need that its committed artifacts lack, then rewrite CLAIMS.md."""
    from . import claims
    from .reproduce import reproduce

    results = Path(_out_path(args.results) or "results")
    if results.exists() and not results.is_dir():
        raise UsageError(f"invalid results: {results} is a file")
    summary = reproduce(args.target, args.preset, results, workers=args.workers, dry_run=args.dry_run,
                        threads=args.threads, only=args.only or ())
    if args.only and not summary["cells"]:
        raise UsageError(f"invalid only: no cell of {args.target} matches {' '.join(args.only)} "
                         f"(`windtunnel reproduce {args.target} --dry-run` lists the missing ones)")
    for rel, cmd in summary["external"]:
        print(f"{results / rel} is missing: it is made by `{cmd}`", file=sys.stderr)
    if args.dry_run:
        print(f"{args.target} ({args.preset}): {summary['cells']} cells, {summary['missing']} missing"
              + ("".join(f"\n  {f}  ({summary['progress'][f]})" for f in summary["todo"])))
        return 0
    print(f"{args.target} ({args.preset}): {summary['cells']} cells, {len(summary['done'])} worked "
          f"in {summary['wall_s'] / 60:.1f} min; the rest were committed already")
    # the scale cells are controls of the quick preset's claims (read at their own preset), so those are rewritten
    path, counts = claims.write(results, preset=claims.DOCS_PRESET if args.target == "scale" else args.preset)
    print(f"wrote {path}: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in claims.VERDICTS))
    return 0


def _writable_file(path: Path) -> None:
    """One line, before any work, when ``path`` cannot be written (its folder missing or read-only)."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"invalid out: {path} is a folder")
    if not folder.is_dir() or not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"invalid out: cannot write {path} (its folder is missing or not writable)")


def cmd_claims(args: argparse.Namespace, extra: list[str]) -> int:
    """Render results/CLAIMS.md from the committed artifacts (nothing is trained)."""
    from . import claims

    results = Path(_out_path(args.results) or "results")
    if not results.is_dir():
        raise UsageError(f"invalid results: {results} is not a folder")
    out = _out_path(args.out)
    page = out if out is not None else results / "CLAIMS.md"
    _writable_file(page)
    details = claims.pages.details_folder(Path(page))
    if details.exists() and not details.is_dir():
        raise UsageError(f"invalid out: {details}, where the claims' detail files go, is not a folder")
    if details.is_dir():
        _writable_file(details / "A1.md")
    path, counts = claims.write(results, out, preset=args.preset)
    print(f"wrote {path}: {sum(counts.values())} claims — " + ", ".join(f"{k} {counts.get(k, 0)}" for k in claims.VERDICTS))
    return 0


def cmd_diversity(args: argparse.Namespace, extra: list[str]) -> int:
    """The task-diversity sweep's table and figure from its committed cells (nothing is trained)."""
    from . import diversity

    results = Path(_out_path(args.results) or "results")
    if not results.is_dir():
        raise UsageError(f"invalid results: {results} is not a folder")
    for stem in ("diversity", "diversity_hmm"):
        _writable_file(results / args.preset / f"{stem}.md")
    for sweep in diversity.SWEEPS:
        path, doc = diversity.write(results, preset=args.preset, sweep=sweep)
        for arch in doc["summary"]:
            print(diversity.headline(doc, arch))
        if doc["missing"]:
            print(f"{len(doc['missing'])} {sweep} cells not yet made: windtunnel reproduce beyond")
        print(f"wrote {path}")
    return 0


def cmd_runs(args: argparse.Namespace, extra: list[str]) -> int:
    """``runs [DIR]``: one line per run folder under DIR — where it stands and what is left to do."""
    from .runs import survey

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
        done = ("finished" if row["finished"] else "unfinished") + (", exported: no checkpoints" if row.get("exported") else "")
        print(f"{row['run']}  {row['task']} / {row['arch']}  step {row['step']} of {row['steps']} ({done})"
              + (f"; {', '.join(todo)}" if todo else "; eval, geometry and report current"))
    return 0


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    """Several runs' metrics side by side, and their per-position curves overlaid in one figure."""
    from .compare import compare, default_figure
    from .runs import RunDir

    for r in args.runs:  # every run is read before a figure is written anywhere
        RunDir(r).read_eval()
    out = _out_path(args.out) or default_figure(args.runs)
    if out.exists() and out.is_dir():
        raise UsageError(f"invalid out: {out} is a folder; give a .png file")
    _writable_file(out)
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


def _arch_names() -> list[str]:
    from . import models

    return models.names()


def make_parser() -> argparse.ArgumentParser:
    from . import __version__, grid
    from .reproduce import TARGETS as REPRODUCE_TARGETS
    from .train_config import TrainConfig

    train_defaults = TrainConfig()  # what `train` uses for every flag not given
    from .evaluation import EVAL_SEED

    p = _Parser(prog="windtunnel", description="Bayesian wind tunnels: is a sequence model exactly Bayesian? In bits.")
    p.add_argument("--version", action="version", version=f"windtunnel {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    t = sub.add_parser("tasks", help="list tasks, or show one sampled episode with its posterior")
    t_sub = t.add_subparsers(dest="action", parser_class=_Parser, metavar="{show}",
                             help="show: one sampled episode of NAME with its posterior (default: list the tasks "
                                  "with their parameters)")
    show = t_sub.add_parser("show", help="one sampled episode of a task with its exact posterior")
    show.add_argument("name", help="the task to show (extra --NAME VALUE pairs are its parameters)")
    show.add_argument("--seed", type=seed_int, default=0, help="seed of the sampled episode (default 0)")
    t.set_defaults(func=cmd_tasks)

    def train_args(q: argparse.ArgumentParser, params_default: str, steps_default: str) -> None:
        q.add_argument("--arch", help="architecture (default transformer): " + ", ".join(_arch_names()))
        q.add_argument("--params", type=positive_int,
                       help=f"size the model to this many parameters, ±3%% (default: {params_default})")
        q.add_argument("--steps", type=positive_int, help=f"optimiser steps (default: {steps_default})")
        q.add_argument("--seed", type=seed_int, help="training seed: initialisation and data stream (default 0)")
        q.add_argument("--out", help="run folder (train: required; run: runs/main for the main job, otherwise runs/TASK "
                                     "with the architecture, preset, seed, steps, size and task parameters added "
                                     "where they are not the defaults)")
        q.add_argument("--force", action="store_true", help="replace an existing run folder")
        q.add_argument("--no-progress", action="store_true",
                       help="no progress bar: one line per evaluation interval instead (as when standard error is not a terminal)")
        q.add_argument("--log", action="append", choices=["tensorboard", "wandb", "mlflow"], metavar="TRACKER",
                       help="also log the metrics to this experiment tracker: tensorboard, wandb or mlflow "
                            "(repeatable; default none; its package must be installed)")

    tr = sub.add_parser("train", help="train one model (extra --NAME VALUE pairs are task parameters)")
    tr.add_argument("--task", help="wind tunnel to train on (windtunnel tasks lists them; default bijection)")
    tr.add_argument("--config", help="TOML or JSON file of TrainConfig fields (default: none; flags override it)")
    tr.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint "
                    "(default: start a new run in --out)")
    tr.add_argument("--batch-size", dest="batch_size", type=positive_int,
                    help=f"episodes per step, global over processes (default {train_defaults.batch_size})")
    tr.add_argument("--lr", type=float, help=f"peak learning rate of the cosine schedule (default {train_defaults.lr:g})")
    tr.add_argument("--seeds", type=seed_list, help="several seeds, comma-separated (0,1,2), trained together as one "
                    "stacked model; each seed's run is its own folder OUT-sSEED, resumable and analysable alone")
    train_args(tr, "the architecture's own size, or the config file's",
               f"{train_defaults.steps}, or the config file's")
    tr.set_defaults(func=cmd_train)

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
    tb.set_defaults(func=cmd_table)

    ro = sub.add_parser("routing", help="Paper II: the routing law on a run's heads (law RUN), EM-like vs SGD (em), "
                                        "frame before precision (timescales)")
    ro_sub = ro.add_subparsers(dest="action", parser_class=_Parser, metavar="{law,em,timescales}",
                               help="law: the routing law on a run; em: EM-like vs SGD; timescales: frame before precision")
    ro_sub.required = True
    law = ro_sub.add_parser("law", help="the routing law checked against autograd on every head of a run")
    law.add_argument("run", help="run folder")
    law.add_argument("--n", type=positive_int, default=64, help="episodes the check reads (default 64)")
    law.set_defaults(func=cmd_routing_law)
    em = ro_sub.add_parser("em", help="EM-like updates vs SGD on sticky HMM filtering, with their controls")
    em.add_argument("--steps", type=positive_int,
                    help="full-batch steps per run (default 1000; --deep: 2000)")
    em.add_argument("--seeds", type=positive_int, help="number of seeds (default 5, the papers' own seeds first)")
    em.add_argument("--out", help="output folder (default results/routing; --deep: results/routing/deep; "
                                  "--authors-model: results/routing/deep-authors)")
    em.add_argument("--arms", nargs="+",
                    help="the arms to run (default all: sgd em_like sgd_matched sgd_fast alternating; --authors-model: sgd)")
    em.add_argument("--deep", action="store_true", help="the 4-layer × 4-head transformer with AdamW (2000 steps)")
    em.add_argument("--authors-model", dest="authors_model", action="store_true",
                    help="with --deep: as the papers' code builds it — LayerNorm, dropout 0.1, no positions, gradient "
                         "clip 1.0, the AdamW arm only (its attention dropout makes a seed take over an hour on one CPU "
                         "core; a killed run resumes)")
    em.add_argument("--device", choices=["cpu", "cuda", "auto"],
                    help="where the arms train (default cpu; auto: a GPU where there is one)")
    em.add_argument("--force", action="store_true", help="replace a finished em.json in the output folder (more seeds of the same setup extend it without --force)")
    em.set_defaults(func=cmd_routing_em)
    ts = ro_sub.add_parser("timescales", help="frame before precision: when attention settles against when the "
                                              "error does, bijection and sticky HMM")
    ts.add_argument("--steps", type=positive_int, help="training steps per run (default 1500)")
    ts.add_argument("--seeds", type=positive_int, help="number of seeds per task (default 5)")
    ts.add_argument("--out", help="output folder (default results/routing/timescales; --constant-lr: "
                                  "results/routing/timescales-constant)")
    ts.add_argument("--constant-lr", dest="constant_lr", action="store_true",
                    help="hold the learning rate constant after warmup instead of the cosine decay")
    ts.add_argument("--force", action="store_true", help="replace a finished timescales.json in the output folder")
    ts.set_defaults(func=cmd_routing_timescales)

    rs = sub.add_parser("runs", help="the runs under a folder: task, architecture, step of steps, which results are stale")
    rs.add_argument("folder", nargs="?", default="runs", help="where to look (default runs)")
    rs.set_defaults(func=cmd_runs)

    cp = sub.add_parser("compare", help="several runs' metrics side by side and their curves overlaid")
    cp.add_argument("runs", nargs="+", help="run folders with an eval.json")
    cp.add_argument("--length", type=positive_int,
                    help="overlay the evaluation at this length (HMM: 30, 50; default: the trained length)")
    cp.add_argument("--out", help="the overlay figure (default compare.png in the folder the runs share)")
    cp.set_defaults(func=cmd_compare)

    rep = sub.add_parser("reproduce", help="train, evaluate and analyse what the papers' claims need and results/ lacks")
    rep.add_argument("target", choices=list(REPRODUCE_TARGETS),
                     help="whose claims: paper1 (Paper I's cells and their controls), paper2, paper3, beyond (the "
                          "tests beyond the papers: belief geometry on Mess3, the task-diversity sweeps), scale (the "
                          "HMM cells in the authors' regime, for --preset paper on a GPU), or all")
    rep.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="quick (2 CPU cores, default) or paper (GPU)")
    rep.add_argument("--results", help="the results folder whose artifacts are checked and written (default results)")
    rep.add_argument("--workers", type=positive_int, help="cells worked at once (default: three per GPU, else one per core)")
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
    rep.set_defaults(func=cmd_reproduce)

    cl = sub.add_parser("claims", help="render results/CLAIMS.md: every claim's verdict from the committed artifacts")
    cl.add_argument("--results", help="the results folder (default results)")
    cl.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="whose cells the verdicts read (default quick)")
    cl.add_argument("--out", help="the Markdown file (default RESULTS/CLAIMS.md)")
    cl.set_defaults(func=cmd_claims)

    dv = sub.add_parser("diversity", help="memorisation vs inference: the task-diversity sweep's table and figure "
                                          "from its committed cells")
    dv.add_argument("--results", help="the results folder (default results)")
    dv.add_argument("--preset", default="quick", choices=list(grid.PRESETS), help="whose cells it reads (default quick)")
    dv.set_defaults(func=cmd_diversity)

    lm = sub.add_parser("llm", help="Paper III: the signatures in a trained language model (needs the [hf] extra)")
    lm_sub = lm.add_subparsers(dest="action", parser_class=_Parser, metavar="{signatures,sula,global,matched}",
                               help="signatures: keys, value manifold, focusing; sula: the two-label task and the "
                                    "cut; global: one PCA basis across two or more models on the same SULA prompts; "
                                    "matched: LMs trained here differing only in key/value heads")
    lm_sub.required = True
    one_model = "a local folder, a .gguf file, or a hub name already in the local cache"
    n_boot = dict(type=positive_int, default=1000, help="bootstrap resamples of every interval (default 1000)")
    per_k = dict(type=positive_int, default=50, help="prompts per example count k (default 50)")
    sg = lm_sub.add_parser("signatures", help="layer-0 key orthogonality, the value manifold, attention focusing")
    sg.add_argument("model", help=one_model)
    sg.add_argument("--prompts", default="mixed", help="mixed (default), math, code, docs (1,200 real-text candidates: "
                    "use with --per-quintile), or a file (JSON list / one per line)")
    sg.add_argument("--per-quintile", dest="per_quintile", type=positive_int,
                    help="that many prompts from each next-token-entropy quintile (default: all prompts)")
    sg.add_argument("--n-boot", dest="n_boot", **n_boot)
    sg.add_argument("--out", help="JSON file (default results/llm/MODEL-PROMPTS.json)")
    sg.add_argument("--force", action="store_true", help="replace an existing output file")
    sg.set_defaults(func=cmd_llm_signatures)
    su = lm_sub.add_parser("sula", help="the two-label in-context task, its controls and the entropy-axis cut")
    su.add_argument("model", help=one_model)
    su.add_argument("--per-k", dest="per_k", **per_k)
    which = su.add_mutually_exclusive_group()
    which.add_argument("--layers", type=int, nargs="+", help="this model's layers of the entropy-axis cut (default: "
                       "Paper III's two Bayesian layers 12 and 23, at the same relative depth of this model)")
    which.add_argument("--paper-layers", dest="paper_layers", type=int, nargs="+",
                       help="Paper III's layer numbers (of its 24-layer Pythia-410M, 0-23), each cut at the layer of "
                            "the same relative depth of this model: l -> round(l*(L-1)/23); e.g. 8 12 16 20 23")
    su.add_argument("--n-boot", dest="n_boot", **n_boot)
    su.add_argument("--cut-only", dest="cut_only", action="store_true",
                    help="score the normal prompts and the cut at the layers together only (the paper's multi-layer "
                         "cut): no controls, one-layer cuts or geometry")
    su.add_argument("--out", help="JSON file (default results/llm/MODEL-sula.json)")
    su.add_argument("--force", action="store_true", help="replace an existing output file")
    su.set_defaults(func=cmd_llm_sula)
    gl = lm_sub.add_parser("global", help="one PCA basis across two or more models on the same SULA prompts")
    gl.add_argument("model", nargs="+", help=one_model + " (two or more)")
    gl.add_argument("--per-k", dest="per_k", **per_k)
    gl.add_argument("--n-boot", dest="n_boot", **n_boot)
    gl.add_argument("--out", help="JSON file (default results/llm/global-MODEL-MODEL.json)")
    gl.add_argument("--force", action="store_true", help="replace an existing output file")
    gl.set_defaults(func=cmd_llm_global)
    mt = lm_sub.add_parser("matched", help="LMs trained here on Python's documentation, matched in size, differing only "
                           "in key/value heads (MHA / GQA / MQA): focusing, keys and the value manifold per arm, seeds")
    mt.add_argument("--kv", type=positive_int, nargs="+", default=[8, 2, 1],
                    help="each arm's key/value heads, the first the reference (default 8 2 1 of 8 query heads)")
    mt.add_argument("--seeds", type=positive_int, default=3, help="seeds per arm (default 3)")
    mt.add_argument("--steps", type=positive_int, help="training steps per model (default 1500)")
    mt.add_argument("--width", type=positive_int, help="model width (default 128)")
    mt.add_argument("--layers", type=positive_int, help="layers (default 4)")
    mt.add_argument("--heads", type=positive_int, help="query heads (default 8)")
    mt.add_argument("--workers", type=positive_int, default=1, help="models trained at once (default 1)")
    mt.add_argument("--runs", help="the training folder, resumed if killed (default runs/llm-matched)")
    mt.add_argument("--out", help="the results folder (default results/llm/matched)")
    mt.add_argument("--force", action="store_true", help="re-measure a finished experiment")
    mt.set_defaults(func=cmd_llm_matched)
    return p


def _resource_error(exc: BaseException) -> bool:
    """An allocation the machine cannot satisfy: the user asked for too much, not a bug."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and any(k in text for k in ("can't allocate", "cannot allocate", "out of memory"))
    )


def _bind_task_params(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``run --V 20`` → ``run --V=20``: a task parameter's value bound to its name, so that argparse cannot
    take the value for ``run``'s optional positional TASK (it would read ``--V 20`` as task ``20`` and a
    parameter without a value)."""
    at = next((i for i, item in enumerate(argv) if not item.startswith("-")), None)
    if at is None or argv[at] != "run":  # only the run command has a positional beside its task parameters
        return argv
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    known = set(sub._option_string_actions)
    out, i = argv[: at + 1], at + 1
    while i < len(argv):
        item = argv[i]
        if (item.startswith("--") and "=" not in item and item not in known and item != "--"
                and i + 1 < len(argv) and not argv[i + 1].startswith("--")):
            out.append(f"{item}={argv[i + 1]}")
            i += 2
        else:
            out.append(item)
            i += 1
    return out


def _flag_hint(parser: argparse.ArgumentParser, argv: Sequence[str] | None, message: str) -> str:
    """An unknown task parameter that is a misspelt flag of the command (``--stpes``) says which flag it is near."""
    m = re.match(r"unknown parameter '([^']+)' for task '[^']*'", message)
    words = list(sys.argv[1:] if argv is None else argv)
    if not m or "did you mean" in m.group(0) or not words:
        return message
    subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    sub = subs.choices.get(next((w for w in words if not w.startswith("-")), ""), None) if subs else None
    if sub is None:
        return message
    flags = [o for o in sub._option_string_actions if o.startswith("--")]
    hint = did_you_mean("--" + m.group(1).replace("_", "-"), flags)
    return message.replace(m.group(0), m.group(0) + hint, 1) if hint else message


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 user error, 130 interrupted, 1 when standard
    output was closed by its reader).

    A bug is not caught: it keeps its traceback and Python's exit status 1.
    """
    parser = make_parser()
    try:
        args, extra = parser.parse_known_args(_bind_task_params(parser, list(sys.argv[1:] if argv is None else argv)))
        if not getattr(args, "command", None):
            if extra:
                raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
            parser.print_help()
            return 0
        if extra and args.command not in ("tasks", "train", "run"):
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
        return int(args.func(args, extra) or 0)
    except UserError as exc:
        print(f"windtunnel: error: {_flag_hint(parser, argv, str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except (MemoryError, RuntimeError) as exc:
        if not _resource_error(exc):
            raise
        print(f"windtunnel: error: not enough memory for this request ({str(exc).splitlines()[0][:160]}); "
              "use smaller sizes", file=sys.stderr)
        return EXIT_USAGE
    except DiagnosticFailed as exc:  # the others were written; the tracebacks were printed where they arose
        print(f"windtunnel: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of standard output left (`windtunnel … | head`): nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 1
    except (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        # the filesystem is not what the command needs (a folder it cannot write, an entry of the wrong
        # kind): the user's to fix.  Owners check their folders before writing; this is the last line.
        print(f"windtunnel: error: cannot use {exc.filename or 'a path'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ENAMETOOLONG):
            raise
        print(f"windtunnel: error: cannot write {exc.filename or 'the output'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("windtunnel: interrupted; rerun the same command (or --resume) to continue from the last checkpoint", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
