"""``windtunnel routing``: Paper II — the routing law checked against autograd on a run's heads (``law``),
EM-like updates against SGD with their controls (``em``), frame before precision over seeds (``timescales``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .args import Parser, UsageError, positive_int
from .outputs import divergence_note, keep_result, out_path


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``routing`` and its actions ``law``, ``em`` and ``timescales``."""
    ro = sub.add_parser("routing", help="Paper II: the routing law on a run's heads (law RUN), EM-like vs SGD (em), "
                                        "frame before precision (timescales)")
    ro_sub = ro.add_subparsers(dest="action", parser_class=Parser, metavar="{law,em,timescales}",
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


def cmd_routing_law(args: argparse.Namespace, extra: list[str]) -> int:
    """``routing law RUN``: Paper II's gradient law checked against autograd on every head of a run."""
    from ..evaluation.evaluate import EVAL_SEED
    from ..routing import check_all_heads
    from ..run.runs import RunDir
    from ..run.runs import load

    run = RunDir(args.run)
    task, model = load(run)
    rows = check_all_heads(model, task.sample(args.n, EVAL_SEED))
    diverged = divergence_note(run, "checked")
    if diverged:
        print(diverged, file=sys.stderr)
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

    from ..orchestration.timescales import DEFAULT_SETUPS, run_timescales

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
    out = out_path(args.out) or Path(default_out)
    keep_result(out / "timescales.json", args.force)
    md = run_timescales(setups, out)
    print(md.read_text())
    print(f"wrote {md}")
    return 0


def cmd_routing_em(args: argparse.Namespace, extra: list[str]) -> int:
    """``routing em``: EM-like updates against SGD, with the same-norm and 10× controls."""
    from ..routing.em import PAPER_SEEDS, EMSetup, run_em

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
    out = out_path(args.out) or Path(default_out)
    if not _adds_seeds(out / "em.json", setup):
        keep_result(out / "em.json", args.force)
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

    from ..routing.em import EMSetup
    from ..evaluation.stats import json_safe

    def recorded(s: Any) -> dict[str, Any]:
        return json.loads(json.dumps(json_safe({k: v for k, v in asdict(s).items() if k != "device"})))

    try:
        old = {**recorded(EMSetup()), **json.loads(result.read_text())["setup"]}
        old_seeds, new = set(old.pop("seeds")), recorded(setup)
        new_seeds = set(new.pop("seeds"))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return old == new and old_seeds < new_seeds
