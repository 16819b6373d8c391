"""``orchenv serve`` throughput: env-steps/s and step latency over OpenEnv's WebSocket
sessions at 1 / 16 / 64 / 256 concurrent sessions, against the same env stepped in this
process in the same run.

In process: N envs (``gym.make(...).unwrapped``) stepped round-robin in one thread.
Served: ``orchenv serve ENV --workers W`` in a child process, N sessions of OpenEnv's own
``GenericEnvClient`` (async, one asyncio loop in this process). Both play the same
episodes: env / session i replays seed i mod 64, whose actions are the env's
``demo_action`` sequence precomputed in process, so the controller costs nothing on
either side; resets are not counted as steps. After ``--warmup`` seconds on each side
(steady state: tasks generated, simulated write-ups cached), the two alternate
``--reps`` times for ``--seconds`` each; steps/s are the mean over the reps
with a 95% t-interval; latencies are pooled p50 / p99 per step. The server's and this
process's CPU seconds per served step say where the time goes (client and server share
the machine's cores).

    python benchmarks/serve.py [--env-id orch/MathRoute-v0] [--workers 2] [--seconds 3]
        [--reps 5] [--sessions 1 16 64 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import requests
from scipy import stats

import orchenv  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


def episodes(env_id: str, count: int) -> list[list[str]]:
    """Seed i's demo-action episode, for i < count."""
    env: Any = gym.make(env_id).unwrapped
    out = []
    for seed in range(count):
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        actions = []
        while True:
            action = env.demo_action(rng)
            actions.append(action)
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        out.append(actions)
    return out


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return mean, max(mean - half, 0.0), mean + half  # a rate is never negative


class InProcess:
    """N envs stepped round-robin in this thread; env i replays seed i's episode."""

    def __init__(self, env_id: str, n: int, plays: list[list[str]]) -> None:
        self.envs: list[Any] = [gym.make(env_id).unwrapped for _ in range(n)]
        self.plays = plays
        self.cursor = [0] * n
        for i, env in enumerate(self.envs):
            env.reset(seed=i % len(plays))

    def run(self, seconds: float) -> tuple[float, list[float]]:
        latencies: list[float] = []
        plays, cursor = self.plays, self.cursor
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for i, env in enumerate(self.envs):
                play = plays[i % len(plays)]
                t0 = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(play[cursor[i]])
                latencies.append(time.perf_counter() - t0)
                cursor[i] += 1
                if terminated or truncated or cursor[i] >= len(play):
                    cursor[i] = 0
                    env.reset(seed=i % len(plays))
        return len(latencies) / (time.perf_counter() - start), latencies


class Served:
    """N sessions of OpenEnv's GenericEnvClient on one asyncio loop; session i replays seed
    i's episode (a reset per episode, as in process)."""

    def __init__(self, url: str, n: int, plays: list[list[str]]) -> None:
        from openenv.core.generic_client import GenericEnvClient

        self.loop = asyncio.new_event_loop()
        self.plays = plays
        self.clients = [GenericEnvClient(base_url=url, message_timeout_s=120.0) for _ in range(n)]
        self.cursor = [0] * n

        async def start() -> None:  # the client's calls are awaitables inside a running loop
            await asyncio.gather(*(c.connect() for c in self.clients))
            await asyncio.gather(
                *(c.reset(seed=i % len(plays)) for i, c in enumerate(self.clients))
            )

        self.loop.run_until_complete(start())

    def run(self, seconds: float) -> tuple[float, list[float]]:
        latencies: list[float] = []
        plays, cursor = self.plays, self.cursor
        stop = time.perf_counter() + seconds

        async def session(i: int, client: Any) -> None:
            play = plays[i % len(plays)]
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                result = await client.step({"text": play[cursor[i]]})
                latencies.append(time.perf_counter() - t0)
                cursor[i] += 1
                if result.done or cursor[i] >= len(play):
                    cursor[i] = 0
                    await client.reset(seed=i % len(plays))

        async def all_sessions() -> None:
            await asyncio.gather(*(session(i, c) for i, c in enumerate(self.clients)))

        start = time.perf_counter()
        self.loop.run_until_complete(all_sessions())
        return len(latencies) / (time.perf_counter() - start), latencies

    def close(self) -> None:
        async def close_all() -> None:
            await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)

        self.loop.run_until_complete(close_all())
        self.loop.close()


