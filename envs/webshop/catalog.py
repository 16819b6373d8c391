"""A WebShop catalog: products, goals with train/test splits, and a process-wide cache.

A ``Catalog`` is built once per recipe (``CatalogSpec``) and process, then shared:
every env, fork and deep copy with the same recipe holds the same object, and a
pickled catalog is rebuilt from its recipe (through the cache) on the other side.
Products may be materialised lazily (the generated catalog keeps columns and builds
a ``Product`` the first time it is looked at), so a 100k-product catalog is cheap.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchenv.envs.webshop.products import Goal, Product
from orchenv.error import ConfigError, DataError, UnknownNameError
from orchenv.tasks import ListTaskSource, Task

log = logging.getLogger(__name__)

#: how many catalogs (and their search indexes) one process keeps
CACHE_SIZE = 4
#: what a product's search document holds (``CatalogSpec.index_fields``)
INDEX_FIELDS = ("original", "extended")
#: how the original files' goals are ordered (``CatalogSpec.goal_order``)
GOAL_ORDERS = ("original", "seeded")
#: the seed the original's ``SimServer`` shuffles its goals with (Python's Mersenne Twister)
ORIGINAL_GOAL_SEED = 233


def original_document(p: Product) -> str:
    """A product's search document as the original indexes it
    (``search_engine/convert_product_file_format.py``): title, description, first
    bullet point and ``group: v1, v2, and group: ...``, lower-cased."""
    option_text = ", and ".join(f"{group}: {', '.join(values)}" for group, values in p.options)
    first_bullet = p.bullet_points[0] if p.bullet_points else ""
    return " ".join((p.title, p.description, first_bullet, option_text)).lower()


def extended_document(p: Product) -> str:
    """``original_document`` plus the attributes and the category path
    (``index_fields="extended"``, a named departure: it makes search easier)."""
    extra = " ".join((" ".join(p.attributes), p.product_category)).lower()
    return f"{original_document(p)} {extra}"


def original_goal_order(n: int) -> list[int]:
    """The positions of ``n`` goals after the original's shuffle: Python's Mersenne Twister
    seeded with 233, as ``SimServer`` seeds the global one. A private ``random.Random``
    gives the same stream and leaves the process's global ``random`` state alone."""
    order = list(range(n))
    random.Random(ORIGINAL_GOAL_SEED).shuffle(order)
    return order


@dataclass(frozen=True)
class CatalogSpec:
    """The recipe of a catalog; equal specs give equal catalogs.

    ``source="generated"``: ``num_products`` products and ``num_goals`` goals drawn
    from ``seed``; the first ``test_fraction`` of the goals form the ``test`` split,
    the rest ``train``. ``source="files"``: the original WebShop files in
    ``data_dir`` (or ``$WEBSHOP_DATA``), ``goals="human"`` or ``"synthetic"``
    instructions, the first ``num_products`` products (all when ``None``), ``seed``
    for price bounds and prices inside price ranges.

    ``index_fields="original"``: a product's search document is what the original
    indexes (title, description, first bullet point, option text; ``original_document``);
    ``"extended"`` adds its attributes and category path (orchenv's earlier, easier
    index: a departure). ``goal_order="original"``: the files' goals are shuffled as the
    original's ``SimServer`` does (Mersenne Twister seeded with 233: ``original_goal_order``), so
    ``test`` is the original's first 500; ``"seeded"`` permutes them with numpy and
    ``seed`` instead (orchenv's earlier order: a departure).
    """

    source: str = "generated"
    num_products: int | None = 1000
    num_goals: int = 1000
    test_fraction: float = 0.2
    seed: int = 0
    data_dir: str | None = None
    goals: str = "human"
    index_fields: str = "original"
    goal_order: str = "original"

    def __post_init__(self) -> None:
        if self.source not in ("generated", "files"):
            raise UnknownNameError("catalog source", self.source, ("generated", "files"))
        if self.num_products is not None and self.num_products < 1:
            raise ConfigError(
                f"num_products must be >= 1 (or None for all), got {self.num_products}"
            )
        if self.source == "generated":
            if self.num_products is None:
                raise ConfigError("a generated catalog needs num_products (an int >= 1), got None")
            if self.num_goals < 2:
                raise ConfigError(f"num_goals must be >= 2 (train and test), got {self.num_goals}")
            if not 0.0 < self.test_fraction < 1.0:
                raise ConfigError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if self.index_fields not in INDEX_FIELDS:
            raise UnknownNameError("WebShop index_fields", self.index_fields, INDEX_FIELDS)
        if self.goal_order not in GOAL_ORDERS:
            raise UnknownNameError("WebShop goal_order", self.goal_order, GOAL_ORDERS)
        if self.goals not in ("human", "synthetic"):
            raise UnknownNameError("WebShop goal kind", self.goals, ("human", "synthetic"))


