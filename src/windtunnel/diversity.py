"""Memorisation vs inference: the task-diversity sweep read from its cells.

Each cell ``pool_{P}-{arch}-s{seed}`` trained the bijection column on a finite pool of ``P``
permutations; its ``eval.json`` scores the model in the pool against the pool's posterior (what
memorising can reach) and the true prior's (what inferring reaches), and on fresh permutations against
their posterior (:class:`~windtunnel.evaluation.EvalResult` ``priors``).  The fresh column
(``bijection-{arch}-s{seed}``) is the infinite pool.  Per architecture and pool size, over the training
seeds (mean and Student-t 95% interval):

* ``tv_to_pool`` / ``tv_to_true``: mean total variation between the model and each posterior on
  episodes of the pool (a bounded distance: a KL against a posterior that gives a value zero mass is
  bounded only by the probability floor);
* ``kl_fresh`` / ``tv_fresh``: KL in bits and total variation to the posterior on fresh permutations —
  near 0 for a model that infers;
* ``pool_oracle_tv_fresh``: the total variation of the pool's own oracle there (the pool's posterior
  while a member agrees with the context, the true prior's once none does).

``inferring_from`` is the smallest pool from which the model is closer (in mean TV) to the true-prior
posterior than to the pool's on every larger pool: where it switches from memorising to inferring.

``windtunnel diversity`` writes ``diversity.json``, ``diversity.md`` and ``diversity.png`` beside the
cells' preset folder (``results/quick/``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import grid
from .stats import json_safe, mean_std

ARCHS = ("transformer", "mamba", "lstm")
SEEDS = (0, 1, 2)


def _cell(results: Path, preset: str, column: str, arch: str, seed: int) -> dict[str, Any] | None:
    path = results / preset / "cells" / f"{column}-{arch}-s{seed}" / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _value(table: dict[str, Any], metric: str) -> float | None:
    entry = table.get(metric) or {}
    return entry.get("value")


def summarise(results: str | Path = "results", preset: str = "quick") -> dict[str, Any]:
    """The sweep's table (see the module docstring) from the committed cells; pools or architectures
    without a cell are left out, and ``missing`` names the cells not (yet) there."""
    results = Path(results)
    rows: dict[str, list[dict[str, Any]]] = {}
    missing = []
    for arch in ARCHS:
        for size in (*grid.POOL_SIZES, None):
            column = "bijection" if size is None else f"pool_{size}"
            evs = [_cell(results, preset, column, arch, s) for s in SEEDS]
            missing += [f"{column}-{arch}-s{s}" for s, ev in zip(SEEDS, evs) if ev is None]
            evs = [ev for ev in evs if ev is not None]
            if not evs:
                continue
            pri = [ev.get("priors") or {} for ev in evs]
            row = {"pool": size, "seeds": len(evs),
                   "kl_to_pool": mean_std([_value(ev["metrics"], "kl") for ev in evs]),
                   "tv_to_pool": mean_std([_value(ev["metrics"], "tv") for ev in evs])}
            if size is None:  # fresh permutations: the pool is the true prior
                row.update(tv_to_true=row["tv_to_pool"], kl_fresh=row["kl_to_pool"], tv_fresh=row["tv_to_pool"],
                           pool_oracle_tv_fresh=mean_std([0.0] * len(evs)))
            else:
                row.update(tv_to_true=mean_std([_value(p.get("in_pool_vs_true_prior", {}), "tv") for p in pri]),
                           kl_fresh=mean_std([_value(p.get("fresh", {}), "kl") for p in pri]),
                           tv_fresh=mean_std([_value(p.get("fresh", {}), "tv") for p in pri]),
                           pool_oracle_tv_fresh=mean_std([_value(p.get("task_oracle_on_fresh", {}), "tv") for p in pri]))
            rows.setdefault(arch, []).append(row)
    summary = {}
    for arch, rs in rows.items():
        closer = [r["tv_to_true"]["mean"] < r["tv_to_pool"]["mean"] for r in rs if r["pool"] is not None]
        sizes = [r["pool"] for r in rs if r["pool"] is not None]
        switch = next((sizes[i] for i in range(len(sizes)) if all(closer[i:])), None)
        summary[arch] = {"inferring_from": switch}
    return json_safe({"preset": preset, "pool_sizes": list(grid.POOL_SIZES), "rows": rows, "summary": summary,
                      "missing": missing})


def _fmt(ms: dict[str, Any]) -> str:
    if ms["n"] == 0:
        return "—"
    ci = ms.get("ci95")
    return f"{ms['mean']:.3g}" + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")


def markdown(doc: dict[str, Any]) -> str:
    """The sweep as a Markdown table per architecture."""
    out = ["# Memorisation vs inference: the task-diversity sweep", "",
           "The bijection column (V=10) trained on a finite pool of permutations (`windtunnel reproduce beyond`); "
           "made by `windtunnel diversity`. Mean over seeds [95% interval]. TV: mean total variation to each "
           "posterior on episodes of the pool; fresh: to the posterior on fresh permutations.", ""]
    for arch, rs in doc["rows"].items():
        s = doc["summary"][arch]["inferring_from"]
        out += [f"## {arch}", "", f"Closer to the true prior than to the pool from pool size: {s if s is not None else '—'}", "",
                "| pool | seeds | TV to pool posterior | TV to true posterior | KL fresh (bits) | TV fresh | pool oracle, TV fresh |",
                "|---|---|---|---|---|---|---|"]
        for r in rs:
            out.append(f"| {'∞' if r['pool'] is None else r['pool']} | {r['seeds']} | {_fmt(r['tv_to_pool'])} | "
                       f"{_fmt(r['tv_to_true'])} | {_fmt(r['kl_fresh'])} | {_fmt(r['tv_fresh'])} | {_fmt(r['pool_oracle_tv_fresh'])} |")
        out.append("")
    if doc["missing"]:
        out += [f"Cells not yet made ({len(doc['missing'])}): run `windtunnel reproduce beyond`.", ""]
    return "\n".join(out)


def figure(doc: dict[str, Any], path: Path) -> Path:
    """Per architecture: TV to the pool's and to the true posterior against pool size (∞ at the right),
    and the total variation on fresh permutations beside the pool oracle's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = list(doc["rows"])
    fig, ax = plt.subplots(2, max(1, len(archs)), figsize=(4.2 * max(1, len(archs)), 6.4), squeeze=False)
    top = max(doc["pool_sizes"]) * 4
    for j, arch in enumerate(archs):
        rs = doc["rows"][arch]
        x = [top if r["pool"] is None else r["pool"] for r in rs]
        for key, label in (("tv_to_pool", "to the pool's posterior"), ("tv_to_true", "to the true-prior posterior")):
            ax[0, j].errorbar(x, [r[key]["mean"] for r in rs], fmt="o-", ms=3, label=label,
                              yerr=[[r[key]["mean"] - (r[key]["ci95"] or [r[key]["mean"]] * 2)[0] for r in rs],
                                    [(r[key]["ci95"] or [r[key]["mean"]] * 2)[1] - r[key]["mean"] for r in rs]])
        ax[1, j].plot(x, [r["tv_fresh"]["mean"] for r in rs], "o-", ms=3, label="model")
        ax[1, j].plot(x, [r["pool_oracle_tv_fresh"]["mean"] for r in rs], "s--", ms=3, color="0.5", label="pool oracle")
        for a in ax[:, j]:
            a.set_xscale("log", base=4)
            a.set_xticks([*doc["pool_sizes"][::2], top], [*map(str, doc["pool_sizes"][::2]), "∞"])
        ax[0, j].set_title(arch, fontsize=9)
        ax[0, j].set_ylabel("mean total variation (pool episodes)")
        ax[1, j].set_ylabel("total variation on fresh permutations")
        ax[1, j].set_xlabel("pool size (permutations)")
        ax[0, j].legend(fontsize=7)
        ax[1, j].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(results: str | Path = "results", preset: str = "quick") -> tuple[Path, dict[str, Any]]:
    """Write ``{results}/{preset}/diversity.{json,md,png}``; returns the Markdown path and the summary."""
    from .checkpoint import write_text_atomic

    doc = summarise(results, preset)
    out = Path(results) / preset
    write_text_atomic(out / "diversity.json", json.dumps(doc, indent=1))
    md = out / "diversity.md"
    write_text_atomic(md, markdown(doc))
    if doc["rows"]:
        figure(doc, out / "diversity.png")
    return md, doc
