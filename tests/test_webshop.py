"""orch/WebShop-v0: scripted shopping, the paper's reward by hand, pages, invalid actions."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import numpy as np
import pytest

from orchenv.envs.webshop import Goal, Product, WebShopEnv, parse_action, webshop_reward
from orchenv.envs.webshop.baselines import GoalShopper, instruction_query
from orchenv.envs.webshop.reward import (
    attribute_matches,
    option_matches,
    title_words,
    token_set_ratio,
    type_reward,
)
from orchenv.error import ConfigError, EnvStateError

#: the named variants that reproduce orchenv's earlier env (chat pages, strict protocol)
LEGACY = {"observation_mode": "chat", "protocol": "orchenv", "reward": "approx"}


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    # orchenv's earlier chat pages and strict protocol, kept as named variants
    e = WebShopEnv(num_products=1000, num_goals=200, **LEGACY)
    e.reset(seed=0)
    return e


def play(env: WebShopEnv, actions: list[str]) -> tuple[float, bool, bool, dict]:
    reward, term, trunc, info = 0.0, False, False, {}
    for action in actions:
        _, reward, term, trunc, info = env.step(action)
    return reward, term, trunc, info


def open_goal_item(env: WebShopEnv, task_index: int = 0, split: str = "train") -> dict:
    """Reset to a goal and walk to its product's page (searching its title)."""
    env.reset(options={"task_index": task_index})
    goal = env.goal
    _, _, _, _, info = env.step(f"search[{goal.name}]")
    asin = goal.asin.lower()
    for _ in range(5):
        if asin in info["available_actions"]["clickables"]:
            break
        _, _, _, _, info = env.step("click[next >]")
    _, _, _, _, info = env.step(f"click[{asin}]")
    assert info["page"] == "item"
    return info


def find_goal(env: WebShopEnv, predicate) -> int:
    split = env.task_source
    for i in range(split.size(env.split)):
        goal = split.get(env.split, i).meta["goal"]
        if predicate(goal, env.catalog.by_asin(goal.asin)):
            return i
    raise AssertionError("no goal in the split satisfies the test's precondition")


# -- scripted agent --------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "test"])
def test_scripted_shopper_earns_full_reward(split):
    # reward="approx": master's rules score some perfect synthetic purchases below 1
    # (its colour normaliser turns "sandalwood" into "sand"; see docs/webshop.md)
    env = WebShopEnv(num_products=1000, num_goals=200, split=split, reward="approx")
    env.reset(seed=0)
    for index in range(0, env.task_source.size(split), 7):
        obs, info = env.reset(options={"task_index": index})
        shopper = GoalShopper(env.goal)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(shopper.act(obs, info))
            assert not info["invalid_action"], info["parse_error"]
            done = term or trunc
        assert term and not trunc
        assert reward == pytest.approx(1.0) and info["score"] == pytest.approx(1.0)
        assert info["success"] is True
        assert info["metrics"] == {"score": info["score"], "success": 1.0}
        assert info["final_answer"]["asin"] == env.goal.asin
        assert info["final_answer"]["options"] == dict(env.goal.options)
        assert info["task_id"] == env.goal.id and info["turns"] == env.turn


def test_search_with_instruction_words_finds_the_goal_product(env):
    hits_found = 0
    for index in range(40):
        env.reset(options={"task_index": index})
        env.step(f"search[{instruction_query(env.goal.instruction)}]")
        hits_found += env.catalog.index_of(env.goal.asin) in env.state.hits
    assert hits_found >= 36, "BM25 over titles + attributes should find most goal products"


# -- the reward, computed by hand --------------------------------------------------------------


def test_wrong_option_costs_exactly_one_option(env):
    index = find_goal(
        env,
        lambda g, p: (
            any(grp == "size" for grp, _ in g.options) and len(p.option_groups["size"]) > 1
        ),
    )
    info = open_goal_item(env, index)
    goal = env.goal
    product = env.catalog.by_asin(goal.asin)
    wanted_size = dict(goal.options)["size"]
    wrong_size = next(v for v in product.option_groups["size"] if v != wanted_size)
    actions = [f"click[{v}]" for g, v in goal.options if g != "size"]
    actions += [f"click[{wrong_size}]", "click[buy now]"]
    reward, term, _, info = play(env, actions)
    n_att, n_opt = len(goal.attributes), len(goal.options)
    # all attributes, all options but one, price within the bound, same product type
    assert term
    assert reward == pytest.approx((n_att + n_opt - 1 + 1) / (n_att + n_opt + 1))
    assert info["reward_parts"]["option_matches"] == n_opt - 1


