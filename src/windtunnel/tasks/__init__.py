"""Bayesian wind tunnels: tasks whose exact posterior is known at every position.

``make(name, **params)`` builds a task, ``names()`` lists them, ``oracle(task)`` is the
Bayes-optimal predictor packaged as a model and ``context_blind(task)`` the best predictor that
sees only its position and its own input (the floor of a network without context).
"""

from .base import (IGNORE, BayesOracle, ContextBlind, Episodes, Task, context_blind, defaults, entropy_bits, get, make,
                   names, oracle, register)
from . import bijection  # noqa: F401  (registers)

__all__ = [
    "IGNORE", "BayesOracle", "ContextBlind", "context_blind", "Episodes", "Task", "defaults", "entropy_bits", "get", "make", "names",
    "oracle", "register",
]
from . import recall, regression, coin  # noqa
from . import hmm, sticky  # noqa: F401  (registers)
