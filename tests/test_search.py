"""``orchenv.search.BM25Index``: the BM25 helper the env families' search tools share."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from orchenv.search import BM25Index

DOCS = [
    "The red shoes are on sale.",
    "Blue shirts and red socks.",
    "A guide to the history of shoes.",
    "Nothing relevant here.",
    "Blue shirts and red socks.",  # an exact copy of doc 1: always ties with it
]


def test_hits_are_the_positive_scores_best_first_ties_in_document_order():
    index = BM25Index(DOCS)
    hits = index.search("red socks", k=10)
    scores = index.scores("red socks")
    assert [i for i, _ in hits] == [1, 4, 0]  # 1 and 4 tie; 0 matches "red" only
    assert all(s > 0 for _, s in hits) and hits[0][1] == hits[1][1] > hits[2][1]
    assert [s for _, s in hits] == [float(scores[i]) for i, _ in hits]
    assert scores.shape == (len(DOCS),) and scores[3] == 0
    assert index.search("red socks", k=2) == hits[:2]
    assert index.search("shoes", k=1)[0][0] in (0, 2)


def test_stemmer_folds_word_forms_and_unique_terms_count_once():
    def fold(word: str) -> str:
        return word[:-1] if word.endswith("s") else word

    plain = BM25Index(DOCS)
    folded = BM25Index(DOCS, stemmer=fold)
    assert plain.search("shirt") == [] and [i for i, _ in folded.search("shirt")] == [1, 4]
    assert folded.search("shirt") == folded.search("shirts")
    once = BM25Index(DOCS, unique_terms=True)
    assert once.term_ids("red red red") == once.term_ids("red")
    assert np.array_equal(once.scores("red red"), once.scores("red"))
    assert plain.scores("red red")[0] == pytest.approx(2 * plain.scores("red")[0])


@pytest.mark.parametrize(
    "texts",
    [[], ["the of and", "a", ""], ["", ""]],
    ids=["empty corpus", "stopwords only", "empty documents"],
)
def test_corpora_without_indexable_words_give_no_hits(texts):
    index = BM25Index(texts)
    assert len(index) == len(texts)
    assert index.search("the anything") == []
    assert np.array_equal(index.scores("anything"), np.zeros(len(texts)))


@pytest.mark.parametrize(
    "query",
    ["", "   ", "the of a", "zzzz qqqq", None, 42, b"red", ["red"], "\ud800 red"],
)
def test_odd_queries_never_raise(query):
    index = BM25Index(DOCS)
    hits = index.search(query)
    assert isinstance(hits, list)
    if query == "\ud800 red":
        assert {i for i, _ in hits} == {0, 1, 4}
    elif not (isinstance(query, str) and "red" in query):
        assert hits == []


@pytest.mark.parametrize("k", [0, -3, "x", None, 2.7, 10**30])
def test_odd_k_never_raises(k):
    hits = BM25Index(DOCS).search("red", k=k)
    expected = {0: 0, -3: 0, "x": 0, None: 0, 2.7: 2}.get(k, 3)
    assert len(hits) == expected


@pytest.mark.timeout(60)  # a 10 MB query must not hang; its speed is benchmarks' business
def test_huge_queries_are_cut_and_querying_never_changes_the_index():
    index = BM25Index(DOCS, max_query_chars=50)
    before = index.scores("red shoes").copy()
    assert index.search("blah " * 2_000_000 + "red") == []  # "red" lies past the cut
    index.search("brand new words " * 100)
    assert np.array_equal(index.scores("red shoes"), before)
    assert copy.deepcopy(index) is index  # read-only: forks share it


def test_large_corpus_top_k_matches_a_full_stable_sort():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(30)]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(1, 6)))) for _ in range(3000)]
    index = BM25Index(docs)
    for query in ("w1 w2", "w3", "w4 w4 w5 w6"):
        scores = index.scores(query)
        positive = np.flatnonzero(scores > 0)
        expected = positive[np.argsort(-scores[positive], kind="stable")][:50].tolist()
        assert [i for i, _ in index.search(query, k=50)] == expected
