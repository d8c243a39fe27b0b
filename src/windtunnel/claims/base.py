"""A claim of the papers as data, its verdict, and the registry.

A :class:`Claim` carries the papers' statement and number, where that number comes from
(:data:`PROVENANCE`), the metric, the written rule that turns numbers into a verdict, and the
command that regenerates the committed artifact it is judged on.  Its ``assess`` function reads
our value through :class:`~windtunnel.claims.evidence.Evidence` (committed files only) and applies
the rule, returning a :class:`Verdict`.  Claims register themselves with :func:`claim`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .evidence import Evidence, Measure

from .verdicts import (AGREE, AGREE_BY_CONSTRUCTION, CONTROL_VARIABLES, DISAGREE, DISAGREE_CLOSES,  # noqa: F401
                       DISAGREE_PERSISTS, DISAGREE_UNCONTROLLED, IDENTITY, INCONCLUSIVE, NOT_MEASURABLE, NOT_MEASURED,
                       RAW, UNINFORMATIVE, VERDICTS)

RULE_WORDS = (AGREE, INCONCLUSIVE, DISAGREE, NOT_MEASURED, NOT_MEASURABLE)
"""What a claim's ``assess`` may return: its rule's raw outcome (or that nothing can be measured)."""
JUDGES_WORDS = tuple(k for k in RAW if k not in RULE_WORDS)
"""The words only the judge gives: *agree by construction*, *identity*, *closes*, *persists*, *uncontrolled*,
*uninformative*."""

PROVENANCE = {
    "paper": "the paper's own text",
    "paper-p3": "Paper III's restatement of Papers I–II",
    "code": "the authors' released code or its README, not paper text",
    "secondary": "secondary summaries of the paper, not paper text",
    "not-a-claim": "not a claim of the papers (a criterion of the authors' code, or a method they describe)",
    "unsourced": "found in one secondary summary only, with no source in the papers or the code",
}
NOT_CLAIMS = ("not-a-claim", "unsourced")
"""The sources whose rows are judged but not counted among the papers' claims on the front page."""


@dataclass(frozen=True)
class Control:
    """One control a claim consulted, as it declares it to the judge: the one ``factor`` it changes (from
    :data:`CONTROL_VARIABLES`), the raw outcome of the claim's rule on it (``outcome``: agree, inconclusive or
    disagree), whether it learned its task, whether it is at the scale the verdict is judged at (``at_scale``), and the
    file and command a verdict it closes cites (``cite``).  It *speaks* when it learned its task, is at the verdict's
    scale and the rule settles it; the judge alone decides from that whether a disagreement closes, persists or is
    uncontrolled."""

    factor: str
    outcome: str
    learned: bool = True
    at_scale: bool = True
    cite: str = ""

    def __post_init__(self) -> None:
        if self.factor not in CONTROL_VARIABLES:
            raise ValueError(f"unknown control variable {self.factor!r}: name one of {CONTROL_VARIABLES}")
        if self.outcome not in (AGREE, INCONCLUSIVE, DISAGREE):
            raise ValueError(f"a control's outcome is its rule's: agree, inconclusive or disagree, not {self.outcome!r}")

    @property
    def speaks(self) -> bool:
        return self.learned and self.at_scale and self.outcome != INCONCLUSIVE

    @property
    def why_silent(self) -> str:
        """Why a control cannot speak (``""`` where it can)."""
        reasons = [r for r, bad in (("has not learned its task", not self.learned),
                                    ("is not at the verdict's scale", not self.at_scale),
                                    ("is not settled by the rule", self.outcome == INCONCLUSIVE)) if bad]
        return " and ".join(reasons)


