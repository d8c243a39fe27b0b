"""The rules that turn our numbers into a verdict, as objects that judge *and* write their own sentence.

A claim's rule is written once: the object a claim is registered with (``claim(..., rule=EveryCell(...))``)
gives both the sentence printed as the claim's rule and the raw verdict its ``assess`` returns, so the two cannot
drift apart.  The conventions they implement are stated once, in :data:`windtunnel.claims.verdicts.CONVENTIONS`: an error figure
met at 1.5× (:class:`AtMost`); a bound on an interval (:class:`IntervalBelow`, :class:`IntervalAbove`); a share of
seeds (:class:`EverySeed`, :class:`EachSeed`); an ordered pair (:class:`Ordered`); a share of the context-blind floor
for what "learns" and "fails" mean (:class:`FloorShare`); compound rules (:class:`All`: agree when every part agrees,
disagree when any disagrees, else inconclusive; :class:`Every`: one condition on each of several items).  Wherever a
rule leaves a reading unsettled, it is *inconclusive* only if the estimate and most seeds point the papers' way
(:func:`~windtunnel.claims.verdicts.leans`), and a disagreement otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from .evidence import Measure
from .verdicts import AGREE, DISAGREE, INCONCLUSIVE, leans

ERROR_FACTOR = 1.5
"""An error claim agrees when our error is at most this multiple of the papers' figure (or below it)."""


def _n(x: float) -> str:
    return f"{x:g}"


class Rule:
    """A rule: :attr:`sentence` says it, :meth:`kind` applies it (``AGREE``, ``DISAGREE`` or ``INCONCLUSIVE``);
    :attr:`condition` is what must hold for it to agree, the phrase a compound rule (:class:`All`, :class:`Every`)
    joins; :attr:`three_way` says whether it can be inconclusive."""

    three_way: ClassVar[bool] = False

    @property
    def condition(self) -> str:  # pragma: no cover - every rule defines it
        raise NotImplementedError

    @property
    def sentence(self) -> str:
        return f"agree if {self.condition}"

    def __str__(self) -> str:
        return self.sentence


@dataclass(frozen=True)
class AtMost(Rule):
    """Our mean at most ``factor`` × the papers' ``paper`` (an error claim): ``mean ≤ factor · paper``."""

    paper: float
    unit: str = "bits"
    factor: float = ERROR_FACTOR
    of: str = "the papers'"
    what: str = "our mean"

    @property
    def condition(self) -> str:
        times = "" if self.factor == 1 else f"{_n(self.factor)}× "
        of = f"{self.of} " if self.of else ""
        return f"{self.what} is at most {times}{of}{_n(self.paper)} {self.unit}".rstrip()

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
    of: str = "our"
    below: ClassVar[bool] = True
    three_way: ClassVar[bool] = True

    @property
    def condition(self) -> str:
        b = f"{_n(self.bound)} {self.unit}".rstrip()
        return f"{self.of} 95% interval over {self.over} lies {'below' if self.below else 'above'} {b}"

    @property
    def sentence(self) -> str:
        other = "at or above" if self.below else "at or below"
        return (f"agree if {self.condition}, disagree if it lies {other} it; if it holds it, inconclusive where the mean "
                "and most seeds are on the claimed side, else disagree")

    def kind(self, m: Measure) -> str:
        lo, hi = m.ci if m.ci else (m.value, m.value)
        sign = 1.0 if self.below else -1.0  # above the bound is the mirror image of below it
        lo, hi = sorted((sign * lo, sign * hi))
        bound = sign * self.bound
        if hi < bound:
            return AGREE
        if lo >= bound:
            return DISAGREE
        seeds = [sign * v < bound for v in (m.values or (m.value,))]
        return INCONCLUSIVE if leans(seeds, sign * m.value < bound) else DISAGREE


@dataclass(frozen=True)
class IntervalAbove(IntervalBelow):
    """Our 95% interval over seeds above ``bound``: lower end ``> bound`` agrees, upper end ``≤ bound`` disagrees,
    an interval that holds the bound is inconclusive (one seed: its value decides)."""

    below: ClassVar[bool] = False


def _share(met: Sequence[bool], estimate_meets: bool | None = None) -> str:
    """The share-of-seeds convention: every seed → agree, none → disagree; split → inconclusive where most seeds
    (and the estimate, where there is one) meet it, else disagree."""
    met = list(met)
    if all(met):
        return AGREE
    return INCONCLUSIVE if any(met) and leans(met, estimate_meets) else DISAGREE


