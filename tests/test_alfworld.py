"""orch/ALFWorld-v0 on alfworld's engine: bundled games, experts, commands, fork, data, hygiene."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("alfworld")

from orchenv.envs.alfworld import ALFWorldEnv  # noqa: E402
from orchenv.envs.alfworld.authoring import SPECS, game_data, traj_data  # noqa: E402
from orchenv.envs.alfworld.choices import SLOT_FEATURES, STATE_FEATURES, command_features  # noqa: E402
from orchenv.envs.alfworld.engine import ALFWorldEngine, idle_engines  # noqa: E402
from orchenv.envs.alfworld.games import BUNDLED_ROOT, DATA_SUBDIR, TASK_TYPES, GameCatalog  # noqa: E402
from orchenv.error import ConfigError, DataError, DependencyError, UnknownNameError  # noqa: E402

BUNDLED = GameCatalog.build(data_dir=BUNDLED_ROOT)
ALL_GAMES = list(BUNDLED.all())


@pytest.fixture(scope="module")
def expert_env():
    env = ALFWorldEnv(expert="planner", data_dir=BUNDLED_ROOT)
    yield env
    env.close()


@pytest.fixture(scope="module")
def env():
    env = ALFWorldEnv(data_dir=BUNDLED_ROOT)
    yield env
    env.close()


@pytest.fixture(scope="module")
def chat_env():
    """orchenv's prompt and lenient command matching (the named departures)."""
    env = ALFWorldEnv(data_dir=BUNDLED_ROOT, observation_mode="chat", command_matching="lenient")
    yield env
    env.close()


def play(env, commands_for, *, seed=None, options=None, limit=None):
    """Run one episode; ``commands_for(info)`` gives the next command. Returns (steps, infos)."""
    _, info = env.reset(seed=seed, options=options)
    infos, done, steps = [info], False, 0
    while not done and (limit is None or steps < limit):
        _, reward, term, trunc, info = env.step(commands_for(info))
        infos.append({**info, "reward": reward})
        done, steps = term or trunc, steps + 1
    return steps, infos


# -- the bundled game set ----------------------------------------------------------------------
def test_bundled_set_covers_every_task_type_in_both_splits():
    assert {g.task_type for g in BUNDLED.games("train")} == set(TASK_TYPES.values())
    assert {g.task_type for g in BUNDLED.games("valid_unseen")} == set(TASK_TYPES.values())
    # issue 38: 6 -> 20 held-out games (more and longer test games)
    assert len(BUNDLED.games("train")) == 12 and len(BUNDLED.games("valid_unseen")) == 20
    assert len(ALL_GAMES) == 32
    with pytest.raises(DataError, match="no ALFWorld games in split 'valid_seen'"):
        BUNDLED.games("valid_seen")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.game_id)
def test_committed_games_match_their_specs(spec):
    """authoring.py regenerates exactly the committed files (apart from the expert's check)."""
    folder = BUNDLED_ROOT / DATA_SUBDIR / spec.game_id
    committed = json.loads((folder / "game.tw-pddl").read_text())
    fresh = game_data(spec)
    for key in ("pddl_domain", "grammar", "pddl_problem"):
        assert committed[key] == fresh[key], key
    assert committed["solvable"] is True and committed["walkthrough"]
    assert json.loads((folder / "traj_data.json").read_text()) == traj_data(spec)


@pytest.mark.parametrize("game", ALL_GAMES, ids=lambda g: g.id.split("/")[1])
def test_planner_expert_solves_every_bundled_game(expert_env, game):
    steps, infos = play(
        expert_env, lambda info: info["privileged"]["expert_plan"][0], options={"task_id": game.id}
    )
    end = infos[-1]
    assert all(i["extra.expert_plan"] == i["privileged"]["expert_plan"] for i in infos)
    assert end["won"] and end["correct"] and end["reward"] == 1.0
    assert end["metrics"] == {"success": 1.0}
    assert end["task_id"] == game.id and end["turns"] == steps <= 12
    assert end["final_answer"] == json.loads(Path(game.path).read_text())["walkthrough"][-1]
    assert not any(i["invalid_action"] for i in infos)


