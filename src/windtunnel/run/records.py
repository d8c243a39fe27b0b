"""How a run folder's records are stored, and what shape a record must have to be read.

* The machine-read tables (``eval.json``, ``geometry.json``, ``references.json``, ``cell.json``) are compact JSON
  (:func:`dump_record`: no indentation, no blanks after separators — a third lighter than indented, and what every
  committed cell carries to each machine it is copied to); ``config.json`` and ``timings.json``, which people read,
  stay indented.  A float is written as its shortest exact ``repr`` either way, so the numbers are the same bit for
  bit whichever way a file was written.
* A committed cell keeps its training log packed (``metrics.jsonl.gz``, :func:`pack`), read wherever
  ``metrics.jsonl`` is named (:func:`stored`, :func:`read_stored_text`, :func:`read_jsonl`).
* :func:`eval_damage` says what is wrong with the shape of an ``eval.json`` record before any reader relies on it.

:class:`windtunnel.run.runs.RunDir` writes and reads through these; they are apart from it so that a reader of a
committed file (the claims, the documents' facts) needs no run folder.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from ..errors import UserError


class RunError(UserError):
    """A run folder is missing, damaged, busy, or cannot be written."""


PACKED = ".gz"
"""The suffix of a record kept gzip-compressed: a committed cell's training log is ``metrics.jsonl.gz``, read
wherever ``metrics.jsonl`` is asked for (:func:`stored`, :func:`read_stored_text`)."""


def dump_record(record: Any, *, strict: bool = False) -> str:
    """``record`` as compact JSON (no indentation, no blank after ``,`` or ``:``), the form of the machine-read
    tables (:attr:`RunDir.TABLES`).  Each float is its shortest ``repr`` that reads back to the same double, so
    re-writing a parsed record this way changes its bytes, never its numbers.  ``strict``: refuse NaN and
    infinities (``ValueError``) rather than write JSON's non-standard ``NaN``."""
    return json.dumps(record, separators=(",", ":"), allow_nan=not strict)


def pack(text: str) -> bytes:
    """``text`` gzip-compressed the same way every time (no timestamp or file name in the header, level 9), so
    exporting an unchanged log again gives the same bytes and leaves a committed cell unchanged."""
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def stored(path: str | Path) -> Path | None:
    """The file that holds the record ``path`` names: ``path`` itself, else its packed form ``path.gz`` (how a
    committed cell keeps its training log), else ``None``.  The plain file wins where both are there: an older
    ``windtunnel`` exports the plain log and leaves a packed one it does not know about."""
    path = Path(path)
    packed = path.with_name(path.name + PACKED)
    return path if path.is_file() else packed if not path.name.endswith(PACKED) and packed.is_file() else None


def read_stored_text(path: str | Path) -> str:
    """The text of the record ``path`` names, decompressed where it is kept packed (:func:`stored`; a path that
    itself ends in ``.gz`` is decompressed too).  :class:`FileNotFoundError` when neither form is there, and
    :class:`RunError` for a packed file that does not decompress."""
    found = stored(path)
    if found is None:
        found = Path(path)  # not there: read_bytes says so
    data = found.read_bytes()
    if not found.name.endswith(PACKED):
        return data.decode()
    try:
        return gzip.decompress(data).decode()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError; a cut file ends early
        raise RunError(f"{found} is damaged ({exc}); export it again from its run folder") from None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON-object lines of a file (or of its packed form, :func:`read_stored_text`); blank lines, lines cut
    by a kill and non-objects are skipped."""
    out = []
    for line in read_stored_text(path).splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _is_metric(m: Any) -> bool:
    """A metric of ``eval.json``: ``{"value": number or null, "ci": null or [lo, hi]}``."""
    real = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    ci = m.get("ci") if isinstance(m, dict) else None
    return (isinstance(m, dict) and (m.get("value") is None or real(m["value"]))
            and (ci is None or (isinstance(ci, list) and len(ci) == 2 and all(c is None or real(c) for c in ci))))


def eval_damage(ev: Any, top: bool = True) -> str | None:
    """What is wrong with the shape of an ``eval.json`` record (or, ``top`` false, of one of its ``lengths``
    blocks) — a field of the wrong type — or ``None``: every field present has the type the readers (the
    report, ``compare``, ``eval``) rely on.  Fields absent from an older record are not required."""
    if not isinstance(ev, dict):
        return "not an object"
    if not isinstance(ev.get("metrics"), dict) or not ev["metrics"]:
        return "no metrics in it"
    real = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    checks: dict[str, tuple[Any, str]] = {
        "metrics": (lambda v: all(_is_metric(m) for m in v.values()), "a table of metrics (value and interval)"),
        "oracle": (lambda v: isinstance(v, dict) and all(_is_metric(m) for m in v.values()),
                   "a table of metrics (value and interval)"),
        "curves": (lambda v: isinstance(v, dict) and all(isinstance(c, list) and all(x is None or real(x) for x in c)
                                                          for c in v.values()), "a table of per-position lists"),
        "curve_ci": (lambda v: isinstance(v, dict) and all(isinstance(c, dict) and all(isinstance(b, list) for b in c.values())
                                                            for c in v.values()), "a table of per-position bounds"),
        "horizon": (lambda v: isinstance(v, dict), "an object"),
        "n": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a positive integer"),
    }
    if top:
        checks.update({
            "task": (lambda v: isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("params", {}), dict),
                     "a task (name and params)"),
            "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
            "n_boot": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a positive integer"),
            "level": (lambda v: real(v) and 0 < v < 1, "a number in (0, 1)"),
            "lengths": (lambda v: isinstance(v, dict) and all(k.isdigit() and eval_damage(b, top=False) is None
                                                               for k, b in v.items()), "a table of evaluations by length"),
            "model": (lambda v: isinstance(v, dict), "an object"),
            "timings": (lambda v: isinstance(v, dict) and all(real(t) for t in v.values()), "a table of seconds"),
            "priors": (lambda v: isinstance(v, dict) and all(isinstance(p, dict) for p in v.values()), "a table of tables"),
            "provenance": (lambda v: isinstance(v, dict), "an object"),
        })
    for key, (ok, what) in checks.items():
        if key in ev and not ok(ev[key]):
            return f"its {key} is not {what}"
    return None
