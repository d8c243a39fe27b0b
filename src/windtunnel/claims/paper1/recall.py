"""Paper I's associative recall (A18–A23): accuracy by architecture on the recall column and up the binding
ladder to the papers' 64 pairs, and how long each architecture takes to bind."""

from __future__ import annotations

import math

from ...run import grid
from ...run.grid import SEEDS
from ..base import Verdict, claim, missing, reads
from ..evidence import Evidence, Measure
from ..rules import All, EachSeed, EverySeed, NotBelow, Ordered, Within
from .common import MAMBA_BELOW, REPRO, TABLE, cited, lower, pct, with_files
from .controls import rung16_note


A18_RULE = EverySeed(0.99, "≥", "the accuracy")


@claim("A18", "I", "v3", "primitives table", "The transformer solves associative recall", "100%", "secondary",
       "accuracy, transformer, 3 seeds, at the largest store measured (the binding ladder, 8 pairs over 16 keys up to "
       "the papers' 64 over 256; the recall column's 8 pairs beside it)", A18_RULE, f"{TABLE}; {REPRO}",
       rule_note="judged at the largest store measured, the nearest to the papers' recall",
       cells=reads("recall_p16", "recall_p32", "recall_p64"))
def _a18(ev: Evidence) -> Verdict:
    column = ev.table("recall", "transformer", "accuracy")
    if column is None:
        return missing("table cells")
    at_column = f"at the column's {BINDING_LADDER[0][1]} pairs: {pct(column)} ({_seeds_pct(column)})"
    ladder = [(p, m) for col, p in BINDING_LADDER[1:]
              if (m := ev.eval_metric(col, "transformer", SEEDS, "accuracy")) is not None]
    if not ladder:
        return Verdict(A18_RULE.kind(column), column, f"{at_column}, not the papers' 64 pairs over 256 tokens")
    pairs, m = ladder[-1]
    at = f"judged at {pairs} of the papers' 64 pairs" if pairs < 64 else "judged at the papers' 64 pairs"
    grown = ", ".join(f"{p}: {pct(x)}" for p, x in ladder)
    return Verdict(A18_RULE.kind(m), with_files(m, column, *(x for _, x in ladder)),
                   f"{at}, the largest store measured: {pct(m)} ({_seeds_pct(m)}); {at_column}; as the store grows "
                   f"(stored pairs: accuracy): {grown}")


def _seeds_pct(m: Measure) -> str:
    return "seeds " + ", ".join(f"{v:.1%}" for v in m.values) if m.values else "one value"


@claim("A19", "I", "v3", "abstract / primitives table", "Mamba struggles with random-access binding (recall limited)",
       "qualitative (97.8%: secondary)", "paper", "accuracy, mamba vs transformer, 3 seeds, at the largest store both are measured at (the "
       "binding ladder, 8 pairs over 16 keys up to the papers' 64 over 256; the recall column's 8 pairs beside it)",
       MAMBA_BELOW, f"{TABLE}; {REPRO}", rule_note="the direction is judged, at the largest store measured (the "
       "nearest to the papers' recall), not the 97.8% figure, which is compared beside it",
       cells=reads("recall", "recall_p16", "recall_p32", "recall_p64") +
             reads("recall", "recall_p16", "recall_p16_sched64", "recall_p32", "recall_p64", arch="lstm") +
             reads("recall", "recall_p16", "recall_p16_sched64", "recall_p16_state64", "recall_p32", "recall_p64",
                   arch="mamba"))
def _a19(ev: Evidence) -> Verdict:
    ma, tr = ev.table("recall", "mamba", "accuracy"), ev.table("recall", "transformer", "accuracy")
    if ma is None or tr is None:
        return missing("table cells")
    column = f"Mamba per seed {', '.join(f'{v:.0%}' for v in ma.values)}, transformer {pct(tr)}"
    ladder = _binding_ladder(ev)  # the same comparison as the store grows (A23's control), beside the column's
    grown = f"; as the store grows (recall accuracy by stored pairs, 3 seeds): {ladder}" if ladder else ""
    state, state_measures = rung16_note(ev)
    grown += state
    rung = largest_shared_rung(ev, "mamba", "transformer")
    if rung is None:
        return Verdict(lower(ma, tr), with_files(ma, tr, *state_measures),
                       f"at the column's {BINDING_LADDER[0][1]} pairs: {column}{grown}")
    pairs, mm, tm = rung
    # the papers' 97.8% is Mamba's own accuracy at their 64 pairs: "struggles" there means slow, not failing
    below = (f"; the papers' Mamba reaches 97.8% at 64 pairs, so here it struggles far more, already at {pairs}"
             if mm.ci and mm.ci[1] < 0.978 else "")
    at = f"judged at {pairs} of the papers' 64 pairs" if pairs < 64 else "judged at the papers' 64 pairs"
    return Verdict(lower(mm, tm), with_files(mm, tm, ma, tr, *state_measures),
                   f"{at}, the largest store both are measured at: mamba {pct(mm)}, transformer {pct(tm)}{below}; "
                   f"at the column's {BINDING_LADDER[0][1]} pairs: {column}{grown}")


