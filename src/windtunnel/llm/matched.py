r"""Paper III's routing contrast as an experiment: language models trained here on the same real text,
matched in size, differing only in how many key/value heads their query heads share.

Paper III (arXiv 2512.23752, Table 2, §6.3) finds that multi-head attention focuses strongly from the first
to the last layer (−82% / −86% attention entropy) and grouped-query attention weakly (−31%) — but it
compares different production models, which differ in data, size, depth and training as well as in key/value
sharing.  Here every arm is a Llama-layout causal LM trained from the same token stream in the same order, at
the same width, depth and number of query heads; only ``num_key_value_heads`` changes (all heads: MHA; a few:
GQA; one: MQA).  The key/value projections an arm gives up are returned to its MLP (``intermediate_size``
chosen so the parameter count matches the MHA arm's as closely as a whole unit of MLP width allows), so each
arm has the same size and, to that precision, the same compute per token.

**The text** is documentation that ships with Python and was not written for this purpose
(``pool.documentation_texts(subpackages=True)``: the reference manual's help topics and the standard library's
docstrings).  Every tenth document is held out: the held-out loss is read on it, and the prompts the
signatures are measured on are cut from its sentences (:func:`pool.cut_prompts`), so no prompt is text the
models trained on.  **The tokenizer** is a byte-level BPE with :data:`MatchedSetup.vocab` entries trained on
the training documents, shared by every arm.

**Training** (:func:`train_arm`): AdamW, linear warm-up then cosine decay to a tenth, gradient clipping at 1;
each step's batch is ``batch`` windows of ``context`` tokens at offsets drawn from a generator seeded by
``(seed, step)``, so a resumed run draws exactly the batches an uninterrupted one would; checkpoints
(weights, optimizer, step) every ``checkpoint_every`` steps.

**Measured** on each trained model, loaded back from its saved folder with eager attention as any model is
(``load.load_model``): ``signatures.signatures`` on the held-out prompts (key orthogonality against the same
configuration at initialisation, the final-token value manifold, attention focusing with its first-to-last
reduction) and the held-out loss in bits per token.  :func:`summarise` gathers each arm's seeds (mean and
Student's-t interval over seeds) and the paired difference of each arm's focusing from the MHA arm's.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import torch

from ..run.checkpoint import find_latest, load as load_checkpoint, save as save_checkpoint
from ..io import write_text_atomic
from ..errors import InvalidValue, is_int
from ..evaluation.stats import json_safe, mean_std, paired

SUMMARY = "summary.json"
"""The experiment's summary file in the output folder (with ``summary.md`` and ``focusing.png`` beside it)."""

EOS = "<|endoftext|>"
"""The one special token: it separates documents in the training stream."""


@dataclass(frozen=True)
class MatchedSetup:
    """One matched-routing experiment: the text, the tokenizer, the model family and the training budget.

    ``kv_heads``: the arms, each a number of key/value heads that divides ``heads`` (the first is the
    reference every other arm is matched to and compared with; ``heads`` itself is multi-head attention).
    """

    kv_heads: tuple[int, ...] = (8, 2, 1)
    seeds: tuple[int, ...] = (0, 1, 2)
    width: int = 128
    layers: int = 4
    heads: int = 8
    intermediate: int = 384
    vocab: int = 1024
    context: int = 128
    batch: int = 16
    steps: int = 1500
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    eval_every: int = 250
    eval_windows: int = 64
    checkpoint_every: int = 250
    n_prompts: int = 300
    n_boot: int = 1000
    holdout_every: int = 10
    max_documents: int | None = None
    """Use only the first that many documents (tests; ``None``: all of them)."""

    def __post_init__(self) -> None:
        counts = {"width": self.width, "layers": self.layers, "heads": self.heads, "intermediate": self.intermediate,
                  "vocab": self.vocab, "context": self.context, "batch": self.batch, "steps": self.steps,
                  "eval_every": self.eval_every, "eval_windows": self.eval_windows,
                  "checkpoint_every": self.checkpoint_every, "n_prompts": self.n_prompts, "n_boot": self.n_boot,
                  "holdout_every": self.holdout_every}
        for name, v in counts.items():
            if not is_int(v) or v < 1:
                raise InvalidValue(f"invalid {name}: must be a positive integer, got {v!r}")
        if self.holdout_every < 2:
            raise InvalidValue(f"invalid holdout_every: must be at least 2, got {self.holdout_every}")
        if self.width % self.heads:
            raise InvalidValue(f"invalid heads: {self.heads} does not divide the width {self.width}")
        if not self.kv_heads or len(set(self.kv_heads)) != len(self.kv_heads):
            raise InvalidValue(f"invalid kv heads: need distinct arms, got {list(self.kv_heads)}")
        for k in self.kv_heads:
            if not is_int(k) or k < 1 or self.heads % k:
                raise InvalidValue(f"invalid kv heads {k!r}: each arm's key/value heads must divide the {self.heads} query heads")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or not all(is_int(s) and s >= 0 for s in self.seeds):
            raise InvalidValue(f"invalid seeds: need distinct non-negative integers, got {list(self.seeds)}")
        if self.vocab < 257:
            raise InvalidValue(f"invalid vocab: a byte-level BPE needs more than the 256 bytes, got {self.vocab}")
        if not 0 <= self.warmup < self.steps:
            raise InvalidValue(f"invalid warmup: must lie in [0, steps), got {self.warmup}")
        if not (self.lr > 0 and math.isfinite(self.lr)) or not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise InvalidValue(f"invalid lr / weight_decay: {self.lr} / {self.weight_decay}")

    def key(self) -> dict[str, Any]:
        """Everything that fixes what one arm's run trains and measures (not which arms and seeds, nor the
        bootstrap): a runs or output folder made with another key holds another experiment."""
        d = asdict(self)
        for name in ("kv_heads", "seeds", "n_boot"):
            d.pop(name)
        return d


