"""Paper I's mechanism and geometry on the bijection tasks (B1–B11): orthogonal keys, the frame head, layer and
sublayer ablations, query–key alignment, the value manifold, frame–precision dissociation and the probes, each on
the main job judged against its size controls (:func:`~.controls.with_size_controls`) where it has them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...run.grid import SEEDS
from ..base import AGREE, INCONCLUSIVE, NOT_MEASURED, Verdict, claim, missing, reads
from ..evidence import Evidence, Measure, geometry_stat, pooled
from ..rules import All, BelowNulls, Compare, EachSeed, EverySeed
from .common import REPRO, all_seeds, geometry_files, with_files
from .controls import ON_PAPER_CELL, PAPER_CELL, PAPER_SCALE, learned_task, with_size_controls


B1_RULE = BelowNulls("trained value", "both nulls (the untrained model's and Gaussian vectors')")


def _key_orthogonality(ev: Evidence, column: str) -> tuple[Measure, Measure, Measure, str] | None:
    """Layer-0 key |cos| of ``column``'s cells with its two nulls (untrained, Gaussian) and the verdict of
    the B1 rule on them: AGREE if every seed is below both nulls, DISAGREE if every seed is above both."""
    m = ev.geometry(column, "transformer", SEEDS, "key_orthogonality.layer0_mean_abs_cos")
    un = ev.geometry(column, "transformer", SEEDS, "key_orthogonality.layer0_untrained")
    ga = ev.geometry(column, "transformer", SEEDS, "key_orthogonality.gaussian_expected")
    if m is None or un is None or ga is None:
        return None
    return m, un, ga, B1_RULE.kind(m.values, [(u, ga.value) for u in un.values])


@claim("B1", "I", "v1, v3", "abstract; geometry", "Layer-0 keys of the hypothesis tokens are near-orthogonal",
       "orthogonal key bases (0.052 vs 0.082 random: secondary)", "paper",
       "key_orthogonality.layer0_mean_abs_cos, main job (d_head 16), 3 seeds, against the untrained model and E|cos| "
       "of Gaussian vectors; controls: the main job with 2 heads of 32, the papers' head width, the main job on "
       "the papers' V=20, L=19 (main_v20), and on V=20 at the papers' size (main_paper_size: 2.67M parameters)",
       B1_RULE, REPRO, rule_note=ON_PAPER_CELL,
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _b1(ev: Evidence) -> Verdict:
    def rule(ev: Evidence, column: str) -> tuple[str, Measure, str] | None:
        r = _key_orthogonality(ev, column)
        if r is None:
            return None
        m, un, ga, kind = r
        width = " (d_head 16; the papers' d_head is 32)" if column == "main" else ""
        return kind, m, f"untrained {un.text()}, Gaussian {ga.value:.3f}{width}"

    return with_size_controls(ev, rule, "main-job geometry")


B2_RULE = All(Compare("our trained mean", "≤", 0.12), Compare("our trained mean", "<", "both nulls"))


@claim("B2", "III", "v1", "§2, Table 2", "Paper III's restatement: wind-tunnel keys at 0.09–0.12 against 0.40–0.45 random",
       "0.09–0.12 vs 0.40–0.45", "paper-p3", "as B1", B2_RULE, REPRO, derived="B1", rule_note=ON_PAPER_CELL,
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _b2(ev: Evidence) -> Verdict:
    def rule(ev: Evidence, column: str) -> tuple[str, Measure, str] | None:
        r = _key_orthogonality(ev, column)
        if r is None:
            return None
        m, un, ga, _ = r
        return (B2_RULE.kind(m.value, (m.value, min(un.value, ga.value))), m,
                f"our random nulls: untrained {un.value:.3f}, Gaussian {ga.value:.3f}")

    v = with_size_controls(ev, rule, "main-job geometry")
    return replace(v, why=v.why + "; the papers' 0.40–0.45 'random' is not what random keys give at these widths")


B3_RULE = EachSeed("the most damaging head is in layer 0, its fold ≥ 10 and its increase ≥ 2× the runner-up's")


def _frame_head(ev: Evidence, column: str) -> tuple[str, Measure | str, str] | None:
    """:data:`B3_RULE` on ``column``'s seeds: its raw verdict, the fold, what it read."""
    heads = all_seeds(ev, column, "transformer", "head_ablation.hypothesis_frame_head")
    fold = ev.geometry(column, "transformer", SEEDS, "head_ablation.frame_head_fold")
    ratio = ev.geometry(column, "transformer", SEEDS, "head_ablation.ratio_to_runner_up")
    if heads is None or fold is None or ratio is None:
        return None
    met = [isinstance(h, str) and h.startswith("L0") and f >= 10 and r >= 2
           for h, f, r in zip(heads, fold.values, ratio.values)]
    return B3_RULE.kind(met), fold, f"heads {', '.join(map(str, heads))}; ratio to runner-up {ratio.text()}"