@dataclass(frozen=True)
class EachSeed(Rule):
    """A condition judged seed by seed (``condition`` says it): agree when every seed meets it, disagree when none
    does, inconclusive when the seeds split."""

    holds: str
    three_way: ClassVar[bool] = True

    @property
    def condition(self) -> str:
        return f"{self.holds} on every seed"

    @property
    def sentence(self) -> str:
        return f"agree if {self.condition}, disagree if on none; if the seeds split, inconclusive where most meet it"

    def kind(self, met: Sequence[bool]) -> str:
        return _share(list(met))


_OPS = {"≥": lambda x, b: x >= b, ">": lambda x, b: x > b, "≤": lambda x, b: x <= b, "<": lambda x, b: x < b}


def _check_op(op: str) -> None:
    if op not in _OPS:
        raise ValueError(f"unknown comparison {op!r}: one of {' '.join(_OPS)}")


@dataclass(frozen=True)
class EverySeed(Rule):
    """A bound every seed must meet, ``value op bound`` with ``op`` one of ≥ > ≤ <; agree when every seed meets it,
    disagree when none does, inconclusive when the seeds straddle it."""

    bound: float
    op: str = "≥"
    what: str = "it"
    three_way: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_op(self.op)

    @property
    def condition(self) -> str:
        return f"{self.what} is {self.op} {_n(self.bound)} on every seed"

    @property
    def sentence(self) -> str:
        return (f"agree if {self.condition}, disagree if on none; if the seeds straddle it, inconclusive where most "
                "seeds and the mean meet it")

    def meets(self, x: float) -> bool:
        return bool(_OPS[self.op](x, self.bound))

    def kind(self, m: Measure) -> str:
        return _share([self.meets(v) for v in (m.values or (m.value,))], self.meets(m.value))


@dataclass(frozen=True)
class Ordered(Rule):
    """``lower``'s quantity below ``upper``'s: agree when its interval lies wholly below, disagree when wholly above,
    inconclusive when the intervals overlap, whichever way the means fall (without intervals the means decide)."""

    lower: str
    upper: str
    three_way: ClassVar[bool] = True

    @property
    def condition(self) -> str:
        return f"{self.lower}'s interval lies below {self.upper}'s"

    @property
    def sentence(self) -> str:
        return (f"agree if {self.condition}, disagree if above; if they overlap, inconclusive where the means (and "
                "most seeds, paired) are ordered so, else disagree")

    def kind(self, a: Measure, b: Measure) -> str:
        if a.ci is None or b.ci is None:
            return AGREE if a.value < b.value else DISAGREE
        if a.ci[1] < b.ci[0]:
            return AGREE
        if a.ci[0] > b.ci[1]:
            return DISAGREE
        # overlapping: the means, and the seeds paired where both have one value per seed, must point the papers' way
        paired = [x < y for x, y in zip(a.values, b.values)] if a.values and len(a.values) == len(b.values) else []
        return INCONCLUSIVE if a.value < b.value and (not paired or leans(paired)) else DISAGREE


@dataclass(frozen=True)
class NotBelow(Rule):
    """``first`` not below ``second`` (a ≥ claim): disagree only where ``first``'s interval lies wholly below
    ``second``'s, agree otherwise (without intervals the means decide)."""

    first: str
    second: str

    @property
    def condition(self) -> str:
        return f"{self.first} is not below {self.second} (refuted only where its interval lies wholly below)"

    def kind(self, a: Measure, b: Measure) -> str:
        below = a.ci[1] < b.ci[0] if a.ci is not None and b.ci is not None else a.value < b.value
        return DISAGREE if below else AGREE


@dataclass(frozen=True)
class FloorShare(Rule):
    """A model's error as a share of a floor — by default the context-blind floor (the best a model that ignores its
    context does), or another reference's error named by ``floor`` (the header-blind optimum: the best a model that
    ignores the episode's header does): ``below`` — it learns the task, ``mean < fraction · floor``; else it fails
    it, ``mean ≥ fraction · floor``."""

    fraction: float
    below: bool = True
    what: str = ""
    floor: str = "the context-blind floor"

    @property
    def condition(self) -> str:
        side = "below" if self.below else "at least"
        return f"{self.what + ' is ' if self.what else ''}{side} {self.fraction:.0%} of {self.floor}"

    def kind(self, m: Measure, floor: float) -> str:
        ok = m.value < self.fraction * floor if self.below else m.value >= self.fraction * floor
        return AGREE if ok else DISAGREE


