"""One sitting on a lent GPU, one command: what the machine is, then the measurements and the training the project
waits for, in order of value, each started only while it fits before a deadline, everything packed into ``OUT``
after every step so that a command killed at its limit still returns what it did.

    python benchmarks/gpu_sitting.py --out "$OUT" --deadline-min 8.5            # on the GPU machine
    python benchmarks/gpu_sitting.py unpack FOLDER [--replace]                   # here, on what came back

A sitting is a preflight and up to four phases, run in the order ``--phases`` gives (by default the one below):

* **preflight** (seconds) — Python, torch, CUDA and Triton versions; the device; the time to import torch and
  windtunnel in a fresh process; the bf16 matmul peak (``common.matmul_peak_flops``); which scan Mamba runs and why
  (the Triton scan's own self-check, ``windtunnel.models.scans.triton_self_check``, and the scan a small Mamba
  actually calls, alone and stacked under ``torch.func.vmap``: a failed self-check sends Mamba, silently, to the
  loop over positions); and whether ``torch.compile`` compiles a small function there (its error line if not).
* **stacked** (a) — every paper cell's stack timed on the code as it is now: ``paper_stacked.py --modes graph
  alone``, a few steps a cell, each cell's seeds stacked and recorded as a CUDA graph against one seed alone.
* **train** (b) — the papers'-size cells the claims wait for (``windtunnel reproduce scale``'s cells not committed,
  then the paper table's cells not committed, then committed cells with an artifact missing or stale, which
  replace the committed ones), a stack of cells at a time through ``windtunnel.orchestration.reproduce`` — trained,
  evaluated, analysed where a claim reads their geometry and exported as the committed cell folders — each stack
  started only where its estimate fits before the deadline (with fewer of its seeds where all do not).
* **profile** (c) — host against device per training step of a stack of 3, 12 and 24 members (``--profile-members``):
  the host's share (sampling the members' batches, loading them into the step's buffers) and the device's (the
  step itself), each timed with ``torch.cuda.synchronize`` around it, beside the step time of the same stack
  trained without those synchronisations.  On a CPU the same code runs a small model of the quick preset.
* **compiled** (d) — compiled stacks: ``paper_stacked.py --modes compiled graph``.

Each phase's cost is estimated before it starts, from what is known then: rows this sitting already measured,
committed artifacts measured on a GPU (``benchmarks/results/paper_stacked_gpu/rows.jsonl``, the committed cells'
``timings.json``), or a short probe of the stack on this device; the estimate and its source are written down, and
a phase or an item of one whose estimate no longer fits in what is left is skipped with that reason.  An item
nothing can be estimated for yet (the first compiled stack, the first profile) is started as a pilot, bounded by the
deadline; the items after it are estimated from it.  Every phase runs as a child process killed at the deadline.
The three GPU phases are skipped on a machine without CUDA, and say so (``--allow-cpu`` runs the two timing phases
there anyway, on the given ``--preset``).

``OUT`` receives three files, each rewritten whole (a temporary name, then a rename) after every step:
``sitting.json`` (the preflight, each phase's status, estimate, seconds, skip reasons and measurements),
``sitting.log`` (what the driver said, with the time), and ``sitting.tar.gz``: the same two files and each phase's
outputs laid out as in the repository — ``benchmarks/results/NAME/`` (``stacked/``, ``compiled/``: ``rows.jsonl`` and
``summary.json`` of ``paper_stacked.py``; ``profile/rows.jsonl``; ``logs/``: the tail of each child's output) and
``results/PRESET/cells/FOLDER/`` for each cell trained to its end.  ``unpack`` puts them in place and refuses,
in one line and without changing anything, to overwrite a committed cell or an existing benchmark folder unless
``--replace`` is given (then it says which it replaced).  Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import fnmatch
import io
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# the sitting measures this checkout's code, installed or not (the GPU machine has the tree, not the package)
sys.path[:0] = [p for p in (str(REPO / "src"), str(HERE)) if p not in sys.path]

PHASES = {
    "stacked": "a. every paper cell's stack timed on the code as it is now (paper_stacked.py --modes graph alone)",
    "train": "b. the papers'-size cells the claims wait for, trained where they fit and exported as committed cells",
    "profile": "c. host (batch sampling and loading) against device (the step) per step at 3, 12 and 24 members",
    "compiled": "d. compiled stacks timed (paper_stacked.py --modes compiled graph)",
}
"""The phases, in their order of value (the default order)."""
GPU_PHASES = ("stacked", "train", "compiled")
"""The phases that measure or train at the papers' size: skipped without CUDA."""
STATE, LOG, PACK = "sitting.json", "sitting.log", "sitting.tar.gz"
"""The three files a sitting writes into ``OUT``."""
RESERVE_S = 10.0
"""Seconds kept before the deadline for the last pack and the exit: every phase must end before them."""
CHILD_STOP_S = 20.0
"""How much sooner than the driver a timing child is told to end, so that it stops a cell itself (a step and a
checkpoint) and writes what it measured before the driver would kill it."""
MARGIN = 1.2
"""Estimates of training are multiplied by this: a recipe's steps timed on a few, evaluation and references beside."""
STARTUP_ALLOWANCE_S = 20.0
"""A child's start (imports, CUDA) where the preflight has not measured it: an allowance, not a measurement."""
PROBE_STEPS = 40
"""Steps a stack is timed for before it is trained, where committed timings alone leave it in doubt."""
PROBE_SLACK = 2.0
"""A stack whose estimate from committed timings is at most this many times the time left is probed on the device
first: the committed cells trained unstacked, on earlier code, and the stack is often faster."""
PREFLIGHT_LIMIT_S = 180.0
"""The longest the preflight may take (a compiler that hangs must not eat the sitting)."""
POLL_S = 2.0
"""How often a running phase's outputs are copied into the pack."""
LOG_TAIL_BYTES = 256 * 1024
"""The end of each child's output kept in the pack."""
PACK_LIMIT_BYTES = 12 * 2**20
"""The pack is kept under this (a file back from the GPU machine may be 16 MiB at most)."""
GPU_STACKED_ROWS = REPO / "benchmarks" / "results" / "paper_stacked_gpu" / "rows.jsonl"
"""The committed GPU timings of the paper cells' stacks (the prior for phase a's estimate)."""
CPU_PROFILE = {"params": 20_000, "batch_size": 8}
"""The small model of the quick preset the profile phase runs on a CPU (the paper cell would take minutes a step)."""
NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")


# --- small tools ---------------------------------------------------------------------------------------------
class Refused(Exception):
    """Bad input, said in one line (exit status 2), or a refusal to overwrite (exit status 1)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2 (no usage block, no traceback)."""

    def error(self, message: str) -> NoReturn:
        raise Refused(message)


