"""Issue 37 item 2 for orch/ALFWorld-v0 and orch/ALFWorldRoles-v0: a sealed env plays games
drawn under the board's secret (``envs/alfworld/sealed.py``), not the bundled public ones, so
``orchenv board init --sealed-episodes N --key K`` accepts both ids; the public plan is
unchanged."""

from __future__ import annotations

import hashlib
import json
import os

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the ids)
from orchenv.envs.alfworld.authoring import SPECS, game_data
from orchenv.envs.alfworld.sealed import CACHE_ENV, sealed_game_root, sealed_spec
from orchenv.error import ConfigError
from orchenv.eval.board import make_spec, sealed_plan
from orchenv.verify.keys import read_key, write_key

IDS = {"orch/ALFWorld-v0": "none", "orch/ALFWorldRoles-v0": "alfworld-roles"}
#: few sealed games keep the experts' checks quick (the default is 20)
SMALL = {"sealed_games": 3}


def _episodes_digest(env_id: str) -> str:
    """Three public test episodes (reset seeds 0-2) played with the env's demo actions: the
    observations, task ids and rewards."""
    h = hashlib.sha256()
    env = gym.make(env_id, split="test").unwrapped
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        h.update(json.dumps([obs, info["task_id"]]).encode())
        rng = np.random.default_rng(seed)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(env.demo_action(rng))
            h.update(json.dumps([obs, float(reward)]).encode())
            done = term or trunc
    env.close()
    return h.hexdigest()


#: computed by ``_episodes_digest`` on the code before sealed games (env.py and roles.py of
#: HEAD 3f51bfd: no sealed.py, no ``sealed_games`` argument), with the simulated role agents
#: of 4c13cf8 (agents.py: issue 38's slips, which change ALFWorldRoles' episodes by design)
PUBLIC_DIGESTS = {
    "orch/ALFWorld-v0": "398a3b2d70d13c4a111abaad888ce8f7237a58871f1a39f3fcb320772d0c2c64",
    "orch/ALFWorldRoles-v0": "1b4958398c73395a2480412aabb2fa785cc73f0391a7ba142ab85fb0b0c953de",
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private games cache for this module (never the user's)."""
    folder = tmp_path_factory.mktemp("sealed-games")
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> bytes:
    return read_key(write_key(tmp_path_factory.mktemp("key") / "board.key"))


def _public_ids(env_id: str) -> set[str]:
    env = gym.make(env_id, split="test").unwrapped
    try:
        catalog = env.game.house.catalog if env_id.endswith("Roles-v0") else env.catalog
        return {g.id for g in catalog.all()}
    finally:
        env.close()


@pytest.mark.parametrize("env_id", sorted(IDS))
def test_public_plan_is_unchanged(env_id):
    assert _episodes_digest(env_id) == PUBLIC_DIGESTS[env_id]


def test_sealed_games_are_drawn_under_the_secret_and_are_not_the_public_ones(cache):
    public = {json.dumps(game_data(s)["pddl_problem"]) for s in SPECS}
    a = [sealed_spec("ab" * 32, "test", i) for i in range(10)]
    b = [sealed_spec("cd" * 32, "test", i) for i in range(10)]
    assert a != b  # another secret, other games
    assert a == [sealed_spec("ab" * 32, "valid_unseen", i) for i in range(10)]  # deterministic
    for spec in a:
        assert json.dumps(game_data(spec)["pddl_problem"]) not in public
        assert spec.split == "valid_unseen" and spec.scene >= 1000
    root = sealed_game_root("ab" * 32, "test", 3)
    games = sorted(root.rglob("game.tw-pddl"))
    assert len(games) == 3 and str(root).startswith(str(cache))
    for path in games:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["solvable"] and data["walkthrough"]  # both experts solved it
        assert json.dumps(data["pddl_problem"]) not in public
    assert sealed_game_root("ab" * 32, "test", 3) == root  # cached: not written twice


def test_guards(cache):
    with pytest.raises(ConfigError, match="sealed_games"):
        gym.make("orch/ALFWorld-v0", sealed_games=0)  # an empty game list hangs alfworld
    with pytest.raises(ConfigError, match="sealed_games"):
        gym.make("orch/ALFWorldRoles-v0", sealed_games=10**30)  # would write forever
    with pytest.raises(ConfigError, match="sealed_games"):
        sealed_game_root("ab" * 32, "test", 0)
    with pytest.raises(ConfigError, match="data_dir"):
        gym.make("orch/ALFWorld-v0", sealed="ab" * 32, game_files=[SPECS[0].game_id])
    with pytest.raises(ConfigError, match="splits"):
        sealed_spec("ab" * 32, "nowhere", 0)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(IDS))
def test_board_init_accepts_the_id_and_its_sealed_games_are_private(env_id, cache, key):
    spec = make_spec(env_id, pool=IDS[env_id], split="test", env_kwargs=SMALL, dev_episodes=5,
                     sealed_episodes=5, key=key)  # fmt: skip
    assert spec["sealed_plan"]["episodes"] == 5 and "task_file" not in spec["sealed_plan"]
    seeds, kwargs = sealed_plan(spec, key)
    env = gym.make(env_id, split="test", **kwargs).unwrapped
    public = _public_ids(env_id)
    try:
        for seed in seeds + [1, 2]:
            obs, info = env.reset(seed=seed)
            real = env.task.id
            assert real not in public and info["task_id"] != real
            assert real not in obs and str(cache) not in json.dumps(info, default=str)
            _, _, _, _, info = env.step(env.demo_action(np.random.default_rng(seed)))
            assert str(cache) not in json.dumps(info, default=str)
        with pytest.raises(ConfigError, match="sealed"):
            env.reset(seed=0, options={"task_index": 0})  # nobody picks a sealed game
    finally:
        env.close()
