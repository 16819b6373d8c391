"""Episodes/s of the evaluation harness against a bare loop over the same env and controller.

The harness (``orchenv.eval.evaluate``) does per episode what a bare loop does (reset with
the episode's seed, act, step until the end) plus: an ``EpisodeRecord``, a JSON line written
to disk in one ``write`` call, fsync on the configured schedule, and a fresh controller per
episode for controllers without ``reset(seed)`` (what makes resume exact). The bare loop
resets with the same per-episode seeds and rebuilds nothing. Both use the simulated pool
and the ``random`` controller (``p_accept=0.5``, so some episodes escalate), in this process,
after a warm-up pass that generates every task and write-up once; the best of ``--repeats``
is kept, in wall-clock time (what a user waits, fsync included) and in CPU time (steadier
on a shared machine; fsync waits do not count). Target: harness overhead <= 20% with the default fsync schedule (at most once a
second). ``--fsync-every 1`` shows the cost of an fsync after every episode.

    python benchmarks/eval_throughput.py [--episodes 2000] [--seeds 2] [--fsync-every 0]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gymnasium as gym

import orchenv  # noqa: F401
from orchenv.controllers import make_controller
from orchenv.eval import EvalConfig, episode_seed, evaluate

ENV_ID = "orch/MathRoute-v0"
CONTROLLER_KWARGS = {"p_accept": 0.5}


def bare_loop(
    env: gym.Env, seeds: list[int], episodes: int, per_episode: bool = False
) -> tuple[float, float]:
    """(wall, CPU) seconds of the plain reset/act/step loop over the same (seed, episode) tasks.

    ``per_episode``: re-seed the controller per episode as the harness does
    (``RandomRouter.reseed``), which makes the loop's results identical to the harness's;
    otherwise one controller per seed, its RNG running on across episodes.
    """
    start, cpu = time.perf_counter(), time.process_time()
    for seed in seeds:
        controller = make_controller("random", seed=seed, **CONTROLLER_KWARGS)
        for i in range(episodes):
            if per_episode:
                controller.reseed(episode_seed(seed, i))
            obs, info = env.reset(seed=episode_seed(seed, i))
            controller.bind(env.unwrapped)
            while True:
                obs, _, terminated, truncated, info = env.step(controller.act(obs, info))
                if terminated or truncated:
                    break
    return time.perf_counter() - start, time.process_time() - cpu


def harness(
    env: gym.Env,
    seeds: list[int],
    episodes: int,
    fsync_every: int,
    fsync_interval_s: float | None,
) -> tuple[float, float]:
    """(wall, CPU) seconds of ``evaluate`` over the same tasks, into a fresh directory."""
    config = EvalConfig(
        env_id=ENV_ID,
        controller="random",
        controller_kwargs=dict(CONTROLLER_KWARGS),
        episodes=episodes,
        seeds=seeds,
    )
    with tempfile.TemporaryDirectory() as out:
        start, cpu = time.perf_counter(), time.process_time()
        evaluate(
            config,
            out,
            env=env,
            progress=False,
            fsync_every=fsync_every,
            fsync_interval_s=fsync_interval_s,
        )
        return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000, help="episodes per seed")
    parser.add_argument("--seeds", type=int, default=2, help="number of seeds (0, 1, ...)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--fsync-every", type=int, default=0, help="harness fsync every K episodes (0: off)"
    )
    parser.add_argument(
        "--fsync-interval", type=float, default=1.0, help="harness fsync interval, s (0: off)"
    )
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    n = len(seeds) * args.episodes
    interval = args.fsync_interval if args.fsync_interval > 0 else None

    env = gym.make(ENV_ID)
    # warm-up: both share this env, whose task source and simulated agents cache what they
    # generate, so the timed passes measure the steady state, not generation
    bare_loop(env, seeds, args.episodes)
    bare, seeded, timed = [], [], []
    for _ in range(args.repeats):  # interleaved so drift hits all alike
        bare.append(bare_loop(env, seeds, args.episodes))
        seeded.append(bare_loop(env, seeds, args.episodes, per_episode=True))
        timed.append(harness(env, seeds, args.episodes, args.fsync_every, interval))
    schedule = (
        f"fsync every {args.fsync_every} episodes" if args.fsync_every else "no count-based fsync"
    )
    schedule += f", every {interval:g} s" if interval else ", no timed fsync"
    print(
        f"episodes per run     {n} ({len(seeds)} seeds x {args.episodes}), best of {args.repeats}"
    )
    print(f"harness fsync        {schedule}; always at the end")
    for label, k in (("wall clock", 0), ("CPU time", 1)):
        h_s = min(t[k] for t in timed)
        print(f"{label}: harness {n / h_s:,.0f} episodes/s")
        for name, runs in (
            ("bare loop, one controller per seed", bare),
            ("bare loop, controller seeded per episode", seeded),
        ):
            b_s = min(t[k] for t in runs)
            print(
                f"  vs {name:<42} {n / b_s:>8,.0f} episodes/s"
                f"  overhead {(h_s - b_s) / b_s * 100:5.1f}%"
            )
    print("target: overhead <= 20%")


if __name__ == "__main__":
    main()
