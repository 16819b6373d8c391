"""Role games over shared memory and their PettingZoo AEC / parallel views."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

from orchenv.error import ConfigError, EnvStateError, UnknownNameError
from orchenv.memory import AgentOutput, RoutingSettings
from orchenv.spaces import AnyText, TextObservation
from orchenv.teams import (
    RoleAECEnv,
    RoleGame,
    RoleParallelEnv,
    TeamRole,
    assign_role_agents,
    inner_env_kwargs,
)


class SumGame(RoleGame):
    """Two roles add two numbers: the planner writes notes, the solver answers ``ANSWER n``.

    Every reply goes into the shared memory as soon as the role acts, so in the
    turn-based view the solver reads what the planner wrote this round. A right
    answer ends the game with a team reward of 1; running out of rounds gives
    each role -1 (through the ``_on_truncate`` hook).
    """

    team = (TeamRole("planner", stage="solve"), TeamRole("solver", stage="solve"))
    role_prompts = {"planner": "You are the planner.", "solver": "You are the solver."}
    default_routing = RoutingSettings(novelty_threshold=1.0)
    name = "sum_game"

    def __init__(self) -> None:
        super().__init__(router="full", max_turns=3)
        self.a = self.b = 0
        self.answer: int | None = None
        self.truncations_seen = 0
        self.closed = False

    def _reset(self, options: dict[str, Any]) -> None:
        self.a, self.b = (int(x) for x in self.np_random.integers(0, 1000, size=2))
        self.a = int(options.get("a", self.a))
        self.memory.write("user", "task", f"Add {self.a} and {self.b}.", round=0, key="task")
        self.answer = None

    def _task_line(self) -> str:
        return f"Add {self.a} and {self.b}."

    def _act(self, role: str, text: str, **kwargs: Any) -> dict[str, Any]:
        stored = self.memory.update([AgentOutput(role, text, type="note")], round=self.round + 1)
        found = re.search(r"ANSWER\s+(-?\d+)", text) if role == "solver" else None
        if found:
            self.answer = int(found.group(1))
        return {"stored": len(stored), "answered": found is not None}

    def _end_round(self) -> None:
        if self.answer == self.a + self.b:
            self.done = True
            self.round_rewards = {role: 1.0 for role in self.roles}

    def _on_truncate(self) -> None:
        self.truncations_seen += 1
        self.round_rewards = {role: -1.0 for role in self.roles}

    def summary(self) -> dict[str, Any]:
        return {"final_answer": self.answer, "correct": self.answer == self.a + self.b}

    def info(self, role: str) -> dict[str, Any]:
        return {**super().info(role), "round": self.round}

    def close(self) -> None:
        self.closed = True


def right_answer(game: SumGame) -> str:
    return f"ANSWER {game.a + game.b}"


# -- PettingZoo's own checks -----------------------------------------------------------------
# text spaces are neither arrays nor Box/Discrete, and role names are not "player_0": by design
@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array")
@pytest.mark.filterwarnings("ignore:.*space for each agent probably should be")
@pytest.mark.filterwarnings("ignore:We recommend agents to be named")
def test_aec_view_passes_the_pettingzoo_api_test():
    api_test(RoleAECEnv(SumGame()), num_cycles=30)


def test_parallel_view_passes_the_pettingzoo_parallel_api_test():
    parallel_api_test(RoleParallelEnv(SumGame()), num_cycles=30)


def test_both_views_are_deterministic_under_a_seed():
    seed_test(lambda: RoleAECEnv(SumGame()), num_cycles=10)
    parallel_seed_test(lambda: RoleParallelEnv(SumGame()), num_cycles=10)
    env = RoleParallelEnv(SumGame())
    first = env.reset(seed=3)[0]
    assert env.reset(seed=3)[0] == first and env.reset(seed=4)[0] != first


# -- turn order and what each role sees ---------------------------------------------------------
def test_aec_later_roles_see_what_earlier_roles_wrote_this_round():
    env = RoleAECEnv(SumGame())
    env.reset(seed=0)
    assert env.agent_selection == "planner"
    obs, reward, terminated, truncated, info = env.last()
    assert isinstance(obs, TextObservation) and obs.dtype == AnyText().dtype
    assert "Add" in obs and "carry the tens" not in obs
    env.step("carry the tens first")
    assert env.agent_selection == "solver"
    assert "carry the tens first" in env.last()[0]  # same round, earlier role
    assert env.infos["planner"]["stored"] == 1
    env.step("I am not sure yet")
    assert env.agent_selection == "planner"
    assert "I am not sure yet" in env.last()[0]  # next round: the later role's reply
    assert env.infos["planner"]["round"] == 1


def test_parallel_roles_all_observe_the_start_of_round_memory():
    game = SumGame()
    env = RoleParallelEnv(game)
    observations, infos = env.reset(seed=0)
    assert set(observations) == {"planner", "solver"} and set(infos) == {"planner", "solver"}
    start = game.observe("solver")
    observations, rewards, terms, truncs, infos = env.step(
        {"planner": "carry the tens first", "solver": "I am not sure yet"}
    )
    # the solver acted without the planner's note; both see both notes next round
    assert "carry the tens first" not in start
    for role in ("planner", "solver"):
        assert "carry the tens first" in observations[role]
        assert "I am not sure yet" in observations[role]
    tokens = infos["planner"].pop("context_tokens")  # what the router gave it at the start
    assert infos["planner"] == {"round": 1, "stored": 1, "answered": False} and tokens > 0
    aec = RoleAECEnv(SumGame())
    aec.reset(seed=0)
    aec.step("carry the tens first")
    assert aec.observe("solver") != start  # the AEC solver does see it


# -- rewards and episode end ---------------------------------------------------------------
def test_team_rewards_arrive_when_the_task_is_solved():
    game = SumGame()
    env = RoleAECEnv(game)
    env.reset(seed=1)
    env.step("think")
    env.step("ANSWER -1")  # wrong: round 1 ends without reward
    assert env.rewards == {"planner": 0.0, "solver": 0.0}
    assert not any(env.terminations.values())
    env.step("think again")
    env.step(right_answer(game))
    assert env.rewards == {"planner": 1.0, "solver": 1.0}
    assert all(env.terminations.values()) and not any(env.truncations.values())
    for role in ("planner", "solver"):
        assert env.agent_selection == role
        _, reward, terminated, truncated, _ = env.last()
        assert (reward, terminated, truncated) == (1.0, True, False)
        env.step(None)
    assert env.agents == []

    par_game = SumGame()
    par = RoleParallelEnv(par_game)
    par.reset(seed=1)
    _, rewards, terms, truncs, _ = par.step({"planner": "x", "solver": right_answer(par_game)})
    assert rewards == {"planner": 1.0, "solver": 1.0}
    assert terms == {"planner": True, "solver": True} and not any(truncs.values())
    assert par.agents == []


def test_episodes_truncate_at_max_turns():
    game = SumGame()
    env = RoleParallelEnv(game)
    env.reset(seed=2)
    for round_index in range(game.max_turns):
        assert env.agents == ["planner", "solver"] and game.round == round_index
        _, rewards, terms, truncs, _ = env.step({"planner": "hmm", "solver": "ANSWER -5"})
    assert truncs == {"planner": True, "solver": True} and not any(terms.values())
    assert rewards == {"planner": -1.0, "solver": -1.0} and game.truncations_seen == 1
    assert game.round == game.max_turns and env.agents == []

    game = SumGame()
    aec = RoleAECEnv(game)
    aec.reset(seed=2)
    for _ in range(2 * game.max_turns):
        aec.step("ANSWER -5")
    assert all(aec.truncations.values()) and not any(aec.terminations.values())
    assert aec._cumulative_rewards == {"planner": -1.0, "solver": -1.0}
    assert game.truncations_seen == 1


def test_non_string_actions_do_not_crash():
    game = SumGame()
    aec = RoleAECEnv(game)
    aec.reset(seed=0)
    aec.step(12345)
    aec.step(None)  # a live agent's None is text too, not a dead step
    aec.step({"model": ["a", 1]})
    texts = [item.text for item in game.memory]
    assert "12345" in texts and "None" in texts and "{'model': ['a', 1]}" in texts

    par_game = SumGame()
    par = RoleParallelEnv(par_game)
    par.reset(seed=0)
    par.step({"planner": b"\x00\xff", "solver": 3.5})
    assert {item.text for item in par_game.memory} >= {"b'\\x00\\xff'", "3.5"}


# -- misuse -----------------------------------------------------------------------------
def test_step_before_reset_or_after_the_end_is_an_env_state_error():
    with pytest.raises(EnvStateError, match="reset"):
        RoleAECEnv(SumGame()).step("hello")
    with pytest.raises(EnvStateError, match="reset"):
        RoleParallelEnv(SumGame()).step({"planner": "hello"})

    game = SumGame()
    aec = RoleAECEnv(game)
    aec.reset(seed=0)
    aec.step("x")
    aec.step(right_answer(game))
    aec.step(None)
    aec.step(None)
    with pytest.raises(EnvStateError, match="over"):
        aec.step("more")

    par_game = SumGame()
    par = RoleParallelEnv(par_game)
    par.reset(seed=0)
    with pytest.raises(EnvStateError, match="not acting"):
        par.step({"planner": "x", "judge": "y"})
    par.step({"solver": right_answer(par_game)})  # a role may sit a round out
    with pytest.raises(EnvStateError, match="over"):
        par.step({"planner": "x"})


def test_render_and_close_reach_the_game():
    game = SumGame()
    env = RoleAECEnv(game, render_mode="ansi")
    env.reset(seed=0, options={"a": 7})
    assert env.render() == game.observe("planner") and "Add 7 and" in env.render()
    env.close()
    assert game.closed
    par = RoleParallelEnv(SumGame())
    par.reset(seed=0)
    assert par.render() is None  # no render mode chosen


# -- what the base owns --------------------------------------------------------------------
def test_role_prompts_share_one_shape_and_the_summary_arrives_at_the_end():
    game = SumGame()
    game.reset(seed=0, options={"a": 7})
    system, user = game.role_messages("solver")
    assert system == {"role": "system", "content": "You are the solver."}
    lines = user["content"].split("\n")
    assert lines[0] == f"Add 7 and {game.b}." and lines[1] == "Round 1 of 3; your stage: solve."
    assert lines[2] == "Shared memory routed to you:" and "type: task" in user["content"]
    assert game.observe("solver") == "You are the solver.\n\n" + user["content"]
    assert game.context_tokens["solver"] == game.memory.total_tokens > 0
    assert "final_answer" not in game.info("solver")
    game.act("solver", f"ANSWER {7 + game.b}")
    game.end_round()
    info = game.info("planner")
    assert info["final_answer"] == 7 + game.b and info["correct"] and info["turns"] == 1
    assert info["memory_tokens"] == game.memory.total_tokens
    assert game.act("planner", "more")["parse_error"] == "the episode is over"


def test_act_cuts_long_replies_and_rejects_unknown_roles():
    game = SumGame()
    game.max_reply_chars = 10
    game.reset(seed=0)
    game.act("planner", "x" * 50)
    assert game.memory.items[-1].text == "x" * 10
    with pytest.raises(UnknownNameError, match="judge"):
        game.act("judge", "hello")
    with pytest.raises(UnknownNameError, match="judge"):
        game.observe("judge")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_max_turns_must_be_a_positive_int(bad):
    with pytest.raises(ConfigError, match="max_turns"):
        RoleGame.__init__(SumGame.__new__(SumGame), max_turns=bad)


def test_budget_overrides_must_name_a_role():
    class Budgeted(SumGame):
        default_routing = RoutingSettings(
            beta_base=100, budget_offsets={"planner": 10, "solver": 20}, novelty_threshold=1.0
        )

        def __init__(self, **kwargs: Any) -> None:
            RoleGame.__init__(self, router="rcr", **kwargs)

    assert Budgeted().router.budget("planner") == 110
    changed = Budgeted(routing={"budget_offsets": {"solver": -50}})  # entries replace entries
    assert changed.router.budget("solver") == 50 and changed.router.budget("planner") == 110
    replaced = Budgeted(routing=RoutingSettings(budget_offsets={"solver": -50}))  # all of them
    assert replaced.router.budget("solver") == 1998 and replaced.router.budget("planner") == 2048
    with pytest.raises(UnknownNameError, match="judge"):
        Budgeted(routing={"budget_offsets": {"judge": 5}})
    with pytest.raises(UnknownNameError, match="judge"):
        Budgeted(roles=("planner", "judge"))


def test_routing_settings_are_checked_and_mappings_change_the_defaults():
    class Routed(SumGame):
        default_routing = RoutingSettings(beta_base=100, decay=1.0, novelty_threshold=1.0)

        def __init__(self, **kwargs: Any) -> None:
            RoleGame.__init__(self, router="rcr", **kwargs)

    assert Routed().routing == Routed.default_routing
    changed = Routed(routing={"beta_base": 50, "weights": [0.5, 1, 1]}).routing
    assert changed == RoutingSettings(
        beta_base=50, weights=(0.5, 1.0, 1.0), decay=1.0, novelty_threshold=1.0
    )
    assert Routed(routing=RoutingSettings()).routing == RoutingSettings()  # replaces them all
    with pytest.raises(UnknownNameError, match="beta_base"):
        Routed(routing={"beta_bse": 5})
    with pytest.raises(ConfigError, match="novelty_threshold"):
        Routed(routing={"novelty_threshold": 0.0})
    with pytest.raises(ConfigError, match="budget_offsets"):
        RoutingSettings(budget_offsets={"planner": 1.5})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="routing"):
        Routed(routing=5)  # type: ignore[arg-type]


def test_every_role_needs_a_prompt_and_inner_envs_keep_the_game_s_settings():
    class Mute(SumGame):
        role_prompts = {"planner": "You are the planner."}

    with pytest.raises(ConfigError, match="no prompt for 'solver'"):
        Mute()
    assert inner_env_kwargs({"split": "test"}, rounds=10, actions_per_round=2, expert=None) == {
        "split": "test",
        "expert": None,
        "max_turns": 22,
    }
    for key in ("max_turns", "expert"):
        with pytest.raises(ConfigError, match=key):
            inner_env_kwargs({key: 1}, rounds=10, actions_per_round=2, expert=None)


def test_assign_role_agents_checks_roles_and_agents():
    pool = ("searcher", "recommender", "verifier", "judge")
    assert assign_role_agents(pool, ("searcher", "recommender"), {}) == {
        "searcher": "searcher",
        "recommender": "recommender",
    }
    assert assign_role_agents(pool, ("searcher",), {"searcher": "verifier"}) == {
        "searcher": "verifier"
    }
    with pytest.raises(UnknownNameError, match="serchr"):
        assign_role_agents(pool, ("searcher",), {"searcher": "serchr"})
    with pytest.raises(UnknownNameError, match="janitor"):
        assign_role_agents(pool, ("searcher",), {"janitor": "judge"})
    known = ("searcher", "verifier")  # an override for a role this game does not play
    assert assign_role_agents(pool, ("searcher",), {"verifier": "judge"}, known=known) == {
        "searcher": "searcher"
    }
