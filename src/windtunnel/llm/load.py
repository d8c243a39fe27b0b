"""Load a trained causal LM and its tokenizer, offline: a local folder (safetensors, or a GGUF file
inside it), a ``.gguf`` file, or a Hugging Face hub name already in the local cache.

Eager attention is requested so the attention weights exist for the focusing signature; weights are
float32.  Nothing is downloaded: a model that is not on this machine is one clear error line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InvalidValue


def load_model(name: str) -> tuple[Any, Any, str]:
    """``(model, tokenizer, description)`` for a folder, a ``.gguf`` file or a cached hub name."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise InvalidValue("windtunnel llm needs the transformers package: pip install 'windtunnel[hf]'")
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
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
    return model, tokenizer, what
