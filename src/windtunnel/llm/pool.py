r"""A candidate pool of real-text prompts, for Paper III's entropy-stratified prompt sampling.

Paper III draws its prompts from a large pool of real text and keeps 15 from each quintile of
next-token entropy (``signatures.stratify``, ``--per-quintile 15``).  The pool here is built from
text that ships with Python itself and was not written for this purpose: the reference
documentation in ``pydoc_data.topics`` (the help text of ``help("if")`` and its siblings) and the
docstrings of the standard library's modules.  Each
candidate is the opening of one documentation sentence cut at a word boundary, so the next token
is whatever the documentation said next — sometimes forced ("the built-in variable"), often open.

The shipped set ``docs`` (``prompts/docs.json``) is ``docs_pool()`` as built on Python 3.11;
another Python's documentation gives another pool, so the file, not the builder, is the set.
"""

from __future__ import annotations

import random
import re

MIN_WORDS, MAX_WORDS = 8, 40
"""Sentences of this many words are used (shorter ones leave no room to cut; longer ones are lists)."""


def _sentences(text: str) -> list[str]:
    """The sentences of ``text`` that read as prose: ``MIN_WORDS``–``MAX_WORDS`` words, starting with a
    letter, without code or markup characters."""
    out = []
    for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", re.sub(r"\s+", " ", text)):
        if not MIN_WORDS <= len(s.split()) <= MAX_WORDS or not s[0].isalpha() or not s.endswith((".", "!", "?")):
            continue
        if re.search(r"[{}\[\]=<>*#`|_@\\^~$%+]|\.\.\.|::|>>>", s):
            continue
        out.append(s)
    return out


def documentation_sentences() -> list[str]:
    """Prose sentences of the documentation Python ships, deduplicated, in a fixed order: the
    reference manual's help topics (``pydoc_data.topics``), then the docstrings of the standard
    library's top-level modules and their classes and functions (read with ``ast``, nothing imported)."""
    import ast
    import sysconfig
    from pathlib import Path

    from pydoc_data.topics import topics

    texts = [topics[k] for k in sorted(topics)]
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    texts.append(doc)
    out, seen = [], set()
    for text in texts:
        for s in _sentences(text):
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


def docs_pool(n: int = 1200, seed: int = 0) -> list[str]:
    """``n`` distinct prompts: sentences drawn without replacement (seeded), each cut after a uniform
    number of its words between 4 and all but the last two."""
    sentences = documentation_sentences()
    rng = random.Random(seed)
    rng.shuffle(sentences)
    out: list[str] = []
    for s in sentences:
        words = s.split()
        cut = rng.randint(4, len(words) - 2)
        prompt = " ".join(words[:cut]).rstrip(",;:(")
        if prompt not in out:
            out.append(prompt)
        if len(out) == n:
            return out
    raise ValueError(f"the documentation holds {len(out)} usable sentences, fewer than n={n}")