# --- the text and the tokenizer -----------------------------------------------------------------------


def split_documents(setup: MatchedSetup) -> tuple[list[str], list[str]]:
    """``(train, held_out)``: the documentation's documents, every ``holdout_every``-th held out."""
    from .pool import documentation_texts

    docs = documentation_texts(subpackages=True)
    if setup.max_documents is not None:
        docs = docs[: setup.max_documents]
    held = [d for i, d in enumerate(docs) if i % setup.holdout_every == 0]
    train = [d for i, d in enumerate(docs) if i % setup.holdout_every != 0]
    if len(held) < 2 or len(train) < 2:
        raise InvalidValue(f"invalid max_documents: {len(docs)} documents leave too few to train and hold out")
    return train, held


def train_tokenizer(texts: Sequence[str], vocab: int) -> Any:
    """A byte-level BPE of ``vocab`` entries (:data:`EOS` included) trained on ``texts``, as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=None)


def token_stream(tokenizer: Any, texts: Sequence[str]) -> torch.Tensor:
    """The documents' tokens, each followed by :data:`EOS`, as one int64 tensor."""
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ids: list[int] = []
    for enc in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


@dataclass
class Corpus:
    """The experiment's shared data: tokenizer, training and held-out token streams, held-out prompts."""

    tokenizer: Any
    train: torch.Tensor
    held_out: torch.Tensor
    prompts: list[str]
    sha256: str = field(default="")


def prepare(setup: MatchedSetup, root: Path) -> Corpus:
    """Build (once) and load the corpus under ``root/data``: the tokenizer folder, both token streams and
    the prompts.  Every arm and seed reads the same files, so they train on one stream."""
    from safetensors.torch import load_file, save_file
    from transformers import PreTrainedTokenizerFast

    from .pool import cut_prompts, prose_sentences

    data = Path(root) / "data"
    key_path = data / "setup.json"
    if key_path.is_file():
        have = json.loads(key_path.read_text())
        if have.get("setup") != setup.key():
            diff = sorted(k for k in setup.key() if have.get("setup", {}).get(k) != setup.key()[k])
            raise InvalidValue(f"invalid runs folder: {root} holds an experiment with other settings ({', '.join(diff)}); "
                               "give another --runs folder")
    else:
        train, held = split_documents(setup)
        tok = train_tokenizer(train, setup.vocab)
        data.mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(str(data / "tokenizer"))
        save_file({"train": token_stream(tok, train), "held_out": token_stream(tok, held)}, str(data / "tokens.safetensors"))
        prompts = cut_prompts(prose_sentences(held), setup.n_prompts, seed=0)
        write_text_atomic(data / "prompts.json", json.dumps(prompts, indent=0))
        write_text_atomic(key_path, json.dumps({"setup": setup.key(), "python": sys.version.split()[0],
                                                "documents": {"train": len(train), "held_out": len(held)}}, indent=1))
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(data / "tokenizer"))
    streams = load_file(str(data / "tokens.safetensors"))
    prompts = json.loads((data / "prompts.json").read_text())
    sha = hashlib.sha256(streams["train"].numpy().tobytes() + streams["held_out"].numpy().tobytes()).hexdigest()
    return Corpus(tokenizer, streams["train"], streams["held_out"], prompts, sha)


