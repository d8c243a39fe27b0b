"""Readers of the committed artifacts: every number a claim's verdict uses comes through here.

:class:`Evidence` is rooted at a ``results/`` folder.  Each reader returns a :class:`Measure` (the
value, its 95% interval where one exists, how many training seeds it pools, and the files it was
read from) or ``None`` when the artifact is not committed; it never computes anything that needs a
model.  A damaged artifact raises :class:`~windtunnel.errors.UserError` naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import UserError, is_real
from ..evaluation.stats import t975


@dataclass(frozen=True)
class Measure:
    """One number of ours: ``value`` with its 95% ``ci`` (``None`` where a single value has none),
    ``seeds`` the number of training seeds pooled, ``values`` the per-seed values, ``files`` the
    committed artifacts it was read from (relative to the results folder)."""

    value: float
    ci: tuple[float, float] | None = None
    seeds: int | None = None
    values: tuple[float, ...] = ()
    files: tuple[str, ...] = ()

    def text(self, fmt: Callable[[float], str] | None = None) -> str:
        f = fmt or _g
        s = f(self.value)
        if self.ci is not None:
            s += f" [{f(self.ci[0])}, {f(self.ci[1])}]"
        return s


def _g(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 0.01:
        return f"{x:.3g}"
    return f"{x:.2g}"


UNBOUNDED = (-math.inf, math.inf)


def pooled(values: Sequence[float], files: Sequence[str] = (), bounds: tuple[float, float] = UNBOUNDED) -> Measure:
    """Mean over seeds with Student's-t 95% interval (``None`` for one seed), cut to ``bounds``, the values the
    quantity can take (:func:`quantity_range`): over three seeds a t-interval is wide (t = 4.30), and an accuracy
    interval reaching past 100% or a KL interval below zero says nothing the cut one does not."""
    v = [float(x) for x in values]
    n = len(v)
    m = sum(v) / n
    ci = None
    if n > 1:
        sd = math.sqrt(sum((x - m) ** 2 for x in v) / (n - 1))
        half = t975(n - 1) * sd / math.sqrt(n)
        ci = (max(m - half, bounds[0]), min(m + half, bounds[1]))
    return Measure(m, ci, n, tuple(v), tuple(files))


def quantity_range(name: str) -> tuple[float, float]:
    """The values the quantity ``name`` can take — an evaluation metric (``accuracy``, ``kl``, ``entropy_mae_curve``
    …) or a geometry statistic (``"diagnostic.statistic"``), read from its name: a probability, an accuracy, a share
    of variance, a responsibility or an |cos| or |ρ| lies in [0, 1]; a correlation or an adjusted Rand index in
    [−1, 1]; an R² at most 1; a KL, an entropy, an error, a fold change, a ratio (``ratio``, ``a_over_b``, a
    ``jump``) or a time in seconds (``train_s``) at least 0; anything else is not bounded.  An element of a list
    (``kl_by_layer.0``) or its ``min``/``max`` has the list's range."""
    parts = name.split(".")
    while len(parts) > 1 and (parts[-1].isdigit() or parts[-1] in ("min", "max")):
        parts.pop()  # an element of a statistic's list (``kl_by_layer.0``), or its extreme, is that statistic
    stat = parts[-1]
    words = set(stat.split("_"))
    if (stat in ("accuracy", "tv", "infeasible_mass") or words & {"accuracy", "responsibility", "var", "share"}
            or any(w in stat for w in ("abs_cos", "gaussian_expected", "spearman_abs", "abs_delta"))):
        return (0.0, 1.0)
    if words & {"spearman", "rho", "ari"}:
        return (-1.0, 1.0)
    if "r2" in words:
        return (-math.inf, 1.0)
    if words & {"kl", "entropy", "fold", "mae", "curve", "error", "ratio", "over", "jump"} or stat.endswith("_s"):
        return (0.0, math.inf)
    return UNBOUNDED