class Catalog:
    """Products by index and ASIN, their search documents, and the goals' task source.

    ``make_product(i)`` builds product ``i`` (called at most once per index);
    ``documents`` are the texts the search index is built over, one per product.
    """

    def __init__(
        self,
        *,
        name: str,
        key: tuple[Any, ...],
        spec: CatalogSpec,
        asins: Sequence[str],
        make_product: Callable[[int], Product],
        documents: Callable[[], list[str]],
        splits: dict[str, list[Goal]],
    ) -> None:
        self.name = name
        self.key = key
        self.spec = spec
        self.asins = list(asins)
        self._index = {asin.upper(): i for i, asin in enumerate(self.asins)}
        if len(self._index) != len(self.asins):
            raise DataError(f"catalog {name!r} has duplicate ASINs")
        self._make_product = make_product
        self._products: dict[int, Product] = {}
        self._documents = documents
        self._lock = threading.Lock()
        for split, goals in splits.items():
            if not goals:
                raise DataError(f"split {split!r} of catalog {name!r} has no goals")
        self.splits = splits
        self._goals = {g.id: g for goals in splits.values() for g in goals}
        self.tasks = ListTaskSource(
            name,
            {
                split: [
                    Task(id=g.id, prompt=g.instruction, answers=(g.asin,), meta={"goal": g})
                    for g in goals
                ]
                for split, goals in splits.items()
            },
        )

    def __len__(self) -> int:
        return len(self.asins)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v)}" for k, v in self.splits.items())
        return f"Catalog({self.name!r}, {len(self)} products, goals: {sizes})"

    # shared handle: copies of envs share it, pickles rebuild it from the recipe
    def __deepcopy__(self, memo: dict[int, Any]) -> Catalog:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (get_catalog, (self.spec,))

    def product(self, index: int) -> Product:
        found = self._products.get(index)
        if found is None:
            if not 0 <= index < len(self.asins):
                raise IndexError(f"product index {index} out of range ({len(self.asins)})")
            with self._lock:
                found = self._products.get(index)
                if found is None:
                    found = self._products[index] = self._make_product(index)
        return found

    def index_of(self, asin: str) -> int | None:
        return self._index.get(asin.upper())

    def by_asin(self, asin: str) -> Product:
        index = self.index_of(asin)
        if index is None:
            raise UnknownNameError("product ASIN", asin, self.asins[:20])
        return self.product(index)

    def documents(self) -> list[str]:
        """One search document per product (see ``CatalogSpec.index_fields``)."""
        return self._documents()

    def goal(self, goal_id: str) -> Goal:
        try:
            return self._goals[goal_id]
        except KeyError:
            raise UnknownNameError("WebShop goal id", goal_id, list(self._goals)[:20]) from None


@dataclass
class _Cache:
    items: OrderedDict[Any, Any] = field(default_factory=OrderedDict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def get_or_build(self, key: Any, build: Callable[[], Any]) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
            value = build()
            self.items[key] = value
            while len(self.items) > CACHE_SIZE:
                self.items.popitem(last=False)
            return value


_CATALOGS = _Cache()


#: how each source builds its catalog: source -> (the cache key of a spec, build(spec, key)).
#: The generator (``generate``) and the file loader (``loaders``) register theirs when they
#: are imported, and the package's ``__init__`` imports both, so the catalog module never
#: imports them back (no import circle).
_BUILDERS: dict[
    str, tuple[Callable[[CatalogSpec], Any], Callable[[CatalogSpec, Any], Catalog]]
] = {}


def register_builder(
    source: str,
    key: Callable[[CatalogSpec], Any],
    build: Callable[[CatalogSpec, Any], Catalog],
) -> None:
    """Declare how catalogs of ``source`` are keyed in the cache and built."""
    _BUILDERS[source] = (key, build)


def get_catalog(spec: CatalogSpec) -> Catalog:
    """The catalog of ``spec``, built on first use and then shared within the process.

    A files catalog's key includes its files' sizes and mtimes: edited files give a new
    catalog.
    """
    try:
        key_of, build = _BUILDERS[spec.source]
    except KeyError:
        raise UnknownNameError("catalog source", spec.source, sorted(_BUILDERS)) from None
    key = key_of(spec)
    return _CATALOGS.get_or_build(key, lambda: build(spec, key))
