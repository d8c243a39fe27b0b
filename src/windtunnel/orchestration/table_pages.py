"""How a table is written: its Markdown (each cell the mean over seeds with the 95% interval across them, the
reference rows beneath the networks), its web page with each cell's figures, and the numbers' format.
:func:`windtunnel.orchestration.table.run_table` trains and aggregates the cells; this module only renders them
(the columns and families it reads are :mod:`~windtunnel.orchestration.table_families`)."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

from .table_families import _ALL_COLUMNS, COLUMNS, FAMILIES, SECOND_METRIC, SEQUEL_COLUMNS


def _num(column: str, x: float) -> str:
    if _ALL_COLUMNS[column]["unit"] == "%":
        return f"{100 * x:.1f}%"
    return f"{x:.2e}" if abs(x) < 1e-2 else f"{x:.3f}"


def _fmt(column: str, m: dict[str, Any] | None) -> str:
    """``mean [lo, hi]`` with the 95% interval across seeds (one seed: its bootstrap interval, marked b)."""
    if m is None or m.get("mean") is None or math.isnan(m["mean"]):
        return "—"
    s = _num(column, m["mean"])
    if m.get("ci95"):
        lo, hi = m["ci95"]
        if _ALL_COLUMNS[column]["unit"] == "%":
            lo, hi = max(lo, 0.0), min(hi, 1.0)
        return s + f" [{_num(column, max(lo, 0.0))}, {_num(column, hi)}]"
    boot = (m.get("bootstrap_ci") or [None])[0]
    return s + (f" [{_num(column, boot[0])}, {_num(column, boot[1])}]b" if boot else "")


def _seeds_said(meta: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    """The preset and how many seeds were asked for and finished per cell (a table stopped early has fewer)."""
    seeds_done = sorted({len(c["seeds"]) for c in cells})
    return (f"Preset `{meta['preset']}`, {meta['seeds']} seed(s) requested, {'/'.join(map(str, seeds_done))} per cell "
            "finished")


def markdown(cells: list[dict[str, Any]], columns: list[str], archs: list[str], meta: dict[str, Any],
              references: dict[str, dict[str, Any]]) -> str:
    by = {(c["task"], c["arch"]): c for c in cells}
    head = ["model", "params"] + [f"{c} ({COLUMNS[c]['primitive']}; {COLUMNS[c]['metric']})" for c in columns]
    extra = [c for c in columns if "lengths" in COLUMNS[c]]
    for c in extra:
        head += [f"{c} KL@K={K}" for K in COLUMNS[c]["lengths"][1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arch in archs:
        row = [arch]
        params = next((by[(c, arch)]["params"] for c in columns if (c, arch) in by), None)
        row.append(f"{params:,}" if params else "—")
        for col in columns:
            cell = by.get((col, arch))
            row.append(_fmt(col, cell["metrics"].get(COLUMNS[col]["metric"]) if cell else None))
        for col in extra:
            cell = by.get((col, arch))
            for K in COLUMNS[col]["lengths"][1:]:
                row.append(_fmt(col, cell["metrics"].get(f"kl@K={K}") if cell else None))
        lines.append("| " + " | ".join(row) + " |")
    for ref, label in (("oracle", "Bayes oracle"), ("context_blind", "context-blind optimum")):
        row = [label, "0"]
        for col in columns:
            m = references.get(col, {}).get(ref, {}).get("metrics", {})
            row.append(_num(col, m[COLUMNS[col]["metric"]]) if COLUMNS[col]["metric"] in m else "—")
        for col in extra:
            for K in COLUMNS[col]["lengths"][1:]:
                m = references.get(col, {}).get(ref, {}).get("lengths", {}).get(str(K), {})
                row.append(_num(col, m["kl"]) if "kl" in m else "—")
        lines.append("| " + " | ".join(row) + " |")
    notes = [
        "",
        _seeds_said(meta, cells) + "; errors in bits against the exact posterior "
        "(`entropy_mae_curve`: the papers' entropy MAE of mean curves; `kl`: mean KL(Bayes‖model)); "
        "recall: accuracy at query positions. Each cell: mean over seeds [95% interval across seeds, "
        "Student's t]; with one seed, [its bootstrap interval over sequences]b. The context-blind "
        "optimum sees only its position and its own token: the floor without in-context inference.",
        _time_line(meta),
        f"Command: `{meta['command']}`",
    ]
    return "\n".join(lines + notes) + "\n"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def second_block(cells: list[dict[str, Any]], columns: list[str], references: dict[str, dict[str, Any]]) -> list[str]:
    """The sequel columns shown again with :data:`SECOND_METRIC`: those whose cells record it and whose Bayes oracle
    has a value of it on the evaluation episodes.  Which positions identify the class weights depends on the task
    alone, not on the model (:func:`windtunnel.evaluation.metrics.class_identified`), so the oracle has a value
    exactly where the cells do: a column of one class (``ms_involution_*``) has none."""
    recorded = {c["task"] for c in cells if SECOND_METRIC in c["metrics"]}
    return [col for col in columns if col in recorded
            and _finite(references.get(col, {}).get("oracle", {}).get("metrics", {}).get(SECOND_METRIC))]


def sequel_markdown(cells: list[dict[str, Any]], columns: list[str], archs: list[str], meta: dict[str, Any],
                     references: dict[str, dict[str, Any]]) -> str:
    """The sequel table in markdown: a row per architecture and the reference rows (the Bayes oracle — the Bayes
    answer as one more model, 0 by construction — the context-blind optimum, and where a column states a relabelling
    in its header the header-blind optimum); a block of ``kl`` columns, then
    a block of ``class_posterior_mae`` columns (:func:`second_block`); each cell mean [95% interval across seeds]."""
    by = {(c["task"], c["arch"]): c for c in cells}
    block = second_block(cells, columns, references)
    head = ["model", "params"] + [f"{c} ({SEQUEL_COLUMNS[c]['primitive']}; {SEQUEL_COLUMNS[c]['metric']})"
                                  for c in columns]
    head += [f"{c} {SECOND_METRIC}" for c in block]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arch in archs:
        params = next((by[(c, arch)]["params"] for c in columns if (c, arch) in by), None)
        row = [arch, f"{params:,}" if params else "—"]
        for col in columns:
            cell = by.get((col, arch))
            row.append(_fmt(col, cell["metrics"].get(SEQUEL_COLUMNS[col]["metric"]) if cell else None))
        for col in block:
            cell = by.get((col, arch))
            row.append(_fmt(col, cell["metrics"].get(SECOND_METRIC) if cell else None))
        lines.append("| " + " | ".join(row) + " |")
    refs = [("oracle", "Bayes oracle"), ("context_blind", "context-blind optimum")]
    if any("header_blind" in references.get(col, {}) for col in columns):
        refs.append(("header_blind", "header-blind optimum"))
    for ref, label in refs:
        row = [label, "0"]
        for name, cols in ((None, columns), (SECOND_METRIC, block)):
            for col in cols:
                x = references.get(col, {}).get(ref, {}).get("metrics", {}).get(name or SEQUEL_COLUMNS[col]["metric"])
                row.append(_num(col, x) if _finite(x) else "—")
        lines.append("| " + " | ".join(row) + " |")
    notes = [
        "",
        _seeds_said(meta, cells) + ". Bayesian model selection over function classes on Z_n (the sequel): `kl` is the mean "
        "KL(Bayes‖model) at the queries, in bits against the exact posterior predictive (every class's hypotheses "
        "consistent with the shown pairs, weighted by the exact class posterior); `class_posterior_mae` is the class "
        "posterior read from the model's predictive (the weights whose mixture of the exact within-class predictives "
        "is closest to it) against the exact P(C | D), mean over classes of |w_C − P(C | D)|, at the positions where "
        "the weights are identified (a column of one class has none). Each cell: mean over seeds [95% interval "
        "across seeds, Student's t]; with one seed, [its bootstrap interval over sequences]b; per-seed values in "
        "sequel_table.json. The Bayes oracle is 0 by construction; the context-blind optimum sees only its position "
        "and its own token: the floor without in-context inference. The header-blind optimum (the columns whose "
        "header states a per-episode relabelling) sees every shown pair but not the header: the best a model that "
        "never uses the relabelling can do. The in-context-facts control is the transformer's alone.",
        _time_line(meta),
        f"Command: `{meta['command']}`",
    ]
    return "\n".join(lines + notes) + "\n"


def _time_line(meta: dict[str, Any]) -> str:
    """Training time of every cell in the table, and this invocation's wall time (cells finished by
    an earlier invocation are reused, so the wall time alone would understate a table's cost)."""
    line = f"Training time of all cells {meta['train_s_total'] / 60:.1f} min (summed over cells); "
    reused = meta.get("cells_reused", 0)
    line += f"this invocation {meta['wall_s'] / 60:.1f} min wall on {meta['device']} ({meta['workers']} workers"
    return line + (f", {reused} of {meta['cells']} cells reused from earlier invocations)." if reused else ").")


