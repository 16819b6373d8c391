"""Seed 000's reward as small pure functions (the env composes them).

Seed 000 (iterative critique-and-routing controller), section 3.2-3.3:

- verification reward r^V_t in {0, 1}: 1 when the controller's verdict on
  the previous draft matches the draft's correctness (accept a correct
  draft, reject a wrong one);
- routing reward r^R_t in {0, 1}: 1 when the agent the controller routed
  to at turn t produces a correct solution;
- composite reward (eq. 1): r_t = alpha * r^R_t + (1 - alpha) * r^V_t with
  alpha = 0.5. Boundary cases: a component that does not apply at turn t is
  zero: r^V_1 = 0 (nothing to verify at the first turn) and r^R_t = 0 when
  the controller stops (accepts, or rejects with no stronger agent left);
- Lagrangian-modified routing reward (eq. 3): the usage constraint of agent
  i enters as a cost lambda_i each time the controller routes to i:
  r~^R_t = r^R_t - lambda_{a_t}, and r~_t = alpha * r~^R_t + (1 - alpha) * r^V_t.
  Table 9's multipliers are 0.25 / 0.125 / 0 for the strongest, middle and
  weakest agent, and the usage constraints c_i are 0.25 / 0.5 / 1.

The reward scale (Table 9's "routing / verification reward" of 1) is the
``value`` argument of the two component functions.

Reward variants (``MathRouteEnv(reward=...)``)
----------------------------------------------
``"outcome"`` (the default) is the objective of problem (2) itself, relaxed the
same way: ``value * 1[final answer correct]`` when the episode ends, minus
``lambda_a`` for every call at the step that makes it. No verdict is paid for, so
a false rejection can only cost (lambda of the next agent) and never earn; and
since r~^R = r^R - lambda already puts lambda on the scale of a routing reward of
1, the multipliers keep Table 9's values. Verification still matters: it is how a
policy that cannot see the answer finds out when to escalate.

``"paper"`` is eq. (1)/(3) per turn, as written (the default until issue 25). Summed
with gamma = 1 it pays for rejecting a *correct* draft: the rejection loses (1 - alpha)
of verification reward but the re-routed call earns alpha * (1 - lambda) and accepting
its draft earns (1 - alpha) again (0.9375 > 0.5 for the middle agent with Table 9's
values). Rejecting every draft without reading it (weakest, then each agent up) returns
1.292 +- 0.008 per episode on System 1, above a verifier that is never wrong (1.154 +-
0.017; System 2: 1.292 vs 1.275), and the exact best response routes every task to the
weakest agent and falsely rejects about 0.54 (System 1) / 0.27 (System 2) times per
episode (docs/mathroute.md, "Audit").

Why not keep eq. (1)/(3) and only withhold the routing reward of a call made after
rejecting a correct draft? Tried: any per-turn verification reward still pays for
*creating* a wrong draft to catch. With that gate the best response falsely rejects
a right draft of the weakest agent to reach an agent it knows will be wrong, then
collects (1 - alpha) for rejecting that one plus the next routing reward (2.4% of
System 1 episodes). A reward on the final outcome has nothing of the kind to harvest.
"""

from __future__ import annotations

from collections.abc import Mapping

#: the reward variants MathRouteEnv accepts (see the module docstring)
REWARDS = ("paper", "outcome")


def verification_reward(
    verdict: bool | None, draft_correct: bool | None, *, value: float = 1.0
) -> float:
    """r^V: ``value`` when the verdict matches the draft's correctness; 0 if not applicable."""
    if verdict is None or draft_correct is None:
        return 0.0
    return value if verdict == draft_correct else 0.0


def routing_reward(response_correct: bool | None, *, value: float = 1.0) -> float:
    """r^R: ``value`` when the routed agent's response is correct; 0 when nobody was routed to."""
    if response_correct is None:
        return 0.0
    return value if response_correct else 0.0


def usage_penalty(agent: str | None, multipliers: Mapping[str, float]) -> float:
    """lambda_i for the agent routed to (0 when no agent was called or it has no multiplier)."""
    if agent is None:
        return 0.0
    return float(multipliers.get(agent, 0.0))


def composite_reward(r_route: float, r_verify: float, *, alpha: float = 0.5) -> float:
    """Eq. (1): alpha * r^R + (1 - alpha) * r^V."""
    return alpha * r_route + (1.0 - alpha) * r_verify


def modified_routing_reward(
    r_route: float, agent: str | None, multipliers: Mapping[str, float]
) -> float:
    """Eq. (3): r~^R = r^R - lambda_{a_t} (no penalty when no agent was called)."""
    return r_route - usage_penalty(agent, multipliers)


def modified_composite_reward(
    r_route: float,
    r_verify: float,
    agent: str | None,
    multipliers: Mapping[str, float],
    *,
    alpha: float = 0.5,
) -> float:
    """Eq. (3): alpha * r~^R + (1 - alpha) * r^V, the per-turn reward the trainer maximises."""
    return composite_reward(
        modified_routing_reward(r_route, agent, multipliers), r_verify, alpha=alpha
    )


def outcome_reward(
    final_correct: bool | None,
    agent: str | None,
    multipliers: Mapping[str, float],
    *,
    value: float = 1.0,
) -> float:
    """``"outcome"``: minus lambda of the agent called at this step, plus ``value`` at the
    episode's end when its final answer is correct (``final_correct`` None: not the end)."""
    reward = -usage_penalty(agent, multipliers)
    if final_correct:
        reward += value
    return reward
