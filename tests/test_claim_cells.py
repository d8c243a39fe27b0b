"""Each claim declares the grid cells it reads (``Claim.cells``), and ``windtunnel reproduce`` plans from those
declarations: these tests hold the declaration equal to what the claim's ``assess`` actually reads from the
committed results, so a claim cannot read a cell that no command would make, nor declare one it never reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import pytest

from windtunnel import claims
from windtunnel.run import grid
from windtunnel.orchestration import reproduce
from windtunnel.claims.base import CellNeed
from windtunnel.claims.evidence import Evidence

RESULTS = Path(__file__).resolve().parents[1] / "results"
_CELL = re.compile(r"(?P<preset>[a-z]+)/cells/(?P<column>.+)-(?P<arch>[a-z_]+)-s\d+/(?P<file>[\w.]+)")


class ReadLog(Evidence):
    """Evidence that notes every cell it is asked for and every cell file it opens, outside the primitives
    table (whose cells ``windtunnel table`` makes)."""

    def __init__(self, root: Path, preset: str = "quick", log: dict[tuple[str, str, str], set[str]] | None = None,
                 base: str | None = None) -> None:
        super().__init__(root, preset)
        self.log = {} if log is None else log
        self.base = base or preset
        self._in_table = 0

    def _note(self, preset: str, column: str, arch: str, file: str | None) -> None:
        if self._in_table:
            return
        seen = self.log.setdefault((preset, column, arch), set())
        if file:
            seen.add(file)

    def at(self, preset: str) -> "ReadLog":
        if preset == self.preset:
            return self
        if preset not in self._presets:
            self._presets[preset] = ReadLog(self.root, preset, self.log, self.base)
        return self._presets[preset]  # type: ignore[return-value]

    def table(self, *a: Any, **k: Any) -> Any:
        self._in_table += 1
        try:
            return super().table(*a, **k)
        finally:
            self._in_table -= 1

    def cells(self, column: str, arch: str, seeds: Sequence[int]) -> Any:
        name, _, preset = column.partition("@")
        if not preset or preset == self.preset:
            self._note(self.preset, name, arch, None)
        return super().cells(column, arch, seeds)

    def _path(self, rel: str) -> None:
        m = _CELL.fullmatch(rel)
        if m:
            self._note(m["preset"], m["column"], m["arch"], m["file"])

    def json(self, rel: str) -> Any:
        self._path(rel)
        return super().json(rel)

    def text(self, rel: str) -> str | None:
        self._path(rel)
        return super().text(rel)


def read_by(claim: claims.Claim, results: Path = RESULTS) -> set[CellNeed]:
    """The cells ``claim`` reads from ``results``, as declarations (a cell of another preset than the quick one it
    is judged at carries its preset; a cell whose ``geometry.json`` it opens is analysed)."""
    ev = ReadLog(results)
    claim.assess(ev)
    return {CellNeed(column if preset == "quick" else f"{column}@{preset}", arch, "geometry.json" in files)
            for (preset, column, arch), files in ev.log.items()}


@pytest.mark.parametrize("cid", list(claims.CLAIMS))
def test_a_claim_declares_exactly_the_cells_it_reads(cid: str) -> None:
    claim = claims.CLAIMS[cid]
    assert set(claim.cells) == read_by(claim), (
        f"{cid} declares {sorted(map(str, claim.cells))}, reads {sorted(map(str, read_by(claim)))}")


def test_every_declared_cell_is_a_grid_cell() -> None:
    for claim in claims.CLAIMS.values():
        for need in claim.cells:
            assert need.name in grid.EXPERIMENTS, (claim.id, need)
            assert need.preset in (None, *grid.PRESETS), (claim.id, need)
