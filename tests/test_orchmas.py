"""orch/OrchMAS-v0 (seed 002): action protocol, format-gated F1 reward, role-aware executor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario import NEAR_MISS_FRAGMENTS

from orchenv.envs.orchmas.env import OrchMASEnv
from orchenv.envs.orchmas.executor import role_fit, task_domain
from orchenv.envs.orchmas.protocol import call_action, parse_call
from orchenv.envs.orchmas.qa import orchmas_qa_source
from orchenv.error import ConfigError
from orchenv.pool import AgentPool, AgentSpec
from orchenv.tasks import ListTaskSource, Task
from orchenv.testing.scripted import ScriptedBackend

KAPPA, N = 0.4, 6  # 5 executor calls and the answer turn (docs/orchmas.md)
BASE = -KAPPA / N  # paid every turn


def call(role: str = "math solver", prompt: str = "What is 2 + 3?", think: str = "plan") -> str:
    return call_action(role, prompt, think)


def scripted_env(reply: str = "So \\boxed{5}.", answers=("5",), type_="Prealgebra", **kw):
    backend = ScriptedBackend({"executor": reply})
    spec = AgentSpec(name="executor", model="m", tier=0, backend="scripted")
    pool = AgentPool([spec], {"scripted": backend})
    task = Task(id="t0", prompt="What is 2 + 3?", answers=answers, meta={"type": type_})
    source = ListTaskSource("one", {"train": [task]})
    env = OrchMASEnv(pool=pool, task_source=source, **kw)
    env.reset(seed=0)
    return env, backend


def test_check_env_both_sources():
    for source in ("procedural-math", "orchmas-qa"):
        check_env(OrchMASEnv(task_source=source), skip_render_check=True)


def test_well_formed_call_then_correct_answer():
    env, backend = scripted_env()
    obs, r1, term, _, info = env.step(call())
    assert not term and not info["invalid_action"] and info["called_agent"] == "executor"
    assert r1 == pytest.approx(BASE + 0.1)  # Lambda_1 = 1
    assert "<interaction_response>So \\boxed{5}.</interaction_response>" in obs
    system = backend.calls[0][1][0]["content"]
    assert system.startswith("Act as: math solver")
    _, r2, term, _, info = env.step("<think>the executor says 5</think><answer>5</answer>")
    assert term and info["correct"] and info["em"] == 1.0 and info["f1"] == 1.0
    assert info["gate"] and info["format_reward"] == pytest.approx(KAPPA)
    # R = -kappa + R_fmt + R_prec = -0.4 + 0.4 + 1
    assert r1 + r2 == pytest.approx(1.0)
    assert r2 == pytest.approx(BASE + 0.3 - KAPPA * (N - 2) / N + 1.0)
    assert info["metrics"] == pytest.approx(
        {
            "f1": 1.0,
            "em": 1.0,
            "precision": 1.0,
            "format_reward": KAPPA,
            "gate": 1.0,
            "executor_calls": 1.0,
        }
    )


def test_correct_answer_with_bad_format_is_not_credited():
    env, backend = scripted_env()
    _, r, term, _, info = env.step("<answer>5</answer> trailing words")
    assert term and info["correct"] and info["f1"] == 1.0 and not backend.calls
    assert info["format_checks"] == {"B_m": False, "B_v": True, "I_c": False}
    assert not info["gate"]
    assert r == pytest.approx(-KAPPA + 0.1)  # precision gated out


def test_direct_clean_answer_misses_the_gate():
    env, _ = scripted_env()
    _, r, term, _, info = env.step("<think>easy</think><answer>5</answer>")
    assert term and info["correct"] and not info["gate"]
    assert r == pytest.approx(-KAPPA + 0.3)


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        ('<think>x</think><interaction_prompt>{"name": "prompt_dynamic", </interaction_prompt>', "JSON"),
        ('<think>x</think><interaction_prompt>{"name": "other", "arguments": {}}</interaction_prompt>', "prompt_dynamic"),
        ('<think>x</think><interaction_prompt>{"name": "prompt_dynamic", "arguments": {"agent_role": "a"}}</interaction_prompt>', "prompt"),
        ('<think>x</think><interaction_prompt>{"name": "prompt_dynamic", "arguments": {"prompt": "q"}}</interaction_prompt>', "agent_role"),
        ("<think>x</think>no tags at all", "interaction_prompt"),
        ("<interaction_prompt>{}", "not closed"),
    ],
)  # fmt: skip
def test_malformed_action_calls_nobody(action, fragment):
    env, backend = scripted_env()
    obs, r, term, _, info = env.step(action)
    assert info["invalid_action"] and fragment in info["parse_error"]
    assert '"prompt_dynamic"' in info["parse_error"]  # says what JSON is expected
    assert not backend.calls and info["constraint_costs"].sum() == 0
    assert r == pytest.approx(BASE) and not term and env.turn == 1
    assert "Your previous reply could not be used: " + info["parse_error"] in obs


def test_format_penalty_is_added():
    env, _ = scripted_env(format_penalty=-0.5)
    _, r, *_ = env.step("no tags")
    assert r == pytest.approx(BASE - 0.5)


def test_empty_role_calls_but_earns_no_format_credit():
    env, backend = scripted_env()
    _, r, _, _, info = env.step(call(role="   "))
    assert len(backend.calls) == 1 and not info["invalid_action"]
    assert info["format_checks"] == {"Lambda": False} and r == pytest.approx(BASE)


def test_turn_limit_without_answer_is_truncated_and_scores_zero():
    env, backend = scripted_env()
    rewards = []
    for t in range(N):
        _, r, term, trunc, info = env.step(call(prompt=f"step {t}"))
        rewards.append(r)
        assert trunc == (t == N - 1) and not term
    # max_calls = N - 1: the call at the last turn is over the limit, refused (issue 38)
    assert len(backend.calls) == N - 1
    assert info["invalid_action"] and "used up" in info["parse_error"]
    assert rewards == pytest.approx([BASE + 0.1] * 4 + [BASE] * (N - 4))  # capped at kappa
    assert sum(rewards) == pytest.approx(0.0)  # -kappa + kappa, no precision
    assert info["final_answer"] is None and not info["correct"] and info["score"] == 0.0
    # the format cap was reached, but no final turn passed its checks: the gate stays shut
    assert info["metrics"]["executor_calls"] == N - 1 and info["metrics"]["gate"] == 0.0
    # the executor saw the earlier exchanges as history
    last_messages = backend.calls[-1][1]
    roles = ["system"] + ["user", "assistant"] * (N - 2) + ["user"]
    assert [m["role"] for m in last_messages] == roles


def test_qa_partial_credit_f1():
    env, _ = scripted_env(reply="\\boxed{New York City}", answers=("New York",), type_="geography")
    env.step(call(role="geography researcher", prompt="Which city?"))
    _, r, term, _, info = env.step("<think>ok</think><answer>New York City</answer>")
    assert term and info["em"] == 0.0 and not info["correct"]
    assert info["f1"] == pytest.approx(0.8) and info["score"] == pytest.approx(0.8)
    assert info["gate"]
    total = BASE + 0.1 + r
    assert total == pytest.approx(0.8)


def test_role_fit_classes():
    task = Task(id="x", prompt="?", answers=("1",), meta={"type": "Number Theory"})
    assert role_fit("Math Solver", task) == "fit"
    assert role_fit("number theory expert", task) == "fit"
    assert role_fit("assistant", task) == "generic"
    assert role_fit("geography researcher", task) == "mismatch"
    assert role_fit("", task) == "empty" and role_fit(None, task) == "empty"


@pytest.mark.parametrize("dataset", ["math", "multihop-synth"])
def test_role_and_verification_raise_executor_accuracy(dataset):
    """Over 400 tasks: fitting role + verification request beats an empty role (one call)."""
    if dataset == "math":
        env = OrchMASEnv(task_source="procedural-math")
        fit_role = "careful math solver"
    else:
        env = OrchMASEnv(task_source_kwargs={"dataset": dataset})
        fit_role = "researcher"
    n = 400
    acc = {"fit": 0, "generic": 0, "empty": 0}
    for i in range(n):
        env.reset(seed=0, options={"task_index": i})
        for label, role, prompt in (
            ("fit", fit_role, env.task.prompt + " Verify your answer."),
            ("generic", "assistant", env.task.prompt),
            ("empty", "", env.task.prompt),
        ):
            fork = env.fork()
            *_, info = fork.step(call(role=role, prompt=prompt))
            acc[label] += info["privileged"]["executor_correct"]
    acc = {k: v / n for k, v in acc.items()}
    assert acc["fit"] > acc["generic"] + 0.08 > acc["empty"] + 0.16, acc
    if dataset == "math":
        assert abs(acc["generic"] - 0.6) < 0.07, acc  # calibration accuracy of a generic call


def test_qa_source_shape():
    src = orchmas_qa_source(dataset="countries")
    assert src.size("train") == 3 * 96 and src.size("test") == 3 * 24
    task = src.get("train", 0)
    assert task.prompt.endswith("?") and task.answer and task.meta["distractors"]
    assert orchmas_qa_source(dataset="countries").get("test", 5) == src.get("test", 5)
    mixed = orchmas_qa_source()  # the env's default: math and multihop interleaved
    kinds = [task_domain(mixed.get("test", i)) for i in range(4)]
    assert kinds == ["math", "multihop"] * 2
    assert mixed.by_id(mixed.get("test", 3).id) == mixed.get("test", 3)
    assert mixed.get("test", 1).meta["chain"]


def rollout(env: OrchMASEnv, seed: int) -> list:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = [(obs, info)]
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(env.demo_action(rng))
        trace.append((obs, r, term, trunc, info))
        done = term or trunc
    return trace


@pytest.mark.parametrize("source", ["procedural-math", "orchmas-qa"])
def test_determinism_and_demo_action(source):
    a, b = OrchMASEnv(task_source=source), OrchMASEnv(task_source=source)
    for seed in range(8):
        ta, tb = rollout(a, seed), rollout(b, seed)
        assert data_equivalence(ta, tb)
        assert not any(step[-1]["invalid_action"] for step in ta[1:])
        end = ta[-1][-1]
        assert {"em", "f1", "score", "final_answer", "correct"} <= set(end)
        assert end["phase"] == "act" and ta[0][1]["valid_agents"] == ["executor"]
    assert len({rollout(a, s)[0][0] for s in range(10)}) > 1


def test_answer_in_the_last_turn_is_terminated():
    env, _ = scripted_env(max_turns=2)
    env.step(call())
    _, r, term, trunc, info = env.step("<think>t</think><answer>5</answer>")
    assert term and not trunc and info["correct"] and info["turns"] == 2


def test_arguments_are_checked():
    with pytest.raises(ConfigError, match="max_turns"):
        OrchMASEnv(max_turns=0)
    with pytest.raises(ConfigError, match="backend"):
        OrchMASEnv(backend="openai")
    with pytest.raises(KeyError):
        OrchMASEnv(executor="nobody").reset(seed=0)


def test_fork_is_independent():
    env = OrchMASEnv()
    env.reset(seed=3)
    env.step(call())
    f = env.fork()
    f.step("<think>t</think><answer>1</answer>")
    assert env.turn == 1 and len(env.history) == 1 and f.pool is env.pool


def test_parse_call_never_raises_on_deep_json():
    call_, error = parse_call("<interaction_prompt>" + "[" * 100_000 + "</interaction_prompt>")
    assert call_ is None and error


FRAGMENTS = [
    *NEAR_MISS_FRAGMENTS, "<answer>", "</answer>", "<interaction_prompt>", "</interaction_prompt>",
    '{"name": "prompt_dynamic", "arguments": {"prompt": "q", "agent_role": "r"}}', "{", "}",
    '"agent_role"', '"prompt"', "null", "[]",
]  # fmt: skip
ACTIONS = st.one_of(
    st.text(max_size=200),
    st.just(""),
    st.just("x" * 200_000),
    st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join),
)


def test_fuzzed_actions_never_raise():
    env = OrchMASEnv(task_source="orchmas-qa")

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**16), actions=st.lists(ACTIONS, min_size=1, max_size=6))
    def run(seed, actions):
        obs, info = env.reset(seed=seed)
        for action in actions:
            obs, r, term, trunc, info = env.step(action)
            assert isinstance(obs, str) and math.isfinite(r)
            if info["invalid_action"]:
                assert isinstance(info["parse_error"], str) and info["parse_error"]
                assert r < 0
            if term or trunc:
                assert 0.0 <= info["format_reward"] <= KAPPA + 1e-9
                obs, info = env.reset()

    run()


def test_non_string_action_is_invalid():
    env = OrchMASEnv()
    env.reset(seed=0)
    for action in (None, 42, b"<answer>1</answer>"):
        _, r, term, _, info = env.step(action)  # type: ignore[arg-type]
        assert info["invalid_action"] and r < 0
        if term:
            env.reset()
