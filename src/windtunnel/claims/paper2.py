"""Paper II (arXiv 2512.22473): the routing law, EM-like training, frame before precision (C).

The law is judged on the trained main-job transformers (``routing_law`` in their ``geometry.json``),
EM-like vs SGD on ``results/routing/em.json`` (single head) and ``results/routing/deep/em.json``,
the two timescales on ``results/routing/timescales/timescales.json``.
"""

from __future__ import annotations

import math
import statistics

from ..run.grid import SEEDS
from ..routing.em import seed_steps
from dataclasses import replace

from .base import AGREE, DISAGREE, NOT_MEASURED, Control, Verdict, claim, missing, reads
from .evidence import Evidence, Measure, geometry_stat, uniform_gap_bits
from .paper1.controls import ON_PAPER_CELL, with_size_controls
from .paper1.geometry import TIMESCALES_CONSTANT
from .rows import geometry_of, row
from .rules import All, AtMost, Compare, EachSeed, Every, EverySeed, Follows, IntervalAbove, IntervalBelow

REPRO = "windtunnel reproduce paper1 --preset quick"
EM = "routing/em.json"
DEEP = "routing/deep/em.json"
DEEP_AUTHORS = "routing/deep-authors/em.json"
TIMESCALES = "routing/timescales/timescales.json"
LAW_TOL = 1e-4
"""Relative error below which the closed-form gradient equals autograd's in float32."""
LAW_RULE = EverySeed(LAW_TOL, "<", what="the largest relative error")
C3_RULE = EverySeed(0.1, "<", what="the median over heads")


LAW_WHY = "largest relative error of the closed form against autograd, over every head, on trained float32 models"

row("C1", "II", "v1–v3", "abstract", "The advantage-based routing law ∂L/∂s_ij = α_ij (b_ij − E_α[b])", "identity", "paper",
    "routing_law.max_score_rel_error on the trained main job, 3 seeds", LAW_RULE, REPRO,
    read=geometry_of("main", "routing_law.max_score_rel_error", what="main-job geometry"), why=LAW_WHY, identity=True,
    rule_note="the tests check it to 1e-10 in float64")
row("C2", "II", "v1–v3", "abstract", "Responsibility-weighted value update ∂L/∂v_j = Σ_i α_ij u_i", "identity", "paper",
    "routing_law.max_value_rel_error on the trained main job, 3 seeds", LAW_RULE, REPRO,
    read=geometry_of("main", "routing_law.max_value_rel_error", what="main-job geometry"), why=LAW_WHY, identity=True)