def page(markdown: str, cells: list[dict[str, Any]], columns: list[str], archs: list[str],
          family: str = "primitives") -> str:
    """The table as a web page, then each cell's entropy and learning-curve figures (seed 0) in a grid."""
    return _html_grid(markdown, cells, columns, archs, "entropy.png", "Entropy per position (model vs Bayes)",
                      family) \
        + _html_grid("", cells, columns, archs, "training.png", "Learning curves (seed 0)", family)


def _html_grid(markdown: str, cells: list[dict[str, Any]], columns: list[str], archs: list[str], figure: str,
               title: str, family: str = "primitives") -> str:
    by = {(c["task"], c["arch"]): c for c in cells}
    rows = []
    for line in markdown.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            tag = "th" if not rows else "td"
            rows.append("<tr>" + "".join(f"<{tag}>{html.escape(x.strip())}</{tag}>" for x in line.strip("|").split("|")) + "</tr>")
    grid = ["<table class=grid><tr><th></th>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"]
    for arch in archs:
        grid.append(f"<tr><th>{arch}</th>")
        for col in columns:
            cell = by.get((col, arch))
            img = Path(cell["run_dirs"][0]) / "figures" / figure if cell else None
            if img is not None and img.is_file():
                data = base64.b64encode(img.read_bytes()).decode()
                grid.append(f"<td><img src='data:image/png;base64,{data}' width=320></td>")
            else:
                grid.append("<td>—</td>")
        grid.append("</tr>")
    grid.append("</table>")
    notes = "".join(f"<p>{html.escape(l)}</p>" for l in markdown.splitlines() if l and not l.startswith("|"))
    page = "inference-primitives table" if family == "primitives" else f"{family} table"
    head = (
        f"<!doctype html><meta charset=utf-8><title>windtunnel: {page}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style>"
        f"<h1>{html.escape(FAMILIES[family].title)}</h1><table>" + "".join(rows) + "</table>" + notes
    ) if markdown else ""
    return head + f"<h2>{html.escape(title)}</h2>" + "".join(grid)
