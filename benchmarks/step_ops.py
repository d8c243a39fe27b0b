"""Operations in one stacked training step, by part: what a recorded step replays on a GPU, counted on a CPU.

    python benchmarks/step_ops.py [--preset paper] [--seeds 3] [--columns …] [--archs …] [--compiled] [--jsonl OUT]

A graphed step of a small model costs about its kernel count times a few microseconds: the kernels are too small to
fill the device, so the count, not the arithmetic, sets the time.  For each cell of the table
(``windtunnel.run.grid``'s columns × rows at ``--preset``, each on its own recipe), ``--seeds`` members are stacked
(``windtunnel.training.stacked``) and trained three steps eagerly on the CPU, every dispatched ATen operation counted
(``TorchDispatchMode``; views and other metadata operations, which launch nothing, left out) and split into the
parts of :meth:`windtunnel.training.step.StackedStep._body`: the forward pass, the members' losses, backward, the
per-member gradient clipping, the AdamW update and the bookkeeping (gradient buffers, schedule, divergence watch).

In the same run, the clipping and update are also counted the way they were first written — a loop over the stacked
parameters, about ten operations each (``per_parameter``, on the same gradients) — the baseline of
:class:`windtunnel.training.step.MemberAdamW`'s one-buffer update.  Clipping and update are the same operations on a
GPU; the forward and backward counts are the CPU's operator choices (a GPU's attention and LSTM kernels differ), and
Mamba is left out by default since its CPU scan is a C++ kernel where a GPU runs Triton.

``--compiled`` also trains each cell's stack with ``compile`` on and counts the kernel launches in the programs
inductor generates for its forward pass and its backward (read from the generated code: fused kernels, library
kernels such as ``bmm``, and operations left to ATen), beside the eager forward and backward counted above.  On a CPU
these are inductor's C++ kernels; a GPU's Triton code fuses by the same scheduler, though not always into the same
kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import collections
import contextlib
import io
import json
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from paper_stacked import configs
from windtunnel.run import grid
from windtunnel.training import step as step_module
from windtunnel.training.optim import FiniteWatch
from windtunnel.training.stacked import train_stacked

PARTS = ("forward", "loss", "backward", "clip", "update", "bookkeeping")
STEPS = 3
METADATA = {"view", "_unsafe_view", "detach", "t", "expand", "unsqueeze", "squeeze", "select", "slice", "reshape",
            "permute", "transpose", "alias", "as_strided", "split", "split_with_sizes", "unbind", "chunk", "narrow",
            "_reshape_alias", "lift_fresh"}
"""Operations that make a view or read metadata: no kernel runs."""


class _Counter(TorchDispatchMode):
    """Counts the operations dispatched while it is active, under the part named in :attr:`part`."""

    def __init__(self) -> None:
        super().__init__()
        self.part = "backward"  # what runs in the step outside the named parts is the backward pass
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func.overloadpacket.__name__ not in METADATA:
            self.counts[self.part] += 1
        return func(*args, **(kwargs or {}))


def _in_part(counter: _Counter, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        before, counter.part = counter.part, part
        try:
            return fn(*args, **kwargs)
        finally:
            counter.part = before
    return wrapped


def per_parameter_ops(grads: list[torch.Tensor], params: list[torch.Tensor]) -> int:
    """Operations of clipping and AdamW written as a loop over the stacked parameters (the first stacked step's
    form), on copies of this step's gradients and weights."""
    counter = _Counter()
    grads, params = [g.clone() for g in grads], [p.detach().clone() for p in params]
    m, v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    lr, count = torch.full((grads[0].shape[0],), 1e-3, dtype=torch.float64), torch.ones((), dtype=torch.float64)
    with counter, torch.no_grad():
        sq = torch.stack([g.reshape(g.shape[0], -1).double().pow(2).sum(1) for g in grads]).sum(0)
        coef = (1.0 / (sq.sqrt() + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype).reshape(-1, *([1] * (g.dim() - 1))))
        bias1, bias2_sqrt = 1 - 0.9 ** count, (1 - 0.999 ** count).sqrt()
        for p, g, mi, vi in zip(params, grads, m, v):
            lr_p = lr.to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
            p.mul_(1 - lr_p * 0.01)
            mi.lerp_(g, 0.1)
            vi.mul_(0.999).addcmul_(g, g, value=0.001)
            p.sub_(mi / (vi.sqrt() / bias2_sqrt.to(p.dtype)).add_(1e-8) * (lr_p / bias1.to(p.dtype)))
    return sum(counter.counts.values())


class _Patched:
    """While active: each step's parts counted, and the stacked step kept for the baseline."""

    def __init__(self) -> None:
        self.counter = _Counter()
        self.steps = 0
        self.step: Any = None  # the stacked step, whose last gradients and weights the baseline is counted on

    def __enter__(self) -> "_Patched":
        c, S = self.counter, step_module
        self.saved = [(S, "clip_per_member", S.clip_per_member), (S, "loss_fn", S.loss_fn),
                      (S.MemberAdamW, "step", S.MemberAdamW.step), (S.MemberAdamW, "zero_grad", S.MemberAdamW.zero_grad),
                      (S.MemberAdamW, "grads", S.MemberAdamW.grads), (S.Schedule, "__call__", S.Schedule.__call__),
                      (FiniteWatch, "record", FiniteWatch.record), (S.StackedStep, "_body", S.StackedStep._body)]
        S.clip_per_member = _in_part(c, "clip", S.clip_per_member)
        S.loss_fn = _in_part(c, "loss", S.loss_fn)
        S.MemberAdamW.step = _in_part(c, "update", S.MemberAdamW.step)
        for owner, name in ((S.MemberAdamW, "zero_grad"), (S.MemberAdamW, "grads"), (S.Schedule, "__call__"),
                            (FiniteWatch, "record")):
            setattr(owner, name, _in_part(c, "bookkeeping", getattr(owner, name)))
        body, patched = S.StackedStep._body, self

        def counted_body(step: Any) -> None:
            if not getattr(step, "_counted_forward", False):
                step.forward, step._counted_forward = _in_part(c, "forward", step.forward), True
            with c:
                body(step)
            patched.steps += 1
            patched.step = step
        S.StackedStep._body = counted_body
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, name, fn in self.saved:
            setattr(owner, name, fn)