def largest_shared_rung(ev: Evidence, arch: str, other: str) -> tuple[int, Measure, Measure] | None:
    """``(pairs, arch's accuracy, other's accuracy)`` at the largest store of the binding ladder beyond the
    recall column's where both architectures have all three seeds committed; ``None`` where there is none."""
    for column, pairs in reversed(BINDING_LADDER[1:]):
        a, b = (ev.eval_metric(column, x, SEEDS, "accuracy") for x in (arch, other))
        if a is not None and b is not None:
            return pairs, a, b
    return None


BOUND_GAP = 0.05
"""A recall run has bound once its training Bayes gap (nats per scored position) stays at or below this."""


def _steps_to_bind(metrics_jsonl: str) -> float:
    """The first logged step from which the training Bayes gap stays ≤ :data:`BOUND_GAP` (inf: never)."""
    import json

    rows = [json.loads(line) for line in metrics_jsonl.splitlines() if line.strip()]
    gaps = [(r["step"], r["bayes_gap"]) for r in rows if isinstance(r.get("bayes_gap"), (int, float))]
    for i, (step, _) in enumerate(gaps):
        if all(g <= BOUND_GAP for _, g in gaps[i:]):
            return float(step)
    return math.inf


A20_RULE = All(EachSeed("the Mamba run binds"),
               Within(2.5, 0.5, "2.5×", relative=True, subject="the ratio of medians (mamba / transformer)"))
""""Needs ≈2.5× more training to bind" presupposes that Mamba binds: a seed that never does is not 2.5× slower, and
an infinite ratio would meet a one-sided bar as a Mamba that learns nothing would."""


@claim("A20", "I", "v3", "primitives table", "Mamba needs ≈2.5× more training than the transformer to bind",
       "2.5×", "secondary", "steps until the training Bayes gap stays ≤ 0.05 nats (recall, logged every 25 steps), "
       "median over 3 seeds, mamba / transformer",
       A20_RULE, REPRO, threshold="binding at a Bayes gap of 0.05 nats, and the ratio within 50% of 2.5×",
       cells=reads("recall") + reads("recall", arch="mamba"))
