"""BM25 product search (``bm25s``), built once per catalog and process.

The original WebShop searches a Pyserini (Lucene) BM25 index and shows the top 50
hits. Here the index is orchenv's ``BM25Index`` (``bm25s``) over each product's
search document (title, attributes, category path and option values; see
``Catalog.documents``), with English stopwords and a light plural folding
(``shirts`` -> ``shirt``) standing in for Lucene's stemmer. Hits with a zero score
are dropped, as Lucene returns only matching documents.

Indexes live in a process-wide cache keyed by the catalog's identity: envs, forks
and deep copies over the same catalog share one index, and a pickled
``SearchEngine`` is re-attached to (or rebuilt once in) the receiving process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from orchenv.envs.webshop.catalog import Catalog, _Cache
from orchenv.search import BM25Index

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
    """A BM25 index (``orchenv.search.BM25Index``) over one catalog's product documents.

    Query words count once however often they are repeated. The top ``k`` are
    chosen by bm25s's own top-k selection, as the env always has, so the order of
    products with equal scores (and which of them make the top ``k``) is the
    one documented results and tests were measured with.
    """

    def __init__(self, documents: Sequence[str], *, catalog: Catalog | None = None) -> None:
        start = time.perf_counter()
        self.catalog = catalog
        self.size = len(documents)
        self._index = BM25Index(documents, stemmer=fold_plural, unique_terms=True)
        self.build_seconds = time.perf_counter() - start
        log.debug("WebShop BM25 index: %d documents in %.2fs", self.size, self.build_seconds)

    def __deepcopy__(self, memo: dict[int, Any]) -> SearchEngine:
        return self  # a read-only shared index

    def __reduce__(self) -> tuple[Any, ...]:
        if self.catalog is None:
            raise TypeError("only a catalog's SearchEngine (search_engine_for) can be pickled")
        return (search_engine_for, (self.catalog,))

    def query_ids(self, query: str) -> list[int]:
        """The index's ids of the query's words (each once, sorted)."""
        return self._index.term_ids(query)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of up to ``k`` matching products, best first."""
        scores = self._index.scores(query)
        if self.size == 0 or not scores.any():
            return []
        from bm25s.selection import topk

        best, docs = topk(scores, max(1, min(int(k), self.size)))
        return [int(d) for d, s in zip(docs, best, strict=True) if s > 0]


_INDEXES = _Cache()


def search_engine_for(catalog: Catalog) -> SearchEngine:
    """The shared index of ``catalog`` (built on first use in this process)."""
    return _INDEXES.get_or_build(
        catalog.key, lambda: SearchEngine(catalog.documents(), catalog=catalog)
    )