def test_buying_without_choosing_options(env):
    index = find_goal(env, lambda g, p: len(g.options) == 2)
    open_goal_item(env, index)
    goal = env.goal
    reward, term, _, info = play(env, ["click[buy now]"])
    n_att = len(goal.attributes)
    assert term and reward == pytest.approx((n_att + 0 + 1) / (n_att + 2 + 1))
    assert info["final_answer"]["options"] == {}


def test_over_price_loses_the_price_point(env):
    goal = env.task_source.get("train", 3).meta["goal"]
    product = env.catalog.by_asin(goal.asin)
    strict = replace(goal, price_upper=product.price - 0.5)  # the product now costs too much
    env.reset(options={"goal": strict})
    play(env, [f"search[{goal.name}]"])
    assert goal.asin.lower() in env.available_actions()["clickables"]
    actions = [f"click[{goal.asin.lower()}]", *(f"click[{v}]" for _, v in goal.options)]
    reward, term, _, info = play(env, [*actions, "click[buy now]"])
    n = len(goal.attributes) + len(goal.options)
    assert term and reward == pytest.approx(n / (n + 1))
    assert info["reward_parts"]["price_ok"] is False


def test_missing_attributes_lower_the_reward(env):
    from orchenv.envs.webshop.generate import product_types

    goal = env.task_source.get("train", 5).meta["goal"]
    product = env.catalog.by_asin(goal.asin)
    pool = next(t.attributes for t in product_types() if t.query == product.query)
    lacking = [a for a in pool if a not in product.attributes][:2]
    text = " ".join([product.title, *product.bullet_points, product.description]).lower()
    assert lacking and not any(a in text for a in lacking)  # precondition of the hand count
    asked = (*product.attributes[:1], *lacking)
    env.reset(options={"goal": replace(goal, attributes=asked)})
    play(env, [f"search[{goal.name}]"])
    actions = [f"click[{goal.asin.lower()}]", *(f"click[{v}]" for _, v in goal.options)]
    reward, term, _, _ = play(env, [*actions, "click[buy now]"])
    n_opt = len(goal.options)
    assert term and reward == pytest.approx((1 + n_opt + 1) / (len(asked) + n_opt + 1))


def _product(**fields) -> Product:
    base = dict(
        asin="B000000001",
        title="",
        category="beauty",
        query="query 1",
        product_category="a › b › c",
        price=35.0,
        price_tag="$35.00",
        attributes=(),
        options=(),
        bullet_points=(),
        description="",
    )
    return Product(**{**base, **fields})


def _goal(**fields) -> Goal:
    base = dict(
        id="g",
        asin="B000000001",
        instruction="",
        attributes=("tea tree", "essential oils", "natural ingredients"),
        options=(("color", "grey"), ("size", "xl")),
        price_upper=40.0,
        name="Mens Basketball Sneakers Shoes",
        query="query 1",
        category="beauty",
        product_category="a › b › c",
    )
    return Goal(**{**base, **fields})


def test_reward_formula_on_hand_built_products():
    goal = _goal()
    exact = _product(
        title="Mens Basketball Sneakers Shoes",
        attributes=("tea tree", "essential oil", "natural ingredients"),
    )
    chosen = {"color": "grey", "size": "xl"}
    assert webshop_reward(exact, goal, chosen).reward == 1.0
    # attributes found only in the features and the description count too
    texty = replace(
        exact,
        attributes=(),
        bullet_points=("This shampoo has essential oils and smells like lemons",),
        description="Best shampoo on the market, made with natural ingredients",
    )
    assert webshop_reward(texty, goal, chosen).reward == pytest.approx(5 / 6)
    # a third goal option nobody chose: 2 of 3 attributes, 2 of 3 options, price
    goal3 = replace(goal, options=(*goal.options, ("amount", "pack of 12")))
    assert webshop_reward(texty, goal3, chosen).reward == pytest.approx(5 / 7)
    # sizes match exactly only; other groups fuzzily
    assert option_matches(goal.options, {"color": "grey", "size": "xxl"}) == 1
    assert option_matches([("flavor", "cool powder snow")], {"flavor": "powder snow"}) == 1
    assert option_matches([], {"color": "grey"}) == 0
    assert option_matches(goal.options, {}) == 0
    # each goal option counts once even if chosen options repeat it
    assert option_matches(["grey"], {"color": "grey", "trim": "grey"}) == 1


