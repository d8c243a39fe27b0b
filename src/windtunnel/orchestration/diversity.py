"""Memorisation vs inference: the task-diversity sweep read from its cells.

Each cell ``pool_{P}-{arch}-s{seed}`` trained the bijection column on a finite pool of ``P``
permutations; its ``eval.json`` scores the model in the pool against the pool's posterior (what
memorising can reach) and the true prior's (what inferring reaches), and on fresh permutations against
their posterior (:class:`~windtunnel.evaluation.evaluate.EvalResult` ``priors``).  The fresh column
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

The same sweep on HMM filtering (``hmm_pool_{P}`` cells; the ``hmm`` column is the infinite pool): an
HMM's matrices are in its header, so the pool's posterior *is* the true prior's and nothing but the
filter can be learned; what the pool limits is how many HMMs the model saw.  Its summary is
``generalises_from``: the smallest pool from which, on every larger pool, the KL on fresh HMMs is at most
twice the KL on the pool's own.

``windtunnel diversity`` writes ``diversity.{json,md,png}`` (bijection) and ``diversity_hmm.{json,md,png}``
(HMM) into the cells' preset folder (``results/quick/``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..run import grid
from ..evaluation.stats import json_safe, mean_std
from ..evaluation.log_axis import log_scale, loggable

ARCHS = ("transformer", "mamba", "lstm")
SEEDS = (0, 1, 2)
SWEEPS: dict[str, tuple[str, str, str]] = {"bijection": ("pool_{}", "bijection", "diversity"),
                                          "hmm": ("hmm_pool_{}", "hmm", "diversity_hmm")}
"""Sweep name → (pooled column pattern, the fresh column, the files' stem)."""
GENERALISES = 2.0
"""An HMM model generalises from a pool once its KL on fresh HMMs is at most this multiple of its KL in the pool."""


def _cell(results: Path, preset: str, column: str, arch: str, seed: int) -> dict[str, Any] | None:
    path = results / preset / "cells" / f"{column}-{arch}-s{seed}" / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _value(table: dict[str, Any], metric: str) -> float | None:
    entry = table.get(metric) or {}
    return entry.get("value")


def summarise(results: str | Path = "results", preset: str = "quick", sweep: str = "bijection") -> dict[str, Any]:
    """The sweep's table (see the module docstring) from the committed cells; pools or architectures
    without a cell are left out, and ``missing`` names the cells not (yet) there."""
    results = Path(results)
    pattern, fresh, _ = SWEEPS[sweep]
    rows: dict[str, list[dict[str, Any]]] = {}
    missing = []
    for arch in ARCHS:
        for size in (*grid.POOL_SIZES, None):
            column = fresh if size is None else pattern.format(size)
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
        sizes = [r["pool"] for r in rs if r["pool"] is not None]
        if sweep == "hmm":
            ok = [r["kl_fresh"]["mean"] <= GENERALISES * r["kl_to_pool"]["mean"] for r in rs if r["pool"] is not None]
            summary[arch] = {"generalises_from": next((sizes[i] for i in range(len(sizes)) if all(ok[i:])), None)}
        else:
            closer = [r["tv_to_true"]["mean"] < r["tv_to_pool"]["mean"] for r in rs if r["pool"] is not None]
            summary[arch] = {"inferring_from": next((sizes[i] for i in range(len(sizes)) if all(closer[i:])), None)}
    return json_safe({"sweep": sweep, "preset": preset, "pool_sizes": list(grid.POOL_SIZES), "rows": rows,
                      "summary": summary, "missing": missing})


def headline(doc: dict[str, Any], arch: str) -> str:
    """One line: where ``arch`` switches (bijection) or generalises (HMM)."""
    s = doc["summary"][arch]
    if doc.get("sweep") == "hmm":
        size, what = s["generalises_from"], f"KL on fresh HMMs within {GENERALISES:g}x of the pool's"
        arch = f"{arch} (HMM)"
    else:
        size, what = s["inferring_from"], "closer to the true prior than to the pool"
    if size is None:  # no finite pool from which every larger pool made so far qualifies
        return f"{arch}: {what} at no finite pool size made so far"
    return f"{arch}: {what} from pool size {size}"


def _fmt(ms: dict[str, Any]) -> str:
    if ms["n"] == 0:
        return "—"
    ci = ms.get("ci95")
    return f"{ms['mean']:.3g}" + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")


def markdown(doc: dict[str, Any]) -> str:
    """The sweep as a Markdown table per architecture."""
    if doc.get("sweep") == "hmm":
        return _markdown_hmm(doc)
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


def _markdown_hmm(doc: dict[str, Any]) -> str:
    out = ["# Memorisation vs inference on HMM filtering: the task-diversity sweep", "",
           "The HMM column (S=O=5, K=20) trained on a finite pool of HMMs (`windtunnel reproduce beyond`); made by "
           "`windtunnel diversity`. Mean over seeds [95% interval]. The matrices are in each episode's header, so "
           "the pool's posterior is the true prior's: KL in the pool is the filter's error on HMMs it trained on, "
           "KL fresh on HMMs it never saw.", ""]
    for arch, rs in doc["rows"].items():
        out += [f"## {arch}", "", headline(doc, arch) + ".", "",
                "| pool | seeds | KL in the pool (bits) | KL fresh (bits) | TV fresh |", "|---|---|---|---|---|"]
        for r in rs:
            out.append(f"| {'∞' if r['pool'] is None else r['pool']} | {r['seeds']} | {_fmt(r['kl_to_pool'])} | "
                       f"{_fmt(r['kl_fresh'])} | {_fmt(r['tv_fresh'])} |")
        out.append("")
    if doc["missing"]:
        out += [f"Cells not yet made ({len(doc['missing'])}): run `windtunnel reproduce beyond`.", ""]
    return "\n".join(out)


def _panels(doc: dict[str, Any], rows: int) -> tuple[Any, Any, list[str], int]:
    """A figure with ``rows`` panels per architecture, the architectures, and where ∞ sits on the x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = list(doc["rows"])
    fig, ax = plt.subplots(rows, max(1, len(archs)), figsize=(4.2 * max(1, len(archs)), 3.2 * rows + 0.2 * (rows == 1)),
                           squeeze=False)
    return fig, ax, archs, max(doc["pool_sizes"]) * 4


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure_hmm(doc: dict[str, Any], path: Path) -> Path:
    """Per architecture: KL in the pool and on fresh HMMs against pool size (∞ at the right), log scale."""
    fig, ax, archs, top = _panels(doc, 1)
    for j, arch in enumerate(archs):
        rs = doc["rows"][arch]
        x = [top if r["pool"] is None else r["pool"] for r in rs]
        pool, fresh = [r["kl_to_pool"]["mean"] for r in rs], [r["kl_fresh"]["mean"] for r in rs]
        ax[0, j].plot(x, loggable(pool), "o-", ms=3, label="HMMs of the pool")
        ax[0, j].plot(x, loggable(fresh), "s--", ms=3, label="fresh HMMs")
        ax[0, j].set_xscale("log", base=4)
        log_scale(ax[0, j], pool, fresh)  # a diverged cell's NaN is left out and said, not a failed figure
        ax[0, j].set_xticks([*doc["pool_sizes"][::2], top], [*map(str, doc["pool_sizes"][::2]), "∞"])
        ax[0, j].set_title(arch, fontsize=9)
        ax[0, j].set_ylabel("KL to the posterior (bits)")
        ax[0, j].set_xlabel("pool size (HMMs)")
        ax[0, j].legend(fontsize=7)
    return _save(fig, path)


def figure(doc: dict[str, Any], path: Path) -> Path:
    """Per architecture: TV to the pool's and to the true posterior against pool size (∞ at the right),
    and the total variation on fresh permutations beside the pool oracle's."""
    fig, ax, archs, top = _panels(doc, 2)
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
    return _save(fig, path)


def write(results: str | Path = "results", preset: str = "quick", sweep: str = "bijection") -> tuple[Path, dict[str, Any]]:
    """Write ``{results}/{preset}/{stem}.{json,md,png}`` of one sweep (``SWEEPS``); returns the Markdown path
    and the summary."""
    from ..io import write_text_atomic

    doc = summarise(results, preset, sweep)
    out, stem = Path(results) / preset, SWEEPS[sweep][2]
    write_text_atomic(out / f"{stem}.json", json.dumps(doc, indent=1))
    md = out / f"{stem}.md"
    write_text_atomic(md, markdown(doc))
    if doc["rows"]:
        (figure_hmm if sweep == "hmm" else figure)(doc, out / f"{stem}.png")
    return md, doc
