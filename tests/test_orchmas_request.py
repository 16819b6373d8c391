"""orch/OrchMAS-v0: the executor reads the request, the final turn gates the reward, the
notice is not an action, and the policy's turns stay verbatim (issue 15, items 4-5)."""

from __future__ import annotations

import numpy as np
import pytest

from orchenv.envs.orchmas.choices import CHOICE_ROLES, IRRELEVANT_REQUEST
from orchenv.envs.orchmas.env import OrchMASEnv
from orchenv.envs.orchmas.executor import RequestReading, read_request
from orchenv.envs.orchmas.protocol import call_action
from orchenv.pool import AgentPool, AgentSpec
from orchenv.tasks import ListTaskSource, Task
from orchenv.testing.scripted import ScriptedBackend

R = len(CHOICE_ROLES)
RESEARCHER = CHOICE_ROLES.index("researcher")


def multihop_env(**kw) -> OrchMASEnv:
    return OrchMASEnv(task_source_kwargs={"dataset": "multihop-synth"}, split="test", **kw)


def first_call_correct(env: OrchMASEnv, role: str, prompt: str) -> bool:
    *_, info = env.fork().step(call_action(role, prompt, "plan"))
    return bool(info["privileged"]["executor_correct"])


def test_irrelevant_request_scores_below_the_question():
    env = OrchMASEnv(split="test")  # the default mixed set: math and multihop
    right = {"question": 0, "joke": 0}
    returns = {"question": [], "joke": []}
    for i in range(60):
        env.reset(options={"task_index": i})
        right["question"] += first_call_correct(env, "assistant", env.task.prompt)
        right["joke"] += first_call_correct(env, "assistant", IRRELEVANT_REQUEST)
        for label, prompt in (("question", env.task.prompt), ("joke", IRRELEVANT_REQUEST)):
            fork = env.fork()
            fork.step(call_action("assistant", prompt, "plan"))
            answer = fork.last_executor_answer() or "unknown"
            *_, r, _, _, info = fork.step(f"<think>report</think><answer>{answer}</answer>")
            returns[label].append(info["f1"])
    assert right["joke"] == 0 and right["question"] > 25, right
    assert np.mean(returns["joke"]) < np.mean(returns["question"]) - 0.3


def test_request_reading_on_a_multihop_chain():
    env = multihop_env()
    env.reset(options={"task_index": 0})
    task = env.task
    chain = task.meta["chain"]
    assert len(chain) >= 2

    def reading(text: str, history: tuple[str, ...] = ()) -> RequestReading:
        messages = [{"role": "system", "content": "Act as: researcher"}]
        for h in history:
            messages += [{"role": "user", "content": h}, {"role": "assistant", "content": "ok"}]
        return read_request([*messages, {"role": "user", "content": text}], task)

    assert reading(task.prompt).target == "question"
    assert reading(chain[0]["question"]) == RequestReading("hop", 0)
    assert reading(chain[1]["question"]).hop == 1
    # the same sub-question about a wrong bridge entity is not a correct sub-question
    wrong = chain[1]["question"].replace(chain[1]["entity"], "Zorblax Quenton")
    assert reading(wrong).target == "off-chain"
    assert reading("Hello, please tell me a joke.").target == "irrelevant"
    # a bare "verify" inherits the earlier request's target, and repeats it
    again = reading("Please verify your previous answer.", (task.prompt,))
    assert again == RequestReading("question", None, verify=True, repeats=True)


def test_decomposition_with_evidence_beats_one_shot_on_multihop():
    """Sub-questions of the chain, then the whole question with the evidence in the
    conversation, beat asking the whole question once (seed 002, Table 5 "- Multi Turns")."""
    env = multihop_env()
    scores = {"one-shot": [], "decompose": []}
    for i in range(100):
        env.reset(options={"task_index": i})
        one = env.fork()
        one.step(one.action_choices()[1 + RESEARCHER])
        *_, info = one.step(one.action_choices()[0])
        scores["one-shot"].append(info["f1"])
        dec = env.fork()
        while (sub := dec.action_choices()[1 + 2 * R + RESEARCHER]) is not None:
            dec.step(sub)
        dec.step(dec.action_choices()[1 + RESEARCHER])
        *_, info = dec.step(dec.action_choices()[0])
        scores["decompose"].append(info["f1"])
    assert np.mean(scores["decompose"]) > np.mean(scores["one-shot"]) + 0.15, {
        k: np.mean(v) for k, v in scores.items()
    }


def test_a_wrong_bridge_answer_carries_forward():
    """The discrete sub-question names the executor's own last answer: after a wrong hop
    the next sub-question is about the wrong entity and its reply is wrong too."""
    env = multihop_env()
    seen = 0
    for i in range(80):
        env.reset(options={"task_index": i})
        chain = env.task.meta["chain"]
        if env.task.meta["type"] != "bridge":
            continue
        env.step(env.action_choices()[1 + 2 * R])  # hop 0, generic role
        if env.last_executor_answer() == chain[0]["answer"]:
            continue
        sub = env.action_choices()[1 + 2 * R]
        assert sub is not None and str(env.last_executor_answer()) in sub
        *_, info = env.step(sub)
        assert not info["privileged"]["executor_correct"]
        assert env.last_executor_answer() != chain[1]["answer"]
        seen += 1
    assert seen >= 5


