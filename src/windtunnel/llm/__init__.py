"""Paper III (arXiv 2512.23752): the wind-tunnel signatures in trained language models.

* :mod:`.load` — a trained causal LM and its tokenizer, offline (folder, GGUF, or the local cache);
* :mod:`.signatures` — key orthogonality of ``W_K``, the final-token value manifold against
  next-token entropy, attention focusing layer by layer (grouped-query and sliding-window attention
  handled), with their nulls and bootstrap intervals;
* ``prompts/`` — the prompt sets (``mixed``, ``math``, ``code``; ``docs``: 1,200 real-text
  candidates for entropy-stratified sampling, built by :mod:`.pool`), read by :func:`prompt_set`.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ..errors import InvalidValue

PROMPT_SETS = ("mixed", "math", "code", "docs")


def prompt_set(name: str) -> list[str]:
    """A shipped prompt set by name, or a JSON list of strings / a text file (one prompt per line) by path."""
    if name in PROMPT_SETS:
        return json.loads(resources.files(__package__).joinpath("prompts", f"{name}.json").read_text())
    path = Path(name)
    if not path.is_file():
        raise InvalidValue(f"invalid prompts {name!r}: choose from {', '.join(PROMPT_SETS)} or give a file")
    text = path.read_text()
    try:
        prompts = json.loads(text) if path.suffix == ".json" else [l for l in text.splitlines() if l.strip()]
    except json.JSONDecodeError as exc:
        raise InvalidValue(f"invalid prompts {name!r}: {exc}") from None
    if not isinstance(prompts, list) or not all(isinstance(p, str) and p for p in prompts):
        raise InvalidValue(f"invalid prompts {name!r}: need a list of non-empty strings")
    return prompts
