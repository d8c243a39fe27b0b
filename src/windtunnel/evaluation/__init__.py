"""Evaluation and its measures, in bits against the exact posterior.

* :mod:`.evaluate` — batched evaluation, length generalisation, bootstrap intervals (``evaluate``,
  ``EvalResult``);
* :mod:`.metrics` — entropy, KL, support and accuracy against the exact posterior;
* :mod:`.references` — the reference predictors (uniform, unigram, bigram, context-blind, windowed
  oracles, the oracle) as models;
* :mod:`.stats` — bootstrap, percentile and Student-t intervals, paired differences, JSON-safe numbers.

Reads tasks and models only; never a run folder.
"""
