"""The experiment grid in one declarative place: every experiment, its recipes, the table's columns and rows.

An :class:`Experiment` is a wind tunnel as the tool runs it: the registered task, its parameters
under each preset, the headline metric and its unit, the primitive it isolates, the evaluation
lengths, and a :class:`Recipe` per preset (how long, how wide, how fast to train).  A
:class:`Cell` is one (preset, experiment, architecture, seed) and turns itself into the
``TrainConfig`` fields of a run.  ``windtunnel run TASK`` trains one cell; ``windtunnel table``
trains the :data:`TABLE_COLUMNS` × :data:`TABLE_ARCHS` grid.  Changing a recipe, adding a column
or a preset is a change to this file only.

Presets: ``quick`` (a laptop CPU, minutes per cell; measured on 2 CPU cores, see ``benchmarks/``)
and ``paper`` (the papers' sizes, for GPUs: the 6×6×192 transformer, ≈2.67M parameters, for
bijection and recall; 9 layers for HMM; every architecture capacity-matched to the transformer).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import InvalidValue, is_int

PRESETS = ("quick", "paper")


@dataclass(frozen=True)
class Recipe:
    """How a cell trains: ``TrainConfig`` fields plus the depth (``layers``; ``heads`` for the
    transformer) every registered architecture gets, and the capacity all are matched to."""

    params: int
    steps: int
    batch_size: int
    layers: int
    heads: int
    lr: float
    min_lr: float
    warmup: int
    weight_decay: float
    eval_every: int
    ckpt_every: int
    #: stages ``{"until": step, "task_params": {...}}`` (``TrainConfig.curriculum``)
    curriculum: tuple[dict[str, Any], ...] = ()
    #: the readout (final norm and head) at this multiple of ``lr``; windtunnel's own architectures only
    readout_lr_mult: float = 1.0
    #: a fixed training set of this many episodes (``TrainConfig.train_set``); ``None``: fresh every step
    train_set: int | None = None


@dataclass(frozen=True)
class Experiment:
    """One wind tunnel as run by the tool (a table column when ``primitive`` is set)."""

    name: str
    task: str
    task_params: dict[str, dict[str, Any]]  # preset -> parameters
    recipes: dict[str, Recipe]  # preset -> recipe
    primitive: str | None = None
    metric: str = "kl"
    unit: str = "bits"
    lengths: tuple[int, ...] | None = None
    #: extra model settings per architecture (e.g. attention switched off in chosen transformer layers)
    model: dict[str, dict[str, Any]] = field(default_factory=dict)


SEEDS = (0, 1, 2)
"""The training seeds of every grid cell the claims read (``windtunnel reproduce`` trains each cell at each)."""
EVAL_N = {"quick": 1000, "paper": 2000}
"""Evaluation sequences of a cell (and of ``windtunnel run``) under each preset."""
CELLS_PER_GPU = 3
"""Cells ``windtunnel table`` and ``reproduce`` train at once on each GPU by default.  A cell's model is too
small to keep a GPU busy — alone, a paper-size cell reached 0.1–1.5% of an H200's bf16 matmul peak, its
steps bound by kernel launches — so cells share: three paper cells at once each ran 1.27× slower than
alone, 2.36× the throughput (``benchmarks/paper_gpu.py``; its output ``benchmarks/results/paper_gpu.json``)."""
STACKS_PER_GPU = 1
"""Stacks ``windtunnel table`` and ``reproduce`` train at once on each GPU by default, where a cell's seeds train as
one stack whose step is recorded as a CUDA graph (what they do on GPUs unless told otherwise).  A graphed stack keeps
the GPU far busier than a cell alone, and leaves little to share: three graphed stacks run at once as three
processes each ran 1.4–5.5× slower than alone (``benchmarks/results/paper_stacked_gpu_together/`` against
``paper_stacked_gpu/``), the bijection column's three 3.6–5.5× — less throughput than one stack after another."""
ANALYZE_N = 512
"""Episodes the geometric diagnostics read (``windtunnel analyze``, the cells of ``reproduce``)."""


# --- recipes ------------------------------------------------------------------------------------
_QUICK = Recipe(params=200_000, steps=3000, batch_size=64, layers=4, heads=4, lr=2e-3, min_lr=1e-5, warmup=200,
                weight_decay=0.0, eval_every=500, ckpt_every=500)
_PAPER = Recipe(params=2_670_000, steps=100_000, batch_size=128, layers=6, heads=6, lr=3e-4, min_lr=3e-6,
                warmup=2000, weight_decay=0.1, eval_every=5000, ckpt_every=5000)
_PAPER_HMM = replace(_PAPER, params=2_680_000, steps=50_000, batch_size=64, layers=9, heads=8, weight_decay=0.01,
                     warmup=1000)

# quick: one recipe per column, the same for every architecture, chosen by measurement with
# benchmarks/recipe_sweep.py (its output: benchmarks/results/recipe_sweep*.jsonl and
# recipe_sweep_sawtooth.txt): recall uses a 2-layer, 2-head model because 4×4 at d_head 16 does not
# bind in the budget; the sawtooth trains 8000 steps behind a key-pool curriculum (the first 1000 steps
# draw each episode's keys from 3 of the V keys) because without it no architecture leaves the uniform
# plateau.
_QUICK_SHORT = replace(_QUICK, steps=2000)
_QUICK_SAWTOOTH = replace(_QUICK, steps=8000, layers=2, heads=2,
                          curriculum=({"until": 1000, "task_params": {"key_pool": 3}},))