@claim("C3", "III", "v1", "§2", "Late in training the routing (frame) gradient is small beside the value gradient",
       "qualitative", "secondary", "routing_law.routing_to_value_grad_norm over every head of the trained main job; "
       "controls: the main job at the papers' head width (main_dh32), task (main_v20) and size (main_paper_size)",
       C3_RULE, REPRO, rule_note=ON_PAPER_CELL,
       threshold="a median ratio below 0.1",
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _c3(ev: Evidence) -> Verdict:
    def ratio(column: str) -> Measure | None:
        return ev.cell_stat(column, "transformer", SEEDS, "geometry.json",
                            lambda g: statistics.median(geometry_stat(g, "routing_law.routing_to_value_grad_norm")))

    def rule(ev: Evidence, column: str) -> tuple[bool, Measure, str] | None:
        m = ratio(column)
        return None if m is None else (C3_RULE.kind(m), m, "median over heads of |∂L/∂scores| / |∂L/∂values|")

    return with_size_controls(ev, rule, "main-job geometry")


def _speedup(ev: Evidence, arm: str) -> Measure | None:
    doc = ev.json(EM)
    if doc is None:
        return None
    s = doc["summary"]["arms"][arm]["speedup_vs_sgd"]
    return Measure(s["geometric_mean"], tuple(s["ci95"]) if s.get("ci95") else None, s["n"], (), (EM,))


C4_RULE = IntervalAbove(1.5)


@claim("C4", "II", "v2", "abstract; §5.2 (code)", "EM-like training (10× the learning rate on W_V) converges faster than SGD",
       "≈ 2.3× (430 vs 1000 steps)", "code", "steps to SGD's final loss, speed-up over SGD (geometric mean, 5 seeds)",
       C4_RULE, "windtunnel routing em --seeds 5", threshold="a speed-up whose interval lies above 1.5× (for ≈ 2.3×)",
       doubt="the authors' SGD arm runs at a learning rate of 0.01 that under-trains it, and the EM-like arm differs "
       "from it in step size as well as in the split: SGD at the EM-like step's norm is faster still (C5)")
def _c4(ev: Evidence) -> Verdict:
    m = _speedup(ev, "em_like")
    if m is None:
        return missing(EM)
    return Verdict(C4_RULE.kind(m), m,
                   "SGD is censored at the budget on some seeds, so these are lower bounds")


C5_RULE = IntervalAbove(1, of="EM-like's speed-up's", over="seeds")


@claim("C5", "II", "v1, v2", "abstract", "The speed-up comes from the E/M split", "interpretation", "paper",
       "EM-like vs plain SGD with the same update norm (sgd_matched), 5 seeds; control: the same arms on the deep "
       "variant (4×4 transformer, AdamW)",
       C5_RULE, "windtunnel routing em --seeds 5",
       rule_note="the speed-up is over the same-norm control, the same update norm without the split: where EM-like is "
       "not faster, the split buys "
       "nothing the step size does not")
def _c5(ev: Evidence) -> Verdict:
    doc = ev.json(EM)
    if doc is None:
        return missing(EM)
    c = doc["summary"]["em_like_vs_sgd_matched"]
    m = Measure(c["speedup"], tuple(c["ci95"]), c["n"], (), (EM,))
    kind = C5_RULE.kind(m)
    if kind != DISAGREE:
        return Verdict(kind, m, "EM-like / same-norm SGD speed")
    # the comparison the rule makes refutes the claim's reading (the split buys the speed); the deep variant (4×4,
    # AdamW) is the control: the same arms on another architecture and optimiser
    said = f"EM-like / same-norm SGD speed: the step size, not the split, buys the speed ({EM}, arm sgd_matched)"
    deep = ev.json(DEEP)
    if deep is None:
        return Verdict(DISAGREE, m, said)
    arms = deep["summary"]["arms"]
    em_reached, n = arms["em_like"]["reached"], len(deep["summary"]["seeds"])
    matched = arms["sgd_matched"]["speedup_vs_sgd"]
    faster = matched.get("geometric_mean") or 0.0
    said += (f"; the deep variant (4×4, AdamW; {DEEP}): EM-like reaches AdamW's final loss on {em_reached} of {n} "
             f"seeds, the same-norm arm {faster:.2f}× as fast as AdamW")
    split_helps = em_reached > 0 and (deep["summary"]["em_like_vs_sgd_matched"].get("speedup") or 0.0) > 1
    m = Measure(m.value, m.ci, m.seeds, m.values, (EM, DEEP))
    deep_variant = Control("architecture", AGREE if split_helps else DISAGREE, cite=f"{DEEP} (windtunnel routing em --deep)")
    return Verdict(DISAGREE, m, said, consulted=(deep_variant,))


AUTHORS_FINAL_LOSS_NATS = {"sgd": 2.031, "em_like": 1.932}
AUTHORS_H_MIN_NATS = 1.829
"""Where the authors' released EM-versus-SGD script, run as released, ends (mean over its seeds): the final training
loss of each arm and the minimum entropy it compares them with (both in nats) — the runs the v2 abstract calls "close
to minimum Bayesian entropy".  Their chain is not quite ours: their normalisation rescales the whole row, diagonal
included, before adding the stay probability back, so a symbol stays with probability ≈ 0.35, not the stated 0.3 ours
keeps (row entropy 1.829 nats there, 1.883 here).  Each gap is therefore taken against its own chain's minimum."""
AUTHORS_GAP_BITS = {arm: (loss - AUTHORS_H_MIN_NATS) / math.log(2) for arm, loss in AUTHORS_FINAL_LOSS_NATS.items()}
C6_RULE = All(AtMost(AUTHORS_GAP_BITS["sgd"], what="SGD's final gap", of="the authors' run's"),
              AtMost(AUTHORS_GAP_BITS["em_like"], what="EM-like's final gap", of="the authors' run's"))


def _gap(doc: dict, arm: str) -> Measure:
    g = doc["summary"]["arms"][arm]["final_gap"]
    return Measure(g["mean"], tuple(g["ci95"]) if g.get("ci95") else None, g.get("n"), (), (EM,))


@claim("C6", "II", "v2", "abstract", "Both runs end close to the minimum Bayesian entropy",
       f"close: the authors' runs end {AUTHORS_GAP_BITS['sgd']:.2f} / {AUTHORS_GAP_BITS['em_like']:.2f} bits above it",
       "paper", "final gap of the model to the exact filtering posterior (KL, bits), SGD and EM-like, 5 seeds",
       C6_RULE, "windtunnel routing em --seeds 5",
       rule_note="each gap against its own chain's minimum: the authors' chain stays with probability ≈ 0.35 (their "
       "normalisation rescales the diagonal too), ours with the stated 0.3",
       threshold="'close' read as what the authors' own runs reach: each arm's gap at most 1.5× theirs (final loss "
       "above the minimum entropy, their released script as released)")
def _c6(ev: Evidence) -> Verdict:
    doc = ev.json(EM)
    if doc is None:
        return missing(EM)
    sgd, em = _gap(doc, "sgd"), _gap(doc, "em_like")
    arms = doc["summary"]["arms"]
    uniform = ""
    blind = uniform_gap_bits(doc, "sgd")  # the gap of knowing nothing
    if blind is not None:
        uniform = f"; an always-uniform answer's gap is {blind:.3f} bits"
        if C6_RULE.parts[0].kind(Measure(blind)) == AGREE:
            uniform += " (within SGD's bar: that half alone could not fail; EM-like's bar it fails)"
    fast = f"; 10× the rate everywhere (sgd_fast) ends {arms['sgd_fast']['final_gap']['mean']:.3f}" if "sgd_fast" in arms else ""
    return Verdict(C6_RULE.kind(sgd, em), em,
                   f"EM-like shown; SGD {sgd.text()}{uniform}{fast}; the authors' runs: SGD "
                   f"{AUTHORS_GAP_BITS['sgd']:.3f}, EM {AUTHORS_GAP_BITS['em_like']:.3f} bits")


C7_RULE = AtMost(0.1, factor=1.0, of="", unit="bits")


@claim("C7", "II", "code", "deep mode", "The deep variant (4×4, d=64, AdamW, one training sequence) generalises to a "
       "held-out sequence near the minimum entropy", "near H_min (printed, not claimed)", "not-a-claim",
       "final held-out Bayes gap KL(posterior ‖ model) (bits) of the AdamW arm, 5 seeds; control: the same model as "
       "the authors' code builds it (LayerNorm, dropout 0.1, no positions, gradient clip 1.0)",
       C7_RULE, "windtunnel routing em --deep --seeds 5; windtunnel routing em --deep --authors-model",
       rule_note="closes under the control if the authors' model meets it where ours does not",
       threshold="a held-out gap below 0.1 bits")
def _c7(ev: Evidence) -> Verdict:
    doc = ev.json(DEEP)
    if doc is None:
        return missing(DEEP)
    g = doc["summary"]["arms"]["sgd"]["final_held_out_gap"]
    m = Measure(g["mean"], tuple(g["ci95"]), g["n"], (), (DEEP,))
    if C7_RULE.kind(m) == AGREE:
        return Verdict(AGREE, m, "held-out gap of our deep variant")
    authors = ev.json(DEEP_AUTHORS)
    if authors is None:
        return Verdict(DISAGREE, m, "the network memorises its one training sequence; the control, the authors' model "
                       f"(LayerNorm, dropout, no positions, clipping; {DEEP_AUTHORS}), is not measured yet: its "
                       "attention dropout on a 2000-token batch makes a seed take over an hour on one CPU core "
                       "(`windtunnel routing em --deep --authors-model`, resumable; `--device cuda` on a GPU)")
    a = authors["summary"]["arms"]["sgd"]
    held, best = a["final_held_out_gap"], a["best_held_out_gap"]["mean"]
    ci = held["ci95"] or (held["mean"], held["mean"])  # one seed: no interval, its value
    spread = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if held["ci95"] else ""
    seeds = f"{held['n']} seed{'s' if held['n'] != 1 else ''}"
    said = (f"the authors' model ends {held['mean']:.3f}{spread} bits from the posterior on the held-out sequence "
            f"({seeds}; best {best:.3f}, at steps {seed_steps(a['best_held_out_step'])})")
    m = Measure(m.value, m.ci, m.seeds, (), (DEEP, DEEP_AUTHORS))
    # the authors' model changes one factor, the architecture (LayerNorm, dropout, no positions, clipping): it meets
    # the rule where its whole interval is below the bar
    authors_model = Control("architecture", AGREE if ci[1] < 0.1 else DISAGREE,
                            cite=f"{DEEP_AUTHORS} (routing em --deep --authors-model)")
    said = (f"ours memorises its one sequence; {said}" if ci[1] < 0.1 else f"both memorise their one training "
            f"sequence: {said}, so the deviations (RMSNorm, no dropout, no clipping) are not the cause")
    return Verdict(DISAGREE, m, said, consulted=(authors_model,))


C8_RULE = Every(IntervalBelow(1, of="the ratio's", over="seeds"), "task under each schedule")


@claim("C8", "I, II", "v1", "abstract", "Frame before precision: attention settles before the error does", "qualitative",
       "paper", "t90 of the frame / t90 of log-KL over training (geometric mean, 5 seeds per task), under the cosine "
       "schedule and, as the control, with the learning rate held constant after warmup",
       C8_RULE, "windtunnel routing timescales; windtunnel routing timescales --constant-lr",
       rule_note="a decaying rate makes every curve settle late by itself",
       threshold="settled: 90% of the run's total change made (t90), the KL read in decades")
def _c8(ev: Evidence) -> Verdict:
    doc = ev.json(TIMESCALES)
    if doc is None:
        return missing(TIMESCALES)
    r = {t: doc["results"][t]["log_t90_ratio"] for t in ("bijection", "sticky")}
    m = Measure(r["bijection"]["geometric_mean"], tuple(r["bijection"]["ci95"]), r["bijection"]["n"], (), (TIMESCALES,))
    cosine = C8_RULE.kind([_ratio(x) for x in r.values()])
    said = f"bijection shown; sticky {r['sticky']['geometric_mean']:.2f}"
    const = ev.json(TIMESCALES_CONSTANT)
    if const is None:
        return Verdict(cosine, m, f"{said} under the cosine schedule; the constant-rate control "
                       f"({TIMESCALES_CONSTANT}) is not measured yet")
    c = {t: const["results"][t]["log_t90_ratio"] for t in ("bijection", "sticky")}
    m = Measure(m.value, m.ci, m.seeds, (), (TIMESCALES, TIMESCALES_CONSTANT))
    firsts = sum(round(x["frame_first_share"] * x["n"]) for x in c.values())
    seeds = sum(x["n"] for x in c.values())
    said += (f" under the cosine schedule; at a constant rate {c['bijection']['geometric_mean']:.2f} / "
             f"{c['sticky']['geometric_mean']:.2f} (bijection / sticky), the frame first on {firsts} of {seeds} seeds")
    both = C8_RULE.kind([_ratio(x) for x in (*r.values(), *c.values())])
    if both != DISAGREE:
        return Verdict(both, m, said)
    # the constant rate changes one factor, the schedule, read by the same rule
    held = Control("schedule", C8_RULE.kind([_ratio(x) for x in c.values()]),
                   cite=f"{TIMESCALES_CONSTANT} (windtunnel routing timescales --constant-lr)")
    if cosine == AGREE:
        said += (": with the rate held, attention keeps moving to the last step while the log error has settled, so "
                 "the cosine ordering is the schedule's")
    return Verdict(DISAGREE, m, said, consulted=(held,))


def _ratio(x: dict) -> Measure:
    """A timescale ratio's geometric mean over seeds, with its interval where written."""
    return Measure(x["geometric_mean"], tuple(x["ci95"]) if x.get("ci95") else None, x["n"])


C9_RULE = Every(EachSeed("the best head puts ≥ 0.5 of its attention on the posterior's support and some head's value "
                         "writes favour their own class on ≥ 50% of hypothesis positions"), "task (recall, the sawtooth)")


@claim("C9", "II", "v1", "abstract", "Attention weights act as soft responsibilities (E-step), values as prototypes "
       "(M-step)", "qualitative", "paper", "em_reading where the exact posterior is one-hot on a hypothesis in context "
       "(recall's stored value, the sawtooth's repeated-key answer): the best head's attention mass on it, and the share "
       "of hypothesis positions whose value write favours its own class",
       C9_RULE, REPRO,
       threshold="attention mass ≥ 0.5, value writes on ≥ 50% of positions",
       cells=reads("bijection_replacement", "recall", geometry=True))
def _c9(ev: Evidence) -> Verdict:
    parts = {}
    for column in ("recall", "bijection_replacement"):
        resp = ev.cell_stat(column, "transformer", SEEDS, "geometry.json",
                            lambda g: max(geometry_stat(g, "em_reading.responsibility_by_layer")), (0.0, 1.0))
        proto = ev.cell_stat(column, "transformer", SEEDS, "geometry.json",
                             lambda g: max(geometry_stat(g, "em_reading.prototype_accuracy_by_layer")), (0.0, 1.0))
        if resp is None or proto is None:
            return missing(f"{column} transformer EM reading")
        parts[column] = (resp, proto)
    kind = C9_RULE.kind([[a >= 0.5 and b >= 0.5 for a, b in zip(r.values, p.values)] for r, p in parts.values()])
    r, p = parts["recall"]
    rs, ps = parts["bijection_replacement"]
    return Verdict(kind, r, f"recall: responsibility {r.text()}, prototype accuracy {p.text()}; "
                   f"sawtooth: responsibility {rs.text()}, prototype accuracy {ps.text()}")
def _routing_damage(ev: Evidence, column: str) -> tuple[float, Measure, Measure, float] | None:
    """How far uniform attention takes ``column``'s transformer from the trained model towards the
    context-blind floor, in KL: ``(KL_uniform − KL_full) / (KL_blind − KL_full)`` (seed means)."""
    full = ev.eval_metric(column, "transformer", SEEDS, "kl")
    uni = ev.eval_metric(f"{column}_uniform", "transformer", SEEDS, "kl")
    blind = ev.cell_stat(column, "transformer", SEEDS, "references.json",
                         lambda r: r["context_blind"]["metrics"]["kl"])
    if full is None or uni is None or blind is None or blind.value <= full.value:
        return None
    return (uni.value - full.value) / (blind.value - full.value), uni, full, blind.value


C10_RULE = All(Compare("binding's share", "≥", 0.5), Compare("transport's share", "≥", 0.5),
               Compare("accumulation's share", "<", 0.5))


@claim("C10", "II", "v3", "abstract", "The primitives map onto EM: accumulation ← value updates, transport ← routing, "
       "binding ← query–key matching", "qualitative", "paper",
       "each primitive's transformer retrained with uniform attention in every layer (routing removed, value "
       "aggregation kept): the share of the way from the trained model's KL to the context-blind KL "
       "(accumulation: the main job; transport: HMM; binding: recall), 3 seeds each",
       C10_RULE, "windtunnel reproduce paper2 --preset quick",
       rule_note="the share is how far removing routing takes it to the context-blind floor: the two routing primitives "
       "need routing, accumulation does not",
       threshold="halfway to the floor",
       cells=reads("hmm", "hmm_uniform", "main", "main_uniform", "recall", "recall_uniform"))
def _c10(ev: Evidence) -> Verdict:
    parts = {}
    for primitive, column in (("accumulation", "main"), ("transport", "hmm"), ("binding", "recall")):
        d = _routing_damage(ev, column)
        if d is None:
            return missing(f"{column} cells with uniform attention")
        parts[primitive] = d
    kind = C10_RULE.kind(parts["binding"][0], parts["transport"][0], parts["accumulation"][0])
    files = tuple(f for d in parts.values() for f in d[1].files + d[2].files)
    return Verdict(kind, "; ".join(f"{p} {d[0]:.2f}" for p, d in parts.items()),
                   "share of the way to the context-blind floor; KL uniform / trained / blind: " + "; ".join(
                       f"{p} {d[1].text()} / {d[2].value:.3g} / {d[3]:.3g}" for p, d in parts.items()), files=files)


@claim("C11", "II", "v3", "abstract", "Content-based value routing, selective SSMs included, develops Bayesian geometry",
       "conjecture", "paper", "Mamba's final-state clusters on HMM (as B14)", Follows("B14"), REPRO,
       derived="B14",
       cells=reads("hmm", "hmm_long", arch="mamba", geometry=True))
def _c11(ev: Evidence) -> Verdict:
    from .base import CLAIMS

    v = CLAIMS["B14"].assess(ev)
    if v.kind == NOT_MEASURED:
        return v
    return replace(v, kind=Follows("B14").kind(v.kind), why="follows B14: " + v.why)


@claim("C12", "II", "v1", "abstract", "The same dynamics sculpt the manifold: precision keeps improving after the frame "
       "settles", "qualitative", "paper", "the manifold's gain in |ρ(PC1, H)| after attention settled (as B8, on the sawtooth)",
       Follows("B8"), REPRO, derived="B8",
       cells=reads("bijection_replacement", geometry=True))
def _c12(ev: Evidence) -> Verdict:
    from .base import CLAIMS

    v = CLAIMS["B8"].assess(ev)
    if v.kind == NOT_MEASURED:
        return v
    return replace(v, kind=Follows("B8").kind(v.kind), why="follows B8: " + v.why)
