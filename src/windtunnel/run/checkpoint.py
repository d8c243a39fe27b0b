"""Crash-safe checkpoints: safetensors weights + JSON state, written atomically.

Layout inside a run folder::

    checkpoints/
      step_00000500/  model.safetensors  optimizer.safetensors  state.json
      step_00001000/  ...
      latest          (text: the name of the newest *complete* checkpoint)

A checkpoint is first written to ``checkpoints/.tmp-step_…`` (files fsynced), then renamed into
place, and only then does ``latest`` move (write-to-temp + ``os.replace``).  A process killed at
any instant therefore leaves either the previous complete checkpoint or the new one, never a
half-written one that ``latest`` points to.  ``find_latest`` also verifies the files and falls
back to the newest checkpoint that loads.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..io import fsync_dir, write_bytes_synced, write_text_atomic
from safetensors.torch import load_file, save_file

LATEST = "latest"


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, unreadable, of another model, or holds non-finite weights."""


class NonFiniteWeights(CheckpointError):
    """A checkpoint whose weights hold a NaN or an infinity (training refuses to save such weights, so the file
    was written or damaged since): what a reader of many checkpoints passes over rather than fails on."""


def _optimizer_tensors(opt_state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into flat tensors (safetensors) and a JSON skeleton."""
    tensors: dict[str, torch.Tensor] = {}
    skeleton: dict[str, Any] = {"param_groups": opt_state["param_groups"], "state": {}}
    for pid, st in opt_state["state"].items():
        entry: dict[str, Any] = {}
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                key = f"{pid}.{k}"
                tensors[key] = v.detach().cpu().contiguous()
                entry[k] = {"tensor": key}
            else:
                entry[k] = v
        skeleton["state"][str(pid)] = entry
    return tensors, skeleton


def _optimizer_state(tensors: dict[str, torch.Tensor], skeleton: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for pid, entry in skeleton["state"].items():
        state[int(pid)] = {k: (tensors[v["tensor"]] if isinstance(v, dict) and "tensor" in v else v) for k, v in entry.items()}
    return {"state": state, "param_groups": skeleton["param_groups"]}


def rng_state() -> dict[str, str]:
    out = {"torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if torch.cuda.is_available():
        out["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()]  # type: ignore[assignment]
    return out


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    raw = np.frombuffer(base64.b64decode(state["torch"]), dtype=np.uint8).copy()
    torch.set_rng_state(torch.from_numpy(raw))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(
            [torch.from_numpy(np.frombuffer(base64.b64decode(s), dtype=np.uint8).copy()) for s in state["cuda"]]
        )


def save(
    ckpt_root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
) -> Path:
    """Write checkpoint ``step`` atomically and point ``latest`` at it.  Returns its folder."""
    ckpt_root = Path(ckpt_root)
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = step_dir(ckpt_root, step)
    name = final.name
    tmp = ckpt_root / f".tmp-{name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    weights, seen = {}, set()
    for k, v in model.state_dict().items():
        v = v.detach().cpu().contiguous()
        # tied weights (a language model's embedding and unembedding) share storage, which safetensors
        # refuses: the second name gets its own copy, and loading writes the same values into the one tensor
        weights[k] = v.clone() if v.untyped_storage().data_ptr() in seen else v
        seen.add(v.untyped_storage().data_ptr())
    save_file(weights, str(tmp / "model.safetensors"))
    full_state = dict(state, step=step, rng=rng_state())
    if optimizer is not None:
        tensors, skeleton = _optimizer_tensors(optimizer.state_dict())
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        full_state["optimizer"] = skeleton
    write_bytes_synced(tmp / "state.json", json.dumps(full_state, indent=1).encode())
    mode = 0o666 & ~_umask()  # safetensors creates its files 0600: give them the mode any other file gets
    for f in tmp.iterdir():  # weights were written by safetensors: flush them too
        os.chmod(f, mode)
        with open(f, "rb+") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(ckpt_root)
    write_text_atomic(ckpt_root / LATEST, name + "\n")
    return final


def _umask() -> int:
    """The process's file-creation mask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def step_dir(ckpt_root: Path, step: int) -> Path:
    """The folder of checkpoint ``step`` (whether or not it exists): ``step_00001500``."""
    return Path(ckpt_root) / f"step_{step:08d}"


def step_of(path: Path) -> int:
    """The step a checkpoint folder holds, read from its name."""
    try:
        return int(Path(path).name.split("_")[1])
    except (IndexError, ValueError):
        return -1  # not a checkpoint folder's name: matches no recorded step


def complete(path: Path) -> bool:
    """Whether a checkpoint folder holds everything a resume reads, each part readable (see :func:`verify`)."""
    try:
        verify(path)
        return True
    except CheckpointError:
        return False


def verify(path: Path) -> dict[str, Any]:
    """Check a checkpoint as a whole and return its state; :class:`CheckpointError` naming the first fault.

    Whole means: ``model.safetensors`` loads; ``state.json`` is an object whose ``step`` is the folder's and
    whose ``rng`` holds a CPU generator state of this PyTorch's size; where it records optimizer state,
    ``optimizer.safetensors`` loads and holds every tensor the record names.  A checkpoint that fails is
    skipped by :func:`find_latest`, so a resume falls back to the newest whole one."""
    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
        load_file(str(path / "model.safetensors"))
    except Exception as exc:  # missing, truncated or foreign files: any error safetensors or json raise
        raise CheckpointError(f"checkpoint {path} is unreadable: {str(exc).splitlines()[0][:200]}") from None
    if not isinstance(state, dict) or state.get("step") != step_of(path) or isinstance(state.get("step"), bool):
        raise CheckpointError(f"checkpoint {path} is damaged: its state.json does not record step {step_of(path)}")
    rng = state.get("rng")
    try:
        size = len(base64.b64decode(rng["torch"], validate=True))  # type: ignore[index]
    except Exception:
        size = -1
    if size != torch.get_rng_state().numel():
        raise CheckpointError(f"checkpoint {path} is damaged: its random-generator state is missing or of the wrong size")
    skeleton = state.get("optimizer")
    if skeleton is not None:
        try:
            tensors = load_file(str(path / "optimizer.safetensors"))
            named = [v["tensor"] for entry in skeleton["state"].values() for v in entry.values()
                     if isinstance(v, dict) and "tensor" in v]
            ok = isinstance(skeleton["param_groups"], list) and all(k in tensors for k in named)
        except Exception:
            ok = False
        if not ok:
            raise CheckpointError(f"checkpoint {path} is damaged: its optimizer state is unreadable or incomplete")
    return state


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete-looking checkpoint folders, oldest first (temporaries excluded)."""
    ckpt_root = Path(ckpt_root)
    if not ckpt_root.is_dir():
        return []
    return sorted(p for p in ckpt_root.iterdir() if p.is_dir() and p.name.startswith("step_"))


def find_latest(ckpt_root: Path, resumable: bool = False) -> Path | None:
    """The newest checkpoint that loads: ``latest`` if valid, else the newest complete folder.
    ``resumable``: only one that also holds the optimizer state a resume continues from (the
    training-dynamics checkpoints keep their weights alone, see :func:`prune`)."""
    ckpt_root = Path(ckpt_root)

    def ok(cand: Path) -> bool:
        return complete(cand) and (not resumable or has_optimizer(cand))

    pointer = ckpt_root / LATEST
    if pointer.is_file():
        cand = ckpt_root / pointer.read_text().strip()
        if cand.is_dir() and ok(cand):
            return cand
    for cand in reversed(list_checkpoints(ckpt_root)):
        if ok(cand):
            return cand
    return None


def has_optimizer(path: Path) -> bool:
    """Whether a checkpoint records optimizer state (every checkpoint a resume may need does)."""
    try:
        return "optimizer" in json.loads((Path(path) / "state.json").read_text())
    except (OSError, ValueError):
        return False


def drop_optimizer(path: Path) -> None:
    """Remove a checkpoint's optimizer state, keeping its weights (a training-dynamics checkpoint no
    resume will start from: the optimizer's moments are twice the weights' size).  The record goes
    first, atomically, then the file: a kill in between leaves an unreferenced file, never a record
    pointing at a missing one."""
    path = Path(path)
    state = json.loads((path / "state.json").read_text())
    if state.pop("optimizer", None) is not None:
        write_text_atomic(path / "state.json", json.dumps(state, indent=1))
    (path / "optimizer.safetensors").unlink(missing_ok=True)


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """Load weights (and optimizer state) from a checkpoint folder; returns its JSON state."""
    path = Path(path)
    state = verify(path)
    weights = load_file(str(path / "model.safetensors"))
    bad = [k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise NonFiniteWeights(f"checkpoint {path} holds non-finite weights ({bad[0]}): the run diverged before it")
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as exc:  # same names, other shapes: a different model size
        first = str(exc).strip().splitlines()[-1].strip()
        raise CheckpointError(f"checkpoint {path} does not match the model: {first}") from None
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path} does not match the model (missing {list(missing)[:3]}, unexpected {list(unexpected)[:3]})"
        )
    if optimizer is not None and "optimizer" in state:
        tensors = load_file(str(path / "optimizer.safetensors"))
        try:
            optimizer.load_state_dict(_optimizer_state(tensors, state["optimizer"]))
        except ValueError as exc:  # parameter groups of another configuration (e.g. another readout_lr_mult)
            raise CheckpointError(f"checkpoint {path} holds optimizer state of another configuration: {exc}") from None
    return state


def prune(ckpt_root: Path, keep_last: int, keep_steps: set[int]) -> None:
    """Delete old checkpoints, keeping the newest ``keep_last`` whole and the weights of any step in
    ``keep_steps`` (the training-dynamics checkpoints: their optimizer state is dropped, except at step
    0 where it is empty)."""
    ckpts = list_checkpoints(ckpt_root)
    latest = find_latest(ckpt_root)
    for p in ckpts[:-keep_last] if keep_last > 0 else ckpts:
        step = step_of(p)
        if p == latest:
            continue
        if step in keep_steps:
            if step != 0 and complete(p):
                drop_optimizer(p)
            continue
        shutil.rmtree(p, ignore_errors=True)
