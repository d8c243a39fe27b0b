"""``windtunnel llm``: Paper III on a trained language model — its signatures (``signatures``), the two-label
in-context task and the entropy-axis cut (``sula``), one PCA basis across models (``global``), and LMs trained
here that differ only in key/value heads (``matched``).  Each command is a call into :mod:`windtunnel.llm`;
the lines that print its numbers are beside it."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from .args import Parser, UsageError, positive_int
from .outputs import keep_result, new_json_file, out_path, writable_file, writable_folder, write_json


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``llm`` and its actions ``signatures``, ``sula``, ``global`` and ``matched``."""
    lm = sub.add_parser("llm", help="Paper III: the signatures in a trained language model (needs the [hf] extra)")
    lm_sub = lm.add_subparsers(dest="action", parser_class=Parser, metavar="{signatures,sula,global,matched}",
                               help="signatures: keys, value manifold, focusing; sula: the two-label task and the "
                                    "cut; global: one PCA basis across two or more models on the same SULA prompts; "
                                    "matched: LMs trained here differing only in key/value heads")
    lm_sub.required = True
    one_model = "a local folder, a .gguf file, or a hub name already in the local cache"
    n_boot = dict(type=positive_int, default=1000, help="bootstrap resamples of every interval (default 1000)")
    per_k = dict(type=positive_int, default=50, help="prompts per example count k (default 50)")
    sg = lm_sub.add_parser("signatures", help="layer-0 key orthogonality, the value manifold, attention focusing")
    sg.add_argument("model", help=one_model)
    sg.add_argument("--prompts", default="mixed", help="mixed (default), math, code, docs (1,200 real-text candidates: "
                    "use with --per-quintile), or a file (JSON list / one per line)")
    sg.add_argument("--per-quintile", dest="per_quintile", type=positive_int,
                    help="that many prompts from each next-token-entropy quintile (default: all prompts)")
    sg.add_argument("--n-boot", dest="n_boot", **n_boot)
    sg.add_argument("--out", help="JSON file (default results/llm/MODEL-PROMPTS.json)")
    sg.add_argument("--force", action="store_true", help="replace an existing output file")
    sg.set_defaults(func=cmd_llm_signatures)
    su = lm_sub.add_parser("sula", help="the two-label in-context task, its controls and the entropy-axis cut")
    su.add_argument("model", help=one_model)
    su.add_argument("--per-k", dest="per_k", **per_k)
    which = su.add_mutually_exclusive_group()
    which.add_argument("--layers", type=int, nargs="+", help="this model's layers of the entropy-axis cut (default: "
                       "Paper III's two Bayesian layers 12 and 23, at the same relative depth of this model)")
    which.add_argument("--paper-layers", dest="paper_layers", type=int, nargs="+",
                       help="Paper III's layer numbers (of its 24-layer Pythia-410M, 0-23), each cut at the layer of "
                            "the same relative depth of this model: l -> round(l*(L-1)/23); e.g. 8 12 16 20 23")
    su.add_argument("--n-boot", dest="n_boot", **n_boot)
    su.add_argument("--cut-only", dest="cut_only", action="store_true",
                    help="score the normal prompts and the cut at the layers together only (the paper's multi-layer "
                         "cut): no controls, one-layer cuts or geometry")
    su.add_argument("--out", help="JSON file (default results/llm/MODEL-sula.json)")
    su.add_argument("--force", action="store_true", help="replace an existing output file")
    su.set_defaults(func=cmd_llm_sula)
    gl = lm_sub.add_parser("global", help="one PCA basis across two or more models on the same SULA prompts")
    gl.add_argument("model", nargs="+", help=one_model + " (two or more)")
    gl.add_argument("--per-k", dest="per_k", **per_k)
    gl.add_argument("--n-boot", dest="n_boot", **n_boot)
    gl.add_argument("--out", help="JSON file (default results/llm/global-MODEL-MODEL.json)")
    gl.add_argument("--force", action="store_true", help="replace an existing output file")
    gl.set_defaults(func=cmd_llm_global)
    mt = lm_sub.add_parser("matched", help="LMs trained here on Python's documentation, matched in size, differing only "
                           "in key/value heads (MHA / GQA / MQA): focusing, keys and the value manifold per arm, seeds")
    mt.add_argument("--kv", type=positive_int, nargs="+", default=[8, 2, 1],
                    help="each arm's key/value heads, the first the reference (default 8 2 1 of 8 query heads)")
    mt.add_argument("--seeds", type=positive_int, default=3, help="seeds per arm (default 3)")
    mt.add_argument("--steps", type=positive_int, help="training steps per model (default 1500)")
    mt.add_argument("--width", type=positive_int, help="model width (default 128)")
    mt.add_argument("--layers", type=positive_int, help="layers (default 4)")
    mt.add_argument("--heads", type=positive_int, help="query heads (default 8)")
    mt.add_argument("--workers", type=positive_int, default=1, help="models trained at once (default 1)")
    mt.add_argument("--runs", help="the training folder, resumed if killed (default runs/llm-matched)")
    mt.add_argument("--out", help="the results folder (default results/llm/matched)")
    mt.add_argument("--force", action="store_true", help="re-measure a finished experiment")
    mt.set_defaults(func=cmd_llm_matched)


