"""WebShop product search: BM25 (``bm25s``) queries/s and index build time by catalog size.

For generated catalogs of 1k, 10k and 100k products, the script times building the
catalog and the search index, then runs the goal instructions' search queries (what
a shopper types: the instruction without option and price text) through

* the env's ``SearchEngine`` (bm25s; top 50 hits), and
* the reference, measured in the same run on the same documents: a naive linear
  scan that scores every product by query-word overlap with precomputed token
  sets and keeps the top 50 (what one would write without an index).

It prints queries/s of both and their ratio, and two quality figures so speed is
not bought with worse results: recall@50 (the goal's own product is among the 50
hits) and fit@50 (some hit can earn reward 1: right type, every goal attribute and
option, within the price bound; WebShop accepts any such product). In large
catalogs hundreds of products fit a goal equally well, so recall of one ASIN falls
while fit stays high. No target: the ratio is reported.

    python benchmarks/webshop_search.py [--sizes 1000 10000 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import heapq
import re
import time

from orchenv.envs.webshop import Catalog, CatalogSpec, Goal, get_catalog, webshop_reward
from orchenv.envs.webshop.baselines import instruction_query
from orchenv.envs.webshop.search import SEARCH_RETURN_N, SearchEngine

_WORD = re.compile(r"\w\w+")


def naive_index(documents: list[str]) -> list[frozenset[str]]:
    return [frozenset(_WORD.findall(d)) for d in documents]


def naive_search(index: list[frozenset[str]], query: str, k: int = SEARCH_RETURN_N) -> list[int]:
    words = frozenset(_WORD.findall(query.lower()))
    scored = ((len(words & doc), -i) for i, doc in enumerate(index))
    return [-i for score, i in heapq.nlargest(k, scored) if score > 0]


def fits(catalog: Catalog, goal: Goal, hits: list[int]) -> bool:
    """Could buying one of ``hits`` (with the goal's options) earn reward 1?"""
    for i in hits:
        product = catalog.product(i)
        groups = product.option_groups
        chosen = {g: v for g, v in goal.options if v in groups.get(g, ())}
        if webshop_reward(product, goal, chosen).reward >= 1.0 - 1e-9:
            return True
    return False


def run(size: int, n_queries: int) -> dict[str, float]:
    start = time.perf_counter()
    catalog = get_catalog(CatalogSpec(num_products=size, num_goals=max(n_queries, 2), seed=0))
    documents = catalog.documents()
    catalog_s = time.perf_counter() - start
    start = time.perf_counter()
    engine = SearchEngine(documents)
    index_s = time.perf_counter() - start
    start = time.perf_counter()
    naive = naive_index(documents)
    naive_index_s = time.perf_counter() - start

    goals = [g for split in catalog.splits.values() for g in split][:n_queries]
    queries = [instruction_query(g.instruction) for g in goals]
    targets = [catalog.index_of(g.asin) for g in goals]
    engine.search(queries[0])  # warm-up (first call compiles / allocates)

    start = time.perf_counter()
    bm25_hits = [engine.search(q) for q in queries]
    bm25_s = time.perf_counter() - start
    start = time.perf_counter()
    naive_hits = [naive_search(naive, q) for q in queries]
    naive_s = time.perf_counter() - start
    return {
        "size": size,
        "catalog_s": catalog_s,
        "index_s": index_s,
        "naive_index_s": naive_index_s,
        "bm25_qps": len(queries) / bm25_s,
        "naive_qps": len(queries) / naive_s,
        "bm25_recall": sum(t in h for t, h in zip(targets, bm25_hits, strict=True)) / len(queries),
        "naive_recall": sum(t in h for t, h in zip(targets, naive_hits, strict=True))
        / len(queries),
        "bm25_fit": sum(fits(catalog, g, h) for g, h in zip(goals, bm25_hits, strict=True))
        / len(goals),
        "naive_fit": sum(fits(catalog, g, h) for g, h in zip(goals, naive_hits, strict=True))
        / len(goals),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    print(
        f"{'products':>9} {'catalog s':>10} {'index s':>8} {'bm25 q/s':>10} {'naive q/s':>10} "
        f"{'ratio':>7} {'recall@50 bm25':>15} {'naive':>6} {'fit@50 bm25':>12} {'naive':>6}"
    )
    for size in args.sizes:
        r = run(size, args.queries)
        print(
            f"{r['size']:>9,} {r['catalog_s']:>10.2f} {r['index_s']:>8.2f} {r['bm25_qps']:>10,.0f} "
            f"{r['naive_qps']:>10,.1f} {r['bm25_qps'] / r['naive_qps']:>6.1f}x "
            f"{r['bm25_recall']:>15.2f} {r['naive_recall']:>6.2f} {r['bm25_fit']:>12.2f} {r['naive_fit']:>6.2f}"
        )
    print(
        "ratio = bm25s queries/s over the naive linear token-overlap scan, same documents and queries"
    )


if __name__ == "__main__":
    main()
