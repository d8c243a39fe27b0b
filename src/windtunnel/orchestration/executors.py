"""Where a plan's cells are worked: a process pool on this machine, or a SLURM job array through submitit.

Both take the same ``work(payload) -> dict`` function (``windtunnel reproduce``'s and ``windtunnel table``'s own)
and the cells' payloads, and yield ``(payload, result, error)`` as cells finish, so the commands above them
neither know nor care where a cell ran.

* :func:`run_local` — ``workers`` processes on this machine (in this process when ``workers`` is 1).
* :func:`run_slurm` — the cells split into :attr:`SlurmOptions.tasks` shards, longest first onto the least loaded
  shard (:func:`shards`), submitted as one job array; each array task works its shard with :func:`run_local` on
  its node (:func:`run_shard`) and writes results to the shared filesystem exactly as the local path does.  A
  cell's claim (:mod:`windtunnel.run.locks`) keeps two tasks from training it, and a requeued or preempted task
  resumes each of its cells from the last checkpoint.  ``pip install windtunnel[slurm]`` brings submitit.

Options come from flags or a small TOML file (``[slurm]`` table: ``partition``, ``time`` in minutes, ``gpus``,
``cpus``, ``tasks``, ``workers``, ``parallel``, ``account``, ``qos``, ``mem_gb``, ``folder``, ``warn_s``): :func:`slurm_options`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, CancelledError, ProcessPoolExecutor, wait
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import InvalidValue, UserError
from ..run import stopping

Work = Callable[[dict[str, Any]], dict[str, Any]]
Outcome = tuple[dict[str, Any], "dict[str, Any] | None", "Exception | None"]
EXECUTORS = ("local", "slurm")


class CellFailed(UserError):
    """A cell that raised on a cluster node: its error in one line, with the task's log."""


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel ``pool``'s queued cells and end its running workers at once (they hold no state a checkpoint does not
    keep: a stopped cell resumes from its last checkpoint)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # the executor keeps no public handle
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        if proc.is_alive():
            proc.terminate()
    for proc in workers:
        proc.join(timeout=10)
        if proc.is_alive():  # a worker checkpointing on the terminate signal gets its ten seconds, no more
            proc.kill()


def _if_not_stopping(work: Work, payload: dict[str, Any]) -> dict[str, Any]:
    """``work(payload)`` unless a stop was requested before the cell's turn (:mod:`windtunnel.run.stopping`)."""
    if stopping.requested():
        raise stopping.NotStarted(f"not started: {stopping.WHY.get(stopping.requested() or '', 'stop requested')}")
    return work(payload)


def default_workers(gpus: int, stacked: bool, cores: int) -> int:
    """How many workers a command runs at once when not told: on GPUs, one graphed stack per GPU
    (:data:`~windtunnel.run.grid.STACKS_PER_GPU`) where cells train as stacks, else
    :data:`~windtunnel.run.grid.CELLS_PER_GPU` cells per GPU; without one, a worker per CPU core."""
    from ..run import grid

    if not gpus:
        return max(1, cores)
    return gpus * (grid.STACKS_PER_GPU if stacked else grid.CELLS_PER_GPU)


def run_local(work: Work, payloads: Sequence[dict[str, Any]], workers: int) -> Iterator[Outcome]:
    """Each payload through ``work`` on ``workers`` processes of this machine, yielded as it finishes; a cell that
    raises is yielded with its exception and the others go on.

    A stop request (SIGTERM, SLURM's time-limit warning SIGUSR2, Ctrl-C) reaches the cells being trained, which
    checkpoint where they are and stop (:class:`~windtunnel.run.stopping.TrainingStopped`); the cells not yet
    begun are yielded as :class:`~windtunnel.run.stopping.NotStarted`.  Nothing is lost: the next run of the same
    command resumes them all."""
    with stopping.catching():
        if workers == 1:
            from ..run.config import threads_kept

            for p in payloads:
                try:
                    with threads_kept():  # the cell's thread count is its own, not this process's
                        out = _if_not_stopping(work, p)
                except Exception as exc:  # noqa: BLE001 - handed to the caller, once the other cells are worked
                    yield p, None, exc
                else:
                    yield p, out, None
            return
        yield from _pool(work, payloads, workers)


