"""Numbers in the Markdown documents, read from the committed artifacts (the drift guard).

A number that README.md or a results README quotes from an artifact is written inside a *fact*
span, invisible when the Markdown is rendered::

    <!-- fact cells:main:transformer:eval.json:metrics.entropy_mae_curve.value -->0.0023 [0.0021, 0.0025]<!-- /fact -->

:func:`refresh` rewrites every span from its artifact (``windtunnel claims`` does so for
``README.md`` and every Markdown file under ``results/``), and the test suite fails when a span's
text differs from what its artifact gives today.  Fact keys:

* ``cells:EXPERIMENT:ARCH:FILE:dotted.path`` — a value of every seed's committed cell file,
  pooled over the seeds (mean and Student-t 95% interval); ``EXPERIMENT@PRESET`` reads another preset's cells
  (``cells:hmm_fixed@paper:transformer:…``);
* ``table:PRESET:TASK:ARCH:dotted.path`` — one value of a cell of ``results/PRESET/table.json``, found by its
  column and architecture (``table:quick:hmm:transformer:metrics.kl.mean``), not by its place in the list;
* ``json:RELATIVE/PATH.json:dotted.path`` — one value of a committed JSON file under ``results/``;
* ``bench:FILE.json:dotted.path`` — one value of a benchmark's committed output (``benchmarks/results/``);
* ``rows:RELATIVE/PATH.jsonl:SELECTOR:dotted.path`` and ``benchrows:FILE.jsonl:SELECTOR:dotted.path`` — one value
  of the one line of a committed JSON-lines file (under ``results/``, or a benchmark's under
  ``benchmarks/results/``) that ``SELECTOR`` picks: ``key=value`` pairs joined by commas, each key a dotted path
  into the line and each value compared with the line's as text (``seed=0,model.mlp=swiglu``), ``key~PATTERN``
  for a shell-style pattern (``probe~*regression_paired-*``), or ``key<NUMBER`` / ``key>NUMBER`` compared as
  numbers (``eval.accuracy>0.5``; no ``<=`` or ``>=``); a key holds none of ``= ~ < > , :``; a selector that
  picks no line or several reads nothing; a committed cell's ``metrics.jsonl`` is read from the
  ``metrics.jsonl.gz`` it is committed as;
* ``range:`` before a ``cells``, ``rows`` or ``benchrows`` key — the span of its values instead, written
  ``low–high``: over the seeds for ``cells`` (``range:cells:regression_paired:transformer:eval.json:metrics.kl.value``
  gives the seeds' lowest and highest KL), over every line the selector picks (at least one) for the others;
* ``first:`` before a ``rows`` or ``benchrows`` key — the value on the first line, in file order, that the selector
  picks (at least one): ``first:rows:quick/cells/recall_p64-mamba-s1/metrics.jsonl:eval.accuracy>0.5:step`` is the
  first evaluated step whose held-out accuracy is above one half;
* ``ours:ID``, ``verdict:ID`` — a claim's number and verdict (``windtunnel.claims``);
* ``vocabulary:words``, ``vocabulary:conventions`` — the verdict words with their definitions, and the conventions
  by which a number meets a rule, as a Markdown list (:mod:`windtunnel.claims.verdicts`);
* ``count:VERDICT`` — how many of the papers' claims have that verdict, as the front page counts them (``agree``,
  ``by-construction``, ``identities``, ``inconclusive``, ``closes``, ``persists``, ``uncontrolled``,
  ``uninformative``, ``not-measured``, ``not-measurable``); ``count:counted`` the papers' claims judged,
  ``count:derived`` (rows that re-read another's measurement), ``count:apart`` (rows that are not claims of the
  papers) and ``count:total`` (every row).

A dotted path indexes lists with integers (``layers.0.kl``); ``max`` or ``min`` as its last part reduces a
list of numbers (``pair_probe.yx.max``: the best layer's value).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import UserError, is_real
from .base import (AGREE, AGREE_BY_CONSTRUCTION, DISAGREE_CLOSES, DISAGREE_PERSISTS, DISAGREE_UNCONTROLLED, IDENTITY,
                   INCONCLUSIVE, NOT_MEASURABLE, NOT_MEASURED, UNINFORMATIVE, Verdict)
from .evidence import Evidence, _g, quantity_range

FACT = re.compile(r"<!-- fact (\S+) -->(.*?)<!-- /fact -->", re.S)
COUNT_NAMES = {"agree": AGREE, "by-construction": AGREE_BY_CONSTRUCTION, "identities": IDENTITY,
               "inconclusive": INCONCLUSIVE, "closes": DISAGREE_CLOSES, "persists": DISAGREE_PERSISTS,
               "uncontrolled": DISAGREE_UNCONTROLLED, "uninformative": UNINFORMATIVE, "not-measured": NOT_MEASURED,
               "not-measurable": NOT_MEASURABLE}


def _count(name: str, verdicts: dict[str, Verdict]) -> int:
    """``count:NAME``, as the front page counts: the papers' own claims (no row that re-reads another's measurement,
    none judged apart as not a claim of theirs) with that verdict; ``total`` every row, ``counted`` the papers' claims,
    ``derived`` and ``apart`` the rows the front page lists apart."""
    from .base import CLAIMS, NOT_CLAIMS

    rows = {cid: CLAIMS[cid] for cid in verdicts if cid in CLAIMS}
    counted = {cid for cid, c in rows.items() if c.counted}
    if name == "total":
        return len(verdicts)
    if name == "counted":
        return len(counted)
    if name == "derived":
        return sum(c.derived is not None for c in rows.values())
    if name == "apart":
        return sum(c.derived is None and c.provenance in NOT_CLAIMS for c in rows.values())
    want = COUNT_NAMES[name]
    return sum(verdicts[cid].kind == want for cid in counted)


def _dig(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(doc, list) and part in ("max", "min"):
            doc = (max if part == "max" else min)(float(x) for x in doc)
        else:
            doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _rows(file: Path, select: str, *, one: bool) -> list[dict[str, Any]]:
    """The lines of the JSON-lines ``file`` on which every pair of ``select`` holds: ``key=value`` compares the
    line's value as text (a string as it is, anything else as JSON), ``key~PATTERN`` matches that text against a
    shell-style pattern, ``key<NUMBER`` and ``key>NUMBER`` compare it as a number.  :class:`KeyError` unless
    exactly one line (``one``) or at least one line is picked."""
    from fnmatch import fnmatchcase

    from ..run.runs import read_jsonl, stored

    if stored(file) is None:  # a committed cell's metrics.jsonl is there as metrics.jsonl.gz
        raise KeyError(str(file))
    wanted = []
    for pair in select.split(","):
        cut = min((i for i in (pair.find(op) for op in "=~<>") if i >= 0), default=-1)
        if cut <= 0:
            raise KeyError(f"selector part {pair!r} is none of key=value, key~pattern, key<number, key>number")
        if pair[cut] in "<>":
            try:
                float(pair[cut + 1:])
            except ValueError:
                raise KeyError(f"selector part {pair!r} compares with {pair[cut + 1:]!r}, not a number "
                               "(< and > only; no <= or >=)") from None
        wanted.append((pair[:cut], pair[cut], pair[cut + 1:]))

    def holds(row: dict[str, Any], key: str, op: str, want: str) -> bool:
        try:
            v = _dig(row, key)
        except (KeyError, IndexError, ValueError, TypeError):
            return False
        if op in "<>":
            return is_real(v) and (float(v) < float(want) if op == "<" else float(v) > float(want))
        v = v if isinstance(v, str) else json.dumps(v)
        return v == want if op == "=" else fnmatchcase(v, want)

    rows = [r for r in read_jsonl(file) if all(holds(r, *w) for w in wanted)]
    if (len(rows) != 1) if one else not rows:
        raise KeyError(f"{select!r} picks {len(rows)} lines of {file.name}, not {'one' if one else 'any'}")
    return rows


def _span(values: list[float]) -> str:
    """``low–high`` of ``values`` at the facts' precision (one number where both ends print alike)."""
    lo, hi = _g(min(values)), _g(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def fact(key: str, ev: Evidence, verdicts: dict[str, Verdict]) -> str:
    """The text of fact ``key`` (see the module docstring); :class:`UserError` for a key that reads nothing."""
    from ..run.grid import SEEDS

    kind, _, rest = key.partition(":")
    spread, first = kind == "range", kind == "first"
    if spread or first:
        kind, _, rest = rest.partition(":")
        if kind not in (("cells", "rows", "benchrows") if spread else ("rows", "benchrows")):
            raise UserError(f"fact {key!r}: range: goes before a cells, rows or benchrows key, first: before rows "
                            "or benchrows")
    try:
        if kind == "cells":
            column, arch, file, path = rest.split(":", 3)
            column, _, preset = column.partition("@")
            m = (ev.at(preset) if preset else ev).cell_stat(column, arch, SEEDS, file, lambda d: float(_dig(d, path)),
                                                            quantity_range(path.removesuffix(".value")))
            if m is None:
                raise KeyError(key)
            return _span(list(m.values)) if spread else m.text()
        if kind == "table":
            preset, task, *arch_parts, path = rest.split(":")  # an external arch is package.module:factory
            arch = ":".join(arch_parts)
            cell = ev.at(preset).table_cell(task, arch)
            if cell is None:
                raise KeyError(f"{preset}/table.json has no {task}/{arch} cell")
            v = _dig(cell, path)
            if v is None:
                raise KeyError(path)
            return _g(float(v)) if is_real(v) else str(v)
        if kind in ("json", "bench"):
            rel, path = rest.rsplit(":", 1)
            doc = ev.json(rel if kind == "json" else f"../benchmarks/results/{rel}")
            if doc is None:
                raise KeyError(rel)
            v = _dig(doc, path)
            return _g(float(v)) if is_real(v) else str(v)
        if kind in ("rows", "benchrows"):
            rel, select, path = rest.rsplit(":", 2)
            file = ev.root / rel if kind == "rows" else ev.root.parent / "benchmarks" / "results" / rel
            if spread:
                return _span([float(_dig(r, path)) for r in _rows(file, select, one=False)])
            v = _dig(_rows(file, select, one=not first)[0], path)
            return _g(float(v)) if is_real(v) else str(v)
        if kind in ("ours", "verdict"):
            v = verdicts[rest]
            if kind == "verdict":
                return v.kind
            return v.ours_text
        if kind == "count":
            return str(_count(rest, verdicts))
        if kind == "vocabulary":
            from .verdicts import CONVENTIONS, DEFINITIONS

            table = {"words": DEFINITIONS, "conventions": CONVENTIONS}[rest]
            fmt = "- *{}* — {}" if rest == "words" else "- **{}**: {}"
            return "\n" + "\n".join(fmt.format(k, v) for k, v in table.items()) + "\n"
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise UserError(f"fact {key!r} reads nothing from the committed artifacts ({exc})") from None
    raise UserError(f"unknown fact kind in {key!r}: cells, table, json, bench, rows, benchrows, ours, verdict, count or "
                    "vocabulary "
                    "(range: before cells, rows or benchrows; first: before rows or benchrows)")


def refresh(text: str, ev: Evidence, verdicts: dict[str, Verdict]) -> str:
    """``text`` with every fact span rewritten from the artifacts."""
    return FACT.sub(lambda m: f"<!-- fact {m.group(1)} -->{fact(m.group(1), ev, verdicts)}<!-- /fact -->", text)


def documents(repo: Path) -> list[Path]:
    """The Markdown files whose facts are kept: README.md, the pages of docs/ and everything under results/."""
    docs = [repo / "README.md"] if (repo / "README.md").is_file() else []
    return docs + sorted((repo / "docs").glob("*.md")) + sorted((repo / "results").rglob("*.md"))


def stale(repo: Path, ev: Evidence, verdicts: dict[str, Verdict]) -> list[tuple[str, str, str, str]]:
    """Every fact span whose text differs from its artifact: ``(file, key, written, computed)``."""
    out = []
    for path in documents(repo):
        for m in FACT.finditer(path.read_text()):
            want = fact(m.group(1), ev, verdicts)
            if m.group(2) != want:
                out.append((str(path.relative_to(repo)), m.group(1), m.group(2), want))
    return out


def refreshed(repo: Path, ev: Evidence, verdicts: dict[str, Verdict]) -> dict[Path, str]:
    """Every document whose facts change, with its new text; nothing is written, so a fact that reads nothing
    (a :class:`UserError`) is raised before any file is touched."""
    out = {}
    for path in documents(repo):
        text = path.read_text()
        new = refresh(text, ev, verdicts)
        if new != text:
            out[path] = new
    return out


def write_all(repo: Path, ev: Evidence, verdicts: dict[str, Verdict]) -> list[Path]:
    """Refresh the facts of every document, all of them or (a fact that reads nothing) none; returns the files that
    changed."""
    from ..io import write_text_atomic

    changed = refreshed(repo, ev, verdicts)
    for path, text in changed.items():
        write_text_atomic(path, text)
    return list(changed)


__all__ = ["FACT", "fact", "refresh", "refreshed", "documents", "stale", "write_all"]
