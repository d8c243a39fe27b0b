"""A request to stop, taken from a signal and honoured where nothing is lost.

A run is stopped from outside in three ways: a scheduler ending or preempting a job (``SIGTERM``, also ``kill``),
SLURM warning an array task that its time limit is near (``SIGUSR2``, which the SLURM executor asks SLURM to send
ahead of the limit), and a person pressing Ctrl-C (``SIGINT``).  While :func:`catching` is in force the first such
signal is remembered, not acted on at once; the training loops look at :func:`requested` after each step, write a
checkpoint at the step they are at and raise :class:`TrainingStopped`, so resuming continues from exactly that
step.  A second Ctrl-C interrupts at once (``KeyboardInterrupt``): the way out when a step itself hangs.

Signals are caught only in a process's main thread (Python runs handlers nowhere else); elsewhere :func:`catching`
changes nothing and the process keeps its own handlers.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

STOP_SIGNALS = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGUSR2", None), signal.SIGINT) if s is not None)
"""The signals taken as a request to stop."""

WHY = {"SIGTERM": "asked to end (SIGTERM: a scheduler ending or preempting the job, or kill)",
       "SIGUSR2": "the SLURM task's time limit is near (SIGUSR2)",
       "SIGINT": "interrupted (Ctrl-C)"}
"""Each stop signal in words, for the line that says why a run stopped."""

_requested: str | None = None  # the name of the first stop signal since catching began
_depth = 0  # nested catching() blocks: the outermost installs and restores the handlers
_for_good = False  # install() was called: this process (a pool worker) keeps the handlers for its whole life


class TrainingStopped(Exception):
    """Training stopped on a request (:data:`STOP_SIGNALS`) after checkpointing the step it reached; the run
    resumes from there.  ``signal`` is the signal's name, ``step`` the step checkpointed."""

    def __init__(self, message: str, signal_name: str, step: int) -> None:
        super().__init__(message)
        self.signal = signal_name
        self.step = step

    def __reduce__(self) -> tuple[Any, tuple[str, str, int]]:
        # a worker of a process pool hands its stop to the parent pickled: rebuilt with all three arguments
        return type(self), (str(self), self.signal, self.step)

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by this signal: 128 + its number."""
        return 128 + int(getattr(signal, self.signal, signal.SIGTERM))


class NotStarted(Exception):
    """A cell of a plan not begun because a stop was requested before its turn; it is worked by the next run of
    the same command."""


def _note(signum: int, frame: Any) -> None:
    global _requested
    name = signal.Signals(signum).name
    if _requested is not None and name == "SIGINT":
        raise KeyboardInterrupt  # a second Ctrl-C: now, not at the end of the step
    if _requested is None:
        _requested = name


def _install() -> dict[int, Any]:
    previous = {}
    for s in STOP_SIGNALS:
        previous[s] = signal.getsignal(s)
        signal.signal(s, _note)
    return previous


def install() -> None:
    """Catch the stop signals for the rest of this process's life (a pool worker's initializer: a signal that
    arrives between two of its cells is kept for the next one to honour, not lost to the default action)."""
    global _for_good
    if threading.current_thread() is threading.main_thread():
        _install()
        _for_good = True


@contextlib.contextmanager
def catching() -> Iterator[None]:
    """Within the block the stop signals are remembered (:func:`requested`) instead of acted on; the outermost
    block starts with no request and gives back the handlers it found."""
    global _depth, _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    if _depth == 0 and not _for_good:
        _requested = None
        previous = _install()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for s, handler in previous.items():
            signal.signal(s, handler)


def requested() -> str | None:
    """The name of the stop signal received (``"SIGTERM"``, ``"SIGUSR2"``, ``"SIGINT"``), or ``None``."""
    return _requested


def stopped(step: int, total: int, where: str) -> TrainingStopped:
    """The exception a training loop raises once it has checkpointed ``step`` (of ``total``) in ``where``."""
    name = _requested or "SIGTERM"
    return TrainingStopped(f"stopped at step {step} of {total}: {WHY.get(name, name)}; checkpoint saved in {where}, "
                           "rerun the same command (or --resume) to continue from it", name, step)