@dataclass
class Evidence:
    """The committed results under ``root`` (``results/``), read lazily and cached."""

    root: Path
    preset: str = "quick"
    _cache: dict[str, Any] = field(default_factory=dict)
    _recipes_checked: set[str] = field(default_factory=set)
    _presets: dict[str, "Evidence"] = field(default_factory=dict)
    #: cells trained for this many steps instead of their recipe's (a check at a laptop's scale); ``None``: the recipe
    steps: int | None = None
    #: the training seeds read (``None``: every seed a claim asks for); a claim's pooled number then has fewer
    seeds: tuple[int, ...] | None = None
    #: where the files that are not cells (the table, the references, language-model records) are read when ``root``
    #: lacks them: the committed results beside a check's own cells
    fallback: Path | None = None

    def scope(self) -> dict[str, Any]:
        """The keywords that make another reader of the same cells (another preset, a null)."""
        return {"steps": self.steps, "seeds": self.seeds, "fallback": self.fallback}

    @property
    def trained(self) -> "Evidence":
        """The results as the models produced them: this reader itself, or, for a null, the results it rewrites.
        Which cells learned their task — and so which cell a verdict is judged on — is a fact of the trained models;
        a claim reads it here, so that a null is scored on the very cell the verdict is judged on."""
        return self

    def _where(self, rel: str) -> Path:
        """Where ``rel`` is read: under ``root``, or, for a file that is not a cell's, under ``fallback`` when only
        that has it."""
        path = self.root / rel
        if not path.is_file() and self.fallback is not None and "/cells/" not in f"/{rel}":
            return self.fallback / rel
        return path

    def at(self, preset: str) -> "Evidence":
        """The same results folder read at another preset: its own cells, table and references (the paper
        preset's cells are the controls at the papers' size of some quick-preset claims)."""
        if preset == self.preset:
            return self
        if preset not in self._presets:
            self._presets[preset] = Evidence(self.root, preset, **self.scope())
        return self._presets[preset]

    def json(self, rel: str) -> Any | None:
        """A committed JSON file (``None`` if absent); a damaged one is a :class:`UserError`."""
        if rel not in self._cache:
            path = self._where(rel)
            if not path.is_file():
                self._cache[rel] = None
            else:
                try:
                    self._cache[rel] = json.loads(path.read_text())
                except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise UserError(f"{path} is damaged ({exc}); regenerate it with its command") from None
        return self._cache[rel]

    def text(self, rel: str) -> str | None:
        """A committed text file (``metrics.jsonl`` …, which a cell commits gzip-compressed as ``metrics.jsonl.gz``:
        read either way), ``None`` if absent."""
        from ..run.runs import read_stored_text, stored

        path = self._where(rel)
        return read_stored_text(path) if stored(path) is not None else None

    # --- the primitives table ---------------------------------------------------------------
    def table_cell(self, task: str, arch: str) -> dict[str, Any] | None:
        t = self.json(f"{self.preset}/table.json")
        for c in (t or {}).get("cells", []):
            if c["task"] == task and c["arch"] == arch:
                return c
        return None

    def table(self, task: str, arch: str, metric: str) -> Measure | None:
        """A table cell's metric over its seeds (mean, t-interval across seeds), read from the committed
        cells where every seed is committed — they are the table's own cells (``windtunnel table`` takes
        them) — else from ``table.json``.  ``metric`` is a table metric name (``kl``, ``kl@K=30`` …)."""
        from ..run.grid import SEEDS

        name, _, length = metric.partition("@K=")
        meta = (self.json(f"{self.preset}/table.json") or {}).get("meta") or {}
        # a table of other seeds or another recipe (--params, --steps) is its own experiment: its numbers stand
        default = meta.get("seeds", len(SEEDS)) == len(SEEDS) and not any(
            flag in str(meta.get("command", "")) for flag in ("--params", "--steps"))
        if default and self.cells(task, arch, SEEDS) is not None:
            m = self.eval_metric(task, arch, SEEDS, name, int(length) if length else None)
            if m is not None:
                return m
        c = self.table_cell(task, arch)
        if c is None or metric not in c["metrics"]:
            return None
        m = c["metrics"][metric]
        vals = [x for x in m["values"] if x is not None]
        return pooled(vals, [f"{self.preset}/table.json"], quantity_range(name))

    def reference(self, task: str, ref: str, metric: str) -> float | None:
        r = self.json(f"{self.preset}/references.json")
        try:
            return float(r[task][ref]["metrics"][metric])
        except (TypeError, KeyError):
            return None

    # --- the reproduction's cells -----------------------------------------------------------
    def folder(self, column: str, arch: str, seed: int) -> str:
        """A cell's folder under the results root: ``{preset}/cells/{column}-{arch}-s{seed}``, where ``column`` may
        name its preset (``main_paper_size@paper``: a paper-preset cell read by a claim judged at another)."""
        name, _, preset = column.partition("@")
        return f"{preset or self.preset}/cells/{name}-{arch}-s{seed}"

    def cells(self, column: str, arch: str, seeds: Sequence[int]) -> list[tuple[str, Path]] | None:
        """The cell folders of every seed, or ``None`` unless all are committed.  A committed cell trained
        under another recipe than the grid's for it now is a :class:`UserError` naming it: its numbers
        would be another experiment's.  ``column`` may name its preset (:meth:`folder`)."""
        from ..run import grid
        from ..run.runs import RunDir

        name, _, preset = column.partition("@")
        if preset and preset != self.preset:
            return self.at(preset).cells(name, arch, seeds)
        column = name
        seeds = [s for s in seeds if self.seeds is None or s in self.seeds]
        if not seeds:
            return None
        out = []
        for s in seeds:
            rel = self.folder(column, arch, s)
            if not (self.root / rel / "cell.json").is_file():
                return None
            if rel not in self._recipes_checked:
                if not RunDir(self.root / rel).holds(grid.Cell(self.preset, column, arch, s, steps=self.steps).config()):
                    raise UserError(f"{self.root / rel}/config.json is not the grid's recipe for this cell: it was "
                                    "trained under another one; regenerate it with `windtunnel reproduce`")
                self._recipes_checked.add(rel)
            out.append((rel, self.root / rel))
        return out

    def cell_stat(self, column: str, arch: str, seeds: Sequence[int], file: str,
                  get: Callable[[Any], float | None], bounds: tuple[float, float] = UNBOUNDED) -> Measure | None:
        """``get`` applied to each seed's ``file`` (``geometry.json``, ``eval.json`` …), pooled over seeds (its
        interval cut to ``bounds``); ``None`` unless every seed has the file and a finite value."""
        cells = self.cells(column, arch, seeds)
        if cells is None:
            return None
        vals, files = [], []
        for rel, _ in cells:
            doc = self.json(f"{rel}/{file}")
            if doc is None:
                return None
            if not isinstance(doc, dict) or not isinstance(doc.get(SHAPES.get(file, ""), {}), dict) or (
                    file in SHAPES and not doc.get(SHAPES[file])):
                raise UserError(f"{self.root / rel / file} is damaged: not a windtunnel {file} record; regenerate it "
                                "with `windtunnel reproduce`")
            try:
                v = get(doc)
            except (KeyError, TypeError, IndexError, ZeroDivisionError):  # the statistic is not in this file
                v = None
            if v is None or not math.isfinite(float(v)):
                return None
            vals.append(float(v))
            files.append(f"{rel}/{file}")
        return pooled(vals, files, bounds)

    def geometry(self, column: str, arch: str, seeds: Sequence[int], key: str) -> Measure | None:
        """A diagnostic's summary statistic (``"diagnostic.statistic"``) from ``geometry.json``, pooled over seeds."""
        return self.cell_stat(column, arch, seeds, "geometry.json", lambda g: _num(geometry_stat(g, key)),
                              quantity_range(key))


    def eval_metric(self, column: str, arch: str, seeds: Sequence[int], metric: str,
                    length: int | None = None) -> Measure | None:
        def get(ev: dict[str, Any]) -> float | None:
            block = ev["lengths"][str(length)]["metrics"] if length is not None else ev["metrics"]
            return _num(block.get(metric, {}).get("value"))

        return self.cell_stat(column, arch, seeds, "eval.json", get, quantity_range(metric))