@dataclass(frozen=True)
class AtLeast(Rule):
    """Our mean at least ``bound``: ``mean ≥ bound``."""

    bound: float
    what: str = "our mean"

    @property
    def condition(self) -> str:
        return f"{self.what} is at least {_n(self.bound)}"

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
    subject: str = "our mean"

    @property
    def condition(self) -> str:
        tol = f"{self.tolerance:.0%}" if self.relative else _n(self.tolerance)
        return f"{self.subject} is within {tol} of {self.what or _n(self.target)}"

    def kind(self, m: Measure) -> str:
        tol = self.tolerance * abs(self.target) if self.relative else self.tolerance
        return AGREE if abs(m.value - self.target) <= tol else DISAGREE


@dataclass(frozen=True)
class Compare(Rule):
    """One number against a bound, ``what op than`` with ``op`` one of ≥ > ≤ <: ``than`` a number, or the name of
    another quantity whose value :meth:`kind` is given."""

    what: str
    op: str
    than: float | str
    unit: str = ""

    def __post_init__(self) -> None:
        _check_op(self.op)

    @property
    def condition(self) -> str:
        than = self.than if isinstance(self.than, str) else _n(self.than)
        return f"{self.what} {self.op} {than} {self.unit}".rstrip()

    def kind(self, x: float, than: float | None = None) -> str:
        if than is None:
            if isinstance(self.than, str):
                raise TypeError(f"{self.condition}: the value of {self.than!r} is needed")
            than = self.than
        return AGREE if _OPS[self.op](x, than) else DISAGREE


@dataclass(frozen=True)
class Near(Rule):
    """One number within ``tolerance`` of another quantity: ``|x − y| ≤ tolerance`` (``relative``: ``tolerance ·
    |y|``)."""

    what: str
    of: str
    tolerance: float
    relative: bool = False

    @property
    def condition(self) -> str:
        tol = f"{self.tolerance:.0%}" if self.relative else _n(self.tolerance)
        return f"{self.what} is within {tol} of {self.of}"

    def kind(self, x: float, y: float) -> str:
        tol = self.tolerance * abs(y) if self.relative else self.tolerance
        return AGREE if abs(x - y) <= tol else DISAGREE


def _interval(m: Measure) -> tuple[float, float]:
    """A measure's 95% interval; without one (a single sample), its value at both ends."""
    return (m.ci[0], m.ci[1]) if m.ci else (m.value, m.value)


@dataclass(frozen=True)
class IntervalHolds(Rule):
    """No effect: agree when the 95% interval holds ``value``, disagree when it excludes it (one sample: its value
    decides)."""

    value: float = 0.0
    of: str = "its"
    holds: ClassVar[bool] = True

    @property
    def condition(self) -> str:
        return f"{self.of} 95% interval {'holds' if self.holds else 'excludes'} {_n(self.value)}"

    def kind(self, m: Measure) -> str:
        lo, hi = _interval(m)
        return AGREE if (lo <= self.value <= hi) == self.holds else DISAGREE


@dataclass(frozen=True)
class IntervalExcludes(IntervalHolds):
    """An effect: agree when the 95% interval excludes ``value``, disagree when it holds it."""

    holds: ClassVar[bool] = False


@dataclass(frozen=True)
class IntervalMeets(Rule):
    """The same regime as the papers: agree when the 95% interval overlaps the band ``[lo, hi]``."""

    lo: float
    hi: float
    unit: str = ""

    @property
    def condition(self) -> str:
        return f"our 95% interval overlaps [{_n(self.lo)}, {_n(self.hi)}] {self.unit}".rstrip()

    def kind(self, m: Measure) -> str:
        lo, hi = _interval(m)
        return AGREE if hi >= self.lo and lo <= self.hi else DISAGREE


@dataclass(frozen=True)
class IntervalsOverlap(Rule):
    """Two readings indistinguishable: agree when their 95% intervals overlap."""

    first: str
    second: str

    @property
    def condition(self) -> str:
        return f"the 95% intervals of {self.first} and {self.second} overlap"

    def kind(self, a: Measure, b: Measure) -> str:
        (alo, ahi), (blo, bhi) = _interval(a), _interval(b)
        return AGREE if alo <= bhi and blo <= ahi else DISAGREE


@dataclass(frozen=True)
class BelowNulls(Rule):
    """A trained statistic against its nulls, seed by seed: agree when every seed's value is below every null of
    its seed, disagree when every seed's is above them all, inconclusive otherwise."""

    what: str = "trained value"
    nulls: str = "both nulls"
    three_way: ClassVar[bool] = True

    @property
    def condition(self) -> str:
        return f"every seed's {self.what} is below {self.nulls}"

    @property
    def sentence(self) -> str:
        return f"agree if {self.condition}, disagree if none is; if the seeds split, inconclusive where most are below"

    def kind(self, values: Sequence[float], nulls: Sequence[Sequence[float]]) -> str:
        if not values or len(values) != len(nulls):
            raise ValueError("one set of nulls per seed")
        below = [v < min(n) for v, n in zip(values, nulls)]
        return _share(below)


