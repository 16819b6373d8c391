"""CPU per live env-step through ``make_vec`` against the env's own step, in one run.

An OpenAI-compatible server runs in a separate process (``pool_concurrency.py``'s: it
answers every request after ``--latency`` seconds), so the CPU measured here
(``time.process_time`` of this process: waiting on the server costs none) is the client's:
the env, the agent call's HTTP client and, for the vector rows, the vector env.

* **envs on their own**: ``--envs`` ``orch/MathRoute-v0`` envs (``max_turns=1``: every step
  calls one agent and ends the episode; reset after it), each stepped on its own on orchenv's
  event loop (``run_concurrently``, no barrier): the envs' own CPU per step, live calls
  included, with the calls overlapped as in the vector env (one env stepped alone pays a
  thread hand-off per call instead: about 1.7 ms here, not a fair reference);
* **make_vec**: ``--envs`` copies in ``make_vec(..., mode="loop")`` (``EventLoopVectorEnv``,
  what ``make_vec`` builds in one process; ``SAME_STEP`` autoreset, as the lanes reset
  after every step): CPU per env-step.

The rows run interleaved, ``--repeats`` times; the median of each and the overhead
(make_vec minus envs on their own, microseconds of CPU per env-step) and ratio are printed. Issue 40 item
8 recorded about 375 us of overhead per live env-step; there is no target beyond "less".

    python benchmarks/vec_step.py [--envs 64] [--steps 20] [--repeats 5] [--latency 0.02]

Measured 2026-12-07 (2 shared cores, load ~8-10, CPU time so the load matters little):
``--envs 256 --steps 5 --repeats 3``: envs on their own 451.6 us (448.9-458.0), make_vec
471.2 us (465.4-561.1): overhead 19.6 us, 1.04x; ``--envs 32 --steps 5 --repeats 2``: 455.4
vs 436.2 us (0.96x). So the ~375-450 us of CPU per live env-step is the env's own step and
its HTTP call (py-spy: aiohttp's request and response handling, JSON, then MathRoute's step:
rendering, parsing, the reward), not ``make_vec``: its own work per env-step is the info
merge (``_merge_results``, about 27 us at 128 envs with ~32 info keys) and the observation
batch.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gymnasium.vector import AutoresetMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pool_concurrency as pc  # noqa: E402  (the server, pool and env of that benchmark)

from orchenv.vector import make_vec, run_concurrently  # noqa: E402

ACTION = "<model>medium</model>"


def lanes_cpu_per_step(url: str, n: int, steps: int) -> float:
    """CPU seconds per env-step of n envs each stepped on its own on orchenv's event loop
    (``run_concurrently``, no barrier, as ``orchenv eval --concurrency``): the envs' own CPU,
    their live calls included, with the same overlap of calls as the vector env's."""
    pool = pc._pool(url, n)
    pc._make(pool)
    envs = [pc._make(pool) for _ in range(n)]

    def lane(env: Any, count: int) -> None:
        for _ in range(count):
            _, _, term, trunc, _ = env.step(ACTION)
            if term or trunc:
                env.reset()

    for i, env in enumerate(envs):
        env.reset(seed=i)
    _drain(run_concurrently([lambda e=e: lane(e, 3) for e in envs], concurrency=n))
    start = time.process_time()
    _drain(run_concurrently([lambda e=e: lane(e, steps) for e in envs], concurrency=n))
    cpu = (time.process_time() - start) / (steps * n)
    for env in envs:
        env.close()
    pool.close()
    return cpu


def _drain(results: Any) -> None:
    for _, _, exc in results:
        if exc is not None:
            raise exc


def vec_cpu_per_step(url: str, n: int, steps: int) -> float:
    """CPU seconds per env-step of n envs in ``make_vec``'s event-loop vector env."""
    pool = pc._pool(url, n)
    pc._make(pool)  # the shared, pre-generated task source
    vec = make_vec(
        "orch/MathRoute-v0",
        n,
        mode="loop",
        autoreset_mode=AutoresetMode.SAME_STEP,
        pool=pool,
        task_source=pc._TASKS[0],
        max_turns=1,
        split="test",
    )
    vec.reset(seed=0)
    actions = [ACTION] * n
    for _ in range(3):
        vec.step(actions)
    start = time.process_time()
    for _ in range(steps):
        vec.step(actions)
    cpu = (time.process_time() - start) / (steps * n)
    vec.close()
    pool.close()
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="steps per env per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.02)
    args = parser.parse_args()

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    server = multiprocessing.get_context("spawn").Process(
        target=pc.serve, args=(sock, args.latency), daemon=True
    )
    server.start()
    time.sleep(1.0)
    try:
        raw, vec = [], []
        for _ in range(args.repeats):
            raw.append(lanes_cpu_per_step(url, args.envs, args.steps))
            vec.append(vec_cpu_per_step(url, args.envs, args.steps))
    finally:
        server.terminate()
        server.join(5)
    r, v = statistics.median(raw), statistics.median(vec)
    print(f"orch/MathRoute-v0, live agent ({args.latency * 1000:.0f} ms server), CPU per env-step,")
    print(f"median of {args.repeats} (min-max):")
    print(f"  envs on their own   {r * 1e6:8.1f} us  ({min(raw) * 1e6:.1f}-{max(raw) * 1e6:.1f})")
    print(
        f"  make_vec, {args.envs:>4} envs  {v * 1e6:8.1f} us  "
        f"({min(vec) * 1e6:.1f}-{max(vec) * 1e6:.1f})"
    )
    print(f"  overhead {(v - r) * 1e6:.1f} us per env-step; ratio {v / r:.2f}x the env's own step")


if __name__ == "__main__":
    main()
