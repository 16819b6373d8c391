"""WebShop catalogs: the generated one (determinism, goals, vocabulary) and the original files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from orchenv.envs.webshop import CatalogSpec, WebShopEnv, get_catalog, search_engine_for
from orchenv.envs.webshop.baselines import GoalShopper
from orchenv.envs.webshop.generate import (
    FEATURE_ENDINGS,
    generate_catalog,
    load_vocabulary,
    price_bound,
    product_types,
)
from orchenv.envs.webshop.loaders import parse_pricing
from orchenv.envs.webshop.reward import fuzzy_match
from orchenv.error import ConfigError, DataError, UnknownNameError

# -- the generated catalog ---------------------------------------------------------------------


def test_generation_is_deterministic_and_seeded():
    spec = CatalogSpec(num_products=500, num_goals=50, seed=7)
    a, b = generate_catalog(spec), generate_catalog(spec)
    assert a.asins == b.asins
    assert [a.product(i) for i in range(0, 500, 37)] == [b.product(i) for i in range(0, 500, 37)]
    assert a.splits == b.splits
    c = generate_catalog(CatalogSpec(num_products=500, num_goals=50, seed=8))
    assert c.asins != a.asins and c.splits["train"] != a.splits["train"]


def test_generated_catalog_scales_and_has_unique_asins():
    cat = get_catalog(CatalogSpec(num_products=20_000, num_goals=100))
    assert len(cat) == 20_000 and len(set(cat.asins)) == 20_000
    assert all(len(a) == 10 and a.startswith("B0") for a in cat.asins[:100])
    assert len(cat.documents()) == 20_000
    kinds = {cat.product(i).query for i in range(0, 20_000, 97)}
    assert len(kinds) > 20  # every product type shows up


def test_goals_are_sampled_like_webshop():
    cat = get_catalog(CatalogSpec(num_products=1000, num_goals=300, seed=0))
    assert len(cat.splits["test"]) == 60 and len(cat.splits["train"]) == 240
    for goal in cat.splits["train"][:80]:
        p = cat.by_asin(goal.asin)
        assert 1 <= len(goal.attributes) <= 3 and set(goal.attributes) <= set(p.attributes)
        groups = p.option_groups
        assert [g for g, _ in goal.options] == sorted(groups)  # one value per option group
        assert all(v in groups[g] for g, v in goal.options)
        assert goal.price_upper > p.price and goal.price_upper % 10 == 0
        assert goal.price_upper - p.price < 50  # among the next four multiples of ten
        assert f"price lower than {goal.price_upper:.2f} dollars" in goal.instruction
        for g, v in goal.options:
            assert f"{g}: {v}" in goal.instruction
        assert goal.name == p.title and goal.query == p.query


def test_price_bound_rule():
    import numpy as np

    rng = np.random.default_rng(0)
    bounds = {price_bound(12.5, rng) for _ in range(200)}
    assert bounds == {30.0, 40.0, 50.0}  # max of two distinct draws from 20, 30, 40, 50
    assert price_bound(985.0, rng) is None  # fewer than two steps left: no bound


def test_vocabulary_keeps_the_reward_unambiguous():
    """Option values of a group never fuzzy-match each other, and attributes never occur in
    titles or boilerplate text, so rewards count exactly the intended matches."""
    brands = [b.lower() for b in load_vocabulary()["brands"]]
    boiler = " ".join(FEATURE_ENDINGS).lower()
    for kind in product_types():
        for group, values in kind.options:
            assert len(set(values)) == len(values)
            if group != "size":
                for a, b in itertools.combinations(values, 2):
                    assert not fuzzy_match(a, b), (kind.name, a, b)
        title_texts = [d.lower() for d in kind.descriptors] + [kind.title.lower(), *brands]
        for attr in kind.attributes:
            assert not any(attr in t for t in title_texts), (kind.name, attr)
            assert attr not in boiler
            assert not any(attr in other for other in kind.attributes if other != attr)
            for other in kind.attributes:
                if other != attr:
                    assert not fuzzy_match(attr, other), (kind.name, attr, other)


def test_catalog_spec_validation():
    with pytest.raises(ConfigError):
        CatalogSpec(num_products=0)
    with pytest.raises(ConfigError):
        CatalogSpec(num_goals=1)
    with pytest.raises(UnknownNameError, match="did you mean|Did you mean"):
        CatalogSpec(source="file")
    with pytest.raises(UnknownNameError):
        WebShopEnv(num_products=1000, split="validation").reset(seed=0)


def test_search_engine_ranks_matching_products():
    cat = get_catalog(CatalogSpec(num_products=1000, num_goals=200))
    engine = search_engine_for(cat)
    hits = engine.search("bluetooth speaker waterproof")
    assert 0 < len(hits) <= 50
    top = [cat.product(i) for i in hits[:10]]
    assert all(p.query == "portable bluetooth speaker" for p in top)
    assert engine.search("zzzz qqqq") == [] and engine.search("") == []
    assert engine.search("shirts") == engine.search("shirt")  # plural folding


# -- the original data files ---------------------------------------------------------------------


def _products() -> list[dict]:
    def item(asin, name, pricing, options, bullets, query="men's t-shirts"):
        return {
            "asin": asin,
            "name": name,
            "full_description": f"{name}. Soft and durable.",
            "small_description": bullets,
            "pricing": pricing,
            "customization_options": options,
            "images": ["https://example.com/a.jpg"],
            "category": "fashion",
            "query": query.upper(),
            "product_category": "Clothing, Shoes & Jewelry › Men › Clothing › Shirts",
            "brand": "Acme",
        }

    color = {"Color": [{"value": "Black", "image": None}, {"value": "Navy/White", "image": None}]}
    size = {"Size": [{"value": "Small", "image": None}, {"value": "Large", "image": None}]}
    return [
        item(
            "B000000AAA", "Acme Cotton Crew T-Shirt", "$12.99", {**color, **size}, ["Machine wash"]
        ),
        item("B000000BBB", "Acme Pocket Tee Shirt", "$10.00 - $20.00", size, "Tumble dry"),
        item("B000000CCC", "Zeta Wool Hiking Socks", "", None, ["Warm"], query="hiking socks"),
        item("nan", "broken row", "$1.00", None, []),
        item("B000000AAA", "duplicate row", "$1.00", None, []),
    ]


def _attributes() -> dict:
    return {
        "B000000AAA": {
            "attributes": ["machine wash", "cotton"],
            "instruction": "i need a cotton t-shirt that is machine wash",
            "instruction_attributes": ["machine wash", "cotton"],
        },
        "B000000BBB": {"attributes": ["tumble dry"], "instruction": None},
        "B000000CCC": {
            "attributes": ["wool"],
            "instruction": "i want wool hiking socks",
            "instruction_attributes": ["wool"],
        },
    }


def _human() -> dict:
    return {
        "B000000AAA": [
            {
                "instruction": "i want a black cotton t-shirt in small.",
                "instruction_attributes": ["cotton"],
                "instruction_options": ["black", "small"],
            },
            {
                "instruction": "no attributes here",
                "instruction_attributes": [],
                "instruction_options": [],
            },
        ],
        "B000000CCC": [
            {
                "instruction": "find wool socks",
                "instruction_attributes": ["wool"],
                "instruction_options": [],
            }
        ],
    }


def write_data(folder: Path, *, human: bool = True, reviews: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "items_shuffle_1000.json").write_text(json.dumps(_products()))
    (folder / "items_ins_v2_1000.json").write_text(json.dumps(_attributes()))
    if human:
        (folder / "items_human_ins.json").write_text(json.dumps(_human()))
    if reviews:
        review_rows = [
            {
                "asin": "B000000AAA",
                "average_rating": 4.5,
                "reviews": [{"title": "Great", "stars": 5, "review": "Fits well"}],
            }
        ]
        (folder / "reviews.json").write_text(json.dumps(review_rows))
    return folder


def test_loader_converts_products_like_the_original(tmp_path):
    cat = get_catalog(
        CatalogSpec(source="files", data_dir=str(write_data(tmp_path)), goals="human")
    )
    assert cat.asins == ["B000000AAA", "B000000BBB", "B000000CCC"]  # 'nan' and duplicates skipped
    shirt = cat.by_asin("b000000aaa")
    assert shirt.options == (("color", ("black", "navy | white")), ("size", ("small", "large")))
    assert shirt.price == 12.99 and shirt.price_tag == "$12.99"
    assert shirt.attributes == ("machine wash", "cotton") and shirt.query == "men's t-shirts"
    assert shirt.reviews[0].score == 5 and shirt.reviews[0].body == "Fits well"
    assert shirt.rating == "4.5"
    ranged = cat.by_asin("B000000BBB")
    assert ranged.price_tag == "$10.0 to $20.0" and 10.0 <= ranged.price <= 20.0
    assert ranged.bullet_points == ("Tumble dry",)
    socks = cat.by_asin("B000000CCC")
    assert socks.price == 100.0 and socks.options == ()
    assert cat.by_asin("B000000BBB").attributes == ("tumble dry",)
    assert parse_pricing("$1,299.00") == [1299.0] and parse_pricing(None) == [100.0]


def test_human_goals_from_files(tmp_path):
    cat = get_catalog(
        CatalogSpec(source="files", data_dir=str(write_data(tmp_path)), goals="human")
    )
    goals = cat.splits["train"]
    assert len(goals) == 2  # the instruction without attributes is skipped
    assert cat.splits["test"] == goals  # small data: every split holds all goals
    shirt_goal = next(g for g in goals if g.asin == "B000000AAA")
    assert shirt_goal.option_values == ("black", "small")
    assert shirt_goal.instruction.startswith("i want a black cotton t-shirt in small, and price")
    assert shirt_goal.name == "Acme Cotton Crew T-Shirt"


def test_synthetic_goals_from_files(tmp_path):
    spec = CatalogSpec(
        source="files", data_dir=str(write_data(tmp_path, human=False)), goals="synthetic"
    )
    goals = get_catalog(spec).splits["train"]
    shirt = [g for g in goals if g.asin == "B000000AAA"]
    assert len(shirt) == 4  # every option combination: 2 colors x 2 sizes
    assert {g.options for g in shirt} == {
        (("color", c), ("size", s)) for c in ("black", "navy | white") for s in ("small", "large")
    }
    assert any(
        g.instruction.startswith(
            "i need a cotton t-shirt that is machine wash with color: black, and size: small"
        )
        for g in shirt
    )
    assert len([g for g in goals if g.asin == "B000000CCC"]) == 1  # no options: one goal


def test_env_on_files_via_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBSHOP_DATA", str(write_data(tmp_path)))
    env = WebShopEnv(source="files", num_products=None, split="test")
    for index in range(2):
        obs, info = env.reset(options={"task_index": index})
        shopper = GoalShopper(env.goal)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(shopper.act(obs, info))
            done = term or trunc
        assert term and reward == pytest.approx(1.0)


def test_missing_or_broken_files_raise_data_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    with pytest.raises(DataError, match="WEBSHOP_DATA"):
        get_catalog(CatalogSpec(source="files"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        DataError, match=r"items_shuffle\.json or items_shuffle_1000\.json.*setup\.sh"
    ):
        get_catalog(CatalogSpec(source="files", data_dir=str(empty)))
    no_human = write_data(tmp_path / "nohuman", human=False)
    with pytest.raises(DataError, match="items_human_ins.json"):
        get_catalog(CatalogSpec(source="files", data_dir=str(no_human), goals="human"))
    broken = write_data(tmp_path / "broken")
    (broken / "items_ins_v2_1000.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        get_catalog(CatalogSpec(source="files", data_dir=str(broken)))
    with pytest.raises(DataError, match="does not exist"):
        get_catalog(CatalogSpec(source="files", data_dir=str(tmp_path / "nowhere")))


def test_edited_files_give_a_new_catalog(tmp_path):
    folder = write_data(tmp_path)
    spec = CatalogSpec(source="files", data_dir=str(folder))
    first = get_catalog(spec)
    assert get_catalog(spec) is first
    rows = _products()[:1]
    (folder / "items_shuffle_1000.json").write_text(json.dumps(rows, indent=1))
    assert len(get_catalog(spec)) == 1
