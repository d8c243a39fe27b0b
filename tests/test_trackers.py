"""Experiment trackers: a tracked run written and read back against its own metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from windtunnel.run import trackers
from windtunnel.errors import UserError
from windtunnel.run.config import ConfigError, TrainConfig


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(task="bijection", task_params={"V": 4, "L": 3}, arch="transformer",
                       model={"d_model": 16, "n_layers": 1, "n_heads": 2}, steps=8, batch_size=8, log_every=2,
                       eval_every=4, ckpt_every=4, eval_n=8, progress=False, device="cpu", warmup=1, **kw)


def _jsonl(run: Path) -> dict[str, dict[int, float]]:
    """Every scalar of metrics.jsonl as ``{name: {step: value}}`` (names as the trackers write them)."""
    out: dict[str, dict[int, float]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        step, scalars = trackers.flatten(json.loads(line))
        for k, v in scalars.items():
            out.setdefault(k, {})[step] = v
    return out


def test_flatten_by_hand() -> None:
    assert trackers.flatten({"step": 5, "loss": 1.5, "lr": 0.001, "bad": float("nan"), "flag": True}) == (
        5, {"train/loss": 1.5, "train/lr": 0.001})
    assert trackers.flatten({"step": 10, "eval": {"kl": 0.25, "accuracy": 1, "none": None}}) == (
        10, {"eval/kl": 0.25, "eval/accuracy": 1.0})


def test_tensorboard_holds_every_metric_of_the_run(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from windtunnel.training.loop import train

    run = train(_cfg(trackers=["tensorboard"]), tmp_path / "run")
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    want = _jsonl(run)
    assert set(acc.Tags()["scalars"]) == set(want)
    assert {"train/loss", "train/bayes_gap", "eval/kl", "eval/entropy_mae"} <= set(want)
    for name, by_step in want.items():
        got = {e.step: e.value for e in acc.Scalars(name)}
        assert got.keys() == by_step.keys()
        assert all(got[s] == pytest.approx(v, rel=1e-6, abs=1e-12) for s, v in by_step.items()), name


def test_mlflow_file_store_and_resume_continue_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    import mlflow

    from windtunnel.training.loop import train

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _cfg(trackers=["mlflow"])
    run = train(cfg, tmp_path / "run", until=4)
    train(cfg, tmp_path / "run", resume=True)  # the same MLflow run continues
    client = mlflow.tracking.MlflowClient((run.resolve() / "mlruns").as_uri())
    exp = client.get_experiment_by_name("windtunnel")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1 and runs[0].data.params["steps"] == "8"
    want = _jsonl(run)
    for name in ("train/loss", "eval/kl"):
        got = {m.step: m.value for m in client.get_metric_history(runs[0].info.run_id, name)}
        assert got == pytest.approx(want[name])


def _wandb_history(path: Path) -> dict[str, dict[int, float]]:
    """The history rows of an offline ``.wandb`` file: a LevelDB-style log (32 KiB blocks, each chunk
    ``crc32 | length (u16) | type (u8)``, types FULL = 1 … LAST = 4) after a 7-byte ``:W&B`` header, each
    record a ``wandb_internal_pb2.Record``."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    records, buf = [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            records.append(buf)
            buf = b""
    out: dict[str, dict[int, float]] = {}
    for raw in records:
        rec = pb.Record.FromString(raw)
        if rec.WhichOneof("record_type") == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            for k, v in row.items():
                if not k.startswith("_"):
                    out.setdefault(k, {})[int(row.get("_step", rec.history.step.num))] = v
    return out


def test_wandb_offline_history_holds_every_metric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    from windtunnel.training.loop import train

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = train(_cfg(trackers=["wandb"]), tmp_path / "run")
    files = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    got, want = _wandb_history(files[0]), _jsonl(run)
    assert got.keys() == want.keys()
    for name, by_step in want.items():
        assert got[name] == pytest.approx(by_step), name


def test_unknown_or_missing_trackers_are_refused_before_anything_is_written(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from windtunnel.training.loop import build, train

    with pytest.raises(ConfigError, match="trackers"):
        _cfg(trackers=["neptune"])
    with pytest.raises(ConfigError, match="trackers"):
        _cfg(trackers=["tensorboard", "tensorboard"])
    monkeypatch.setitem(trackers.TRACKERS, "wandb", "no_such_package_for_windtunnel")
    cfg = _cfg(trackers=["wandb"])
    with pytest.raises(UserError, match="pip install no_such_package_for_windtunnel"):
        build(cfg)
    with pytest.raises(UserError):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_run_is_the_same_run_whatever_it_is_tracked_with(tmp_path: Path) -> None:
    from windtunnel.run.runs import RunDir
    from windtunnel.training.loop import train

    run = RunDir(train(_cfg(), tmp_path / "run"))
    assert run.holds(_cfg(trackers=["tensorboard"]).to_dict())