SHAPES = {"eval.json": "metrics", "geometry.json": "summary"}
"""The table every record of a cell must hold, by file (the run folder's readers check the same)."""


def _num(x: Any) -> float | None:
    return float(x) if is_real(x) else None


def geometry_stat(doc: dict[str, Any], key: str) -> Any:
    """``doc[diagnostic]["summary"][statistic]`` for ``key = "diagnostic.statistic"`` (``None`` if absent)."""
    diag, _, stat = key.partition(".")
    block = doc.get(diag)
    if not isinstance(block, dict):
        return None
    return (block.get("summary") or {}).get(stat)


UNTRAINED_OF = {
    "key_orthogonality.layer0_mean_abs_cos": "key_orthogonality.layer0_untrained",
    "key_orthogonality.layer0_centred_mean_abs_cos": "key_orthogonality.layer0_centred_untrained",
    "attention_focusing.entropy_by_layer": "attention_focusing.untrained_entropy_by_layer",
    "qk_alignment.alignment_by_layer": "qk_alignment.untrained_alignment_by_layer",
    "value_manifold.final_resid_spearman_pc1_entropy": "value_manifold.final_resid_untrained_spearman",
    "value_manifold.final_resid_r2_entropy": "value_manifold.final_resid_untrained_r2",
    "probes.final_posterior_kl_bits": "probes.final_untrained_posterior_kl_bits",
    "probes.final_entropy_r2": "probes.final_untrained_entropy_r2",
    "probes.cluster_ari": "probes.cluster_ari_untrained",
    "probes.cluster_ari_token_removed": "probes.cluster_ari_token_removed_untrained",
    "bayes_lens.kl_by_layer": "bayes_lens.kl_by_layer_untrained",
}
"""Each geometry statistic a diagnostic also records for the same model at initialisation: the untrained null's
value of the statistic (the untrained model's reading is the trained one's, its own null reading itself)."""
NULL_STATS = ("untrained", "gaussian", "uniform", "exact_posteriors", "position_only", "entropy_position_r2",
              "confounded", "region")
