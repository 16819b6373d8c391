"""WebShop ``reward="original"`` against master's ``get_reward`` rules, and the original's
goal order and index fields.

``master_reward`` below restates princeton-nlp/WebShop master's documented reward rules
(``web_agent_site/engine/goal.py``) on the original's dict records, independently of
orchenv's code, with the same libraries master uses (``thefuzz``, spaCy's small English
model). orchenv's ``webshop_reward(rule="original")`` must agree on every generated case.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

pytest.importorskip("thefuzz")
spacy = pytest.importorskip("spacy")

from thefuzz import fuzz  # noqa: E402

from orchenv.envs.webshop import CatalogSpec, WebShopEnv, get_catalog  # noqa: E402
from orchenv.envs.webshop.catalog import original_document  # noqa: E402
from orchenv.envs.webshop.original import COLOR_SET, spacy_tagger  # noqa: E402
from orchenv.envs.webshop.products import Goal, Product  # noqa: E402
from orchenv.envs.webshop.reward import webshop_reward  # noqa: E402


def _norm(option: Any) -> Any:
    for color in COLOR_SET:  # master's colour list is data, shared with orchenv's copy
        if color in option:
            return color
    return option


def _nouns(text: str) -> list[str]:
    return [t.text.lower() for t in spacy_tagger()(text) if t.pos_ in ("NOUN", "PROPN")]


def master_reward(
    product: dict[str, Any], goal: dict[str, Any], price: float, options: dict
) -> float:
    """Master's get_reward, restated on its own dict records."""
    query_match = product["query"] == goal["query"]
    pc = {x.strip() for x in product["product_category"].split("›")}
    gc = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(pc & gc) >= 2
    got, want = _nouns(product["name"]), _nouns(goal["name"])
    title_score = len(set(got) & set(want)) / len(want) if want else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    n_att = 0
    for g in goal["attributes"]:
        if any(fuzz.token_set_ratio(p, g) > 85 for p in product["Attributes"]) or (
            g in product["Title"].lower()
            or g in " ".join(product["BulletPoints"]).lower()
            or g in product["Description"].lower()
        ):
            n_att += 1
    goal_options = goal["goal_options"]
    wanted = list(goal_options.items()) if isinstance(goal_options, dict) else goal_options
    bought = [_norm(o) for o in options.values()]
    n_opt = 0
    for g in (_norm(o) for o in wanted):
        for p in bought:
            if fuzz.token_set_ratio(p, g) > 85:
                n_opt += 1
                break
    r_price = price <= goal["price_upper"]
    total = (n_att + n_opt + r_price) / (len(goal["attributes"]) + len(goal_options) + 1)
    return total * r_type


def _product(d: dict[str, Any]) -> Product:
    return Product(
        asin="B000000001",
        title=d["name"],
        category="c",
        query=d["query"],
        product_category=d["product_category"],
        price=d["price"],
        price_tag=f"${d['price']}",
        attributes=tuple(d["Attributes"]),
        options=(),
        bullet_points=tuple(d["BulletPoints"]),
        description=d["Description"],
    )


def _goal(d: dict[str, Any]) -> Goal:
    opts = d["goal_options"]
    pairs = list(opts.items()) if isinstance(opts, dict) else [("", v) for v in opts]
    return Goal(
        id="g",
        asin="B000000001",
        instruction="i need it",
        attributes=tuple(d["attributes"]),
        options=tuple(pairs),
        price_upper=d["price_upper"],
        name=d["name"],
        query=d["query"],
        category="c",
        product_category=d["product_category"],
    )


def _case(
    goal_options: Any, chosen: dict[str, str], *, name: str = "Cotton T-Shirt for Men"
) -> tuple[dict, dict, float, dict]:
    product = {
        "name": name,
        "Title": name,
        "query": "men's t-shirts",
        "product_category": "Clothing › Men › Shirts",
        "Attributes": ["machine wash"],
        "BulletPoints": ["Machine wash cold"],
        "Description": "A soft shirt.",
        "price": 20.0,
    }
    goal = {
        "name": "Cotton T-Shirt for Men",
        "query": "men's t-shirts",
        "product_category": "Clothing › Men › Shirts",
        "attributes": ["machine wash"],
        "goal_options": goal_options,
        "price_upper": 30.0,
    }
    return product, goal, 20.0, chosen


