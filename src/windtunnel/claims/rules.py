"""The rules that turn our numbers into a verdict, as objects that judge *and* write their own sentence.

A claim's rule is written once: the object a claim is registered with (``claim(..., rule=EveryCell(...))``)
gives both the sentence printed as the claim's rule and the raw verdict its ``assess`` returns, so the two cannot
drift apart.  The conventions are stated here, once, for every rule:

* **the papers' number with a tolerance** — an error claim agrees when our mean is at most :data:`ERROR_FACTOR`
  times the papers' figure (:class:`AtMost`);
* **a bound on an interval** — agree when our 95% interval over seeds lies wholly on the claimed side of the
  bound, disagree when it lies wholly on the other, inconclusive when it holds the bound (:class:`IntervalBelow`,
  :class:`IntervalAbove`); without an interval (one seed) the mean decides;
* **a share of seeds** — agree when every seed meets the bound, disagree when none does, inconclusive when the
  seeds straddle it (:class:`EverySeed` for a bound, :class:`EachSeed` for any condition): a mean never decides a
  claim its seeds split on;
* **an ordered pair** — agree when one quantity's interval lies below the other's, disagree when above,
  inconclusive when they overlap, whichever way the means fall (:class:`Ordered`);
* **a share of the context-blind floor** — what "learns" and "fails" mean for a model (:class:`FloorShare`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import AGREE, DISAGREE, INCONCLUSIVE
from .evidence import Measure

ERROR_FACTOR = 1.5
"""An error claim agrees when our error is at most this multiple of the papers' figure (or below it)."""


def _n(x: float) -> str:
    return f"{x:g}"


class Rule:
    """A rule: :attr:`sentence` says it, :meth:`kind` applies it (``AGREE``, ``DISAGREE`` or ``INCONCLUSIVE``)."""

    @property
    def sentence(self) -> str:  # pragma: no cover - every rule defines it
        raise NotImplementedError

    def __str__(self) -> str:
        return self.sentence


@dataclass(frozen=True)
class AtMost(Rule):
    """Our mean at most ``factor`` × the papers' ``paper`` (an error claim): ``mean ≤ factor · paper``."""

    paper: float
    unit: str = "bits"
    factor: float = ERROR_FACTOR
    of: str = "the papers'"

    @property
    def sentence(self) -> str:
        times = "" if self.factor == 1 else f"{_n(self.factor)}× "
        of = f"{self.of} " if self.of else ""
        return f"agree if our mean is at most {times}{of}{_n(self.paper)} {self.unit}".rstrip()

    def kind(self, m: Measure) -> str:
        return AGREE if m.value <= self.factor * self.paper else DISAGREE

    def reading(self, m: Measure) -> str:
        """``"ours is 1.2× the papers' 0.007 bits (within the 1.5× rule)"``."""
        within = "within" if self.kind(m) == AGREE else "beyond"
        return (f"ours is {m.value / self.paper:.2g}× {self.of} {_n(self.paper)} {self.unit}".rstrip()
                + f" ({within} the {_n(self.factor)}× rule)")


@dataclass(frozen=True)
class IntervalBelow(Rule):
    """Our 95% interval over seeds below ``bound``: upper end ``< bound`` agrees, lower end ``≥ bound`` disagrees,
    an interval that holds the bound is inconclusive (one seed: its value decides)."""

    bound: float
    unit: str = ""
    over: str = "seeds"
    below: ClassVar[bool] = True

    @property
    def sentence(self) -> str:
        b = f"{_n(self.bound)} {self.unit}".rstrip()
        side, other = ("below", "at or above") if self.below else ("above", "at or below")
        return (f"agree if our 95% interval over {self.over} lies {side} {b}, disagree if it lies {other} it, "
                "inconclusive if it holds it")

    def kind(self, m: Measure) -> str:
        lo, hi = m.ci if m.ci else (m.value, m.value)
        if not self.below:  # the mirror image: above the bound
            lo, hi = -hi, -lo
        bound = self.bound if self.below else -self.bound
        return AGREE if hi < bound else DISAGREE if lo >= bound else INCONCLUSIVE


@dataclass(frozen=True)
class IntervalAbove(IntervalBelow):
    """Our 95% interval over seeds above ``bound``: lower end ``> bound`` agrees, upper end ``≤ bound`` disagrees,
    an interval that holds the bound is inconclusive (one seed: its value decides)."""

    below: ClassVar[bool] = False


