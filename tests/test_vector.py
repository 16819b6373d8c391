"""ThreadedVectorEnv, EventLoopVectorEnv, ProcessVectorEnv: SyncVectorEnv's semantics, with
the sub-environments stepped concurrently (threads, one event loop, worker processes)."""

from __future__ import annotations

import functools
import os
import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from helpers import InFlight
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool, tiny_source

import orchenv  # noqa: F401
from orchenv.backends.openai_compat import OpenAICompatBackend
from orchenv.envs.mathroute.env import MathRouteEnv
from orchenv.error import ConfigError
from orchenv.pool import AgentPool, AgentSpec
from orchenv.testing.fake_openai import FakeOpenAIServer
from orchenv.vector import (
    EventLoopVectorEnv,
    ProcessVectorEnv,
    ThreadedVectorEnv,
    make_vec,
    run_concurrently,
)

N = 4
WEAKEST, STRONGEST = "Qwen2.5-1.5B-Instruct", "Qwen3-30B-A3B-Instruct"
SCRIPT = [
    [f"<model>{WEAKEST}</model>"] * N,
    ["<verdict>True</verdict>", f"<verdict>False</verdict><model>{STRONGEST}</model>", "junk", ""],
    ["<verdict>True</verdict>"] * N,
    [f"<model>{STRONGEST}</model>"] * N,
    ["<verdict>False</verdict>"] * N,
    ["x"] * N,
]


def run(vec, script=SCRIPT):
    out = [vec.reset(seed=5)]
    for actions in script:
        out.append(vec.step(actions))
    return out


#: two worker processes over N envs: shards of 2, so merging across shards is exercised
TwoWorkers = functools.partial(ProcessVectorEnv, num_workers=2)
CLASSES = [ThreadedVectorEnv, EventLoopVectorEnv, TwoWorkers]
CLASS_IDS = ["threads", "loop", "processes"]


@pytest.mark.parametrize("cls", CLASSES, ids=CLASS_IDS)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_same_results_as_sync_vector_env(mode, cls):
    fns = [lambda: gym.make("orch/MathRoute-v0") for _ in range(N)]
    threaded = cls(fns, autoreset_mode=mode)
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    assert threaded.metadata["autoreset_mode"] == mode
    assert threaded.observation_space == sync.observation_space
    assert data_equivalence(run(threaded), run(sync))
    threaded.close()
    sync.close()


@pytest.mark.parametrize("cls", CLASSES, ids=CLASS_IDS)
def test_disabled_autoreset_with_reset_mask(cls):
    vec = cls(
        [lambda: gym.make("orch/MathRoute-v0") for _ in range(2)],
        autoreset_mode=AutoresetMode.DISABLED,
    )
    vec.reset(seed=0)
    vec.step([f"<model>{WEAKEST}</model>"] * 2)
    _, _, term, _, _ = vec.step(
        ["<verdict>True</verdict>", f"<verdict>False</verdict><model>{STRONGEST}</model>"]
    )
    assert term.tolist() == [True, False]
    obs, info = vec.reset(options={"reset_mask": np.array([True, False])})
    assert info["_turn"].tolist() == [True, False]
    vec.close()


def test_steps_overlap_slow_agent_calls():
    calls_now = InFlight()
    wrong, right = calls_now.slow(0.05, WRONG), calls_now.slow(0.05, RIGHT)
    pool = scripted_pool({WEAK: wrong, MID: right, STRONG: right})
    source = tiny_source()
    vec = ThreadedVectorEnv(
        [lambda: MathRouteEnv(pool=pool, task_source=source, reward="paper") for _ in range(8)]
    )
    vec.reset(seed=0)
    _, rewards, *_ = vec.step([f"<model>{MID}</model>"] * 8)  # eq. 3: 0.5 * (1 - 0.125)
    assert calls_now.peak == 8, "all eight agent calls were in flight together"
    assert rewards.tolist() == [0.4375] * 8
    vec.close()


