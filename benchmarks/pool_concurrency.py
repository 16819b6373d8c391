"""How many env-steps per second N envs with live agents reach, against the ideal and a bare
``aiohttp`` loop measured in the same run.

An OpenAI-compatible server runs in a separate process (a small ``asyncio`` protocol server,
HTTP/1.1 keep-alive) and answers every request after ``--latency`` seconds (default 50 ms),
so the client side, not the server, is what is measured. For each N in ``--envs``:

* ideal: N / latency env-steps per second (every step waits for one agent call);
* bare aiohttp: N coroutines posting the same request in a loop over one
  ``aiohttp.ClientSession`` (the best a Python client does in one process);
* orchenv ``pool.call``: N jobs calling an ``openai`` agent in a loop on orchenv's event
  loop (``run_concurrently``): the client alone, like for like with bare aiohttp;
* orchenv envs: N ``orch/MathRoute-v0`` envs (``max_turns=1``, so every step calls an
  agent and ends the episode) sharing one pool, each stepped on its own
  (``run_concurrently``, as ``orchenv eval --concurrency``) and, separately, batched by
  ``orchenv.vector.EventLoopVectorEnv`` (Gymnasium's barrier semantics).

The second table uses every core (``--processes``, default the CPU count): the same lanes
in that many worker processes (``run_concurrently(..., processes=W)``), bare aiohttp with
its N coroutines shared by as many processes (the like-for-like reference), and
``orchenv.vector.ProcessVectorEnv`` (W workers, each an event loop over its shard;
Gymnasium's barrier semantics: a step lasts the latency plus the shards' CPU time).

Acceptance (issue 17): at 256 envs, >= 0.6 of ideal and within 15% of bare aiohttp.
Issue 27 item 8: ``make_vec``'s default mode (``orchenv.vector.DEFAULT_VECTOR_MODE``,
``"auto"``: ``ProcessVectorEnv`` for at least ``PROCESS_MIN_ENVS`` live envs on a machine
with several CPUs, else the event loop; the last column says which) >= 0.5 of ideal at 256
envs. The vector columns give a 95% interval over one-second windows.

    python benchmarks/pool_concurrency.py [--envs 16 64 256 1024] [--seconds 3] [--latency 0.05]
                                          [--processes W]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import sys
import time

import gymnasium as gym
from gymnasium.vector import AutoresetMode

import orchenv  # noqa: F401 - registers the env ids
from orchenv.backends.openai_compat import OpenAICompatBackend
from orchenv.pool import AgentPool, AgentSpec
from orchenv.tasks import TaskSource
from orchenv.vector import (
    EventLoopVectorEnv,
    ProcessVectorEnv,
    ThreadedVectorEnv,
    auto_vector_mode,
    run_concurrently,
)

REPLY = "The answer is $\\boxed{0}$."
AGENTS = ["small", "medium", "large"]


# -- the server (separate process) -------------------------------------------------------------
def _response() -> bytes:
    body = json.dumps(
        {
            "id": "bench",
            "object": "chat.completion",
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58},
        }
    ).encode()
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


class _Handler(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every complete request is answered ``latency`` seconds later."""

    def __init__(self, latency: float, answer: bytes) -> None:
        self.latency, self.answer, self.buffer = latency, answer, b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buffer[:end].split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.loop.call_later(self.latency, self._answer)

    def _answer(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(self.answer)  # type: ignore[attr-defined]


def serve(sock: socket.socket, latency: float) -> None:
    """Run the server on the already bound ``sock`` until the process is terminated."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        answer = _response()
        server = await loop.create_server(
            lambda: _Handler(latency, answer), sock=sock, backlog=4096
        )
        await server.serve_forever()

    asyncio.run(main())


# -- the clients ------------------------------------------------------------------------------
def bare_aiohttp(url: str, n: int, seconds: float) -> float:
    """Requests per second of n coroutines posting in a loop over one session."""
    import aiohttp

    payload = json.dumps(
        {"model": "medium", "messages": [{"role": "user", "content": "What is 0 + 0?"}]}
    ).encode()
    headers = {"Content-Type": "application/json"}

    async def main() -> float:
        connector = aiohttp.TCPConnector(limit=n, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            count = 0
            stop = 0.0

            async def worker() -> None:
                nonlocal count
                while time.perf_counter() < stop:
                    async with session.post(url, data=payload, headers=headers) as response:
                        await response.read()
                    count += 1

            stop = time.perf_counter() + 0.5  # warm the connections
            await asyncio.gather(*[worker() for _ in range(n)])
            count = 0
            start = time.perf_counter()
            stop = start + seconds
            await asyncio.gather(*[worker() for _ in range(n)])
            return count / (time.perf_counter() - start)

    return asyncio.run(main())


def bare_aiohttp_processes(url: str, n: int, seconds: float, processes: int) -> float:
    """``bare_aiohttp`` with its n coroutines shared by ``processes`` processes (the
    reference for orchenv's lanes in as many processes), measured over the same window."""
    shares = [n // processes + (k < n % processes) for k in range(processes)]
    start_at = time.time() + 8.0  # after every process has started
    with multiprocessing.get_context("spawn").Pool(processes) as workers:
        results = workers.starmap(
            _bare_share, [(url, share, seconds, start_at) for share in shares]
        )
    late = max(late for _, late in results)
    if late > 0.1:
        print(f"(an aiohttp process started {late:.1f} s late: its rate is not comparable)",
              file=sys.stderr)  # fmt: skip
    return sum(rate for rate, _ in results)


def _bare_share(url: str, n: int, seconds: float, start_at: float) -> tuple[float, float]:
    late = time.time() - start_at
    time.sleep(max(0.0, -late))
    return bare_aiohttp(url, n, seconds), late


def _pool(url: str, n: int) -> AgentPool:
    specs = [
        AgentSpec(name=name, model=name, tier=2 - i, price_prompt=0.1, price_completion=0.4,
                  backend="openai", backend_kwargs={"base_url": url})
        for i, name in enumerate(AGENTS)
    ]  # fmt: skip
    return AgentPool(specs, {"openai": OpenAICompatBackend(max_concurrency=n, timeout_s=30.0)})


_TASKS: list[TaskSource] = []


def _make(pool: AgentPool) -> gym.Env:
    """A MathRoute env on the pool; all envs share one task source whose test split is
    generated once up front, so resets measure the env, not the task generator."""
    if not _TASKS:
        source = gym.make("orch/MathRoute-v0", split="test").unwrapped.task_source  # type: ignore[attr-defined]
        for i in range(source.size("test")):
            source.get("test", i)
        _TASKS.append(source)
    return gym.make(
        "orch/MathRoute-v0", pool=pool, task_source=_TASKS[0], max_turns=1, split="test"
    )


def orchenv_vector(url: str, n: int, seconds: float, cls: type = EventLoopVectorEnv) -> float:
    """Env-steps per second of n MathRoute envs in a vector env of class ``cls``
    (``EventLoopVectorEnv``: what ``make_vec`` builds by default below ``PROCESS_MIN_ENVS``
    live envs or on one CPU; ``ThreadedVectorEnv``)."""
    pool = _pool(url, n)
    fns = [lambda: _make(pool) for _ in range(n)]
    vec = cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    vec.reset(seed=0)
    actions = ["<model>medium</model>"] * n
    warm_until = time.perf_counter() + 0.5
    while time.perf_counter() < warm_until:  # warm connections and the task cache
        vec.step(actions)
    windows = []  # one rate per second-long window, for the interval
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        window_start, steps = time.perf_counter(), 0
        while time.perf_counter() - window_start < min(1.0, seconds):
            vec.step(actions)
            steps += n
        windows.append(steps / (time.perf_counter() - window_start))
    vec.close()
    pool.close()
    VECTOR_WINDOWS[(cls.__name__, n)] = windows
    return sum(windows) / len(windows)


#: (class name, envs) -> the per-window rates of the last ``orchenv_vector`` run
VECTOR_WINDOWS: dict[tuple[str, int], list[float]] = {}


def interval(rates: list[float], ideal: float) -> str:
    """``mean / ideal`` with a 95% t interval over the windows (they are not independent
    draws: a busy neighbour shifts several at once, so read it as a floor on the noise)."""
    k = len(rates)
    mean = sum(rates) / k
    if k < 2:
        return f"{mean / ideal:.2f}"
    from statistics import stdev

    t95 = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31}.get(k, 2.26)
    half = t95 * stdev(rates) / k**0.5
    return f"{mean / ideal:.2f} ({(mean - half) / ideal:.2f}-{(mean + half) / ideal:.2f})"


def orchenv_processes(url: str, n: int, seconds: float, workers: int) -> float:
    """Env-steps per second of n MathRoute envs in a ``ProcessVectorEnv``: ``workers``
    processes, each an event loop stepping its shard (Gymnasium's barrier semantics); what
    ``make_vec`` builds by default for at least ``PROCESS_MIN_ENVS`` live envs on a machine
    with several CPUs. Per-window rates in ``VECTOR_WINDOWS``, as ``orchenv_vector``."""
    pool = _pool(url, n)
    _make(pool)  # generates the test split once; each worker gets a copy with the fns
    source = _TASKS[0]
    fns = [
        lambda: gym.make(
            "orch/MathRoute-v0", pool=pool, task_source=source, max_turns=1, split="test"
        )
        for _ in range(n)
    ]
    vec = ProcessVectorEnv(fns, num_workers=workers, autoreset_mode=AutoresetMode.SAME_STEP)
    vec.reset(seed=0)
    actions = ["<model>medium</model>"] * n
    warm_until = time.perf_counter() + 0.5
    while time.perf_counter() < warm_until:
        vec.step(actions)
    windows = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        window_start, steps = time.perf_counter(), 0
        while time.perf_counter() - window_start < min(1.0, seconds):
            vec.step(actions)
            steps += n
        windows.append(steps / (time.perf_counter() - window_start))
    vec.close()
    pool.close()
    VECTOR_WINDOWS[("ProcessVectorEnv", n)] = windows
    return sum(windows) / len(windows)


def default_mode(url: str, n: int) -> str:
    """The mode ``make_vec`` picks by default for n of this script's envs on this machine."""
    pool = _pool(url, n)
    try:
        return auto_vector_mode("orch/MathRoute-v0", n, {"pool": pool})
    finally:
        pool.close()


def orchenv_lanes(url: str, n: int, seconds: float, processes: int | None = None) -> float:
    """Env-steps per second of n MathRoute envs each stepped on its own, with no barrier
    between them (``orchenv.vector.run_concurrently``, as ``orchenv eval --concurrency``);
    with ``processes``, its worker processes share the lanes (each builds its envs and
    its copy of the pool while the others warm up)."""
    pool = _pool(url, n)
    _make(pool)
    source = _TASKS[0]
    window = {"start": 0.0, "stop": 0.0}

    def make() -> gym.Env:
        return gym.make(
            "orch/MathRoute-v0", pool=pool, task_source=source, max_turns=1, split="test"
        )

    def lane(env: gym.Env | None, seed: int) -> tuple[int, float]:
        if env is None:
            env = make()
        env.reset(seed=seed)
        ready, steps = time.perf_counter(), 0
        while time.perf_counter() < window["stop"]:
            _, _, terminated, truncated, _ = env.step("<model>medium</model>")
            if time.perf_counter() >= window["start"]:
                steps += 1
            if terminated or truncated:
                env.reset()
        return steps, ready

    envs = [make() for _ in range(n)] if processes is None else [None] * n
    warm = 0.5 if processes is None else 8.0  # worker processes start within the warm-up
    now = time.perf_counter()  # CLOCK_MONOTONIC: the same clock in every process
    window["start"], window["stop"] = now + warm, now + warm + seconds
    jobs = [lambda env=env, i=i: lane(env, i) for i, env in enumerate(envs)]
    results = []
    for _, result, exc in run_concurrently(jobs, concurrency=n, processes=processes):
        if exc is not None:
            raise exc
        assert result is not None
        results.append(result)
    pool.close()
    late = max(ready for _, ready in results) - window["start"]
    if late > 0:
        print(
            f"(a lane started {late:.1f} s into the window: rate under-reported)", file=sys.stderr
        )
    return sum(steps for steps, _ in results) / seconds


def orchenv_calls(url: str, n: int, seconds: float) -> float:
    """Agent calls per second of n jobs calling ``pool.call`` in a loop, without an env: the
    client's own cost, like for like with the bare aiohttp loop."""
    pool = _pool(url, n)
    messages = [{"role": "user", "content": "What is 0 + 0?"}]
    window = {"start": 0.0, "stop": 0.0}

    def lane() -> int:
        calls = 0
        while time.perf_counter() < window["stop"]:
            pool.call("medium", messages)
            if time.perf_counter() >= window["start"]:
                calls += 1
        return calls

    now = time.perf_counter()
    window["start"], window["stop"] = now + 0.5, now + 0.5 + seconds
    total = sum(r or 0 for _, r, _ in run_concurrently([lane] * n, concurrency=n))
    pool.close()
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per cell")
    parser.add_argument("--latency", type=float, default=0.05, help="server latency in seconds")
    parser.add_argument(
        "--processes", type=int, default=os.cpu_count() or 1, help="workers of the second table"
    )
    args = parser.parse_args()
    w = args.processes

    sock = socket.create_server(("127.0.0.1", 0), backlog=4096)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    server = multiprocessing.get_context("spawn").Process(
        target=serve, args=(sock, args.latency), daemon=True
    )
    server.start()
    sock.close()
    rows = []
    try:
        print(
            f"server: separate process, {args.latency * 1000:.0f} ms per request; "
            f"{os.cpu_count()} CPUs; {args.seconds:g} s per cell; load average "
            f"{os.getloadavg()[0]:.2f} at the start\n"
        )
        print("One process (orchenv's event loop):\n")
        print("| envs | ideal | bare aiohttp req/s | orchenv pool.call req/s | calls / aiohttp "
              "| orchenv lanes env-steps/s | lanes / ideal | lanes / aiohttp "
              "| EventLoopVectorEnv env-steps/s | vector / ideal (95% CI) "
              "| ThreadedVectorEnv env-steps/s | threads / ideal (95% CI) |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for n in args.envs:
            ideal = n / args.latency
            bare = bare_aiohttp(url + "/chat/completions", n, args.seconds)
            calls = orchenv_calls(url, n, args.seconds)
            lanes = orchenv_lanes(url, n, args.seconds)
            vector = orchenv_vector(url, n, args.seconds)
            loop_windows = VECTOR_WINDOWS[("EventLoopVectorEnv", n)]
            threads = orchenv_vector(url, n, args.seconds, ThreadedVectorEnv)
            thread_windows = VECTOR_WINDOWS[("ThreadedVectorEnv", n)]
            print(
                f"| {n:,} | {ideal:,.0f} | {bare:,.0f} | {calls:,.0f} | {calls / bare:.2f} "
                f"| {lanes:,.0f} | {lanes / ideal:.2f} | {lanes / bare:.2f} "
                f"| {vector:,.0f} | {interval(loop_windows, ideal)} "
                f"| {threads:,.0f} | {interval(thread_windows, ideal)} |",
                flush=True,
            )
            rows.append((n, ideal, bare))
        if w > 1:
            print(f"\n{w} processes:\n")
            print(f"| envs | ideal | bare aiohttp, {w} processes, req/s "
                  f"| orchenv lanes, {w} processes, env-steps/s | lanes / ideal "
                  f"| lanes / aiohttp (1 process) | lanes / aiohttp ({w} processes) "
                  f"| ProcessVectorEnv ({w} workers) env-steps/s | vector / ideal (95% CI) "
                  "| make_vec's default |")  # fmt: skip
            print("|---|---|---|---|---|---|---|---|---|---|")
            for n, ideal, bare in rows:
                bare_w = bare_aiohttp_processes(url + "/chat/completions", n, args.seconds, w)
                lanes_w = orchenv_lanes(url, n, args.seconds, processes=w)
                vector_w = orchenv_processes(url, n, args.seconds, w)
                print(
                    f"| {n:,} | {ideal:,.0f} | {bare_w:,.0f} | {lanes_w:,.0f} "
                    f"| {lanes_w / ideal:.2f} | {lanes_w / bare:.2f} | {lanes_w / bare_w:.2f} "
                    f"| {vector_w:,.0f} "
                    f"| {interval(VECTOR_WINDOWS[('ProcessVectorEnv', n)], ideal)} "
                    f"| {default_mode(url, n)} |",
                    flush=True,
                )
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