"""Words that mark a geometry statistic as a null or a property of the task, not of the trained model: an untrained
null's ``geometry.json`` keeps these as they are."""

REFERENCE_NULLS = ("context_blind", "oracle", "window_1")
"""The predictors a cell's ``references.json`` scores on its own evaluation episodes, each a null in place of the
model's ``eval.json``: the context-blind optimum, the Bayes oracle, and the exact posterior given only the latest
observation (``window_1``, where the task has one: for the HMM the filter that reads the header and the current
symbol but carries no belief through time; for bijection the elimination by the last shown pair alone).  A rule the
latter meets cannot tell a model that accumulates evidence along the sequence from one that reads one step."""
CELL_NULLS = REFERENCE_NULLS + ("untrained",)
"""The nulls read from a cell's own files: the reference predictors (:data:`REFERENCE_NULLS`) in place of the
model's ``eval.json``, and the untrained model in place of its ``geometry.json`` (the statistics of
:data:`UNTRAINED_OF`)."""
LLM_NULLS = ("always_certain", "always_uniform", "no_evidence", "k_only", "bayes_state")
"""The trivial answers to a language model's in-context task: all mass on one label (entropy 0) and the same mass on
every label (entropy log2 of their number), in place of the model's entropies in a SULA record; the model itself
on prompts whose labels carry no evidence (shuffled: the exact posterior stays at 1 bit), in place of its movement
along PC1 on the normal prompts; and a representation that knows only how many examples a prompt shows (the best
any function of k does, :func:`~windtunnel.llm.example_count.k_only_rho`), in place of PC1's correlation with the exact
posterior entropy (which falls with k on these prompts).  Beside them, not trivial but exact: ``bayes_state``, the
exact posterior taken as the model's state, moving with k as ρ(k, H_Bayes) of each condition's prompts — what a
model doing exact inference would show (a rule it fails does not test inference)."""
SIGNATURE_NULLS = ("permuted",)
"""A language model's value manifold with no shared structure: each dimension of its final-token values shuffled
across prompts independently (the permutation null its signatures record), in place of the PC shares.  The
untrained null (:data:`CELL_NULLS`) speaks to the signatures too: the same architecture's keys at random
initialisation, in place of its trained keys."""
CUT_NULLS = ("random_axis",)
"""A language model's edit aimed at nothing in particular: the same projection cut from the same layers' values along
a random axis instead of the entropy axis (which every cut record measures beside it), in place of the entropy-axis
cut.  A rule it meets is about cutting an axis, not about the entropy axis."""
NULLS = CELL_NULLS + LLM_NULLS + SIGNATURE_NULLS + CUT_NULLS


