"""Issue 25 on MathRoute: the default reward ranks the paper's skill above every shortcut.

Policies are played on the same test tasks (paired), and every comparison is made beyond a
95% interval of the paired differences: overlapping intervals are no evidence of order.
The honest references (a perfect verifier, the skill reference ``skill_action``) read the
privileged truth only as the paper's skill would; the shortcuts (``audit_strategies()``)
read only what a learner sees.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from orchenv.envs.mathroute.env import MathRouteEnv, perfect_verifier
from orchenv.envs.mathroute.skill_audit import (
    ENV_IDS,
    make_env,
    measure,
    skill_policy,
    strategy_policy,
)
from orchenv.parsing import extract_tag

EPISODES = 200
SYSTEMS = sorted(ENV_IDS)


def paired_gap(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of a - b and the half-width of its 95% interval."""
    d = np.asarray(a) - np.asarray(b)
    return float(d.mean()), float(1.96 * d.std(ddof=1) / math.sqrt(d.size))


def above(a: list[float], b: list[float], margin: float = 0.0) -> bool:
    gap, half = paired_gap(a, b)
    return gap - half > margin


@pytest.mark.parametrize("system", SYSTEMS)
def test_reject_all_is_below_a_perfect_verifier_by_default(system: str) -> None:
    env = make_env(ENV_IDS[system])
    assert env.reward_variant == "outcome"
    honest = measure(env, strategy_policy(perfect_verifier), EPISODES).returns
    reject = measure(env, strategy_policy(env.audit_strategies()["always-reject"]), EPISODES)
    assert above(honest, reject.returns), paired_gap(honest, reject.returns)
    # under eq. (1)/(3) as written, rejecting every draft unread beats the perfect verifier
    paper = make_env(ENV_IDS[system], reward="paper")
    honest = measure(paper, strategy_policy(perfect_verifier), EPISODES).returns
    reject = measure(paper, strategy_policy(paper.audit_strategies()["always-reject"]), EPISODES)
    if system == "System 1":  # 1.29 vs 1.15 on 600 tasks
        assert above(reject.returns, honest), paired_gap(reject.returns, honest)
    else:  # 1.29 vs 1.28 on 600 tasks: not below it either
        assert not above(honest, reject.returns), paired_gap(honest, reject.returns)


@pytest.mark.parametrize("system", SYSTEMS)
def test_skill_curve_rises_and_beats_every_shortcut(system: str) -> None:
    env = make_env(ENV_IDS[system])
    realistic = env.realistic_skill
    assert realistic is not None and 0.0 < realistic < 1.0 and env.realistic_skill_source
    curve = {s: measure(env, skill_policy(s), EPISODES).returns for s in (0.0, realistic, 1.0)}
    assert above(curve[realistic], curve[0.0]), paired_gap(curve[realistic], curve[0.0])
    assert above(curve[1.0], curve[realistic]), paired_gap(curve[1.0], curve[realistic])
    for name, strategy in env.audit_strategies().items():
        shortcut = measure(env, strategy_policy(strategy), EPISODES).returns
        # the gameability gap (skill at s = 1 minus the shortcut) is positive beyond noise
        assert above(curve[1.0], shortcut, 0.05), (name, paired_gap(curve[1.0], shortcut))
        if system == "System 1":  # System 2: see docs/mathroute.md, "Gaming audit"
            assert above(curve[realistic], shortcut), (name, paired_gap(curve[realistic], shortcut))


def test_skill_action_is_valid_and_reads_the_truth_only_when_skilled() -> None:
    env = make_env(ENV_IDS["System 1"])
    rng = np.random.default_rng(0)
    seen = {True: set(), False: set()}
    for k in range(40):
        env.reset(seed=0, options={"task_index": k})
        env.step(env.skill_action(False, rng))  # unskilled route: the weakest agent
        assert env.draft_agent == env.pool.names[0]
        for skilled in (True, False):
            child = env.fork()
            action = child.skill_action(skilled, rng)
            verdict = extract_tag(action, "verdict") == "True"
            if skilled:
                assert verdict == child.draft_correct
            seen[skilled].add((verdict, bool(child.draft_correct)))
            assert not child.step(action)[-1]["invalid_action"]
    assert len(seen[False]) == 4, "the unskilled verdict is independent of the truth"


