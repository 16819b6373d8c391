"""Loaders for the original WebShop data files (``princeton-nlp/WebShop``'s ``data/``).

Files (the names ``setup.sh`` downloads; ``-d small`` gives the ``_1000`` pair):

* products: ``items_shuffle.json`` or ``items_shuffle_1000.json``: a JSON list of
  scraped products with ``asin``, ``name``, ``full_description``,
  ``small_description`` (bullet points, a list or a string), ``pricing`` (``"$12.99"``
  or ``"$10.99 - $15.99"``), ``customization_options`` (group -> list of
  ``{"value", "image"}``), ``category``, ``query``, ``product_category``;
* attributes: ``items_ins_v2.json`` or ``items_ins_v2_1000.json``: an object ASIN ->
  ``{"attributes": [...], "instruction": str, "instruction_attributes": [...]}``;
* human instructions: ``items_human_ins.json``: an object ASIN -> list of
  ``{"instruction": str, "instruction_attributes": [...], "instruction_options": [...]}``;
* optional reviews: ``reviews.json``: a list of ``{"asin", "reviews": [{"title",
  "score" or "stars", "body" or "review"}], "average_rating"}``.

Conversion follows the original ``load_products``: ASINs that are ``nan`` or longer
than 10 characters and repeated ASINs are skipped; option group names and values
are lowercased and ``/`` in values becomes `` | ``; a product without attributes gets
``["DUMMY_ATTR"]``; a price range's price is drawn uniformly inside it. Goals follow
``get_human_goals`` / ``get_synthetic_goals`` (every option combination of a product
with a synthetic instruction is one goal) and are ordered by the original's shuffle
(Mersenne Twister seeded with 233, ``catalog.original_goal_order``;
``goal_order="original"``; ``"seeded"`` permutes them with numpy and ``seed``, orchenv's
earlier order).
With more than 1,500 goals the splits are those of the original baselines (test:
the first 500, eval: the next 1,000, train: the rest); with fewer, every split
holds all goals (as the original does for small product subsets).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from orchenv.envs.webshop.catalog import (
    Catalog,
    CatalogSpec,
    extended_document,
    original_document,
    original_goal_order,
    register_builder,
)
from orchenv.envs.webshop.generate import NO_PRICE_BOUND, price_bound, price_text
from orchenv.envs.webshop.products import Goal, Product, Review, options_text
from orchenv.error import DataError

log = logging.getLogger(__name__)

ENV_VAR = "WEBSHOP_DATA"
PRODUCT_FILES = ("items_shuffle.json", "items_shuffle_1000.json")
ATTRIBUTE_FILES = ("items_ins_v2.json", "items_ins_v2_1000.json")
HUMAN_FILE = "items_human_ins.json"
REVIEW_FILE = "reviews.json"
WHERE_TO_GET = (
    "Get them with the original repository's setup script "
    "(https://github.com/princeton-nlp/WebShop, `./setup.sh -d small` for the 1,000-product "
    "files or `-d all` for everything; it downloads them into WebShop/data/), then pass "
    f"data_dir=... or set ${ENV_VAR} to that folder."
)
SPLIT_TEST, SPLIT_EVAL = 500, 1500


@dataclass(frozen=True)
class DataFiles:
    products: Path
    attributes: Path
    human: Path | None
    reviews: Path | None

    def all(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.products, self.attributes, self.human, self.reviews) if p)


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """``data_dir``, else ``$WEBSHOP_DATA``; a ``DataError`` when neither names a folder."""
    raw = data_dir if data_dir is not None else os.environ.get(ENV_VAR)
    if not raw:
        raise DataError(
            "WebShop's original data files were asked for (source='files') but no folder was "
            f"given: pass data_dir=... or set ${ENV_VAR}. Expected files: one of "
            f"{' / '.join(PRODUCT_FILES)}, one of {' / '.join(ATTRIBUTE_FILES)}, and "
            f"{HUMAN_FILE} for human goals. {WHERE_TO_GET}"
        )
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise DataError(f"WebShop data folder {str(path)!r} does not exist. {WHERE_TO_GET}")
    return path


def find_data_files(data_dir: Path, goals: str) -> DataFiles:
    """The files to read in ``data_dir`` (the full pair if present, else the 1,000 pair)."""
    present = {name for name in (*PRODUCT_FILES, *ATTRIBUTE_FILES) if (data_dir / name).is_file()}
    pairs = list(zip(PRODUCT_FILES, ATTRIBUTE_FILES, strict=True))
    chosen = next((pair for pair in pairs if set(pair) <= present), None)
    if chosen is None:  # mismatched sizes still work: attributes are keyed by ASIN
        products = next((n for n in PRODUCT_FILES if n in present), None)
        attributes = next((n for n in ATTRIBUTE_FILES if n in present), None)
        missing = []
        if products is None:
            missing.append(" or ".join(PRODUCT_FILES))
        if attributes is None:
            missing.append(" or ".join(ATTRIBUTE_FILES))
        if missing:
            raise DataError(
                f"WebShop data folder {str(data_dir)!r} lacks {'; '.join(missing)}. {WHERE_TO_GET}"
            )
        assert products is not None and attributes is not None
        chosen = (products, attributes)
    human = data_dir / HUMAN_FILE
    if goals == "human" and not human.is_file():
        raise DataError(
            f"human goals need {HUMAN_FILE} in {str(data_dir)!r}, which is missing "
            f"(or use goals='synthetic' to build goals from {chosen[1]}). {WHERE_TO_GET}"
        )
    reviews = data_dir / REVIEW_FILE
    return DataFiles(
        products=data_dir / chosen[0],
        attributes=data_dir / chosen[1],
        human=human if human.is_file() else None,
        reviews=reviews if reviews.is_file() else None,
    )


def files_key(spec: CatalogSpec) -> tuple[Any, ...]:
    """The cache key of a files catalog: the recipe plus each file's size and mtime."""
    files = find_data_files(resolve_data_dir(spec.data_dir), spec.goals)
    stamps = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files.all())
    return (
        "files",
        stamps,
        spec.goals,
        spec.num_products,
        spec.seed,
        spec.index_fields,
        spec.goal_order,
    )