def scripted(reply: str = "So \\boxed{5}.", answers=("5",), meta=None, **kw):
    backend = ScriptedBackend({"executor": reply})
    spec = AgentSpec(name="executor", model="m", tier=0, backend="scripted")
    pool = AgentPool([spec], {"scripted": backend})
    task = Task(id="t0", prompt="What is 2 + 3?", answers=answers, meta=meta or {"type": "Algebra"})
    env = OrchMASEnv(pool=pool, task_source=ListTaskSource("one", {"train": [task]}), **kw)
    env.reset(seed=0)
    return env


def test_four_calls_then_a_malformed_answer_keep_the_gate_shut():
    env = OrchMASEnv(split="test")
    env.reset(options={"task_index": 0})
    for _ in range(4):
        env.step(call_action("math solver", env.task.prompt, "solve it"))
    assert env.format_sum >= env.kappa  # the calls alone fill the format cap
    answer = env.task.answer
    *_, term, _, info = env.step(f"garbage <answer>{answer}</answer> garbage")
    assert term and info["f1"] == 1.0 and not info["gate"]
    assert info["format_checks"] == {"B_m": False, "B_v": True, "I_c": False}
    # two answers in one turn: B_m fails, the gate stays shut
    env2 = scripted()
    env2.step(call_action("math solver", "What is 2 + 3?", "go"))
    *_, info = env2.step("<think>t</think><answer>5</answer><answer>5</answer>")
    assert not info["gate"] and info["score"] == 1.0
    # a clean final turn opens it
    env3 = scripted()
    env3.step(call_action("math solver", "What is 2 + 3?", "go"))
    *_, info = env3.step("<think>t</think><answer>5</answer>")
    assert info["gate"]


def test_gate_cap_is_the_literal_reading():
    env = scripted(gate="cap")
    for _ in range(4):
        env.step(call_action("math solver", "What is 2 + 3?", "go"))
    *_, info = env.step("garbage <answer>5</answer> garbage")
    assert info["gate"]


def test_the_notice_shows_a_valid_call_for_this_question():
    # issue 31: the notice shows a filled-in valid action (a call handing this question to an
    # expert), not a placeholder template; copying it is a real call, never an answer
    env = scripted()
    obs, *_, info = env.step("hello there")
    assert info["invalid_action"]
    notice = obs[obs.index("Your previous reply could not be used") :]
    assert "<answer>" not in notice and "..." not in notice.split("for example")[1]
    fork = env.fork()
    *_, term, _, again = fork.step(notice)
    assert not again["invalid_action"] and not term
    assert fork.executor_calls() == 1


def test_policy_turns_stay_verbatim_in_the_context():
    env = scripted()
    odd = '  <think>plan  \n spaced</think>\n<interaction_prompt>{"name": "prompt_dynamic", "arguments": {"prompt": "What is 2 + 3?", "agent_role": "math   solver"}}</interaction_prompt>  '
    obs, *_, info = env.step(odd)
    assert not info["invalid_action"]
    assistant = [m["content"] for m in info["messages"] if m["role"] == "assistant"]
    assert assistant == [odd] and odd in obs
    bad = "<think>x</think> not a call"
    obs, *_, info = env.step(bad)
    assistant = [m["content"] for m in info["messages"] if m["role"] == "assistant"]
    assert assistant == [odd, bad]


def test_math_reports_token_f1_and_exact_match():
    env = scripted()
    env.step(call_action("math solver", "What is 2 + 3?", "go"))
    *_, r, _, _, info = env.step("<think>t</think><answer>5, 6</answer>")
    assert info["em"] == 0.0 and info["f1"] == pytest.approx(2 / 3)
    assert info["gate"] and info["score"] == pytest.approx(2 / 3)
    env = scripted(math_precision="exact")
    env.step(call_action("math solver", "What is 2 + 3?", "go"))
    *_, info = env.step("<think>t</think><answer>5, 6</answer>")
    assert info["score"] == 0.0 and info["f1"] == pytest.approx(2 / 3)
    env = scripted()
    env.step(call_action("math solver", "What is 2 + 3?", "go"))
    *_, info = env.step("<think>t</think><answer>\\frac{10}{2}</answer>")
    assert info["em"] == 1.0 and info["f1"] == 1.0


def test_turn_budget_is_five_calls_and_the_answer():
    env = OrchMASEnv()
    assert env.max_turns == 6 and env.max_calls == 5
    assert OrchMASEnv(max_calls=2).max_turns == 3
    assert OrchMASEnv(max_turns=5).max_calls == 4
    env.reset(seed=0)
    for _ in range(5):
        *_, term, trunc, _ = env.step(call_action("assistant", env.task.prompt, "go"))
        assert not (term or trunc)
    assert env.action_choices()[1] is None  # the last turn: calls masked
    *_, term, _, info = env.step(env.action_choices()[0])
    assert term and info["metrics"]["executor_calls"] == 5