def _share(met: Sequence[bool]) -> str:
    """The share-of-seeds convention: every seed → agree, none → disagree, some → inconclusive."""
    return AGREE if all(met) else DISAGREE if not any(met) else INCONCLUSIVE


@dataclass(frozen=True)
class EachSeed(Rule):
    """A condition judged seed by seed (``condition`` says it): agree when every seed meets it, disagree when none
    does, inconclusive when the seeds split."""

    condition: str

    @property
    def sentence(self) -> str:
        return f"agree if {self.condition} on every seed, disagree if on none, inconclusive if the seeds split"

    def kind(self, met: Sequence[bool]) -> str:
        return _share(list(met))


_OPS = {"≥": lambda x, b: x >= b, ">": lambda x, b: x > b, "≤": lambda x, b: x <= b, "<": lambda x, b: x < b}


@dataclass(frozen=True)
class EverySeed(Rule):
    """A bound every seed must meet, ``value op bound`` with ``op`` one of ≥ > ≤ <; agree when every seed meets it,
    disagree when none does, inconclusive when the seeds straddle it."""

    bound: float
    op: str = "≥"
    what: str = "it"

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown comparison {self.op!r}: one of {' '.join(_OPS)}")

    @property
    def sentence(self) -> str:
        return (f"agree if {self.what} is {self.op} {_n(self.bound)} on every seed, disagree if on none, inconclusive "
                "if the seeds straddle it")

    def meets(self, x: float) -> bool:
        return bool(_OPS[self.op](x, self.bound))

    def kind(self, m: Measure) -> str:
        return _share([self.meets(v) for v in (m.values or (m.value,))])


@dataclass(frozen=True)
class Ordered(Rule):
    """``lower``'s quantity below ``upper``'s: agree when its interval lies wholly below, disagree when wholly above,
    inconclusive when the intervals overlap, whichever way the means fall (without intervals the means decide)."""

    lower: str
    upper: str

    @property
    def sentence(self) -> str:
        return (f"agree if {self.lower}'s interval lies below {self.upper}'s, disagree if above, inconclusive if "
                "they overlap")

    def kind(self, a: Measure, b: Measure) -> str:
        if a.ci is None or b.ci is None:
            return AGREE if a.value < b.value else DISAGREE
        if a.ci[1] < b.ci[0]:
            return AGREE
        if a.ci[0] > b.ci[1]:
            return DISAGREE
        return INCONCLUSIVE


@dataclass(frozen=True)
class FloorShare(Rule):
    """A model's error as a share of the context-blind floor (the best a model that ignores its context does):
    ``below`` — it learns the task, ``mean < fraction · floor``; else it fails it, ``mean ≥ fraction · floor``."""

    fraction: float
    below: bool = True

    @property
    def sentence(self) -> str:
        side = "below" if self.below else "at least"
        return f"agree if {side} {self.fraction:.0%} of the context-blind floor"

    def kind(self, m: Measure, floor: float) -> str:
        ok = m.value < self.fraction * floor if self.below else m.value >= self.fraction * floor
        return AGREE if ok else DISAGREE


@dataclass(frozen=True)
class AtLeast(Rule):
    """Our mean at least ``bound``: ``mean ≥ bound``."""

    bound: float
    what: str = "our mean"

    @property
    def sentence(self) -> str:
        return f"agree if {self.what} is at least {_n(self.bound)}"

    def kind(self, m: Measure) -> str:
        return AGREE if m.value >= self.bound else DISAGREE


@dataclass(frozen=True)
class Within(Rule):
    """Our mean within ``tolerance`` of ``target``: ``|mean − target| ≤ tolerance`` (``relative``: ``tolerance ·
    |target|``)."""

    target: float
    tolerance: float
    what: str = ""
    relative: bool = False

    @property
    def sentence(self) -> str:
        tol = f"{self.tolerance:.0%}" if self.relative else _n(self.tolerance)
        return f"agree if our mean is within {tol} of {self.what or _n(self.target)}"

    def kind(self, m: Measure) -> str:
        tol = self.tolerance * abs(self.target) if self.relative else self.tolerance
        return AGREE if abs(m.value - self.target) <= tol else DISAGREE


RULES = (AtMost, IntervalBelow, IntervalAbove, EachSeed, EverySeed, Ordered, FloorShare, AtLeast, Within)
"""The vocabulary, for the tests that check each rule on hand-computed cases."""
