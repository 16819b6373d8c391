"""``BM25Index``: the one BM25 helper every env's search tool builds on (``bm25s``).

Documents are lowercased, split into words of two or more letters or digits, English
stopwords are dropped and an optional ``stemmer`` (one word in, one word out) folds
word forms together; the index is ``bm25s``'s (Lucene's BM25 variant). A query goes
through the same steps, and words the corpus never uses are ignored.

``search`` returns the best documents with a positive score, best first, ties in
document order. It is safe on any input: an empty corpus, a corpus of stopwords only,
a query of unknown words, a non-string or a huge query (cut at ``max_query_chars``)
all give no hits instead of an error. Querying never changes the index, so one index
can be shared by any number of envs and forks.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orchenv.error import DependencyError

#: longer queries are cut: BM25 over a megabyte of text is noise, and slow
MAX_QUERY_CHARS = 20_000
_SPLIT = r"(?u)\b\w\w+\b"  # bm25s's default: words of two or more letters or digits


def quiet_library_logger(name: str) -> None:
    """bm25s sets its own logger to DEBUG on import, so every index build would print under
    any root handler (the CLI's included); keep it at WARNING unless the user chose a level
    for it after that import."""
    log = logging.getLogger(name)
    if log.level == logging.DEBUG:
        log.setLevel(logging.WARNING)


class BM25Index:
    """BM25 over ``texts`` (see the module docstring).

    Arguments:
        texts: the documents; results refer to them by position.
        stemmer: maps a lowercased word to its stem (e.g. plural folding), or ``None``.
        stopwords: ``"en"`` (bm25s's English list), a list of words, or ``None``.
        unique_terms: score each query word once however often it is repeated
            (default: every occurrence counts, as in Lucene).
        max_query_chars: longer queries are cut to this many characters.
    """

    def __init__(
        self,
        texts: Sequence[str],
        *,
        stemmer: Callable[[str], str] | None = None,
        stopwords: str | Sequence[str] | None = "en",
        unique_terms: bool = False,
        max_query_chars: int = MAX_QUERY_CHARS,
    ) -> None:
        try:
            import bm25s
            from bm25s.tokenization import Tokenizer
        except ImportError as exc:
            raise DependencyError("bm25s", "retrieval", "BM25 search") from exc
        quiet_library_logger("bm25s")
        self.size = len(texts)
        self.unique_terms = unique_terms
        self.max_query_chars = max_query_chars
        self._stemmer = stemmer
        tokenizer = Tokenizer(splitter=_SPLIT, stopwords=stopwords or [], stemmer=stemmer)
        self._split = re.compile(_SPLIT).findall
        self._stopwords = frozenset(tokenizer.stopwords)
        ids = tokenizer.tokenize([str(t) for t in texts], show_progress=False, return_as="ids")
        # bm25s gives a document without indexable words one "" token; here it has none
        empty = tokenizer.word_to_id.get("")
        docs = [[i for i in doc if i != empty] for doc in ids]
        self._word_ids = {w: i for w, i in tokenizer.word_to_id.items() if w}
        self._stem_ids = {s: i for s, i in tokenizer.stem_to_sid.items() if s}
        self._retriever: Any = None
        if any(docs):
            self._retriever = bm25s.BM25()
            self._retriever.index(docs, show_progress=False)

    def __len__(self) -> int:
        return self.size

    def __deepcopy__(self, memo: dict[int, Any]) -> BM25Index:
        return self  # read-only: env forks share it

    def term_ids(self, query: str) -> list[int]:
        """The index's ids of the query's words (unknown words and stopwords left out)."""
        if self._retriever is None or not isinstance(query, str):
            return []
        ids = []
        for word in self._split(query[: self.max_query_chars].lower()):
            if word in self._stopwords:
                continue
            found = self._word_ids.get(word)
            if found is None and self._stemmer is not None:
                found = self._stem_ids.get(self._stemmer(word))
            if found is not None:
                ids.append(found)
        return sorted(set(ids)) if self.unique_terms else ids

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every document for ``query`` (bm25s's float32; zeros if nothing
        matches)."""
        ids = self.term_ids(query)
        if not ids:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._retriever.get_scores_from_ids(ids))

    def search(self, query: str, k: int = 10) -> list[tuple[int, float]]:
        """Up to ``k`` ``(document index, score)`` with a positive score, best first, ties in
        document order; ``[]`` when nothing matches or ``k`` is not a positive number."""
        try:
            k = int(k)
        except (TypeError, ValueError, OverflowError):
            return []
        if k <= 0:
            return []
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:  # keep the k best and every tie of the k-th (cheap on big corpora)
            kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
            hits = hits[scores[hits] >= kth]
        order = hits[np.argsort(-scores[hits], kind="stable")][:k]
        return [(int(i), float(scores[i])) for i in order]