def test_random_agent_rarely_wins(env):
    """Random admissible commands (fixed seeds, 30 steps) solve far fewer games than the expert."""
    wins = 0
    for i, game in enumerate(ALL_GAMES):
        rng = np.random.default_rng(i)
        _, infos = play(
            env,
            lambda info, rng=rng: info["admissible_commands"][
                int(rng.integers(len(info["admissible_commands"])))
            ],
            options={"task_id": game.id},
            limit=30,
        )
        wins += bool(infos[-1]["won"])
    assert wins / len(ALL_GAMES) <= 0.15  # the planner above: 32 of 32


def test_handcoded_expert_through_the_env():
    env = ALFWorldEnv(expert="handcoded", data_dir=BUNDLED_ROOT)
    game = next(g for g in BUNDLED.games("train") if g.task_type == "pick_and_place_simple")
    _, infos = play(
        env,
        lambda info: info["privileged"]["expert_plan"][0],
        options={"task_id": game.id},
        limit=60,
    )
    env.close()
    assert infos[-1]["won"]


# -- raw mode: alfworld's own text and infos ------------------------------------------------------
GOLDEN_GAME = "train/look_at_obj_in_light-Book-None-DeskLamp-103/trial_orchenv_103"
#: (command, observation) of a scripted session, written out by hand: the banner, room and
#: task line at reset, then the engine's feedback verbatim. alfworld's text env matches
#: commands exactly (after stripping the ends), so the chatty first command does nothing.
GOLDEN_SESSION = [
    (
        None,
        "-= Welcome to TextWorld, ALFRED! =-\n\n"
        "You are in the middle of a room. Looking quickly around you, you see a bed 1, a desk 1, "
        "a drawer 1, a dresser 1, a garbagecan 1, and a shelf 1.\n\n"
        "Your task is to: look at book under the desklamp.",
    ),
    ("> Go to bed 1.", "Nothing happens."),
    ("  go to bed 1\n", "You arrive at bed 1. On the bed 1, you see a book 1."),
    ("take book 1 from bed 1", "You pick up the book 1 from the bed 1."),
    ("go to desk 1", "You arrive at desk 1. On the desk 1, you see a desklamp 1."),
    ("use desklamp 1", "You turn on the desklamp 1."),
]


def test_raw_mode_golden_session(expert_env):
    """Default observation = the engine's text; info has alfworld's keys under its names."""
    obs, info = expert_env.reset(options={"task_id": GOLDEN_GAME})
    assert expert_env.observation_mode == "raw" and expert_env.command_matching == "original"
    assert obs == info["feedback"] == GOLDEN_SESSION[0][1]
    assert info["messages"] == [{"role": "user", "content": obs}]
    assert info["extra.gamefile"] == str(BUNDLED_ROOT / DATA_SUBDIR / GOLDEN_GAME / "game.tw-pddl")
    assert info["admissible_commands"] == [
        "go to bed 1", "go to desk 1", "go to drawer 1", "go to dresser 1",
        "go to garbagecan 1", "go to shelf 1", "help", "inventory", "look",
    ]  # fmt: skip
    assert info["won"] is False and info["extra.expert_plan"][0] == "go to bed 1"
    for i, (command, expected) in enumerate(GOLDEN_SESSION[1:], start=1):
        obs, reward, terminated, truncated, info = expert_env.step(command)
        assert obs == info["feedback"] == expected, command
        assert info["extra.gamefile"] is None  # AlfredInfos fills it in on reset only
        assert info["invalid_action"] is (i == 1)
        assert (reward, terminated, info["won"]) == (
            (1.0, True, True) if i == 5 else (0, False, False)
        )
    assert not truncated and info["extra.expert_plan"] == []
    assert info["turns"] == 5 and info["final_answer"] == "use desklamp 1"


