"""Paper I's geometric diagnostics as library functions (arXiv 2512.22471, 2512.22473).

Each diagnostic is ``f(model, task, **options) -> dict`` of plain JSON numbers with a null
baseline for every statistic, returns ``{"applicable": False, "reason": ...}`` for an architecture
without the part it measures, and has a figure function ``f_figure(result, path) -> Path`` (PNG):

* :func:`key_orthogonality` — mean |off-diagonal cos| of the hypothesis tokens' keys per layer/head;
* :func:`attention_focusing` — attention entropy and mass on task-defined position sets by depth;
* :func:`value_manifold` — PCA of attention outputs and residual stream vs Bayes entropy;
* :func:`head_ablation`, :func:`layer_ablation` — Δ entropy MAE / KL with paired bootstrap CIs;
* :func:`probes` — ridge probes of the posterior and its entropy per layer; HMM k-means + ARI;
* :func:`frame_precision` — over checkpoints: attention change vs manifold precision vs error.

:func:`diagnose` runs all that apply to a run folder and returns the ``geometry.json`` record, which
:func:`windtunnel.orchestration.stages.analyze_run` writes (``windtunnel analyze DIR``).  Each diagnostic
registers itself in its own module (:mod:`windtunnel.geometry.registry`): a new one is one new file.
"""

from ._common import GEOMETRY_SEED, not_applicable, spearman
from .readouts import adjusted_rand_index, kmeans, pca, ridge_fit
from .ablation import ablation_figure, head_ablation, head_ablation_figure, layer_ablation, layer_ablation_figure
from .attention import attention_focusing, attention_focusing_figure, attention_regions
from .dynamics import frame_precision, frame_precision_figure, js_bits, settle_step
from .keys import gaussian_abs_cos, hypothesis_tokens, key_orthogonality, key_orthogonality_figure, token_keys
from .manifold import value_manifold, value_manifold_figure
from .probes import cluster_states, posterior_probe, probes, probes_figure
from .registry import Diagnostic, Reading, register
from .run import DIAGNOSTICS, diagnose, failed_diagnostics, readings, stale_diagnostics

__all__ = [
    "DIAGNOSTICS", "Diagnostic", "GEOMETRY_SEED", "Reading", "readings", "register", "stale_diagnostics", "ablation_figure", "adjusted_rand_index", "attention_focusing", "diagnose", "failed_diagnostics",
    "attention_focusing_figure", "attention_regions", "cluster_states", "frame_precision", "frame_precision_figure",
    "gaussian_abs_cos", "head_ablation", "head_ablation_figure", "hypothesis_tokens", "js_bits", "key_orthogonality",
    "key_orthogonality_figure", "kmeans", "layer_ablation", "layer_ablation_figure", "not_applicable", "pca",
    "posterior_probe", "probes", "probes_figure", "ridge_fit", "settle_step", "spearman", "token_keys",
    "value_manifold", "value_manifold_figure",
]
