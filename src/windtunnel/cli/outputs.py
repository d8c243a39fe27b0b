"""The output-file policy, in one place: a run folder is never overwritten unless resumed or forced (and
``--force`` removes only a windtunnel run folder), a finished result is kept unless ``--force``, an empty
``--out`` is a mistake, and a file that cannot be written is refused before any work is done."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .args import UsageError


def check_out(run: "Any", resume: bool, force: bool) -> None:
    """Refuse to write over an existing folder unless resuming or forced; ``--force`` only ever
    removes a windtunnel run folder (called after the new configuration has been validated)."""
    if run.path.exists() and not run.path.is_dir():
        raise UsageError(f"cannot use {run.path} as a run folder: it is a file")
    if not run.is_empty() and not (resume or force):
        raise UsageError(f"{run.path} already exists; pass --resume to continue it or --force to start over")
    if force and not run.is_empty():
        import shutil

        if not run.is_run():
            raise UsageError(f"refusing to --force over {run.path}: it is not a windtunnel run folder")
        with run.lock():  # not while another process trains there
            shutil.rmtree(run.checkpoints, ignore_errors=True)
            for p in run.path.iterdir():
                if p.name != run.LOCK:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()


def keep_result(result: Path, force: bool) -> None:
    """Refuse, before any work, to replace a finished result (a table, an EM or timescales experiment, a
    model's signatures) unless ``--force``: a default output folder may hold hours of committed work, and a
    smoke run with ``--steps 5`` must not silently take its place.  An unfinished one (killed before it
    wrote ``result``) is resumed as before."""
    if result.exists() and not force:
        raise UsageError(f"{result} already holds a finished result; pass --force to replace it or --out to write elsewhere")


def out_path(text: str | None) -> Path | None:
    """``--out`` as given (``None``: the command's default); an empty string is a mistake, not ``.``."""
    if text is not None and text.strip() == "":
        raise UsageError("invalid --out: the folder name is empty")
    return None if text is None else Path(text)


def writable_file(path: Path) -> None:
    """One line, before any work, when ``path`` cannot be written (its folder missing or read-only)."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"invalid out: {path} is a folder")
    if not folder.is_dir() or not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"invalid out: cannot write {path} (its folder is missing or not writable)")


def writable_folder(path: Path, what: str) -> None:
    """Create ``path`` (the ``--WHAT`` folder) now, or say in one line why it cannot be: hours of work must not
    end on a folder that cannot be written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"invalid {what}: cannot create {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"invalid {what}: {path} is not writable")


def new_json_file(out: Path, force: bool) -> None:
    """``--out`` of a command that writes one JSON file: not a folder, and not a finished result unless ``--force``."""
    if out.is_dir():
        raise UsageError(f"invalid out: {out} is a folder; give a .json file")
    keep_result(out, force)
    # minutes of a model's forward passes must not end on a file that cannot be written: the folder that will hold
    # it, or the nearest one that exists (write_json makes the rest), must be writable now; nothing is created yet
    folder = out.parent if str(out.parent) else Path(".")
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UsageError(f"invalid out: cannot write {out} (its folder is not writable)")


def write_json(out: Path, record: dict[str, Any]) -> None:
    """Write ``record`` to ``out`` atomically (its folder created), or say in one line why it cannot be written."""
    from ..io import write_text_atomic

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps(record, indent=1))
    except OSError as exc:
        raise UsageError(f"invalid out: cannot write {out}: {exc.strerror or exc}") from None


def divergence_note(run: "Any", did: str) -> str | None:
    """``note: RUN diverged (loss became nan at step S): DID its last good checkpoint, step N of M`` for a run
    whose training stopped on non-finite numbers (``diverged.json``), else ``None``: how every command that
    reads a run says it read a diverged one (said once the command's work stands, not before a refusal)."""
    diverged = run.divergence()
    if not diverged:
        return None
    train = run.read_config().get("train")
    steps = train.get("steps") if isinstance(train, dict) else None
    return (f"note: {run.path} diverged ({diverged['message'].split(';')[0]}): {did} its last good checkpoint, "
            f"step {run.latest_step()} of {steps if steps is not None else '?'}")
