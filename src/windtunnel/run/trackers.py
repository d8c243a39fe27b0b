"""Experiment trackers: the run's ``metrics.jsonl`` records, mirrored to TensorBoard, Weights & Biases or
MLflow as they are written.

``metrics.jsonl`` stays the record of a run (everything in windtunnel reads it); a tracker is a second
copy for the dashboards researchers already use.  Each package is imported only when its tracker is
asked for (``TrainConfig.trackers``, ``windtunnel train --log NAME``), and a tracker whose package is
missing is refused before anything is written.  Every record becomes scalars under one name each —
``train/loss``, ``train/bayes_gap``, ``train/lr``, ``train/grad_norm``, ``train/time`` and
``eval/<metric>`` — at the record's ``step``.

Where each writes:

* ``tensorboard`` — event files in ``RUN/tensorboard/`` (``tensorboard --logdir RUN``);
* ``wandb`` — a run named after the run folder in the project ``$WANDB_PROJECT`` (default
  ``windtunnel``), its local files in ``RUN/wandb/``; ``WANDB_MODE=offline`` keeps it on this machine.
  A resumed run continues the same wandb run (its id is derived from the folder's path);
* ``mlflow`` — the tracking server in ``$MLFLOW_TRACKING_URI``, or a file store in ``RUN/mlruns/``
  (``mlflow ui --backend-store-uri RUN/mlruns``; MLflow 3 asks for ``MLFLOW_ALLOW_FILE_STORE``, which is
  set for this process when no URI is given); the
  experiment ``windtunnel``, one MLflow run per run folder (found again on resume by its tag
  ``windtunnel.run``), the config as parameters.

Lines a killed run logged after its last checkpoint are dropped from ``metrics.jsonl`` on resume and
logged again; a tracker keeps both copies of those steps (wandb drops the second, as it refuses a step
below one it has seen).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Protocol

__all__ = ["TRACKERS", "Tracker", "Trackers", "flatten", "missing_package"]

TRACKERS: dict[str, str] = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
"""Tracker name → the package it needs."""


def missing_package(name: str) -> str | None:
    """The package a tracker needs that is not installed (``None``: it can be opened)."""
    package = TRACKERS[name]
    return None if importlib.util.find_spec(package) is not None else package


def flatten(record: dict[str, Any]) -> tuple[int, dict[str, float]]:
    """``(step, {name: value})`` of one ``metrics.jsonl`` record: the training scalars under ``train/``,
    the held-out evaluation's under ``eval/``; entries that are not finite numbers are left out."""
    step = int(record["step"])
    out: dict[str, float] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)

    for k, v in record.items():
        if k == "step":
            continue
        if isinstance(v, dict):
            for kk, vv in v.items():
                put(f"{k}/{kk}", vv)
        else:
            put(f"train/{k}", v)
    return step, out


class Tracker(Protocol):
    """What a tracker does: take each record as it is written, and close."""

    def log(self, step: int, scalars: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def _run_id(run_path: Path) -> str:
    """A stable id for a run folder (its name and a hash of its absolute path)."""
    digest = hashlib.sha1(str(run_path.resolve()).encode()).hexdigest()[:10]
    return re.sub(r"[^A-Za-z0-9_-]", "-", run_path.name)[:40] + "-" + digest


class _TensorBoard:
    def __init__(self, run_path: Path, config: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_path / "tensorboard"))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for k, v in scalars.items():
            self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class _Wandb:
    def __init__(self, run_path: Path, config: dict[str, Any]) -> None:
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "windtunnel"), name=run_path.name,
                              id=_run_id(run_path), resume="allow", dir=str(run_path), config=config)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class _MLflow:
    def __init__(self, run_path: Path, config: dict[str, Any]) -> None:
        import mlflow

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # MLflow 3 keeps its file store behind this switch; it is the store that needs no server
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (run_path.resolve() / "mlruns").as_uri()
        self.client = mlflow.tracking.MlflowClient(uri)
        exp = self.client.get_experiment_by_name("windtunnel")
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment("windtunnel")
        tag = str(run_path.resolve())
        found = self.client.search_runs([exp_id], filter_string=f"tags.`windtunnel.run` = '{tag}'", max_results=1)
        if found:
            self.run_id = found[0].info.run_id
        else:
            self.run_id = self.client.create_run(exp_id, run_name=run_path.name, tags={"windtunnel.run": tag}).info.run_id
            for k, v in _flat_params(config).items():
                self.client.log_param(self.run_id, k, v)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in scalars.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as ``{dotted.key: text}`` (MLflow parameters are strings)."""
    out: dict[str, str] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flat_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)[:500]
    return out


_OPEN = {"tensorboard": _TensorBoard, "wandb": _Wandb, "mlflow": _MLflow}


class Trackers:
    """The trackers of one run, opened together; ``log(record)`` mirrors a ``metrics.jsonl`` record to each,
    ``close()`` (or leaving a ``with`` block) closes them all."""

    def __init__(self, names: list[str], run_path: str | Path, config: dict[str, Any]) -> None:
        self.open: list[Tracker] = []
        try:
            for name in names:
                self.open.append(_OPEN[name](Path(run_path), config))
        except BaseException:
            self.close()
            raise

    def log(self, record: dict[str, Any]) -> None:
        if self.open:
            step, scalars = flatten(record)
            for t in self.open:
                t.log(step, scalars)

    def close(self) -> None:
        while self.open:
            self.open.pop().close()

    def __enter__(self) -> "Trackers":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
