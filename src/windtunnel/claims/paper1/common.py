"""What Paper I's claims share: the commands their cells come from, the context-blind floor a model fails at or
learns below, the papers' error convention, and the helpers that cite the files a verdict compares."""

from __future__ import annotations

from typing import Any

from ...run.grid import SEEDS
from ..base import AGREE, Verdict, missing
from ..evidence import Evidence, Measure, geometry_stat
from ..rules import AtMost, FloorShare, Ordered


TABLE = "windtunnel table --preset quick --seeds 3"
REPRO = "windtunnel reproduce paper1 --preset quick"
FLOOR_FRACTION = 0.9
"""A model 'fails' a task when its error is at least this fraction of the context-blind floor."""
LEARNED_FRACTION = 0.1
"""A model 'learns' a task when its error is below this fraction of the context-blind floor."""
FAILS = FloorShare(FLOOR_FRACTION, below=False)
LEARNS = FloorShare(LEARNED_FRACTION)


def error_rule(ours: Measure, paper: float, unit: str = "bits") -> tuple[bool, str]:
    """:class:`~windtunnel.claims.rules.AtMost` on ``ours``: whether it holds, and its reading."""
    rule = AtMost(paper, unit)
    return rule.kind(ours) == AGREE, rule.reading(ours)


def cited(*measures: Measure) -> tuple[str, ...]:
    """The files behind several measures, each once, in order: what a verdict that compares them cites."""
    return tuple(dict.fromkeys(f for m in measures for f in m.files))


def with_files(m: Measure, *others: Measure) -> Measure:
    """``m`` citing the files of the measures it was compared with as well."""
    return Measure(m.value, m.ci, m.seeds, m.values, cited(m, *others))


def context_blind_floor(ev: Evidence, task: str, metric: str) -> float | None:
    """The context-blind optimum's ``metric`` on ``task`` (the primitives table's references), or ``None``."""
    return ev.reference(task, "context_blind", metric)


def fails(ev: Evidence, task: str, arch: str, metric: str) -> Verdict:
    """Whether ``arch`` fails ``task`` in the primitives table: its error ≥ :data:`FLOOR_FRACTION` of the floor."""
    m = ev.table(task, arch, metric)
    floor = context_blind_floor(ev, task, metric)
    if m is None or floor is None:
        return missing("table cell")
    frac = m.value / floor
    return Verdict(FAILS.kind(m, floor), m,
                   f"{frac:.0%} of the context-blind floor {floor:.3f} (fails when ≥ {FLOOR_FRACTION:.0%})")


def learns(ev: Evidence, task: str, arch: str, metric: str, paper: float) -> Verdict:
    """Whether ``arch`` learns ``task`` in the primitives table: its error < :data:`LEARNED_FRACTION` of the floor."""
    m = ev.table(task, arch, metric)
    floor = context_blind_floor(ev, task, metric)
    if m is None or floor is None:
        return missing("table cell")
    frac = m.value / floor
    return Verdict(LEARNS.kind(m, floor), m,
                   f"{frac:.1%} of the context-blind floor (learned when < {LEARNED_FRACTION:.0%}); "
                   f"{m.value / paper:.2g}× the papers' {paper:g}")


BY_CONSTRUCTION = ("the papers' MLP control works position by position, so it cannot go below the context-blind "
                   "floor: it fails by construction (an MLP that sees its prefix is A25's and A5's control)")


MAMBA_BELOW = Ordered("Mamba", "the transformer")


def lower(a: Measure, b: Measure) -> str:
    """Whether ``a`` lies below ``b``: :class:`~windtunnel.claims.rules.Ordered`'s symmetric judgement."""
    return Ordered("a", "b").kind(a, b)


def pct(m: Measure) -> str:
    """An accuracy as percentages, ``10% [1%, 19%]``."""
    return f"{m.value:.0%}" + (f" [{m.ci[0]:.0%}, {m.ci[1]:.0%}]" if m.ci else "")


def all_seeds(ev: Evidence, column: str, arch: str, key: str) -> list[Any] | None:
    """One summary entry of every seed's geometry.json (any type), or None unless all are committed."""
    cells = ev.cells(column, arch, SEEDS)
    if cells is None:
        return None
    out = []
    for rel, _ in cells:
        g = ev.json(f"{rel}/geometry.json")
        if g is None:
            return None
        out.append(geometry_stat(g, key))
    return out


def geometry_files(ev: Evidence, column: str, arch: str) -> tuple[str, ...]:
    """Each seed's ``geometry.json`` of ``column``'s cells for ``arch``: what a geometry verdict cites."""
    return tuple(f"{ev.folder(column, arch, s)}/geometry.json" for s in SEEDS)