def test_original_matching_strips_only(env):
    _, info = env.reset(options={"task_id": GOLDEN_GAME})
    for near_miss in ("Go to bed 1", "go to bed 1.", "> go to bed 1", "go  to bed 1"):
        obs, _, _, _, info = env.step(near_miss)
        assert obs == "Nothing happens." and info["invalid_action"]
        assert 'command_matching="lenient" would accept' in info["parse_error"]
    assert env.step("\tgo to bed 1  ")[0].startswith("You arrive at bed 1.")


def test_modes_are_named_and_checked():
    with pytest.raises(UnknownNameError, match="observation_mode"):
        ALFWorldEnv(observation_mode="text")
    with pytest.raises(UnknownNameError, match="command_matching"):
        ALFWorldEnv(command_matching="fuzzy")
    with pytest.raises(ConfigError, match='observation_mode="chat"'):
        ALFWorldEnv(history=2)


def test_split_aliases_include_alfworlds_names():
    env = ALFWorldEnv(data_dir=BUNDLED_ROOT)
    splits = env.task_source.splits
    assert "test" in splits and "eval_out_of_distribution" in splits
    assert "validation" not in splits  # the bundled set has no valid_seen games
    unseen = [g.id for g in BUNDLED.games("valid_unseen")]
    for name in ("test", "eval_out_of_distribution"):
        assert [g.id for g in env.task_source.games(name)] == unseen
    env.close()


# -- chat mode (orchenv's prompt), commands, episode end ------------------------------------------
def test_observation_has_goal_feedback_and_admissible_commands(chat_env):
    env = chat_env
    obs, info = env.reset(seed=0, options={"task_type": "pick_heat_then_place_in_recep"})
    assert info["task_type"] == "pick_heat_then_place_in_recep"
    assert f"Your task is to: {info['goal']}" in obs
    assert "hot" in info["goal"] or "heat" in info["goal"]  # the goal library's two phrasings
    assert "You are in the middle of a room" in obs
    assert all(f"- {c}" in obs for c in info["admissible_commands"])
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert info["calls"] == [] and info["cost_usd"] == 0.0 and info["valid_agents"] == []
    command = next(c for c in info["admissible_commands"] if c.startswith("go to"))
    obs, *_, info = env.step(command)
    assert f"Observation: You arrive at {command[6:]}" in obs


def test_lenient_commands_are_normalised_and_bad_ones_do_nothing(chat_env):
    env = chat_env
    _, info = env.reset(seed=4)
    target = next(c for c in info["admissible_commands"] if c.startswith("go to"))
    _, _, _, _, info = env.step(f"<think>plan</think> > {target.upper()}.")
    assert not info["invalid_action"] and env.steps[-1] == (target, env.state.feedback)
    before = list(info["admissible_commands"])
    for bad in ("", "fly to the moon", "go to " + target[6:-1] + "9", "x" * 1_000_000):
        obs, reward, term, trunc, info = env.step(bad)
        assert info["invalid_action"] and info["parse_error"] and reward == 0.0
        assert env.state.feedback == "Nothing happens." and info["admissible_commands"] == before
        assert not (term or trunc)
        assert "Observation: Nothing happens." in obs
        assert "could not be used" not in obs  # ALFWorld's own feedback only, as the original
    assert "Did you mean" in env.step("go to " + target[6:-2])[-1]["parse_error"]
    assert env.turn == 6
    assert all(len(c) < 100 for c in env._engine.history), "huge commands never reach the engine"


