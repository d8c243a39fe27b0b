"""Claiming a grid cell so that two workers never train it at once, on one machine or on a cluster's shared
filesystem.

A cell's claim is a small JSON file beside its run folder (``results/{preset}/runs/{folder}.claim``) naming its
holder: host, process, SLURM job (``$SLURM_ARRAY_JOB_ID_$SLURM_ARRAY_TASK_ID`` or ``$SLURM_JOB_ID``) and a random
token.  It is taken by writing a file of a unique name and hard-linking it to the claim's name — ``link`` is atomic
on NFS where ``O_EXCL`` was not always, and the link count of the unique file says whether this worker won.  A claim
is broken only when its holder is gone:

* a holder with a SLURM job is gone when the scheduler no longer lists the job (``squeue``) — it finished, failed,
  was cancelled or ran past its time limit; a job that was requeued keeps its id, so its next start takes its own
  claim back and resumes the cell from its last checkpoint;
* a holder without a job is gone when it ran on this host and its process no longer exists.

Anything else — a process on another host, a scheduler that cannot be asked — is taken to be alive: a claim is
never broken on a guess.  Breaking renames the claim away first and checks that the file renamed is the one judged
stale, so two workers that both found it stale cannot both take it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

SUFFIX = ".claim"


@dataclass(frozen=True)
class Holder:
    """Who holds a claim: host, process id, SLURM job (``""`` outside SLURM) and which start of it (SLURM counts a
    requeued job's restarts), when it was taken, a random token."""

    host: str
    pid: int
    job: str
    since: float
    token: str
    start: str = "0"

    @classmethod
    def me(cls) -> "Holder":
        return cls(socket.gethostname(), os.getpid(), slurm_job(), time.time(), secrets.token_hex(8),
                   os.environ.get("SLURM_RESTART_COUNT", "0"))

    def describe(self) -> str:
        where = f"SLURM job {self.job} on {self.host}" if self.job else f"process {self.pid} on {self.host}"
        return f"{where} since {time.strftime('%Y-%m-%d %H:%M', time.localtime(self.since))}"


def slurm_job() -> str:
    """This process's SLURM job as the scheduler names it (``123_4`` for a task of an array), ``""`` outside SLURM."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID", "")


def claim_path(run_dir: Path | str) -> Path:
    """Where the claim of the cell worked in ``run_dir`` lives (beside the folder, so it exists before it)."""
    run_dir = Path(run_dir)
    return run_dir.with_name(run_dir.name + SUFFIX)


def read_holder(path: Path) -> Holder | None:
    """The holder recorded in a claim file; ``None`` if there is none (or it cannot be read: a claim half written
    by a process that died reads as absent only once it is old, see :func:`alive`)."""
    try:
        return Holder(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        return Holder("?", -1, "", path.stat().st_mtime if path.exists() else 0.0, "")


def _jobs_listed(job: str) -> bool | None:
    """Whether ``squeue`` still lists ``job`` (running, pending, requeued, completing …); ``None`` if it cannot be
    asked."""
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%i", "-j", job], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        # squeue refuses a job id it has forgotten ("Invalid job id specified"): the job is long gone
        return False if "Invalid job id" in out.stderr else None
    return bool(out.stdout.strip())


def alive(holder: Holder, now: float | None = None) -> bool:
    """Whether ``holder`` may still be working (see the module docstring); a claim that could not be read counts as
    alive for a minute after it was written (its writer may be writing it)."""
    if holder.token == "":
        return (now or time.time()) - holder.since < 60
    if holder.job:
        listed = _jobs_listed(holder.job)
        return True if listed is None else listed
    if holder.host != socket.gethostname():
        return True
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mine(holder: Holder) -> bool:
    """Whether ``holder`` is this process, or an earlier start of this SLURM job (requeued or preempted: the same
    job, another restart count) — not a sibling worker of this start, which holds its own cell."""
    me = Holder.me()
    if holder.job and holder.job == me.job and holder.start != me.start:
        return True
    return holder.host == me.host and holder.pid == me.pid


def try_claim(run_dir: Path | str) -> tuple[bool, Holder | None]:
    """Claim the cell of ``run_dir``: ``(True, None)`` when taken (or already this process's or this job's),
    ``(False, holder)`` when a live holder has it."""
    path = claim_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    me = Holder.me()
    for _ in range(3):
        tmp = path.with_name(f"{path.name}.{me.host}.{me.pid}.{me.token}")
        tmp.write_text(json.dumps(asdict(me)))
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            if os.stat(tmp).st_nlink == 2 or read_holder(path) == me:
                return True, None
        finally:
            tmp.unlink(missing_ok=True)
        holder = read_holder(path)
        if holder is None:
            continue  # released meanwhile: try again
        if not mine(holder) and alive(holder):
            return False, holder
        _break(path, holder)  # stale, or an earlier start of this job: take it over
    holder = read_holder(path)
    return False, holder


def _break(path: Path, judged: Holder) -> None:
    """Remove the claim judged stale — only if the file is still the one judged (another worker may have broken it
    and taken a fresh claim meanwhile, which must stand)."""
    aside = path.with_name(f"{path.name}.stale.{secrets.token_hex(6)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if read_holder(aside) != judged:  # a fresh claim was renamed: put it back
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink(missing_ok=True)


def release(run_dir: Path | str) -> None:
    """Give up this process's claim of the cell of ``run_dir`` (another's is left alone)."""
    path = claim_path(run_dir)
    holder = read_holder(path)
    if holder is not None and mine(holder):
        path.unlink(missing_ok=True)


_HELD: set[str] = set()
"""Claims this process holds through :func:`claimed` (re-entrant: a stage that calls another holds it once)."""


@contextlib.contextmanager
def claimed(run_dir: Path | str) -> Iterator[Holder | None]:
    """Hold the cell's claim for the duration: yields ``None`` when this worker holds it, else the live holder (the
    caller then leaves the cell to it).  Re-entrant within a process."""
    key = str(claim_path(run_dir).resolve())
    if key in _HELD:
        yield None
        return
    ok, holder = try_claim(run_dir)
    if not ok:
        yield holder
        return
    _HELD.add(key)
    try:
        yield None
    finally:
        _HELD.discard(key)
        release(run_dir)
