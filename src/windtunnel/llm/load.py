"""Load a trained causal LM and its tokenizer, offline: a local folder (safetensors, or a GGUF file
inside it), a ``.gguf`` file, or a Hugging Face hub name already in the local cache.

Eager attention is requested so the attention weights exist for the focusing signature; weights are
float32.  Nothing is downloaded: a model that is not on this machine is one clear error line.

Prompts are encoded by :func:`encode`: the text's tokens, with the beginning-of-sequence token in
front exactly when the model was trained that way — what a GGUF file records in
``tokenizer.ggml.add_bos_token`` (Gemma: yes — without it its perplexity on plain English runs into
the hundreds; SmolLM2: no), or the tokenizer's own ``add_bos_token`` for other folders.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidValue

BOS_ATTR = "windtunnel_bos_id"
"""The tokenizer attribute :func:`load_model` sets: the BOS id to prepend, or ``None``."""


def _gguf_adds_bos(path: Path) -> bool | None:
    """The GGUF file's ``tokenizer.ggml.add_bos_token`` (``None`` when it does not say)."""
    from gguf import GGUFReader

    field = GGUFReader(path).fields.get("tokenizer.ggml.add_bos_token")
    return None if field is None or not field.data else bool(field.parts[field.data[0]][0])


def encode(tokenizer: Any, text: str) -> Any:
    """``input_ids [1, T]`` of ``text``: its tokens, after the BOS token where :func:`load_model` found
    the model expects one (tokenizers built elsewhere: no special tokens)."""
    import torch

    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    bos = getattr(tokenizer, BOS_ATTR, None)
    return torch.tensor([([bos] if bos is not None else []) + ids], dtype=torch.long)


def load_model(name: str) -> tuple[Any, Any, str]:
    """``(model, tokenizer, description)`` for a folder, a ``.gguf`` file or a cached hub name."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise InvalidValue("windtunnel llm needs the transformers package: pip install 'windtunnel[hf]'")
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # one model, loaded in seconds: a bar is noise in a log
    path = Path(name)
    kw: dict[str, Any] = {"attn_implementation": "eager", "dtype": torch.float32}
    if path.is_file() and path.suffix == ".gguf":
        folder, extra, what = path.parent, {"gguf_file": path.name}, f"GGUF file {path}"
    elif path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        has_weights = any(path.glob("*.safetensors")) or any(path.glob("*.bin"))
        if ggufs and not has_weights:
            folder, extra, what = path, {"gguf_file": ggufs[0].name}, f"GGUF file {ggufs[0]}"
        else:
            folder, extra, what = path, {}, f"folder {path}"
    else:
        folder, extra, what = name, {"local_files_only": True}, f"hub name {name!r} (local cache only)"
    try:
        with _quiet_gguf():
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **extra)
            try:
                model = transformers.AutoModelForCausalLM.from_pretrained(folder, **extra, **kw)
            except TypeError:  # transformers < 4.56 names it torch_dtype
                kw["torch_dtype"] = kw.pop("dtype")
                model = transformers.AutoModelForCausalLM.from_pretrained(folder, **extra, **kw)
    except (OSError, ValueError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise InvalidValue(f"model {name!r} is not available on this machine ({what}): {first}") from None
    model.eval()
    gguf_file = extra.get("gguf_file")
    adds = _gguf_adds_bos(Path(folder) / gguf_file) if gguf_file else getattr(tokenizer, "add_bos_token", None)
    setattr(tokenizer, BOS_ATTR, tokenizer.bos_token_id if adds and tokenizer.bos_token_id is not None else None)
    if getattr(tokenizer, BOS_ATTR) is not None:
        what += " (BOS prepended)"
    return model, tokenizer, what


@contextlib.contextmanager
def _quiet_gguf() -> Iterator[None]:
    """Silence the bar transformers draws while it de-quantises a GGUF file: it ignores
    ``disable_progress_bar`` and fills a log with carriage returns.  Restored on exit."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # a transformers without GGUF support draws no such bar
        yield
        return
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
