"""BM25 rankings with a fixed order among equal scores (``pytest_prefalign.bm25``): the same
pairs and retrieved examples on every CPU, whatever order NumPy's sorting kernels leave ties in."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_prefalign import bm25

DOCS = [
    "graph neural networks for parsing",
    "speech recognition with transformers",
    "graph neural networks for parsing",  # the same text again: the same score
    "parsing with graphs",
    *[f"unrelated text number {n} about tagging" for n in range(40)],  # all score 0
    "graph neural networks for parsing",
]


@pytest.fixture(scope="module")
def retriever():
    return bm25.index(DOCS)


def test_equal_scores_rank_in_index_order(retriever):
    order = bm25.ranking(retriever, "neural parsing with graph networks")
    scores = bm25.scores(retriever, "neural parsing with graph networks")
    assert sorted(order.tolist()) == list(range(len(DOCS)))
    assert np.all(np.diff(scores[order]) <= 0)  # best first
    assert order[:3].tolist() == [0, 2, 44]  # the three copies, in index order
    zero = [i for i in order.tolist() if scores[i] == 0]
    assert zero == sorted(zero) and len(zero) >= 40


def test_the_top_k_keeps_every_document_tied_at_the_cut(retriever):
    assert bm25.ranking(retriever, "neural networks", k=1).tolist() == [0, 2, 44]
    top = bm25.ranking(retriever, "neural networks", k=4)
    full = bm25.ranking(retriever, "neural networks")
    assert top.tolist() == full[: len(top)].tolist() and len(top) >= 4
    assert bm25.ranking(retriever, "speech", k=1).tolist() == [1]


def test_a_query_without_known_words_keeps_the_index_order(retriever):
    assert bm25.ranking(retriever, "zebra").tolist() == list(range(len(DOCS)))
    assert bm25.ranking(retriever, "the of and").tolist() == list(range(len(DOCS)))  # stop words


def test_scores_are_bm25s_own(retriever):
    import bm25s

    query = bm25s.tokenize(["graph parsing"], stopwords="en", show_progress=False)
    ids, values = retriever.retrieve(query, k=3, show_progress=False)
    ours = bm25.scores(retriever, "graph parsing")
    assert sorted(values[0].tolist(), reverse=True) == pytest.approx(
        sorted(ours, reverse=True)[:3], rel=1e-6
    )
    assert set(ids[0].tolist()) <= set(np.flatnonzero(ours >= np.sort(ours)[-3]).tolist())


@pytest.mark.parametrize("docs", [[], ["the of", "and", ""]], ids=["no documents", "stop words"])
def test_an_index_without_a_word_scores_every_document_zero(docs):
    # bm25s cannot index these (it raised "max() arg is an empty sequence"): every query ties
    index = bm25.index(docs)
    assert bm25.scores(index, "graph parsing").tolist() == [0.0] * len(docs)
    assert bm25.ranking(index, "graph parsing").tolist() == list(range(len(docs)))
    assert bm25.ranking(index, "graph parsing", k=1).tolist() == list(range(len(docs)))


def test_a_document_without_a_word_beside_others_scores_zero():
    index = bm25.index(["the", "graph parsing", "and of"])
    assert bm25.ranking(index, "parsing").tolist() == [1, 0, 2]


def test_order_ranks_given_scores_as_ranking_does(retriever):
    found = bm25.scores(retriever, "neural networks")
    assert (
        bm25.order(found, k=4).tolist() == bm25.ranking(retriever, "neural networks", k=4).tolist()
    )
    assert bm25.order(found).tolist() == bm25.ranking(retriever, "neural networks").tolist()
