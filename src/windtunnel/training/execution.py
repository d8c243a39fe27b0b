"""How a run's steps were executed: the device, the step program, the compiler and Mamba's scan.

The same recipe can run very differently — a GPU whose Triton scan failed its self-check walks Mamba's recurrence
one position at a time (3–4× slower), a step the compiler refused runs uncompiled, a stacked step whose CUDA graph did
not reproduce the eager step runs eagerly — and none of it changes a number the run reports, only its time.  So each
training loop says, after its first step, what ran: on its first progress line, and in the run's ``timings.json``
under ``"execution"`` beside the seconds it took, where a benchmark or a reader of committed cells can see why a
cell was slow.
"""

from __future__ import annotations

from typing import Any

import torch

from ..models.scans import scans_run

__all__ = ["describe", "line", "start"]


def start() -> None:
    """Forget the scans run so far (call before a run's first step: what it reads after is that run's)."""
    scans_run(reset=True)


def device_name(device: torch.device) -> str:
    """``cpu``, or ``cuda:0 (NVIDIA H200)``."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return str(device)


def describe(device: torch.device, step: str, compiled: str, members: int = 1, bf16: bool = False) -> dict[str, Any]:
    """What ran a run's first step: ``device``; ``members`` (the runs trained as one stacked model); ``step`` (``eager``,
    ``CUDA graph``, or eager with the reason the graph was not kept); ``compile`` (``off``, ``compiled``, or
    ``not compiled (why)``); ``bf16`` autocast; ``scan``: the selective scans the step ran (``none`` for models
    without one: :func:`windtunnel.models.scans.scans_run`)."""
    return {"device": device_name(device), "members": members, "step": step, "compile": compiled, "bf16": bf16,
            "scan": ", ".join(scans_run()) or "none"}


def line(what: str, execution: dict[str, Any]) -> str:
    """The progress line that says it: ``transformer/bijection execution: cpu, step eager, compile off, …``."""
    members = f", {execution['members']} members" if execution["members"] > 1 else ""
    return (f"{what} execution: {execution['device']}{members}, step {execution['step']}, compile "
            f"{execution['compile']}, bf16 {'on' if execution['bf16'] else 'off'}, scan {execution['scan']}")