def _read_json(path: Path, kind: type) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path} is not valid JSON ({exc}); re-download it. {WHERE_TO_GET}"
        ) from exc
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from exc
    if not isinstance(data, kind):
        raise DataError(
            f"{path} should hold a JSON {'list' if kind is list else 'object'}, "
            f"found {type(data).__name__}"
        )
    return data


_PRICE_CHARS = re.compile(r"[^\d.]")


def parse_pricing(pricing: Any) -> list[float]:
    """``"$10.99 - $15.99"`` -> ``[10.99, 15.99]``; missing -> ``[100.0]`` (as the original)."""
    if not pricing or not isinstance(pricing, str):
        return [100.0]
    values = []
    for part in pricing.split("$")[1:]:
        cleaned = _PRICE_CHARS.sub("", part)
        try:
            values.append(float(cleaned))
        except ValueError:
            continue
    return values[:2] or [100.0]


def _reviews(raw: Any) -> tuple[tuple[Review, ...], str]:
    if not isinstance(raw, dict):
        return (), "N.A."
    out = []
    for r in raw.get("reviews") or []:
        if not isinstance(r, dict):
            continue
        raw_score: Any = r.get("score", r.get("stars", 0))
        try:
            score = int(float(raw_score))
        except (TypeError, ValueError):
            score = 0
        out.append(Review(str(r.get("title", "")), score, str(r.get("body", r.get("review", "")))))
    rating = raw.get("average_rating", "N.A.")
    return tuple(out), str(rating)


def _product(
    raw: dict[str, Any], attrs: dict[str, Any], review: Any, rng: np.random.Generator
) -> Product:
    asin = str(raw["asin"])
    pricing = parse_pricing(raw.get("pricing"))
    if len(pricing) == 1:
        price, tag = pricing[0], f"${pricing[0]}"
    else:
        price, tag = float(rng.uniform(pricing[0], pricing[1])), f"${pricing[0]} to ${pricing[1]}"
    options = []
    for group, contents in (raw.get("customization_options") or {}).items():
        if not contents:
            continue
        values = tuple(
            str(c.get("value", "")).strip().replace("/", " | ").lower()
            for c in contents
            if isinstance(c, dict)
        )
        options.append((str(group).lower(), values))
    bullets = raw.get("small_description")
    bullets = bullets if isinstance(bullets, list) else [bullets or ""]
    reviews, rating = _reviews(review)
    info = attrs.get(asin)
    attributes = info.get("attributes") if isinstance(info, dict) else None
    return Product(
        asin=asin,
        title=str(raw.get("name", "")),
        category=str(raw.get("category", "")),
        query=str(raw.get("query", "")).lower().strip(),
        product_category=str(raw.get("product_category", "")),
        price=float(price),
        price_tag=tag,
        attributes=tuple(str(a) for a in (attributes or ["DUMMY_ATTR"])),
        options=tuple(options),
        bullet_points=tuple(str(b) for b in bullets),
        description=str(raw.get("full_description") or ""),
        reviews=reviews,
        rating=rating,
    )


