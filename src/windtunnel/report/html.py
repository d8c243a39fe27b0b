"""One self-contained ``report.html`` (and a ``summary.md``) per run folder.

Reads what is there — ``config.json``, ``metrics.jsonl``, ``eval.json``
(``EvalResult.to_dict()``), ``figures/*.png``, optional ``geometry.json`` — and writes
``report.html`` with every figure base64-embedded (no external file, script or stylesheet) and a
Markdown ``summary.md`` beside it.  Missing pieces are skipped; the standard figures
(training, entropy, KL) are drawn into ``figures/`` first when their data exist and the PNG does
not (existing files are never overwritten).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import base64
import datetime as _dt
import html
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any, Mapping

from . import figures as F
from ..errors import is_real
from ..run import grid

__all__ = ["render_report"]

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;background:#f6f7f9;color:#222;line-height:1.45}
main{max-width:1050px;margin:0 auto;padding:24px 28px 60px;background:#fff;box-shadow:0 0 12px rgba(0,0,0,.06)}
h1{font-size:1.6em;margin:.2em 0 .1em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:2px solid #e4e7eb;padding-bottom:.2em}
h3{font-size:1.02em;margin-top:1.2em}
.sub{color:#666;margin-bottom:1em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.9em}
th,td{border:1px solid #dde1e6;padding:4px 9px;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f0f2f5;text-align:center}td.l,th.l{text-align:left}
tr.oracle td{color:#666;background:#fafafa}
.ci{color:#777;font-size:.85em}
pre{background:#f4f5f7;border:1px solid #e1e4e8;border-radius:4px;padding:10px 12px;overflow-x:auto;font-size:.85em}
figure{margin:1.2em 0;text-align:center}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:.88em}
.kv td:first-child{text-align:left;color:#444}
.note{color:#666;font-size:.88em}
"""

_UNITS = {
    "entropy_mae_curve": "bits", "entropy_mae": "bits", "kl": "bits", "tv": "prob.", "infeasible_mass": "prob.",
    "accuracy": "fraction", "nll": "bits", "bayes_nll": "bits",
}



