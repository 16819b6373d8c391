"""Does the executor's role matter? A generic-role vs a domain-role controller on OrchMAS.

Both controllers make one executor call with the question, then a second call asking
the executor to check its answer, then answer with the executor's boxed answer. The
generic controller always uses the role "assistant"; the domain controller picks a role
from the question's wording. Mean score (F1) and mean return over 200 episodes per
task source, simulated executor, offline:

    .venv/bin/python examples/orchmas_roles.py [--episodes 200]
"""

from __future__ import annotations

import argparse

from orchenv.envs.orchmas.env import OrchMASEnv
from orchenv.envs.orchmas.protocol import call_action
from orchenv.grading import extract_boxed


def domain_role(question: str) -> str:
    q = question.lower()
    if "capital" in q:
        return "geography researcher"
    if "currency" in q:
        return "economics expert"
    if "language" in q:
        return "linguist"
    return "careful math solver"


def run(env: OrchMASEnv, episodes: int, *, domain: bool) -> tuple[float, float]:
    scores, returns = [], []
    for ep in range(episodes):
        obs, info = env.reset(seed=ep)
        question = env.task.prompt
        role = domain_role(question) if domain else "assistant"
        total = 0.0
        _, r, *_ = env.step(call_action(role, question))
        total += r
        _, r, *_ = env.step(call_action(role, "Check the previous answer carefully and verify it."))
        total += r
        reply = env.history[-1].get("reply", "")
        answer = extract_boxed(reply) or "unknown"
        _, r, term, _, info = env.step(f"<think>Done.</think><answer>{answer}</answer>")
        total += r
        assert term
        scores.append(info["score"])
        returns.append(total)
    return sum(scores) / episodes, sum(returns) / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    for source in ("procedural-math", "orchmas-qa"):
        env = OrchMASEnv(task_source=source)
        for label, domain in (("generic role", False), ("domain role", True)):
            score, ret = run(env, args.episodes, domain=domain)
            print(f"{source:<16} {label:<13} mean score {score:.3f}  mean return {ret:.3f}")


if __name__ == "__main__":
    main()
