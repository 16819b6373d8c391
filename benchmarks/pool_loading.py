"""Loading a large pool file: time and peak memory against the number of agents (issue 28).

A pool file of N agents (JSON; ``--yaml`` for YAML) is written to a temp dir and loaded with
``orchenv.make_pool`` in a fresh process per size, so the peak RSS is that of the load.
Loading used to grow with the square of N (``AgentPool`` kept, for every agent, the tuple
of all stronger agents: 10k agents took 35 s and 439 MiB); it is linear now, and a pool
holds at most ``orchenv.pool.MAX_POOL_AGENTS`` (20,000) agents.

    python benchmarks/pool_loading.py [--sizes 5000 10000 20000] [--repeats 3] [--yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = """
import resource, sys, time
from orchenv.pool import make_pool
start = time.perf_counter()
pool = make_pool(sys.argv[1])
took = time.perf_counter() - start
assert len(pool.names) == int(sys.argv[2])
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def pool_document(n: int) -> dict[str, object]:
    agents = [
        {
            "name": f"agent-{i}",
            "model": f"model-{i % 97}",
            "tier": i % 7,
            "price_prompt": 0.1 + (i % 13) / 10,
            "price_completion": 0.2 + (i % 11) / 10,
            "backend": "simulated",
        }
        for i in range(n)
    ]
    return {"name": f"big-{n}", "agents": agents}


def write_pool(n: int, directory: str, yaml_format: bool) -> str:
    document = pool_document(n)
    if yaml_format:
        import yaml

        path = os.path.join(directory, f"pool-{n}.yaml")
        with open(path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(document, fh, sort_keys=False)
    else:
        path = os.path.join(directory, f"pool-{n}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(document, fh)
    return path


def load_once(path: str, n: int) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, path, str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, rss = done.stdout.split()
    return float(seconds), float(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[5_000, 10_000, 20_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--yaml", action="store_true")
    args = parser.parse_args()
    print("| agents | file MB | load s (median) | runs | peak RSS MB |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="orchenv-pool-bench-") as directory:
        for n in args.sizes:
            path = write_pool(n, directory, args.yaml)
            runs = [load_once(path, n) for _ in range(args.repeats)]
            times = [t for t, _ in runs]
            size = os.path.getsize(path) / 2**20
            print(
                f"| {n:,} | {size:.1f} | {statistics.median(times):.2f} "
                f"| {', '.join(f'{t:.2f}' for t in times)} | {max(r for _, r in runs):.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