def count(preset: str, column: str, arch: str, seeds: int) -> dict[str, Any]:
    """One cell's operations per stacked step, by part, with the per-parameter baseline of clipping and update."""
    cfgs = configs(preset, column, arch, seeds, STEPS, "cpu")
    with _Patched() as p, tempfile.TemporaryDirectory() as tmp:
        train_stacked(cfgs, [Path(tmp) / f"s{c.seed}" for c in cfgs], until=STEPS, log_lines=False, graph="off")
    ops = {part: p.counter.counts[part] // p.steps for part in PARTS}
    used = [q for q in p.step.params.values() if q.grad is not None]
    per_parameter = per_parameter_ops([q.grad for q in used], used)
    return {"column": column, "arch": arch, "seeds": seeds, "parameters": len(used), "ops": ops,
            "total": sum(ops.values()), "clip_and_update": ops["clip"] + ops["update"],
            "clip_and_update_per_parameter": per_parameter,
            "total_per_parameter": sum(ops.values()) - ops["clip"] - ops["update"] + per_parameter}


LAUNCH = re.compile(r"^\s+(?:\w+ = )?(cpp_fused_\w+|triton_\w+\.run|extern_kernels\.\w+|aten\.[\w.]+|"
                    r"torch\.ops\.[\w.]+)\(", re.M)
"""A kernel launched by inductor's generated ``call``: a fused kernel of its own (C++ on a CPU, Triton on a GPU), a
library kernel (``extern_kernels.bmm``), or an operation it left to ATen."""


def launches(module: str) -> int:
    """Kernel launches in the ``call`` function of one module inductor generated (its benchmark harness left out)."""
    start = re.search(r"^\s*def call\(", module, re.M)
    if start is None:
        return 0
    rest = module[start.end():]
    end = re.search(r"^\s*def \w+\(", rest, re.M)  # the next function (the harness) ends the call
    return len(LAUNCH.findall(rest[:end.start()] if end else rest))


@contextlib.contextmanager
def generated_modules() -> Iterator[list[str]]:
    """The source of every module inductor loads while the context is open, in order (one per compiled program),
    read as it is loaded: compile from an empty cache of compiled graphs inside it."""
    from torch._inductor import codecache

    modules: list[str] = []
    load = codecache.PyCodeCache.load_by_key_path

    def kept(key: str, path: str, *args: Any, **kwargs: Any) -> Any:
        modules.append(Path(path).read_text())
        return load(key, path, *args, **kwargs)

    codecache.PyCodeCache.load_by_key_path = kept  # type: ignore[method-assign]
    try:
        yield modules
    finally:
        codecache.PyCodeCache.load_by_key_path = load  # type: ignore[method-assign]


def compiled_count(preset: str, column: str, arch: str, seeds: int) -> dict[str, Any]:
    """The cell's stack trained with ``compile`` through the real loop: how its forward pass ran, and the kernel
    launches of each program inductor generated for it, in order (the forward pass, then its backward)."""
    import torch._dynamo

    cfgs = [dataclasses.replace(c, compile=True) for c in configs(preset, column, arch, seeds, STEPS, "cpu")]
    torch._dynamo.reset()
    out = io.StringIO()
    with generated_modules() as modules, tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(out):
        train_stacked(cfgs, [Path(tmp) / f"s{c.seed}" for c in cfgs], until=STEPS, log_lines=True, graph="off")
    said = next(x.split("stacked forward: ", 1)[1] for x in out.getvalue().splitlines() if "stacked forward: " in x)
    kernels = [launches(m) for m in modules if re.search(r"^\s*def call\(", m, re.M)]
    return {"forward": said, "kernels": kernels, "total": sum(kernels)} if said == "vmapped, compiled" else {
        "forward": said}


def cells(preset: str, columns: list[str] | None, archs: list[str] | None) -> Iterator[tuple[str, str]]:
    for column in columns or list(grid.TABLE_COLUMNS):
        for arch in archs or [a for a in grid.TABLE_ARCHS if a != "mamba"]:
            yield column, arch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--columns", nargs="+")
    ap.add_argument("--archs", nargs="+")
    ap.add_argument("--compiled", action="store_true",
                    help="also the kernel launches of the stack's compiled forward and backward (inductor's code)")
    ap.add_argument("--jsonl", help="write the rows here, one JSON object a line")
    args = ap.parse_args()
    rows = []
    for column, arch in cells(args.preset, args.columns, args.archs):
        rows.append(count(args.preset, column, arch, args.seeds))
        r = rows[-1]
        print(f"{column:22s} {arch:14s} {r['total']:5d} operations a step {r['ops']}; clipping and update "
              f"{r['clip_and_update']} (a loop over {r['parameters']} parameters: {r['clip_and_update_per_parameter']})",
              flush=True)
        if args.compiled:
            r["compiled"] = compiled_count(args.preset, column, arch, args.seeds)
            print(f"{'':37s} compiled: {r['compiled']} (eager forward and backward: "
                  f"{r['ops']['forward'] + r['ops']['backward']})", flush=True)
    if args.jsonl:
        Path(args.jsonl).write_text("".join(json.dumps({"preset": args.preset, **r}) + "\n" for r in rows))


if __name__ == "__main__":
    main()
