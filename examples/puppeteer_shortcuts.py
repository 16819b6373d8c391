"""Measure Puppeteer's audit shortcuts against the calibrated single call (issue 25).

Plays each named strategy of ``PuppeteerEnv.audit_strategies()`` (policies that read only the
trajectory the observation shows) and the env's skill reference (``skill_action``) at a few
skill levels, on one preset and task kind, over the same test tasks, and prints each mean score
and return with a 95% interval (normal approximation over tasks) and the paired difference
to the single call.

    python examples/puppeteer_shortcuts.py --preset titan-mono --tasks multiple-choice -n 600
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

from orchenv.envs.puppeteer.env import PuppeteerEnv


def play(env: PuppeteerEnv, policy, n: int, seed: int = 0) -> tuple[list[float], list[float]]:
    """Scores and returns (gamma 1: the episode's summed reward) of ``n`` episodes."""
    scores, returns = [], []
    for i in range(n):
        env.reset(seed=seed, options={"task_index": i})
        rng = np.random.default_rng([seed, i])
        total, done, info = 0.0, False, {}
        while not done:
            _, reward, terminated, truncated, info = env.step(policy(env, rng))
            total += reward
            done = terminated or truncated
        scores.append(float(info["score"]))
        returns.append(total)
    return scores, returns


def interval(values: list[float]) -> str:
    mean = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return f"{mean:.3f} ± {half:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--preset", default="titan-mono")
    parser.add_argument("--tasks", default="multiple-choice")
    parser.add_argument("-n", type=int, default=600)
    parser.add_argument("--skill", type=float, nargs="*", default=[0.0, 0.5, 1.0])
    parser.add_argument("--only", nargs="*", default=None, help="strategy names to play")
    args = parser.parse_args()
    env = PuppeteerEnv(
        preset=args.preset, tasks=args.tasks, split="test", n_tasks=args.n, sandbox="bwrap"
    )
    policies = {name: (lambda e, r, f=f: f(e)) for name, f in env.audit_strategies().items()}

    def larger(e, r):  # the mirror of smaller-answer: equal to it when no magnitude tell
        from orchenv.envs.puppeteer.choices import _extreme, agent_text

        return _extreme(e, agent_text(e.pool.strongest(), "reasoning"), max)

    policies["larger-answer (mirror)"] = larger

    def syntax_check(e, r):  # SRDD: re-ask while the current code does not compile
        from orchenv.envs.puppeteer.choices import agent_text, terminate_text

        reason = agent_text(e.pool.strongest(), "reasoning")
        if e.answer is None:
            return reason
        try:
            compile(e.answer, "<draft>", "exec")
        except (SyntaxError, ValueError):
            return reason
        return terminate_text()

    policies["syntax-check (honest verifier)"] = syntax_check
    if args.only:
        policies = {k: v for k, v in policies.items() if k in args.only}
    for s in args.skill:

        def skilled(e, r, s=s):
            return e.skill_action(bool(r.random() < s), r)

        policies[f"skill-reference s={s:g}"] = skilled
    base_scores = None
    print(f"{args.preset} / {args.tasks}, {args.n} test tasks; mean, 95% interval")
    for name, policy in policies.items():
        scores, returns = play(env, policy, args.n)
        if name == "one-call-then-terminate":
            base_scores = scores
        diff = ""
        if base_scores is not None and name != "one-call-then-terminate":
            d = [a - b for a, b in zip(scores, base_scores, strict=True)]
            diff = f"   minus single call: {interval(d)}"
        print(f"{name:28s} score {interval(scores)}  return {interval(returns)}{diff}")
    env.close()


if __name__ == "__main__":
    main()