def _signature_null(doc: dict[str, Any], null: str) -> dict[str, Any] | None:
    """A language model's signature record as ``null`` would have produced it (:data:`SIGNATURE_NULLS`, and
    ``untrained`` for the keys): only what the record measured of that null, nothing else."""
    out = {k: doc[k] for k in ("model", "source") if k in doc}
    if null == "untrained":
        keys = doc["key_orthogonality"]
        rand = keys.get("random_init_by_layer")
        if not rand:
            return None
        out["key_orthogonality"] = {"by_layer": rand, "random_init_by_layer": rand,
                                    "gaussian_baseline": keys.get("gaussian_baseline"),
                                    "share_of_layers_below_0.20": sum(v < 0.20 for v in rand) / len(rand)}
        return out
    vm = doc["value_manifold"]
    if "pc1_pc2_share_null" not in vm:
        return None
    out["value_manifold"] = {"pc1_share": vm.get("pc1_share_null"), "pc1_pc2_share": vm["pc1_pc2_share_null"],
                             "pc1_share_null": vm.get("pc1_share_null"), "pc1_pc2_share_null": vm["pc1_pc2_share_null"]}
    return out


def uniform_gap_bits(doc: dict[str, Any], arm: str) -> float | None:
    """An EM-versus-SGD record's gap to the exact posterior for an always-uniform answer, on ``arm``'s sequences:
    KL(p ‖ uniform) = log2 V − H(p), from the exact entropy the record holds (``None`` where it holds none)."""
    a = doc["summary"]["arms"][arm]
    if "n_symbols" not in (doc.get("setup") or {}) or "exact_entropy_bits" not in a:
        return None
    return math.log2(doc["setup"]["n_symbols"]) - a["exact_entropy_bits"]["mean"]