def _a20(ev: Evidence) -> Verdict:
    out = {}
    for arch in ("transformer", "mamba"):
        cells = ev.cells("recall", arch, SEEDS)
        if cells is None:
            return missing(f"recall {arch} cells")
        curves = [ev.text(f"{rel}/metrics.jsonl") for rel, _ in cells]
        if any(c is None for c in curves):
            return missing(f"recall {arch} training curves")
        out[arch] = sorted(_steps_to_bind(c) for c in curves if c is not None)
    med = {a: v[len(v) // 2] for a, v in out.items()}
    ratio = med["mamba"] / med["transformer"] if med["transformer"] > 0 else math.inf
    files = tuple(f"{ev.preset}/cells/recall-{a}-s{s}/metrics.jsonl" for a in out for s in SEEDS)
    binds = [math.isfinite(v) for v in out["mamba"]]
    return Verdict(A20_RULE.kind(binds, Measure(ratio)), Measure(ratio, None, len(SEEDS), (), files),
                   f"steps to bind: transformer {out['transformer']}, mamba {out['mamba']}"
                   + ("" if all(binds) else f"; {binds.count(False)} Mamba seed(s) never bind"))


A21_RULE = Within(1 / 8, 0.05, "chance (1 / 8 stored values)")


@claim("A21", "I", "v3", "abstract; primitives table", "The LSTM's recall is at chance",
       "only accumulation (0.5%: secondary)", "paper",
       "accuracy, lstm, 3 seeds, against chance = 1 / pairs (8)",
       A21_RULE, TABLE, asserts_failure=True, rule_note="the papers' 0.5% is chance at their size",
       threshold="within 0.05 of chance (in place of 0.5%)")
def lstm_recall(ev: Evidence) -> Verdict:
    """A21: the LSTM's recall accuracy against chance (A24 reads it too)."""
    m = ev.table("recall", "lstm", "accuracy")
    if m is None:
        return missing("table cell")
    return Verdict(A21_RULE.kind(m), m, f"chance among the 8 stored values is {A21_RULE.target:.1%}")


A22_RULE = All(NotBelow("the transformer", "Mamba"), Ordered("the LSTM", "Mamba"))


@claim("A22", "I", "v3", "primitives table", "Recall ordering: transformer ≥ Mamba > LSTM", "100% ≥ 97.8% > 0.5%",
       "secondary", "accuracy, 3 seeds, at the largest store all three are measured at (as A19: the binding ladder up "
       "to the papers' 64 pairs over 256; the recall column's 8 pairs beside it)", A22_RULE, f"{TABLE}; {REPRO}",
       cells=reads("recall", "recall_p16", "recall_p32", "recall_p64") +
             reads("recall", "recall_p16", "recall_p32", "recall_p64", arch="lstm") +
             reads("recall", "recall_p16", "recall_p32", "recall_p64", arch="mamba"))
def _a22(ev: Evidence) -> Verdict:
    t, m, l = (ev.table("recall", a, "accuracy") for a in ("transformer", "mamba", "lstm"))
    if t is None or m is None or l is None:
        return missing("table cells")
    beside, pairs = f"; at 8 pairs: {t.value:.1%} / {m.value:.1%} / {l.value:.1%}", 8
    for column, p in reversed(BINDING_LADDER[1:]):
        got = [ev.eval_metric(column, a, SEEDS, "accuracy") for a in ("transformer", "mamba", "lstm")]
        if all(x is not None for x in got):
            (t, m, l), pairs = got, p
            break
    else:
        beside = ""
    # transformer ≥ Mamba: refuted only where Mamba lies wholly above; Mamba > LSTM: the LSTM wholly below
    first, second = A22_RULE.parts[0].kind(t, m), A22_RULE.parts[1].kind(l, m)
    kind = A22_RULE.kind((t, m), (l, m))
    ladder = _binding_ladder(ev)
    return Verdict(kind, f"at {pairs} pairs {t.value:.1%} / {m.value:.1%} / {l.value:.1%}",
                   f"transformer ≥ Mamba: {first}; Mamba > LSTM: {second}{beside}"
                   + (f"; recall accuracy by stored pairs (3 seeds): {ladder}" if ladder else ""), files=cited(t, m, l))


A23_RULE = All(Ordered("Mamba's recall accuracy", "the transformer"),
               Ordered("the transformer's sawtooth error", "Mamba"))
"""Each comparison by its intervals over seeds (a mean never decides a claim its seeds split on)."""


@claim("A23", "I", "v3", "abstract", "Mamba struggles with binding; only the transformer realises all three primitives",
       "qualitative", "paper", "mamba vs transformer on both binding columns (recall accuracy at the largest store both "
       "are measured at, as A19; sawtooth error)",
       A23_RULE, f"{TABLE}; {REPRO}",
       cells=reads("recall", "recall_p16", "recall_p32", "recall_p64") +
             reads("recall", "recall_p16", "recall_p32", "recall_p64", arch="lstm") +
             reads("recall", "recall_p16", "recall_p32", "recall_p64", arch="mamba"))
def _a23(ev: Evidence) -> Verdict:
    mr, tr = ev.table("recall", "mamba", "accuracy"), ev.table("recall", "transformer", "accuracy")
    ms, ts = (ev.table("bijection_replacement", a, "entropy_mae_curve") for a in ("mamba", "transformer"))
    if None in (mr, tr, ms, ts):
        return missing("table cells")
    pairs = BINDING_LADDER[0][1]
    rung = largest_shared_rung(ev, "mamba", "transformer")
    if rung is not None:
        pairs, mr, tr = rung
    ladder = _binding_ladder(ev)
    return Verdict(A23_RULE.kind((mr, tr), (ts, ms)),
                   f"recall at {pairs} pairs {mr.value:.1%} vs {tr.value:.1%}; sawtooth {ms.value:.4f} vs {ts.value:.4f} bits",
                   f"binding vs size, recall accuracy by stored pairs (3 seeds): {ladder}" if ladder else
                   "binding was tested at 8 pairs over 16 tokens only (the papers: 64 over 256)",
                   files=cited(mr, tr, ms, ts))


BINDING_LADDER = (("recall", 8), *((f"recall_p{p}", p) for p in grid.RECALL_PAIRS))
"""The binding-vs-size cells: (column, stored pairs), the recall column's 8 pairs over 16 keys first."""


def _binding_ladder(ev: Evidence) -> str:
    """Recall accuracy of each sequence architecture at each store size whose three seeds are committed
    (``""`` when no size beyond the column's is)."""
    rows = []
    for arch in ("transformer", "mamba", "lstm"):
        got = [(p, ev.eval_metric(col, arch, SEEDS, "accuracy")) for col, p in BINDING_LADDER]
        got = [(p, m) for p, m in got if m is not None]
        if any(p > BINDING_LADDER[0][1] for p, _ in got):
            rows.append(f"{arch} " + ", ".join(f"{p}: {pct(m)}" for p, m in got))
    return "; ".join(rows)
