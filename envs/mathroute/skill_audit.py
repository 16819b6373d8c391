"""Audit-style measurements for MathRoute (issue 25): shortcuts against an honest skill.

Every policy here is played on the same test tasks (``task_index`` 0..n-1, seed 0), so the
numbers are paired. The honest references read the privileged truth only the way the
paper's skill would (a verifier that knows whether the draft is right); the shortcuts read
only what a learner sees (the observation text, the turn, the draft's author).

    python -m orchenv.envs.mathroute.skill_audit --episodes 600 [-e reward=paper]

prints, per system, return (95% interval over episodes), Table-2-protocol accuracy and
verdict errors for reject-all, the always-* strategies, the perfect verifier, the other
text-level shortcuts and the skill reference at s = 0, 0.25, 0.5, 0.75, realistic, 1.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchenv.envs.mathroute.env import MathRouteEnv, perfect_verifier

#: a policy: (env, rng) -> action text
Policy = Callable[[MathRouteEnv, np.random.Generator], str]

ENV_IDS = {"System 1": "orch/MathRoute-v0", "System 2": "orch/MathRouteSystem2-v0"}
SKILL_LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: the usage protocol of seed 000's Table 2 (section 4.2): budgets enforced as eq. 2's share
TABLE2 = {"enforce_usage_constraints": True, "usage_denominator": "calls"}


@dataclass
class Measure:
    """Per-episode values of one policy, with means and 95% half-widths."""

    returns: list[float]
    correct: list[float]
    false_rejections: list[float]
    false_acceptances: list[float]

    @staticmethod
    def _ci(values: Sequence[float]) -> tuple[float, float]:
        a = np.asarray(values, dtype=float)
        if a.size < 2:
            return float(a.mean()) if a.size else math.nan, math.nan
        return float(a.mean()), float(1.96 * a.std(ddof=1) / math.sqrt(a.size))

    @property
    def ret(self) -> tuple[float, float]:
        return self._ci(self.returns)

    @property
    def accuracy(self) -> tuple[float, float]:
        return self._ci(self.correct)

    def row(self) -> dict[str, float]:
        (r, rh), (a, ah) = self.ret, self.accuracy
        return {
            "return": r,
            "return_ci": rh,
            "accuracy": a,
            "accuracy_ci": ah,
            "false_rejections": float(np.mean(self.false_rejections)),
            "false_acceptances": float(np.mean(self.false_acceptances)),
        }


def make_env(env_id: str, **kwargs: Any) -> MathRouteEnv:
    import gymnasium as gym

    import orchenv  # noqa: F401  (registers the ids)

    env = gym.make(env_id, split="test", **kwargs).unwrapped
    assert isinstance(env, MathRouteEnv)
    return env


def measure(
    env: MathRouteEnv,
    policy: Policy,
    episodes: int,
    *,
    seed: int = 0,
    reset_usage: bool = True,
) -> Measure:
    """Play ``policy`` on test tasks 0..episodes-1 (one rng for the whole run, seeded by
    ``seed``). With enforced budgets the ledger is reset once at the start, so it binds over
    the run as in the paper's evaluation."""
    rng = np.random.default_rng(seed)
    out = Measure([], [], [], [])
    for k in range(episodes):
        options: dict[str, Any] = {"task_index": k}
        if reset_usage and k == 0:
            options["reset_usage_ledger"] = True
        env.reset(seed=seed, options=options)
        total = 0.0
        while True:
            _, reward, terminated, truncated, info = env.step(policy(env, rng))
            if info.get("invalid_action"):
                raise AssertionError(f"invalid action from the policy: {info.get('error')}")
            total += float(reward)
            if terminated or truncated:
                break
        out.returns.append(total)
        out.correct.append(float(bool(info["correct"])))
        out.false_rejections.append(info["metrics"]["false_rejections"])
        out.false_acceptances.append(info["metrics"]["false_acceptances"])
    return out


def skill_policy(s: float) -> Policy:
    """The audit's skill reference at skill ``s``: each decision is skilled with
    probability ``s`` (``MathRouteEnv.skill_action``)."""

    def policy(env: MathRouteEnv, rng: np.random.Generator) -> str:
        action = env.skill_action(bool(rng.random() < s), rng)
        assert action is not None
        return action

    return policy


def strategy_policy(strategy: Callable[[Any], str]) -> Policy:
    return lambda env, rng: strategy(env)


def audit_table(
    env_id: str, episodes: int, env_kwargs: Mapping[str, Any] | None = None
) -> dict[str, dict[str, float]]:
    """Every row of the audit-style table for one env (return under ``env_kwargs``,
    accuracy under the same reward with Table 2's usage protocol)."""
    kwargs = dict(env_kwargs or {})
    env = make_env(env_id, **kwargs)
    table2 = make_env(env_id, **{**kwargs, **TABLE2})
    policies: dict[str, Policy] = {
        name: strategy_policy(p) for name, p in env.audit_strategies().items()
    }
    policies["perfect verifier (privileged)"] = strategy_policy(perfect_verifier)
    realistic = env.realistic_skill
    levels = sorted({*SKILL_LEVELS, *([realistic] if realistic is not None else [])})
    for s in levels:
        policies[f"skill s={s:g}"] = skill_policy(s)
    rows: dict[str, dict[str, float]] = {}
    for name, policy in policies.items():
        row = measure(env, policy, episodes).row()
        acc = measure(table2, policy, episodes).accuracy
        row["table2_accuracy"], row["table2_accuracy_ci"] = acc
        rows[name] = row
    return rows


def markdown(rows: Mapping[str, Mapping[str, float]]) -> str:
    lines = [
        "| policy | return | accuracy | Table 2 protocol accuracy | rejects right/ep "
        "| accepts wrong/ep |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['return']:.3f} ± {r['return_ci']:.3f} "
            f"| {r['accuracy']:.3f} ± {r['accuracy_ci']:.3f} "
            f"| {r['table2_accuracy']:.3f} ± {r['table2_accuracy_ci']:.3f} "
            f"| {r['false_rejections']:.3f} | {r['false_acceptances']:.3f} |"
        )
    return "\n".join(lines)


def _value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=600)
    parser.add_argument("--system", choices=sorted(ENV_IDS), action="append")
    parser.add_argument("-e", "--env-kwarg", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    kwargs = dict(kv.split("=", 1) for kv in args.env_kwarg)
    env_kwargs = {k: _value(v) for k, v in kwargs.items()}
    for system in args.system or sorted(ENV_IDS):
        print(f"\n### {system} ({ENV_IDS[system]}, {env_kwargs or 'defaults'})\n")
        print(markdown(audit_table(ENV_IDS[system], args.episodes, env_kwargs)))


if __name__ == "__main__":
    main()
