"""Record a run's agent calls, then replay them: free, exact repeats of expensive runs.

Works the same with live pools (``make_pool("my_pool.yaml", record_to=...)``); the
simulated pool keeps this example offline.

    python examples/record_replay.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gymnasium as gym

import orchenv  # noqa: F401
from orchenv.controllers import make_controller
from orchenv.pool import make_pool
from orchenv.runner import run_episodes

path = Path(tempfile.mkdtemp()) / "calls.jsonl"

recording = make_pool("system1", record_to=path)  # every call appended to calls.jsonl
env = gym.make("orch/MathRoute-v0", pool=recording, split="test")
live, _ = run_episodes(
    env, make_controller("random", seed=0, p_accept=0.5), 50, seed=0, progress=False
)
print(f"recorded {len(path.read_text().splitlines())} calls, accuracy {live.accuracy:.3f}")

replaying = make_pool("system1", replay_from=path)  # strict: a call not in the file is an error
env = gym.make("orch/MathRoute-v0", pool=replaying, split="test")
again, _ = run_episodes(
    env, make_controller("random", seed=0, p_accept=0.5), 50, seed=0, progress=False
)
print(
    f"replayed: accuracy {again.accuracy:.3f}, {again.cached_call_fraction:.0%} of calls from the file"
)
assert again.accuracy == live.accuracy and again.total_cost_usd == live.total_cost_usd
