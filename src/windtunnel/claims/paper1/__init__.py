"""Paper I (arXiv 2512.22471): behaviour (A) and mechanism and geometry (B).

Behaviour is judged on the committed primitives table (``results/quick/table.json``, 3 seeds,
200k parameters, bijection at V=10) and on the reproduction's cells (``results/quick/cells/``);
geometry on the cells' ``geometry.json``: the main job's bijection, the sawtooth (where posterior
entropy is not a function of position), and HMM for the transformer, Mamba and the LSTM.

One module a topic, each registering its claims on import, in the papers' order: :mod:`.bijection` (A1–A5, A13,
A14), :mod:`.hmm` (A6–A9, A15–A17), :mod:`.length` (A11, A12), :mod:`.recall` (A18–A23), :mod:`.primitives` (A10,
A24, A25), :mod:`.regression` (A26), :mod:`.foundations` (A27–A29), :mod:`.geometry` (B1–B11) and
:mod:`.hmm_geometry` (B12–B17).  What they share is in :mod:`.common`; every control — its cells, whether it
learned its task, and how a verdict is judged against it — in :mod:`.controls`.
"""

from __future__ import annotations

from . import bijection, hmm, length, recall, primitives, regression, foundations, geometry, hmm_geometry  # noqa: F401
from .controls import ON_PAPER_CELL, PAPER_CELL, PAPER_CELLS, PAPER_SCALE, with_size_controls
from .geometry import TIMESCALES_CONSTANT

__all__ = ["ON_PAPER_CELL", "PAPER_CELL", "PAPER_CELLS", "PAPER_SCALE", "TIMESCALES_CONSTANT", "with_size_controls"]