def test_truncation_after_max_turns():
    env = ALFWorldEnv(max_turns=3, data_dir=BUNDLED_ROOT, history=2, observation_mode="chat")
    env.reset(seed=0)
    results = [env.step("look") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
    end = results[-1][-1]
    assert end["correct"] is False and end["turns"] == 3 and end["final_answer"] == "look"
    assert end["metrics"] == {"success": 0.0}
    assert results[-1][0].count("> look") == 2  # history=2 shows the last two steps
    env.close()


def test_game_choice_by_seed_id_type_and_filter(env):
    firsts = [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    assert firsts == [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    assert len(set(firsts)) > 3 and all(t.startswith("train/") for t in firsts)
    unseen = BUNDLED.games("valid_unseen")[0]
    assert env.reset(options={"task_id": unseen.id})[1]["task_id"] == unseen.id
    for kind in (2, "pick_two_obj_and_place"):
        name = TASK_TYPES[kind] if isinstance(kind, int) else kind
        assert env.reset(options={"task_type": kind})[1]["task_type"] == name
    with pytest.raises(UnknownNameError, match="Did you mean"):
        env.reset(options={"task_type": "pick_and_place"})
    with pytest.raises(UnknownNameError, match="Did you mean"):
        env.reset(options={"task_id": unseen.id[:-1]})
    only = ALFWorldEnv(task_types=[5], split="valid_unseen", data_dir=BUNDLED_ROOT)
    assert {only.reset(seed=s)[1]["task_type"] for s in range(4)} == {TASK_TYPES[5]}
    only.close()


# -- fork ---------------------------------------------------------------------------------------
def test_fork_replays_the_episode_and_is_independent(expert_env):
    expert_env.reset(options={"task_type": "pick_cool_then_place_in_recep"})
    plan = expert_env.expert_plan()
    for command in plan[:3]:
        expert_env.step(command)
    snapshot = (expert_env.turn, list(expert_env.steps), expert_env.state)
    fork = expert_env.fork()
    assert (
        fork.turn,
        fork.steps,
        fork.state,
    ) == snapshot and fork._engine is not expert_env._engine
    fork.step("inventory")
    fork_rest = [fork.step(c) for c in plan[3:]]
    assert fork_rest[-1][2] and fork_rest[-1][-1]["won"], "the copy plays on from the same state"
    assert (expert_env.turn, expert_env.steps, expert_env.state) == snapshot, "original untouched"
    rest = [expert_env.step(c) for c in plan[3:]]
    assert rest[-1][-1]["won"] and expert_env.state == fork.state
    fork.close()


def test_fork_is_deferred_until_a_command_reaches_the_game(env):
    """A fork loads and replays only when sent a command that changes the game; an
    inadmissible one is answered as the engine answers it, without an engine."""
    env.reset(options={"task_id": GOLDEN_GAME})
    env.step("go to bed 1")
    env.step("go to the moon")  # the copied state is a "Nothing happens." one
    fork = env.fork()
    assert fork._engine._slot is None
    obs, _, _, _, info = fork.step("Take book 1 from bed 1")
    assert obs == "Nothing happens." and info["invalid_action"] and fork._engine._slot is None
    obs, _, _, _, info = fork.step("take book 1 from bed 1")
    assert obs == "You pick up the book 1 from the bed 1." and fork._engine._slot is not None
    assert "move book 1 to bed 1" in info["admissible_commands"]
    assert env.state.feedback == "Nothing happens.", "the original is untouched"
    assert (
        env.step("take book 1 from bed 1")[-1]["admissible_commands"] == info["admissible_commands"]
    )
    fork.close()


def test_engine_free_answer_equals_the_engines(expert_env):
    """The "Nothing happens." state built without the engine is the one alfworld's stack
    returns for the same command (feedback, commands, won, the planner's plan)."""
    expert_env.reset(options={"task_id": GOLDEN_GAME})
    engine = expert_env._engine
    for command in (
        "go to bed 1",
        "Take book 1 from bed 1",
        "use desklamp 2",
        "take book 1 from bed 1",
    ):
        before = engine.last
        ours = engine.step(command)
        if ours.feedback != "Nothing happens.":
            continue
        state, score, done = engine._stack.step(command)  # the same command, to the stack itself
        assert (str(state["feedback"]), tuple(state["admissible_commands"])) == (
            ours.feedback,
            before.admissible_commands,
        )
        assert ours.admissible_commands == before.admissible_commands
        assert (bool(state["won"]), float(score), state.get("extra.gamefile")) == (
            ours.won,
            ours.score,
            None,
        )
        assert tuple(state["extra.expert_plan"]) == ours.expert_plan == before.expert_plan


# -- data: ALFWORLD_DATA, explicit files, empty lists, missing extra ----------------------------------
def _copy_game(game, root: Path, split: str, name: str) -> Path:
    folder = root / DATA_SUBDIR / split / name / "trial_T1"
    shutil.copytree(Path(game.path).parent, folder)
    return folder


def test_full_data_layout_under_alfworld_data(tmp_path, monkeypatch):
    heat = next(g for g in ALL_GAMES if g.task_type == "pick_heat_then_place_in_recep")
    _copy_game(heat, tmp_path, "valid_seen", "pick_heat_then_place_in_recep-Egg-None-Fridge-7")
    _copy_game(heat, tmp_path, "valid_seen", "pick_heat_then_place_in_recep-Egg-None-Sliced-8")
    unsolvable = _copy_game(heat, tmp_path, "valid_seen", "pick_heat_then_place_in_recep-Egg-X-9")
    data = json.loads((unsolvable / "game.tw-pddl").read_text())
    (unsolvable / "game.tw-pddl").write_text(json.dumps({**data, "solvable": False}))
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    env = ALFWorldEnv(split="valid_seen")
    _, info = env.reset(seed=0)
    assert env.catalog.source == "ALFWORLD_DATA"
    assert [g.id for g in env.catalog.games("valid_seen")] == [info["task_id"]]
    assert info["task_id"] == "valid_seen/pick_heat_then_place_in_recep-Egg-None-Fridge-7/trial_T1"
    with pytest.raises(DataError, match="no ALFWorld games in split 'train'"):
        ALFWorldEnv(split="train").reset(seed=0)
    env.close()


def test_explicit_game_files_and_empty_lists(tmp_path):
    with pytest.raises(DataError, match="game_files is empty"):
        ALFWorldEnv(game_files=[])
    with pytest.raises(DataError, match="expected json_2.1.1"):
        ALFWorldEnv(data_dir=tmp_path).reset(seed=0)
    picked = ALL_GAMES[:2]
    env = ALFWorldEnv(game_files=[g.path for g in picked])
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(6)}
    assert ids == {g.id.split("/", 1)[1] for g in picked}
    env.close()
    heat = next(g for g in ALL_GAMES if g.task_type == "pick_heat_then_place_in_recep")
    with pytest.raises(DataError, match="no ALFWorld games in split 'custom' of task types"):
        ALFWorldEnv(game_files=[heat.path], task_types=[1]).reset(seed=0)
    with pytest.raises(DataError, match="has no pick_and_place_simple game"):
        ALFWorldEnv(game_files=[heat.path]).reset(options={"task_type": 1})
    lonely = tmp_path / "game.tw-pddl"
    lonely.write_text("{}")
    with pytest.raises(DataError, match="traj_data.json"):
        ALFWorldEnv(game_files=[lonely]).reset()


def test_import_is_cheap_and_a_missing_extra_names_it():
    probe = (
        "import sys\n"
        "import orchenv.envs.alfworld as m\n"
        "assert not [k for k in sys.modules if k.split('.')[0] in ('alfworld', 'textworld')]\n"
        "sys.modules['alfworld'] = None\n"
        "from orchenv.error import DependencyError\n"
        "try:\n"
        "    m.ALFWorldEnv().reset(seed=0)\n"
        "except DependencyError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert 'pip install "orchenv[alfworld]"' in out.stdout
    assert issubclass(DependencyError, ImportError)


# -- resource hygiene -----------------------------------------------------------------------------
def _children() -> int:
    try:
        import psutil

        return len(psutil.Process().children(recursive=True))
    except ImportError:
        me = str(os.getpid())
        count = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            count += stat.rsplit(")", 1)[1].split()[1] == me
        return count


def _resources() -> tuple[int, int, int, int]:
    maps = len(Path("/proc/self/maps").read_text().splitlines())
    return len(os.listdir("/proc/self/fd")), threading.active_count(), _children(), maps


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_fifty_envs_leak_nothing():
    game = ALL_GAMES[0]

    def cycle() -> None:
        env = ALFWorldEnv(data_dir=BUNDLED_ROOT)
        _, info = env.reset(options={"task_id": game.id})
        env.step(info["admissible_commands"][0])
        env.fork().close()
        env.close()

    cycle()  # warm: imports, the first engine instances
    fds, threads, children, maps = _resources()
    idle = idle_engines()
    for _ in range(50):
        cycle()
    after = _resources()
    assert after[:3] == (fds, threads, children)
    assert idle_engines() == idle, "closed engines are recycled, not re-created"
    assert after[3] <= maps + 20, "no new copies of the planner library are mapped"


def test_engine_rejects_an_unknown_expert():
    with pytest.raises(ValueError, match="expert"):
        ALFWorldEngine(ALL_GAMES[0].path, expert="oracle")
    with pytest.raises(UnknownNameError):
        ALFWorldEnv(expert="oracle")


# -- observation features (orchenv.discrete) ---------------------------------------------------
def feature_table(goal, steps, choices):
    """``command_features`` as ({slot: {name: value}}, {name: value})."""
    out = command_features(goal, steps, choices)
    k = len(SLOT_FEATURES)
    slots = {
        c: dict(zip(SLOT_FEATURES, out[i * k : (i + 1) * k], strict=True))
        for i, c in enumerate(choices)
    }
    return slots, dict(zip(STATE_FEATURES, out[len(choices) * k :], strict=True))


def test_command_features_read_the_goal_and_the_transcript():
    """A heat task, step by step: which take, move, heat and go commands advance the goal
    follows from the goal line and the feedback (what is in hand, heated, seen, visited)."""
    goal = "put a hot egg in diningtable."
    steps = [
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see nothing."),
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1, and a apple 1."),
    ]  # fmt: skip
    choices = ["take egg 1 from fridge 1", "take apple 1 from fridge 1", "go to fridge 1",
               "go to microwave 1", "go to diningtable 1", "go to countertop 1", "look", None]  # fmt: skip
    slots, state = feature_table(goal, steps, choices)
    assert slots["take egg 1 from fridge 1"]["advances-goal"] == 1.0
    assert slots["take egg 1 from fridge 1"]["names-goal-object"] == 1.0
    assert slots["take apple 1 from fridge 1"]["advances-goal"] == 0.0
    assert slots["go to fridge 1"]["go-unvisited"] == 0.0
    assert slots["go to microwave 1"]["go-unvisited"] == 1.0
    assert slots["go to countertop 1"]["go-unvisited"] == 0.0
    assert slots["go to diningtable 1"]["names-goal-receptacle"] == 1.0
    assert slots["go to diningtable 1"]["goes-toward-goal"] == 0.0  # nothing in hand yet
    assert set(slots["look"].values()) == {0.0} and set(slots[None].values()) == {0.0}
    assert state["goal-heat"] == 1.0 and state["holding"] == 0.0 and state["goal-two"] == 0.0

    steps.append(("take egg 1 from fridge 1", "You pick up the egg 1 from the fridge 1."))
    choices = ["move egg 1 to fridge 1", "go to diningtable 1", "go to microwave 1"]
    slots, state = feature_table(goal, steps, choices)
    assert state["holding-goal-object"] == 1.0 and state["held-object-changed"] == 0.0
    assert slots["move egg 1 to fridge 1"]["advances-goal"] == 0.0
    assert slots["go to diningtable 1"]["goes-toward-goal"] == 0.0  # not hot yet

    steps.append(("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."))
    choices = ["heat egg 1 with microwave 1", "go to countertop 1", "go to fridge 1"]
    slots, _ = feature_table(goal, steps, choices)
    assert slots["heat egg 1 with microwave 1"]["advances-goal"] == 1.0
    assert slots["go to countertop 1"]["go-unvisited"] == 1.0  # not since the hands changed
    assert slots["go to fridge 1"]["go-unvisited"] == 0.0  # where the egg was picked up

    steps.append(("heat egg 1 with microwave 1", "You heat the egg 1 using the microwave 1."))
    steps.append(("go to diningtable 1", "You arrive at diningtable 1. On the diningtable 1, you see a apple 1."))  # fmt: skip
    choices = ["move egg 1 to diningtable 1", "take apple 1 from diningtable 1"]
    slots, state = feature_table(goal, steps, choices)
    assert state["held-object-changed"] == 1.0
    assert slots["move egg 1 to diningtable 1"]["advances-goal"] == 1.0
    assert slots["take apple 1 from diningtable 1"]["advances-goal"] == 0.0


#: a fixed linear score of the slot features (no text, no training)
GREEDY_WEIGHTS = {
    "advances-goal": 10.0,
    "goes-toward-goal": 3.0,
    "verb-open": 2.5,
    "go-unvisited": 2.0,
    "verb-take": 0.1,
}


def test_observation_features_suffice_to_solve_the_unseen_games(env, expert_env):
    """The features carry the grounding ALFWorld tests: the best-scored slot under a fixed
    linear score solves every held-out game within the default 50 commands (a random
    command rarely does, above). They are the same with alfworld's expert on (nothing
    privileged is read), and fixed in size."""
    weights = np.array([GREEDY_WEIGHTS.get(name, 0.0) for name in SLOT_FEATURES])
    size = env.choice_slots * len(SLOT_FEATURES) + len(STATE_FEATURES)
    for game in BUNDLED.games("valid_unseen"):
        for e in (env, expert_env):
            e.reset(options={"task_id": game.id})
        done = False
        while not done:
            choices = env.action_choices()
            features = env.observation_features()
            assert features.shape == (size,) and features.dtype == np.float32
            if game is BUNDLED.games("valid_unseen")[0]:
                assert np.array_equal(features, expert_env.observation_features())
            score = features[: len(choices) * len(SLOT_FEATURES)].reshape(len(choices), -1)
            score = score @ weights
            score[[c is None for c in choices]] = -np.inf
            command = choices[int(np.argmax(score))]
            _, _, term, trunc, info = env.step(command)
            if game is BUNDLED.games("valid_unseen")[0]:
                expert_env.step(command)
            done = term or trunc
        assert info["won"], game.id


def test_memoized_parsing_writes_what_textworld_wrote():
    """Issue 40 (CI time): textworld re-parsed its grammar templates on every command (about
    four fifths of a step); the engine now keeps the parse trees. Every feedback, command
    list, win and expert plan is the same as with textworld's own parsing, on every game."""
    import textworld.logic as logic
    from textworld.envs.pddl import textgen

    modules = (textgen, logic)
    first = ALFWorldEngine(ALL_GAMES[0].path)
    first.reset()  # the first engine imports textworld and installs the memoization
    first.close()
    memoized = [m._parse_and_convert for m in modules]
    assert all(getattr(f, "_orchenv_memoized", False) for f in memoized)

    def trace(game) -> list:
        engine = ALFWorldEngine(game.path, expert="planner")
        rng = np.random.default_rng(len(game.id))
        state, out = engine.reset(), []
        for _ in range(6):
            out.append(state)
            state = engine.step(str(rng.choice(state.admissible_commands)))
        engine.close()
        return [*out, state]

    games = ALL_GAMES[::10]
    before = memoized[0].cache_info().hits
    fast = [trace(g) for g in games]
    assert memoized[0].cache_info().hits > before
    try:
        for module, f in zip(modules, memoized, strict=True):
            module._parse_and_convert = f.original
        slow = [trace(g) for g in games]
    finally:
        for module, f in zip(modules, memoized, strict=True):
            module._parse_and_convert = f
    assert fast == slow


def test_authoring_checks_the_handcoded_expert_reproducibly():
    """Regenerating the games checked alfworld's hand-coded expert with whatever Python's
    global ``random`` held (it failed at the CreditCard-111 game once, passed on a rerun):
    the check is seeded, repeatable, and leaves the caller's ``random`` state alone."""
    import random

    from orchenv.envs.alfworld.authoring import solve_handcoded

    game = next(g for g in ALL_GAMES if "CreditCard" in g.id)
    random.seed(7)
    expected = random.random()
    random.seed(7)
    first = solve_handcoded(game.path)
    assert random.random() == expected
    assert first is not None and solve_handcoded(game.path) == first
