"""windtunnel: does a sequence model do exact Bayesian inference?  An answer in bits.

``import windtunnel`` loads nothing but this module: each public name is imported from its home on first use
(:data:`_HOMES`), so that the command line and a script that needs one part do not pay for torch and every
other part before they start.
"""

import importlib as _importlib
from typing import Any as _Any

__version__ = "0.1.0"

_HOMES: dict[str, tuple[str, str | None]] = {
    "EvalResult": ("windtunnel.evaluation.evaluate", "EvalResult"),
    "RunDir": ("windtunnel.run.runs", "RunDir"),
    "TrainConfig": ("windtunnel.run.config", "TrainConfig"),
    "compare": ("windtunnel.orchestration.compare", "compare"),
    "evaluate": ("windtunnel.evaluation.evaluate", "evaluate"),
    "geometry": ("windtunnel.geometry", None),
    "load": ("windtunnel.run.runs", "load"),
    "main_job": ("windtunnel.orchestration.main_job", "main_job"),
    "metrics": ("windtunnel.evaluation.metrics", None),
    "models": ("windtunnel.models", None),
    "report": ("windtunnel.report", None),
    "routing": ("windtunnel.routing", None),
    "runs": ("windtunnel.run.runs", None),
    "stages": ("windtunnel.orchestration.stages", None),
    "table": ("windtunnel.orchestration.table", None),
    "tasks": ("windtunnel.tasks", None),
    "train": ("windtunnel.training.loop", "train"),
}
"""Each public name → (the module it lives in, its attribute there; ``None``: the module itself).  ``metrics``,
``runs``, ``stages`` and ``table`` are attributes only: ``from windtunnel import stages``, not ``import
windtunnel.stages``."""

__all__ = [*_HOMES, "__version__"]


def __getattr__(name: str) -> _Any:
    """A public name, imported from its module on first use and kept here for the next."""
    if name not in _HOMES:
        raise AttributeError(f"module 'windtunnel' has no attribute {name!r}")
    module, attribute = _HOMES[name]
    value = _importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's own names and the public ones not yet imported."""
    return sorted({*globals(), *_HOMES})