def _pool(work: Work, payloads: Sequence[dict[str, Any]], workers: int) -> Iterator[Outcome]:
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=stopping.install)
    passed_on = False
    try:
        futures = {pool.submit(_if_not_stopping, work, p): p for p in payloads}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for fut in done:
                try:
                    yield futures[fut], fut.result(), None
                except CancelledError:
                    yield futures[fut], None, stopping.NotStarted(
                        f"not started: {stopping.WHY.get(stopping.requested() or '', 'stop requested')}")
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    yield futures[fut], None, exc
            if stopping.requested() and not passed_on:
                # the request came to this process (``kill`` names one pid): the queued cells are not begun and
                # the running ones are told, so they checkpoint where they are
                passed_on = True
                for fut in pending:
                    fut.cancel()
                _signal_workers(pool, signal.SIGTERM)  # not a second SIGINT: that one means 'at once'
    except BaseException:
        # a second Ctrl-C (or any exit of the caller's loop) stops every worker now: a pool left to shut down by
        # itself would wait for each running cell and then start the queued ones
        _stop(pool)
        raise
    pool.shutdown()


def _signal_workers(pool: ProcessPoolExecutor, signum: int) -> None:
    for proc in list((getattr(pool, "_processes", None) or {}).values()):  # the executor keeps no public handle
        if proc.is_alive() and proc.pid is not None:
            try:
                os.kill(proc.pid, signum)
            except ProcessLookupError:
                pass


def what_became(error: Exception) -> str:
    """The word a cell's line starts with: a stopped cell (checkpointed at its step) or one not begun waits for the
    next run; only the others failed."""
    if isinstance(error, stopping.TrainingStopped) or "TrainingStopped:" in str(error):
        return "stopped"
    if isinstance(error, stopping.NotStarted) or "NotStarted:" in str(error):
        return "left"
    return "failed"


def shards(payloads: Sequence[dict[str, Any]], n: int, cost: Callable[[dict[str, Any]], float]) -> list[list[dict[str, Any]]]:
    """The payloads split into at most ``n`` shards of near-equal cost: longest first, each onto the shard with
    the least cost so far (the longest-processing-time rule; its makespan is within 4/3 of the best)."""
    if n < 1:
        raise InvalidValue(f"invalid tasks: must be a positive integer, got {n!r}")
    loads = [0.0] * min(n, len(payloads))
    out: list[list[dict[str, Any]]] = [[] for _ in loads]
    for p in sorted(payloads, key=cost, reverse=True):
        i = loads.index(min(loads))
        out[i].append(p)
        loads[i] += cost(p)
    return out