#: the issue's cases: (goal option, chosen option, does master count the option?)
ISSUE_CASES = [
    ("x-large", "large", True),
    ("xx-large", "x-large", True),
    ("small", "x-small", True),
    ("light blue", "sky blue", True),
    ("white", "black | white", False),
]


@pytest.mark.parametrize(("wanted", "chosen", "counted"), ISSUE_CASES)
def test_issue_cases_score_as_master(wanted: str, chosen: str, counted: bool) -> None:
    # a human goal (options listed as bare values), as in the issue
    product, goal, price, options = _case([wanted], {"size": chosen})
    expected = (1 + int(counted) + 1) / 3
    assert master_reward(product, goal, price, options) == pytest.approx(expected)
    got = webshop_reward(_product(product), _goal(goal), options, price, rule="original")
    assert got.reward == pytest.approx(expected)
    assert got.option_matches == int(counted)
    # a synthetic goal (a mapping): master matches "('size', 'xx-large')", group name and all
    product, goal, price, options = _case({"size": wanted}, {"size": chosen})
    got = webshop_reward(_product(product), _goal(goal), options, price, rule="original")
    assert got.reward == master_reward(product, goal, price, options)


def test_synthetic_goal_options_carry_their_group_name() -> None:
    # master str()-s the (group, value) pair: "size xx large" vs "x large" is below 86
    product, goal, price, options = _case({"size": "xx-large"}, {"size": "x-large"})
    got = webshop_reward(_product(product), _goal(goal), options, price, rule="original")
    assert got.option_matches == 0
    # a pair whose value is a colour name is normalised to that colour (tuple equality)
    product, goal, price, options = _case({"color": "white"}, {"color": "white"})
    got = webshop_reward(_product(product), _goal(goal), options, price, rule="original")
    assert got.option_matches == 1


def _generated_cases(n: int) -> list[tuple[dict, dict, float, dict]]:
    """``n`` random (product, goal, options, price) cases over a real catalog's titles and
    option values plus the tricky values master's rules treat specially."""
    catalog = get_catalog(CatalogSpec(num_products=200, num_goals=50))
    rng = random.Random(7)
    values = ["x-large", "large", "xx-large", "small", "x-small", "medium", "3x-large"]
    values += ["light blue", "sky blue", "navy blue", "white", "black | white", "black"]
    values += ["heather grey", "wine red", "rose gold", "one size", "pack of 2", "2 pack"]
    values += ["32w x 30l", "32w x 32l", "6.5", "7", "red", "tired", "standard", "wash"]
    attributes = ["machine wash", "long lasting", "easy clean", "non slip", "gluten free"]
    attributes += ["soft material", "cotton spandex", "rubber sole", "high quality"]
    cases = []
    for _ in range(n):
        p, q = (
            catalog.product(rng.randrange(len(catalog))),
            catalog.product(rng.randrange(len(catalog))),
        )
        same = rng.random() < 0.5
        target = p if same else q
        k = rng.randint(0, 3)
        goal_values = rng.sample(values, k)
        groups = [f"group{i}" for i in range(k)]
        goal_options: Any = (
            goal_values if rng.random() < 0.5 else dict(zip(groups, goal_values, strict=True))
        )
        chosen = {f"c{i}": v for i, v in enumerate(rng.sample(values, rng.randint(0, 3)))}
        price = round(rng.uniform(5, 60), 2)
        product = {
            "name": p.title,
            "Title": p.title,
            "query": p.query,
            "product_category": p.product_category,
            "Attributes": list(p.attributes) or ["DUMMY_ATTR"],
            "BulletPoints": list(p.bullet_points),
            "Description": p.description,
            "price": price,
        }
        goal = {
            "name": target.title
            if rng.random() < 0.8
            else rng.choice(["Stainless Steel Water Bottle", "Lip Balm", "a"]),
            "query": target.query,
            "product_category": target.product_category,
            "attributes": rng.sample(attributes + list(target.attributes), rng.randint(1, 3)),
            "goal_options": goal_options,
            "price_upper": float(rng.choice([10, 20, 30, 40, 50, 1_000_000])),
        }
        cases.append((product, goal, price, chosen))
    return cases


def test_original_reward_agrees_with_master_rules_on_generated_cases() -> None:
    cases = [_case([w], {"size": c}) for w, c, _ in ISSUE_CASES]
    cases += [_case({"size": w}, {"size": c}) for w, c, _ in ISSUE_CASES]
    cases += _generated_cases(240)
    assert len(cases) >= 200
    rewards = set()
    for product, goal, price, options in cases:
        expected = master_reward(product, goal, price, options)
        got = webshop_reward(_product(product), _goal(goal), options, price, rule="original")
        assert got.reward == expected, (product["name"], goal, options)
        rewards.add(round(expected, 3))
    assert len(rewards) > 10  # the cases exercise many reward values, not one


