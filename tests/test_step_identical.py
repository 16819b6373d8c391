"""Step outputs pinned bit for bit (issue 40 item 8): the speed work on the step path
(orchenv/core.py, pool.py, info.py, backends/, envs/mathroute/) must not change a single
observation, reward, flag, info value, cost or draw of any RNG.

Each case plays a few hundred steps of an id with the env's own random well-formed actions
(``demo_action``, fixed controller seed) over several reset seeds, and hashes (sha256) the
JSON of every ``reset`` and ``step`` return plus the env's RNG state after each episode.
The expected digests were computed on the code before the speed changes (commit 755eb91)
and are committed here; a change to any output shows as a different digest. A deliberate
change of behaviour must update a digest here, and say why in its commit.

Regenerate (only for a deliberate behaviour change):
``python tests/test_step_identical.py`` prints the current digests.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the orch/ ids)

#: (id, reset seeds, steps in all) -> the sha256 of the trace on the unchanged code
CASES: dict[str, tuple[tuple[int, ...], int]] = {
    "orch/MathRoute-v0": ((0, 1, 2, 3, 4, 5), 300),
    "orch/MathRouteSystem2-v0": ((0, 7, 11), 200),
    "orch/BudgetRoute-v0": ((0, 5, 9), 200),
    "orch/MultihopQA-v0": ((0, 3), 150),
    "orch/OrchMAS-v0": ((0, 4), 150),
}
EXPECTED: dict[str, str] = {
    "orch/BudgetRoute-v0": "c2d21505d964dff98aa904b5f0d17126800c753e8d65195ae2a851ebde7256ef",
    "orch/MathRoute-v0": "5db65f783e1cc427c4bf1b0b710e4154ec88f8887109041506bf43b2877730e8",
    "orch/MathRouteSystem2-v0": "649cfe63714f19dcec407467cf4113cbebda7ce3aa022f1ffe6da01c26fc8af4",
    "orch/MultihopQA-v0": "749242b234a810d89a056132df1356e1be913fe61c6dbd6e467a4e4cc7305ab5",
    "orch/OrchMAS-v0": "3cd4bc0d7161417843420976791fc66fd42435379d26dd8904d87a322b85d91f",
    "cycle": "28c206c6ed7c55123bdd04ef6b0fb461ebf63eca233a49888df912810f0f3e6a",
}


def _plain(value: Any) -> Any:
    """JSON-able, exact: floats by repr (bit-identical or different), arrays by dtype,
    shape and bytes."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_plain(v) for v in value]]
    if isinstance(value, np.ndarray):
        return ["ndarray", str(value.dtype), list(value.shape), value.tobytes().hex()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return ["float", repr(f)] if not math.isfinite(f) else ["float", f.hex()]
    if value is None or isinstance(value, str):
        return value
    return [type(value).__name__, repr(value)]


def trace_digest(env_id: str, seeds: tuple[int, ...], steps: int, cycle: bool = False) -> str:
    """sha256 of ``steps`` steps' returns (and RNG states between episodes); ``cycle``: the
    benchmark's route / reject-and-escalate / accept actions instead of random ones."""
    env = gym.make(env_id).unwrapped
    rng = np.random.default_rng(1234)
    h = hashlib.sha256()
    agents = list(env.pool.names) * 2
    bench = [
        f"<thinking>medium</thinking><model>{agents[1]}</model>",
        f"<checking>off</checking><verdict>False</verdict><model>{agents[-1]}</model>",
        "<checking>all steps hold</checking><verdict>True</verdict>",
    ]

    def put(item: Any) -> None:
        h.update(json.dumps(_plain(item), sort_keys=True, ensure_ascii=True).encode())
        h.update(b"\n")

    done, n, episode = True, 0, 0
    while n < steps:
        if done:
            if episode:
                put(["rng", env.np_random.bit_generator.state])
            obs, info = env.reset(seed=seeds[episode % len(seeds)])
            put(["reset", obs, info])
            episode += 1
        action = bench[n % 3] if cycle else env.demo_action(rng)
        obs, reward, terminated, truncated, info = env.step(action)
        put(["step", action, obs, reward, terminated, truncated, info])
        done = bool(terminated or truncated)
        n += 1
    put(["rng", env.np_random.bit_generator.state])
    env.close()
    return h.hexdigest()


def test_benchmark_cycle_unchanged() -> None:
    """The actions ``benchmarks/env_step.py`` times, pinned the same way."""
    assert trace_digest("orch/MathRoute-v0", (0, 1), 300, cycle=True) == EXPECTED["cycle"]


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_step_outputs_unchanged(env_id: str) -> None:
    seeds, steps = CASES[env_id]
    assert trace_digest(env_id, seeds, steps) == EXPECTED[env_id], (
        f"{env_id}: {steps} steps over seeds {seeds} gave different observations, rewards, "
        "infos or RNG draws than the code these digests were recorded on; a speed change must "
        "not change outputs (if the change of behaviour is deliberate, rerun this file as a "
        "script and update EXPECTED, saying why in the commit)"
    )


def test_digest_sees_a_change() -> None:
    """The digest is not blind: a different controller stream gives a different trace."""
    a = trace_digest("orch/MathRoute-v0", (0,), 30)
    b = trace_digest("orch/MathRoute-v0", (1,), 30)
    assert a != b


if __name__ == "__main__":
    for env_id, (seeds, steps) in sorted(CASES.items()):
        print(f"    {env_id!r}: {trace_digest(env_id, seeds, steps)!r},")
    print(f"    'cycle': {trace_digest('orch/MathRoute-v0', (0, 1), 300, cycle=True)!r},")