class SittingStopped(BaseException):
    """The driver was asked to end (SIGTERM, SIGINT) while a phase ran: the phase is recorded as stopped."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def first_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary name in the same folder and a rename: a reader (or a copy
    taken while the process is killed) sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or ``None`` where it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (none where it is missing; a line cut off by a kill is left out)."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, …), read from ``/proc``; none where it is not there."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def end_process_tree(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """Stop ``proc`` and everything it started: SIGTERM (a training loop checkpoints and stops at the end of its
    step), then SIGKILL for what is left after ``grace_s``."""
    tree = [proc.pid, *descendants(proc.pid)]
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    for pid in [proc.pid, *descendants(proc.pid), *tree]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


# --- estimates -----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Estimate:
    """Seconds something is expected to take (``None``: nothing to estimate it from yet) and where that came from."""

    seconds: float | None
    source: str

    def fits(self, left_s: float) -> bool:
        return self.seconds is not None and self.seconds <= left_s

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": None if self.seconds is None else round(self.seconds, 1), "from": self.source}


# --- the sitting: its state, its log, its pack -------------------------------------------------------------------
class Sitting:
    """One sitting's clock, state and outputs: ``OUT`` gets :data:`STATE`, :data:`LOG` and :data:`PACK` at every
    :meth:`pack`; ``work`` holds the children's folders and the pack's tree (``work/pack``, laid out as the
    repository)."""

    def __init__(self, out: Path, work: Path, name: str, deadline_min: float, phases: Sequence[str],
                 command: str) -> None:
        self.t0 = time.monotonic()
        self.deadline = self.t0 + 60 * deadline_min
        self.out, self.work, self.name = out, work, name
        self.pack_root = work / "pack"
        self.bench = self.pack_root / "benchmarks" / "results" / name
        self.log_path = work / LOG
        for folder in (out, work, self.bench):
            folder.mkdir(parents=True, exist_ok=True)
        self.state: dict[str, Any] = {
            "name": name, "command": command, "started_utc": now_utc(), "deadline_min": deadline_min,
            "status": "running", "host": platform.node(), "code": git_state(),
            "preflight": {"status": "pending"},
            "phases": {p: {"what": PHASES[p], "status": "pending"} for p in phases},
        }

    # the clock
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds left for work: to the deadline, less :data:`RESERVE_S` for the last pack."""
        return self.deadline - RESERVE_S - time.monotonic()

    def log(self, line: str) -> None:
        text = f"[{self.elapsed():7.1f} s] {line}"
        print(text, flush=True)
        with open(self.log_path, "a") as f:
            f.write(text + "\n")

    # the phases' records
    def phase(self, name: str) -> dict[str, Any]:
        return self.state["phases"][name]

    def skip(self, name: str, reason: str) -> None:
        self.phase(name).update(status="skipped", reason=reason, left_s=round(self.left(), 1))
        self.log(f"{name}: skipped — {reason}")
        self.pack()

    def begin(self, name: str, estimate: Estimate, needs_estimate: bool = False, slack: float = 1.0) -> bool:
        """Start phase ``name`` if its ``estimate`` (of its first item: the least it can do) is at most ``slack`` times
        what is left, else record it skipped with the reason; an estimate of ``None`` starts it as a pilot unless
        ``needs_estimate``.  Returns whether it started."""
        left = self.left()
        record = self.phase(name)
        record.update(estimate=estimate.to_dict(), left_s_at_start=round(left, 1))
        if left <= 0:
            self.skip(name, "the deadline has passed")
            return False
        if estimate.seconds is None and needs_estimate:
            self.skip(name, f"nothing to estimate its cost from ({estimate.source})")
            return False
        if estimate.seconds is not None and estimate.seconds > slack * left:
            times = "" if slack == 1 else f"{slack:g} times "
            self.skip(name, f"its estimate, {estimate.seconds:.0f} s ({estimate.source}), exceeds {times}the "
                            f"{left:.0f} s left")
            return False
        record.update(status="running", started_at_s=round(self.elapsed(), 1))
        said = ("no estimate yet, a pilot bounded by the deadline" if estimate.seconds is None
                else f"estimated {estimate.seconds:.0f} s")
        self.log(f"{name}: started ({said}; {left:.0f} s left)")
        self.pack()
        return True

    def finish(self, name: str, status: str, reason: str | None = None, **found: Any) -> None:
        record = self.phase(name)
        record.update(status=status, seconds=round(self.elapsed() - record.get("started_at_s", self.elapsed()), 1),
                      **({"reason": reason} if reason else {}), **found)
        self.log(f"{name}: {status}" + (f" — {reason}" if reason else ""))
        self.pack()

    # children
    def run_child(self, argv: Sequence[str], log_name: str, limit_s: float,
                  watch: Callable[[], bool] | None = None) -> tuple[int | None, bool]:
        """Run ``argv`` (a Python child of this script's interpreter) for at most ``limit_s`` seconds, its output into
        ``work/logs/LOG_NAME.log``; every :data:`POLL_S` ``watch()`` copies its outputs into the pack tree and the
        pack is rewritten when it says something changed.  Returns (exit status, whether it was stopped at the
        limit)."""
        logs = self.work / "logs"
        logs.mkdir(exist_ok=True)
        paths = [str(REPO / "src"), str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(paths)}
        end = time.monotonic() + max(limit_s, 0.0)
        with open(logs / f"{log_name}.log", "ab") as out:
            # in the driver's process group (no session of its own): whatever ends the command's group ends it too
            child = subprocess.Popen([sys.executable, *map(str, argv)], stdout=out, stderr=subprocess.STDOUT,
                                     env=env, cwd=str(REPO))
            try:
                while child.poll() is None and time.monotonic() < end:
                    time.sleep(min(POLL_S, max(end - time.monotonic(), 0.01)))
                    if watch is not None and watch():
                        self.pack()
                stopped = child.poll() is None
                if stopped:
                    self.log(f"{log_name}: still running at its limit ({limit_s:.0f} s): stopped")
                    end_process_tree(child)
            except BaseException:
                end_process_tree(child)  # the driver is stopping: so is its child, with all it started
                raise
            code = child.returncode
        if watch is not None:
            watch()
        self.keep_log(log_name)
        return code, stopped

    def keep_log(self, log_name: str) -> None:
        """The tail of a child's output, into the pack."""
        src = self.work / "logs" / f"{log_name}.log"
        if src.is_file():
            dst = self.bench / "logs" / f"{log_name}.log"
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(src, "rb") as f:
                f.seek(max(0, src.stat().st_size - LOG_TAIL_BYTES))
                dst.write_bytes(f.read())

    # the pack
    def pack(self, logs: bool = True) -> None:
        """Rewrite ``OUT``'s three files from the state, the log and the pack tree (each atomically); with ``logs``
        false, the children's logs are left out of the tarball."""
        self.state.update(elapsed_s=round(self.elapsed(), 1), left_s=round(self.left(), 1), updated_utc=now_utc())
        state = json.dumps(self.state, indent=1, default=str) + "\n"
        log = self.log_path.read_bytes() if self.log_path.is_file() else b""
        write_atomic(self.out / STATE, state)
        write_atomic(self.out / LOG, log)
        write_atomic(self.bench / STATE, state)
        write_atomic(self.bench / LOG, log)
        files = sorted(p for p in self.pack_root.rglob("*") if p.is_file() and not p.name.endswith(".partial")
                       and (logs or p.parent != self.bench / "logs"))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for path in files:
                tar.add(path, arcname=path.relative_to(self.pack_root).as_posix(), recursive=False)
        data = buffer.getvalue()
        if len(data) > PACK_LIMIT_BYTES and logs:  # the logs go first: sitting.log says what they said
            self.state["pack_warning"] = f"{PACK} came to {len(data)} bytes: the children's logs are left out"
            return self.pack(logs=False)
        write_atomic(self.out / PACK, data)

    def sync(self, src: Path, dst: Path, names: Sequence[str]) -> bool:
        """Copy the files ``names`` of ``src`` into ``dst`` (in the pack tree) where they changed; whether any did."""
        changed = False
        for name in names:
            s, d = src / name, dst / name
            if s.is_file() and (not d.is_file() or s.stat().st_size != d.stat().st_size
                                or s.stat().st_mtime > d.stat().st_mtime):
                d.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(d, s.read_bytes())
                changed = True
        return changed


