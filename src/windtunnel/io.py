"""Durable file writes: a file replaced atomically (temp file in the same folder, fsynced, then
renamed), so that a reader, or a process killed at any instant, sees the old file or the new one,
never half of one.  Every artifact the package writes goes through here: run folders, checkpoints,
tables, claims pages, results."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it (not atomic: the temp-file half of an atomic write)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically (temp file in the same folder, then rename)."""
    write_bytes_atomic(path, text.encode())


def copy_atomic(src: Path, dst: Path) -> None:
    """Replace ``dst`` by a copy of ``src`` atomically (a reader never sees half a file)."""
    write_bytes_atomic(dst, Path(src).read_bytes())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write_bytes_synced(tmp, data)
    os.replace(tmp, path)
    fsync_dir(path.parent)