_QUICK_RECALL = replace(_QUICK, steps=2000, layers=2, heads=2)
# the main job (see MAIN_JOB_* below): bijection V=10 trained until its entropy error is below 0.003 bits
_QUICK_MAIN = replace(_QUICK, steps=3000, batch_size=128, lr=4e-3, readout_lr_mult=20.0)
# the main job on the papers' own cell (bijection V=20, L=19): the same recipe trained longer.  Chosen by
# benchmarks/time_to_bayes.py (its output: benchmarks/results/time_to_bayes.jsonl): the error falls with the
# steps (3000 leave seeds above 0.003 bits, 4500 just below it, 8000 well below) while a higher peak rate
# or a faster readout end higher at equal steps; 6000 steps leave a margin below 0.003 and fit in 15
# minutes all in on 2 CPU cores
_QUICK_MAIN_V20 = replace(_QUICK_MAIN, steps=6000)
# the main job's budget control: its recipe unchanged but ten times the steps (the schedule stretched with
# them) — can the papers' headline 10⁻³–10⁻⁴ bits be reached by training longer?
_QUICK_MAIN_LONG = replace(_QUICK_MAIN, steps=10 * _QUICK_MAIN.steps)


def _exp(name: str, task: str, quick: dict[str, Any], paper: dict[str, Any], quick_recipe: Recipe = _QUICK,
         paper_recipe: Recipe = _PAPER, **kw: Any) -> Experiment:
    return Experiment(name, task, {"quick": quick, "paper": paper}, {"quick": quick_recipe, "paper": paper_recipe}, **kw)


def store_curriculum(pairs: int, steps: int, first: int = 4) -> list[dict[str, Any]]:
    """Recall's store grown to ``pairs`` over the first third of ``steps``: ``first`` pairs, then twice as many,
    and so on, each size for an equal share of that third (16 pairs: 4, then 8; 64: 4, 8, 16, 32) — the
    curriculum stages (``Recipe.curriculum``) that let binding form over a large key vocabulary."""
    sizes = []
    p = first
    while p < pairs:
        sizes.append(p)
        p *= 2
    share = steps // 3 // max(1, len(sizes))
    return [{"until": share * (i + 1), "task_params": {"pairs": size}} for i, size in enumerate(sizes)]


def dimension_curriculum(d: int, steps: int) -> list[dict[str, Any]]:
    """In-context regression's inputs grown to ``d`` dimensions over the first third of ``steps``: ``d_active``
    = 1, 2, …, d − 1, each for an equal share of that third (Garg et al.'s curriculum, on the task's
    ``d_active``: the input width, the bins and the model stay those of ``d``)."""
    share = steps // 3 // max(1, d - 1)
    return [{"until": share * k, "task_params": {"d_active": k}} for k in range(1, d)]


RECALL_PAIRS = (16, 32, 64)
"""The binding-vs-size ladder's store sizes beyond the recall column's 8 pairs (the papers' recall holds 64)."""

_MAIN = _exp("main", "bijection", {"V": 10, "L": 9}, {"V": 20, "L": 19}, _QUICK_MAIN, metric="entropy_mae_curve")
_MAIN_V20 = _exp("main_v20", "bijection", {"V": 20, "L": 19}, {"V": 20, "L": 19}, _QUICK_MAIN_V20,
                 metric="entropy_mae_curve")
# the main job on the papers' cell at the papers' size: V=20, L=19 with 2.67M parameters in 6 layers of 6 heads
# (d_head 32, the papers' shape), on main_v20's recipe unchanged (nothing tuned for the size) — the papers'
# headline model.  Its committed cells are the paper preset's (``windtunnel reproduce scale --preset paper``, on a
# GPU; ≈1.4 s a step on one CPU core, where the ``ckpt_minutes`` checkpoints carry it over interruptions)
_PAPER_SIZE_MAIN = replace(_QUICK_MAIN_V20, params=2_670_000, layers=6, heads=6)
_MAIN_PAPER_SIZE = _exp("main_paper_size", "bijection", {"V": 20, "L": 19}, {"V": 20, "L": 19},
                        _PAPER_SIZE_MAIN, _PAPER_SIZE_MAIN, metric="entropy_mae_curve")
# HMM's transformer uses learned absolute positions: its header is read by absolute slot (which T/E
# entry), and at the quick budget only learned positions leave the context-blind plateau on every seed
# (the ``hmm_rotary``, ``hmm_alibi`` and ``hmm_none`` control cells); everywhere else rotary (no length limit)
_HMM_TRANSFORMER = {"pos": "learned"}
_REGRESSION = _exp("regression", "regression", {"d": 4, "points": 16, "C": 32}, {})
_HMM = _exp("hmm", "hmm", {"K": 20}, {"K": 20}, _QUICK_SHORT, _PAPER_HMM, primitive="transport", metric="kl",
            lengths=(20, 30, 50), model={"transformer": _HMM_TRANSFORMER})