# --- the models ----------------------------------------------------------------------------------------


def arm_config(setup: MatchedSetup, kv_heads: int, intermediate: int | None = None) -> Any:
    """The Llama configuration of one arm (``intermediate``: its MLP width; default the setup's)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=setup.vocab, hidden_size=setup.width, num_hidden_layers=setup.layers,
                       num_attention_heads=setup.heads, num_key_value_heads=kv_heads,
                       intermediate_size=intermediate or setup.intermediate, max_position_embeddings=setup.context,
                       tie_word_embeddings=True, attention_dropout=0.0, bos_token_id=0, eos_token_id=0)


def parameter_count(config: Any) -> int:
    """Trainable parameters of a configuration (tied embeddings counted once)."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


def matched_configs(setup: MatchedSetup) -> dict[int, Any]:
    """Each arm's configuration, its MLP width chosen so its parameter count is nearest the first arm's.

    The count is linear in ``intermediate`` (``3 · width · layers`` per unit: gate, up and down
    projections), so the nearest width is read off two counts, not searched."""
    ref = parameter_count(arm_config(setup, setup.kv_heads[0]))
    out = {}
    for k in setup.kv_heads:
        base = parameter_count(arm_config(setup, k))
        per_unit = 3 * setup.width * setup.layers
        out[k] = arm_config(setup, k, max(1, setup.intermediate + round((ref - base) / per_unit)))
    return out