def git_state() -> dict[str, Any] | None:
    """The commit this tree is at and how many files differ from it (``None`` where it is no git checkout)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "changed_files": len(dirty.stdout.splitlines())}


# --- preflight -----------------------------------------------------------------------------------------------
def preflight_child(path: Path, compile_check: bool) -> None:
    """What this machine is and what the code will do on it, written to ``path`` after each check (so that a check
    that hangs leaves the others): versions, the device, the import time, the bf16 matmul peak, Mamba's scan, and a
    ``torch.compile`` of a small function."""
    t0 = time.perf_counter()
    import torch

    import windtunnel
    from common import matmul_peak_flops

    found: dict[str, Any] = {"import_s": time.perf_counter() - t0}

    def save() -> None:
        write_atomic(path, json.dumps(found, indent=1, default=str))

    cuda = torch.cuda.is_available()
    device = "cuda:0" if cuda else "cpu"
    found["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                         "cuda": torch.version.cuda, "windtunnel": getattr(windtunnel, "__version__", None),
                         "triton": triton_version()}
    found["device"] = {"cuda": cuda, "name": torch.cuda.get_device_name(0) if cuda else "cpu",
                       "count": torch.cuda.device_count() if cuda else 0, "cpu_cores": os.cpu_count(),
                       "torch_threads": torch.get_num_threads()}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        found["device"].update(capability=f"{props.major}.{props.minor}", memory_gib=props.total_memory / 2**30,
                               multiprocessors=props.multi_processor_count)
    save()
    t = time.perf_counter()
    try:  # a CPU's bf16 product is slow and only a reference: a smaller one will do there
        found["matmul_peak_tflops_bf16"] = matmul_peak_flops(n=8192 if cuda else 256, dtype=torch.bfloat16,
                                                             device=device) / 1e12
    except Exception as exc:  # noqa: BLE001 - a check's failure is its result
        found["matmul_peak_error"] = first_line(exc)
    found["matmul_peak_s"] = time.perf_counter() - t
    save()
    found["mamba_scan"] = mamba_scan(device)
    save()
    if compile_check:
        found["compile"] = compile_check_on(device)
    else:
        found["compile"] = {"checked": False, "why": "--no-compile-check"}
    save()


def triton_version() -> str | None:
    try:
        import triton
    except Exception:  # noqa: BLE001 - not installed, or broken: either way no Triton scan
        return None
    return getattr(triton, "__version__", "unknown")


def mamba_scan(device: str) -> dict[str, Any]:
    """Which selective scan Mamba (``scan_method="auto"``) runs on ``device``, and why: Triton's import, the Triton
    scan's self-check verdict, and the scans a small Mamba calls in a training step alone and stacked (two members
    under ``torch.func.vmap``, as ``train_stacked`` runs them, where the scan's first check once failed)."""
    from windtunnel.models import scans

    found: dict[str, Any] = {"triton": triton_version()}
    if not device.startswith("cuda"):
        built = any(scans._kernel_built(n) for n in ("windtunnel_selective_scan_omp", "windtunnel_selective_scan"))
        found.update(scan="fused C++" if built else "fused C++ once built, else the reference",
                     why="no CUDA device: the Triton scan is for GPUs; on a CPU Mamba runs the fused C++ scan where "
                         "it builds (" + ("built already" if built else "not built yet: the first Mamba run builds "
                                          "it") + "), else the step-by-step reference")
        return found
    t = time.perf_counter()
    try:
        verdict = scans.triton_self_check(device)
        found["self_check"] = "passed" if verdict is None else f"failed: {verdict}"
    except Exception as exc:  # noqa: BLE001 - Triton missing, or its compiler failing: the check's answer
        found["self_check"] = f"failed: {first_line(exc)}"
    found["self_check_s"] = time.perf_counter() - t
    found["auto_takes_triton"] = scans.triton_available(device)
    for how in ("alone", "stacked"):
        try:
            scans.scans_run(reset=True)  # the library's own record of the scans run, as each run's timings keep it
            ran = run_small_mamba(device, stacked=how == "stacked")
            found[how] = scans.scans_run(reset=True) or ["none"]
            if how == "stacked":
                found["stacked_forward"] = ran
        except Exception as exc:  # noqa: BLE001 - what broke is the answer
            found[how] = [f"failed: {first_line(exc)}"]
    ran = set(found["alone"]) | set(found["stacked"])
    found["scan"] = "+".join(sorted(ran))
    if ran == {"Triton kernels"}:
        found["why"] = "the Triton scan passed its self-check on this device, and Mamba ran it alone and stacked"
    elif found["self_check"] != "passed":
        found["why"] = (f"the Triton scan's self-check {found['self_check']}: Mamba falls back to the loop over "
                        "positions (a kernel launch per position), silently")
    else:
        found["why"] = "the self-check passed but Mamba did not run the Triton scan everywhere: see alone and stacked"
    return found


def run_small_mamba(device: str, stacked: bool) -> str:
    """A forward and backward pass of a small Mamba on a batch of HMM episodes under bf16 autocast, as a training
    step runs it; ``stacked``: two members' weights stacked and the forward vmapped, as ``train_stacked`` does — or,
    where the scan has no vmap rule, member by member, as ``train_stacked`` then falls back to.  Returns how the
    forward ran."""
    import torch
    from torch.func import functional_call, stack_module_state, vmap

    from windtunnel import models, tasks

    task = tasks.make("hmm", K=20)
    batch = task.sample(4, seed=0).to(device)
    built = [models.make("mamba", task, d_model=32, n_layers=1, d_state=8).to(device) for _ in range(2 if stacked else 1)]
    how = "alone"
    cuda = device.startswith("cuda")
    with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
        if not stacked:
            logits = built[0](**batch.inputs)
        else:
            params, buffers = stack_module_state(built)
            base = built[0]
            inputs = {k: torch.stack([v, v]) for k, v in batch.inputs.items()}
            try:
                logits = vmap(lambda p, b, x: functional_call(base, (p, b), (), x), randomness="different")(
                    params, buffers, inputs)
                how = "vmapped"
            except (RuntimeError, NotImplementedError, ValueError) as exc:
                logits = torch.stack([m(**batch.inputs) for m in built])
                how = f"member by member (no vmap: {first_line(exc)[:120]})"
    logits.float().sum().backward()
    if cuda:
        torch.cuda.synchronize()
    return how