def test_type_reward_rules():
    goal = _goal(name="Lumora Slim Fit Cotton T-Shirt for Men")
    same = _product(title="Brava Classic T-Shirt for Men")
    kind = type_reward(same, goal)
    assert kind.query_match and kind.category_match
    assert kind.title_score == pytest.approx(
        2 / 6
    )  # shirt, men of lumora slim fit cotton shirt men
    assert kind.r_type == 1.0
    other = _product(
        title="Zentara Greek Olive Oil", query="olive oil", product_category="x › y › z"
    )
    assert type_reward(other, goal).r_type == 0.0  # no title word in common
    weak = replace(other, title="Zentara Olive Oil for Men")  # 1 of 6 words: < 0.2, no match
    assert type_reward(weak, goal).title_score == pytest.approx(1 / 6)
    assert type_reward(weak, goal).r_type == 0.5
    same_category = replace(weak, product_category="a › b › q")  # two levels in common
    assert type_reward(same_category, goal).r_type == 1.0
    long_goal = replace(goal, name=" ".join(f"word{c}" for c in "abcdefghijk") + " shirt")
    assert type_reward(same, long_goal).r_type == 0.1  # 1 of 12 words: title score < 0.1
    assert webshop_reward(weak, goal, {}).reward == pytest.approx(0.5 * 1 / 6)


def test_fuzzy_matching_helpers():
    assert token_set_ratio("essential oil", "essential oils") > 85
    assert token_set_ratio("cool powder snow", "powder snow") == 100
    assert token_set_ratio("long sleeve", "short sleeve") <= 85
    assert token_set_ratio("", "x") == 0
    assert title_words("Eau de Parfum for Women, 3.4 oz") == {"eau", "parfum", "women", "oz"}
    p = _product(attributes=("tea bag", "earl gray"), title="English tea for breakfast")
    assert attribute_matches(p, ["tea tree", "essential oils"]) == 0


# -- pages and navigation ------------------------------------------------------------------------


def test_results_pagination(env):
    env.reset(options={"task_index": 0})
    _, _, _, _, first = env.step("search[t-shirt for men machine wash]")
    assert first["page"] == "results"
    clickables = first["available_actions"]["clickables"]
    assert "next >" in clickables and "< prev" not in clickables and "back to search" in clickables
    page1 = [c for c in clickables if c.startswith("b0")]
    assert len(page1) == 10
    _, _, _, _, second = env.step("click[next >]")
    page2 = [c for c in second["available_actions"]["clickables"] if c.startswith("b0")]
    assert "< prev" in second["available_actions"]["clickables"]
    assert len(page2) == 10 and not set(page1) & set(page2)
    assert "Page 2 (Total results: 50)" in second["messages"][-1]["content"]
    for _ in range(3):
        _, _, _, _, info = env.step("click[next >]")
    assert "next >" not in info["available_actions"]["clickables"]  # page 5 of 50 hits: the last
    _, _, _, _, info = env.step("click[next >]")
    assert info["invalid_action"] and "next >" in info["parse_error"]
    for _ in range(4):
        _, _, _, _, info = env.step("click[< prev]")
    assert [c for c in info["available_actions"]["clickables"] if c.startswith("b0")] == page1


def test_item_sub_pages_and_back_navigation(env):
    info = open_goal_item(env, 2)
    goal = env.goal
    product = env.catalog.by_asin(goal.asin)
    clickables = info["available_actions"]["clickables"]
    for button in ("back to search", "< prev", "description", "features", "reviews", "buy now"):
        assert button in clickables
    for _, values in product.options:
        assert set(values) <= set(clickables)
    value = goal.options[0][1]
    _, _, _, _, info = env.step(f"click[{value}]")
    assert info["chosen_options"] == {goal.options[0][0]: value}
    assert f"You have clicked {value}." in info["messages"][-1]["content"]

    obs, _, _, _, info = env.step("click[description]")
    assert info["page"] == "item_sub_page" and product.description in obs
    assert info["available_actions"] == {
        "has_search_bar": False,
        "clickables": ["back to search", "< prev"],
    }
    _, _, _, _, info = env.step("click[< prev]")
    assert info["page"] == "item" and info["chosen_options"] == {goal.options[0][0]: value}
    obs, _, _, _, info = env.step("click[features]")
    assert all(b in obs for b in product.bullet_points)
    env.step("click[< prev]")
    obs, _, _, _, info = env.step("click[reviews]")
    assert ("No reviews found" in obs) == (not product.reviews)
    env.step("click[< prev]")
    _, _, _, _, info = env.step("click[< prev]")  # item -> its results page, options forgotten
    assert info["page"] == "results" and info["chosen_options"] == {}
    assert goal.asin.lower() in info["available_actions"]["clickables"]
    assert f"[{goal.asin}] (visited)" in info["messages"][-1]["content"]
    _, _, _, _, info = env.step("click[back to search]")
    assert info["page"] == "search" and info["available_actions"]["has_search_bar"]
    assert info["available_actions"]["clickables"] == []


