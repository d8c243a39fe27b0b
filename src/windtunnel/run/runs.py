"""``RunDir``: the one owner of a run folder's layout and records.

A run folder holds everything one training run produced::

    config.json      what rebuilds the task, model and optimiser   (write_config / read_config)
    checkpoints/     atomic safetensors checkpoints, ``latest``    (run/checkpoint.py, via .checkpoints)
    metrics.jsonl    one JSON line per logged step                  (append_metrics / metrics)
                     (``metrics.jsonl.gz`` in a committed cell: the same lines gzip-compressed, see ``export``)
    eval.json        the evaluation (EvalResult.to_dict)            (write_eval / read_eval)
    timings.json     wall seconds of the stages                     (add_timing / timings)
    cell.json        a table cell's summary, when a table made it   (write_cell / read_cell)
    geometry.json    the geometric diagnostics                      (write_geometry / read_geometry)
    references.json  a table cell's Bayes oracle and context-blind floor  (write_references)
    report.html, summary.md  the report                             (write_report)
    figures/*.png    the evaluation's and the diagnostics' figures  (figures)

How each record is stored (compact tables, a committed cell's packed log) and what shape a record must have is
:mod:`windtunnel.run.records`.

Training, evaluation, analysis, the report, the table and the CLI reach these files only through
this class, so a file's name and shape are written down once; the analyses compute, and the stages
write what they return through the ``write_…`` methods here.  Reading a damaged record raises
:class:`RunError` (a user error: one line, exit 2), never returns an empty stand-in.
:meth:`RunDir.lock` keeps two processes from writing one run at the same time.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

from . import checkpoint as ckpt
from ..io import write_bytes_atomic, write_text_atomic
from .records import (PACKED, RunError, dump_record, eval_damage, pack, read_jsonl,  # noqa: F401
                      read_stored_text, stored)


_HELD: set[str] = set()
"""Run folders whose lock this process holds (the lock is re-entrant)."""


class RunDir:
    """A run folder (see the module docstring)."""

    CONFIG = "config.json"
    EVAL = "eval.json"
    CELL = "cell.json"
    TIMINGS = "timings.json"
    METRICS = "metrics.jsonl"
    METRICS_PACKED = METRICS + PACKED
    GEOMETRY = "geometry.json"
    REPORT = "report.html"
    SUMMARY = "summary.md"
    REFERENCES = "references.json"
    DIVERGED = "diverged.json"
    LOCK = ".lock"
    FILES = (CONFIG, EVAL, CELL, TIMINGS, METRICS, METRICS_PACKED, GEOMETRY, REFERENCES, REPORT, SUMMARY, DIVERGED)
    """The records a run folder may hold (a new one is added here, and the layout check and the
    bad-input tests cover it)."""
    TABLES = (EVAL, GEOMETRY, REFERENCES, CELL)
    """The records only programs read (the claims, the table, the report): written as compact JSON
    (:func:`dump_record`).  ``config.json`` and ``timings.json``, which people open, stay indented."""
    FOLDERS = ("checkpoints", "figures")
    """The entries that are folders."""

    def __init__(self, path: str | Path) -> None:
        if str(path).strip() == "":
            raise RunError("invalid run folder: the path is empty")
        self.path = Path(path)
        if any(len(part.encode()) > 255 for part in self.path.parts):
            raise RunError(f"invalid run folder: a name in {str(self.path)[:60]}… is longer than 255 bytes")

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    # --- paths ------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def eval_path(self) -> Path:
        return self.path / self.EVAL

    @property
    def metrics_path(self) -> Path:
        return self.path / self.METRICS

    @property
    def log_path(self) -> Path:
        """Where the training log is read from: ``metrics.jsonl``, or a committed cell's ``metrics.jsonl.gz``
        where only that is there (:func:`stored`); ``metrics.jsonl`` when neither is."""
        return stored(self.metrics_path) or self.metrics_path

    @property
    def geometry_path(self) -> Path:
        return self.path / self.GEOMETRY

    @property
    def report_path(self) -> Path:
        return self.path / self.REPORT

    @property
    def summary_path(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def timings_path(self) -> Path:
        return self.path / self.TIMINGS

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint_paths(self) -> list[Path]:
        """The complete checkpoints, oldest first."""
        return [p for p in ckpt.list_checkpoints(self.checkpoints) if ckpt.complete(p)]

    def latest_checkpoint(self) -> Path | None:
        """The newest checkpoint that loads (``None``: none does)."""
        return ckpt.find_latest(self.checkpoints)

    def checkpoint_at(self, step: int) -> Path | None:
        """Checkpoint ``step`` if the run kept it complete, else ``None``."""
        path = ckpt.step_dir(self.checkpoints, step)
        return path if path.is_dir() and ckpt.complete(path) else None

    def latest_step(self) -> int:
        """The step of the newest loadable checkpoint (0 when there is none)."""
        found = self.latest_checkpoint()
        return ckpt.step_of(found) if found is not None else 0

    def divergence(self) -> dict[str, Any] | None:
        """Why and where the run's training stopped on non-finite numbers (``diverged.json``: the message and the
        last good checkpoint's step), ``None`` for a run that did not diverge, or was trained on since — what
        tells a diverged run from one that was merely killed."""
        try:
            doc = json.loads((self.path / self.DIVERGED).read_text())
        except (OSError, ValueError):
            return None
        ok = isinstance(doc, dict) and isinstance(doc.get("message"), str) and isinstance(doc.get("last_good_step"), int)
        return doc if ok else None

    def record_divergence(self, message: str) -> None:
        """Say that training stopped on non-finite numbers (the loop's message), beside the last good step."""
        write_text_atomic(self.path / self.DIVERGED,
                          json.dumps({"message": message, "last_good_step": self.latest_step()}, indent=1))

    def clear_divergence(self) -> None:
        (self.path / self.DIVERGED).unlink(missing_ok=True)

    RESUME_RECORDS = (CONFIG, METRICS, DIVERGED)
    """The records a resume rewrites before its first new checkpoint (the configuration, the training log cut
    back to the checkpoint it resumes from, the divergence record)."""

    def record_bytes(self, names: tuple[str, ...]) -> dict[str, bytes | None]:
        """The bytes of each record of ``names`` (``None``: absent), for :meth:`put_back`."""
        return {name: (self.path / name).read_bytes() if (self.path / name).is_file() else None for name in names}

    def put_back(self, records: dict[str, bytes | None]) -> None:
        """Make each record of ``records`` (from :meth:`record_bytes`) what it was, byte for byte: rewritten where
        it differs, removed where it was absent."""
        for name, data in records.items():
            path = self.path / name
            now = path.read_bytes() if path.is_file() else None
            if now == data:
                continue
            if data is None:
                path.unlink()
            else:
                write_bytes_atomic(path, data)

    def load(self, step: int | None = None) -> tuple[Any, Any]:
        """``(task, model)`` of the run: the task and model rebuilt from ``config.json`` with the weights of
        the latest loadable checkpoint (or of ``step``), in eval mode.  The one way a run is loaded."""
        task, model = self._rebuild()
        found = self.latest_checkpoint() if step is None else self.checkpoint_at(step)
        if found is None:
            raise ckpt.CheckpointError(f"no complete checkpoint in {self.checkpoints}")
        ckpt.load(found, model)
        model.eval()
        return task, model

    def untrained(self) -> tuple[Any, str]:
        """The run's model at initialisation, in eval mode, and how it was had: the step-0 checkpoint where the run
        kept one, else the model rebuilt from ``config.json`` after ``torch.manual_seed(train.seed)`` (what training
        does before building it).  The diagnostics' null; the global random state is left as it was."""
        import torch

        zero = self.checkpoint_at(0)
        if zero is not None:
            _, model = self._rebuild()
            ckpt.load(zero, model)
            how = "step-0 checkpoint"
        else:
            seed = int(self.read_config().get("train", {}).get("seed", 0))
            state = torch.random.get_rng_state()
            try:
                torch.manual_seed(seed)
                _, model = self._rebuild()
            finally:
                torch.random.set_rng_state(state)
            how = f"rebuilt with torch.manual_seed({seed})"
        model.eval()
        return model, how

    def _rebuild(self) -> tuple[Any, Any]:
        """The task and a freshly initialised model of ``config.json`` (a damaged record is a :class:`RunError`)."""
        from .. import models, tasks
        from ..errors import InvalidValue

        record = self.read_config()
        try:
            task = tasks.make(record["task"]["name"], **record["task"]["params"])
            model = models.build(record["model"])
        except (ValueError, TypeError) as exc:
            if models.is_external(record["model"]["arch"]):  # the user's factory, not the folder, is at fault
                raise InvalidValue(f"{self.path}: {exc}") from None
            raise RunError(f"{self.config_path} is damaged: {exc}") from None
        return task, model

    @property
    def figures(self) -> Path:
        """The figures folder (created on first use)."""
        p = self.path / "figures"
        p.mkdir(parents=True, exist_ok=True)
        return p

    # --- state ------------------------------------------------------------------------------
    def check_layout(self) -> None:
        """:class:`RunError` if an entry of the layout is of the wrong kind (a file where a folder belongs,
        a folder where a file belongs, a dangling link) — checked before anything reads or writes, so a
        refused command leaves the folder as it was."""
        for name in self.FILES + (self.LOCK,) + self.FOLDERS:
            entry = self.path / name
            if not entry.exists() and not entry.is_symlink():
                continue
            if name in self.FOLDERS and not entry.is_dir():
                raise RunError(f"{entry} should be a folder but is not; move it away or choose another run folder")
            if name not in self.FOLDERS and not entry.is_file():
                raise RunError(f"{entry} should be a file but is not; move it away or choose another run folder")

    def is_run(self) -> bool:
        """Whether the folder holds a run (a ``config.json``)."""
        return self.config_path.is_file()

    def is_empty(self) -> bool:
        """True if the folder does not exist or holds nothing."""
        return not self.path.exists() or (self.path.is_dir() and not any(self.path.iterdir()))

    def prepare(self) -> None:
        """Create the folder, or raise :class:`RunError` saying why it cannot be written (its layout
        included: see :meth:`check_layout`)."""
        if self.path.exists() and not self.path.is_dir():
            raise RunError(f"cannot use {self.path} as a run folder: it is a file")
        self.check_layout()
        for folder in (self.path,) + tuple(self.path / f for f in self.FOLDERS if (self.path / f).is_dir()):
            try:
                folder.mkdir(parents=True, exist_ok=True)
                probe = folder / f".write-test{os.getpid()}"
                probe.write_text("")
                probe.unlink()
            except OSError as exc:
                raise RunError(f"cannot write the run folder {folder}: {exc.strerror or exc}") from None
        if self.metrics_path.is_file() and not os.access(self.metrics_path, os.W_OK):
            raise RunError(f"cannot write {self.metrics_path}: permission denied")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder's lock for the duration; :class:`RunError` if another process holds it (a run
        being trained, evaluated or analysed).  Re-entrant within a process: a stage that calls another
        (analyze → report) holds it once."""
        self.prepare()
        import fcntl

        key = str(self.path.resolve())
        if key in _HELD:
            yield
            return
        try:
            fd = os.open(self.path / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunError(f"cannot write the run folder {self.path}: {exc.strerror or exc}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise RunError(f"{self.path} is in use by another windtunnel process (training, evaluating or "
                               "analysing it); wait for it to finish or choose another folder") from None
            _HELD.add(key)
            try:
                yield
            finally:
                _HELD.discard(key)
        finally:
            os.close(fd)  # closing releases the lock

    def provenance(self) -> dict[str, Any]:
        """Where a result computed now comes from: the checkpoint step it reads (the newest complete
        one) and a SHA-256 of ``config.json`` — recorded in ``eval.json`` and ``geometry.json`` so a
        result of another checkpoint or configuration is recognised as stale."""
        import hashlib

        from .checkpoint import find_latest
        latest = find_latest(self.checkpoints) if self.checkpoints.is_dir() else None
        step = ckpt.step_of(latest) if latest is not None else None
        sha = hashlib.sha256(self.config_path.read_bytes()).hexdigest()[:16] if self.config_path.is_file() else None
        return {"step": step, "config_sha256": sha}

    def stale_results(self) -> list[str]:
        """What in ``eval.json`` / ``geometry.json`` was computed from another checkpoint step or
        ``config.json`` than the run's newest, one sentence each (files written before provenance was
        recorded are not judged)."""
        now = self.provenance()
        ev = self.read_eval() if self.eval_path.is_file() else {}
        geo = self.read_geometry() or {}
        out = []
        for name, prov in ((self.EVAL, ev.get("provenance")), (self.GEOMETRY, geo.get("meta"))):
            if not isinstance(prov, dict) or "step" not in prov:
                continue
            if prov.get("step") != now["step"]:
                out.append(f"{name} is from checkpoint step {prov.get('step')}, the newest is {now['step']}")
            elif prov.get("config_sha256") != now["config_sha256"]:
                out.append(f"{name} was computed under another config.json")
        return out

    def result_states(self) -> dict[str, str]:
        """``eval.json``, ``geometry.json`` and ``report.html`` each ``"missing"``, ``"stale"`` (of another checkpoint
        or configuration than the newest — :meth:`stale_results` — or, for the report, older than a result it shows)
        or ``"current"``."""
        stale = " ".join(self.stale_results())
        out = {name: ("missing" if not (self.path / name).is_file() else "stale" if name in stale else "current")
               for name in (self.EVAL, self.GEOMETRY)}
        shown = [p.stat().st_mtime for p in (self.eval_path, self.geometry_path) if p.is_file()]
        out[self.REPORT] = ("missing" if not self.report_path.is_file() else
                            "stale" if shown and self.report_path.stat().st_mtime < max(shown) else "current")
        return out

    # --- JSON records -----------------------------------------------------------------------
    def _read(self, name: str, what: str) -> Any:
        if self.path.is_dir():
            self.check_layout()  # every reader sees a folder of the right shape, or refuses in one line
        path = self.path / name
        if not path.is_file():
            raise RunError(f"{self.path} has no {name} ({what})")
        try:
            return json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RunError(f"{path} is damaged ({exc}); re-create it or choose another run folder") from None

    def _write(self, name: str, record: Any, indent: int | None = 1) -> Path:
        """Write the record ``name``: compact JSON for a machine-read table (:attr:`TABLES`), else indented by
        ``indent``."""
        self.prepare()
        path = self.path / name
        write_text_atomic(path, dump_record(record) if name in self.TABLES else json.dumps(record, indent=indent))
        return path

    def read_config(self) -> dict[str, Any]:
        """The run's ``config.json``: ``{"train": {...}, "task": {"name", "params"}, "model": {"arch", ...}, "n_params"}``."""
        cfg = self._read(self.CONFIG, "not a windtunnel run folder")
        ok = (
            isinstance(cfg, dict) and isinstance(cfg.get("train"), dict) and isinstance(cfg.get("task"), dict)
            and isinstance(cfg["task"].get("name"), str) and isinstance(cfg["task"].get("params"), dict)
            and isinstance(cfg.get("model"), dict) and isinstance(cfg["model"].get("arch"), str)
            and (cfg.get("n_params") is None or (isinstance(cfg["n_params"], int) and not isinstance(cfg["n_params"], bool)))
        )
        if not ok:
            raise RunError(f"{self.config_path} is damaged: not a windtunnel run configuration")
        from .. import models, tasks

        arch = cfg["model"]["arch"]
        if cfg["task"]["name"] not in tasks.names() or (arch not in models.names() and not models.is_external(arch)):
            raise RunError(f"{self.config_path} is damaged: unknown task {cfg['task']['name']!r} "
                           f"or architecture {cfg['model']['arch']!r}")
        return cfg

    def holds(self, train: dict[str, Any]) -> bool:
        """Whether the run here was trained with the ``TrainConfig`` fields ``train`` (the progress bar,
        the experiment trackers, the timed checkpoints and the device aside; fields added to ``TrainConfig`` since the run was made count at their defaults) — the one
        test every resuming command applies before it continues or reuses a run."""
        from .config import recipe

        return self.is_run() and recipe(self.read_config()["train"]) == recipe(train)

    def write_config(self, record: dict[str, Any]) -> Path:
        return self._write(self.CONFIG, record, indent=2)

    def read_eval(self) -> dict[str, Any]:
        ev = self._read(self.EVAL, "not evaluated yet: run `windtunnel eval` first")
        damage = eval_damage(ev)
        if damage is not None:
            raise RunError(f"{self.eval_path} is damaged: {damage}; remove it and re-run `windtunnel eval`")
        return ev

    def evaluation(self) -> Any:
        """``eval.json`` as the object :func:`windtunnel.evaluate` returns (an
        :class:`~windtunnel.evaluation.evaluate.EvalResult`: ``.metrics``, ``.curves``, ``.oracle``, ``.lengths``);
        :meth:`read_eval` is the same record as plain JSON."""
        from ..evaluation.evaluate import EvalResult  # the evaluation imports torch; reading a folder need not

        return EvalResult.from_dict(self.read_eval())

    def read_geometry(self) -> dict[str, Any] | None:
        """``geometry.json`` (``None`` where the run was not analysed); :class:`RunError` if it is not the
        diagnostics' record (an object with a ``summary`` table, and a ``meta`` table where it has one)."""
        if not self.geometry_path.is_file():
            return None
        geo = self._read(self.GEOMETRY, "the geometric diagnostics")
        if not isinstance(geo, dict) or not isinstance(geo.get("summary"), dict) or not isinstance(geo.get("meta", {}), dict):
            raise RunError(f"{self.geometry_path} is damaged: not a windtunnel geometry record; remove it and re-run "
                           "`windtunnel analyze`")
        return geo

    def write_eval(self, record: dict[str, Any]) -> Path:
        return self._write(self.EVAL, record)

    def write_geometry(self, record: dict[str, Any]) -> Path:
        """Write ``geometry.json``: strict JSON (a NaN or infinity in a diagnostic's result is a bug, not a value)."""
        if not isinstance(record, dict) or not isinstance(record.get("summary"), dict):
            raise ValueError("a geometry record is an object with a summary table")
        self.prepare()
        write_text_atomic(self.geometry_path, dump_record(record, strict=True))
        return self.geometry_path

    def write_references(self, record: dict[str, Any]) -> Path:
        """Write ``references.json`` (a table cell's reference predictors on its own evaluation episodes)."""
        return self._write(self.REFERENCES, record)

    @property
    def references_path(self) -> Path:
        return self.path / self.REFERENCES

    def write_report(self, html: str, markdown: str) -> Path:
        """Write ``report.html`` and ``summary.md``; returns the HTML path."""
        self.prepare()
        write_text_atomic(self.report_path, html)
        write_text_atomic(self.summary_path, markdown)
        return self.report_path

    def read_cell(self) -> dict[str, Any] | None:
        """A table cell's summary, or ``None`` where the run was not (yet) made by a table."""
        if not (self.path / self.CELL).is_file():
            return None
        cell = self._read(self.CELL, "a table cell")
        if not isinstance(cell, dict) or not {"task", "arch", "seed", "metrics"} <= set(cell):
            raise RunError(f"{self.path / self.CELL} is damaged: not a table cell")
        return cell

    def write_cell(self, cell: dict[str, Any]) -> Path:
        return self._write(self.CELL, cell)

    def timings(self) -> dict[str, float]:
        """Wall seconds per stage (``train_s``, ``eval_s``, …); empty where none were recorded."""
        if not (self.path / self.TIMINGS).is_file():
            return {}
        t = self._read(self.TIMINGS, "timings")
        return {k: float(v) for k, v in t.items() if isinstance(v, (int, float))} if isinstance(t, dict) else {}

    def add_timing(self, **seconds: float) -> Path:
        return self._write(self.TIMINGS, {**self._timings_record(), **{k: float(v) for k, v in seconds.items()}})

    def execution(self) -> dict[str, Any] | None:
        """What ran the run's steps, as its training loop recorded it after its first step
        (:func:`windtunnel.training.execution.describe`: device, step program, compiler, scan); ``None`` where
        nothing was recorded."""
        found = self._timings_record().get("execution")
        return found if isinstance(found, dict) else None

    def record_execution(self, execution: dict[str, Any]) -> Path:
        """Keep ``execution`` in ``timings.json`` beside the seconds (the latest training process's)."""
        return self._write(self.TIMINGS, {**self._timings_record(), "execution": execution})

    def _timings_record(self) -> dict[str, Any]:
        """``timings.json`` as written: the seconds and what ran them (a damaged file counts as empty: it is
        rewritten whole by the stage that records next)."""
        if not self.timings_path.is_file():
            return {}
        try:
            found = json.loads(self.timings_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        if not isinstance(found, dict):
            return {}
        seconds = {k: float(v) for k, v in found.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return {**seconds, **({"execution": found["execution"]} if isinstance(found.get("execution"), dict) else {})}

    # --- the training log -------------------------------------------------------------------
    def metrics(self) -> list[dict[str, Any]]:
        """The lines of ``metrics.jsonl`` (a committed cell's ``metrics.jsonl.gz``; a line cut by a kill is skipped)."""
        return read_jsonl(self.log_path) if self.log_path.is_file() else []

    def append_metrics(self, record: dict[str, Any]) -> None:
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def restore(self, model: Any, optimizer: Any, first_checkpoint: int, say: bool = True) -> tuple[int, float]:
        """Load the newest checkpoint that can resume training (weights, optimizer, generator state) into
        ``model`` and ``optimizer``; return ``(step, training seconds so far)`` — ``(0, 0.0)`` for a run
        killed before its first checkpoint.  Newer damaged checkpoints are named on standard error
        (``say``): their steps are trained again.  :class:`~windtunnel.run.checkpoint.CheckpointError` when
        none is whole although some exist, or ``checkpoints/`` is gone although the training log
        passed ``first_checkpoint`` (resuming would start a new run over the old log)."""
        import sys

        found = ckpt.find_latest(self.checkpoints, resumable=True)
        newer = [p for p in ckpt.list_checkpoints(self.checkpoints)
                 if (found is None or ckpt.step_of(p) > ckpt.step_of(found))
                 and not (ckpt.complete(p) and not ckpt.has_optimizer(p))]  # dynamics checkpoints are not damaged
        if found is not None:
            if newer and say:
                print(f"windtunnel: resuming {self.path} from step {ckpt.step_of(found)}: the newer checkpoint(s) "
                      f"{', '.join(p.name for p in newer)} are damaged and will be replaced", file=sys.stderr)
            state = ckpt.load(found, model, optimizer)
            ckpt.set_rng_state(state["rng"])
            return int(state["step"]), float(state.get("elapsed", 0.0))
        logged = any(isinstance(r.get("step"), int) and r["step"] >= first_checkpoint for r in self.metrics())
        if ckpt.list_checkpoints(self.checkpoints) or logged:
            raise ckpt.CheckpointError(
                f"cannot resume {self.path}: none of its checkpoints can be read or checkpoints/ is gone although "
                "its training log passed a checkpoint step; nothing was changed (start over with --force, or another folder)")
        return 0, 0.0

    def truncate_metrics(self, step: int) -> None:
        """Drop log lines after ``step`` (resuming from the checkpoint of that step)."""
        if self.metrics_path.exists():
            keep = [r for r in self.metrics() if r.get("step", 0) <= step]
            write_text_atomic(self.metrics_path, "".join(json.dumps(r) + "\n" for r in keep))

    # --- the light copy a committed cell keeps ----------------------------------------------------
    def export(self, dst: str | Path, names: Sequence[str]) -> Path:
        """Write the records ``names`` of this run, and its ``timings.json`` where written, into the folder ``dst``
        the way a committed cell keeps them, light enough to travel with every copy of the repository: a table
        (:attr:`TABLES`) parsed and written again as compact JSON (:func:`dump_record`: the same values, every
        number bit for bit), the training log gzip-compressed as ``metrics.jsonl.gz`` (:func:`pack`; a plain
        ``metrics.jsonl`` in ``dst`` is removed, so the cell holds one log), anything else byte for byte.  Each
        file is replaced atomically.  ``dst`` may be this folder itself (:func:`lighten`).  A record ``names``
        lists that the run lacks is :class:`FileNotFoundError`.  Returns ``dst``."""
        dst = Path(dst)
        dst.mkdir(parents=True, exist_ok=True)
        same = dst.resolve() == self.path.resolve()
        for name in names:
            src = self.path / name
            if name == self.METRICS:
                write_bytes_atomic(dst / self.METRICS_PACKED, pack(read_stored_text(src)))
                (dst / self.METRICS).unlink(missing_ok=True)
            elif name in self.TABLES:
                record = json.loads(src.read_text())
                write_text_atomic(dst / name, dump_record(record, strict=name == self.GEOMETRY))
            elif not same:
                write_bytes_atomic(dst / name, src.read_bytes())
        if self.timings_path.is_file() and not same:
            write_bytes_atomic(dst / self.TIMINGS, self.timings_path.read_bytes())
        return dst

    def training_seconds(self) -> float | None:
        """Wall seconds of training: the last ``time`` the loop logged (it accumulates across
        resumes), else ``timings.json``'s ``train_s``."""
        times = [r["time"] for r in self.metrics() if isinstance(r.get("time"), (int, float))]
        return times[-1] if times else self.timings().get("train_s")


def lighten(folder: str | Path) -> list[str]:
    """Rewrite a committed cell folder in place the way :meth:`RunDir.export` writes one — its tables as compact
    JSON, its training log as ``metrics.jsonl.gz`` — for a cell exported by an older ``windtunnel`` (indented
    tables, a plain log).  The numbers are untouched (:func:`dump_record`).  Returns the names of the records it
    rewrote; a folder already light is rewritten to the same bytes."""
    run = RunDir(folder)
    names = [n for n in RunDir.TABLES + (RunDir.METRICS,) if stored(run.path / n) is not None]
    run.export(run.path, names)
    return names


def load(run_dir: str | Path | RunDir, step: int | None = None) -> tuple[Any, Any]:
    """The task and trained model of a run folder (its latest checkpoint, or ``step``): :meth:`RunDir.load`."""
    return (run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)).load(step)
