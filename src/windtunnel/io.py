"""Durable file writes: a file replaced atomically (temp file in the same folder, fsynced, then
renamed), so that a reader, or a process killed at any instant, sees the old file or the new one,
never half of one.  Every artifact the package writes goes through here: run folders, checkpoints,
tables, claims pages, results.  And the one read of the package's own files as text: a package's module sources,
found without importing it (what the command line and the model registry learn from the files alone)."""

from __future__ import annotations

import importlib.util
import os
import pkgutil
from pathlib import Path
from typing import Iterator


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


def module_sources(package: str) -> Iterator[tuple[str, str | None]]:
    """``(module name, source)`` for each module of ``package`` (``windtunnel.tasks``), found without importing
    the package; ``None`` for a module whose source cannot be read."""
    spec = importlib.util.find_spec(package)  # imports the parent (windtunnel), not the package itself
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for info in pkgutil.iter_modules(locations):
        if info.name.startswith("_"):
            continue
        found = info.module_finder.find_spec(f"{package}.{info.name}", None)  # type: ignore[call-arg]
        origin = getattr(found, "origin", None)
        try:
            source = Path(origin).read_text(encoding="utf-8") if origin and origin.endswith(".py") else None
        except OSError:
            source = None
        yield info.name, source