def test_show_attrs_adds_the_attributes_page():
    env = WebShopEnv(num_products=1000, num_goals=200, show_attrs=True, **LEGACY)
    info = open_goal_item(env, 1)
    assert "attributes" in info["available_actions"]["clickables"]
    obs, _, _, _, _ = env.step("click[attributes]")
    product = env.catalog.by_asin(env.goal.asin)
    assert all(f"- {a}" in obs for a in product.attributes)


# -- invalid actions -----------------------------------------------------------------------------


def test_invalid_actions_change_nothing(env):
    open_goal_item(env, 4)
    before = (env.state, env.available_actions())
    cases = {
        "click[no such button]": "not a button",
        "search[red shoes]": "no search bar",
        "buy now": "expected search[query] or click[button]",
        "click[]": "empty",
        "search[" + "x" * 2000 + "]": "at most 1000",
        "x" * 1_000_000: "longer than",
    }
    for action, message in cases.items():
        obs, reward, term, trunc, info = env.step(action)
        assert info["invalid_action"] and message in info["parse_error"]
        assert reward == 0.0 and not term
        assert (env.state, env.available_actions()) == before
        assert obs.endswith(
            f"Your previous reply could not be used: {info['parse_error']} "
            f"{WebShopEnv.format_reminder}"
        )
    _, reward, _, _, info = env.step(None)  # type: ignore[arg-type]
    assert info["invalid_action"] and reward == 0.0


def test_format_penalty_and_truncation():
    env = WebShopEnv(num_products=1000, num_goals=200, max_turns=3, format_penalty=-0.1, **LEGACY)
    env.reset(seed=1)
    _, reward, term, trunc, info = env.step("click[buy now]")  # the search page has no buttons
    assert reward == pytest.approx(-0.1) and "search page has no buttons" in info["parse_error"]
    env.step("search[anything]")
    _, reward, term, trunc, info = env.step("click[back to search]")
    assert trunc and not term and reward == 0.0
    assert info["score"] == 0.0 and info["final_answer"] is None and info["turns"] == 3
    assert info["metrics"] == {"score": 0.0, "success": 0.0}
    with pytest.raises(EnvStateError):
        env.step("search[x]")
    with pytest.raises(ConfigError):
        WebShopEnv(format_penalty=0.5)


def test_parse_action_forms():
    assert parse_action("click[Buy Now]") == ("click", "buy now", None)
    assert parse_action("Action: search[ Red Shoes ]") == ("search", "red shoes", None)
    assert parse_action("<think>click[x]</think>search[tea]") == ("search", "tea", None)
    assert parse_action("Thought: the 2nd one fits.\nclick[b0abc]") == ("click", "b0abc", None)
    assert parse_action("search[a [b] c]") == ("search", "a [b] c", None)
    for bad in ("", "click", "clack[x]", "search[]", "click[x] and more"):
        kind, arg, error = parse_action(bad)
        assert kind is None and arg is None and error


# -- determinism, sharing, copies ---------------------------------------------------------------


def test_seeded_resets_are_deterministic():
    a = WebShopEnv(num_products=1000, num_goals=200)
    b = WebShopEnv(num_products=1000, num_goals=200)
    for seed in range(4):
        assert a.reset(seed=seed)[0] == b.reset(seed=seed)[0]
    assert len({a.reset(seed=s)[1]["task_id"] for s in range(10)}) > 1
    obs, info = a.reset(options={"task_id": "goal-7"})
    assert info["task_id"] == "goal-7" and a.goal.instruction in obs


def test_catalog_and_index_are_shared_not_rebuilt(env):
    other = WebShopEnv(num_products=1000, num_goals=200)
    other.reset(seed=3)
    assert other.catalog is env.catalog and other.site.engine is env.site.engine
    fork = env.fork()
    assert fork.site is env.site and fork.catalog is env.catalog
    clone = copy.deepcopy(env)
    assert clone.site.engine is env.site.engine
    restored = pickle.loads(pickle.dumps(env))
    assert restored.site.engine is env.site.engine  # re-attached through the process-wide cache
    assert restored.state == env.state and restored.goal == env.goal


def test_fork_is_independent(env):
    env.reset(seed=5)
    fork = env.fork()
    fork.step("search[t-shirt]")
    assert env.state.page == "search" and fork.state.page == "results"
    rng = np.random.default_rng(0)
    assert env.demo_action(rng).startswith("search[")
