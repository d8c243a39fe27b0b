"""``windtunnel check``: regenerate the evidence of the claims you name, in a folder of your own, and judge them there.

Each claim declares the grid cells it reads (``Claim.cells``); a check trains, evaluates and analyses exactly those
cells — at the committed recipe, or at a laptop's scale (``steps``: every cell trained this many steps; ``seeds``:
only the first few training seeds) — under ``out/`` (never ``results/`` unless asked), then judges the named claims
on them with the same judge as the committed pages, beside the committed verdict.  What a claim reads that is not a
grid cell (the primitives table, the reference predictors' table, a language model's records, Paper II's runs) is
not regenerated: it is read from the committed results and the check says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..claims.evidence import Evidence
from ..errors import InvalidValue
from ..run import grid
from . import reproduce as rep

_GEOMETRY = re.compile(r"(?P<preset>[a-z]+)/cells/(?P<column>.+)-(?P<arch>[a-z_]+)-s\d+/geometry\.json")


@dataclass(frozen=True)
class Scale:
    """How a check trains the cells: ``steps`` per cell (``None``: each recipe's own) on the first ``seeds`` of the
    grid's training seeds."""

    steps: int | None = None
    seeds: int = len(grid.SEEDS)

    def __post_init__(self) -> None:
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise InvalidValue(f"invalid steps: must be a positive integer, got {self.steps!r}")
        if not isinstance(self.seeds, int) or not 1 <= self.seeds <= len(grid.SEEDS):
            raise InvalidValue(f"invalid seeds: must be 1 to {len(grid.SEEDS)}, got {self.seeds!r}")

    @property
    def training_seeds(self) -> tuple[int, ...]:
        return tuple(grid.SEEDS[: self.seeds])

    @property
    def committed(self) -> bool:
        """Whether this is the committed scale: every recipe's steps and every seed."""
        return self.steps is None and self.seeds == len(grid.SEEDS)

    def text(self) -> str:
        """``"laptop scale: 300 steps a cell, 1 seed"``, or ``"the committed scale"``: said on every line a check
        prints."""
        if self.committed:
            return "the committed scale (each recipe's steps, 3 seeds)"
        steps = f"{self.steps} steps a cell" if self.steps is not None else "each recipe's steps"
        return f"laptop scale: {steps}, {self.seeds} seed{'s' if self.seeds > 1 else ''}"


Diagnostics = dict[tuple[str, str, str], set[str]]
"""The diagnostics read from each cell's ``geometry.json``, by (preset, column, architecture)."""


class _KeysRead(dict):  # type: ignore[type-arg]
    """A ``geometry.json`` record that notes which diagnostics are read of it: a diagnostic's own block
    (``doc["probes"]``) or a statistic of the headline table (``doc["summary"]["probes.best_layer"]``)."""

    def __init__(self, doc: dict[str, Any], seen: set[str], summary: bool = False) -> None:
        super().__init__(doc)
        self._seen, self._summary = seen, summary

    def _note(self, key: Any) -> None:
        self._seen.add(str(key).partition(".")[0])

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return self._wrap(key, super().__getitem__(key))

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return self._wrap(key, super().get(key, default))

    def __contains__(self, key: Any) -> bool:
        self._note(key)
        return super().__contains__(key)

    def _wrap(self, key: Any, value: Any) -> Any:
        return _KeysRead(value, self._seen, True) if key == "summary" and not self._summary and isinstance(value, dict) \
            else value


class DiagnosticReads(Evidence):
    """Evidence that notes, for each cell, the diagnostics a claim reads of its ``geometry.json``."""

    def __init__(self, root: Path, preset: str = "quick", log: Diagnostics | None = None, **scope: Any) -> None:
        super().__init__(root, preset, **scope)
        self.log: Diagnostics = {} if log is None else log

    def at(self, preset: str) -> "DiagnosticReads":
        if preset == self.preset:
            return self
        if preset not in self._presets:
            self._presets[preset] = DiagnosticReads(self.root, preset, self.log, **self.scope())
        return self._presets[preset]  # type: ignore[return-value]

    def json(self, rel: str) -> Any | None:
        doc = super().json(rel)
        m = _GEOMETRY.fullmatch(rel)
        if m is None or not isinstance(doc, dict):
            return doc
        return _KeysRead(doc, self.log.setdefault((m["preset"], m["column"], m["arch"]), set()))


def diagnostics_read(claim_ids: Sequence[str], results: str | Path, preset: str = "quick",
                     **scope: Any) -> Diagnostics:
    """The registered diagnostics each cell's ``geometry.json`` is read for when the named claims are judged on
    ``results`` (read, not declared: the claims' own code run on the record; ``scope``: a check's steps, seeds and
    fallback); a cell none of whose records is there is absent."""
    from ..claims import CLAIMS
    from ..geometry.registry import discover

    ev = DiagnosticReads(Path(results), preset, **scope)
    for cid in claim_ids:
        CLAIMS[cid].assess(ev)
    names = set(discover())
    return {cell: seen & names for cell, seen in ev.log.items() if seen & names}


def jobs(claim_ids: Sequence[str], preset: str, scale: Scale,
         diagnostics: Diagnostics | None = None) -> dict[str, list[rep.Job]]:
    """The cells the named claims declare, by the preset each is trained at (a cell of a fixed preset, such as the
    papers'-size ``main_paper_size@paper``, at its own), analysed where any of the claims reads its geometry: with
    the diagnostics ``diagnostics`` names for it (:func:`diagnostics_read`), every registered one for a cell it does
    not name."""
    from ..claims import CLAIMS

    unknown = [c for c in claim_ids if c not in CLAIMS]
    if unknown:
        raise InvalidValue(f"unknown claim {', '.join(unknown)}: see results/CLAIMS.md for the ids")
    if preset not in grid.PRESETS:
        raise InvalidValue(f"unknown preset {preset!r}: choose from {', '.join(grid.PRESETS)}")
    wanted: dict[tuple[str, str, str], bool] = {}
    for cid in claim_ids:
        for need in CLAIMS[cid].cells:
            key = (need.preset or preset, need.name, need.arch)
            wanted[key] = wanted.get(key, False) or need.analysed
    out: dict[str, list[rep.Job]] = {}
    for (at, column, arch), analysed in wanted.items():
        for seed in scale.training_seeds:
            only = (diagnostics or {}).get((at, column, arch))
            out.setdefault(at, []).append(rep.Job(grid.Cell(at, column, arch, seed, steps=scale.steps), analysed,
                                                  tuple(sorted(only)) if analysed and only else None))
    return out


@dataclass(frozen=True)
class Checked:
    """One claim checked: its verdict on the check's cells and the committed verdict, with what each read."""

    claim: str
    word: str
    ours: str
    committed_word: str
    committed_ours: str
    not_regenerated: tuple[str, ...]

    def line(self, scale: Scale) -> str:
        other = f"; read from the committed results: {', '.join(self.not_regenerated)}" if self.not_regenerated else ""
        return (f"{self.claim} at {scale.text()}: {self.word}, ours {self.ours} | committed: {self.committed_word}, "
                f"ours {self.committed_ours}{other}")


def judge(claim_ids: Sequence[str], out: Path, preset: str, scale: Scale, results: Path) -> list[Checked]:
    """The named claims judged on the check's cells under ``out`` and on the committed ``results``."""
    from ..claims import CLAIMS, judge as judge_one
    from ..claims.evidence import Evidence

    mine = Evidence(out, preset, steps=scale.steps, seeds=scale.training_seeds, fallback=results)
    committed = Evidence(results, preset)
    checked = []
    for cid in claim_ids:
        j, c = judge_one(CLAIMS[cid], mine), judge_one(CLAIMS[cid], committed)
        cited = j.verdict.cited
        borrowed = tuple(f for f in cited if "/cells/" not in f"/{f}" and not (out / f).is_file())
        checked.append(Checked(cid, j.kind, j.verdict.ours_text, c.kind, c.verdict.ours_text, borrowed))
    return checked


def check(claim_ids: Sequence[str], out: str | Path, preset: str = "quick", scale: Scale = Scale(),
          results: str | Path = "results", workers: int | None = None, threads: int | None = None,
          dry_run: bool = False, diagnostics: Diagnostics | None = None) -> tuple[dict[str, list[str]], list[Checked]]:
    """Train what the named claims need under ``out`` (resuming where a check stopped), then judge them there;
    returns the cells worked by preset and the judgements (none on a dry run).  ``diagnostics``: what
    :func:`diagnostics_read` finds on ``results`` (computed here when not given)."""
    out, results = Path(out), Path(results)
    # analysed with the diagnostics the claims read of the committed cells; where the check's own cells lead a claim
    # to read another (a branch taken only on other numbers), that one is analysed too and the claims judged again
    wanted = {cell: set(names) for cell, names in (
        diagnostics if diagnostics is not None else diagnostics_read(claim_ids, results, preset)).items()}
    worked: dict[str, list[str]] = {}
    for _ in range(_ROUNDS):
        for at, todo in jobs(claim_ids, preset, scale, wanted).items():
            summary = rep.reproduce("check", at, out, workers=workers, threads=threads, dry_run=dry_run, jobs=todo)
            done = summary.get("todo", []) if dry_run else summary.get("done", [])
            worked[at] = list(dict.fromkeys(worked.get(at, []) + done))
        if dry_run:
            return worked, []
        read = diagnostics_read(claim_ids, out, preset, steps=scale.steps, seeds=scale.training_seeds,
                                fallback=results)
        more = {cell: wanted.get(cell, set()) | names for cell, names in read.items()
                if cell in wanted and not names <= wanted[cell]}
        if not more:
            break
        wanted.update(more)
    return worked, judge(claim_ids, out, preset, scale, results)


_ROUNDS = 3
"""How many times a check analyses again for a diagnostic its claims came to read on its own cells (each round can
only add diagnostics, of which there are finitely many; three is more than any claim has needed)."""
