"""Concurrent vs sequential stepping of 16 envs whose agents answer over HTTP in 50 ms.

A loopback OpenAI-compatible server (``orchenv.testing.fake_openai``) answers every call
after 50 ms. 16 ``orch/MathRoute-v0`` environments share one pool of HTTP agents
and are stepped by ``orchenv.vector.ThreadedVectorEnv`` and, in the same process,
by Gymnasium's ``SyncVectorEnv`` (one env after another). Every step calls an
agent (routing actions; each env ends after its first turn with ``max_turns=1``
and resets within the same step), so the ratio measures how well slow agent
calls overlap.
Target: ThreadedVectorEnv >= 10x SyncVectorEnv.

    python benchmarks/pool_concurrency.py [--steps 20] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import orchenv  # noqa: F401
from orchenv.backends.openai_compat import OpenAICompatBackend
from orchenv.pool import AgentPool, AgentSpec
from orchenv.testing.fake_openai import FakeOpenAIServer
from orchenv.vector import ThreadedVectorEnv

N_ENVS = 16


def build_pool(url: str) -> AgentPool:
    names = ["small", "medium", "large"]
    specs = [
        AgentSpec(name=n, model=n, tier=2 - i, price_prompt=0.1, price_completion=0.4,
                  backend="openai", backend_kwargs={"base_url": url})
        for i, n in enumerate(names)
    ]  # fmt: skip
    return AgentPool(specs, {"openai": OpenAICompatBackend(max_concurrency=N_ENVS)})


def steps_per_second(vec: gym.vector.VectorEnv, steps: int) -> float:
    vec.reset(seed=0)
    actions = ["<model>medium</model>"] * N_ENVS
    start = time.perf_counter()
    for _ in range(steps):
        vec.step(actions)
    elapsed = time.perf_counter() - start
    return steps * N_ENVS / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="vector steps per measurement")
    parser.add_argument("--latency", type=float, default=0.05, help="server latency in seconds")
    args = parser.parse_args()

    with FakeOpenAIServer(reply="The answer is $\\boxed{0}$.", latency_s=args.latency) as server:
        pool = build_pool(server.url)
        fns = [
            lambda: gym.make("orch/MathRoute-v0", pool=pool, max_turns=1, split="test")
            for _ in range(N_ENVS)
        ]
        same = AutoresetMode.SAME_STEP  # reset inside the step, so every step calls an agent
        threaded = ThreadedVectorEnv(fns, autoreset_mode=same)
        sync = SyncVectorEnv(fns, autoreset_mode=same)
        steps_per_second(threaded, 2)  # warm connections
        fast = steps_per_second(threaded, args.steps)
        slow = steps_per_second(sync, max(2, args.steps // 4))
        threaded.close()
        sync.close()
        pool.close()
        peak = server.max_in_flight
    ratio = fast / slow
    print(
        f"server latency {args.latency * 1000:.0f} ms, {N_ENVS} envs, peak in-flight requests {peak}"
    )
    print(f"SyncVectorEnv        {slow:8.1f} env-steps/s")
    print(f"ThreadedVectorEnv    {fast:8.1f} env-steps/s")
    print(f"ratio {ratio:.1f}x   target >= 10x: {'met' if ratio >= 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
