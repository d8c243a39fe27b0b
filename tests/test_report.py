"""windtunnel.report: figures are drawn and report.html is self-contained."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from windtunnel import report
from windtunnel.orchestration import stages
from windtunnel.run.runs import RunDir, RunError
from windtunnel.training.loop import TrainConfig

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tiny run folder, written by the stages users run (train, eval, analyze)."""
    run = RunDir(tmp_path_factory.mktemp("run") / "r")
    cfg = TrainConfig(task="bijection", task_params={"V": 6, "L": 5}, arch="transformer",
                      model={"d_model": 16, "n_layers": 2, "n_heads": 2}, steps=40, eval_every=20,
                      ckpt_every=20, eval_n=32, progress=False)
    stages.train_run(cfg, run)
    stages.evaluate_run(run, n=200, lengths=[5, 6])
    stages.analyze_run(run, n=64)
    return run.path


@pytest.mark.slow
def test_figures_exist(run_dir: Path) -> None:
    for name in ("calibration", "entropy", "kl", "training"):
        p = run_dir / "figures" / f"{name}.png"
        assert p.exists() and p.stat().st_size > 10_000, name
        assert p.read_bytes()[:8] == PNG


def test_report_is_self_contained(run_dir: Path) -> None:
    out = stages.write_report(run_dir)
    assert out == run_dir / "report.html"
    text = out.read_text()
    assert text.count("data:image/png;base64,") == len(list((run_dir / "figures").glob("*.png")))
    srcs = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)""", text)
    assert srcs and all(s.startswith("data:") for s in srcs)
    assert "<script" not in text and "<link" not in text and "@import" not in text
    for needle in ("Bayes oracle", "entropy_mae_curve", "infeasible_mass", "beyond", "key_orthogonality",
                   "torch", "numpy", "windtunnel", "forward_s", "&quot;lr&quot;", "training wall time",
                   "run.train_s", "run.eval_s"):
        assert needle in text, needle
    md = (run_dir / "summary.md").read_text()
    assert "| model |" in md and "figures/kl.png" in md
    # figures in the standard order
    order = [text.index(f"alt='{n}'") for n in ("training", "entropy", "kl", "calibration")]
    assert order == sorted(order)


def test_report_shows_the_training_time_the_loop_logged(run_dir: Path) -> None:
    seconds = RunDir(run_dir).training_seconds()
    assert seconds is not None and seconds > 0
    assert RunDir(run_dir).timings()["train_s"] == seconds
    assert "training wall time (s)" in (run_dir / "summary.md").read_text()


def test_report_draws_missing_figures_and_keeps_existing(tmp_path: Path, run_dir: Path) -> None:
    for name in ("eval.json", "metrics.jsonl", "config.json"):
        (tmp_path / name).write_text((run_dir / name).read_text())
    stages.write_report(tmp_path)
    made = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert made == ["entropy.png", "kl.png", "training.png"]
    before = (tmp_path / "figures" / "kl.png").stat().st_mtime_ns
    stages.write_report(tmp_path)
    assert (tmp_path / "figures" / "kl.png").stat().st_mtime_ns == before


@pytest.mark.parametrize("damage", ["", "{}", "[]", "not json", '{"train": 1}'])
def test_report_refuses_a_damaged_config(tmp_path: Path, run_dir: Path, damage: str) -> None:
    for name in ("eval.json", "metrics.jsonl"):
        (tmp_path / name).write_text((run_dir / name).read_text())
    (tmp_path / "config.json").write_text(damage)
    with pytest.raises(RunError, match="config.json"):
        stages.write_report(tmp_path)
    assert not (tmp_path / "report.html").exists()


def test_report_refuses_an_empty_eval(tmp_path: Path, run_dir: Path) -> None:
    (tmp_path / "config.json").write_text((run_dir / "config.json").read_text())
    (tmp_path / "eval.json").write_text("{}")
    with pytest.raises(RunError, match="eval.json"):
        stages.write_report(tmp_path)
    with pytest.raises(RunError, match="config.json"):
        stages.write_report(tmp_path / "missing")


def test_training_time_accumulates_across_a_resume(tmp_path: Path) -> None:
    """A run stopped at step 20 and resumed to 40 reports the time of both parts, not the first."""
    run = RunDir(tmp_path / "r")
    cfg = TrainConfig(task="bijection", task_params={"V": 5, "L": 4}, arch="lstm", model={"d_model": 8, "n_layers": 1},
                      steps=40, log_every=10, eval_every=20, ckpt_every=20, eval_n=8, progress=False)
    stages.train_run(cfg, run, until=20)
    first = run.timings()["train_s"]
    stages.train_run(cfg, run, resume=True)
    assert run.timings()["train_s"] > first
    assert run.timings()["train_s"] == run.training_seconds()


@pytest.mark.slow
def test_the_main_job_report_opens_with_the_bayes_gap_then_the_geometry(tmp_path: Path) -> None:
    """``windtunnel run`` analyses its model: the report shows the metrics first, then what each
    diagnostic says about its claim (keys against their null, focusing, the frame head, the manifold)."""
    import json

    from windtunnel.cli import main

    out = tmp_path / "main"
    assert main(["run", "--steps", "6", "--n", "32", "--out", str(out), "--no-progress"]) == 0
    doc = json.loads((out / "geometry.json").read_text())
    claims = {r["claim"] for r in doc["interpretation"]}
    assert {"B1", "B3", "B6", "B7"} <= claims
    html = (out / "report.html").read_text()
    i, j = html.index("Metrics vs the exact posterior"), html.index("What the geometry says")
    assert i < j < html.index("<h2>Geometry</h2>")
    for needle in ("key_orthogonality.layer0_mean_abs_cos", "head_ablation.frame_head_fold",
                   "attention_focusing.entropy_by_layer[-1]", "min(untrained, Gaussian E|cos|)"):
        assert needle in html[j:], needle
    summary = (out / "summary.md").read_text()
    assert "## What the geometry says" in summary
    # `--steps 6` is not the grid's main recipe: the report says so above every verdict
    off = next(line for line in summary.splitlines() if line.startswith("**Off-recipe:**"))
    assert off.startswith("**Off-recipe:** this run's recipe is not the grid's main recipe (quick preset): ")
    assert "steps" in off and summary.index(off) < summary.index("## What the geometry says")
    assert main(["run", "--steps", "6", "--n", "32", "--out", str(tmp_path / "bare"), "--no-progress",
                 "--no-analyze"]) == 0
    assert not (tmp_path / "bare" / "geometry.json").exists()


@pytest.mark.slow
def test_results_record_their_checkpoint_and_the_report_flags_stale_ones(tmp_path: Path) -> None:
    """eval.json and geometry.json carry the checkpoint step and a config hash; after more training the
    report says which result is from an older checkpoint."""
    import json

    from windtunnel.cli import main

    out = tmp_path / "r"
    base = ["run", "bijection", "--V", "4", "--L", "4", "--n", "16", "--out", str(out), "--no-progress"]
    assert main(base + ["--steps", "4"]) == 0
    ev = json.loads((out / "eval.json").read_text())
    geo = json.loads((out / "geometry.json").read_text())
    assert ev["provenance"]["step"] == geo["meta"]["step"] == 4 and ev["provenance"]["n"] == 16
    assert ev["provenance"]["config_sha256"] == geo["meta"]["config_sha256"]
    assert "Stale" not in (out / "report.html").read_text()
    assert main(["train", "--resume", str(out), "--steps", "8", "--no-progress"]) == 0
    assert main(["report", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "eval.json is from checkpoint step 4, the newest is 8" in html
    assert "geometry.json is from checkpoint step 4" in html


@pytest.mark.slow
def test_compare_lines_up_the_scored_positions_of_runs_of_different_layouts(tmp_path: Path) -> None:
    """``curves`` drops the unscored padding (the HMM header) and numbers the scored positions 1..n;
    ``windtunnel compare`` prints the runs side by side and writes the overlay."""
    import json

    from windtunnel import tasks
    from windtunnel.cli import main
    from windtunnel.orchestration.compare import curves

    a, b = tmp_path / "hmm", tmp_path / "bij"
    assert main(["run", "hmm", "--K", "6", "--steps", "3", "--n", "16", "--out", str(a), "--no-progress",
                 "--no-analyze"]) == 0
    assert main(["run", "bijection", "--V", "5", "--L", "5", "--steps", "3", "--n", "16", "--out", str(b),
                 "--no-progress", "--no-analyze"]) == 0
    x, y = curves(a, "kl")
    task = tasks.make("hmm", K=6)
    assert x == list(range(1, 7)) and len(y) == int(task.sample(1, 0).mask.sum())
    raw = json.loads((a / "eval.json").read_text())["curves"]["kl"]
    assert y == [v for v in raw if v is not None] and raw[0] is None  # the header was padding
    assert curves(b, "entropy_model")[0] == list(range(1, 6))
    out = tmp_path / "cmp.png"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", str(a), "--length", "99", "--out", str(out)]) == 2


def test_a_pooled_run_reports_both_priors(tmp_path: Path) -> None:
    """Train on a pool of 3 permutations, evaluate, report: eval.json holds the two-prior block and the
    report shows it."""
    run = RunDir(tmp_path / "pool")
    cfg = TrainConfig(task="bijection", task_params={"V": 5, "L": 4, "pool": 3}, arch="transformer",
                      model={"d_model": 16, "n_layers": 1, "n_heads": 2}, steps=10, eval_every=10,
                      ckpt_every=10, eval_n=16, progress=False)
    stages.train_run(cfg, run)
    stages.evaluate_run(run, n=50)
    assert set(run.read_eval()["priors"]) >= {"fresh", "in_pool_vs_true_prior"}
    stages.write_report(run)
    assert "Memorisation vs inference" in run.report_path.read_text()
    assert "## Memorisation vs inference" in run.summary_path.read_text()


def test_a_run_of_the_grids_recipe_is_not_off_recipe() -> None:
    """Every committed cell is one of the grid's recipes (any seed, device or logging); changing what it trains is
    named, against the nearest recipe for its task."""
    import json

    from windtunnel.run import grid

    results = Path(__file__).resolve().parents[1] / "results"
    configs = sorted(results.glob("*/cells/*/config.json"))
    assert len(configs) > 300
    for path in configs:
        assert grid.off_recipe(json.loads(path.read_text())["train"]) is None, path
    train = json.loads((results / "quick" / "cells" / "main-transformer-s1" / "config.json").read_text())["train"]
    assert grid.off_recipe({**train, "seed": 7, "device": "cuda:3", "eval_n": 64}) is None
    assert grid.off_recipe({**train, "lr": train["lr"] / 2}) == ("main", "quick", ["lr"])
    assert grid.off_recipe({**train, "task_params": {**train["task_params"], "V": 12}})[2] == ["task_params"]