def test_type_reward_uses_spacy_nouns_not_content_words() -> None:
    # "blue" is an adjective: master's r_type ignores it, the approximation does not
    product, goal, price, options = _case([], {}, name="blue cotton shirt")
    goal["name"] = "blue denim jeans"
    goal["query"], goal["product_category"] = "jeans", "Jeans"
    original = webshop_reward(_product(product), _goal(goal), options, price, rule="original")
    approx = webshop_reward(_product(product), _goal(goal), options, price, rule="approx")
    assert "blue" not in _nouns("blue denim jeans")
    assert original.title_score == 0.0 and original.r_type == 0.0 and original.reward == 0.0
    assert approx.title_score > 0.2  # the approximation counts the shared adjective


def test_original_goal_order_is_the_seed_233_shuffle(tmp_path) -> None:
    """A goal file in the original format: test = the first 500 after random.seed(233)."""
    products, human = [], {}
    for i in range(60):
        asin = f"B{i:09d}"
        products.append(
            {
                "asin": asin,
                "name": f"Product {i} Shirt",
                "full_description": f"description {i}",
                "small_description": [f"bullet {i}", "second"],
                "pricing": "$12.50",
                "customization_options": {"Size": [{"value": "Large"}, {"value": "X/Large"}]},
                "category": "fashion",
                "query": "shirts",
                "product_category": "Clothing › Shirts",
                "images": ["x"],
            }
        )
        human[asin] = [
            {
                "instruction": f"i want shirt {i}-{j}.",
                "instruction_attributes": ["soft"],
                "instruction_options": ["large"],
            }
            for j in range(30)  # 1,800 goals: more than 1,500, so the baselines' splits apply
        ]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2_1000.json").write_text(
        json.dumps({p["asin"]: {"attributes": ["soft"]} for p in products})
    )
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    original_order = [f"i want shirt {i}-{j}" for i in range(60) for j in range(30)]
    expected = list(original_order)
    random.seed(233)
    random.shuffle(expected)
    catalog = get_catalog(CatalogSpec(source="files", data_dir=str(tmp_path), num_products=None))

    def texts(split: str) -> list[str]:
        return [g.instruction.split(",")[0] for g in catalog.splits[split]]

    assert texts("test") == expected[:500]
    assert texts("eval") == expected[500:1500]
    assert texts("train") == expected[1500:]
    # the index holds the original's fields only: title, description, first bullet, options
    product = catalog.product(0)
    doc = catalog.documents()[0]
    assert doc == original_document(product)
    assert doc == "product 0 shirt description 0 bullet 0 size: large, x | large"
    assert "clothing" not in doc and "soft" not in doc
    extended = get_catalog(
        CatalogSpec(
            source="files", data_dir=str(tmp_path), num_products=None, index_fields="extended"
        )
    )
    assert "soft" in extended.documents()[0] and "clothing" in extended.documents()[0]


def test_env_refuses_unknown_reward_and_approx_is_opt_in() -> None:
    from orchenv.error import ConfigError

    with pytest.raises(ConfigError, match="approx"):
        WebShopEnv(reward="exact")
    env = WebShopEnv(reward="approx", num_products=100, num_goals=20)
    assert env.reward_rule == "approx"
    assert WebShopEnv(num_products=100, num_goals=20).reward_rule == "original"


def test_original_reward_without_the_model_refuses_and_names_the_fix(monkeypatch) -> None:
    from orchenv.envs.webshop import original
    from orchenv.error import DependencyError

    monkeypatch.setattr(original, "_NLP", [])
    monkeypatch.setattr(original, "SPACY_MODELS", ("no_such_spacy_model_for_test",))
    with pytest.raises(DependencyError, match=r'orchenv\[webshop\].*|reward="approx"') as caught:
        WebShopEnv(num_products=100, num_goals=20)
    assert "orchenv[webshop]" in str(caught.value) and 'reward="approx"' in str(caught.value)
    # the approximation needs neither spaCy nor thefuzz, and only when named
    assert WebShopEnv(num_products=100, num_goals=20, reward="approx").reward_rule == "approx"
