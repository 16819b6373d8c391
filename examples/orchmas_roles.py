"""Does what the orchestrator asks matter? Three controllers on OrchMAS's default tasks.

The default task set interleaves procedural math and multi-hop questions. Each
controller calls the simulated executor, then answers with its last boxed answer:

- generic: role "assistant", the question, then "verify" (2 calls);
- domain role: the same with a role that fits the question ("careful math solver" for
  math, "researcher" for multi-hop questions), chosen from the question's wording;
- decompose: as domain role, but on a multi-hop question it first asks the chain's
  sub-questions one by one (the discrete view's planner menu, each bridge entity taken
  from the executor's last answer), then the whole question with that evidence in the
  conversation.

Mean score (token F1 gated by format), mean return and executor calls over 200 episodes,
offline:

    .venv/bin/python examples/orchmas_roles.py [--episodes 200]
"""

from __future__ import annotations

import argparse
import re

from orchenv.envs.orchmas.choices import CHOICE_ROLES
from orchenv.envs.orchmas.env import OrchMASEnv
from orchenv.envs.orchmas.protocol import call_action

MATHY = re.compile(r"[\d$\\=+^]")


def domain_role(question: str) -> str:
    return "careful math solver" if MATHY.search(question) else "researcher"


def run(env: OrchMASEnv, episodes: int, kind: str) -> tuple[float, float, float]:
    scores, returns, calls = [], [], []
    sub_index = 1 + 2 * len(CHOICE_ROLES) + CHOICE_ROLES.index("researcher")
    for ep in range(episodes):
        env.reset(seed=ep)
        question = env.task.prompt
        role = "assistant" if kind == "generic" else domain_role(question)
        total = 0.0
        if kind == "decompose":
            while (sub := env.action_choices()[sub_index]) is not None:
                total += env.step(sub)[1]
        total += env.step(call_action(role, question))[1]
        if env.executor_calls() == 1:  # nothing decomposed: ask for a check
            check = f"Verify your previous answer to this question: {question}"
            total += env.step(call_action(role, check))[1]
        answer = env.last_executor_answer() or "unknown"
        _, r, term, _, info = env.step(f"<think>Done.</think><answer>{answer}</answer>")
        total += r
        assert term
        scores.append(info["score"])
        returns.append(total)
        calls.append(info["metrics"]["executor_calls"])
    n = float(episodes)
    return sum(scores) / n, sum(returns) / n, sum(calls) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    env = OrchMASEnv()
    for kind in ("generic", "domain role", "decompose"):
        score, ret, calls = run(env, args.episodes, kind)
        print(f"{kind:<12} mean score {score:.3f}  mean return {ret:.3f}  calls {calls:.2f}")


if __name__ == "__main__":
    main()