@dataclass
class NullEvidence(Evidence):
    """The committed results as a trivial predictor would have produced them: every file that records a model's
    behaviour is rewritten as the null ``null`` (one of :data:`NULLS`) would score it, and every file the null cannot
    speak to reads as absent, so a claim judged on it either applies its rule to the null or is not measured.

    * ``context_blind`` / ``oracle`` / ``window_1``: a cell's ``eval.json`` holds its ``references.json`` row of that
      predictor (a cell whose task has no such row — ``window_1`` outside the HMM — reads as absent);
    * ``untrained``: a cell's ``geometry.json`` holds, for each statistic of :data:`UNTRAINED_OF`, the value the
      diagnostic measured on the same model at initialisation (nothing else);
    * ``no_evidence``: a SULA record's movement along PC1 with k on the normal prompts is the one measured on the same
      prompts with shuffled labels (nothing else of the record is kept);
    * ``untrained`` / ``permuted``: a language model's signature record (``llm/*-{mixed,math,…}.json``) holds its keys
      at random initialisation / its value manifold's permutation null (:func:`_signature_null`);
    * ``random_axis``: a language model's cut record (``cut``) holds, as its entropy-axis cut, the same edit along a
      random axis (everything else of the record is the model's own, so a rule reading nothing of the cut is not
      measured on it);
    * ``k_only``: a SULA record's (and the cross-model record's) correlation of PC1 with the exact posterior entropy is
      the best that a function of k alone reaches on the same prompts (nothing else of a SULA record is kept);
    * ``bayes_state``: a SULA record's movement along k under each condition is the exact posterior's, ρ(k, H_Bayes);
    * ``always_uniform``: an EM-versus-SGD record's gaps are the uniform answer's, log2 V − H(posterior);
    * ``always_certain`` / ``always_uniform``: a SULA record (``llm/*-sula.json``) holds the entropy error of a model
      whose predictive entropy is 0 / log2(L) bits on every prompt (L labels): ``|h − H(posterior)|`` averaged over
      the prompts, from the per-``k`` mean posterior entropies (``0 ≤ H ≤ log2 L``, so the mean of the absolute
      difference is the difference of the means).

    Configs, cell records and references pass through (they define the task, not the model's answer)."""

    null: str = "context_blind"

    def __post_init__(self) -> None:
        if self.null not in NULLS:
            raise ValueError(f"unknown null {self.null!r}: one of {NULLS}")

    def at(self, preset: str) -> "Evidence":
        if preset == self.preset:
            return self
        if preset not in self._presets:
            self._presets[preset] = NullEvidence(self.root, preset, **self.scope(), null=self.null)
        return self._presets[preset]

    @property
    def trained(self) -> "Evidence":
        if "trained" not in self._cache:
            self._cache["trained"] = Evidence(self.root, self.preset, **self.scope())
        return self._cache["trained"]

    def text(self, rel: str) -> str | None:
        return None  # training curves are the model's own: no null has one

    def table(self, task: str, arch: str, metric: str) -> Measure | None:
        """A table cell's metric as the null scores it: through the cell's files where they are committed, else the
        null's row of the table's ``references.json`` (the whole-episode metrics; none at another length)."""
        m = super().table(task, arch, metric)
        if m is not None or self.null not in REFERENCE_NULLS or "@K=" in metric:
            return m
        value = self.reference(task, self.null, metric)
        return None if value is None else Measure(value, None, None, (), (f"{self.preset}/references.json",))

    def json(self, rel: str) -> Any | None:
        name = rel.rsplit("/", 1)[-1]
        if name in ("config.json", "cell.json", "references.json"):
            return super().json(rel)
        key = f"null:{rel}"
        if key not in self._cache:
            self._cache[key] = self._null_json(rel, name)
        return self._cache[key]

    def _null_json(self, rel: str, name: str) -> Any | None:
        if name == "eval.json" and self.null in REFERENCE_NULLS:
            refs = super().json(rel[: -len(name)] + "references.json")
            row = (refs or {}).get(self.null)
            if not row:
                return None
            return {"metrics": {k: {"value": v} for k, v in row["metrics"].items()},
                    "lengths": {k: {"metrics": {m: {"value": v} for m, v in ms.items()}}
                                for k, ms in (row.get("lengths") or {}).items()}}
        if name == "geometry.json" and self.null == "untrained":
            doc = super().json(rel)
            if not doc:
                return None
            out: dict[str, Any] = {"summary": {"null": "untrained"}}
            for diag, block in doc.items():  # the nulls and task properties stand as they are
                summary = block.get("summary") if isinstance(block, dict) else None
                if isinstance(summary, dict):
                    kept = {k: v for k, v in summary.items() if any(w in k for w in NULL_STATS)}
                    if kept:
                        out[diag] = {"summary": kept}
            for stat, untrained in UNTRAINED_OF.items():
                value = geometry_stat(doc, untrained)
                if value is None:
                    continue
                for key in (stat, untrained):
                    diag, _, name_ = key.partition(".")
                    out.setdefault(diag, {"summary": {}})["summary"][name_] = value
            return out
        if self.null in ("untrained", "permuted") and rel.startswith("llm/"):
            doc = super().json(rel)
            if isinstance(doc, dict) and "key_orthogonality" in doc and "value_manifold" in doc:
                return _signature_null(doc, self.null)
            return None
        if self.null == "random_axis" and rel.startswith("llm/"):
            doc = super().json(rel)
            cut = (doc or {}).get("cut") if isinstance(doc, dict) else None
            if not isinstance(cut, dict) or not isinstance(cut.get("random_axis"), dict):
                return None
            edited = {k: v for k, v in cut.items() if k != "one_at_a_time"}  # no random cut of one layer alone
            edited["entropy_axis"] = cut["random_axis"]
            return {**doc, "cut": edited}
        if self.null == "always_uniform" and rel.startswith("routing/") and name == "em.json":
            return self._uniform_em(super().json(rel))
        if self.null in ("k_only", "bayes_state") and rel.startswith("llm/"):
            return self._task_only(super().json(rel), name)
        if name.endswith("-sula.json") and self.null == "no_evidence":
            doc = super().json(rel)
            movement = ((doc or {}).get("geometry") or {}).get("movement") or {}
            if "shuffled" not in movement:
                return None
            return {"labels": doc.get("labels"), "setup": doc.get("setup"),
                    "geometry": {"layer": doc["geometry"].get("layer"),
                                 "movement": {"normal": movement["shuffled"], "shuffled": movement["shuffled"]}}}
        if name.endswith("-sula.json") and self.null in LLM_NULLS:
            doc = super().json(rel)
            if not doc:
                return None
            labels = len(doc.get("labels") or ()) or 2
            h = 0.0 if self.null == "always_certain" else math.log2(labels)
            conditions = {}
            for cname, c in doc["conditions"].items():
                by_k = {k: {"model_entropy": h, "bayes_entropy": row["bayes_entropy"],
                            "entropy_mae": abs(h - row["bayes_entropy"])} for k, row in c["by_k"].items()}
                mae = sum(row["entropy_mae"] for row in by_k.values()) / len(by_k)
                conditions[cname] = {"entropy_mae": mae, "entropy_mae_ci": [mae, mae], "by_k": by_k}
            return {"labels": doc.get("labels"), "setup": doc.get("setup"), "conditions": conditions}
        return None

    def _task_only(self, doc: Any, name: str) -> dict[str, Any] | None:
        """A SULA record (``…-sula.json``) or a cross-model record on the SULA prompts (``global-…``) as a null
        that the task's exact posteriors alone define (``k_only``, ``bayes_state``): nothing of it is the model's but
        what the null leaves standing."""
        from ..llm.example_count import k_only_rho, oracle_movement
        from ..llm.sula import SulaSetup

        if not isinstance(doc, dict) or not isinstance(doc.get("setup"), dict):
            return None
        setup = SulaSetup(**doc["setup"])
        if name.endswith("-sula.json") and isinstance(doc.get("geometry"), dict):
            g = doc["geometry"]
            if self.null == "k_only":
                r = k_only_rho(setup)
                return {"labels": doc.get("labels"), "setup": doc["setup"],
                        "geometry": {"layer": g.get("layer"), "pc1_vs_bayes_entropy": {"rho": r, "ci": [r, r]}}}
            movement = {}
            for c in g.get("movement") or {}:
                r = oracle_movement(setup, c)
                movement[c] = {"rho": r, "ci": [r, r], "pc1_by_k": {}}
            return {"labels": doc.get("labels"), "setup": doc["setup"],
                    "geometry": {"layer": g.get("layer"), "movement": movement}}
        if name.startswith("global-") and self.null == "k_only" and "rho_global_pc1_bayes_entropy" in doc:
            r = k_only_rho(setup)  # the model's shares stand: only PC1's scores are replaced by a function of k
            return {**doc, "rho_global_pc1_bayes_entropy": {"rho": r, "rho_ci": [r, r]}}
        return None

    @staticmethod
    def _uniform_em(doc: Any) -> dict[str, Any] | None:
        """An EM-versus-SGD record (``routing/…/em.json``) as an always-uniform answer scores it: every arm's gap
        to the exact posterior is KL(p ‖ uniform) = log2 V − H(p), from the exact entropy the record holds (of the
        held-out sequence: the training sequence's is not recorded; the seeds' spread of it is below 0.001 bits)."""
        if not isinstance(doc, dict) or "n_symbols" not in (doc.get("setup") or {}):
            return None
        arms = {}
        for arm, a in doc["summary"]["arms"].items():
            gap = uniform_gap_bits(doc, arm)
            if gap is None:
                return None
            stat = {"mean": gap, "std": 0.0, "n": a["exact_entropy_bits"]["n"], "ci95": [gap, gap]}
            arms[arm] = {"final_gap": stat, "final_held_out_gap": stat, "exact_entropy_bits": a["exact_entropy_bits"]}
        return {"setup": doc["setup"], "summary": {"arms": arms}}