_RECALL = _exp("recall", "recall", {}, {"pairs": 64, "n_keys": 256, "n_values": 256, "queries": 3, "filler": 32},
               _QUICK_RECALL, primitive="binding", metric="accuracy", unit="%")

def _recall_rung(pairs: int, name: str | None = None, schedule_of: int | None = None, **kw: Any) -> Experiment:
    """The binding ladder's cell at ``pairs`` stored pairs (``recall_p{pairs}``, or ``name`` for a control on
    it): keys and values 4× the pairs, steps 2000 × pairs / 8, the store grown over the first third.
    ``schedule_of``: the steps and the curriculum's stages of the rung with that many pairs instead, cut where
    the store reaches ``pairs`` (16 pairs on the 64-pair schedule: 4 pairs, then 8, each for its 1333 steps,
    then 16 to step 16,000)."""
    def stages(steps: int) -> tuple[dict[str, Any], ...]:
        return tuple(s for s in store_curriculum(schedule_of or pairs, steps) if s["task_params"]["pairs"] < pairs)

    steps = _QUICK_RECALL.steps * (schedule_of or pairs) // 8
    return _exp(name or f"recall_p{pairs}", "recall", {"pairs": pairs, "n_keys": 4 * pairs, "n_values": 4 * pairs},
                {**_RECALL.task_params["paper"], "pairs": pairs},
                replace(_QUICK_RECALL, steps=steps, curriculum=stages(steps)),
                replace(_PAPER, curriculum=stages(_PAPER.steps)),
                primitive="binding", metric="accuracy", unit="%", **kw)


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    _exp("bijection", "bijection", {"V": 10, "L": 9}, {"V": 20, "L": 19}, _QUICK_SHORT,
         primitive="accumulation", metric="entropy_mae_curve"),
    _MAIN,
    _MAIN_V20,
    _MAIN_PAPER_SIZE,
    _exp("main_long", "bijection", {"V": 10, "L": 9}, {"V": 20, "L": 19}, _QUICK_MAIN_LONG,
         replace(_PAPER_SIZE_MAIN, steps=10 * _PAPER_SIZE_MAIN.steps), metric="entropy_mae_curve"),
    # Paper I's own bijection layout (one vocabulary, a query token before each key), main-job recipe
    _exp("main_query", "bijection_query", {"V": 10, "L": 9}, {"V": 20, "L": 19}, _QUICK_MAIN, metric="entropy_mae_curve"),
    # the main job with grouped-query attention: the recipe's query heads share one key/value head
    # (4:1 in the quick preset, Llama-3.2-1B's ratio), capacity-matched like every cell (Paper III's
    # MHA-vs-GQA focusing contrast under control)
    _exp("main_gqa", "bijection", {"V": 10, "L": 9}, {"V": 20, "L": 19}, _QUICK_MAIN, metric="entropy_mae_curve",
         model={"transformer": {"n_kv_heads": 1}}),
    # the main job at the papers' head width: 2 heads of 32 instead of 4 of 16 at the same width and
    # parameter count, so key orthogonality is read at d_head 32 as in the papers (at the paper preset
    # the main job's d_head already is 32)
    _exp("main_dh32", "bijection", {"V": 10, "L": 9}, {"V": 20, "L": 19},
         replace(_QUICK_MAIN, heads=_QUICK_MAIN.heads // 2), metric="entropy_mae_curve"),
    _exp("bijection_replacement", "bijection", {"V": 10, "L": 12, "replacement": True},
         {"V": 20, "L": 19, "replacement": True}, _QUICK_SAWTOOTH,
         primitive="accumulation + binding", metric="entropy_mae_curve"),
    _HMM,
    # Paper I's HMM control: attention switched off in the top two layers, trained as the HMM column
    _exp("hmm_attn_off", "hmm", {"K": 20}, {"K": 20}, _QUICK_SHORT, _PAPER_HMM, metric="kl", lengths=(20, 30, 50),
         model={"transformer": {**_HMM_TRANSFORMER, "attn_off": "top2"}}),
    # the budget control of the HMM column: the same cell trained four times as long (learned positions),
    # evaluated at K=20/30/50; it tells whether the HMM gap and the length-generalisation error are budget
    _exp("hmm_long", "hmm", {"K": 20}, {"K": 20}, replace(_QUICK_SHORT, steps=4 * _QUICK_SHORT.steps),
         replace(_PAPER_HMM, steps=4 * _PAPER_HMM.steps), metric="kl", lengths=(20, 30, 50),
         model={"transformer": _HMM_TRANSFORMER}),
    # the data-regime control: the budget control's 8000 steps on a fixed set of 10,000 episodes (≈ 51
    # epochs at batch 64), as the authors' HMM recipe trains, against fresh episodes every step
    _exp("hmm_fixed", "hmm", {"K": 20}, {"K": 20}, replace(_QUICK_SHORT, steps=4 * _QUICK_SHORT.steps, train_set=10_000),
         replace(_PAPER_HMM, steps=7_813, train_set=10_000), metric="kl", lengths=(20, 30, 50),
         model={"transformer": _HMM_TRANSFORMER}),
    # Paper I's attention-off control in the authors' regime, where the full model learns the task at the papers'
    # size: ``hmm_fixed`` with attention switched off in the top two layers (``windtunnel reproduce scale --preset
    # paper`` trains it beside ``hmm_fixed``)
    _exp("hmm_fixed_attn_off", "hmm", {"K": 20}, {"K": 20},
         replace(_QUICK_SHORT, steps=4 * _QUICK_SHORT.steps, train_set=10_000),
         replace(_PAPER_HMM, steps=7_813, train_set=10_000), metric="kl", lengths=(20, 30, 50),
         model={"transformer": {**_HMM_TRANSFORMER, "attn_off": "top2"}}),
    # length generalisation in the authors' regime with rotary positions (no position has an untrained
    # embedding): ``hmm_fixed`` with the transformer's encoding switched; at the paper preset, beside
    # ``hmm_fixed``, the question at the papers' size (``windtunnel reproduce scale --preset paper``)
    _exp("hmm_fixed_rotary", "hmm", {"K": 20}, {"K": 20},
         replace(_QUICK_SHORT, steps=4 * _QUICK_SHORT.steps, train_set=10_000),
         replace(_PAPER_HMM, steps=7_813, train_set=10_000), metric="kl", lengths=(20, 30, 50),
         model={"transformer": {"pos": "rotary"}}),
    # Paper III's routing contrast on HMM where the transformer learns the task: the authors' regime with the
    # recipe's query heads sharing one key/value head (at the paper preset 8:1), capacity-matched; beside
    # ``hmm_fixed`` in ``windtunnel reproduce scale --preset paper`` (at the quick budget the HMM transformer
    # does not focus at all, so there the contrast has nothing to compare)
    _exp("hmm_fixed_gqa", "hmm", {"K": 20}, {"K": 20},
         replace(_QUICK_SHORT, steps=4 * _QUICK_SHORT.steps, train_set=10_000),
         replace(_PAPER_HMM, steps=7_813, train_set=10_000), metric="kl", lengths=(20, 30, 50),
         model={"transformer": {**_HMM_TRANSFORMER, "n_kv_heads": 1}}),
    # the mechanism of the length-generalisation error: the HMM column trained at K=50 (every position
    # evaluated is a trained one), same steps; its per-position KL across step 20 is the jump without
    # untrained positions
    _exp("hmm_k50", "hmm", {"K": 50}, {"K": 50}, _QUICK_SHORT, _PAPER_HMM, metric="kl", lengths=(20, 30, 50),
         model={"transformer": _HMM_TRANSFORMER}),
    # does the start decide the HMM cell, as it decided the regression cell (A26)?  The HMM column from PyTorch's
    # default initialisation (``init="torch"``) instead of GPT-2's N(0, 0.02), same recipe and budget
    _exp("hmm_torch_init", "hmm", {"K": 20}, {"K": 20}, _QUICK_SHORT, _PAPER_HMM, metric="kl", lengths=(20, 30, 50),
         model={"transformer": {**_HMM_TRANSFORMER, "init": "torch"}}),
    _RECALL,
    # binding vs size: the recall column's recipe with the store grown towards the papers' 64 pairs over 256
    # keys (pairs doubling, key and value vocabularies 4× the pairs), queries and filler as the column's, the
    # steps grown with the store (2000 × pairs / 8), and the store itself grown over the first third of
    # training (``store_curriculum``).  Chosen by benchmarks/recipe_sweep.py --grid store (its output:
    # benchmarks/results/recipe_sweep_recall.jsonl): without the curriculum the transformer stays at chance at
    # 16 pairs over 64 keys even at twice the steps (6%), and at 8 pairs over 64 keys (14%); behind it, it
    # binds both (100%) at these budgets
    *(_recall_rung(pairs) for pairs in RECALL_PAIRS),
    # where Mamba's binding breaks (8 → 16 pairs), is it the state that runs out?  The ladder's 16-pair cell
    # with Mamba's SSM state four times as large per channel (d_state 64 instead of 16), at the same
    # parameter count (the width shrinks to pay for it) and the same recipe
    _recall_rung(16, "recall_p16_state64", model={"mamba": {"d_state": 4 * 16}}),
    # or the schedule?  Mamba binds at 64 pairs (two seeds of three), leaving chance while its store is still at
    # 16 and 32 pairs, but not on the 16-pair rung, whose schedule is four times shorter.  The 16-pair cell on the
    # 64-pair rung's schedule (its steps and its 4- and 8-pair stages; the 16-pair store and 64 keys kept)
    _recall_rung(16, "recall_p16_sched64", schedule_of=64),
    # length generalisation under control: the HMM cell with each other position encoding of the
    # transformer (the HMM column's is learned), trained at K=20 and evaluated at K=20/30/50
    *(_exp(f"hmm_{pos}", "hmm", {"K": 20}, {"K": 20}, _QUICK_SHORT, _PAPER_HMM, metric="kl", lengths=(20, 30, 50),
           model={"transformer": {"pos": pos}}) for pos in ("rotary", "alibi", "none")),
    # Paper II's EM reading tested by training: one primitive per experiment, the transformer trained as
    # that experiment's cell but with uniform attention in every layer (routing removed, values kept)
    *(_exp(f"{e.name}_uniform", e.task, e.task_params["quick"], e.task_params["paper"], e.recipes["quick"],
           e.recipes["paper"], metric=e.metric, unit=e.unit, lengths=e.lengths,
           model={"transformer": {**e.model.get("transformer", {}), "uniform_attn": "all"}})
      for e in (_MAIN, _HMM, _RECALL)),
    _REGRESSION,
    # the regression cell's controls (A26): the same cell trained four times as long, and behind a dimension
    # curriculum (``dimension_curriculum``: the inputs grown 1 … d dimensions over the first third of training)
    _exp("regression_long", "regression", _REGRESSION.task_params["quick"], _REGRESSION.task_params["paper"],
         replace(_QUICK, steps=4 * _QUICK.steps), replace(_PAPER, steps=4 * _PAPER.steps), metric="kl"),
    _exp("regression_curriculum", "regression", _REGRESSION.task_params["quick"], _REGRESSION.task_params["paper"],
         replace(_QUICK, curriculum=tuple(dimension_curriculum(4, _QUICK.steps))),
         replace(_PAPER, curriculum=tuple(dimension_curriculum(8, _PAPER.steps))), metric="kl"),  # the task's default d
    # and with each response on one token with its own input (``paired``), so no layer has to bring a point's
    # input and response together: at the cell's budget and four times it
    _exp("regression_paired", "regression", {**_REGRESSION.task_params["quick"], "paired": True},
         {**_REGRESSION.task_params["paper"], "paired": True}, _QUICK, _PAPER, metric="kl"),
    _exp("regression_paired_long", "regression", {**_REGRESSION.task_params["quick"], "paired": True},
         {**_REGRESSION.task_params["paper"], "paired": True}, replace(_QUICK, steps=4 * _QUICK.steps),
         replace(_PAPER, steps=4 * _PAPER.steps), metric="kl"),
    # and with PyTorch's default initialisation (``init="torch"``, as a model of ``torch.nn`` modules starts and
    # the authors' own trainers leave it) instead of GPT-2's N(0, 0.02): interleaved at the cell's budget and four
    # times it, and paired at the cell's budget
    _exp("regression_torch_init", "regression", _REGRESSION.task_params["quick"], _REGRESSION.task_params["paper"],
         _QUICK, _PAPER, metric="kl", model={"transformer": {"init": "torch"}}),
    _exp("regression_torch_init_long", "regression", _REGRESSION.task_params["quick"], _REGRESSION.task_params["paper"],
         replace(_QUICK, steps=4 * _QUICK.steps), replace(_PAPER, steps=4 * _PAPER.steps), metric="kl",
         model={"transformer": {"init": "torch"}}),
    _exp("regression_paired_torch_init", "regression", {**_REGRESSION.task_params["quick"], "paired": True},
         {**_REGRESSION.task_params["paper"], "paired": True}, _QUICK, _PAPER, metric="kl",
         model={"transformer": {"init": "torch"}}),
    _exp("coin", "coin", {}, {}),
    _exp("sticky", "sticky", {}, {}),
    # beyond the papers: one fixed 3-state process (no hypothesis to infer, a hidden state to track); the
    # HMM column's budget, for the belief-geometry readouts
    _exp("mess3", "mess3", {}, {}, _QUICK_SHORT),
    # beyond the papers, memorisation vs inference: the bijection column with every episode's permutation
    # drawn from a finite pool of POOL_SIZES[i] (the fresh column is the infinite pool); evaluated against
    # the pool's posterior and the true prior's, in the pool and on fresh permutations
    *(_exp(f"pool_{size}", "bijection", {"V": 10, "L": 9, "pool": size}, {"V": 20, "L": 19, "pool": size}, _QUICK_SHORT,
           metric="entropy_mae_curve") for size in (4 ** i for i in range(9))),
    # the same sweep on HMM filtering: every episode's HMM one of a finite pool (its matrices are in the
    # header, so the posterior is the same under either prior); evaluated on the pool's HMMs and on fresh
    # ones — whether a model trained on few HMMs filters HMMs it never saw
    *(_exp(f"hmm_pool_{size}", "hmm", {"K": 20, "pool": size}, {"K": 20, "pool": size}, _QUICK_SHORT, _PAPER_HMM,
           metric="kl", model={"transformer": _HMM_TRANSFORMER}) for size in (4 ** i for i in range(9))),
)}

