"""The tables ``windtunnel table`` makes, as data: each family's columns (with the primitive or the selection
problem each isolates, its headline metric and unit), its rows and the files it writes.  Read by
:mod:`~windtunnel.orchestration.table` (which trains and aggregates the cells) and
:mod:`~windtunnel.orchestration.table_pages` (which writes them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..run import grid

COLUMNS: dict[str, dict[str, Any]] = {
    name: {"primitive": e.primitive, "metric": e.metric, "unit": e.unit,
           **({"lengths": list(e.lengths)} if e.lengths else {})}
    for name, e in ((n, grid.experiment(n)) for n in grid.TABLE_COLUMNS)
}
"""Column name -> primitive, headline metric, unit and evaluation lengths (from ``grid``)."""
ARCHS = list(grid.TABLE_ARCHS)
SECOND_METRIC = "class_posterior_mae"
"""The sequel table's second block of columns: the class-posterior error
(:func:`windtunnel.evaluation.metrics.class_posterior_metrics`)."""


def _selection(e: grid.Experiment) -> str:
    """What a sequel column selects among, in words: its classes (``rotation vs multiplication``), its symbol
    regime, and the control it is (facts in context, the longer budget)."""
    params = e.task_params["quick"]
    text = f"{params['classes'].replace(',', ' vs ')}, {params['symbols']} symbols"
    if params.get("facts_in_context"):
        text += ", facts in context"
    if e.recipes["quick"].steps != grid.experiment(e.name.removesuffix("_long")).recipes["quick"].steps:
        text += f", {grid.SEQUEL_LONG_FACTOR}× steps"
    return text


SEQUEL_COLUMNS: dict[str, dict[str, Any]] = {
    name: {"primitive": _selection(e), "metric": e.metric, "unit": e.unit}
    for name, e in ((n, grid.experiment(n)) for n in grid.SEQUEL_COLUMNS)
}
"""Sequel column name -> what it selects among (in the ``primitive`` slot), headline metric (``kl``) and unit."""


@dataclass(frozen=True)
class Family:
    """A table the command makes: its columns, its rows and the files it writes under ``OUT``."""

    name: str
    columns: dict[str, dict[str, Any]]
    archs: tuple[str, ...]
    stem: str  # OUT/{stem}.{md,html,json}
    references: str  # OUT/{references}: the reference rows of its columns
    title: str  # the html page's title and heading

    def has_cell(self, column: str, arch: str) -> bool:
        """Whether (column, arch) is one of the family's cells: every pair, except that the sequel's controls of
        claims about the transformer are the transformer's alone (``grid.SEQUEL_TRANSFORMER_ONLY``, as
        ``reproduce.SEQUEL_CELLS``)."""
        return self.name != "sequel" or column not in grid.SEQUEL_TRANSFORMER_ONLY or arch == "transformer"


FAMILIES: dict[str, Family] = {
    "primitives": Family("primitives", COLUMNS, grid.TABLE_ARCHS, "table", "references.json",
                         "Architecture × inference primitive"),
    "sequel": Family("sequel", SEQUEL_COLUMNS, grid.SEQUEL_ARCHS, "sequel_table", "sequel_references.json",
                     "Architecture × model-selection problem (the sequel)"),
}
"""The tables ``windtunnel table --family`` makes: ``primitives`` (Paper I's, the default) and ``sequel``."""
_ALL_COLUMNS: dict[str, dict[str, Any]] = {**COLUMNS, **SEQUEL_COLUMNS}
