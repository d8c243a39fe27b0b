"""The arithmetic the GPU and reproduction projections rest on (``benchmarks/paper_gpu.py``,
``benchmarks/reproduce_budget.py``), each on a case worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import paper_gpu  # noqa: E402
import reproduce_budget  # noqa: E402


def test_longest_first_makespan() -> None:
    # LPT on 2 machines: 3 | 3, then 2 → 5 | 3, 2 → 5 | 5, 2 → 7 | 5 (the optimum, 6, is 3+3 | 2+2+2)
    assert paper_gpu._lpt([2, 3, 2, 3, 2], 2) == 7
    assert paper_gpu._lpt([4.0], 8) == 4.0


def test_list_schedule_makespan_follows_the_given_order() -> None:
    # a long job first keeps one worker while the other takes the five short ones
    assert reproduce_budget.makespan([5, 1, 1, 1, 1, 1], 2) == 5
    # the long job last: the five short ones share out as 3 | 2, then it goes to the worker free first, 2 + 5
    assert reproduce_budget.makespan([1, 1, 1, 1, 1, 5], 2) == 7


def test_step_seconds_and_train_gap_read_the_logged_lines() -> None:
    metrics = [{"step": 25, "time": 1.0, "bayes_gap": 9.0}, {"step": 50, "eval": {"kl": 1.0}},
               {"step": 100, "time": 4.0, "bayes_gap": 1.0}, {"step": 600, "time": 14.0, "bayes_gap": 3.0},
               {"step": 1000, "time": 22.0, "bayes_gap": 5.0}]
    sec, timed = paper_gpu.step_seconds(metrics)
    assert (sec, timed) == (pytest.approx(21.0 / 975), 975)  # first to last logged training line
    assert paper_gpu.train_gap(metrics, 1000) == 4.0  # steps 600 and 1000 lie in (500, 1000]
    assert paper_gpu.train_gap(metrics, 100, window=50) == 1.0  # (50, 100]: step 100 alone
    assert paper_gpu.train_gap(metrics, 100, window=100) == 5.0  # (0, 100]: steps 25 and 100
    assert paper_gpu.train_gap(metrics, 2000) is None
    with pytest.raises(ValueError):
        paper_gpu.step_seconds(metrics[:2])