def test_pool_concurrency_limit_is_respected():
    calls_now = InFlight()
    slow = calls_now.slow(0.02, RIGHT)
    pool = scripted_pool({WEAK: slow, MID: slow, STRONG: slow})
    pool._slots["scripted"] = threading.BoundedSemaphore(
        3
    )  # as if the backend declared max_concurrency=3
    source = tiny_source()
    vec = ThreadedVectorEnv([lambda: MathRouteEnv(pool=pool, task_source=source) for _ in range(8)])
    vec.reset(seed=0)
    vec.step([f"<model>{MID}</model>"] * 8)
    assert calls_now.peak == 3
    vec.close()


def test_gymnasium_vector_wrappers_work():
    vec = RecordEpisodeStatistics(make_vec("orch/MathRoute-v0", 3))
    vec.reset(seed=1)
    vec.step([f"<model>{STRONGEST}</model>"] * 3)
    _, _, term, _, info = vec.step(["<verdict>True</verdict>"] * 3)
    assert term.all() and "episode" in info
    assert info["episode"]["l"].tolist() == [2, 2, 2]
    vec.close()


def test_bad_calls_raise_clearly():
    vec = make_vec("orch/MathRoute-v0", 2)
    with pytest.raises(ValueError, match="expected 2 actions"):
        vec.step(["a"])
    # a sub-env's error reaches the caller (Gymnasium's order check fires before orchenv's)
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        vec.step(["a", "b"])
    vec.close()


def http_pool(url: str, max_concurrency: int) -> AgentPool:
    specs = [
        AgentSpec(name=name, model=name, tier=tier, backend="openai",
                  backend_kwargs={"base_url": url})
        for name, tier in ((WEAKEST, 1), (STRONGEST, 0))
    ]  # fmt: skip
    return AgentPool(specs, {"openai": OpenAICompatBackend(max_concurrency=max_concurrency)})


def test_event_loop_vector_env_keeps_live_calls_in_flight_without_threads():
    """Eight envs' live calls are on the server at once, and no thread is made per env."""
    with FakeOpenAIServer(reply="\\boxed{4}", latency_s=0.2) as server:
        pool = http_pool(server.url, 8)
        vec = make_vec("orch/MathRoute-v0", 8, mode="loop", pool=pool)
        vec.reset(seed=0)
        vec.step([f"<model>{WEAKEST}</model>"] * 8)  # starts the loop and the session
        threads = threading.active_count()
        _, _, _, _, info = vec.step([f"<verdict>False</verdict><model>{STRONGEST}</model>"] * 8)
        assert threading.active_count() == threads
        assert server.max_in_flight == 8
        assert len(server.requests) == 16
        assert info["agent_calls"][STRONGEST].tolist() == [1] * 8
        vec.close()
        pool.close()


def test_a_failing_sub_env_is_reported_after_the_others_finish():
    vec = EventLoopVectorEnv([lambda: gym.make("orch/MathRoute-v0") for _ in range(2)])
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        vec.step(["a", "b"])
    vec.close()


def test_run_concurrently_overlaps_live_calls_and_reports_each_job():
    with FakeOpenAIServer(reply="\\boxed{4}", latency_s=0.2) as server:
        pool = http_pool(server.url, 16)
        messages = [{"role": "user", "content": "2 + 2?"}]

        def job(i: int):
            if i == 3:
                raise ValueError("job 3 fails")
            return pool.call(WEAKEST, messages).text

        jobs = [lambda i=i: job(i) for i in range(10)]
        results = {i: (result, exc) for i, result, exc in run_concurrently(jobs, concurrency=16)}
        pool.close()
    assert sorted(results) == list(range(10))
    assert isinstance(results[3][1], ValueError)
    assert all(results[i] == ("\\boxed{4}", None) for i in range(10) if i != 3)
    assert server.max_in_flight == 9