@dataclass(frozen=True)
class Verdict:
    """The outcome of a claim's rule: the verdict, our number (a :class:`Measure` or prose), why the rule gave it,
    the scale it was judged at (``scale``: ``""`` lets :func:`windtunnel.claims.judge` read it from the files), the
    controls the claim consulted (``consulted``, each a :class:`Control`) and the other models that show the same
    outcome (``replicated``: reported, never a control).

    What the controls decide is the judge's alone, written on the judged verdict: the control that closes a
    disagreement (``control``, its files, and ``closed_by``, the factor it changes), the factors of the controls
    that speak (``controls``, from :data:`CONTROL_VARIABLES`) and of those that cannot (``unheard``: they did not
    learn their task, are at another scale, or the rule cannot settle them), reported and counted for nothing.  A
    verdict a claim builds is refused if it sets any of them."""

    kind: str
    ours: Measure | str | None = None
    why: str = ""
    control: str | None = None
    files: tuple[str, ...] = ()
    controls: tuple[str, ...] = ()
    closed_by: str = ""
    scale: str = ""
    unheard: tuple[str, ...] = ()
    replicated: tuple[str, ...] = ()
    #: the controls consulted, declared for the judge (:class:`Control`); a claim that declares them returns its own
    #: cell's outcome, and the judge decides closing and persisting from them by one rule
    consulted: tuple[Control, ...] = ()

    #: set by the judge alone (:func:`windtunnel.claims.judge.judge`): only a judged verdict carries a final word
    judged: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in RAW:
            raise ValueError(f"unknown verdict {self.kind!r}")
        if self.kind in JUDGES_WORDS and not self.judged:
            raise ValueError(f"{self.kind!r} is the judge's word: a claim's rule returns one of {', '.join(RULE_WORDS)}")
        if not self.judged and (self.control or self.controls or self.closed_by or self.unheard):
            raise ValueError("a claim declares its controls (Verdict.consulted); which close, which persist and which "
                             "cannot speak is the judge's to say")
        if self.kind == DISAGREE_CLOSES and not (self.control and self.closed_by):
            raise ValueError("a disagreement that closes under a control must name the control and its factor")
        unknown = set(self.controls + self.unheard + ((self.closed_by,) if self.closed_by else ())) - set(CONTROL_VARIABLES)
        if unknown:
            raise ValueError(f"unknown control variable(s) {sorted(unknown)}: name one of {CONTROL_VARIABLES}")

    @property
    def ours_text(self) -> str:
        """Our number as written: a measure with its interval, or the verdict's prose (``—`` for none)."""
        return self.ours.text() if isinstance(self.ours, Measure) else str(self.ours or "—")

    @property
    def cited(self) -> tuple[str, ...]:
        """The committed files the verdict is read from: its measure's, else its own."""
        return self.ours.files if isinstance(self.ours, Measure) and self.ours.files else self.files


@dataclass(frozen=True)
class CellNeed:
    """One grid cell (all its seeds) a claim reads: its column (``main``, or ``main_paper_size@paper`` for a cell of
    a fixed preset, read whatever preset the claim is judged at), its architecture, and whether it reads the cell's
    ``geometry.json`` (``analysed``: ``windtunnel reproduce`` then runs the diagnostics on it)."""

    column: str
    arch: str = "transformer"
    analysed: bool = False

    @property
    def name(self) -> str:
        """The grid column without its preset."""
        return self.column.partition("@")[0]

    @property
    def preset(self) -> str | None:
        """The fixed preset the cell is read at, ``None`` for the preset the claim is judged at."""
        return self.column.partition("@")[2] or None


def reads(*columns: str, arch: str = "transformer", geometry: bool = False) -> tuple[CellNeed, ...]:
    """The :class:`CellNeed` of each column for one architecture: what a claim declares it reads
    (``reads("main", "main_v20", geometry=True) + reads("hmm", arch="mamba")``)."""
    return tuple(CellNeed(c, arch, geometry) for c in columns)


