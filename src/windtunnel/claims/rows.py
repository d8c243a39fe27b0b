"""Claims that are one number and one rule: a row of data, with no function of their own.

A row names where its number is read (:class:`Read`: an evaluation metric of a cell's seeds, a geometry statistic,
a cell of the primitives table) and the :mod:`~windtunnel.claims.rules` object that judges it; :func:`row` registers
the claim with the cells it reads declared from the reader, and an ``assess`` that applies the rule and says what it
read.  A claim that truly needs logic of its own (controls, several readings, a rule on several numbers) stays a
function registered with :func:`~windtunnel.claims.base.claim`, its sentence still written by its rule object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..run.grid import SEEDS
from .base import CellNeed, Verdict, claim, missing
from .evidence import Evidence, Measure


@dataclass(frozen=True)
class Read:
    """Where a row's number comes from: ``get`` reads it (``None`` when not committed), ``what`` names the artifact
    a missing number lacks, ``cells`` are the grid cells it reads (``()`` for the primitives table's)."""

    get: Callable[[Evidence], Measure | None]
    what: str
    cells: tuple[CellNeed, ...] = ()


def eval_of(column: str, metric: str, arch: str = "transformer", *, factor: float = 1.0, what: str = "") -> Read:
    """``metric`` of ``eval.json`` pooled over the seeds of ``column``'s cells, times ``factor`` (``ln 2`` turns bits
    into nats)."""
    def get(ev: Evidence) -> Measure | None:
        m = ev.eval_metric(column, arch, SEEDS, metric)
        if m is None or factor == 1.0:
            return m
        return Measure(m.value * factor, (m.ci[0] * factor, m.ci[1] * factor) if m.ci else None, m.seeds,
                       tuple(v * factor for v in m.values), m.files)

    return Read(get, what or f"{column} cells", (CellNeed(column, arch),))


def geometry_of(column: str, key: str, arch: str = "transformer", *, what: str = "") -> Read:
    """A diagnostic's summary statistic ``key`` (``"diagnostic.statistic"``) of ``column``'s cells, pooled over
    seeds."""
    return Read(lambda ev: ev.geometry(column, arch, SEEDS, key), what or f"{column} geometry",
                (CellNeed(column, arch, analysed=True),))


def table_of(task: str, arch: str, metric: str) -> Read:
    """A cell of the primitives table (``windtunnel table``)."""
    return Read(lambda ev: ev.table(task, arch, metric), "table cell")


def row(id: str, paper: str, version: str, section: str, statement: str, number: str, provenance: str, metric: str,
        rule: Any, command: str, *, read: Read, why: str | Callable[[Measure], str] = "", **kw: Any) -> None:
    """Register claim ``id`` as a row: ``read`` gives its number, ``rule`` (a rule object) its verdict, ``why`` what
    the verdict adds (text, or a function of the number); other keywords as :func:`~windtunnel.claims.base.claim`."""

    def assess(ev: Evidence) -> Verdict:
        m = read.get(ev)
        if m is None:
            return missing(read.what)
        return Verdict(rule.kind(m), m, why(m) if callable(why) else why)

    assess.__doc__ = f"Claim {id}: {rule.sentence}."
    claim(id, paper, version, section, statement, number, provenance, metric, rule, command, cells=read.cells,
          **kw)(assess)