def _goal(
    gid: str,
    p: Product,
    text: str,
    attrs: list[str],
    opts: list[tuple[str, str]],
    bound: float | None,
) -> Goal:
    return Goal(
        id=gid,
        asin=p.asin,
        instruction=text + price_text(bound),
        attributes=tuple(str(a) for a in attrs),
        options=tuple(opts),
        price_upper=NO_PRICE_BOUND if bound is None else bound,
        name=p.title,
        query=p.query,
        category=p.category,
        product_category=p.product_category,
    )


def _human_goals(
    products: list[Product], human: dict[str, Any], rng: np.random.Generator
) -> list[Goal]:
    goals = []
    for p in products:
        for entry in human.get(p.asin) or []:
            if not isinstance(entry, dict) or not entry.get("instruction_attributes"):
                continue  # the original skips instructions without attributes
            opts = entry.get("instruction_options") or []
            if isinstance(opts, dict):
                pairs = [(str(k).lower(), str(v).lower()) for k, v in opts.items()]
            else:
                pairs = [("", str(v).lower()) for v in opts]
            text = str(entry.get("instruction", "")).strip(".")
            goals.append(
                _goal(
                    "", p, text, entry["instruction_attributes"], pairs, price_bound(p.price, rng)
                )
            )
    return goals


def _synthetic_goals(
    products: list[Product], attrs: dict[str, Any], rng: np.random.Generator
) -> list[Goal]:
    goals = []
    for p in products:
        info = attrs.get(p.asin)
        if not isinstance(info, dict) or not info.get("instruction"):
            continue
        wanted = info.get("instruction_attributes") or []
        if not wanted:
            continue
        bound = price_bound(p.price, rng)
        groups = sorted(p.option_groups)
        for combo in itertools.product(*(p.option_groups[g] for g in groups)):
            chosen = dict(zip(groups, combo, strict=True))
            text = str(info["instruction"])
            if chosen:
                text += f" with {options_text(chosen)}"
            goals.append(_goal("", p, text, wanted, list(chosen.items()), bound))
    return goals


def load_catalog(spec: CatalogSpec, key: tuple[Any, ...]) -> Catalog:
    """Read the original files named by ``spec`` (use ``get_catalog`` to share the result)."""
    files = find_data_files(resolve_data_dir(spec.data_dir), spec.goals)
    rng = np.random.default_rng(spec.seed)
    raw_products = _read_json(files.products, list)
    attrs = _read_json(files.attributes, dict)
    reviews: dict[str, Any] = {}
    if files.reviews is not None:
        reviews = {
            str(r.get("asin")): r for r in _read_json(files.reviews, list) if isinstance(r, dict)
        }
    if spec.num_products is not None:
        raw_products = raw_products[: spec.num_products]
    products: list[Product] = []
    seen: set[str] = set()
    for raw in raw_products:
        if not isinstance(raw, dict) or "asin" not in raw:
            raise DataError(
                f"{files.products}: every product needs an 'asin' field, got {raw!r:.200}"
            )
        asin = str(raw["asin"])
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        try:
            products.append(_product(raw, attrs, reviews.get(asin), rng))
        except (TypeError, AttributeError, ValueError) as exc:
            raise DataError(f"{files.products}: product {asin} is malformed ({exc})") from exc
    if not products:
        raise DataError(f"{files.products} holds no usable products")
    if spec.goals == "human":
        assert files.human is not None
        goals = _human_goals(products, _read_json(files.human, dict), rng)
    else:
        goals = _synthetic_goals(products, attrs, rng)
    if not goals:
        raise DataError(
            f"no {spec.goals} goals for the loaded products: none of their ASINs has an "
            f"instruction with attributes in {files.human if spec.goals == 'human' else files.attributes}"
        )
    if spec.goal_order == "original":
        order = original_goal_order(len(goals))
    else:
        order = [int(i) for i in rng.permutation(len(goals))]
    goals = [replace(goals[i], id=f"{spec.goals}-{k}") for k, i in enumerate(order)]
    if len(goals) > SPLIT_EVAL:
        splits = {
            "train": goals[SPLIT_EVAL:],
            "eval": goals[SPLIT_TEST:SPLIT_EVAL],
            "test": goals[:SPLIT_TEST],
        }
    else:
        splits = {"train": goals, "eval": goals, "test": goals}
    by_index = products

    def documents() -> list[str]:
        document = original_document if spec.index_fields == "original" else extended_document
        return [document(p) for p in by_index]

    log.info("loaded WebShop data: %d products, %d %s goals", len(products), len(goals), spec.goals)
    return Catalog(
        name=f"webshop-files-{files.products.stem}",
        key=key,
        spec=spec,
        asins=[p.asin for p in products],
        make_product=lambda i: by_index[i],
        documents=documents,
        splits=splits,
    )


register_builder("files", files_key, load_catalog)