# --- the sequel (Dalal, Misra, Parekh, arXiv 2607.19379): Bayesian model selection over function classes --------------
# One recipe for every sequel cell and every architecture (the same budget and search effort: nothing tuned per
# architecture or per regime), sized so that a cell trains in two to three minutes on one CPU core: 100k parameters
# in the quick recipe's 4 layers of 4 heads, 1500 steps of 64 episodes (each committed cell's timings.json records
# its seconds; the facts control's episodes are twenty times as long, and so is its cell: docs/model-selection.md).  Two domains: the relational classes on Z_12 (involutions need an even n, 3-cycles a
# multiple of 3), the arithmetic pair on Z_7 (multiplications need a prime; 0 never asked: it names the class).  Z_7
# keeps the facts control's episodes short enough for a CPU (its two operation tables are 2·49 facts of four tokens).
_QUICK_SEQUEL = replace(_QUICK, params=100_000, steps=1500, eval_every=500, ckpt_every=500)
_PAPER_SEQUEL = replace(_PAPER, params=2_800_000)  # the sequel's ≈2.8M-parameter transformer (abstract)
SEQUEL_SYMBOLS = ("integer", "opaque", "fixed")
"""How the sequel's cells write values (``ModelSelection.symbols``): integers, a relabelling drawn per episode and
stated in a header, or one fixed relabelling."""
SEQUEL_PAIRS: dict[str, dict[str, Any]] = {
    "ms_involution": {"n": 12, "classes": "involution", "L": 10},
    "ms_relational": {"n": 12, "classes": "involution,three_cycle", "L": 10},
    "ms_arith": {"n": 7, "classes": "rotation,multiplication", "L": 6, "query_zero": False},
}
"""The sequel's three selection problems at the quick preset, by the prefix of their columns (``ms_arith_opaque`` …):
one class alone (MS1), involutions against 3-cycles (MS2), rotations against multiplications (MS3–MS5)."""
SEQUEL_ARCHS = ("transformer", "mamba", "lstm", "mlp")
"""The architectures every sequel column is trained on (the papers' four)."""
SEQUEL_LONG_FACTOR = 4
"""The budget controls (the opaque and the fixed-relabelling arithmetic cells; the involution cells, both regimes; the
involutions-vs-3-cycles integer cell): their recipe at this many times the steps."""
SEQUEL_TRANSFORMER_ONLY = ("ms_involution_integer_long", "ms_involution_opaque_long", "ms_relational_integer_long",
                           "ms_arith_fixed_long", "ms_arith_opaque_facts")