def conjoin(kinds: Sequence[str]) -> str:
    """The compound convention: agree when every part agrees, disagree when any disagrees, else inconclusive."""
    if not kinds:
        raise ValueError("a compound rule of no parts")
    return AGREE if all(k == AGREE for k in kinds) else DISAGREE if DISAGREE in kinds else INCONCLUSIVE


def split_join(kinds: Sequence[str]) -> str:
    """The share convention over items: agree when every item agrees; inconclusive where most items do not disagree
    (the items split as seeds do), else disagree."""
    if not kinds:
        raise ValueError("a join of no items")
    if all(k == AGREE for k in kinds):
        return AGREE
    return INCONCLUSIVE if leans([k != DISAGREE for k in kinds]) else DISAGREE


def _apply(rule: Rule, arg: object) -> str:
    return rule.kind(*arg) if isinstance(arg, tuple) else rule.kind(arg)  # type: ignore[attr-defined]


def _may_be_inconclusive(parts: Sequence[Rule]) -> str:
    return "; disagree if any fails, inconclusive otherwise" if any(p.three_way for p in parts) else ""


@dataclass(frozen=True, init=False)
class All(Rule):
    """Several conditions together, each a rule: :meth:`kind` takes one argument per part (a tuple is spread into
    that part's ``kind``) and joins the parts' verdicts by :func:`conjoin`."""

    parts: tuple[Rule, ...]

    def __init__(self, *parts: Rule) -> None:
        if len(parts) < 2:
            raise ValueError("a conjunction of at least two rules")
        object.__setattr__(self, "parts", parts)

    @property
    def three_way(self) -> bool:  # type: ignore[override]
        return any(p.three_way for p in self.parts)

    @property
    def condition(self) -> str:
        conds = [p.condition for p in self.parts]
        return ", ".join(conds[:-1]) + " and " + conds[-1]

    @property
    def sentence(self) -> str:
        return f"agree if {self.condition}{_may_be_inconclusive(self.parts)}"

    def kind(self, *args: object) -> str:
        if len(args) != len(self.parts):
            raise ValueError(f"{len(self.parts)} parts, {len(args)} arguments")
        return conjoin([_apply(p, a) for p, a in zip(self.parts, args)])


@dataclass(frozen=True)
class Every(Rule):
    """One rule on each of several items (each model, each edited layer, each column — ``over`` names them, ``note``
    adds which is shown): :meth:`kind` takes the items' arguments and joins their verdicts by :func:`conjoin`; with
    ``split``, as seeds are joined instead (:func:`split_join`: items that split leave the claim inconclusive where most
    of them do not fail it, and disagree otherwise — one model of two meeting it is not a majority)."""

    rule: Rule
    over: str
    note: str = ""
    split: bool = False

    @property
    def three_way(self) -> bool:  # type: ignore[override]
        return self.rule.three_way or self.split

    @property
    def condition(self) -> str:
        return f"{self.rule.condition} on each {self.over}" + (f" ({self.note})" if self.note else "")

    @property
    def sentence(self) -> str:
        if self.split:
            return (f"agree if {self.condition}; if they split, inconclusive where most do not fail it, else "
                    "disagree")
        return f"agree if {self.condition}{_may_be_inconclusive((self.rule,))}"

    def kind(self, items: Sequence[object]) -> str:
        kinds = [_apply(self.rule, a) for a in items]
        return split_join(kinds) if self.split else conjoin(kinds)


@dataclass(frozen=True)
class Follows(Rule):
    """A claim that re-reads another claim's measurement (a *derived* claim): its verdict is that claim's raw
    verdict, whatever it is."""

    claim: str
    three_way: ClassVar[bool] = True

    @property
    def condition(self) -> str:
        return f"{self.claim} agrees"

    @property
    def sentence(self) -> str:
        return f"agree, disagree or stay inconclusive as {self.claim} does (the same measurement)"

    def kind(self, followed: str) -> str:
        return followed


RULES = (AtMost, IntervalBelow, IntervalAbove, EachSeed, EverySeed, Ordered, NotBelow, FloorShare, AtLeast, Within, Compare, Near,
         IntervalHolds, IntervalExcludes, IntervalMeets, IntervalsOverlap, BelowNulls, All, Every, Follows)
"""The vocabulary, for the tests that check each rule on hand-computed cases."""
