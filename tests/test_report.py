"""windtunnel.report: figures are drawn and report.html is self-contained."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from windtunnel import report, tasks
from windtunnel.evaluate import evaluate, predict

PNG = b"\x89PNG\r\n\x1a\n"


class TinyCausal(torch.nn.Module):
    def __init__(self, vocab: int, n_classes: int, d: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, d)
        self.head = torch.nn.Linear(d, n_classes)

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(torch.tanh(self.emb(tokens).cumsum(1) / torch.arange(1, tokens.shape[1] + 1)[:, None]))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    task = tasks.make("bijection", V=12, L=8)
    model = TinyCausal(task.vocab_size, task.n_classes)
    run = tmp_path_factory.mktemp("run")
    result = evaluate(model, task, n=200, n_boot=100, lengths=[10, 12])
    (run / "eval.json").write_text(json.dumps(result.to_dict(), allow_nan=False))
    (run / "config.json").write_text(json.dumps({"task": {"name": "bijection", **task.params()},
                                                 "model": {"arch": "tiny"}, "lr": 1e-3}))
    lines = [json.dumps({"step": s, "loss": 2.5 * 0.99**s, "bayes_gap": 0.6 * 0.98**s, "lr": 1e-3}) for s in range(0, 200, 5)]
    lines += [json.dumps({"step": 200, "eval": {"kl": 0.01}}), "garbage", json.dumps({"note": "no step"})]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "geometry.json").write_text(json.dumps({"keys": {"mean_abs_cos": 0.05, "random": 0.08},
                                                   "pc1_by_layer": [0.9, 0.8, 0.85]}))
    figs = run / "figures"
    ep = task.sample(100, 3)
    report.calibration(predict(model, ep), ep, figs / "calibration.png")
    report.entropy_curve(result, figs / "entropy.png")
    report.kl_curve(result, figs / "kl.png")
    report.training_curves(run / "metrics.jsonl", figs / "training.png")
    report.entropy_curve(result.to_dict(), figs / "entropy_L12.png", length=12)
    return run


def test_figures_exist(run_dir: Path) -> None:
    for name in ("calibration", "entropy", "kl", "training", "entropy_L12"):
        p = run_dir / "figures" / f"{name}.png"
        assert p.exists() and p.stat().st_size > 10_000, name
        assert p.read_bytes()[:8] == PNG


def test_report_is_self_contained(run_dir: Path) -> None:
    out = report.write_report(run_dir)
    assert out == run_dir / "report.html"
    text = out.read_text()
    assert text.count("data:image/png;base64,") == 5
    srcs = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)""", text)
    assert srcs and all(s.startswith("data:") for s in srcs)
    assert "<script" not in text and "<link" not in text and "@import" not in text
    for needle in ("Bayes oracle", "entropy_mae_curve", "infeasible_mass", "beyond", "mean_abs_cos",
                   "torch", "numpy", "windtunnel", "forward_s", "&quot;lr&quot;"):
        assert needle in text, needle
    md = (run_dir / "summary.md").read_text()
    assert "| model |" in md and "figures/kl.png" in md
    # figures in the standard order
    order = [text.index(f"alt='{n}'") for n in ("training", "entropy", "kl", "calibration")]
    assert order == sorted(order)


def test_report_draws_missing_figures_and_keeps_existing(tmp_path: Path, run_dir: Path) -> None:
    for name in ("eval.json", "metrics.jsonl"):
        (tmp_path / name).write_text((run_dir / name).read_text())
    report.write_report(tmp_path)
    made = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert made == ["entropy.png", "kl.png", "training.png"]
    before = (tmp_path / "figures" / "kl.png").stat().st_mtime_ns
    report.write_report(tmp_path)
    assert (tmp_path / "figures" / "kl.png").stat().st_mtime_ns == before


def test_report_on_a_bare_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    text = report.write_report(tmp_path).read_text()
    assert "Versions" in text
    with pytest.raises(ValueError, match="run_dir"):
        report.write_report(tmp_path / "missing")