@dataclass(frozen=True)
class Claim:
    """One claim (see the module docstring).  ``number`` is the papers' figure as they state it; ``derived``
    names the claim whose measurement this one re-reads (counted once, under that claim); ``asserts_failure``
    marks a claim that a model *fails* (its rule is meant to be met by a trivial predictor, so the check that the
    rule can fail applies it to the Bayes oracle instead); ``threshold`` states the threshold of the rule that is
    ours, not the papers' (where the papers give no number, or one the rule replaces), ``""`` where the rule
    applies the papers' own number; ``rule_object`` is the :mod:`~windtunnel.claims.rules` object whose sentence
    ``rule`` is (followed by what the claim adds to it), where the rule is one; ``cells`` are the grid cells its ``assess`` reads (a test holds the two equal),
    from which ``windtunnel reproduce`` plans what to train (the primitives table's cells are ``windtunnel
    table``'s and are not declared); ``doubt`` says why the papers' number itself is suspect — produced by a defect
    of the authors' code, or contradicted by the authors' own later figure — ``""`` where nothing is known against it
    (a disagreement with a suspect number is not counted as a failure of the papers' claim); ``identity`` marks an
    algebraic identity, which holds for any weights (its check is of the derivation and of our code, not an empirical
    finding about trained models, and the front page lists it apart from the reproduced findings; a theorem is one
    too); ``by_construction`` says why the rule holds whatever training does (a model that cannot see the context sits
    at the context-blind floor by its design), ``""`` where training decides it: the judge says *agree by
    construction* where such a rule is met."""

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
    derived: str | None = None
    asserts_failure: bool = False
    threshold: str = ""
    cells: tuple[CellNeed, ...] = ()
    rule_object: Any = field(default=None, compare=False)
    doubt: str = ""
    identity: bool = False
    by_construction: str = ""

    def __post_init__(self) -> None:
        if self.provenance not in PROVENANCE:
            raise ValueError(f"claim {self.id}: unknown provenance {self.provenance!r}")

    @property
    def counted(self) -> bool:
        """Whether the front page counts this row among the papers' claims: not a re-reading of another's
        measurement, and a claim of the papers (:data:`NOT_CLAIMS` rows are judged apart)."""
        return self.derived is None and self.provenance not in NOT_CLAIMS


CLAIMS: dict[str, Claim] = {}
"""Every claim by id, in the order registered (each paper module registers its section in order)."""


def claim(id: str, paper: str, version: str, section: str, statement: str, number: str, provenance: str,
          metric: str, rule: Any, command: str, *, derived: str | None = None,
          asserts_failure: bool = False, threshold: str = "", cells: tuple[CellNeed, ...] = (),
          rule_note: str = "", doubt: str = "", identity: bool = False, by_construction: str = "") -> Callable[[Callable[[Evidence], Verdict]], Callable[[Evidence], Verdict]]:
    """Register the decorated ``assess(evidence) -> Verdict`` as claim ``id``.  ``rule``: the rule's sentence, or a
    :mod:`~windtunnel.claims.rules` object that writes it (``rule_note`` then adds what the claim does beyond it —
    its controls, the scale it is judged at)."""

    def register(fn: Callable[[Evidence], Verdict]) -> Callable[[Evidence], Verdict]:
        if id in CLAIMS:
            raise ValueError(f"claim {id} registered twice")
        text, obj = (rule, None) if isinstance(rule, str) else (rule.sentence, rule)
        if rule_note:
            text += f"; {rule_note}"
        CLAIMS[id] = Claim(id, paper, version, section, statement, number, provenance, metric, text, command, fn,
                           derived, asserts_failure, threshold, tuple(dict.fromkeys(cells)), obj, doubt, identity,
                           by_construction)
        return fn

    return register


def _key(cid: str) -> tuple[str, int, str]:
    m = re.fullmatch(r"([A-Z]+)(\d+)(\w*)", cid)
    return (m.group(1), int(m.group(2)), m.group(3)) if m else (cid, 0, "")


def ordered() -> list[Claim]:
    """Every claim, by section and number."""
    return [CLAIMS[k] for k in sorted(CLAIMS, key=_key)]


def declared(papers: tuple[str, ...], fixed: str | None = None) -> dict[tuple[str, str], bool]:
    """The cells the claims of ``papers`` (``"I"``, ``"II"``, ``"III"``) declare they read (``Claim.cells``), as
    (column, architecture) → whether any of them reads the cell's geometry, in the claims' order: those read at the
    preset the claims are judged at, or with ``fixed`` those read at that preset whatever preset they are judged at
    (``main_paper_size@paper``) — what ``windtunnel reproduce`` plans."""
    out: dict[tuple[str, str], bool] = {}
    for c in ordered():
        if c.paper in papers:
            for need in c.cells:
                if need.preset == fixed:
                    out[need.name, need.arch] = out.get((need.name, need.arch), False) or need.analysed
    return out


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
