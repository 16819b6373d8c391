"""Seconds of `orchenv verify` on a 1,000-episode MathRoute bundle and a 100-episode OrchMAS
bundle (issues 30 and 37: each under a minute), and one `verify --rerun` of each (issue 37:
re-execution of 1,000 MathRoute episodes under 5 minutes).

Plays ``--episodes`` episodes of ``orch/MathRoute-v0`` (``random`` controller, simulated pool)
and ``--orchmas-episodes`` of ``orch/OrchMAS-v0`` (``env-random``) with ``orchenv eval``, writes their bundle (``orchenv submit``: copies the run and re-records
its calls from the simulator) and verifies it ``--repeats`` times in this process. Each
verification replays every episode against the recording, re-derives every recorded answer
from the simulated backend, searches the per-query oracle on its default 200 episodes within its
default time budget (``oracle_seconds``: past it the oracle says "not checked"; OrchMAS's
exhaustive search reaches a few episodes) and runs the statistical checks. The reference measured in the same process is the harness's own
time to play the same episodes (``orchenv eval``), so the ratio means something on any machine.
Reported: wall-clock seconds of each verification, their mean with a 95% t interval, and the
ratio to the eval's time.

    python benchmarks/verify_bundle.py [--episodes 1000] [--orchmas-episodes 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import orchenv  # noqa: F401 - registers the envs
from orchenv.audit import t95
from orchenv.eval import EvalConfig, evaluate
from orchenv.verify import verify_bundle, write_bundle

ENV_ID = "orch/MathRoute-v0"
TARGET_S = 60.0


def measure(env_id: str, controller: str, episodes: int, repeats: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        run, bundle = Path(tmp) / "run", Path(tmp) / "bundle"
        start = time.perf_counter()
        config = EvalConfig(env_id, controller=controller, episodes=episodes, seeds=[0])
        evaluate(config, run, progress=False)
        eval_s = time.perf_counter() - start
        start = time.perf_counter()
        write_bundle(run, bundle)
        submit_s = time.perf_counter() - start
        times = []
        oracle = ""
        for _ in range(repeats):
            start = time.perf_counter()
            report = verify_bundle(bundle)
            times.append(time.perf_counter() - start)
            if not report.verified:
                print("NOT VERIFIED:", [(c.name, c.reason) for c in report.failures()])
                return 1
            oracle = f"{report.check('oracle').verdict}: {report.check('oracle').reason[:100]}"
        start = time.perf_counter()
        rerun = verify_bundle(bundle, rerun=True)
        rerun_s = time.perf_counter() - start
        if not rerun.verified:
            print("NOT RE-EXECUTED:", [(c.name, c.reason) for c in rerun.failures()])
            return 1
    mean = statistics.fmean(times)
    half = t95(len(times)) * statistics.stdev(times) / len(times) ** 0.5 if len(times) > 1 else 0.0
    print(f"env                 {env_id} ({controller})")
    print(f"episodes            {episodes}")
    print(f"orchenv eval        {eval_s:.2f} s (reference)")
    print(f"orchenv submit      {submit_s:.2f} s (re-records {episodes} episodes' calls)")
    print(f"orchenv verify      {', '.join(f'{t:.2f}' for t in times)} s")
    print(f"verify mean         {mean:.2f} s, 95% CI [{mean - half:.2f}, {mean + half:.2f}]")
    print(f"verify / eval       {mean / eval_s:.2f}x")
    print(f"oracle              {oracle}")
    print(f"verify --rerun      {rerun_s:.2f} s (re-executes {controller}; target < 300 s)")
    print(
        f"target              < {TARGET_S:.0f} s: {'met' if mean + half < TARGET_S else 'NOT met'}"
    )
    print()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--orchmas-episodes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    status = measure(ENV_ID, "random", args.episodes, args.repeats)
    if args.orchmas_episodes > 0:
        status |= measure("orch/OrchMAS-v0", "env-random", args.orchmas_episodes, args.repeats)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