# -- paraphrase: the score depends on what the controller says, not on how --------------------
_POLITE = (
    "Thank you for the draft! ",
    "Happy to help with this one.\n",
    "Here is my assessment, kindly consider it.\n\n",
)
_POINTED = re.compile(r"^(Step|Line) (\d+) is wrong(?:: it should give (\S+), not (\S+))?\.$")


def _paraphrase_note(note: str) -> str:
    match = _POINTED.match(note)
    if not match:
        return note
    kind, n, right, wrong = match.groups()
    text = f"I went through the work carefully; the mistake is in {kind.lower()} {n}"
    if right is not None:
        text += f", where the draft writes {wrong} but the correct value is {right}"
    return text + "."


def paraphrase(action: str, rng: np.random.Generator) -> str:
    """The same decision in other words: other politeness, spacing, case of the tags and of
    the verdict and agent name, the parts in another order, the critique reworded."""
    thinking = extract_tag(action, "thinking", keep_reasoning=True)
    checking = extract_tag(action, "checking", keep_reasoning=True)
    verdict = extract_tag(action, "verdict")
    model = extract_tag(action, "model")
    parts = []
    if checking is not None:
        parts.append(f"< Checking >\n{_paraphrase_note(checking)}\n</checking >")
    if verdict is not None:
        word = {"True": ("true", "TRUE", "True"), "False": ("false", "FALSE", "False")}[verdict]
        parts.append(f"<VERDICT>  {word[int(rng.integers(3))]} </Verdict>")
    if model is not None:
        name = model.upper() if rng.random() < 0.5 else model.lower().replace("-", " ")
        parts.append(f"The next solver should be <Model>{name}</MODEL>, if that suits you.")
    if thinking is not None and verdict is None:
        parts.insert(0, f"<thinking>{thinking or 'Judging only the difficulty.'}</thinking>")
    polite = _POLITE[int(rng.integers(len(_POLITE)))]
    if verdict is not None and model is None and rng.random() < 0.5:
        parts.reverse()  # a bare verdict: the check may come after it
    return polite + "\n\n".join(parts) + ("\nThanks!" if rng.random() < 0.5 else "")


@pytest.mark.parametrize("system", SYSTEMS)
def test_paraphrased_actions_score_the_same(system: str) -> None:
    env = make_env(ENV_IDS[system])
    skill = skill_policy(env.realistic_skill or 0.7)
    plain = measure(env, skill, EPISODES)
    words = np.random.default_rng(1)

    def reworded(e: MathRouteEnv, rng: np.random.Generator) -> str:
        return paraphrase(skill(e, rng), words)

    para = measure(env, reworded, EPISODES)  # measure() fails on any invalid action
    gap, half = paired_gap(para.returns, plain.returns)
    assert abs(gap) <= half + 1e-9, (gap, half)
    assert para.correct == plain.correct


def test_the_paraphraser_rewords_but_keeps_the_decision() -> None:
    from orchenv.envs.mathroute.critique import judge_critique, locate_error
    from orchenv.envs.mathroute.protocol import parse_verify

    env = make_env(ENV_IDS["System 1"])
    rng = np.random.default_rng(0)
    kinds = set()
    for k in range(30):
        env.reset(seed=0, options={"task_index": k})
        env.step(env.skill_action(False, rng))
        action = env.skill_action(True, rng)
        other = paraphrase(action, rng)
        assert other != action
        a, b = (parse_verify(t, env.pool.names, env.valid_agents()) for t in (action, other))
        assert a.ok and b.ok and (a.verdict, a.agent) == (b.verdict, b.agent)
        assert a.feedback != b.feedback or not a.feedback
        site = None if env.draft_correct else locate_error(env.task, env.draft)
        kind = judge_critique(b.feedback, site)
        assert kind == judge_critique(a.feedback, site)
        kinds.add(kind)
    assert "pointed" in kinds


def test_skill_action_without_a_simulated_backend(tiny_tasks) -> None:
    """A backend that cannot say how likely an agent is to be right (live, scripted): the
    skilled router falls back to the cheapest candidate, and every action stays valid."""
    from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool

    env = MathRouteEnv(
        pool=scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT}), task_source=tiny_tasks
    )
    rng = np.random.default_rng(0)
    for skilled in (True, False):
        env.reset(seed=0)
        done, info = False, {}
        while not done:
            _, _, done, _, info = env.step(env.skill_action(skilled, rng))
            assert not info["invalid_action"]
        if skilled:  # weak is wrong: rejected with a critique, then mid (right) accepted
            assert info["correct"] and info["agent_calls"] == {WEAK: 1, MID: 1}
