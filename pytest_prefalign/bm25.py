"""BM25 rankings that are the same on every machine (no heavy import at load: suites import it).

``bm25s``'s ``retrieve`` selects and sorts its top k with NumPy's unstable ``argpartition`` and
``argsort``, whose order among equal scores depends on the CPU's instruction set (AVX-512 or
AVX2 sorting kernels). Equal scores are common: the same paper listed twice, or profile entries
sharing no word with the query (all zero). A suite's pairs and a prompt's retrieved examples
then changed from one machine to another. Here every ranking puts the better score first and,
among equal scores, the document indexed first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def _bm25s() -> Any:
    """The ``bm25s`` module, its logger at WARNING: it sets its own to DEBUG when imported, and
    its "Building index" lines would land in every test's captured log, around a failure."""
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def tokens(texts: Sequence[str]) -> list[list[str]]:
    """Each text's BM25 tokens: lower-cased words, English stop words left out."""
    bm25s = _bm25s()
    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


@dataclass(frozen=True)
class Wordless:
    """An index over ``size`` documents none of which has a word BM25 counts (none at all, or
    stop words only), which ``bm25s`` cannot build (it raises ``max() arg is an empty
    sequence``): every query scores every document 0."""

    size: int


def index(texts: Sequence[str]) -> Any:
    """A ``bm25s.BM25`` over ``texts``, in their order (a document is its position); a
    ``Wordless`` index if no text has a word."""
    bm25s = _bm25s()
    words = tokens(texts)
    if not any(words):
        return Wordless(len(words))
    retriever = bm25s.BM25()
    retriever.index(words, show_progress=False)
    return retriever


def scores(retriever: Any, text: str) -> np.ndarray:
    """The BM25 score of every indexed document for the query ``text`` (zeros when no word of
    the query is in the index)."""
    import numpy as np

    if isinstance(retriever, Wordless):
        return np.zeros(retriever.size)
    words = tokens([text])[0]
    known = retriever.get_tokens_ids(words)
    if not known:
        return np.zeros(int(retriever.scores["num_docs"]))
    return np.asarray(retriever.get_scores(known), dtype=np.float64)


def scores_each(retriever: Any, texts: Sequence[str], *, distinct: bool = False) -> np.ndarray:
    """``scores`` of each text as a query, ``(len(texts), documents)``, the texts tokenized in
    one call; ``distinct``: a word the query repeats counts once (a reward read from these
    scores then gains nothing from saying a word again)."""
    import numpy as np

    size = retriever.size if isinstance(retriever, Wordless) else int(retriever.scores["num_docs"])
    found = np.zeros((len(texts), size))
    if isinstance(retriever, Wordless):
        return found
    for row, words in enumerate(tokens(texts) if texts else []):
        known = retriever.get_tokens_ids(list(dict.fromkeys(words)) if distinct else words)
        if known:
            found[row] = retriever.get_scores(known)
    return found


def ranking(retriever: Any, text: str, k: int | None = None) -> np.ndarray:
    """Document positions, best score first, equal scores in index order. With ``k``, the
    documents scoring at least the k-th best score: k of them, or more when scores tie there
    (which ones make the cut does not depend on a sort's order among equals)."""
    return order(scores(retriever, text), k)


def order(found: np.ndarray, k: int | None = None) -> np.ndarray:
    """``ranking`` of documents whose scores are ``found``."""
    import numpy as np

    if k is not None and k < len(found):
        cut = np.partition(found, len(found) - k)[len(found) - k]
        top = np.flatnonzero(found >= cut)
        return top[np.argsort(-found[top], kind="stable")]
    return np.argsort(-found, kind="stable")