def compile_check_on(device: str) -> dict[str, Any]:
    """Whether ``torch.compile`` (inductor, ``fullgraph``) compiles a small function on ``device`` and reproduces
    it eagerly: seconds, and the error line where it does not."""
    import torch

    t = time.perf_counter()
    try:
        x = torch.randn(64, 64, device=device)
        w = torch.randn(64, 64, device=device)

        def small(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(a @ b).sum(-1)

        got = torch.compile(small, fullgraph=True)(x, w)
        ok = bool(torch.allclose(got, small(x, w), rtol=1e-3, atol=1e-3))
        return {"checked": True, "works": ok, "seconds": time.perf_counter() - t,
                **({} if ok else {"error": "the compiled function's values differ from the eager one's"})}
    except Exception as exc:  # noqa: BLE001 - the compiler's refusal is the answer
        return {"checked": True, "works": False, "seconds": time.perf_counter() - t, "error": first_line(exc)}


def do_preflight(s: Sitting, compile_check: bool) -> dict[str, Any]:
    """The preflight in a child process, bounded by :data:`PREFLIGHT_LIMIT_S` and the deadline; its record."""
    path = s.work / "preflight.json"
    limit = min(PREFLIGHT_LIMIT_S, s.left())
    if limit <= 0:
        s.state["preflight"] = {"status": "skipped", "reason": "the deadline has passed"}
        s.pack()
        return s.state["preflight"]
    s.state["preflight"] = {"status": "running", "limit_s": round(limit, 1)}
    s.log("preflight: started")
    s.pack()
    t = time.monotonic()
    code, stopped = s.run_child([__file__, "_preflight", "--json", path, *([] if compile_check else ["--no-compile"])],
                                "preflight", limit)
    found = read_json(path) or {}
    status = ("done" if code == 0 else f"stopped at its limit of {limit:.0f} s: the checks after the last one "
              "written are missing" if stopped else f"failed (exit status {code}; logs/preflight.log)")
    s.state["preflight"] = {"status": status, "seconds": round(time.monotonic() - t, 1), **found}
    scan = found.get("mamba_scan", {})
    s.log(f"preflight: {status}; device {found.get('device', {}).get('name')}, Mamba's scan: {scan.get('scan')} "
          f"({scan.get('why')})")
    s.pack()
    return s.state["preflight"]


# --- phase a and d: the stacks timed -----------------------------------------------------------------------------
def stacked_prior(columns: Sequence[str], archs: Sequence[str], modes: Sequence[str], start_s: float) -> Estimate:
    """Phase a's (or d's) estimate from the committed GPU rows: the first cell's wall seconds in ``modes`` (the least
    the phase does) — the sum over all cells is in the source — plus a child's start; ``None`` where a mode was never
    timed there (the compiled stack: a pilot)."""
    rows = {(r["column"], r["arch"]): r for r in read_rows(GPU_STACKED_ROWS)}
    walls = []
    for column in columns:
        for arch in archs:
            row = rows.get((column, arch), {})
            if not all("wall_s" in row.get(m, {}) for m in modes):
                return Estimate(None, f"{GPU_STACKED_ROWS.relative_to(REPO)} has no {'/'.join(modes)} timing of "
                                      f"{column}/{arch}")
            walls.append(sum(row[m]["wall_s"] for m in modes))
    if not walls:
        return Estimate(None, "no cell asked for")
    return Estimate(start_s + walls[0],
                    f"{GPU_STACKED_ROWS.relative_to(REPO)}: the first cell's {'+'.join(modes)} wall seconds on an "
                    f"earlier GPU sitting, with a child's start; all {len(walls)} cells: {start_s + sum(walls):.0f} s")


def phase_stacked(s: Sitting, args: argparse.Namespace, gpu: bool, start_s: float, name: str = "stacked",
                  modes: Sequence[str] = ("graph", "alone")) -> None:
    """Phase a (``stacked``) or d (``compiled``): ``paper_stacked.py`` in ``modes`` into ``work/NAME``, told to end
    :data:`CHILD_STOP_S` before the driver would stop it; its rows and summary copied into the pack as they come."""
    if not gpu and not args.allow_cpu:
        return s.skip(name, "no CUDA device here: the paper cells' stacks are timed on a GPU (--allow-cpu runs them "
                            "anyway)")
    estimate = stacked_prior(args.columns, args.archs, modes, start_s) if gpu else Estimate(
        None, "a CPU: no committed timing applies")
    if not s.begin(name, estimate):
        return
    folder = s.work / name
    own = s.left() - CHILD_STOP_S if s.left() > 2 * CHILD_STOP_S else 0.7 * s.left()
    argv = [HERE / "paper_stacked.py", "--preset", args.preset, "--steps", args.steps, "--seeds", args.seeds,
            "--columns", *args.columns, "--archs", *args.archs, "--modes", *modes,
            "--device", "cuda" if gpu else "cpu", "--out", folder, "--deadline-min", f"{own / 60:.4f}"]
    names = ("rows.jsonl", "summary.json")
    code, stopped = s.run_child(argv, name, s.left(), lambda: s.sync(folder, s.bench / name, names))
    rows = read_rows(folder / "rows.jsonl")
    summary = read_json(folder / "summary.json") or {}
    found = {"rows": len(rows), "not_measured": summary.get("not_measured", []),
             "files": [f"benchmarks/results/{s.name}/{name}/{n}" for n in names if (folder / n).is_file()],
             "summary": {k: summary.get(k) for k in ("table_h_stacked", "table_h_alone", "stacked_h_by_arch",
                                                       "graphed_cells", "compiled_cells", "member_speedup_min",
                                                       "member_speedup_max", "machine")}}
    if stopped:
        s.finish(name, "stopped", "still running at the deadline: stopped (the cell it was on is not written)", **found)
    elif code != 0:
        s.finish(name, "failed", f"paper_stacked.py exited with status {code} (logs/{name}.log)", **found)
    elif summary.get("stopped"):
        s.finish(name, "partial", summary["stopped"], **found)
    else:
        s.finish(name, "done", **found)


# --- phase b: the cells the claims wait for --------------------------------------------------------------------------
@dataclasses.dataclass
class Candidate:
    """A cell to train: its reproduce job, its priority (0: the claims read it and none is committed; 1: the paper
    table's, not committed; 2: committed, with an artifact missing or stale: trained again, it replaces the
    committed cell) and why."""

    job: Any
    priority: int
    why: str


def training_candidates(results: Path, preset: str, only: Sequence[str] = ()) -> list[Candidate]:
    """The cells ``results`` lacks that a GPU sitting trains, most wanted first: ``windtunnel reproduce scale``'s
    cells not committed, then (at the paper preset) the paper table's cells not committed, then committed cells with
    an artifact missing or stale; ``only``: shell patterns on the cell folders."""
    from windtunnel.orchestration import reproduce
    from windtunnel.run import grid

    jobs: dict[str, tuple[Any, str]] = {}
    for job in reproduce.plan("scale", preset):
        jobs.setdefault(job.cell.folder, (job, "scale"))
    if preset == "paper":  # the table's cells, as `reproduce all` plans them (analysed where a claim reads them)
        planned = {j.cell.folder: j for j in reproduce.plan("all", preset)}
        for column in grid.TABLE_COLUMNS:
            for arch in grid.TABLE_ARCHS:
                for seed in grid.SEEDS:
                    cell = grid.Cell(preset, column, arch, seed)
                    jobs.setdefault(cell.folder, (planned.get(cell.folder) or reproduce.Job(cell, analyze=False), "table"))
    found = []
    for folder, (job, source) in jobs.items():
        if only and not any(fnmatch.fnmatchcase(folder, p) for p in only):
            continue
        lacking = reproduce.missing(job, results)
        if not lacking:
            continue
        if (reproduce.cell_dir(results, job.cell) / "cell.json").is_file():
            found.append(Candidate(job, 2, f"committed with {', '.join(lacking)} missing or stale: trained again, "
                                           "it replaces the committed cell"))
        elif source == "scale":
            found.append(Candidate(job, 0, "the claims read it at the papers' size and it is not committed"))
        else:
            found.append(Candidate(job, 1, "the paper table's cell, not committed"))
    return sorted(found, key=lambda c: c.priority)  # stable: the plan's order within a priority


def stack_groups(candidates: Sequence[Candidate]) -> list[list[Candidate]]:
    """The candidates as the stacks ``reproduce`` would train (one recipe but for the seed and data stream:
    ``windtunnel.training.stacked.stack_shape``), each group of one priority, in the candidates' order."""
    from windtunnel.training.loop import TrainConfig
    from windtunnel.training.stacked import stack_shape

    groups: dict[tuple[int, str], list[Candidate]] = {}
    for c in candidates:
        shape = stack_shape(TrainConfig.from_dict(c.job.cell.config()).to_dict())
        groups.setdefault((c.priority, json.dumps(shape, sort_keys=True, default=str)), []).append(c)
    return list(groups.values())


def committed_timings(results: Path, preset: str, cuda: bool) -> list[dict[str, Any]]:
    """The committed cells of ``preset`` trained on a GPU (``cuda``) or not, each as its recipe and its seconds."""
    found = []
    for folder in sorted((results / preset / "cells").glob("*")):
        config, timings = read_json(folder / "config.json"), read_json(folder / "timings.json")
        if not isinstance(config, dict) or not isinstance(timings, dict) or "train" not in config:
            continue
        train = config["train"]
        if str(train.get("device") or "").startswith("cuda") != cuda:
            continue
        found.append({"folder": folder.name, "arch": train.get("arch"),
                      "task": (config.get("task") or {}).get("name"), "steps": train.get("steps"),
                      "batch_size": train.get("batch_size"), "params": train.get("params"),
                      "train_s": timings.get("train_s"), "eval_s": timings.get("eval_s") or 0.0,
                      "analyze_s": timings.get("analyze_s")})
    return found


def group_estimate(group: Sequence[Candidate], members: int, results: Path, cuda: bool, start_s: float,
                   stacked_rows: Sequence[dict[str, Any]] = (), probe: dict[str, Any] | None = None) -> Estimate:
    """Seconds to train the first ``members`` of ``group`` as one stack and evaluate (and analyse) each: training by
    a probe of this stack on this device (``probe``: ms a step and the set-up's seconds), else this sitting's phase a
    row of the cell (``stacked_rows``), else the committed cells of the same recipe trained on the same kind of
    device, else (a GPU) the cell's committed stack row of earlier code; each member's evaluation and analysis after
    it from the committed cells of the same recipe (else of the preset); the sum times :data:`MARGIN`, plus a child's
    start.  ``None`` where nothing committed is like it."""
    from windtunnel.training.loop import TrainConfig

    lead = group[0].job
    cfg = TrainConfig.from_dict(lead.cell.config())
    task = lead.cell.config()["task"]
    kind = "GPU" if cuda else "CPU"
    known = committed_timings(results, lead.cell.preset, cuda)
    alike = [t for t in known if (t["arch"], t["steps"], t["batch_size"]) == (cfg.arch, cfg.steps, cfg.batch_size)]
    same_task = [t for t in alike if t["task"] == task] or alike
    row = graphed_row(stacked_rows, lead.cell.column, cfg.arch)
    if probe is not None:
        train_s = probe["wall_s"] + cfg.steps * probe["ms_per_step"] / 1000
        said = (f"this stack probed here: {probe['ms_per_step']:.1f} ms a step over {cfg.steps} steps, "
                f"{probe['wall_s']:.0f} s to set up")
    elif row is not None:
        train_s = cfg.steps * row["graph"]["ms_per_step"] / 1000
        said = f"this sitting's stacked row: {row['graph']['ms_per_step']:.1f} ms a step over {cfg.steps} steps"
    elif same_task and any(t["train_s"] for t in same_task):
        pick = max((t for t in same_task if t["train_s"]), key=lambda t: t["train_s"])
        train_s = pick["train_s"]
        said = f"the longest training of a committed {kind} cell of this recipe ({pick['folder']}, {train_s:.0f} s)"
    elif cuda and lead.cell.preset == "paper" and (old := graphed_row(read_rows(GPU_STACKED_ROWS), lead.cell.column,
                                                                        cfg.arch)) is not None:
        train_s = cfg.steps * old["graph"]["ms_per_step"] / 1000
        said = (f"{GPU_STACKED_ROWS.relative_to(REPO)}: {old['graph']['ms_per_step']:.1f} ms a step (an earlier "
                f"code's stack) over {cfg.steps} steps")
    else:
        return Estimate(None, f"no {kind} timing of a cell of this recipe is committed")
    after_pool = same_task or known
    if not after_pool:
        return Estimate(None, f"no {kind} cell of the {lead.cell.preset} preset is committed to time its evaluation")
    analysed = [t["analyze_s"] for t in after_pool if t["analyze_s"]] or [t["analyze_s"] for t in known if t["analyze_s"]]
    after = 0.0
    for c in group[:members]:
        after += max(t["eval_s"] for t in after_pool)
        if c.job.analyze:
            if not analysed:
                return Estimate(None, f"no {kind} analysis is committed to time this cell's")
            after += max(analysed)
    seconds = MARGIN * (train_s + after) + start_s
    analysis = " and analysis" if any(c.job.analyze for c in group[:members]) else ""
    return Estimate(seconds, f"training: {said}; evaluation{analysis} of {members}: "
                             f"{after:.0f} s from the committed {kind} cells; ×{MARGIN} and {start_s:.0f} s to start")


def graphed_row(rows: Sequence[dict[str, Any]], column: str, arch: str) -> dict[str, Any] | None:
    """The ``paper_stacked.py`` row of the cell whose graphed stack has a step time, if any."""
    return next((r for r in rows if (r.get("column"), r.get("arch")) == (column, arch)
                 and "ms_per_step" in r.get("graph", {})), None)


def most_that_fit(group: Sequence[Candidate], left_s: float, estimate: Callable[[int], Estimate]) -> tuple[int, Estimate]:
    """The most of ``group``'s members (in order) whose stack's estimate fits in ``left_s``, with that estimate (or 0
    and the estimate for one member)."""
    for k in range(len(group), 0, -1):
        e = estimate(k)
        if e.fits(left_s):
            return k, e
    return 0, estimate(1)


def collect_cells(results: Path, pack_root: Path, jobs: Sequence[Any]) -> dict[str, Any]:
    """Copy each of ``jobs``' cell folders that ``reproduce`` exported complete under ``results`` into the pack tree
    (``results/PRESET/cells/FOLDER/``); returns, per folder, ``"exported"`` or what it lacks."""
    from windtunnel.orchestration import reproduce

    said = {}
    for job in jobs:
        src = reproduce.cell_dir(results, job.cell)
        lacking = reproduce.missing(job, results) if src.is_dir() else ["everything"]
        if lacking:
            said[job.cell.folder] = f"not exported: lacks {', '.join(lacking)}"
            continue
        dst = pack_root / "results" / job.cell.preset / "cells" / job.cell.folder
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        said[job.cell.folder] = "exported"
    return said


def phase_train(s: Sitting, args: argparse.Namespace, gpu: bool, start_s: float) -> None:
    """Phase b: the candidates' stacks in order of priority, each trained (``_train``: ``reproduce`` in
    ``work/results``) with as many of its seeds as fit before the deadline, probed first on the device where the
    committed timings leave it in doubt; the complete cells copied into the pack."""
    if not gpu:
        return s.skip("train", "no CUDA device here: a papers'-size cell trains for hours on a CPU")
    results = REPO / "results"
    groups = stack_groups(training_candidates(results, args.preset, args.train_only))
    if not groups:
        s.phase("train")["plan"] = []
        return s.skip("train", "no cell the claims wait for is missing at this preset")
    rows = read_rows(s.work / "stacked" / "rows.jsonl")
    estimates = [group_estimate(g, 1, results, gpu, start_s, rows) for g in groups]
    s.phase("train")["plan"] = [{"cells": [c.job.cell.folder for c in g], "priority": g[0].priority, "why": g[0].why,
                                 "estimate_one": e.to_dict()} for g, e in zip(groups, estimates)]
    known = [e for e in estimates if e.seconds is not None]
    cheapest = min(known, key=lambda e: e.seconds) if known else Estimate(None, "no cell's cost can be estimated")
    # the least it does: one cell of the cheapest stack, which a probe on the device may find faster than committed
    if not s.begin("train", Estimate(cheapest.seconds, f"one cell of the cheapest stack: {cheapest.source}"),
                   needs_estimate=True, slack=PROBE_SLACK):
        return
    items, work_results = [], s.work / "results"
    for group, committed in zip(groups, estimates):
        folders = [c.job.cell.folder for c in group]
        item: dict[str, Any] = {"cells": folders, "why": group[0].why, "committed_estimate": committed.to_dict()}
        items.append(item)
        s.phase("train")["items"] = items
        left = s.left()
        k, est = most_that_fit(group, left, lambda m: group_estimate(group, m, results, gpu, start_s, rows))
        if k == 0 and committed.seconds is not None and committed.seconds <= PROBE_SLACK * left:
            probe = probe_stack(s, group, args.preset)
            item["probe"] = probe
            if "ms_per_step" in probe:
                k, est = most_that_fit(group, s.left(),
                                       lambda m: group_estimate(group, m, results, gpu, start_s, rows, probe))
        item["estimate"] = est.to_dict()
        if k == 0:
            item["status"] = "skipped"
            item["reason"] = (f"not started: {est.seconds:.0f} s for one cell ({est.source}) exceeds the "
                              f"{s.left():.0f} s left" if est.seconds is not None else f"not started: {est.source}")
            s.log(f"train {folders[0]}…: {item['reason']}")
            continue
        chosen = folders[:k]
        item.update(trained=chosen, status="running", started_at_s=round(s.elapsed(), 1))
        s.log(f"train: {', '.join(chosen)} (estimated {est.seconds:.0f} s, {s.left():.0f} s left)")
        s.pack()
        t = time.monotonic()
        code, stopped = s.run_child([__file__, "_train", "--results", work_results, "--preset", args.preset,
                                     "--cells", *chosen], f"train-{chosen[0]}", s.left())
        exported = collect_cells(work_results, s.pack_root, [c.job for c in group[:k]])
        item.update(seconds=round(time.monotonic() - t, 1), exit_status=code, cells_out=exported,
                    status="stopped at the deadline" if stopped else "done" if code == 0 else "failed")
        s.log(f"train {', '.join(chosen)}: {item['status']} in {item['seconds']:.0f} s; "
              + "; ".join(f"{f} {v}" for f, v in exported.items()))
        s.pack()
    trained = [i for i in items if i.get("trained")]
    exported = sorted(f for i in items for f, v in i.get("cells_out", {}).items() if v == "exported")
    status = "skipped" if not trained else "done" if len(trained) == len(items) else "partial"
    reason = None if status == "done" else ("no stack fitted in the time left" if not trained
                                            else f"{len(items) - len(trained)} of {len(items)} stacks did not fit")
    s.finish("train", status, reason, exported=exported)


def probe_stack(s: Sitting, group: Sequence[Candidate], preset: str) -> dict[str, Any]:
    """The stack of ``group`` timed for :data:`PROBE_STEPS` steps on this device (``_probe``)."""
    path = s.work / f"probe-{group[0].job.cell.folder}.json"
    code, stopped = s.run_child([__file__, "_probe", "--json", path, "--preset", preset, "--steps", PROBE_STEPS,
                                 "--cells", *[c.job.cell.folder for c in group]],
                                f"probe-{group[0].job.cell.folder}", min(s.left(), 120.0))
    return read_json(path) or {"error": f"the probe {'ran past its limit' if stopped else f'exited {code}'}"}


def jobs_by_folder(preset: str) -> dict[str, Any]:
    """Every job a sitting may train at ``preset``, by cell folder (as :func:`training_candidates` plans them)."""
    return {c.job.cell.folder: c.job for c in training_candidates(Path(os.devnull), preset)}


def train_child(results: Path, preset: str, cells: Sequence[str]) -> int:
    """Train, evaluate, analyse and export ``cells`` under ``results`` through ``reproduce`` (stacked on a GPU)."""
    from windtunnel.orchestration import reproduce

    known = jobs_by_folder(preset)
    unknown = [c for c in cells if c not in known]
    if unknown:
        raise Refused(f"not a cell a sitting trains at {preset}: {', '.join(unknown)}")
    summary = reproduce.reproduce("scale", preset, results, jobs=[known[c] for c in cells], stack="auto")
    print(json.dumps({k: summary.get(k) for k in ("done", "wall_s", "workers")}, default=str), flush=True)
    return 0


def probe_child(path: Path, preset: str, steps: int, cells: Sequence[str]) -> None:
    """``cells`` (one stack) timed for ``steps`` steps through the stacked loop on this machine's device."""
    import torch

    from paper_gpu import timing_config
    from paper_stacked import timed

    known = jobs_by_folder(preset)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfgs = [timing_config(known[c].cell.config(), steps, device, eval_n=64) for c in cells]
    t = time.perf_counter()
    got = timed("graph", cfgs, steps)
    write_atomic(path, json.dumps({**got, "wall_s": time.perf_counter() - t, "members": len(cells)}))


# --- phase c: host against device ------------------------------------------------------------------------------
def profile_fields(preset: str, column: str, arch: str, cuda: bool) -> dict[str, Any]:
    """The recipe the profile trains: the cell at ``preset`` on a GPU; on a CPU the quick preset's, made small
    (:data:`CPU_PROFILE`)."""
    from windtunnel.run import grid

    return grid.preset(preset, column, arch) if cuda else {**grid.preset("quick", column, arch), **CPU_PROFILE}


def profile_members(fields: dict[str, Any], members: int, steps: int, device: str) -> dict[str, Any]:
    """One stack of ``members`` seeds of ``fields`` trained ``steps`` steps through ``train_stacked``, each step
    split into the host's part — sampling the members' batches (``streams.step_batch``) and loading them into the
    step's buffers (``StackedStep.load``, the copy waited for) — and the device's (``StackedStep.run``, waited for
    before and after); medians over the steps after the first two (the graph's recording, the allocator's warm-up).
    Beside them, ``loop_ms``: the same stack trained without those waits (``paper_stacked.timed``), the step time
    a run gets when host and device overlap."""
    import tempfile

    import torch

    from paper_gpu import timing_config
    from paper_stacked import timed
    from windtunnel.training import stacked as stacked_loop
    from windtunnel.training.step import StackedStep

    cuda = device.startswith("cuda")
    wait = torch.cuda.synchronize if cuda else (lambda: None)
    cfgs = [timing_config(fields, steps, device, seed=s, eval_n=16) for s in range(members)]
    steps_seen: list[dict[str, float]] = []
    current: dict[str, float] = {"sample": 0.0}
    notes: dict[str, str] = {}
    sample, load, run = stacked_loop.step_batch, StackedStep.load, StackedStep.run

    def timed_sample(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        batch = sample(*a, **k)
        current["sample"] += time.perf_counter() - t
        return batch

    def timed_load(self: StackedStep, batches: Any) -> None:
        wait()
        t = time.perf_counter()
        load(self, batches)
        wait()
        current["load"] = time.perf_counter() - t

    def timed_run(self: StackedStep) -> None:
        wait()
        t = time.perf_counter()
        run(self)
        wait()
        current["run"] = time.perf_counter() - t
        notes["step_program"] = self.graph_note
        steps_seen.append(dict(current))
        current.clear()
        current["sample"] = 0.0

    t0 = time.perf_counter()
    stacked_loop.step_batch, StackedStep.load, StackedStep.run = timed_sample, timed_load, timed_run
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
            stacked_loop.train_stacked(cfgs, [Path(tmp) / f"m{i}" for i in range(members)], until=steps,
                                       log_lines=True)
    finally:
        stacked_loop.step_batch, StackedStep.load, StackedStep.run = sample, load, run
    instrumented_s = time.perf_counter() - t0
    kept = steps_seen[2:] if len(steps_seen) > 3 else steps_seen[-1:]
    med = {k: 1000 * statistics.median(s[k] for s in kept) for k in ("sample", "load", "run")}
    plain = timed("graph", cfgs, steps)
    host = med["sample"] + med["load"]
    return {"members": members, "device": device, "steps": steps, "timed_steps": len(kept),
            "batch_size": fields["batch_size"], "params": fields.get("params"),
            "host_sample_ms": med["sample"], "host_load_ms": med["load"], "host_ms": host, "device_ms": med["run"],
            "host_ms_per_member": host / members, "device_ms_per_member": med["run"] / members,
            "bound": "host" if host > med["run"] else "device",
            "loop_ms": plain["ms_per_step"], "step_program": notes.get("step_program"),
            "forward": plain.get("forward"), "instrumented_s": instrumented_s, "plain_s": plain["wall_s"]}


def profile_child(path: Path, fields: dict[str, Any], members: int, steps: int) -> None:
    """:func:`profile_members` on this machine's device, its row written to ``path``."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":  # the small CPU model is the code's profile, not the machine's: one thread, no contention
        torch.set_num_threads(1)
    t = time.perf_counter()
    row = profile_members(fields, members, steps, device)
    write_atomic(path, json.dumps({**row, "wall_s": time.perf_counter() - t}))


def phase_profile(s: Sitting, args: argparse.Namespace, gpu: bool, start_s: float) -> None:
    """Phase c: :func:`profile_members` for each of ``--profile-members``, a child each, the next one's estimate
    scaled from the last one measured (linear in the members), the first's from this sitting's phase a row of the
    cell or the committed GPU rows (none on a CPU: a pilot)."""
    column, arch = args.profile_cell.split(":", 1)
    preset = args.preset if gpu else "quick"
    fields = profile_fields(preset, column, arch, gpu)
    steps = args.profile_steps or (PROBE_STEPS if gpu else 4)
    per_member: tuple[float, str] | None = None
    if gpu:  # the graph run of the cell at --seeds members, measured this sitting or committed, is one of two runs
        for rows, where in ((read_rows(s.work / "stacked" / "rows.jsonl"), "this sitting's stacked row"),
                            (read_rows(GPU_STACKED_ROWS), str(GPU_STACKED_ROWS.relative_to(REPO)))):
            row = next((r for r in rows if (r.get("column"), r.get("arch")) == (column, arch)
                        and "wall_s" in r.get("graph", {})), None)
            if row is not None and preset == "paper":  # set-up dominates a few steps: taken as it is
                per_member = (2 * row["graph"]["wall_s"] / row.get("seeds", args.seeds), f"{where} of {column}/{arch}")
                break

    def estimate(m: int) -> Estimate:
        if per_member is None:
            return Estimate(None, "nothing measured yet")
        return Estimate(start_s + per_member[0] * m, f"{per_member[1]}, scaled to {m} members, two runs")

    members = list(args.profile_members)
    if not s.begin("profile", estimate(members[0])):
        return
    out_rows = s.bench / "profile" / "rows.jsonl"
    out_rows.parent.mkdir(parents=True, exist_ok=True)
    items: list[dict[str, Any]] = []
    s.phase("profile").update(items=items, cell=f"{column}/{arch}", preset=preset, steps=steps,
                              settings=None if gpu else CPU_PROFILE)
    for m in members:
        e = estimate(m)
        item: dict[str, Any] = {"members": m, "estimate": e.to_dict()}
        items.append(item)
        if s.left() <= 0 or (e.seconds is not None and e.seconds > s.left()):
            item.update(status="skipped", reason=f"its estimate, {e.seconds:.0f} s, exceeds the {max(s.left(), 0):.0f} s "
                                                 "left" if e.seconds is not None else "the deadline has passed")
            s.log(f"profile {m} members: {item['reason']}")
            s.pack()
            continue
        path = s.work / f"profile-{m}.json"
        t = time.monotonic()
        code, stopped = s.run_child([__file__, "_profile", "--json", path, "--fields", json.dumps(fields),
                                     "--members", m, "--steps", steps], f"profile-{m}", s.left())
        wall = time.monotonic() - t
        row = read_json(path)
        item.update(seconds=round(wall, 1),
                    status="done" if row else "stopped at the deadline" if stopped else f"failed (exit {code})")
        if row:
            row.update(column=column, arch=arch, preset=preset)
            with open(out_rows, "a") as f:
                f.write(json.dumps(row) + "\n")
            item["row"] = row
            per_member = ((wall - start_s) / m if wall > start_s else wall / m,
                          f"the {m}-member profile measured here ({wall:.0f} s)")
            s.log(f"profile {m} members: host {row['host_ms']:.1f} ms, device {row['device_ms']:.1f} ms a step "
                  f"({row['bound']}-bound), {row['loop_ms']:.1f} ms a step without waits")
        s.pack()
    done = [i for i in items if i["status"] == "done"]
    status = "done" if len(done) == len(items) else "partial" if done else "skipped"
    s.finish("profile", status, None if status == "done" else
             "; ".join(f"{i['members']} members: {i.get('reason') or i['status']}" for i in items if i not in done),
             rows=len(done), files=[f"benchmarks/results/{s.name}/profile/rows.jsonl"] if done else [])


# --- the driver ------------------------------------------------------------------------------------------------
def sit(args: argparse.Namespace) -> int:
    """The sitting: preflight, then the phases in order, the pack rewritten after every step; returns the exit status
    (0, or 128 + the signal's number where it was asked to end)."""
    import tempfile

    out = Path(args.out)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu_sitting_"))
    s = Sitting(out, work, args.name, args.deadline_min, args.phases, " ".join(sys.argv))

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the stop itself must not be interrupted
        raise SittingStopped(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    s.log(f"sitting {args.name}: phases {' '.join(args.phases)}, deadline {args.deadline_min} min, work in {work}")
    try:
        s.pack()
        found = do_preflight(s, not args.no_compile_check)
        gpu = bool(found.get("device", {}).get("cuda")) if "device" in found else cuda_here()
        start_s = float(found.get("import_s") or STARTUP_ALLOWANCE_S)
        for name in args.phases:
            if s.left() <= 0:
                s.skip(name, "the deadline has passed")
            elif name == "stacked":
                phase_stacked(s, args, gpu, start_s)
            elif name == "train":
                phase_train(s, args, gpu, start_s)
            elif name == "profile":
                phase_profile(s, args, gpu, start_s)
            else:
                phase_stacked(s, args, gpu, start_s, "compiled", ("compiled", "graph"))
        s.state["status"] = "done"
        code = 0
    except SittingStopped as exc:
        for record in s.state["phases"].values():
            if record["status"] == "running":
                record.update(status="stopped", reason=f"the sitting was asked to end ({exc.signal_name})")
        if s.state["preflight"].get("status") == "running":
            s.state["preflight"].update(status="stopped", reason=f"the sitting was asked to end ({exc.signal_name})")
        s.state["status"] = f"stopped ({exc.signal_name})"
        s.log(f"asked to end ({exc.signal_name}): what was measured is packed")
        code = 128 + int(getattr(signal, exc.signal_name))
    s.state["finished_utc"] = now_utc()
    s.pack()
    s.log(f"packed into {out}: " + ", ".join(f"{n} ({(out / n).stat().st_size} bytes)" for n in (STATE, LOG, PACK)))
    return code


def cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


# --- unpack ----------------------------------------------------------------------------------------------------
CELL_PATH = re.compile(r"^results/[A-Za-z0-9_]+/cells/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")
BENCH_PATH = re.compile(r"^benchmarks/results/[A-Za-z0-9._-]+/([A-Za-z0-9._-]+/)*[A-Za-z0-9._-]+$")


def pack_units(names: Sequence[str]) -> list[str]:
    """The folders a pack's files make up — each ``benchmarks/results/NAME`` and each ``results/PRESET/cells/FOLDER``
    — refusing any path outside them."""
    units = []
    for name in names:
        if CELL_PATH.match(name):
            unit = "/".join(name.split("/")[:4])
        elif BENCH_PATH.match(name) and ".." not in name.split("/"):
            unit = "/".join(name.split("/")[:3])
        else:
            raise Refused(f"{name} is not a place a sitting's pack writes (benchmarks/results/NAME/… or "
                          "results/PRESET/cells/FOLDER/…): not unpacked")
        if unit not in units:
            units.append(unit)
    return units


def unpack(folder: Path, root: Path, replace: bool = False) -> list[tuple[str, str]]:
    """Put the files of ``FOLDER/sitting.tar.gz`` (or of that tarball named directly) in their places under
    ``root``; returns ``(folder, "placed" | "replaced")`` for each.  A folder already there — a committed cell, an
    earlier sitting's benchmark folder — is refused (:class:`Refused`, exit status 1, nothing changed) unless
    ``replace``, which swaps it whole for the pack's."""
    tarball = folder / PACK if folder.is_dir() else folder
    if not tarball.is_file():
        raise Refused(f"{folder} holds no {PACK} (the folder a sitting's files came back to, or its tarball)")
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            members = tar.getmembers()
            for m in members:
                if not m.isfile():
                    raise Refused(f"{tarball}: {m.name} is not a plain file: not unpacked")
            units = pack_units([m.name for m in members])
            present = [u for u in units if (root / u).exists()]
            if present and not replace:
                raise Refused(f"refused: {', '.join(present)} already there (committed?); nothing was changed — "
                              "unpack --replace swaps them for the sitting's", status=1)
            staging = root / f".gpu_sitting_unpack_{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            try:
                for m in members:
                    dst = staging / m.name
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_bytes(tar.extractfile(m).read())
                placed = []
                for unit in units:
                    target = root / unit
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if target.exists():
                        shutil.rmtree(target) if target.is_dir() else target.unlink()
                        placed.append((unit, "replaced"))
                    else:
                        placed.append((unit, "placed"))
                    os.replace(staging / unit, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise Refused(f"{tarball}: {first_line(exc)}") from None
    return placed


# --- arguments -------------------------------------------------------------------------------------------------
def sitting_parser() -> OneLineParser:
    from windtunnel.run import grid

    ap = OneLineParser(prog="gpu_sitting.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the folder whose files come back ($OUT on the GPU machine)")
    ap.add_argument("--deadline-min", type=float, required=True, metavar="M",
                    help="end within M minutes of the start (a 9-minute command: 8.5)")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), choices=list(PHASES), metavar="PHASE",
                    help=f"the phases, in this order (default: {' '.join(PHASES)})")
    ap.add_argument("--name", default=None, help="the pack's folder under benchmarks/results/ "
                                                 "(default: gpu_sitting_ and the UTC time)")
    ap.add_argument("--work", default=None, help="the scratch folder (default: a new one under the temp folder)")
    ap.add_argument("--preset", default="paper", choices=list(grid.PRESETS))
    ap.add_argument("--steps", type=int, default=40, help="steps each cell's stack is timed for (phases a, d)")
    ap.add_argument("--seeds", type=int, default=3, help="members of each timed stack (phases a, d)")
    ap.add_argument("--columns", nargs="+", default=list(grid.TABLE_COLUMNS), help="the table's columns timed")
    ap.add_argument("--archs", nargs="+", default=list(grid.TABLE_ARCHS), help="the table's rows timed")
    ap.add_argument("--train-only", nargs="+", default=[], metavar="PATTERN",
                    help="phase b trains only the cells whose folder matches one of these shell patterns")
    ap.add_argument("--profile-cell", default="hmm:transformer", metavar="COLUMN:ARCH")
    ap.add_argument("--profile-members", nargs="+", type=int, default=[3, 12, 24], metavar="M")
    ap.add_argument("--profile-steps", type=int, default=None,
                    help=f"steps of each profiled stack (default: {PROBE_STEPS} on a GPU, 4 on a CPU)")
    ap.add_argument("--no-compile-check", action="store_true", help="leave torch.compile out of the preflight")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="time the stacks (phases a, d) without CUDA too, at --preset (training stays a GPU's)")
    return ap


def check_sitting_args(args: argparse.Namespace) -> None:
    """Refuse, in one line, what the parser's types let through."""
    from windtunnel.run import grid

    if not args.deadline_min > 0:
        raise Refused(f"--deadline-min must be positive, not {args.deadline_min}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise Refused(f"--out {out} is a file, not a folder")
    if args.name is None:
        args.name = "gpu_sitting_" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d_%H%M%S")
    if not NAME_OK.match(args.name):
        raise Refused(f"--name {args.name!r}: letters, digits, '.', '_' and '-' only")
    if len(set(args.phases)) != len(args.phases):
        raise Refused(f"--phases names a phase twice: {' '.join(args.phases)}")
    if args.steps < 2 or args.seeds < 1:
        raise Refused(f"--steps must be at least 2 and --seeds at least 1, not {args.steps} and {args.seeds}")
    if any(m < 1 for m in args.profile_members) or (args.profile_steps is not None and args.profile_steps < 2):
        raise Refused("--profile-members must be positive and --profile-steps at least 2")
    column, _, arch = args.profile_cell.partition(":")
    if column not in grid.EXPERIMENTS or arch not in grid.TABLE_ARCHS:
        raise Refused(f"--profile-cell {args.profile_cell!r}: a COLUMN:ARCH of the grid, e.g. hmm:transformer")
    for name, given in (("--columns", args.columns), ("--archs", args.archs)):
        known = grid.TABLE_COLUMNS if name == "--columns" else grid.TABLE_ARCHS
        wrong = [g for g in given if g not in known]
        if wrong:
            raise Refused(f"{name}: unknown {', '.join(wrong)}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["unpack"]:
            ap = OneLineParser(prog="gpu_sitting.py unpack", description="put a sitting's pack in its places")
            ap.add_argument("folder", help="the folder the sitting's files came back to (or its sitting.tar.gz)")
            ap.add_argument("--root", default=str(REPO), help="the repository (default: this checkout)")
            ap.add_argument("--replace", action="store_true",
                            help="replace folders already there (a committed cell: say so in its commit)")
            args = ap.parse_args(argv[1:])
            if not Path(args.root).is_dir():
                raise Refused(f"--root {args.root} is not a folder")
            for unit, how in unpack(Path(args.folder), Path(args.root), args.replace):
                print(f"{how} {unit}" + ("  (it replaces what was there: review it with git diff)"
                                         if how == "replaced" else ""))
            return 0
        if argv[:1] == ["_preflight"]:
            ap = OneLineParser(prog="gpu_sitting.py _preflight")
            ap.add_argument("--json", required=True)
            ap.add_argument("--no-compile", action="store_true")
            args = ap.parse_args(argv[1:])
            preflight_child(Path(args.json), not args.no_compile)
            return 0
        if argv[:1] == ["_train"]:
            ap = OneLineParser(prog="gpu_sitting.py _train")
            ap.add_argument("--results", required=True)
            ap.add_argument("--preset", default="paper")
            ap.add_argument("--cells", nargs="+", required=True)
            args = ap.parse_args(argv[1:])
            return train_child(Path(args.results), args.preset, args.cells)
        if argv[:1] == ["_probe"]:
            ap = OneLineParser(prog="gpu_sitting.py _probe")
            ap.add_argument("--json", required=True)
            ap.add_argument("--preset", default="paper")
            ap.add_argument("--steps", type=int, default=PROBE_STEPS)
            ap.add_argument("--cells", nargs="+", required=True)
            args = ap.parse_args(argv[1:])
            probe_child(Path(args.json), args.preset, args.steps, args.cells)
            return 0
        if argv[:1] == ["_profile"]:
            ap = OneLineParser(prog="gpu_sitting.py _profile")
            ap.add_argument("--json", required=True)
            ap.add_argument("--fields", required=True)
            ap.add_argument("--members", type=int, required=True)
            ap.add_argument("--steps", type=int, required=True)
            args = ap.parse_args(argv[1:])
            profile_child(Path(args.json), json.loads(args.fields), args.members, args.steps)
            return 0
        args = sitting_parser().parse_args(argv)
        check_sitting_args(args)
        return sit(args)
    except Refused as exc:
        print(f"gpu_sitting: {exc}", file=sys.stderr)
        return exc.status


if __name__ == "__main__":
    raise SystemExit(main())