def mixed_info_fns(n: int) -> list:
    """Envs whose info ``x`` is an int in envs 0-1 and a float in envs 2-3 (``y`` only in env
    3). The class is made here so that cloudpickle sends it to the workers by value (they
    cannot import this test module)."""

    class MixedInfo(gym.Env):
        observation_space = gym.spaces.Discrete(5)
        action_space = gym.spaces.Discrete(2)

        def __init__(self, index: int) -> None:
            self.index = index

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.index, {"x": 1 if self.index < 2 else 2.5}

        def step(self, action):
            info = {"x": self.index if self.index < 2 else self.index + 0.5, "nested": {"a": "s"}}
            if self.index == 3:
                info["y"] = np.ones(2, dtype=np.float32)
            return self.index, float(action), bool(action), False, info

    return [lambda i=i: MixedInfo(i) for i in range(n)]


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_process_vector_env_merges_infos_exactly_across_shards(mode):
    """Shards merge their infos themselves; where a key's dtype differs between shards (int
    in one, float in the other) the parent merges env by env instead: same result."""
    fns = mixed_info_fns(4)
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    for workers in (2, 3):
        vec = ProcessVectorEnv(fns, num_workers=workers, autoreset_mode=mode)
        script = [[0, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]
        assert data_equivalence(run(vec, script), run(sync, script))
        vec.close()
    sync.close()


def test_process_vector_env_attributes_errors_and_close():
    vec = ProcessVectorEnv(mixed_info_fns(4), num_workers=2)
    assert vec.num_workers == 2 and vec.num_envs == 4
    vec.reset(seed=3)
    assert vec.get_attr("index") == (0, 1, 2, 3)
    assert vec.np_random_seed == (3, 4, 5, 6)
    vec.set_attr("index", [4, 3, 2, 1])
    assert vec.call("__getattribute__", "index") == (4, 3, 2, 1)
    vec.set_attr("index", 0)
    assert vec.get_attr("index") == (0, 0, 0, 0)
    with pytest.raises(ValueError, match="expected 4 actions"):
        vec.step([0])
    with pytest.raises(ValueError, match="length must match"):
        vec.reset(seed=[1])
    with pytest.raises(AttributeError, match="nope"):  # raised in a worker, re-raised here
        vec.get_attr("nope")
    vec.close()
    assert vec.closed
    with pytest.raises(gym.error.ClosedEnvironmentError):
        vec.get_attr("index")
    with pytest.raises(ConfigError, match="num_workers"):
        ProcessVectorEnv(mixed_info_fns(1), num_workers=0)


def test_process_vector_env_reports_a_sub_env_error():
    vec = make_vec("orch/MathRoute-v0", 4, mode="processes", num_workers=2)
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        vec.step(["a", "b", "c", "d"])
    vec.close()


def test_process_vector_env_keeps_live_calls_of_all_shards_in_flight():
    """Each worker copies the pool and runs its own loop: all 8 calls are on the server at once
    (0.5 s each, so a worker slowed down by a busy machine still overlaps the other)."""
    with FakeOpenAIServer(reply="\\boxed{4}", latency_s=0.5) as server:
        pool = http_pool(server.url, 8)
        vec = make_vec("orch/MathRoute-v0", 8, mode="processes", num_workers=2, pool=pool)
        assert vec.num_workers == 2
        vec.reset(seed=0)
        _, _, _, _, info = vec.step([f"<model>{WEAKEST}</model>"] * 8)
        assert server.max_in_flight == 8
        assert info["agent_calls"][WEAKEST].tolist() == [1] * 8
        assert info["_agent_calls"].all()
        vec.close()
        pool.close()
    with pytest.raises(ConfigError, match="num_workers"):
        make_vec("orch/MathRoute-v0", 2, mode="loop", num_workers=2)


def test_run_concurrently_in_processes_reports_each_job_from_its_worker():
    """``processes=2``: the jobs (and the pool they capture) go to two worker processes,
    each with its own loop; results and exceptions come back with their indices."""
    with FakeOpenAIServer(reply="\\boxed{4}", latency_s=0.05) as server:
        pool = http_pool(server.url, 16)
        messages = [{"role": "user", "content": "2 + 2?"}]

        def job(i: int):
            if i == 3:
                raise ValueError("job 3 fails")
            return pool.call(WEAKEST, messages).text, os.getpid()

        jobs = [lambda i=i: job(i) for i in range(10)]
        results = {
            i: (result, exc)
            for i, result, exc in run_concurrently(jobs, concurrency=4, processes=2)
        }
        pool.close()
        assert len(server.requests) == 9
    assert sorted(results) == list(range(10))
    assert isinstance(results[3][1], ValueError)
    assert all(results[i][0][0] == "\\boxed{4}" for i in range(10) if i != 3)
    workers = {results[i][0][1] for i in range(10) if i != 3}
    assert len(workers) == 2 and os.getpid() not in workers
    with pytest.raises(ConfigError, match="processes"):
        run_concurrently(jobs, concurrency=4, processes=0)


def test_make_vec_and_gym_make_vec_default_to_the_event_loop_with_sync_results():
    """Issue 27 item 8: for a few simulated envs the default ("auto") is the event loop, on
    ``orchenv.vector.make_vec`` and on ``gym.make_vec`` of an orchenv id alike."""
    built = [make_vec("orch/MathRoute-v0", N), gym.make_vec("orch/MathRoute-v0", N)]
    sync = gym.make_vec("orch/MathRoute-v0", N, vectorization_mode="sync")
    assert type(sync) is SyncVectorEnv
    expected = run(sync)
    for vec in built:
        assert type(vec) is EventLoopVectorEnv
        assert data_equivalence(run(vec), expected)
        vec.close()
    sync.close()
    # the older switch and the other modes still choose, through gym.make_vec's kwargs too
    assert type(make_vec("orch/MathRoute-v0", 2, threaded=True)) is ThreadedVectorEnv
    assert type(make_vec("orch/MathRoute-v0", 2, threaded=False)) is SyncVectorEnv
    vec = gym.make_vec("orch/MathRoute-v0", 2, mode="threads", autoreset_mode="SameStep")
    assert type(vec) is ThreadedVectorEnv and vec.autoreset_mode == AutoresetMode.SAME_STEP
    with pytest.raises(ConfigError, match="either mode= or threaded="):
        make_vec("orch/MathRoute-v0", 2, mode="loop", threaded=True)


def test_auto_mode_shards_many_live_envs_over_processes_and_keeps_the_loop_otherwise(
    monkeypatch, tmp_path
):
    """Issue 27 item 8: ``"auto"`` (the default) picks processes where they are faster on a
    machine with several CPUs (at least PROCESS_MIN_ENVS envs calling live agents) and the
    event loop where they would gain nothing or change what a run records."""
    from orchenv import vector

    monkeypatch.setattr(vector.os, "cpu_count", lambda: 2)
    many, env_id = vector.PROCESS_MIN_ENVS, "orch/MathRoute-v0"
    live = http_pool("http://127.0.0.1:9/v1", 4)  # nothing is sent: only inspected
    assert vector.auto_vector_mode(env_id, many, {"pool": live}) == "processes"
    assert vector.auto_vector_mode(env_id, many - 1, {"pool": live}) == "loop"
    assert vector.auto_vector_mode(env_id, many, {}) == "loop"  # simulated preset (a probe env)
    served = {"backend": "openai", "backend_kwargs": {"base_url": "http://127.0.0.1:9/v1"}}
    assert vector.auto_vector_mode(env_id, many, served) == "processes"
    live.record_to = str(tmp_path / "calls.jsonl")  # one recording file: one process
    assert vector.auto_vector_mode(env_id, many, {"pool": live}) == "loop"
    monkeypatch.setattr(vector.os, "cpu_count", lambda: 1)
    assert vector.auto_vector_mode(env_id, many, {"pool": http_pool("http://x/v1", 4)}) == "loop"
    # gym.make_vec on an orchenv id takes the same default
    monkeypatch.setattr(vector.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(vector, "PROCESS_MIN_ENVS", 2)
    with FakeOpenAIServer(reply="\\boxed{4}", latency_s=0.05) as server:
        pool = http_pool(server.url, 2)
        vec = gym.make_vec(env_id, 2, pool=pool)
        assert type(vec) is ProcessVectorEnv and vec.num_workers == 2
        vec.reset(seed=0)
        _, _, _, _, info = vec.step([f"<model>{WEAKEST}</model>"] * 2)
        assert info["agent_calls"][WEAKEST].tolist() == [1, 1]
        vec.close()
        pool.close()


def test_batched_infos_equal_gymnasiums_env_by_env_merge():
    """``_batch_infos`` (key by key) builds exactly the dict Gymnasium's ``_add_info`` builds
    env by env: keys and their order, dtypes, values, masks; mixed types, nested dicts, an
    env merged twice and keys that collide with masks included."""
    import pickle
    import random

    from gymnasium.vector import VectorEnv

    from orchenv.vector import _batch_infos

    class Batched(VectorEnv):
        def __init__(self, n: int) -> None:
            self.num_envs = n

    rng = random.Random(0)
    leaves = [1, 2.5, True, None, "s", np.float32(1.5), np.array([1, 2]), [1, 2], np.int64(7)]

    def value(depth: int) -> object:
        if depth < 2 and rng.random() < 0.2:
            return {k: value(depth + 1) for k in rng.sample(["a", "b", "_a"], rng.randrange(3))}
        return rng.choice(leaves)

    keys = ["k", "m", "final_obs", "d", "_k", "n"]
    for _ in range(400):
        n = rng.randrange(1, 6)
        pairs = [
            (i, {k: value(0) for k in rng.sample(keys, rng.randrange(len(keys) + 1))})
            for i in range(n)
            for _ in range(rng.randrange(1, 3))
        ]
        expected: dict = {}
        try:
            for i, info in pairs:
                expected = Batched(n)._add_info(expected, info, i)
        except (TypeError, AttributeError, ValueError):
            with pytest.raises((TypeError, AttributeError, ValueError)):
                _batch_infos(pairs, n)
            continue
        assert pickle.dumps(_batch_infos(pairs, n)) == pickle.dumps(expected)


def test_event_loop_steps_pause_automatic_gc_only_while_they_run():
    import gc

    vec = EventLoopVectorEnv([lambda: gym.make("orch/MathRoute-v0") for _ in range(2)])
    vec.reset(seed=0)
    vec.step([f"<model>{WEAKEST}</model>"] * 2)
    assert gc.isenabled()
    gc.disable()
    try:
        vec.step(["<verdict>True</verdict>"] * 2)
        assert not gc.isenabled(), "a caller's own gc.disable() is left as it was"
    finally:
        gc.enable()
    vec.close()


def _fake_main(monkeypatch, tmp_path, source: str | None) -> None:
    import sys
    import types

    main = types.ModuleType("__main__")
    if source is not None:
        script = tmp_path / "script.py"
        script.write_text(source)
        main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)


def test_processes_need_a_main_guard(monkeypatch, tmp_path, caplog):
    """Issue 40: a script without the main guard gets the event loop from "auto" (with a
    warning naming the guard) and a ConfigError naming it from mode="processes", instead of
    'worker 0 died (exit code None)' from workers that re-ran the script."""
    from orchenv import vector

    _fake_main(monkeypatch, tmp_path, "from orchenv.vector import make_vec\nmake_vec('x', 256)\n")
    assert not vector.main_is_guarded()
    with pytest.raises(ConfigError, match='if __name__ == "__main__":'):
        make_vec("orch/MathRoute-v0", 2, mode="processes", num_workers=2)
    monkeypatch.setattr(vector, "auto_vector_mode", lambda *a: "processes")
    with caplog.at_level("WARNING", logger="orchenv.vector"):
        vec = make_vec("orch/MathRoute-v0", 2)
    assert type(vec).__name__ == "EventLoopVectorEnv"
    vec.close()
    assert "no `if __name__ ==" in caplog.text

    _fake_main(
        monkeypatch, tmp_path, "def main():\n    pass\n\nif __name__ == '__main__':\n    main()\n"
    )
    assert vector.main_is_guarded()
    _fake_main(monkeypatch, tmp_path, None)  # an interactive session: nothing is re-run
    assert vector.main_is_guarded()


def test_an_unguarded_script_is_told_about_the_guard(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import orchenv\nfrom orchenv.vector import make_vec\n"
        "make_vec('orch/MathRoute-v0', 4, mode='processes', num_workers=2)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr and "died" not in done.stderr
