"""A claim of the papers as data, its verdict, and the registry.

A :class:`Claim` carries the papers' statement and number, where that number comes from
(:data:`PROVENANCE`), the metric, the written rule that turns numbers into a verdict, and the
command that regenerates the committed artifact it is judged on.  Its ``assess`` function reads
our value through :class:`~windtunnel.claims.evidence.Evidence` (committed files only) and applies
the rule, returning a :class:`Verdict`.  Claims register themselves with :func:`claim`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .evidence import Evidence, Measure

AGREE = "agree"
INCONCLUSIVE = "inconclusive"
DISAGREE_EXPLAINED = "disagree — explained by a control"
DISAGREE = "disagree — unexplained"
NOT_MEASURED = "not measured"
NOT_MEASURABLE = "not measurable here"
VERDICTS = (AGREE, INCONCLUSIVE, DISAGREE_EXPLAINED, DISAGREE, NOT_MEASURED, NOT_MEASURABLE)
"""Every verdict, in the order CLAIMS.md counts them.  *inconclusive*: our value points the papers'
way but its interval does not exclude the other."""

PROVENANCE = {
    "paper": "the paper's own text",
    "paper-p3": "Paper III's restatement of Papers I–II",
    "code": "the authors' released code or its README, not paper text",
    "secondary": "secondary summaries of the paper, not paper text",
    "not-a-claim": "not a claim of the paper (a criterion of the authors' code)",
}


@dataclass(frozen=True)
class Verdict:
    """The outcome of a claim's rule: the verdict, our number (a :class:`Measure` or prose), why the
    rule gave it, and the committed control that explains a disagreement."""

    kind: str
    ours: Measure | str | None = None
    why: str = ""
    control: str | None = None
    files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in VERDICTS:
            raise ValueError(f"unknown verdict {self.kind!r}")
        if self.kind == DISAGREE_EXPLAINED and not self.control:
            raise ValueError("a disagreement explained by a control must name the control")


@dataclass(frozen=True)
class Claim:
    """One claim (see the module docstring).  ``number`` is the papers' figure as they state it."""

    id: str
    paper: str
    version: str
    section: str
    statement: str
    number: str
    provenance: str
    metric: str
    rule: str
    command: str
    assess: Callable[[Evidence], Verdict] = field(compare=False)

    def __post_init__(self) -> None:
        if self.provenance not in PROVENANCE:
            raise ValueError(f"claim {self.id}: unknown provenance {self.provenance!r}")


CLAIMS: dict[str, Claim] = {}
"""Every claim by id, in the order registered (each paper module registers its section in order)."""


def claim(id: str, paper: str, version: str, section: str, statement: str, number: str, provenance: str,
          metric: str, rule: str, command: str) -> Callable[[Callable[[Evidence], Verdict]], Callable[[Evidence], Verdict]]:
    """Register the decorated ``assess(evidence) -> Verdict`` as claim ``id``."""

    def register(fn: Callable[[Evidence], Verdict]) -> Callable[[Evidence], Verdict]:
        if id in CLAIMS:
            raise ValueError(f"claim {id} registered twice")
        CLAIMS[id] = Claim(id, paper, version, section, statement, number, provenance, metric, rule, command, fn)
        return fn

    return register


def fixed(kind: str, why: str) -> Callable[[Evidence], Verdict]:
    """An ``assess`` for a claim no committed artifact can speak to (no code path, or impossible here)."""
    if kind not in (NOT_MEASURED, NOT_MEASURABLE):
        raise ValueError("only 'not measured' and 'not measurable here' are fixed verdicts")

    def assess(_: Evidence) -> Verdict:
        return Verdict(kind, None, why)

    return assess


def missing(what: str) -> Verdict:
    """The verdict of a claim whose artifact is not committed yet."""
    return Verdict(NOT_MEASURED, None, f"no committed {what} yet")
