"""Cells of one shape trained as one stacked model, then each finished alone.

``windtunnel reproduce`` and ``windtunnel table`` plan cells that differ only in their seed, and columns whose tasks
have episodes of one shape (bijection with and without replacement).  :func:`group` turns the payloads of such cells
(configs equal but for :data:`~windtunnel.training.stacked.STACKABLE_DIFFERENCES`) into one
payload ``{"members": [...]}`` that a worker takes whole; :func:`work_stack` trains the members as one stacked model
(:func:`windtunnel.training.stacked.train_stacked`: each member's run folder exactly as a run trained alone writes it),
then hands each member to the command's own work function, which finds its training finished and evaluates, analyses
and exports it as it does any cell; :func:`outcomes` gives the command back one ``(payload, result, error)`` per cell.
A member another worker holds, one already trained, or one whose newest checkpoint is at another step than the
others' is left to that work function, which trains it alone.

Stacking pays where one model leaves the device idle between kernel launches (a GPU, where the stacked step is also
recorded as a CUDA graph); on CPU cores a stack runs slower than its seeds as separate processes
(``benchmarks/stacked_cpu.py``), so :func:`wanted` stacks on GPUs unless told otherwise.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from typing import Any, Iterable, Iterator, Sequence

from .executors import Outcome, Work

__all__ = ["STACK_CHOICES", "group", "members", "outcomes", "wanted", "work_stack"]

STACK_CHOICES = ("auto", "on", "off")


def wanted(stack: str, gpus: int) -> bool:
    """Whether to stack: ``on``, or ``auto`` where the cells run on GPUs."""
    return stack == "on" or (stack == "auto" and gpus > 0)


OWN_WORK = ("config", "seed", "run_dir", "cell_dir", "job", "device", "column", "lengths", "analyze", "analyze_n")
"""A payload's fields that are its cell's alone — what it trains, where, and how it is evaluated and analysed after
(each member's own work) — and not part of what a stack shares."""


def _shape(payload: dict[str, Any]) -> str:
    """The payload's stack key: its config's :func:`~windtunnel.training.stacked.stack_shape` (the device is dealt
    out per stack) and the rest of its work (the preset, the threads, where results go)."""
    from ..training.stacked import stack_shape

    rest = {k: v for k, v in payload.items() if k not in OWN_WORK}
    return json.dumps([stack_shape(payload["config"]), rest], sort_keys=True, default=str)


def group(payloads: Sequence[dict[str, Any]], gpus: int = 0) -> list[dict[str, Any]]:
    """The payloads with every set of stackable ones (same shape: equal configs but for the data stream and learning
    rates, and equal work otherwise) made one ``{"members": [...]}`` payload, at the place of its first member; with
    ``gpus``, a cell alone is made a stack of one too (so that it trains through the recorded step), and the devices
    are dealt out again, one per payload in turn (a stack's members share its device)."""
    shapes: dict[str, list[dict[str, Any]]] = {}
    for p in payloads:
        shapes.setdefault(_shape(p), []).append(p)
    out = []
    for p in payloads:
        same = shapes.pop(_shape(p), None)
        if same is not None:
            out.append(same[0] if len(same) == 1 and not gpus else {"members": same, "run_dir": same[0]["run_dir"]})
    for i, p in enumerate(out):
        if gpus:
            for m in members(p):
                m["device"] = f"cuda:{i % gpus}"
    return out


def members(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells' payloads a payload stands for (itself, unless it is a stack)."""
    return payload.get("members", [payload])


def outcomes(found: Iterable[Outcome]) -> Iterator[Outcome]:
    """An executor's outcomes with each stack's opened into its members' (a stack that failed as a whole: each
    member with that error)."""
    for payload, result, error in found:
        if "members" not in payload:
            yield payload, result, error
        elif error is not None or result is None:
            for m in payload["members"]:
                yield m, None, error
        else:
            yield from result["members"]


def work_stack(work: Work, payload: dict[str, Any]) -> dict[str, Any]:
    """``work`` of one payload; of a stack, its members trained together (:func:`train_together`), then ``work`` of
    each: ``{"members": [(payload, result, error), ...]}`` (a member's failure is its own; a stop stops them all)."""
    from ..run import stopping

    if "members" not in payload:
        return work(payload)
    done = []
    with ExitStack() as held:
        train_together(payload["members"], held)
        for m in payload["members"]:  # each claim is still ours (claims are re-entrant): work finds it free
            try:
                done.append((m, work(m), None))
            except stopping.TrainingStopped:
                raise
            except Exception as exc:  # noqa: BLE001 - the others still get evaluated; the command reports this one
                done.append((m, None, exc))
    return {"members": done}


def train_together(payloads: Sequence[dict[str, Any]], held: ExitStack) -> list[str]:
    """Train, as one stacked model, the members whose cells this worker can claim (claims kept on ``held``) and that
    stand at the same step short of their recipe's end (new runs, or runs stopped together); returns their run
    folders — none when fewer than two qualify off a GPU (each member is then trained alone by the command's work;
    on a GPU one alone is a stack of one, for the recorded step).  Each trained member's ``timings.json`` records the
    stack's training time and its size."""
    import torch

    from ..run import locks
    from ..run.runs import RunDir
    from ..training.loop import TrainConfig, TrainingDiverged
    from ..training.stacked import train_stacked

    at: dict[int, list[tuple[TrainConfig, RunDir]]] = {}
    for p in payloads:
        if held.enter_context(locks.claimed(p["run_dir"])) is not None:
            continue  # another worker has it
        run = RunDir(p["run_dir"])
        cfg = TrainConfig.from_dict({**p["config"], **({"device": p["device"]} if p.get("device") else {})})
        step = run.latest_step() if run.is_run() else 0
        if run.read_cell() is None and step < cfg.steps and run.divergence() is None:  # a diverged run goes alone
            at.setdefault(step, []).append((cfg, run))
    together = max(at.values(), key=len, default=[])
    if not together or (len(together) < 2 and not str(together[0][0].device or "").startswith("cuda")):
        return []
    torch.set_num_threads(payloads[0].get("threads") or torch.get_num_threads())
    t0 = time.perf_counter()
    try:
        train_stacked([c for c, _ in together], [r for _, r in together],
                      resume=any(r.is_run() for _, r in together), log_lines=True)
    except TrainingDiverged:
        # the diverged member recorded it; each member goes on alone from its last good checkpoint (the command's
        # work): its partners finish, and the diverged one fails as its own cell
        return []
    for _, run in together:
        run.add_timing(train_s=run.training_seconds() or (time.perf_counter() - t0), stacked_members=len(together))
    return [str(r.path) for _, r in together]