def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "—"
        if x == 0:
            return "0"
        if abs(x) >= 1e4 or abs(x) < 1e-3:
            return f"{x:.3e}"
        return f"{x:.4g}"
    return str(x)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("torch", "numpy", "matplotlib", "windtunnel"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception:  # pragma: no cover - reporting must not fail on a missing module
            out[mod] = "not installed"
    out["platform"] = platform.platform()
    return out


def _figure_key(p: Path) -> tuple[int, str]:
    for i, stem in enumerate(F.FIGURE_ORDER):
        if p.stem.startswith(stem):
            return (i, p.name)
    return (len(F.FIGURE_ORDER), p.name)


def _ensure_figures(rd: "RunDir", ev: Mapping[str, Any] | None) -> None:
    fig_dir = rd.figures
    have = {p.stem for p in fig_dir.glob("*.png")}
    jobs = []
    if rd.log_path.is_file() and not any(s.startswith("training") for s in have):
        jobs.append(lambda: F.training_curves(rd.log_path, fig_dir / "training.png"))
    if ev and "curves" in ev:
        if not any(s.startswith("entropy") for s in have) and "entropy_model" in ev["curves"]:
            jobs.append(lambda: F.entropy_curve(ev, fig_dir / "entropy.png"))
        if not any(s.startswith("kl") for s in have) and "kl" in ev["curves"]:
            jobs.append(lambda: F.kl_curve(ev, fig_dir / "kl.png"))
    for job in jobs:
        try:
            job()
        except Exception as e:  # a figure must never stop the report
            print(f"windtunnel report: skipped a figure ({type(e).__name__}: {e})", file=sys.stderr)


def _metric_names(*tables: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for t in tables:
        names += [k for k in t if k not in names]
    return names


def _cell(entry: Mapping[str, Any] | None) -> str:
    if not entry:
        return "<td>—</td>"
    ci = entry.get("ci") or [None, None]
    return (f"<td>{_fmt(entry.get('value'))}<br><span class='ci'>[{_fmt(ci[0])}, {_fmt(ci[1])}]</span></td>")


def _metrics_table(rows: list[tuple[str, Mapping[str, Any], str]]) -> str:
    names = _metric_names(*(t for _, t, _ in rows))
    if not names:
        return ""
    head = "".join(f"<th>{html.escape(n)}<br><span class='ci'>{_UNITS.get(n, '')}</span></th>" for n in names)
    body = []
    for label, table, cls in rows:
        cells = "".join(_cell(table.get(n)) for n in names)
        body.append(f"<tr class='{cls}'><td class='l'>{html.escape(label)}</td>{cells}</tr>")
    return f"<table><tr><th class='l'>row</th>{head}</tr>{''.join(body)}</table>"


def _md_table(rows: list[tuple[str, Mapping[str, Any]]]) -> str:
    names = _metric_names(*(t for _, t in rows))
    if not names:
        return ""
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, table in rows:
        cells = []
        for n in names:
            e = table.get(n)
            if not e:
                cells.append("—")
                continue
            ci = e.get("ci") or [None, None]
            cells.append(f"{_fmt(e.get('value'))} [{_fmt(ci[0])}, {_fmt(ci[1])}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _flatten(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Flatten nested dicts to dotted keys; long numeric lists are summarised."""
    out: list[tuple[str, Any]] = []
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list):
        nums = [x for x in obj if is_real(x)]
        if obj and len(nums) == len(obj):
            if len(obj) <= 8:
                out.append((prefix, "[" + ", ".join(_fmt(x) for x in obj) + "]"))
            else:
                out.append((prefix, f"{len(obj)} values, min {_fmt(min(nums))}, max {_fmt(max(nums))}, "
                                    f"mean {_fmt(sum(nums) / len(nums))}"))
        elif obj and all(isinstance(x, Mapping) for x in obj) and len(obj) <= 50:
            for i, x in enumerate(obj):
                out += _flatten(x, f"{prefix}[{i}]")
        else:
            s = json.dumps(obj)
            out.append((prefix, s if len(s) <= 200 else s[:197] + "..."))
    else:
        out.append((prefix, obj))
    return out


def _kv_table(pairs: list[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(_fmt(v))}</td></tr>" for k, v in pairs)
    return f"<table class='kv'>{rows}</table>"


def _training_summary(rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    steps = [r for r in rows if isinstance(r.get("step"), (int, float))]
    if not steps:
        return []
    last = steps[-1]
    out: list[tuple[str, Any]] = [("logged lines", len(rows)), ("last step", last["step"])]
    for k in ("loss", "bayes_gap", "lr"):
        vals = [r[k] for r in steps if isinstance(r.get(k), (int, float))]
        if vals:
            out.append((f"final {k}", vals[-1]))
    return out


if TYPE_CHECKING:
    from ..run.runs import RunDir


def render_report(run_dir: "str | Path | RunDir") -> tuple[str, str]:
    """A run folder's report: the self-contained ``report.html`` and the ``summary.md`` texts, which
    :func:`windtunnel.orchestration.stages.write_report` writes.  Figures an older evaluation lacks are drawn into
    the run's ``figures/``.

    The folder must hold a readable ``config.json``; ``eval.json`` and ``geometry.json`` are shown
    when present and must then be readable (``RunError`` otherwise: a damaged record is never
    reported as an empty one).
    """
    from ..run.runs import RunDir

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    run = rd.path
    config = rd.read_config()
    ev = rd.read_eval() if rd.eval_path.exists() else None
    geometry = rd.read_geometry()
    rows = rd.metrics()
    _ensure_figures(rd, ev)
    figs = sorted(rd.figures.glob("*.png"), key=_figure_key)
    versions = _versions()
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")

    title = f"windtunnel run — {run.resolve().name}"
    sub = []
    if ev:
        t = ev.get("task", {})
        params = ", ".join(f"{k}={v}" for k, v in t.get("params", {}).items())
        sub.append(f"task <b>{html.escape(str(t.get('name')))}</b>({html.escape(params)})")
        m = ev.get("model") or {}
        if m:
            sub.append(f"model {html.escape(str(m.get('class')))} · {_fmt(m.get('n_params'))} parameters")
        sub.append(f"{ev.get('n')} evaluation episodes (seed {ev.get('seed')}), "
                   f"{int(100 * ev.get('level', 0.95))}% bootstrap over sequences, {ev.get('n_boot')} resamples")
    parts = [f"<h1>{html.escape(title)}</h1><div class='sub'>{' · '.join(sub)}<br>generated {now}</div>"]
    md = [f"# {title}", ""]
    stale = rd.stale_results()
    if stale:  # a result of another checkpoint or configuration than the run's newest: say so first
        parts.append("<p class='note'><b>Stale:</b> " + html.escape("; ".join(stale)) + "</p>")
        md += ["**Stale:** " + "; ".join(stale), ""]
    steps = (config.get("train") or {}).get("steps")
    done = rd.latest_step() if rd.checkpoints.is_dir() else ((ev or {}).get("provenance") or {}).get("step")
    off = grid.off_recipe(config.get("train") or {}) if config else None
    if off:  # the claims' ids below are judged on the grid's recipe: a run of another recipe says so first
        name, p, differ = off
        line = (f"this run's recipe is not the grid's {name} recipe ({p} preset): {', '.join(differ)} differ, so its "
                "numbers and verdicts are its own, not the claims' of results/CLAIMS.md")
        parts.append(f"<p class='note'><b>Off-recipe:</b> {html.escape(line)}</p>")
        md += [f"**Off-recipe:** {line}", ""]
    diverged = rd.divergence()
    if diverged:  # before any verdict: the numbers are the last good checkpoint's, and training cannot go on as it was
        line = (f"{diverged['message']}: every number and verdict below is of the last good checkpoint (step "
                f"{diverged['last_good_step']}), not of its recipe")
        parts.append(f"<p class='note'><b>Diverged:</b> {html.escape(line)}</p>")
        md += [f"**Diverged:** {line}", ""]
    elif isinstance(steps, int) and isinstance(done, int) and done < steps:  # before any verdict, not after
        line = (f"trained to step {done} of its {steps}: every number and verdict below is of an unfinished run, "
                "not of its recipe")
        parts.append(f"<p class='note'><b>Unfinished:</b> {html.escape(line)}</p>")
        md += [f"**Unfinished:** {line}", ""]

    if ev and ev.get("metrics"):
        parts.append("<h2>Metrics vs the exact posterior</h2>")
        parts.append("<p class='note'>All distances in bits over scored positions; value with 95% bootstrap "
                     "interval. The Bayes oracle row must be ~0 on the error metrics (a check on the pipeline).</p>")
        main_rows = [("model", ev["metrics"], "model")]
        if ev.get("oracle"):
            main_rows.append(("Bayes oracle", ev["oracle"], "oracle"))
        parts.append(_metrics_table(main_rows))
        md += ["## Metrics (bits; 95% bootstrap CI)", "", _md_table([(r[0], r[1]) for r in main_rows]), ""]
        lengths = ev.get("lengths") or {}
        if lengths:
            hz = ev.get("horizon") or {}
            parts.append("<h3>Length generalisation</h3>")
            parts.append(f"<p class='note'>Training horizon: {html.escape(str(hz.get('param')))} = "
                         f"{html.escape(str(hz.get('value')))} ({hz.get('seq_len')} tokens). "
                         "“beyond” rows score only the positions past the training horizon.</p>")
            lrows = []
            for K in sorted(lengths, key=lambda k: int(k)):
                v = lengths[K]
                lrows.append((f"{hz.get('param') or 'length'}={K}", v.get("metrics", {}), "model"))
                if v.get("beyond_horizon"):
                    lrows.append((f"{hz.get('param') or 'length'}={K}, beyond", v["beyond_horizon"], "model"))
                if v.get("oracle"):
                    lrows.append((f"{hz.get('param') or 'length'}={K}, oracle", v["oracle"], "oracle"))
            parts.append(_metrics_table(lrows))
            md += ["## Length generalisation", "", _md_table([(r[0], r[1]) for r in lrows]), ""]
        priors = ev.get("priors") or {}
        if priors:
            labels = {"in_pool_vs_true_prior": ("model, pool episodes vs the true-prior posterior", "model"),
                      "task_oracle_vs_true_prior": ("pool oracle, pool episodes vs the true-prior posterior", "oracle"),
                      "fresh": ("model, fresh latents vs their posterior", "model"),
                      "task_oracle_on_fresh": ("pool oracle, fresh latents", "oracle")}
            prows = [(labels[k][0], v, labels[k][1]) for k, v in priors.items() if k in labels]
            parts.append("<h3>Memorisation vs inference</h3>")
            parts.append("<p class='note'>The run's latents come from a finite pool. A model that memorised the pool "
                         "is close to the pool's posterior (the rows above) and far from the posterior on fresh latents; "
                         "one that infers scores near 0 there. The pool oracle uses the pool's posterior while a member "
                         "agrees with the context and the true prior's once none does. Against a posterior that gives a "
                         "value zero mass the KL is bounded only by the probability floor: read the total variation.</p>")
            parts.append(_metrics_table(prows))
            md += ["## Memorisation vs inference", "", _md_table([(r[0], r[1]) for r in prows]), ""]

    reads = _readings(geometry)
    if reads:
        # what each diagnostic says about the papers' claims, before the numbers behind it
        head = ("claim", "statistic", "value", "null", "direction", "verdict", "what it means")
        read_rows = [(r.claim, r.statistic, _fmt(r.value),
                      f"{r.null} {_fmt(r.null_value)}" if r.null_value is not None else r.null, r.direction,
                      {True: "consistent", False: "not consistent", None: "undecided"}[r.consistent],
                      r.meaning + ("" if not r.flags else " — " + "; ".join(r.flags))) for r in reads]
        parts.append("<h2>What the geometry says</h2><p class='note'>Each diagnostic's statistic beside its null, and "
                     "whether it is consistent with the paper's claim it tests (ids as in results/CLAIMS.md).</p>"
                     "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
                     + "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                               for row in read_rows) + "</table>")
        md += ["## What the geometry says", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        md += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in read_rows] + [""]
    from ..geometry.registry import discover

    geo_order = tuple(discover())
    geo_figs = [p for p in figs if p.stem.startswith("geometry_")] if geometry is not None else []
    geo_figs.sort(key=lambda p: (geo_order.index(p.stem[9:]) if p.stem[9:] in geo_order else len(geo_order), p.name))
    figs = [p for p in figs if p not in geo_figs]

    def embed(p: Path) -> None:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        parts.append(f"<figure><img alt='{html.escape(p.stem)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{html.escape(p.name)}</figcaption></figure>")
        md.append(f"![{p.stem}](figures/{p.name})")

    if figs:
        parts.append("<h2>Figures</h2>")
        md += ["## Figures", ""]
        for p in figs:
            embed(p)
        md.append("")

    if geometry is not None:
        parts.append("<h2>Geometry</h2>")
        md += ["## Geometry", ""]
        summary = geometry.get("summary") if isinstance(geometry, Mapping) else None
        if isinstance(summary, Mapping):
            # windtunnel.geometry.diagnose output: headline numbers (each beside its null) first,
            # then the figures, then every number behind a fold (geometry.json has them all)
            parts.append("<p class='note'>Paper I's diagnostics (windtunnel.geometry); definitions and nulls are "
                         "in geometry.json and the function docstrings. “untrained”, “gaussian”, “uniform”, "
                         "“position_only”, “shuffled” entries are null baselines.</p>")
            parts.append(_kv_table(list(summary.items())))
            md += ["| key | value |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in summary.items()] + [""]
            for p in geo_figs:
                embed(p)
            rest = {k: v for k, v in geometry.items() if k != "summary"}
            parts.append("<details><summary>All geometry numbers</summary>"
                         + _kv_table(_flatten(rest)) + "</details>")
            md += ["", "All numbers: `geometry.json`."]
        else:
            parts.append(_kv_table(_flatten(geometry)))
            md += ["| key | value |", "|---|---|"]
            md += [f"| {k} | {_fmt(v)} |" for k, v in _flatten(geometry)]
            for p in geo_figs:
                embed(p)
        md.append("")

    train = _training_summary(rows)
    seconds = rd.training_seconds()
    if seconds is not None:
        train.append(("training wall time (s)", seconds))
    if train:
        parts.append("<h2>Training</h2>" + _kv_table(train))
        md += ["## Training", ""] + [f"- {k}: {_fmt(v)}" for k, v in train] + [""]

    timings: list[tuple[str, Any]] = []
    if ev and ev.get("timings"):
        timings += [(f"eval.{k}", v) for k, v in ev["timings"].items()]
    timings += [(f"run.{k}", v) for k, v in rd.timings().items()]
    if timings:
        parts.append("<h2>Timings (seconds unless named)</h2>" + _kv_table(timings))
        md += ["## Timings", ""] + [f"- {k}: {_fmt(v)}" for k, v in timings] + [""]

    if config is not None:
        parts.append("<h2>Configuration</h2><pre>" + html.escape(json.dumps(config, indent=2, sort_keys=True)) + "</pre>")
        md += ["## Configuration", "", "```json", json.dumps(config, indent=2, sort_keys=True), "```", ""]

    parts.append("<h2>Versions</h2>" + _kv_table(list(versions.items())))
    md += ["## Versions", ""] + [f"- {k}: {v}" for k, v in versions.items()] + [""]

    doc = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{_CSS}</style></head>"
           f"<body><main>{''.join(parts)}</main></body></html>")
    return doc, "\n".join(md)


def _readings(geometry: Any) -> list[Any]:
    """The diagnostics' readings of a ``geometry.json`` (empty for anything else)."""
    if not isinstance(geometry, Mapping) or not isinstance(geometry.get("summary"), Mapping):
        return []
    from ..geometry.run import readings

    try:
        return readings(dict(geometry))
    except (TypeError, KeyError, ValueError):  # a geometry.json of another shape: shown as numbers only
        return []
