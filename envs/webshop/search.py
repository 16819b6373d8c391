"""BM25 product search (``bm25s``), built once per catalog and process.

The original WebShop searches a Pyserini (Lucene) BM25 index and shows the top 50
hits. Here the index is ``bm25s`` over each product's search document (title,
attributes, category path and option values; see ``Catalog.documents``), with
English stopwords and a light plural folding (``shirts`` -> ``shirt``) standing in for
Lucene's stemmer. Hits with a zero score are dropped, as Lucene returns only
matching documents.

Indexes live in a process-wide cache keyed by the catalog's identity: envs, forks
and deep copies over the same catalog share one index, and a pickled
``SearchEngine`` is re-attached to (or rebuilt once in) the receiving process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from orchenv.envs.webshop.catalog import Catalog, _Cache
from orchenv.error import DependencyError

log = logging.getLogger(__name__)

#: results per search, as in the original (``SEARCH_RETURN_N``)
SEARCH_RETURN_N = 50


def fold_plural(word: str) -> str:
    """``shirts`` -> ``shirt``, ``dresses`` -> ``dress``; leaves ``glass``, ``status`` alone."""
    if len(word) > 4 and word.endswith("sses"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


class SearchEngine:
    """A BM25 index over one catalog's product documents."""

    def __init__(self, documents: Sequence[str], *, catalog: Catalog | None = None) -> None:
        try:
            import bm25s
            from bm25s.tokenization import Tokenizer
        except ImportError as exc:
            raise DependencyError("bm25s", "retrieval", "WebShop search") from exc
        start = time.perf_counter()
        self.catalog = catalog
        self.size = len(documents)
        self._tokenizer = Tokenizer(stopwords="en", stemmer=fold_plural)
        ids = self._tokenizer.tokenize(list(documents), show_progress=False, return_as="ids")
        self._empty_id = self._tokenizer.word_to_id.get("")
        self._retriever = bm25s.BM25()
        self._retriever.index(ids, show_progress=False)
        self.build_seconds = time.perf_counter() - start
        log.debug("WebShop BM25 index: %d documents in %.2fs", self.size, self.build_seconds)

    def __deepcopy__(self, memo: dict[int, Any]) -> SearchEngine:
        return self  # a read-only shared index

    def __reduce__(self) -> tuple[Any, ...]:
        if self.catalog is None:
            raise TypeError("only a catalog's SearchEngine (search_engine_for) can be pickled")
        return (search_engine_for, (self.catalog,))

    def query_ids(self, query: str) -> list[int]:
        ids = self._tokenizer.tokenize(
            [query], update_vocab=False, show_progress=False, return_as="ids"
        )[0]
        return sorted({i for i in ids if i != self._empty_id})

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of up to ``k`` matching products, best first."""
        ids = self.query_ids(query)
        if not ids or self.size == 0:
            return []
        k = max(1, min(int(k), self.size))
        docs, scores = self._retriever.retrieve([ids], k=k, show_progress=False, n_threads=0)
        keep = np.asarray(scores[0]) > 0
        return [int(i) for i in np.asarray(docs[0])[keep]]


_INDEXES = _Cache()


def search_engine_for(catalog: Catalog) -> SearchEngine:
    """The shared index of ``catalog`` (built on first use in this process)."""
    return _INDEXES.get_or_build(
        catalog.key, lambda: SearchEngine(catalog.documents(), catalog=catalog)
    )
