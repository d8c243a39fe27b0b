"""``windtunnel tasks``: the wind tunnels with their parameters, or ``tasks show NAME``: one sampled episode
with its exact posterior."""

from __future__ import annotations

import argparse

from .args import Parser, UsageError, parse_params, seed_int
from .names import task_listing


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``tasks`` (and its action ``show``)."""
    t = sub.add_parser("tasks", help="list tasks, or show one sampled episode with its posterior")
    t_sub = t.add_subparsers(dest="action", parser_class=Parser, metavar="{show}",
                             help="show: one sampled episode of NAME with its posterior (default: list the tasks "
                                  "with their parameters)")
    show = t_sub.add_parser("show", help="one sampled episode of a task with its exact posterior")
    show.add_argument("name", help="the task to show (extra --NAME VALUE pairs are its parameters)")
    show.add_argument("--seed", type=seed_int, default=0, help="seed of the sampled episode (default 0)")
    t.set_defaults(func=cmd_tasks)


def cmd_tasks(args: argparse.Namespace, extra: list[str]) -> int:
    if args.action is None:  # the listing is read from the task modules' source: it answers without importing torch
        if extra:
            raise UsageError(f"unexpected argument {extra[0]!r}")
        for name, (summary, defaults) in task_listing().items():
            params = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
            print(f"{name:22s} {summary}")
            print(f"{'':22s}   {params}")
        return 0
    from .. import tasks
    from ..tasks.base import check_memory, entropy_bits

    task = tasks.make(args.name, **parse_params(extra))
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
