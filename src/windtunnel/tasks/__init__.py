"""Bayesian wind tunnels: tasks whose exact posterior is known at every position.

``make(name, **params)`` builds a task, ``names()`` lists them, ``oracle(task)`` is the
Bayes-optimal predictor packaged as a model and ``context_blind(task)`` the best predictor that
sees only its position and its own input (the floor of a network without context).  A task is one
module of this package that registers itself (``@register``); every module is imported here.
"""

import importlib as _importlib
import pkgutil as _pkgutil

from .base import (IGNORE, BayesOracle, ConditionalMean, ContextBlind, Episodes, Task, context_blind, defaults, entropy_bits, get, make,
                   names, oracle, register)

__all__ = [
    "IGNORE", "BayesOracle", "ConditionalMean", "ContextBlind", "context_blind", "Episodes", "Task", "defaults", "entropy_bits", "get", "make", "names",
    "oracle", "register",
]

for _m in _pkgutil.iter_modules(__path__):  # each task module registers itself
    if _m.name != "base" and not _m.name.startswith("_"):
        _importlib.import_module(f"{__name__}.{_m.name}")