def cpu_seconds(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def start_server(
    env_id: str, workers: int, max_sessions: int, extra: list[str]
) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchenv", "serve", env_id, "--port", str(port)]
        + ["--workers", str(workers), "--max-sessions", str(max_sessions), *extra],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if requests.get(url + "/health", timeout=1).ok:
                return proc, url
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not come up")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="orch/MathRoute-v0")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds, each side")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--json", help="write the rows here too")
    parser.add_argument("--inline", action="store_true", help="serve with --inline")
    args = parser.parse_args()

    plays = episodes(args.env_id, 64)
    extra = ["--inline"] if args.inline else []
    proc, url = start_server(args.env_id, args.workers, max(args.sessions), extra)
    server = psutil.Process(proc.pid)
    rows = []
    try:
        for n in args.sessions:
            local_rates, local_lat, remote_rates, remote_lat = [], [], [], []
            server_cpu = client_cpu = local_cpu = 0.0
            server_per_step: list[float] = []  # per repetition, ms: an interval for the CPU
            client_per_step: list[float] = []
            loads: list[float] = []
            local, remote = InProcess(args.env_id, n, plays), Served(url, n, plays)
            local.run(args.warmup)  # tasks generated, write-ups cached: steady state
            remote.run(args.warmup)
            for _ in range(args.reps):  # alternate, so load drift hits both alike
                cpu0 = time.process_time()
                rate, lat = local.run(args.seconds)
                local_cpu += time.process_time() - cpu0
                local_rates.append(rate)
                local_lat += lat
                s0, c0 = cpu_seconds(server), resource.getrusage(resource.RUSAGE_SELF)
                rate, lat = remote.run(args.seconds)
                c1 = resource.getrusage(resource.RUSAGE_SELF)
                rep_server = cpu_seconds(server) - s0
                rep_client = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
                server_cpu += rep_server
                client_cpu += rep_client
                server_per_step.append(1000 * rep_server / max(len(lat), 1))
                client_per_step.append(1000 * rep_client / max(len(lat), 1))
                loads.append(os.getloadavg()[0])
                remote_rates.append(rate)
                remote_lat += lat
            remote.close()
            remote_steps = len(remote_lat)
            lm, llo, lhi = mean_ci(local_rates)
            rm, rlo, rhi = mean_ci(remote_rates)
            row = {
                "sessions": n,
                "in_process_steps_s": [lm, llo, lhi],
                "served_steps_s": [rm, rlo, rhi],
                "ratio": rm / lm,
                # the ratio's range over the two intervals (conservative; inf: unbounded)
                "ratio_bounds": [rlo / lhi, rhi / llo if llo > 0 else float("inf")],
                "in_process_p50_ms": pct(local_lat, 50),
                "in_process_p99_ms": pct(local_lat, 99),
                "served_p50_ms": pct(remote_lat, 50),
                "served_p99_ms": pct(remote_lat, 99),
                # CPU per counted step, resets included: load-independent, unlike steps/s
                "in_process_cpu_ms_per_step": 1000 * local_cpu / max(len(local_lat), 1),
                "server_cpu_ms_per_step": 1000 * server_cpu / max(remote_steps, 1),
                "client_cpu_ms_per_step": 1000 * client_cpu / max(remote_steps, 1),
                # mean over the repetitions with its 95% t-interval
                "server_cpu_ms_per_step_ci": list(mean_ci(server_per_step)),
                "client_cpu_ms_per_step_ci": list(mean_ci(client_per_step)),
                "load_average": [min(loads), max(loads)],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        proc.terminate()
        proc.wait(20)
    print(
        f"\n{args.env_id}, {args.workers} worker(s){' --inline' if args.inline else ''}, {args.reps} x {args.seconds:g} s per cell, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| sessions | in process steps/s (95% CI) | served steps/s (95% CI) | ratio (bounds) "
        "| p50 / p99 ms in process | p50 / p99 ms served "
        "| CPU ms per step: in process / server / client | server CPU ms per step (95% CI) "
        "| load average |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lm, llo, lhi = r["in_process_steps_s"]
        rm, rlo, rhi = r["served_steps_s"]
        print(
            f"| {r['sessions']} | {lm:,.0f} ({llo:,.0f}-{lhi:,.0f}) | {rm:,.0f} ({rlo:,.0f}-{rhi:,.0f}) "
            f"| {r['ratio']:.3f} ({r['ratio_bounds'][0]:.3f}-{r['ratio_bounds'][1]:.3f}) "
            f"| {r['in_process_p50_ms']:.3f} / {r['in_process_p99_ms']:.3f} "
            f"| {r['served_p50_ms']:.1f} / {r['served_p99_ms']:.1f} "
            f"| {r['in_process_cpu_ms_per_step']:.3f} / {r['server_cpu_ms_per_step']:.2f} "
            f"/ {r['client_cpu_ms_per_step']:.2f} "
            f"| {r['server_cpu_ms_per_step_ci'][0]:.3f} ({r['server_cpu_ms_per_step_ci'][1]:.3f}"
            f"-{r['server_cpu_ms_per_step_ci'][2]:.3f}) "
            f"| {r['load_average'][0]:.1f}-{r['load_average'][1]:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
