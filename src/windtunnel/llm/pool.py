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

import functools
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


def documentation_texts(subpackages: bool = False) -> list[str]:
    """The documentation Python ships, one text per document, in a fixed order: the reference manual's
    help topics (``pydoc_data.topics``), then the docstrings of the standard library's modules and their
    classes and functions (read with ``ast``, nothing imported), deduplicated.  ``subpackages``: also the
    standard library's packages (``email``, ``json``, ...), without their test suites and IDLE."""
    return list(_documentation_texts(subpackages))


@functools.lru_cache(maxsize=2)
def _documentation_texts(subpackages: bool) -> tuple[str, ...]:
    import ast
    import sysconfig
    from pathlib import Path

    from pydoc_data.topics import topics

    texts = [topics[k] for k in sorted(topics)]
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(root.rglob("*.py")) if subpackages else sorted(root.glob("*.py"))
    for path in paths:
        parts = path.relative_to(root).parts
        if parts[0] in ("test", "site-packages", "idlelib", "lib2to3") or "tests" in parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    texts.append(doc)
    return tuple(dict.fromkeys(texts))  # parsed once per process (seconds): the standard library does not change


def prose_sentences(texts: list[str]) -> list[str]:
    """The prose sentences of ``texts`` (see :func:`_sentences`), deduplicated, in order."""
    return list(dict.fromkeys(s for text in texts for s in _sentences(text)))


def documentation_sentences() -> list[str]:
    """Prose sentences of the documentation Python ships (:func:`documentation_texts` without the
    standard library's packages), deduplicated, in a fixed order."""
    return prose_sentences(documentation_texts())


def cut_prompts(sentences: list[str], n: int, seed: int = 0) -> list[str]:
    """Up to ``n`` distinct prompts: ``sentences`` drawn without replacement (seeded), each cut after a
    uniform number of its words between 4 and all but the last two, so the next token is whatever the
    text said next."""
    sentences = list(sentences)
    rng = random.Random(seed)
    rng.shuffle(sentences)
    out: dict[str, None] = {}
    for s in sentences:
        words = s.split()
        cut = rng.randint(4, len(words) - 2)
        out.setdefault(" ".join(words[:cut]).rstrip(",;:("))
        if len(out) == n:
            break
    return list(out)


def docs_pool(n: int = 1200, seed: int = 0) -> list[str]:
    """``n`` distinct prompts cut from the documentation's sentences (:func:`cut_prompts`)."""
    out = cut_prompts(documentation_sentences(), n, seed)
    if len(out) < n:
        raise ValueError(f"the documentation holds {len(out)} usable sentences, fewer than n={n}")
    return out
