"""WebShop's Planner / Searcher / Recommender team over routed shared memory (seed 004, app. G)."""

from __future__ import annotations

import pytest
from pettingzoo.test import api_test, parallel_api_test

from orchenv.envs.webshop.baselines import instruction_query
from orchenv.envs.webshop.roles import WebShopRoleGame, webshop_aec_env, webshop_parallel_env
from orchenv.error import ConfigError

SHOP = {"num_products": 1000, "num_goals": 200}


def scripted(game: WebShopRoleGame, role: str) -> str:
    """A scripted team: the planner queries the instruction's words; the searcher searches
    and pages; the recommender (privileged: it knows the goal's ASIN) opens it, picks the
    goal's options and buys."""
    state, goal = game.shop.state, game.shop.goal
    clickables = game.shop.available_actions()["clickables"]
    if role == "planner":
        query = instruction_query(game.instruction)
        return f"<plan>wanted: {game.instruction}</plan><query>{query}</query>"
    target = goal.asin.lower()
    if role == "searcher":
        queries = [m.text for m in game.memory if m.type == "query"]
        if state.page == "search":  # in the parallel view the first round has no query yet
            return f"search[{queries[-1]}]" if queries else "pass"
        if state.page == "results" and target not in clickables and "next >" in clickables:
            return "click[next >]"
        return "pass"
    if state.page == "results" and target in clickables:
        return f"<answer>{target} fits every constraint</answer>\nclick[{target}]"
    if state.page == "item":
        for _, value in goal.options:
            if value not in state.chosen.values():
                return f"click[{value}]"
        return "click[buy now]"
    return "pass"


@pytest.mark.parametrize("router", ["full", "static", "rcr"])
def test_scripted_team_buys_the_goal_with_every_router(router):
    env = webshop_aec_env(router=router, env_kwargs=SHOP)
    for seed in range(3):
        env.reset(seed=seed)
        totals = dict.fromkeys(env.possible_agents, 0.0)
        for agent in env.agent_iter():
            obs, reward, term, trunc, info = env.last()
            totals[agent] += reward
            if term or trunc:
                env.step(None)
                continue
            assert "Instruction: " in obs and "Shared memory routed to you:" in obs
            env.step(scripted(env.game, agent))
            assert not env.infos[agent]["invalid_action"], env.infos[agent]["parse_error"]
        assert totals == dict.fromkeys(env.possible_agents, pytest.approx(1.0))  # team reward
        info = env.game.info("recommender")
        assert info["score"] == pytest.approx(1.0) and info["success"]
        assert info["final_answer"]["asin"] == env.game.shop.goal.asin
        assert info["task_id"] == env.game.shop.goal.id


def test_parallel_team_buys_too():
    env = webshop_parallel_env(router="rcr", env_kwargs=SHOP)
    env.reset(seed=4)
    rewards = {}
    while env.agents:
        actions = {role: scripted(env.game, role) for role in env.agents}
        _, rewards, _, _, infos = env.step(actions)
    assert rewards == dict.fromkeys(env.possible_agents, pytest.approx(1.0))


def test_pages_become_evidence_routed_by_role():
    game = WebShopRoleGame(router="static", env_kwargs=SHOP)
    game.reset(seed=1)
    game.act("planner", scripted(game, "planner"))
    game.act("searcher", scripted(game, "searcher"))
    evidence = [m for m in game.memory if m.type == "evidence"]
    assert len(evidence) == 1 and "Total results" in evidence[0].text
    asin = game.shop.catalog.product(game.shop.state.hits[0]).asin
    assert f"[{asin}]" in game.observe("recommender")  # the static slice has evidence
    assert "type: evidence" not in game.observe("searcher")  # ... the searcher's does not
    assert "type: query" in game.observe("searcher")
    full = WebShopRoleGame(router="full", env_kwargs=SHOP)
    full.reset(seed=1)
    full.act("planner", scripted(full, "planner"))
    full.act("searcher", scripted(full, "searcher"))
    assert "type: evidence" in full.observe("searcher")


def test_rcr_keeps_each_role_within_its_budget():
    routing = {"beta_base": 300, "budget_offsets": {"planner": 0, "searcher": -200}}
    game = WebShopRoleGame(router="rcr", routing=routing, env_kwargs=SHOP)
    game.reset(seed=2)
    for _ in range(3):
        for role in game.roles:
            game.observe(role)
            game.act(role, scripted(game, role))
        game.end_round()
    game.observe("searcher")
    game.observe("recommender")
    assert game.memory.total_tokens > 300
    assert 0 < game.context_tokens["searcher"] <= 100
    assert 0 < game.context_tokens["recommender"] <= 300


def test_out_of_role_and_malformed_actions_change_nothing():
    game = WebShopRoleGame(env_kwargs=SHOP)
    game.reset(seed=3)
    assert game.act("planner", "no tags here")["invalid_action"]
    info = game.act("recommender", "search[red shoes]")
    assert info["invalid_action"] and "only the Searcher searches" in info["parse_error"]
    game.act("searcher", "search[t-shirt for men]")
    product = game.shop.available_actions()["clickables"][-1]
    game.act("recommender", f"click[{product}]")
    assert game.shop.state.page == "item"
    before = game.shop.state
    info = game.act("searcher", "click[buy now]")
    assert info["invalid_action"] and "Recommender's action" in info["parse_error"]
    info = game.act("recommender", "click[description]")
    assert info["invalid_action"] and "Searcher's action" in info["parse_error"]
    assert game.act("searcher", "gibberish")["invalid_action"]
    assert game.act("searcher", "<think>hmm</think>pass") == {
        "invalid_action": False,
        "parse_error": None,
        "action": "pass",
        "context_tokens": 0,
    }
    assert game.shop.state == before


def test_truncation_scores_zero():
    game = WebShopRoleGame(max_turns=2, env_kwargs=SHOP)
    game.reset(seed=0)
    for _ in range(2):
        for role in game.roles:
            game.act(role, "pass")
        game.end_round()
    assert game.truncated and not game.done
    assert game.info("planner")["score"] == 0.0 and game.rewards()["planner"] == 0.0
    with pytest.raises(ConfigError):
        WebShopRoleGame(env_kwargs={"max_turns": 3})


@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array")
@pytest.mark.filterwarnings("ignore:.*space for each agent probably should be")
@pytest.mark.filterwarnings("ignore:We recommend agents to be named")
def test_pettingzoo_api():
    api_test(webshop_aec_env(env_kwargs=SHOP), num_cycles=12)
    parallel_api_test(webshop_parallel_env(env_kwargs=SHOP), num_cycles=12)
