"""windtunnel: does a sequence model do exact Bayesian inference?  An answer in bits."""

__version__ = "0.1.0"

from . import geometry, models, report, routing, tasks  # noqa: E402
from .evaluation import metrics  # noqa: E402
from .evaluation.evaluate import EvalResult, evaluate  # noqa: E402
from .orchestration import stages, table  # noqa: E402
from .run import runs  # noqa: E402
from .run.runs import RunDir  # noqa: E402
from .training.loop import TrainConfig, load, train  # noqa: E402

__all__ = [
    "EvalResult", "RunDir", "TrainConfig", "evaluate", "geometry", "load", "metrics", "models", "report", "routing", "runs",
    "stages", "table", "tasks", "train", "__version__",
]