def _lr(setup: MatchedSetup, step: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to ``lr / 10`` at ``steps``."""
    if step < setup.warmup:
        return setup.lr * (step + 1) / setup.warmup
    frac = (step - setup.warmup) / max(1, setup.steps - setup.warmup)
    return setup.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _windows(stream: torch.Tensor, starts: torch.Tensor, context: int) -> torch.Tensor:
    """``[len(starts), context]`` token windows of ``stream`` starting at ``starts``."""
    return stream[starts[:, None] + torch.arange(context)]


def batch_starts(setup: MatchedSetup, n_tokens: int, seed: int, step: int) -> torch.Tensor:
    """The offsets of step ``step``'s training windows: a function of ``(seed, step)`` alone."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, n_tokens - setup.context + 1, (setup.batch,), generator=g)


@torch.no_grad()
def held_out_bits(model: torch.nn.Module, setup: MatchedSetup, held_out: torch.Tensor) -> float:
    """Mean next-token cross-entropy (bits per token) on ``eval_windows`` fixed, evenly spaced held-out windows."""
    starts = torch.linspace(0, len(held_out) - setup.context, setup.eval_windows).long()
    w = _windows(held_out, starts, setup.context)
    model.eval()
    logits = model(input_ids=w, use_cache=False).logits[:, :-1]
    model.train()
    return float(torch.nn.functional.cross_entropy(logits.double().flatten(0, 1), w[:, 1:].flatten()) / math.log(2))


def arm_name(kv_heads: int, seed: int) -> str:
    return f"kv{kv_heads}-s{seed}"


def train_arm(setup: MatchedSetup, corpus: Corpus, config: Any, seed: int, run: Path,
              log: Any = print) -> dict[str, Any]:
    """Train one arm's model for one seed in ``run`` (resuming from its latest checkpoint), save it to
    ``run/model`` (weights, configuration and the shared tokenizer) and return its training record."""
    import transformers
    from transformers import LlamaForCausalLM

    transformers.logging.disable_progress_bar()
    run = Path(run)
    record_path = run / "training.json"
    if record_path.is_file() and (run / "model").is_dir():
        return json.loads(record_path.read_text())
    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": setup.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=setup.lr, betas=(0.9, 0.95))
    ckpts = run / "checkpoints"
    start, curve, train_s = 0, [], 0.0
    latest = find_latest(ckpts, resumable=True)
    if latest is not None:
        state = load_checkpoint(latest, model, opt)
        start, curve, train_s = state["step"], state["curve"], state["train_s"]
        log(f"  {run.name}: resumed at step {start}")
    t0 = time.perf_counter()
    for step in range(start, setup.steps):
        for g in opt.param_groups:
            g["lr"] = _lr(setup, step)
        w = _windows(corpus.train, batch_starts(setup, len(corpus.train), seed, step), setup.context)
        loss = model(input_ids=w, labels=w, use_cache=False).loss  # the model shifts: position t predicts token t + 1
        if not torch.isfinite(loss):
            raise RuntimeError(f"{run.name}: the loss is not finite at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        if done % setup.eval_every == 0 or done == setup.steps:
            curve.append({"step": done, "train_bits": float(loss.detach()) / math.log(2),
                          "held_out_bits": held_out_bits(model, setup, corpus.held_out)})
            log(f"  {run.name}: step {done}/{setup.steps}, held-out {curve[-1]['held_out_bits']:.3f} bits/token")
        if done % setup.checkpoint_every == 0 and done < setup.steps:
            save_checkpoint(ckpts, done, model, opt,
                            {"curve": curve, "train_s": train_s + time.perf_counter() - t0})
    train_s += time.perf_counter() - t0
    model.save_pretrained(str(run / "model"))
    corpus.tokenizer.save_pretrained(str(run / "model"))
    record = {"kv_heads": config.num_key_value_heads, "seed": seed, "intermediate": config.intermediate_size,
              "parameters": sum(p.numel() for p in model.parameters()), "curve": curve,
              "held_out_bits": curve[-1]["held_out_bits"], "train_s": train_s, "tokens": setup.steps * setup.batch * setup.context}
    write_text_atomic(record_path, json.dumps(record, indent=1))
    return record


def measure_arm(setup: MatchedSetup, corpus: Corpus, run: Path, record: dict[str, Any]) -> dict[str, Any]:
    """The arm's signatures on the held-out prompts, read from its saved folder as any model is."""
    from .load import load_model
    from .signatures import signatures

    model, tokenizer, what = load_model(str(Path(run) / "model"))
    sig = signatures(model, tokenizer, corpus.prompts, n_boot=setup.n_boot)
    return json_safe({"training": record, "signatures": sig, "loaded_from": what, "n_prompts": len(corpus.prompts)})


# --- the experiment ------------------------------------------------------------------------------------


def _work_arm(job: dict[str, Any]) -> dict[str, Any]:
    """Train and measure one (arm, seed) in a worker process; returns its output document."""
    torch.set_num_threads(job["threads"])
    setup = MatchedSetup(**job["setup"])
    corpus = prepare(setup, Path(job["runs"]))
    config = matched_configs(setup)[job["kv_heads"]]
    run = Path(job["runs"]) / arm_name(job["kv_heads"], job["seed"])
    record = train_arm(setup, corpus, config, job["seed"], run, partial(print, flush=True))
    doc = measure_arm(setup, corpus, run, record)
    doc["setup"] = setup.key()
    write_text_atomic(Path(job["out"]) / f"{run.name}.json", json.dumps(doc, indent=1))
    return doc


def run_matched(setup: MatchedSetup, runs: Path, out: Path, workers: int = 1, log: Any = print,
                remeasure: bool = False) -> dict[str, Any]:
    """Train and measure every arm and seed not yet measured (each resumable; finished ones are read
    back), ``workers`` at a time, then write ``out/{arm}.json`` per run and the summary.  ``remeasure``:
    measure every trained model again, each file replaced only when its new one is written."""
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    runs, out = Path(runs), Path(out)
    corpus = prepare(setup, runs)  # once, before any worker reads it
    out.mkdir(parents=True, exist_ok=True)
    if not remeasure:
        _check_outputs(setup, out)
    threads = max(1, (os.cpu_count() or 1) // workers)
    jobs = [{"setup": asdict(setup), "runs": str(runs), "out": str(out), "kv_heads": k, "seed": seed,
             "threads": threads}
            for seed in setup.seeds for k in setup.kv_heads  # seed-major: a stopped experiment has whole seeds
            if remeasure or not (out / f"{arm_name(k, seed)}.json").is_file()]

    def report(doc: dict[str, Any]) -> None:
        t, f = doc["training"], doc["signatures"]["focusing"]
        log(f"  {arm_name(t['kv_heads'], t['seed'])}: held-out {t['held_out_bits']:.3f} bits/token, "
            f"focusing ↓{f['reduction_first_to_last']:.0%} ({t['train_s']:.0f} s training)")

    if workers == 1:
        from ..run.config import threads_kept

        for job in jobs:
            with threads_kept():  # the arm's thread count is its own, not this process's
                doc = _work_arm(job)
            report(doc)
    elif jobs:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            for fut in as_completed([pool.submit(_work_arm, job) for job in jobs]):
                report(fut.result())
    summary = summarise(setup, out, corpus)
    write_text_atomic(out / SUMMARY, json.dumps(summary, indent=1))
    write_text_atomic(out / "summary.md", summary_markdown(summary))
    plot(summary, out / "focusing.png")
    return summary


def _check_outputs(setup: MatchedSetup, out: Path) -> None:
    """Refuse an output folder whose arm files were measured under other settings."""
    for path in sorted(out.glob("kv*-s*.json")):
        have = json.loads(path.read_text()).get("setup")
        if have != setup.key():
            raise InvalidValue(f"invalid out: {path} was measured with other settings; give another --out or --force")


def summarise(setup: MatchedSetup, out: Path, corpus: Corpus | None = None) -> dict[str, Any]:
    """Per arm over seeds: focusing reduction, attention entropy by layer, layer-0 key |cos| (trained and at
    initialisation), value-manifold PC1+PC2 share (and its null), held-out bits/token, parameters; and the
    paired difference of each arm's focusing reduction from the first arm's on the same seeds."""
    docs = {(k, s): json.loads((out / f"{arm_name(k, s)}.json").read_text())
            for k in setup.kv_heads for s in setup.seeds if (out / f"{arm_name(k, s)}.json").is_file()}
    arms: dict[str, Any] = {}
    reductions: dict[int, dict[int, float]] = {}
    for k in setup.kv_heads:
        runs = [(s, docs[(k, s)]) for s in setup.seeds if (k, s) in docs]
        if not runs:
            continue
        sig = [d["signatures"] for _, d in runs]
        reductions[k] = {s: d["signatures"]["focusing"]["reduction_first_to_last"] for s, d in runs}
        layers = len(sig[0]["focusing"]["entropy_by_layer"])
        arms[str(k)] = {
            "kv_heads": k, "seeds": [s for s, _ in runs],
            "kind": "MHA" if k == setup.heads else ("MQA" if k == 1 else f"GQA {setup.heads // k}:1"),
            "parameters": [d["training"]["parameters"] for _, d in runs][0],
            "intermediate": runs[0][1]["training"]["intermediate"],
            "focusing_reduction": mean_std(list(reductions[k].values())),
            "attention_entropy_by_layer": [mean_std([g["focusing"]["entropy_by_layer"][l] for g in sig]) for l in range(layers)],
            "layer0_key_abs_cos": mean_std([g["key_orthogonality"]["by_layer"][0] for g in sig]),
            "layer0_key_abs_cos_init": mean_std([g["key_orthogonality"]["random_init_by_layer"][0] for g in sig]),
            "pc1_pc2_share": mean_std([g["value_manifold"]["pc1_pc2_share"] for g in sig]),
            "pc1_pc2_share_null": mean_std([g["value_manifold"]["pc1_pc2_share_null"] for g in sig]),
            "rho_pc1_entropy": mean_std([g["value_manifold"]["rho_pc1_entropy"] for g in sig]),
            "held_out_bits": mean_std([d["training"]["held_out_bits"] for _, d in runs]),
            "held_out_curve": {"step": [c["step"] for c in runs[0][1]["training"]["curve"]],
                               "bits": [mean_std([d["training"]["curve"][i]["held_out_bits"] for _, d in runs])["mean"]
                                        for i in range(len(runs[0][1]["training"]["curve"]))]},
            "train_s": mean_std([d["training"]["train_s"] for _, d in runs]),
        }
    ref = setup.kv_heads[0]
    versus = {}
    for k in setup.kv_heads[1:]:
        common = [s for s in setup.seeds if s in reductions.get(ref, {}) and s in reductions.get(k, {})]
        if common:
            versus[str(k)] = paired([reductions[ref][s] for s in common], [reductions[k][s] for s in common])
    return json_safe({"setup": asdict(setup), "reference_kv_heads": ref, "arms": arms,
                      "focusing_reduction_reference_minus_arm": versus,
                      "data": None if corpus is None else {
                          "source": "the documentation that ships with Python: pydoc_data.topics and the standard "
                                    "library's docstrings (pool.documentation_texts(subpackages=True))",
                          "python": sys.version.split()[0], "train_tokens": len(corpus.train),
                          "held_out_tokens": len(corpus.held_out), "prompts": len(corpus.prompts),
                          "sha256": corpus.sha256},
                      "complete": len(docs) == len(setup.kv_heads) * len(setup.seeds)})


def _ci(m: dict[str, Any], fmt: str = "{:.3f}") -> str:
    ci = m.get("ci95")
    return fmt.format(m["mean"]) + (f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]" if ci else "")


def summary_markdown(summary: dict[str, Any]) -> str:
    """The summary as a table a reader can check against the JSON beside it."""
    s = summary["setup"]
    lines = ["# Matched key/value sharing: focusing in language models trained here", "",
             f"Llama-layout LMs, {s['layers']} layers, width {s['width']}, {s['heads']} query heads, context "
             f"{s['context']}, {s['steps']} steps of {s['batch']} windows, seeds {s['seeds']}; only the number of "
             "key/value heads differs (the MLP width absorbs the difference in parameters). Written by "
             "`windtunnel llm matched`; every number is in `summary.json` beside this file. Intervals: 95% over seeds.",
             ""]
    if summary.get("data"):
        d = summary["data"]
        lines += [f"Text: {d['source']}; Python {d['python']}; {d['train_tokens']:,} training and "
                  f"{d['held_out_tokens']:,} held-out tokens; {d['prompts']} held-out prompts.", ""]
    lines += ["| arm | key/value heads | parameters | held-out bits/token | focusing (entropy reduction, first → last layer) "
              "| layer-0 key \\|cos\\| (init) | PC1+PC2 (null) |", "|---|---|---|---|---|---|---|"]
    for a in summary["arms"].values():
        lines.append(f"| {a['kind']} | {a['kv_heads']} | {a['parameters']:,} | {_ci(a['held_out_bits'])} | "
                     f"{_ci(a['focusing_reduction'], '{:.0%}')} | {_ci(a['layer0_key_abs_cos'])} "
                     f"({a['layer0_key_abs_cos_init']['mean']:.3f}) | {_ci(a['pc1_pc2_share'])} "
                     f"({a['pc1_pc2_share_null']['mean']:.3f}) |")
    if summary["focusing_reduction_reference_minus_arm"]:
        lines += ["", f"Paired by seed, the reference arm's ({summary['reference_kv_heads']} key/value heads) focusing "
                  "reduction minus each arm's (an interval that excludes 0 is a difference at the 95% level):", ""]
        for k, d in summary["focusing_reduction_reference_minus_arm"].items():
            lines.append(f"- {k} key/value heads: {_ci(d, '{:+.1%}')} ({d['n']} seeds)")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path) -> None:
    """Three panels, one colour per arm (mean over seeds, 95% intervals): attention entropy at the final token
    by layer (focusing); the value manifold's PC1+PC2 share beside its permutation null; held-out loss over
    training."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(13, 3.8))
    arms = list(summary["arms"].values())
    for i, a in enumerate(arms):
        colour = f"C{i}"
        ms = a["attention_entropy_by_layer"]
        x = list(range(len(ms)))
        ax.plot(x, [m["mean"] for m in ms], marker="o", color=colour,
                label=f"{a['kind']} ({a['kv_heads']} kv) ↓{a['focusing_reduction']['mean']:.0%}")
        if all(m.get("ci95") for m in ms):
            ax.fill_between(x, [m["ci95"][0] for m in ms], [m["ci95"][1] for m in ms], color=colour, alpha=0.2)
        share, null = a["pc1_pc2_share"], a["pc1_pc2_share_null"]
        err = None if not share.get("ci95") else [[share["mean"] - share["ci95"][0]], [share["ci95"][1] - share["mean"]]]
        bx.bar(i, share["mean"], yerr=err, color=colour, capsize=4)
        bx.plot([i - 0.4, i + 0.4], [null["mean"]] * 2, color="k", ls="--", lw=1, label="permutation null" if i == 0 else None)
        cx.plot(a["held_out_curve"]["step"], a["held_out_curve"]["bits"], marker=".", color=colour, label=a["kind"])
    ax.set_xlabel("layer")
    ax.set_ylabel("attention entropy at the final token (bits)")
    ax.set_title("Focusing", fontsize=9)
    ax.legend(fontsize=7)
    bx.set_xticks(range(len(arms)), [a["kind"] for a in arms])
    bx.set_ylabel("PC1+PC2 share of last-layer values")
    bx.set_title("Value manifold", fontsize=9)
    bx.legend(fontsize=7)
    cx.set_xlabel("step")
    cx.set_ylabel("held-out loss (bits/token)")
    cx.set_title("Training (held-out documents)", fontsize=9)
    cx.legend(fontsize=7)
    fig.suptitle("Matched language models: only the key/value heads differ", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
