"""What the parser and ``windtunnel tasks`` say about the package's registries, as plain data: the architectures,
the reproduction targets, the defaults the help quotes, and each task's summary and default parameters.

Each is a copy of a registry or constant that lives below torch (the models, the tasks, the training
configuration, the evaluation, the reproduction), kept here so that ``windtunnel --help``, every command's
``--help``, ``windtunnel tasks`` and the refusal of a bad argument answer without importing torch.
``tests/test_quick_cli.py`` holds each equal to what it copies, so a new task or architecture fails a test
until it is listed here too (the failure prints the line to add).
"""

from __future__ import annotations

from typing import Any

ARCHITECTURES: tuple[str, ...] = ("transformer", "mamba", "lstm", "mlp", "mlp_pointwise")
"""``windtunnel.models.names()``: the architectures, in the order they are listed."""

TRAIN_DEFAULTS: dict[str, Any] = {"steps": 2000, "batch_size": 64, "lr": 1e-3}
"""The fields of ``TrainConfig()`` (:mod:`windtunnel.run.config`) that the help of ``train`` quotes."""

EVAL_SEED = 12345
"""``windtunnel.evaluation.evaluate.EVAL_SEED``: the seed of every run's evaluation episodes."""

REPRODUCE_TARGETS: tuple[str, ...] = ("paper1", "paper2", "paper3", "beyond", "scale", "all")
"""``windtunnel.orchestration.reproduce.TARGETS``: whose cells ``reproduce`` and ``status`` work or follow."""

TASKS: dict[str, tuple[str, dict[str, Any]]] = {
    "bijection": ("fresh random bijection per episode; predict each key's value (accumulation)",
                  {"V": 20, "L": 19, "replacement": False, "key_pool": None, "pool": None, "pool_seed": 0}),
    "bijection_query": ("bijection elimination in Paper I's layout: shared key/value tokens, a query token before each key",
                        {"V": 20, "L": 19, "replacement": False, "key_pool": None, "pool": None, "pool_seed": 0}),
    "coin": ("Beta-Bernoulli next-flip prediction, or Paper III's noisy two-label task (accumulation)",
             {"a": 1.0, "b": 1.0, "n": 32, "labels": "flips", "label_noise": 0.1, "pool": None, "pool_seed": 0}),
    "hmm": ("fresh random HMM per episode given as a header; track p(state | observations) (transport)",
            {"S": 5, "O": 5, "K": 20, "target": "posterior", "pool": None, "pool_seed": 0}),
    "mess3": ("a fixed 3-state hidden Markov process; predict the next symbol (its belief states form a fractal)",
              {"x": 0.05, "alpha": 0.85, "n": 16}),
    "recall": ("store unique key→value pairs, then look keys up (random-access binding)",
               {"pairs": 8, "n_keys": 16, "n_values": 16, "queries": 8, "filler": 2, "gap": 0}),
    "regression": ("Bayesian linear regression in context; predict each y's bin (continuous accumulation)",
                   {"d": 8, "points": 32, "C": 64, "sigma_w": 1.0, "sigma": 0.5, "y_range": 4.0, "pool": None,
                    "pool_seed": 0, "d_active": None, "paired": False}),
    "sticky": ("sticky Markov chain observed as noisy Gaussian vectors; predict the next symbol (filtering)",
               {"n_symbols": 8, "self_prob": 0.3, "dim": 20, "length": 32, "means_seed": 0, "noise": 1.0}),
    "recall_paper": ("store unique key→value pairs, then look keys up (random-access binding)",
                     {"pairs": 64, "n_keys": 256, "n_values": 256, "queries": 3, "filler": 32, "gap": 16}),
    "sawtooth": ("fresh random bijection per episode; predict each key's value (accumulation)",
                 {"V": 10, "L": 12, "replacement": True, "key_pool": None, "pool": None, "pool_seed": 0}),
}
"""``windtunnel tasks``'s listing: each name of ``windtunnel.tasks.names()``, in its order (the tasks, then the
presets), → its summary and default parameters (``tasks.get(name).summary``, ``tasks.defaults(name)``)."""
