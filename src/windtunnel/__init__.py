"""windtunnel: does a sequence model do exact Bayesian inference?  An answer in bits."""

__version__ = "0.1.0"

from . import geometry, metrics, models, report, routing, runs, stages, table, tasks  # noqa: E402
from .evaluation import EvalResult, evaluate  # noqa: E402
from .runs import RunDir  # noqa: E402
from .training import TrainConfig, load, train  # noqa: E402

__all__ = [
    "EvalResult", "RunDir", "TrainConfig", "evaluate", "geometry", "load", "metrics", "models", "report", "routing", "runs",
    "stages", "table", "tasks", "train", "__version__",
]
