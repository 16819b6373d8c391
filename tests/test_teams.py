"""Role games over shared memory and their PettingZoo AEC / parallel views."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

from orchenv.error import EnvStateError
from orchenv.memory import AgentOutput, RoleSpec, SharedMemory, make_router, render_context
from orchenv.spaces import AnyText, TextObservation
from orchenv.teams import RoleAECEnv, RoleGame, RoleParallelEnv


class SumGame(RoleGame):
    """Two roles add two numbers: the planner writes notes, the solver answers ``ANSWER n``.

    Every reply goes into the shared memory as soon as the role acts, so in the
    turn-based view the solver reads what the planner wrote this round. A right
    answer ends the game with a team reward of 1; running out of rounds gives
    each role -1 (through the ``_on_truncate`` hook).
    """

    roles = ("planner", "solver")
    max_rounds = 3
    name = "sum_game"

    def __init__(self) -> None:
        super().__init__()
        self.memory = SharedMemory("estimate", novelty_threshold=1.0)
        self.router = make_router("full", {role: RoleSpec(role) for role in self.roles})
        self.a = self.b = 0
        self.answer: int | None = None
        self.truncations_seen = 0
        self.closed = False

    def _reset(self, options: dict[str, Any]) -> None:
        self.a, self.b = (int(x) for x in self.np_random.integers(0, 1000, size=2))
        self.a = int(options.get("a", self.a))
        self.memory.clear()
        self.memory.write("user", "task", f"Add {self.a} and {self.b}.", round=0, key="task")
        self.answer = None

    def observe(self, role: str) -> str:
        context = render_context(self.router.select(self.memory, role, "solve"))
        return f"You are the {role}. Round {self.round + 1}.\n{context}"

    def act(self, role: str, text: str) -> dict[str, Any]:
        stored = self.memory.update([AgentOutput(role, text, type="note")], round=self.round + 1)
        found = re.search(r"ANSWER\s+(-?\d+)", text) if role == "solver" else None
        if found:
            self.answer = int(found.group(1))
        info = {"stored": len(stored), "answered": found is not None}
        self.set_info(role, info)
        return info

    def _end_round(self) -> None:
        if self.answer == self.a + self.b:
            self.done = True
            self.round_rewards = {role: 1.0 for role in self.roles}

    def _on_truncate(self) -> None:
        self.truncations_seen += 1
        self.round_rewards = {role: -1.0 for role in self.roles}

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
    assert infos["planner"] == {"round": 1, "stored": 1, "answered": False}
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


def test_episodes_truncate_at_max_rounds():
    game = SumGame()
    env = RoleParallelEnv(game)
    env.reset(seed=2)
    for round_index in range(game.max_rounds):
        assert env.agents == ["planner", "solver"] and game.round == round_index
        _, rewards, terms, truncs, _ = env.step({"planner": "hmm", "solver": "ANSWER -5"})
    assert truncs == {"planner": True, "solver": True} and not any(terms.values())
    assert rewards == {"planner": -1.0, "solver": -1.0} and game.truncations_seen == 1
    assert game.round == game.max_rounds and env.agents == []

    game = SumGame()
    aec = RoleAECEnv(game)
    aec.reset(seed=2)
    for _ in range(2 * game.max_rounds):
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