# --- signatures -----------------------------------------------------------------------------


def cmd_llm_signatures(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm signatures MODEL``: Paper III's static and dynamic signatures of a trained LM."""
    from ..llm import prompt_set
    from ..llm.load import load_model
    from ..llm.signatures import signatures

    prompts = prompt_set(args.prompts)
    if len(prompts) < 3:
        raise UsageError(f"invalid prompts: need at least 3, got {len(prompts)}")
    out = out_path(args.out) or Path("results/llm") / f"{Path(args.model).stem or 'model'}-{Path(args.prompts).stem}.json"
    new_json_file(out, args.force)
    model, tokenizer, what = load_model(args.model)
    result = signatures(model, tokenizer, prompts, n_boot=args.n_boot, per_quintile=args.per_quintile)
    result["source"] = {"model": args.model, "loaded_from": what, "prompts": args.prompts, "n_prompts": len(prompts)}
    write_json(out, result)
    print_signatures(result, len(prompts), args.prompts)
    print(f"wrote {out}")
    return 0


def print_signatures(result: dict[str, Any], n_prompts: int, prompts: str) -> None:
    """The model, then one line per signature: key orthogonality, the value manifold, attention focusing."""
    m, k, v, f = result["model"], result["key_orthogonality"], result["value_manifold"], result["focusing"]
    print(f"{m['class']}: {m['layers']} layers, {m['heads']} heads ({m['kv_heads']} key/value heads), d_model {m['d_model']}"
          f"; {n_prompts} prompts ({prompts})")
    print(f"key orthogonality, mean |cos| of W_K columns: layers {min(k['by_layer']):.3f}–{max(k['by_layer']):.3f} "
          f"(random init {sum(k['random_init_by_layer']) / len(k['random_init_by_layer']):.3f}, Gaussian "
          f"{k['gaussian_baseline']:.3f}); below 0.20 in {k['share_of_layers_below_0.20']:.0%} of layers")
    ci = v["rho_ci"]
    print(f"value manifold (last layer, final token): PC1 {v['pc1_share']:.1%}, PC1+PC2 {v['pc1_pc2_share']:.1%}, "
          f"participation ratio {v['participation_ratio']:.1f}; Spearman(PC1, next-token entropy) "
          f"{v['rho_pc1_entropy']:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]")
    rc = f["reduction_ci"]
    print(f"attention focusing at the final token: entropy {f['entropy_by_layer'][0]:.2f} → {f['entropy_by_layer'][-1]:.2f} bits, "
          f"reduction {f['reduction_first_to_last']:.0%} [{rc[0]:.0%}, {rc[1]:.0%}]")


# --- sula -----------------------------------------------------------------------------------


def cmd_llm_sula(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm sula MODEL``: the two-label in-context task, its controls and the entropy-axis cut."""
    from ..llm.load import load_model
    from ..llm.sula import SulaSetup, run_sula

    out = out_path(args.out) or Path("results/llm") / f"{Path(args.model).stem or 'model'}-sula.json"
    new_json_file(out, args.force)
    model, tokenizer, what = load_model(args.model)
    result = run_sula(model, tokenizer, SulaSetup(per_k=args.per_k, n_boot=args.n_boot), args.layers, args.cut_only,
                      args.paper_layers)
    result["source"] = {"model": args.model, "loaded_from": what,
                        "arguments": {"per_k": args.per_k, "n_boot": args.n_boot, "layers": args.layers,
                                      "paper_layers": args.paper_layers, "cut_only": args.cut_only}}
    write_json(out, result)
    print_sula(result, args.per_k)
    print(f"wrote {out}")
    return 0


def print_sula(result: dict[str, Any], per_k: int) -> None:
    """One line per condition (entropy error and KL with their intervals), then the cuts where they apply."""
    print(f"SULA, labels {' / '.join(result['labels'])}, {per_k} prompts per k:")
    for name, c in result["conditions"].items():
        mci, kci = c["entropy_mae_ci"], c["kl_ci"]
        print(f"  {name:12s} entropy MAE {c['entropy_mae']:.3f} [{mci[0]:.3f}, {mci[1]:.3f}] bits, "
              f"KL {c['kl']:.3f} [{kci[0]:.3f}, {kci[1]:.3f}] bits")
    if result["cut"].get("applicable"):
        for name in ("entropy_axis", "random_axis"):
            b = result["cut"][name]["behaviour"]
            print(f"  cut {name:12s} at layers {result['cut']['layers']}: entropy MAE {b['entropy_mae']:.3f}, KL {b['kl']:.3f}")


# --- global ---------------------------------------------------------------------------------


def cmd_llm_global(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm global MODEL MODEL …``: one PCA basis across models on the same SULA prompts."""
    from ..llm.cross_model import cross_model
    from ..llm.load import load_model
    from ..llm.sula import SulaSetup

    if len(args.model) < 2:
        raise UsageError(f"invalid model: llm global compares at least 2 models, got {len(args.model)}")
    # each model is named by its file name, dots and spaces made dashes (the name is a key in the JSON)
    stems = [re.sub(r"[^\w-]+", "-", Path(m).stem) or "model" for m in args.model]
    if len(set(stems)) != len(stems):
        raise UsageError(f"invalid model: the models need distinct file names, got {', '.join(stems)}")
    out = out_path(args.out) or Path("results/llm") / f"global-{'-'.join(stems)}.json"
    if not out.is_dir():
        keep_result(out, args.force)
    writable_file(out)
    loaded = {stem: load_model(m)[:2] for stem, m in zip(stems, args.model)}
    result = cross_model(loaded, SulaSetup(per_k=args.per_k, n_boot=args.n_boot))
    result["source"] = {stem: m for stem, m in zip(stems, args.model)}
    write_json(out, result)
    print_global(result, stems)
    print(f"wrote {out}")
    return 0


def print_global(result: dict[str, Any], stems: list[str]) -> None:
    """The shared basis against its misaligned null, then each model's block share, own PC1 and entropy error."""
    r, null = result["rho_global_pc1_bayes_entropy"], result["misaligned_null"]
    print(f"global PCA over {result['prompts']} SULA prompts (labels {' / '.join(result['labels'])}), "
          f"models {', '.join(stems)}:")
    print(f"  PC1 {result['global_pc1_share']:.1%} of the variance (misaligned null {null['global_pc1_share_mean']:.1%}); "
          f"|ρ(PC1, H_Bayes)| {r['rho']:.2f} [{r['rho_ci'][0]:.2f}, {r['rho_ci'][1]:.2f}] (null {null['rho_mean']:.2f})")
    for m in stems:
        o = result["own_pc1"][m]
        print(f"  {m}: PC1 block share {result['block_share'][m]:.2f}; own PC1 {o['share']:.1%}, |ρ| {o['rho']:.2f}; "
              f"entropy MAE {result['entropy_mae'][m]:.3f} bits")


# --- matched --------------------------------------------------------------------------------


def cmd_llm_matched(args: argparse.Namespace, extra: list[str]) -> int:
    """``llm matched``: LMs trained here on the same text, differing only in key/value heads; their signatures."""
    from ..llm.matched import SUMMARY, MatchedSetup, run_matched

    out = Path(out_path(args.out) or "results/llm/matched")
    runs = Path(out_path(args.runs) or "runs/llm-matched")
    for path, what in ((out, "out"), (runs, "runs")):
        if path.exists() and not path.is_dir():
            raise UsageError(f"invalid {what}: {path} is a file; give a folder")
    kw = {k: getattr(args, k) for k in ("steps", "width", "layers", "heads") if getattr(args, k) is not None}
    if args.steps is not None:  # the warm-up is a tenth of a short run
        kw["warmup"] = min(MatchedSetup.warmup, args.steps // 10)
    setup = MatchedSetup(kv_heads=tuple(args.kv), seeds=tuple(range(args.seeds)), **kw)
    for path, what in ((out, "out"), (runs, "runs")):  # hours of training must not end on an unwritable folder
        writable_folder(path, what)
    summary_path = out / SUMMARY
    if summary_path.is_file() and json.loads(summary_path.read_text()).get("complete"):
        keep_result(summary_path, args.force)
    run_matched(setup, runs, out, workers=args.workers, remeasure=args.force)
    print((out / "summary.md").read_text())
    print(f"wrote {out / SUMMARY}")
    return 0