def run_shard(work: Work, payloads: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    """An array task's body on its node: its cells through :func:`run_local`; never raises, so one failed cell does
    not lose the task's others — each is ``{"ok": result}`` or ``{"error": one line, "traceback": text}``."""
    out, asked = [], None
    for p, result, exc in run_local(work, payloads, max(1, min(workers, len(payloads)))):
        asked = asked or stopping.requested()
        if exc is None:
            out.append({"payload": p, "ok": result})
        else:
            out.append({"payload": p, "error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                        "traceback": "".join(traceback.format_exception(exc))})
    if asked == "SIGTERM":
        # SLURM ends a task with SIGTERM when it is cancelled, past its limit, preempted or requeued: its cells are
        # checkpointed, and no result is written, so that a requeued task runs again (and resumes them) instead
        # of the submitter taking this one's stopped cells for its answer
        print(f"windtunnel: {stopping.WHY['SIGTERM']}; {len(out)} cell(s) checkpointed or not begun, no result "
              "written", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(128 + signal.SIGTERM)
    return out


@dataclass(frozen=True)
class SlurmOptions:
    """How the job array is asked for: ``tasks`` array tasks (each a shard of cells), ``workers`` cells at once in
    each (default: its GPUs × 3, else its CPUs), ``parallel`` tasks running at once (SLURM's ``%`` limit), the
    partition, time limit (minutes), GPUs, CPUs and memory (GB) per task, account and QoS, the folder of
    submitit's logs (on the shared filesystem), and ``warn_s``: how many seconds before the time limit SLURM warns a
    task (``SIGUSR2``; SLURM may send it up to a minute early), whereupon its running cells checkpoint the step they
    reached and stop, and its cells not yet begun are left for the next run."""

    tasks: int = 1
    workers: int | None = None
    partition: str | None = None
    time: int = 240
    gpus: int = 0
    cpus: int = 2
    mem_gb: int | None = None
    parallel: int | None = None
    account: str | None = None
    qos: str | None = None
    folder: str = ""
    warn_s: int = 120

    def __post_init__(self) -> None:
        for name in ("tasks", "time", "cpus"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidValue(f"invalid slurm {name}: must be a positive integer, got {v!r}")
        for name in ("workers", "parallel", "mem_gb"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise InvalidValue(f"invalid slurm {name}: must be a positive integer, got {v!r}")
        if not isinstance(self.warn_s, int) or isinstance(self.warn_s, bool) or self.warn_s < 0:
            raise InvalidValue(f"invalid slurm warn_s: must be a non-negative integer, got {self.warn_s!r}")
        if not isinstance(self.gpus, int) or self.gpus < 0:
            raise InvalidValue(f"invalid slurm gpus: must be a non-negative integer, got {self.gpus!r}")

    def at_once(self, stacked: bool) -> int:
        """Workers one task runs at once: ``workers``, else one graphed stack per GPU where cells train as stacks
        (three cells per GPU where they do not), else one per CPU (:func:`default_workers`)."""
        return self.workers or default_workers(self.gpus, stacked, self.cpus)

    def parameters(self) -> dict[str, Any]:
        """submitit's ``update_parameters`` for these options."""
        extra: dict[str, Any] = {}
        if self.account:
            extra["account"] = self.account
        if self.qos:
            extra["qos"] = self.qos
        out: dict[str, Any] = {"timeout_min": self.time, "cpus_per_task": self.cpus, "tasks_per_node": 1,
                               "nodes": 1, "slurm_signal_delay_s": self.warn_s, "slurm_additional_parameters": extra}
        if self.partition:
            out["slurm_partition"] = self.partition
        if self.gpus:
            out["gpus_per_node"] = self.gpus
        if self.mem_gb:
            out["mem_gb"] = self.mem_gb
        if self.parallel:
            out["slurm_array_parallelism"] = self.parallel
        return out


def slurm_options(config: str | Path | None = None, **flags: Any) -> SlurmOptions:
    """:class:`SlurmOptions` from a TOML file's ``[slurm]`` table (when given) with ``flags`` (those not ``None``)
    on top."""
    values: dict[str, Any] = {}
    if config is not None:
        import tomllib

        path = Path(config)
        try:
            doc = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise InvalidValue(f"invalid slurm config: {path} does not exist") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidValue(f"invalid slurm config: {path} is not TOML ({exc})") from None
        table = doc.get("slurm", doc)
        known = {f.name for f in fields(SlurmOptions)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise InvalidValue(f"invalid slurm config: unknown key(s) {', '.join(unknown)} in {path}: "
                               f"choose from {', '.join(sorted(known))}")
        values.update(table)
    values.update({k: v for k, v in flags.items() if v is not None})
    return SlurmOptions(**values)


def _submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise UserError("the SLURM executor needs submitit: pip install 'windtunnel[slurm]'") from None
    return submitit


def submit(work: Work, payloads: Sequence[dict[str, Any]], opts: SlurmOptions,
           cost: Callable[[dict[str, Any]], float], folder: Path) -> tuple[list[Any], list[list[dict[str, Any]]]]:
    """Submit the payloads as one job array of shards; returns submitit's jobs and the shards, in the same order."""
    submitit = _submitit()
    parts = shards(payloads, opts.tasks, cost)
    executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster="slurm")  # an array task: ARRAY_TASK
    executor.update_parameters(name="windtunnel", **opts.parameters())
    at_once = opts.at_once(stacked=any("members" in p for p in payloads))
    jobs = executor.map_array(run_shard, [work] * len(parts), parts, [at_once] * len(parts))
    return jobs, parts


def _listed(job_ids: Sequence[str]) -> set[str] | None:
    """The job ids of ``job_ids`` that ``squeue`` still lists; ``None`` if it cannot be asked."""
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(sorted({j.split("_")[0] for j in job_ids}))],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return set() if "Invalid job id" in out.stderr else None
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


RESULT_GRACE_S = 60.0
"""How long a task no longer listed by ``squeue`` is given for its result file to appear (a shared filesystem may
show it late) before it counts as ended without one."""


def _ended_why(stderr: Path) -> str:
    """Why a task ended without a result, from the scheduler's line in its log (cancelled, time limit, node)."""
    try:
        lines = stderr.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    said = [line.split("***")[1].strip() for line in lines if line.count("***") >= 2]
    return said[-1] if said else (lines[-1].strip() if lines else "an empty log")


def _result_of(job: Any, waited_s: float = 0.0) -> list[dict[str, Any]] | Exception | None:
    """What an array task returned, an exception saying in one line why it has none (with its log), or ``None`` while
    its result file may still be on its way.  A task that ended without writing one (cancelled, killed past its time
    limit, its node lost) is never waited on: submitit would wait for it for ever where ``sacct`` cannot be asked."""
    if not Path(job.paths.result_pickle).is_file():
        if waited_s < RESULT_GRACE_S:
            return None
        return CellFailed(f"SLURM task {job.job_id} ended without a result ({_ended_why(Path(job.paths.stderr))[:200]}; "
                          f"log: {job.paths.stderr})")
    try:
        return job.result()
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line for the user
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return CellFailed(f"SLURM task {job.job_id} failed: {first[:300]} (log: {job.paths.stderr})")


def run_slurm(work: Work, payloads: Sequence[dict[str, Any]], opts: SlurmOptions,
              cost: Callable[[dict[str, Any]], float], folder: Path, poll_s: float = 5.0,
              say: Callable[[str], None] = print) -> Iterator[Outcome]:
    """The payloads as one job array (:func:`submit`), yielded cell by cell as each task ends.  A task that ended
    without a result (its time limit, a node failure, a cancel) yields each of its cells with one line naming its
    log; its cells keep their checkpoints and are resumed by the next ``reproduce``."""
    folder.mkdir(parents=True, exist_ok=True)
    jobs, parts = submit(work, payloads, opts, cost, folder)
    say(f"submitted job array {jobs[0].job_id.split('_')[0]}: {len(jobs)} task(s), "
        f"{', '.join(str(len(p)) for p in parts)} cell(s) each; logs in {folder}")
    pending = dict(zip((j.job_id for j in jobs), zip(jobs, parts)))
    gone: dict[str, float] = {}  # when each task was first seen no longer listed
    while pending:
        listed = _listed(list(pending))
        for job_id, (job, part) in list(pending.items()):
            result_file = Path(job.paths.result_pickle)
            if not (result_file.is_file() or (listed is not None and job_id not in listed)):
                continue
            got = _result_of(job, time.monotonic() - gone.setdefault(job_id, time.monotonic()))
            if got is None:
                continue
            del pending[job_id]
            if isinstance(got, Exception):
                for p in part:
                    yield p, None, got
                continue
            for row in got:
                if "ok" in row:
                    yield row["payload"], row["ok"], None
                else:
                    yield row["payload"], None, CellFailed(f"{row['error']} (SLURM task {job_id}; log: "
                                                           f"{job.paths.stderr})")
        if pending:
            time.sleep(poll_s)


def scheduler_available() -> bool:
    """Whether a SLURM controller answers here (``sinfo`` runs and lists a partition)."""
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def default_folder(results: Path) -> Path:
    """Where submitit keeps a submission's logs and pickles: under the results folder, on the shared filesystem."""
    return results / ".slurm" / time.strftime("%Y%m%d-%H%M%S")


def environment_ok() -> None:
    """Refuse the SLURM executor where it cannot work: no submitit, or no SLURM controller answering."""
    _submitit()
    if not scheduler_available():
        raise UserError("the SLURM executor needs a SLURM cluster: sinfo lists no partition here (run it on a "
                        "login node, or use --executor local)")


__all__ = ["EXECUTORS", "CellFailed", "SlurmOptions", "default_folder", "default_workers", "environment_ok", "run_local", "run_shard",
           "run_slurm", "scheduler_available", "shards", "slurm_options", "submit"]