"""Sequel columns trained on the transformer alone: controls of claims about the transformer (the budget of the
involution cells, of the involutions-vs-3-cycles cell and of the fixed relabelling; the facts in context, whose
episodes cost some twenty times a cell's step)."""


# the transformer reads the relabelling header by absolute slot (header position i states pi(i)), as the HMM column
# reads its matrices: learned absolute positions, as there, in every regime (so regimes differ in the symbols alone)
_SEQUEL_TRANSFORMER = _HMM_TRANSFORMER


def _sequel(prefix: str, symbols: str, suffix: str = "", recipe: Recipe = _QUICK_SEQUEL, **extra: Any) -> Experiment:
    params = {**SEQUEL_PAIRS[prefix], "symbols": symbols, **extra}
    paper_recipe = replace(_PAPER_SEQUEL, steps=recipe.steps // _QUICK_SEQUEL.steps * _PAPER_SEQUEL.steps)
    return _exp(f"{prefix}_{symbols}{suffix}", "model_selection", params, dict(params), recipe, paper_recipe,
                metric="kl", model={"transformer": dict(_SEQUEL_TRANSFORMER)})


SEQUEL_EXPERIMENTS = (
    *(_sequel(prefix, symbols) for prefix in SEQUEL_PAIRS for symbols in SEQUEL_SYMBOLS),
    # the in-context-facts control (the arithmetic as relations between the episode's symbols, as In-Context Algebra
    # gives a group's facts) and the budget control, both on the cell the sequel says fails
    _sequel("ms_arith", "opaque", "_facts", facts_in_context=True),
    _sequel("ms_arith", "opaque", "_long", replace(_QUICK_SEQUEL, steps=SEQUEL_LONG_FACTOR * _QUICK_SEQUEL.steps)),
    # the budget controls of the one-class cells (MS1, in both symbol regimes it reads) and of the involutions-vs-
    # 3-cycles cell (MS2, judged on its integer regime)
    *(_sequel("ms_involution", symbols, "_long", replace(_QUICK_SEQUEL, steps=SEQUEL_LONG_FACTOR * _QUICK_SEQUEL.steps))
      for symbols in ("integer", "opaque")),
    _sequel("ms_relational", "integer", "_long",
            replace(_QUICK_SEQUEL, steps=SEQUEL_LONG_FACTOR * _QUICK_SEQUEL.steps)),
    # the budget control of the fixed relabelling (MS4: the arithmetic pair learned when the symbols' meaning is stable)
    _sequel("ms_arith", "fixed", "_long", replace(_QUICK_SEQUEL, steps=SEQUEL_LONG_FACTOR * _QUICK_SEQUEL.steps)),
)
EXPERIMENTS.update({e.name: e for e in SEQUEL_EXPERIMENTS})
SEQUEL_COLUMNS = tuple(e.name for e in SEQUEL_EXPERIMENTS)
"""Every sequel column, in order: ``windtunnel reproduce sequel`` trains each on :data:`SEQUEL_ARCHS` × the seeds."""


POOL_SIZES = tuple(4 ** i for i in range(9))
"""The task-diversity sweeps' pool sizes (1 … 65,536 permutations or HMMs; the ``bijection`` and ``hmm`` columns
are the infinite pools)."""

TABLE_COLUMNS = ("bijection", "bijection_replacement", "hmm", "recall")
"""The architecture × inference-primitive table's columns (Paper I v3), in order."""
TABLE_ARCHS = ("transformer", "mamba", "lstm", "mlp", "mlp_pointwise")
"""Its rows: the papers' four architectures and the papers' own MLP control."""

# The main job (`windtunnel run` with no task): a transformer on a small bijection, trained on
# sampled labels until its entropy error is below the papers' 0.003 bits.  What sets the error is
# the mass left on eliminated values (entropy error ≈ δ·log2(1/δ) for infeasible mass δ), and what
# sets δ is the logit gap between feasible and eliminated values, bounded by the norm of the output
# head — which grows at a rate the learning rate sets.  Hence the recipe trains the readout (final
# norm and head) at 20× the learning rate: benchmarks/main_job_sweep.py compares it at equal
# episodes with larger batches, other learning rates and floors, other blocks and shapes, and a
# weight average (its output: benchmarks/results/main_job_sweep.jsonl).
DEFAULT_TASK = "bijection"
DEFAULT_ARCH = "transformer"
"""The architecture `windtunnel run` and `windtunnel train` use when none is named."""
MAIN_JOB = "main"
"""The experiment ``windtunnel run`` trains when no task is named (its quick recipe is ``_QUICK_MAIN``)."""
MAIN_JOBS = {10: "main", 20: "main_v20"}
"""The main job by bijection size ``V``: ``windtunnel run --V 20`` (or ``windtunnel run bijection --V 20``) trains
``main_v20``, the papers' own cell, on its own recipe."""
MAIN_JOB_STEPS = _QUICK_MAIN.steps
MAIN_JOB_BATCH = _QUICK_MAIN.batch_size
MAIN_JOB_LR = _QUICK_MAIN.lr
MAIN_JOB_READOUT_LR_MULT = _QUICK_MAIN.readout_lr_mult


ALIASES = {"sawtooth": "bijection_replacement"}
"""Names people use for an experiment registered under another (the sawtooth is the table's column)."""


def experiment(name: str) -> Experiment:
    """The experiment named ``name``; any other registered task runs with its defaults and the generic recipe."""
    name = ALIASES.get(name, name)
    if name in EXPERIMENTS:
        return EXPERIMENTS[name]
    return _exp(name, name, {}, {})  # a registered task runs as itself; an unknown name fails where it is made


def main_job(task: str | None, overrides: dict[str, Any]) -> str:
    """The experiment ``windtunnel run [TASK] [--NAME VALUE ...]`` trains.  With no task, or the main job's
    own task (bijection), it is the main job of the size the parameters name (:data:`MAIN_JOBS` by ``V``;
    any other ``V`` trains the V=10 recipe with the parameters changed), whose task parameters the
    given ones override (so ``--V 20`` alone is the papers' V=20, L=19 cell); any other name is its own
    experiment."""
    if task is not None and task != DEFAULT_TASK:
        return task
    v = overrides.get("V")
    return MAIN_JOBS.get(v, MAIN_JOB) if is_int(v) else MAIN_JOB


NOT_COMPARED = ("seed", "eval_n", "log_every", "keep_last", "log_checkpoints", "compile", "bf16", "data_shards")
"""Fields a run may set as it likes and still be the grid's recipe: which seed, how it is logged, kept, evaluated
during training and computed."""


def off_recipe(train: dict[str, Any]) -> tuple[str, str, list[str]] | None:
    """How a run's ``TrainConfig`` fields ``train`` differ from the grid's recipes for its task: ``None`` where they
    are one of them — an experiment on the same task (``windtunnel run``'s choice, :func:`main_job`, first) under
    some preset, any seed — else ``(experiment, preset, the fields that differ)`` of the nearest: what a report says
    above verdicts that the claims judge on the grid's recipes."""
    from .config import NOT_THE_RECIPE, recipe

    skip = set(NOT_THE_RECIPE) | set(NOT_COMPARED)
    try:
        first = main_job(train.get("task"), train.get("task_params") or {})
        ours = {k: v for k, v in recipe(train).items() if k not in skip}
    except Exception:  # noqa: BLE001 - a record that no longer builds: nothing to compare
        return None
    names = [first] + [n for n, e in EXPERIMENTS.items() if e.task == train.get("task") and n != first]
    nearest: tuple[str, str, list[str]] | None = None
    for name, p in ((n, p) for n in names for p in PRESETS):
        try:
            want = {k: v for k, v in recipe({**preset(p, name, train.get("arch")), "seed": 0}).items() if k not in skip}
        except Exception:  # noqa: BLE001 - an architecture or task the grid cannot make at this preset
            continue
        differ = sorted(k for k in set(want) | set(ours) if ours.get(k) != want.get(k))
        if not differ:
            return None
        if nearest is None or len(differ) < len(nearest[2]):
            nearest = (name, p, differ)
    return nearest


def with_steps(cfg: dict[str, Any], steps: int) -> dict[str, Any]:
    """``TrainConfig`` fields ``cfg`` trained for ``steps`` instead: the curriculum keeps its share of training
    (a stage that would end at or after the last step is dropped), warm-up at most a tenth of it, evaluation
    and checkpoints at least once."""
    cfg = dict(cfg)
    cfg["curriculum"] = [dict(stage, until=max(1, stage["until"] * steps // cfg["steps"]))
                         for stage in cfg.get("curriculum", [])
                         if max(1, stage["until"] * steps // cfg["steps"]) < steps]
    cfg["warmup"] = min(cfg["warmup"], steps // 10)
    cfg["eval_every"] = max(1, min(cfg["eval_every"], steps))
    cfg["ckpt_every"] = max(1, min(cfg["ckpt_every"], steps))
    cfg["steps"] = steps
    return cfg


def eval_lengths(name: str, task_params: dict[str, Any]) -> list[int] | None:
    """The lengths an experiment is evaluated at (``None``: its training length only): the trained
    ``K`` and every length of the experiment's own (HMM: trained at 20, evaluated at 20, 30, 50; trained
    at 50, evaluated at the same three, the shorter ones inside its trained positions)."""
    e = experiment(name)
    if not e.lengths:
        return None
    k = task_params.get("K", e.lengths[0])
    return sorted({k, *e.lengths})


def task_spec(name: str, preset: str) -> tuple[str, dict[str, Any]]:
    """(registered task name, parameters) of an experiment under a preset."""
    e = experiment(name)
    return e.task, dict(e.task_params.get(preset, {}))


def _model_overrides(arch: str, recipe: Recipe) -> dict[str, Any]:
    """The recipe's depth for every architecture that has layers, and its heads for every one whose
    config has heads (ours and Hugging Face families alike); a user's model (``package.module:factory``)
    gets only the parameter target and sizes itself."""
    from dataclasses import fields

    from .. import models  # the grid sits above models; imported here to keep module import light

    if models.is_hf(arch):
        config = models.HFConfig
    elif models.is_external(arch):
        return {}
    else:
        from ..models.catalog import get

        config = get(arch).config
    have = {f.name for f in fields(config)}
    return {k: v for k, v in (("n_layers", recipe.layers), ("n_heads", recipe.heads)) if k in have}


def _extra_model(e: Experiment, arch: str, recipe: Recipe) -> dict[str, Any]:
    """The experiment's own model settings for ``arch``; ``"top2"`` names the recipe's top two layers,
    ``"all"`` every layer."""
    extra = dict(e.model.get(arch, {}))
    if extra.get("attn_off") == "top2":
        extra["attn_off"] = [recipe.layers - 2, recipe.layers - 1]
    if extra.get("uniform_attn") == "all":
        extra["uniform_attn"] = list(range(recipe.layers))
    return extra


def _own_archs() -> tuple[str, ...]:
    from .. import models  # the grid sits above models; imported here to keep module import light

    return tuple(models.names())


def preset(name: str, task: str, arch: str) -> dict[str, Any]:
    """``TrainConfig`` fields for ``arch`` on experiment ``task`` under preset ``name``."""
    if name not in PRESETS:
        raise InvalidValue(f"unknown preset {name!r}: choose from {', '.join(PRESETS)}")
    e = experiment(task)
    r = e.recipes[name]
    own = arch in _own_archs()
    return {
        **({"readout_lr_mult": r.readout_lr_mult} if r.readout_lr_mult != 1.0 and own else {}),
        "task": e.task,
        "task_params": dict(e.task_params[name]),
        "arch": arch,
        "params": r.params,
        "model": {**_model_overrides(arch, r), **_extra_model(e, arch, r)},
        "steps": r.steps,
        "batch_size": r.batch_size,
        "curriculum": [dict(stage) for stage in r.curriculum],
        "lr": r.lr,
        "min_lr": r.min_lr,
        "warmup": r.warmup,
        "weight_decay": r.weight_decay,
        "eval_every": r.eval_every,
        "ckpt_every": r.ckpt_every,
        **({} if r.train_set is None else {"train_set": r.train_set}),
    }


@dataclass(frozen=True)
class Cell:
    """One (preset, column, architecture, seed) of the table: a run folder's worth of work."""

    preset: str
    column: str
    arch: str
    seed: int
    params: int | None = None  # override of the recipe's capacity
    steps: int | None = None  # override of the recipe's length (smoke runs)

    @property
    def experiment(self) -> Experiment:
        return experiment(self.column)

    @property
    def folder(self) -> str:
        """The cell's run-folder name under the table's ``runs/``."""
        return f"{self.column}-{self.arch.replace(':', '-')}-s{self.seed}"

    def config(self) -> dict[str, Any]:
        """``TrainConfig`` fields; a changed ``steps`` keeps the curriculum's share of training."""
        steps = self.steps
        if steps is not None and (not is_int(steps) or steps < 1):
            raise InvalidValue(f"invalid steps: must be a positive integer, got {steps!r}")
        cfg = preset(self.preset, self.column, self.arch)
        cfg["seed"] = self.seed
        cfg["progress"] = False
        if self.params is not None:
            cfg["params"] = self.params
        return with_steps(cfg, steps) if steps is not None else cfg
