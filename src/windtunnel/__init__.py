"""windtunnel: does a sequence model do exact Bayesian inference?  An answer in bits."""

__version__ = "0.1.0"

from . import models, tasks  # noqa: E402
from .evaluate import EvalResult, evaluate  # noqa: E402
from .train import TrainConfig, load, train  # noqa: E402

__all__ = ["EvalResult", "TrainConfig", "evaluate", "load", "models", "tasks", "train", "__version__"]