@claim("B3", "I", "v1", "geometry and ablation", "One layer-0 'hypothesis-frame head' whose ablation collapses "
       "calibration (> 10×); other heads matter little", "> 10×, one head", "secondary",
       "head_ablation: the most damaging head, its fold (ablated / intact entropy error) and its ratio to the runner-up; "
       "controls: the main job at the papers' head width (main_dh32), task (main_v20) and size (main_paper_size)",
       B3_RULE, REPRO, rule_note=ON_PAPER_CELL,
       threshold="the top head at least 2× the runner-up",
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _b3(ev: Evidence) -> Verdict:
    def rule(ev: Evidence, column: str) -> tuple[bool, Measure | str, str] | None:
        r = _frame_head(ev, column)
        if r is None or column != "main":
            return r
        return r[0], r[1], r[2] + "; on the production bijection variant (separate vocabularies, no query token)"

    return with_size_controls(ev, rule, "main-job geometry")


@claim("B3b", "I", "v1", "geometry and ablation", "The single layer-0 frame head on Paper I's own layout (one vocabulary, "
       "a query token before each key)", "> 10×, one head", "code",
       "head_ablation on the main job's recipe trained on bijection_query, 3 seeds", B3_RULE, REPRO,
       threshold="the top head at least 2× the runner-up", cells=reads("main_query", geometry=True))
def _b3b(ev: Evidence) -> Verdict:
    r = _frame_head(ev, "main_query")
    if r is None:
        return missing("query-layout geometry")
    kind, fold, said = r
    return Verdict(kind, fold, said)


B4_RULE = EachSeed("the frame head is the most orthogonal layer-0 head")


@claim("B4", "I", "—", "authors' code", "The frame head is the most-orthogonal layer-0 head", "implied", "not-a-claim",
       "head_ablation.hypothesis_frame_head vs key_orthogonality.layer0_most_orthogonal_head; controls: the main job "
       "at the papers' head width (main_dh32), task (main_v20) and size (main_paper_size)",
       B4_RULE, REPRO, rule_note=ON_PAPER_CELL,
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _b4(ev: Evidence) -> Verdict:
    def rule(ev: Evidence, column: str) -> tuple[bool, Measure | str, str] | None:
        heads = all_seeds(ev, column, "transformer", "head_ablation.hypothesis_frame_head")
        orth = all_seeds(ev, column, "transformer", "key_orthogonality.layer0_most_orthogonal_head")
        if heads is None or orth is None:
            return None
        same = [h == f"L0H{o}" for h, o in zip(heads, orth)]
        return B4_RULE.kind(same), f"{sum(same)} of {len(same)} seeds", f"frame heads {heads}, most orthogonal L0 heads {orth}"

    return with_size_controls(ev, rule, "main-job geometry")


B5_RULE = EverySeed(10, what="the least damaging layer's fold")


@claim("B5", "I", "v1", "geometry and ablation", "Removing any single layer raises the error more than 10×", "> 10×",
       "secondary", "layer_ablation.min_fold (the least damaging layer's ablated / intact entropy error); controls: the "
       "main job at the papers' head width (main_dh32), task (main_v20) and size (main_paper_size)",
       B5_RULE, REPRO, rule_note=ON_PAPER_CELL,
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _b5(ev: Evidence) -> Verdict:
    def rule(ev: Evidence, column: str) -> tuple[bool, Measure | str, str] | None:
        m = ev.geometry(column, "transformer", SEEDS, "layer_ablation.min_fold")
        mx = ev.geometry(column, "transformer", SEEDS, "layer_ablation.max_fold")
        if m is None or mx is None:
            return None
        return B5_RULE.kind(m), m, f"most damaging layer's fold {mx.text()}"

    return with_size_controls(ev, rule, "main-job geometry")


def _qk_progressive(ev: Evidence, column: str) -> tuple[list[bool], Measure, str] | None:
    """The B6 condition on each seed of ``column``: the last layer's query–key contrast on the task's main region
    (best head) exceeds the first layer's, 0 and the untrained model's; ``(met per seed, last layer's contrast, what
    was read)``."""
    a = all_seeds(ev, column, "transformer", "qk_alignment.alignment_by_layer")
    u = all_seeds(ev, column, "transformer", "qk_alignment.untrained_alignment_by_layer")
    if a is None or u is None or any(x is None for x in a) or any(x is None for x in u):
        return None
    ok = [x[-1] > x[0] and x[-1] > 0 and x[-1] > y[-1] for x, y in zip(a, u)]
    last = pooled([x[-1] for x in a], geometry_files(ev, column, "transformer"))
    return ok, last, (f"first → last layer {', '.join(f'{x[0]:.2f} → {x[-1]:.2f}' for x in a)} (untrained "
                           f"last layer {', '.join(f'{y[-1]:.3f}' for y in u)}); progressive on {sum(ok)} of {len(ok)} seeds")


FEASIBLE_IN_CONTEXT = (("bijection_replacement", "the sawtooth (the earlier answer of a repeated key)"),
                       ("recall", "recall (the stored value)"))
"""The tasks whose feasible hypothesis is a token of the context, where B6's alignment can be read on it."""


B6_RULE = EachSeed("the last layer's alignment exceeds the first layer's, 0 and the untrained model's (both tasks)")


@claim("B6", "I", "v1", "abstract", "Progressive query–key alignment: queries single out the relevant keys more with "
       "depth", "qualitative", "paper", "qk_alignment: cos(q_t, k) on the keys of the posterior's support minus on the "
       "whole context, best head per layer, where that support is in the context — the sawtooth's earlier answer of a "
       "repeated key and recall's stored value, 3 seeds each; the main job beside it (on bijection the feasible values "
       "are the ones not yet shown, so no key holds them: its contrast is read on the shown, eliminated values)",
       B6_RULE, REPRO,
       cells=reads("bijection_replacement", "main", "recall", geometry=True))
def _b6(ev: Evidence) -> Verdict:
    readings = [(name, _qk_progressive(ev, column)) for column, name in FEASIBLE_IN_CONTEXT]
    if any(r is None for _, r in readings):
        return missing("sawtooth and recall geometry")
    kind = B6_RULE.kind([met for _, r in readings for met in r[0]])
    said = "; ".join(f"{name}: last layer {r[1].text()}, {r[2]}" for name, r in readings)
    main = _qk_progressive(ev, "main")
    if main is not None:  # the eliminated values: what attention can single out on bijection
        said += f"; the main job on its shown (eliminated) values: last layer {main[1].text()}, {main[2]}"
    files = tuple(f for _, r in readings for f in r[1].files) + (main[1].files if main is not None else ())
    # the table shows every task's count, the papers' own (bijection) included, not one task's number
    short = {"bijection_replacement": "sawtooth", "recall": "recall"}
    counts = [f"{short[column]} {sum(r[0])}/{len(r[0])}" for (column, _), (_, r) in zip(FEASIBLE_IN_CONTEXT, readings)]
    beside = (f"; bijection, where no key holds a feasible value (read beside, not judged): {sum(main[0])}/{len(main[0])}"
              if main is not None else "")
    return Verdict(kind, "seeds progressive: " + ", ".join(counts) + beside, said, files=files)


B7_RULE = All(EverySeed(0.5, "≥", "PC1's share of the variance"), EverySeed(0.5, "≥", "|ρ|"),
              EachSeed("|ρ| is above the untrained model's"))
"""Seed by seed (a mean never decides a claim its seeds split on)."""


@claim("B7", "I", "v1", "abstract; P3 §4.4", "A low-dimensional value manifold parameterised by posterior entropy",
       "PC1 84–90% of variance", "paper-p3", "value_manifold on the sawtooth (entropy not a function of position): "
       "final attention-output PC1 share and |Spearman(PC1, H_Bayes)|",
       B7_RULE, REPRO, rule_note="|ρ| is the larger of |ρ(PC1, H)| and |ρ(|PC1 − median|, H)| (a manifold folded at its "
       "middle, V-shaped in H, is parameterised by H although a monotone correlation misses it)",
       threshold="PC1 ≥ 50% of the variance and |ρ| ≥ 0.5",
       cells=reads("bijection_replacement", geometry=True))
def _b7(ev: Evidence) -> Verdict:
    col = "bijection_replacement"

    def rho_of(g: dict[str, Any]) -> float:
        return max(abs(geometry_stat(g, "value_manifold.final_attn_out_spearman_pc1_entropy")),
                   abs(geometry_stat(g, "value_manifold.final_attn_out_spearman_abs_pc1_entropy")))

    pc1 = ev.geometry(col, "transformer", SEEDS, "value_manifold.final_attn_out_pc1_var")
    rho = ev.cell_stat(col, "transformer", SEEDS, "geometry.json", rho_of, (0.0, 1.0))
    un = ev.cell_stat(col, "transformer", SEEDS, "geometry.json",
                      lambda g: abs(geometry_stat(g, "value_manifold.final_resid_untrained_spearman")), (0.0, 1.0))
    pc2 = ev.geometry(col, "transformer", SEEDS, "value_manifold.final_resid_spearman_pc2_entropy")
    if pc1 is None or rho is None or un is None:
        return missing("sawtooth geometry (value_manifold version 2)")
    kind = B7_RULE.kind(pc1, rho, [r > u for r, u in zip(rho.values, un.values)])
    return Verdict(kind, pc1, f"PC1 share of the last attention output; |ρ| {rho.text()} "
                   f"(untrained {un.value:.2f})" + (f"; the residual stream's PC2 tracks H with ρ {pc2.text()}" if pc2 else ""))


B8_RULE = EverySeed(0, ">", what="the gain in |ρ| from the checkpoint where attention settled to the final one")


@claim("B8", "I", "v1", "abstract", "During training the manifold unfurls while attention stays stable", "qualitative",
       "paper", "frame_precision on the sawtooth: |ρ(PC1, H)| of the last-layer residual at the final checkpoint vs at "
       "the checkpoint where attention settled",
       B8_RULE, REPRO,
       cells=reads("bijection_replacement", geometry=True))
def _b8(ev: Evidence) -> Verdict:
    cells = ev.cells("bijection_replacement", "transformer", SEEDS)
    if cells is None:
        return missing("sawtooth geometry")
    gains = []
    for rel, _ in cells:
        g = ev.json(f"{rel}/geometry.json")
        fp = (g or {}).get("frame_precision") or {}
        settle = fp.get("js_settle_step")
        series = fp.get("series") or []
        if settle is None or not series:
            return Verdict(NOT_MEASURED, None, f"{rel}: attention never settled over the kept checkpoints")
        at = next(s for s in series if s["step"] >= settle)["precision_abs_rho"]
        gains.append(series[-1]["precision_abs_rho"] - at)
    m = pooled(gains, geometry_files(ev, "bijection_replacement", "transformer"))
    return Verdict(B8_RULE.kind(m), m, "gain in |ρ(PC1, H)| after the frame settled")


def _settle_readings(ev: Evidence, column: str) -> list[tuple[int | None, int | None, int | None]] | None:
    """Per seed of ``column``: (the step attention settles, the step the KL settles, the step the KL first stays
    below 10% of its first value), recomputed from the committed ``frame_precision`` series with
    :func:`~windtunnel.geometry.dynamics.settle_step` — settled meaning the remaining change to the end of the run is
    at most a tenth of the total change (in decades for the KL), so a KL still falling 5× at the end has not
    settled.  The last reading is the one the diagnostic once called settled (met by step 500 while the KL keeps
    falling a hundredfold), kept to show where the two disagree."""
    from ...geometry.dynamics import settle_step, settle_step_first10pct

    cells = ev.cells(column, "transformer", SEEDS)
    if cells is None:
        return None
    out = []
    for rel, _ in cells:
        fp = (ev.json(f"{rel}/geometry.json") or {}).get("frame_precision") or {}
        series = fp.get("series")
        if not series:
            return None
        steps = [row["step"] for row in series]
        js = settle_step(steps, [row.get("js_mean") for row in series], log=False)
        kl = [row.get("kl") for row in series]
        out.append((js, settle_step(steps, kl), settle_step_first10pct(steps, kl)))
    return out


B9_RULE = EachSeed("attention settles before the error")


B9_SCHEDULE = Compare("the share of seeds with the frame first at a constant rate", "≥", 0.5)
"""B9's schedule control: an agreement under a decaying rate that the constant rate reverses is inconclusive."""
TIMESCALES_CONSTANT = "routing/timescales-constant/timescales.json"
"""Paper II's timescale experiment with the learning rate held constant after warmup: the schedule control of the
frame-before-precision ordering (C8's, and B9's)."""


@claim("B9", "I", "v1", "abstract", "Frame–precision dissociation: attention settles before the error does",
       "qualitative", "paper", "frame_precision on the main job, from its committed series: the step attention settles "
       "(JS to the final pattern) vs the step the KL settles, settled meaning the change still to come is at most a "
       "tenth of the run's total (in decades for the KL); controls: the main job at the papers' head width (main_dh32), "
       "task (main_v20) and size (main_paper_size), and the schedule (Paper II's models at a constant rate, C8's)",
       B9_RULE, REPRO, rule_note="a KL still falling at the end has not settled; " + ON_PAPER_CELL + "; an agreement "
       "the constant-rate control reverses (the frame first on fewer than half its seeds) is inconclusive",
       threshold="settled: at most a tenth of the run's total change still to come",
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _b9(ev: Evidence) -> Verdict:
    from ...geometry.dynamics import frame_first

    def rule(ev: Evidence, column: str) -> tuple[bool, Measure | str, str] | None:
        readings = _settle_readings(ev, column)
        if readings is None:
            return None
        first = [frame_first(js, kl) is True for js, kl, _ in readings]
        old = [frame_first(js, kl10) is True for js, _, kl10 in readings]
        said = (f"attention settles at steps {[r[0] for r in readings]}, the KL at {[r[1] for r in readings]} (None: "
                f"still falling at the end of the run)")
        if old != first:  # the first-checkpoint reading says the opposite: both are reported
            said += (f"; read as 'the KL stays below 10% of its first value' the KL settles at {[r[2] for r in readings]}"
                     f" and attention comes first on {sum(old)} of {len(old)} seeds")
        return B9_RULE.kind(first), f"frame first on {sum(first)} of {len(first)} seeds", said

    v = with_size_controls(ev, rule, "main-job geometry")
    const = ev.json(TIMESCALES_CONSTANT)
    if v.kind != AGREE or const is None:
        return v
    runs = [const["results"][t]["log_t90_ratio"] for t in ("bijection", "sticky")]
    firsts, seeds = sum(round(x["frame_first_share"] * x["n"]) for x in runs), sum(x["n"] for x in runs)
    if B9_SCHEDULE.kind(firsts / seeds) == AGREE:
        return replace(v, why=f"{v.why}; with the rate held constant after warmup (Paper II's models) the frame still "
                       f"comes first on {firsts} of {seeds} seeds", files=v.files + (TIMESCALES_CONSTANT,))
    return replace(v, kind=INCONCLUSIVE, files=v.files + (TIMESCALES_CONSTANT,),
                   why=f"{v.why}; but every one of these runs decays its learning rate to the end, and with the rate "
                   f"held constant after warmup (Paper II's models, C8's control) the frame comes first on {firsts} of "
                   f"{seeds} seeds: the ordering may be the schedule's")


def causal_beside(ev: Evidence, column: str = "main") -> tuple[str, tuple[Measure, ...]]:
    """What the interventions say beside a probe's reading, on ``column``'s transformer cells that hold them: the
    steering diagnostic's edit in the stream's own metric (the model's KL to the counterfactual context's exact
    posterior, against no edit and a random edit of the same spread, with their sign-flip p-values) and state
    patching at the edited position (the best layer's KL against the least of its four controls).  Evidence read
    beside a verdict, never judged: ``("", ())`` where no cell holds them."""
    def at(key: str, seeds: tuple[int, ...]) -> Measure | None:
        return ev.geometry(column, "transformer", seeds, key)

    seeds = tuple(s for s in SEEDS if at("steering.data_metric_steered_kl", (s,)) is not None)
    if not seeds:
        return "", ()
    steered, none = at("steering.data_metric_steered_kl", seeds), at("steering.no_edit_kl", seeds)
    rnd, reads_b = at("steering.data_metric_random_kl", seeds), at("steering.reads_B_kl", seeds)
    p_none, p_rnd = at("steering.data_metric_p_vs_no_edit", seeds), at("steering.data_metric_p_vs_random", seeds)
    patched, controls = at("state_patching.at_t_best_patched_kl", seeds), at("state_patching.at_t_controls_min_kl", seeds)
    p_patch = at("state_patching.at_t_p_max_vs_controls", seeds)
    if steered is None or none is None or rnd is None or reads_b is None:
        return "", ()
    where = "the main job, V=10, 200k parameters" if column == "main" else column
    said = (f"; the interventions beside it ({where}, seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))}; evidence, not judged): moving the stream along the probe to a "
            f"counterfactual context's belief brings the model to {steered.text()} bits of that context's exact "
            f"posterior, against {none.text()} unedited, {rnd.text()} for a random edit of the same spread and "
            f"{reads_b.text()} for the model reading the context itself")
    if p_none is not None and p_rnd is not None:
        said += f" (sign-flip p {p_none.value:.2g} against no edit, {p_rnd.value:.2g} against the random edit)"
    if patched is not None and controls is not None:
        said += (f"; patching the counterfactual's stream in at the best layer gives {patched.text()} bits, its "
                 f"controls at least {controls.text()}")
        if p_patch is not None:
            said += f" (largest p against them {p_patch.value:.2g})"
    return said, tuple(m for m in (steered, patched) if m is not None)


B10_RULE = EachSeed("the best probe's KL is at most half the position-only probe's and below the untrained model's")


@claim("B10", "I", "v1", "abstract", "The residual stream is the belief substrate (the posterior is linearly decodable)",
       "qualitative", "paper", "probes: held-out KL (bits) of a linear posterior probe at the best layer vs the "
       "position-only probe and the untrained model's, on the main job at the papers' size (main_paper_size, V=20, "
       "2.67M parameters) where committed, else on the main job (V=10, 200k)",
       B10_RULE, REPRO,
       threshold="probe KL at most half the position-only probe's",
       cells=reads("main", "main_paper_size@paper", geometry=True))
def _b10(ev: Evidence) -> Verdict:
    def reading(column: str) -> tuple[str, Measure, str] | None:
        best = ev.geometry(column, "transformer", SEEDS, "probes.best_posterior_kl_bits")
        pos = ev.geometry(column, "transformer", SEEDS, "probes.position_only_kl_bits")
        un = ev.geometry(column, "transformer", SEEDS, "probes.final_untrained_posterior_kl_bits")
        if best is None or pos is None or un is None:
            return None
        met = [b <= 0.5 * p and b < u for b, p, u in zip(best.values, pos.values, un.values)]
        return (B10_RULE.kind(met), with_files(best, pos, un),
                f"position-only {pos.text()}, untrained {un.text()} bits")

    reduced, paper = reading("main"), reading(PAPER_CELL)
    causal, shown = causal_beside(ev)
    if paper is not None and not learned_task(ev, PAPER_CELL, "transformer"):  # a model that has not learned explains nothing
        if reduced is None:
            return missing("main-job geometry")
        kind, best, said = reduced
        return Verdict(kind, with_files(best, *shown), f"{said}; the papers'-size cells are committed but have not "
                       f"learned the task, so the claim is judged at reduced scale{causal}")
    if paper is None:
        if reduced is None:
            return missing("main-job geometry")
        kind, best, said = reduced
        return Verdict(kind, with_files(best, *shown), f"{said}{causal}")
    kind, best, said = paper
    beside = (f"; at reduced scale (V=10, 200k parameters) the probe's KL is {reduced[1].text()} bits, "
              f"{reduced[2]} ({reduced[0].split(' ')[0]} by the same rule)") if reduced else ""
    return Verdict(kind, with_files(best, *((reduced[1],) if reduced else ()), *shown),
                   f"on the papers' own cell at their size (it learned the task): the probe's KL {best.text()} bits, "
                   f"{said}{beside}{causal}", scale=PAPER_SCALE)


B11_RULE = EverySeed(1, ">", what="the MLP's fold over the attention's")


@claim("B11", "I", "v1", "abstract", "The feed-forward networks perform the posterior update; attention routes",
       "qualitative", "paper", "sublayer_ablation on the main job: geometric mean over layers ≥ 1 of the MLP ablation's "
       "fold over the attention ablation's; controls: the main job at the papers' head width (main_dh32), task "
       "(main_v20) and size (main_paper_size)", B11_RULE, REPRO, rule_note=ON_PAPER_CELL,
       cells=reads("main", "main_dh32", "main_paper_size@paper", "main_v20", geometry=True))
def _b11(ev: Evidence) -> Verdict:
    def rule(ev: Evidence, column: str) -> tuple[bool, Measure | str, str] | None:
        m = ev.geometry(column, "transformer", SEEDS, "sublayer_ablation.mlp_over_attn")
        allm = ev.geometry(column, "transformer", SEEDS, "sublayer_ablation.all_mlp_fold")
        if m is None:
            return None
        return B11_RULE.kind(m), m, "removing a later block's MLP vs its attention" + (
            f"; every MLP at once ×{allm.text()}" if allm else "")

    return with_size_controls(ev, rule, "main-job sublayer ablation")
