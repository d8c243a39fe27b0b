"""Paper I's claims across the primitives (A10, A24, A25): which architecture realises which primitive — the
MLP none (its error flat at the context-blind optimum), the LSTM only accumulation."""

from __future__ import annotations

from dataclasses import replace

from ..base import AGREE, DISAGREE, NOT_MEASURED, Control, Verdict, claim, missing
from ..evidence import Evidence
from ..rules import All, Every, FloorShare, Near
from .common import BY_CONSTRUCTION, FLOOR_FRACTION, LEARNED_FRACTION, TABLE, context_blind_floor, fails, learns
from .recall import A21_RULE, lstm_recall


A10_RULE = Every(Near("the MLP's KL", "the context-blind optimum", 0.05, relative=True), "column")


@claim("A10", "I", "v1", "§ results", "The MLP collapses to a position-averaged answer (its error is flat)",
       "qualitative", "secondary", "kl, mlp_pointwise vs the context-blind optimum, all four columns",
       A10_RULE, TABLE, asserts_failure=True,
       threshold="within 5% of the context-blind optimum", by_construction=BY_CONSTRUCTION)
def _a10(ev: Evidence) -> Verdict:
    pairs = []
    for task in ("bijection", "bijection_replacement", "hmm", "recall"):
        m, floor = ev.table(task, "mlp_pointwise", "kl"), context_blind_floor(ev, task, "kl")
        if m is None or floor is None:
            return missing("table cells")
        pairs.append((m.value, floor))
    worst = max(abs(x - f) / f for x, f in pairs)
    return Verdict(A10_RULE.kind(pairs), f"largest gap to the floor {worst:.1%}",
                   "four columns", files=("quick/table.json", "quick/references.json"))


A24_RULE = All(FloorShare(LEARNED_FRACTION, what="its bijection error"),
               FloorShare(FLOOR_FRACTION, below=False, what="its sawtooth error"),
               FloorShare(FLOOR_FRACTION, below=False, what="its HMM KL"),
               replace(A21_RULE, subject="its recall accuracy"))


@claim("A24", "I", "v3", "abstract", "LSTMs realise only accumulation", "qualitative", "paper",
       "lstm: bijection learned; sawtooth and HMM at the floor; recall at chance",
       A24_RULE, TABLE,
       threshold="below 10% / at least 90% of the floor, recall within 0.05 of chance")
def _a24(ev: Evidence) -> Verdict:
    parts = [learns(ev, "bijection", "lstm", "entropy_mae_curve", 0.009),
             fails(ev, "bijection_replacement", "lstm", "entropy_mae_curve"), fails(ev, "hmm", "lstm", "kl"),
             lstm_recall(ev)]
    if any(p.kind == NOT_MEASURED for p in parts):
        return missing("table cells")
    read = [(p.ours, context_blind_floor(ev, task, metric)) for p, (task, metric) in
            zip(parts, (("bijection", "entropy_mae_curve"), ("bijection_replacement", "entropy_mae_curve"), ("hmm", "kl")))]
    ok = A24_RULE.kind(*read, parts[3].ours) == AGREE
    files = tuple(dict.fromkeys(f for p in parts for f in p.cited))
    return Verdict(AGREE if ok else DISAGREE, "bijection learned; sawtooth, HMM floor; recall chance" if ok
                   else "; ".join(p.why for p in parts), files=files)


A25_RULE = Every(FloorShare(FLOOR_FRACTION, below=False, what="the MLP"), "column, for the per-position and the "
                 "windowed MLP")


@claim("A25", "I", "v1, v3", "abstract", "MLPs realise none of the primitives (flat architectures fail)", "qualitative",
       "paper", "mlp_pointwise (the authors' MLP control: per position, no mixing across positions) and the windowed "
       "MLP (mlp, which sees its recent prefix flattened) on all four columns",
       A25_RULE, TABLE, asserts_failure=True,
       rule_note="the per-position MLP cannot see the context, so it fails by construction; the windowed MLP is the "
       "control that asks whether an MLP given the context fails too",
       threshold="≥ 90% of the context-blind floor")
def _a25(ev: Evidence) -> Verdict:
    cols = {"bijection": "entropy_mae_curve", "bijection_replacement": "entropy_mae_curve", "hmm": "kl", "recall": "kl"}
    read = {arch: [(ev.table(c, arch, m), context_blind_floor(ev, c, m)) for c, m in cols.items()] for arch in ("mlp_pointwise", "mlp")}
    if any(x is None or f is None for x, f in read["mlp_pointwise"]):
        return missing("table cells")
    pointwise = A25_RULE.rule.kind
    own = [pointwise(x, f) for x, f in read["mlp_pointwise"]]
    windowed = [(c, x, f) for c, (x, f) in zip(cols, read["mlp"]) if x is not None]
    kind = A25_RULE.kind(read["mlp_pointwise"] + [(x, f) for _, x, f in windowed])
    said = ("the per-position MLP at the floor on every column, as it must be: it cannot see the context"
            if all(k == AGREE for k in own) else "the per-position MLP off the floor")
    said += "; the windowed MLP, given its prefix: " + ", ".join(f"{c} {x.value:.3g} ({x.value / f:.1%} of the floor)"
                                                                  for c, x, f in windowed)
    files = ("quick/table.json", "quick/references.json")
    if kind == DISAGREE and all(k == AGREE for k in own):  # only the MLP that sees its context escapes the floor
        # the windowed MLP changes one factor, the architecture's view of its prefix; it learned a task where its error
        # is below half that task's context-blind floor
        windowed_kind = A25_RULE.kind([(x, f) for _, x, f in windowed])
        control = Control("architecture", windowed_kind, any(x.value < 0.5 * f for _, x, f in windowed),
                          cite=f"{files[0]} (the windowed MLP's rows)")
        return Verdict(DISAGREE, "pointwise at the floor; windowed off it", said, files=files, consulted=(control,))
    return Verdict(kind, "at the floor on all four columns" if kind == AGREE else "off the floor", said, files=files)
