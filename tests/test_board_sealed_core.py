"""Issue 37 item 2: the base env's sealed hook (``sealed``, ``orchenv.core``) on its own.

No public field names the task (the real id appears nowhere in ``info`` or the observation);
the secret reseeds env-built pools too (MultihopQA's role agents); a sealed env refuses reset
options that choose a task; opaque ids open only with their secret, and hostile ones fail
cleanly."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.error import ConfigError, DataError
from orchenv.pool import make_pool
from orchenv.seeding import open_task_id, seal_task_id

SECRET = "5e" * 32


def _texts(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _texts(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _texts(v)


@pytest.mark.parametrize("env_id", ["orch/MathRoute-v0", "orch/MultihopQA-v0"])
def test_no_public_field_names_the_task(env_id):
    env = gym.make(env_id, split="test", sealed=SECRET)
    base = env.unwrapped
    rng = np.random.default_rng(0)
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        real = base.task.id
        assert info["task_id"] == seal_task_id(real, SECRET) != real
        assert open_task_id(info["task_id"], SECRET) == real
        done = False
        while True:
            public = {k: v for k, v in info.items() if k != "privileged"}
            assert not any(real in t for t in [obs, *_texts(public)]), (real, env_id)
            if done:
                break
            obs, _, term, trunc, info = env.step(base.demo_action(rng))
            done = term or trunc


def test_the_secret_reseeds_env_built_pools_and_the_tasks():
    def world(**kwargs):
        env = gym.make("orch/MultihopQA-v0", split="test", **kwargs).unwrapped
        env.reset(seed=0)
        backend = env.pool.backend_for(env.pool.names[0])
        return backend.seed, env.task.id

    public, sealed, other = world(), world(sealed=SECRET), world(sealed="a" * 64)
    assert sealed == world(sealed=SECRET)  # the maintainer can replay it
    assert len({public[0], sealed[0], other[0]}) == 3  # the pool's luck: the secret's
    assert len({public[1].split("/")[0], sealed[1].split("/")[0], other[1].split("/")[0]}) == 3
    math = gym.make("orch/MathRoute-v0", sealed=SECRET).unwrapped
    math.reset(seed=0)
    assert math.pool.backend_for(math.pool.names[0]).seed != 0


def test_a_sealed_env_refuses_chosen_tasks_and_foreign_pools():
    env = gym.make("orch/MathRoute-v0", sealed=SECRET)
    for options in ({"task_index": 3}, {"task_id": "procmath-0/train/3"}):
        with pytest.raises(ConfigError, match="draws its own tasks"):
            env.reset(seed=0, options=options)
    with pytest.raises(ConfigError, match="builds its own pool"):
        gym.make("orch/MathRoute-v0", sealed=SECRET, pool=make_pool("system1")).reset(seed=0)
    for bad in (123, "short", ["x"], "\ud800" * 40, "z" * 64, "a" * 10_000_000):
        with pytest.raises(ConfigError, match="sealed must be"):
            gym.make("orch/MathRoute-v0", sealed=bad)


def test_opaque_ids_open_only_with_their_secret_and_hostile_ones_fail_cleanly():
    for real in ("", "procmath-0/test/17", "x" * 16, "é\ud800", "a" * 10_000):
        assert open_task_id(seal_task_id(real, SECRET), SECRET) == real
    opaque = seal_task_id("procmath-0/test/17", SECRET)
    assert "procmath" not in opaque and seal_task_id("procmath-0/test/17", SECRET) == opaque
    hostile = [
        seal_task_id("procmath-0/test/17", "b" * 64),  # another board's
        opaque[:-2],
        "sealed-" + "A" * 10_000_000,
        "sealed-\ud800\x00",
        "sealed-!!!",
        "procmath-0/test/17",
        json.dumps({"a": [[[[1]]]]}),
    ]
    for text in hostile:
        with pytest.raises(DataError, match="not a task id sealed with this secret"):
            open_task_id(text, SECRET)


def test_no_sealed_draw_repeats_a_public_prompt():
    """Small generator families repeat prompts across seeds: the sealed source's own seed
    alone would hand a prompt lookup some public tasks; the sealed draw skips them."""
    kwargs = {"task_source_kwargs": {"train_size": 300, "test_size": 300}, "split": "test"}
    public_env = gym.make("orch/MathRoute-v0", **kwargs).unwrapped
    public = {t.prompt for s in ("train", "test") for t in public_env.task_source.iter(s)}
    env = gym.make("orch/MathRoute-v0", sealed=SECRET, **kwargs).unwrapped
    inner = env.task_source.inner  # the sealed seed's tasks before the filter
    assert sum(t.prompt in public for t in inner.iter("test")) >= 5  # the filter matters
    for seed in range(200):  # without the filter ~2% of draws would be public
        env.reset(seed=seed)
        assert env.task.prompt not in public
