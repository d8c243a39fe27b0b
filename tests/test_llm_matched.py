"""The matched key/value-sharing experiment (``windtunnel llm matched``), on tiny settings: arms matched in
size and differing only in key/value heads, held-out text kept out of training, a killed run resumed to the
same weights, and the summary read back from the per-run files the experiment wrote."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from windtunnel.cli import main  # noqa: E402
from windtunnel.errors import InvalidValue  # noqa: E402
from windtunnel.llm import matched  # noqa: E402
from windtunnel.llm.pool import prose_sentences  # noqa: E402

TINY = matched.MatchedSetup(kv_heads=(2, 1), seeds=(0, 1), width=16, layers=2, heads=2, intermediate=24, vocab=300,
                            context=16, batch=4, steps=6, warmup=2, eval_every=3, eval_windows=4, checkpoint_every=3,
                            n_prompts=12, n_boot=50, max_documents=80)


def test_arms_have_matched_size_and_differ_only_in_key_value_heads() -> None:
    setup = matched.MatchedSetup()
    configs = matched.matched_configs(setup)
    counts = {k: matched.parameter_count(c) for k, c in configs.items()}
    per_unit = 3 * setup.width * setup.layers  # one unit of MLP width
    ref = counts[setup.kv_heads[0]]
    for k, c in configs.items():
        assert abs(counts[k] - ref) <= per_unit / 2
        diff = {n for n, v in c.to_dict().items() if configs[setup.kv_heads[0]].to_dict().get(n) != v}
        assert diff <= {"num_key_value_heads", "intermediate_size"}
        assert c.num_key_value_heads == k
    # MQA gives up 2·width·(heads − 1)·head_dim per layer in K/V: returned to its MLP
    assert configs[1].intermediate_size > configs[8].intermediate_size


@pytest.mark.slow
def test_held_out_documents_stay_out_of_training_and_the_prompts_come_from_them() -> None:
    train, held = matched.split_documents(TINY)
    assert len(train) + len(held) == TINY.max_documents and not set(train) & set(held)
    assert len(held) == len(range(0, TINY.max_documents, TINY.holdout_every))
    from windtunnel.llm.pool import cut_prompts

    sentences = prose_sentences(held)
    for p in cut_prompts(sentences, 20):
        assert any(s.startswith(p) for s in sentences)


def test_tokenizer_round_trips_text_and_separates_documents() -> None:
    texts = ["The quick brown fox.", "Return the value of x, or None."] * 20
    tok = matched.train_tokenizer(texts, 280)
    assert len(tok) <= 280
    for t in texts[:2]:
        assert tok.decode(tok(t, add_special_tokens=False)["input_ids"]) == t
    stream = matched.token_stream(tok, texts[:2])
    eos = tok.convert_tokens_to_ids(matched.EOS)
    assert (stream == eos).sum() == 2 and stream[-1] == eos


def test_batches_depend_only_on_seed_and_step() -> None:
    a = matched.batch_starts(TINY, 1000, seed=3, step=7)
    assert torch.equal(a, matched.batch_starts(TINY, 1000, seed=3, step=7))
    assert not torch.equal(a, matched.batch_starts(TINY, 1000, seed=3, step=8))
    assert int(a.max()) <= 1000 - TINY.context


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_uninterrupted_weights(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    corpus = matched.prepare(TINY, tmp_path / "runs")
    config = matched.matched_configs(TINY)[1]
    whole = matched.train_arm(TINY, corpus, config, 0, tmp_path / "whole", log=lambda *a: None)

    def die_at_the_end(line: str) -> None:
        if f"step {TINY.steps}/" in line:
            raise KeyboardInterrupt  # after the step-3 checkpoint, before the model is saved

    with pytest.raises(KeyboardInterrupt):
        matched.train_arm(TINY, corpus, config, 0, tmp_path / "killed", log=die_at_the_end)
    assert not (tmp_path / "killed" / "model").exists()
    lines: list[str] = []
    resumed = matched.train_arm(TINY, corpus, config, 0, tmp_path / "killed", log=lines.append)
    assert any("resumed at step 3" in l for l in lines)
    a = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["curve"] == whole["curve"]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("matched")
    summary = matched.run_matched(TINY, root / "runs", root / "out", log=lambda *a: None)
    return root, summary


@pytest.mark.slow
def test_summary_is_read_from_the_per_run_files(experiment: tuple[Path, dict]) -> None:
    root, summary = experiment
    out = root / "out"
    assert summary["complete"] and (out / "summary.md").is_file() and (out / "focusing.png").is_file()
    red = {(k, s): json.loads((out / f"kv{k}-s{s}.json").read_text())["signatures"]["focusing"]["reduction_first_to_last"]
           for k in TINY.kv_heads for s in TINY.seeds}
    for k in TINY.kv_heads:
        arm = summary["arms"][str(k)]
        assert arm["focusing_reduction"]["mean"] == pytest.approx(sum(red[(k, s)] for s in TINY.seeds) / 2)
        doc = json.loads((out / f"kv{k}-s0.json").read_text())
        assert doc["signatures"]["model"]["kv_heads"] == k  # measured on the saved model, as loaded back
        assert doc["training"]["parameters"] == arm["parameters"]
    d = summary["focusing_reduction_reference_minus_arm"]["1"]
    assert d["values"] == pytest.approx([red[(2, s)] - red[(1, s)] for s in TINY.seeds])
    assert summary["arms"]["2"]["kind"] == "MHA" and summary["arms"]["1"]["kind"] == "MQA"
    # a second call trains nothing and measures nothing: every run's file is there
    again = matched.run_matched(TINY, root / "runs", out, log=lambda *a: pytest.fail(f"worked again: {a}"))
    assert again["arms"] == summary["arms"]
    # re-measuring reads the trained models back and writes the same numbers (training is not redone)
    before = (out / "kv1-s0.json").stat().st_mtime_ns
    redone = matched.run_matched(TINY, root / "runs", out, log=lambda *a: None, remeasure=True)
    assert (out / "kv1-s0.json").stat().st_mtime_ns > before and redone["arms"] == summary["arms"]


def test_other_settings_are_refused_for_a_used_folder(experiment: tuple[Path, dict]) -> None:
    root, _ = experiment
    with pytest.raises(InvalidValue, match="other settings"):
        matched.prepare(replace(TINY, steps=7), root / "runs")
    with pytest.raises(InvalidValue, match="other settings"):
        matched.run_matched(replace(TINY, steps=7), root / "fresh-runs", root / "out")


@pytest.mark.parametrize("argv, words", [
    (["--kv", "3"], "divide"),
    (["--kv", "2", "2"], "distinct"),
    (["--heads", "5"], "does not divide the width"),
])
def test_matched_bad_input_is_one_line_and_status_2(argv: list[str], words: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["llm", "matched", *argv, "--runs", str(tmp_path / "r"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_matched_refuses_an_output_folder_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["llm", "matched", "--runs", str(blocker / "runs"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "invalid runs" in err and len(err.splitlines()) == 1
