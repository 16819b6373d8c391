"""ThreadedVectorEnv: SyncVectorEnv's semantics, with the sub-environments stepped concurrently."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool, tiny_source

import orchenv  # noqa: F401
from orchenv.backends.openai_compat import OpenAICompatBackend
from orchenv.envs.mathroute.env import MathRouteEnv
from orchenv.pool import AgentPool, AgentSpec
from orchenv.testing.fake_openai import FakeOpenAIServer
from orchenv.vector import EventLoopVectorEnv, ThreadedVectorEnv, make_vec, run_concurrently

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


@pytest.mark.parametrize("cls", [ThreadedVectorEnv, EventLoopVectorEnv])
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


@pytest.mark.parametrize("cls", [ThreadedVectorEnv, EventLoopVectorEnv])
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
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slow(spec, messages, ctx):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return RIGHT if spec.name != WEAK else WRONG

    pool = scripted_pool({WEAK: slow, MID: slow, STRONG: slow})
    source = tiny_source()
    vec = ThreadedVectorEnv([lambda: MathRouteEnv(pool=pool, task_source=source) for _ in range(8)])
    vec.reset(seed=0)
    _, rewards, *_ = vec.step([f"<model>{MID}</model>"] * 8)
    assert peak[0] == 8, "all eight agent calls were in flight together"
    assert rewards.tolist() == [0.4375] * 8
    vec.close()


def test_pool_concurrency_limit_is_respected():
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slow(spec, messages, ctx):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.02)
        with lock:
            in_flight[0] -= 1
        return RIGHT

    pool = scripted_pool({WEAK: slow, MID: slow, STRONG: slow})
    pool._slots["scripted"] = threading.BoundedSemaphore(
        3
    )  # as if the backend declared max_concurrency=3
    source = tiny_source()
    vec = ThreadedVectorEnv([lambda: MathRouteEnv(pool=pool, task_source=source) for _ in range(8)])
    vec.reset(seed=0)
    vec.step([f"<model>{MID}</model>"] * 8)
    assert peak[0] == 3
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
