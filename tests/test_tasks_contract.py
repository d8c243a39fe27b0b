"""The task contract (windtunnel.tasks.base), checked for every registered task, plus golden episodes.

Golden files pin a few sampled episodes per task so that a silent change of a generator (a
different random stream, a re-ordered token layout, a changed posterior) fails loudly.  After an
*intended* change, regenerate them with ``WINDTUNNEL_REGEN_GOLDEN=1 pytest tests/test_tasks_contract.py``
and say why in the commit.  A new task's golden file is written by its first run, which is skipped
saying so: commit the file, and later runs compare against it.
"""

import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from windtunnel import tasks
from windtunnel.tasks import IGNORE  # noqa: F401
from windtunnel.tasks.base import Episodes

from contracts import check_task_contract, tiny_task

GOLDEN = Path(__file__).parent / "golden"
BASE_TASKS = [name for name in tasks.names() if tasks.get(name).name == name]
"""Every registered task (a preset such as ``recall_paper`` is its task at other sizes, so its task's entry covers it)."""


@pytest.mark.parametrize("name", BASE_TASKS)
def test_the_small_instance_is_small(name: str) -> None:
    """``tiny`` is declared and small: at most 64 positions and 64 classes (docs/extending.md)."""
    task = tiny_task(name)
    assert task.seq_len <= 64 and task.n_classes <= 64, (name, task.seq_len, task.n_classes)


@pytest.mark.parametrize("name", BASE_TASKS)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**40), n=st.integers(1, 9))
def test_contract(name: str, seed: int, n: int) -> None:
    check_task_contract(tiny_task(name), seed, n)


@pytest.mark.parametrize("name", BASE_TASKS)
def test_seeds_differ(name: str) -> None:
    task = tiny_task(name)
    a, b = task.sample(16, 1), task.sample(16, 2)
    differ = not torch.equal(a.tokens, b.tokens) or (a.features is not None and not torch.equal(a.features, b.features))
    assert differ


@pytest.mark.parametrize("name", BASE_TASKS)
def test_make_rejects_unknown_parameter(name: str) -> None:
    with pytest.raises(ValueError, match="unknown parameter 'bogus'"):
        tasks.make(name, bogus=1)


@pytest.mark.parametrize("name", BASE_TASKS)
def test_golden_episodes(name: str) -> None:
    task = tiny_task(name)
    ep = task.sample(3, seed=2024)
    record = {
        "params": task.params(),
        "tokens": ep.tokens.tolist(),
        "targets": ep.targets.tolist(),
        "posterior": ep.posterior.tolist(),
        "features": None if ep.features is None else ep.features.tolist(),
    }
    path = GOLDEN / f"{name}.json"
    if os.environ.get("WINDTUNNEL_REGEN_GOLDEN") == "1":
        path.write_text(json.dumps(record))
    elif not path.exists():  # a new task: this run's episodes become its golden file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
        pytest.skip(f"no golden file for task {name!r}: wrote {path.relative_to(GOLDEN.parent.parent)} from this run; "
                    "commit it (later runs compare against it)")
    gold = json.loads(path.read_text())
    assert gold["params"] == record["params"]
    assert gold["tokens"] == record["tokens"]
    assert gold["targets"] == record["targets"]
    assert torch.allclose(torch.tensor(gold["posterior"], dtype=torch.float64), ep.posterior, rtol=0, atol=1e-12)
    if gold["features"] is not None:
        assert torch.equal(torch.tensor(gold["features"], dtype=torch.float32), ep.features)


@pytest.mark.parametrize("name", BASE_TASKS)
def test_the_posterior_is_computed_when_first_read_and_equals_the_eager_one(name: str) -> None:
    """A batch sampled with its posterior given lazily (``Task.lazy_posterior``, as the package's tasks give it; a
    tensor is the other choice docs/extending.md allows) carries it unread; slicing, concatenating and moving it
    keep it unread; read, each is exactly the task's posterior of the tokens as drawn — even after the caller edits
    the tokens in place."""
    task = tiny_task(name)
    ep, other = task.sample(6, 3), task.sample(4, 4)
    lazy = not ep.posterior_ready
    derived = [ep[1:4], ep[torch.tensor([5, 0])], Episodes.cat([ep, other]), ep.to("cpu")]
    assert all(d.posterior_ready is not lazy for d in derived)
    want = task.posterior(ep.tokens, ep.features)
    ep.tokens[:, -1] = 0  # an in-place edit after sampling changes nothing already drawn
    assert torch.equal(ep.posterior, want) and ep.posterior_ready and ep.posterior.dtype == torch.float64
    assert torch.equal(derived[0].posterior, want[1:4]) and torch.equal(derived[1].posterior, want[[5, 0]])
    assert torch.equal(derived[2].posterior, torch.cat([want, task.posterior(other.tokens, other.features)]))
    assert torch.equal(derived[3].posterior, want)
    eager = Episodes(tokens=ep.tokens, targets=ep.targets, posterior=want, mask=ep.mask)
    assert eager.posterior_ready and eager[0:2].posterior_ready  # a tensor given is a tensor kept
