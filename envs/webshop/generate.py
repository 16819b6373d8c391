"""The generated WebShop catalog: products and instruction goals from a seed.

Written for orchenv (the original catalog is 1.18M scraped Amazon products that
cannot ship in a package). The vocabulary (``vocabulary.json``) holds the five
WebShop categories with product types; each type has a collection query, a
category breadcrumb, title words, an attribute pool, option groups and a price
range. Product columns (type, brand, title words, attribute and option subsets,
price) are drawn with numpy in one pass, so 100k products take well under a
second; a ``Product`` with its features, description and reviews is built the
first time it is looked at, from a generator keyed by ``(seed, index)``.

Goals are sampled the way WebShop builds synthetic instructions: pick a product,
some of its attributes (1 to 3), one value per option group, and a price bound
above its price (the larger of two distinct draws among the next four multiples of
ten above the price, as ``get_synthetic_goals`` does); the instruction text is a
template over the product type and the attributes, followed by the original's
``with size: large, and color: black`` option text and ``, and price lower than
40.00 dollars``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from orchenv.envs.webshop.catalog import (
    Catalog,
    CatalogSpec,
    original_document,
    register_builder,
)
from orchenv.envs.webshop.products import CATEGORY_SEP, Goal, Product, Review, options_text

log = logging.getLogger(__name__)

#: price bounds are multiples of ten (the original's ``PRICE_RANGE``)
PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_BOUND = 1_000_000.0
MAX_GOAL_ATTRIBUTES = 3
MIN_PRODUCT_ATTRIBUTES = 3
MAX_PRODUCT_ATTRIBUTES = 6

#: the share of the generated catalog's rows that are other listings of another row's
#: product at another price (``_Columns._resold_listings``; issue 38: 0 before, when the
#: first result of a search was as good as any and comparing listings never paid)
RESOLD_SHARE = 0.5
#: a resold listing's price is the original's times a uniform draw from this range
RESOLD_PRICE_FACTOR = (0.8, 2.5)

INSTRUCTION_TEMPLATES = (
    "i'm looking for {kind} that is {attrs}",
    "i need {kind} which is {attrs}",
    "find me {attrs} {kind}",
    "i want to buy {kind}, and it should be {attrs}",
    "i am shopping for {kind} that is {attrs}",
)
FEATURE_ENDINGS = (
    "for everyday use",
    "made to last",
    "as promised on the label",
    "checked by our quality team",
    "that customers ask for",
)
DESCRIPTION_OPENERS = (
    "Meet the {title} by {brand}.",
    "{brand} made this {kind} for people who care about details.",
    "The {title} is one of the best sellers of {brand}.",
)
REVIEW_TITLES = (
    "Exactly what I wanted",
    "Good value",
    "Works as described",
    "Not bad at all",
    "Could be better",
    "Would buy again",
)
REVIEW_BODIES = (
    "Arrived quickly and matches the listing.",
    "Quality is decent for the money.",
    "I use it every day and it holds up well.",
    "Packaging was damaged but the item itself was fine.",
    "It took a while to get used to, now I like it.",
)


@lru_cache(maxsize=1)
def load_vocabulary() -> dict[str, Any]:
    """The bundled vocabulary (``vocabulary.json``)."""
    text = (
        resources.files("orchenv.envs.webshop")
        .joinpath("vocabulary.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


@dataclass(frozen=True)
class ProductType:
    category: str
    name: str
    title: str
    audience: str
    query: str
    path: tuple[str, ...]
    descriptors: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]

    @property
    def kind(self) -> str:
        """How an instruction names it: ``t-shirt for men``."""
        return f"{self.name} {self.audience.lower()}".strip()


@lru_cache(maxsize=1)
def product_types() -> tuple[ProductType, ...]:
    vocab = load_vocabulary()
    types = []
    for category, entries in vocab["categories"].items():
        for t in entries:
            types.append(
                ProductType(
                    category=category,
                    name=t["name"],
                    title=t["title"],
                    audience=t["audience"],
                    query=t["query"],
                    path=tuple(t["path"]),
                    descriptors=tuple(t["descriptors"]),
                    attributes=tuple(t["attributes"]),
                    options=tuple((g, tuple(v)) for g, v in t["options"].items()),
                    price=(float(t["price"][0]), float(t["price"][1])),
                )
            )
    return tuple(types)


def _pick_subsets(
    rng: np.random.Generator, pool_sizes: np.ndarray, counts: np.ndarray, width: int
) -> np.ndarray:
    """Bitmasks of ``counts[i]`` distinct indices below ``pool_sizes[i]``, vectorised."""
    n = len(pool_sizes)
    keys = rng.random((n, width))
    keys[np.arange(width)[None, :] >= pool_sizes[:, None]] = 2.0  # never picked
    order = np.argsort(keys, axis=1)
    taken = np.arange(width)[None, :] < counts[:, None]
    bits = np.where(taken, np.left_shift(np.int64(1), order.astype(np.int64)), 0)
    return bits.sum(axis=1).astype(np.int64)


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _asins(rng: np.random.Generator, n: int) -> list[str]:
    """Distinct ASIN-like ids (``B0`` + 8 base-36 digits) from an affine permutation
    ``(a * i + b) mod 36**8`` (no int64 overflow below ~10**8 products)."""
    space = 36**8
    a = int(rng.integers(2**30, 2**31)) * 6 + 1  # coprime with 2 and 3, hence with 36**8
    b = int(rng.integers(space))
    values = (np.arange(n, dtype=np.int64) * a + b) % space
    alphabet = np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", dtype=np.uint8)
    chars = np.empty((n, 10), dtype=np.uint8)
    chars[:, 0], chars[:, 1] = ord("B"), ord("0")
    for pos in range(9, 1, -1):
        values, digit = np.divmod(values, 36)
        chars[:, pos] = alphabet[digit]
    return [s.decode("ascii") for s in chars.view("S10").ravel()]


class _Columns:
    """The drawn product columns and how to turn row ``i`` into a ``Product``."""

    def __init__(self, spec: CatalogSpec) -> None:
        assert spec.num_products is not None
        n = spec.num_products
        self.seed = spec.seed
        self.types = product_types()
        self.brands = tuple(load_vocabulary()["brands"])
        types = self.types
        rng = np.random.default_rng([spec.seed, 1])
        self.type_id = rng.integers(len(types), size=n)
        self.brand_id = rng.integers(len(self.brands), size=n)
        t = self.type_id
        n_desc = np.array([len(x.descriptors) for x in types])[t]
        self.desc_mask = _pick_subsets(rng, n_desc, rng.integers(1, 3, size=n), int(n_desc.max()))
        n_attr = np.array([len(x.attributes) for x in types])[t]
        upper = np.minimum(n_attr, MAX_PRODUCT_ATTRIBUTES)
        count = rng.integers(MIN_PRODUCT_ATTRIBUTES, upper + 1)
        self.attr_mask = _pick_subsets(rng, n_attr, count, int(n_attr.max()))
        self.option_masks = []
        for slot in range(max(len(x.options) for x in types)):
            sizes = np.array(
                [len(x.options[slot][1]) if slot < len(x.options) else 0 for x in types]
            )[t]
            most = np.maximum((sizes + 1) // 2, 1)  # a listing offers up to half the values
            count = np.where(sizes >= 1, rng.integers(1, most + 1), 0)
            self.option_masks.append(_pick_subsets(rng, sizes, count, max(int(sizes.max()), 1)))
        lo = np.array([x.price[0] for x in types])[t]
        hi = np.array([x.price[1] for x in types])[t]
        self.price = np.floor(rng.uniform(lo, hi)) + 0.99
        self._resold_listings(np.random.default_rng([spec.seed, 4]), n)
        self.asins = _asins(rng, n)
        self.titles = [self._title(i) for i in range(n)]

    def _resold_listings(self, rng: np.random.Generator, n: int) -> None:
        """Make a share ``RESOLD_SHARE`` of the rows other listings of an original row's
        product (issue 38): the same type, brand, title words, attributes and offered
        options, at another price (the original row's times ``RESOLD_PRICE_FACTOR``, within
        the type's range). Search ranks such listings together, so the first result is
        often a listing of the right product above the goal's price bound: the shopper has
        to compare prices on the results page, as on a real marketplace."""
        resold = np.flatnonzero(rng.random(n) < RESOLD_SHARE)
        resold = resold[resold > 0]
        if not len(resold):
            return
        base = np.setdiff1d(np.arange(n), resold)
        source = base[rng.integers(len(base), size=len(resold))]  # an original row
        for column in (self.type_id, self.brand_id, self.desc_mask, self.attr_mask):
            column[resold] = column[source]
        for masks in self.option_masks:
            masks[resold] = masks[source]
        low, high = RESOLD_PRICE_FACTOR
        factor = rng.uniform(low, high, size=len(resold))
        t = self.type_id[resold]
        lo = np.array([x.price[0] for x in self.types])[t]
        hi = np.array([x.price[1] for x in self.types])[t]
        price = np.clip(self.price[source] * factor, lo, np.maximum(hi, lo) * high)
        self.price[resold] = np.floor(price) + 0.99

    def _title(self, i: int) -> str:
        kind = self.types[self.type_id[i]]
        words = [self.brands[self.brand_id[i]]]
        words += [kind.descriptors[j] for j in _bits(int(self.desc_mask[i]))]
        words.append(kind.title)
        if kind.audience:
            words.append(kind.audience)
        return " ".join(words)

    def attributes(self, i: int) -> tuple[str, ...]:
        kind = self.types[self.type_id[i]]
        return tuple(kind.attributes[j] for j in _bits(int(self.attr_mask[i])))

    def options(self, i: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
        kind = self.types[self.type_id[i]]
        groups = []
        for slot, (group, values) in enumerate(kind.options):
            chosen = _bits(int(self.option_masks[slot][i]))
            groups.append((group, tuple(values[j] for j in chosen)))
        return tuple(groups)

    def document(self, i: int) -> str:
        kind = self.types[self.type_id[i]]
        option_words = " ".join(v for _, values in self.options(i) for v in values)
        return " ".join(
            (self.titles[i], " ".join(self.attributes(i)), " ".join(kind.path), option_words)
        ).lower()

    def product(self, i: int) -> Product:
        kind = self.types[self.type_id[i]]
        rng = np.random.default_rng([self.seed, 2, i])
        attrs = self.attributes(i)
        brand = self.brands[self.brand_id[i]]
        title = self.titles[i]
        bullets = tuple(
            f"{a.capitalize()} {FEATURE_ENDINGS[int(rng.integers(len(FEATURE_ENDINGS)))]}."
            for a in attrs
        )
        opener = DESCRIPTION_OPENERS[int(rng.integers(len(DESCRIPTION_OPENERS)))]
        description = (
            opener.format(title=title, brand=brand, kind=kind.name)
            + f" This {kind.name} is {_join(attrs[:2])}, and it ships from our own warehouse."
        )
        reviews = tuple(
            Review(
                title=REVIEW_TITLES[int(rng.integers(len(REVIEW_TITLES)))],
                score=int(rng.integers(2, 6)),
                body=REVIEW_BODIES[int(rng.integers(len(REVIEW_BODIES)))],
            )
            for _ in range(int(rng.integers(0, 4)))
        )
        rating = f"{np.mean([r.score for r in reviews]):.1f}" if reviews else "N.A."
        price = float(self.price[i])
        return Product(
            asin=self.asins[i],
            title=title,
            category=kind.category,
            query=kind.query,
            product_category=CATEGORY_SEP.join(kind.path),
            price=price,
            price_tag=f"${price:.2f}",
            attributes=attrs,
            options=self.options(i),
            bullet_points=bullets,
            description=description,
            reviews=reviews,
            rating=rating,
        )


def _join(words: tuple[str, ...] | list[str]) -> str:
    words = list(words)
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} and {words[-1]}"


def price_bound(price: float, rng: np.random.Generator) -> float | None:
    """The goal's price bound: the larger of two distinct draws among the next four
    multiples of ten above ``price``; ``None`` when fewer than two exist."""
    above = [p for p in PRICE_STEPS if p > price][:4]
    if len(above) < 2:
        return None
    picks = rng.choice(len(above), size=2, replace=False)
    return above[int(max(picks))]


def price_text(bound: float | None) -> str:
    return "" if bound is None else f", and price lower than {bound:.2f} dollars"


def _goals(cols: _Columns, spec: CatalogSpec) -> list[Goal]:
    rng = np.random.default_rng([spec.seed, 3])
    n = len(cols.asins)
    goals = []
    for g, i in enumerate(rng.integers(n, size=spec.num_goals)):
        i = int(i)
        kind = cols.types[cols.type_id[i]]
        attrs = cols.attributes(i)
        k = int(rng.integers(1, min(MAX_GOAL_ATTRIBUTES, len(attrs)) + 1))
        picked = tuple(attrs[j] for j in sorted(rng.choice(len(attrs), size=k, replace=False)))
        chosen = {
            group: values[int(rng.integers(len(values)))] for group, values in cols.options(i)
        }
        chosen = {group: chosen[group] for group in sorted(chosen)}  # the original sorts names
        bound = price_bound(float(cols.price[i]), rng)
        template = INSTRUCTION_TEMPLATES[int(rng.integers(len(INSTRUCTION_TEMPLATES)))]
        text = template.format(kind=kind.kind, attrs=_join(picked))
        if chosen:
            text += f" with {options_text(chosen)}"
        text += price_text(bound)
        goals.append(
            Goal(
                id=f"goal-{g}",
                asin=cols.asins[i],
                instruction=text,
                attributes=picked,
                options=tuple(chosen.items()),
                price_upper=NO_PRICE_BOUND if bound is None else bound,
                name=cols.titles[i],
                query=kind.query,
                category=kind.category,
                product_category=CATEGORY_SEP.join(kind.path),
            )
        )
    return goals


def generate_catalog(spec: CatalogSpec) -> Catalog:
    """Build the generated catalog of ``spec`` (use ``get_catalog`` to share it)."""
    cols = _Columns(spec)
    goals = _goals(cols, spec)
    n_test = max(1, round(len(goals) * spec.test_fraction))
    n_test = min(n_test, len(goals) - 1)
    log.debug("generated WebShop catalog: %d products, %d goals", len(cols.asins), len(goals))
    built: list[Catalog] = []

    def documents() -> list[str]:
        # "original": the original's fields (title, description, first bullet, options);
        # "extended": orchenv's earlier document (title, attributes, category, options)
        n = len(cols.asins)
        if spec.index_fields == "extended":
            return [cols.document(i) for i in range(n)]
        return [original_document(built[0].product(i)) for i in range(n)]

    catalog = Catalog(
        name=f"webshop-generated-{spec.num_products}-seed{spec.seed}",
        key=("generated", spec),
        spec=spec,
        asins=cols.asins,
        make_product=cols.product,
        documents=documents,
        splits={"train": goals[n_test:], "test": goals[:n_test]},
    )
    built.append(catalog)
    return catalog


register_builder(
    "generated", lambda spec: ("generated", spec), lambda spec, _: generate_catalog(spec)
)
