"""Issue 31: every env's prompt is followable by a small model.

- no prompt holds an unfilled placeholder (``<model>SOLVER NAME</model>``, ``<query>...</query>``);
- the filled-in example replies in the prompts are valid actions of the state they are shown in;
- the notice after an unusable action shows a valid action for the current state;
- a placeholder copied from a format line is refused, so the valid-action rate means the model
  acted (the issue's ``<verdict>False</verdict><model>SOLVER NAME</model>`` on the strongest
  agent's draft counted valid);
- task sources default to a split they have (CHAMP has only ``test``).
"""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the envs)
from orchenv.core import OrchestrationEnv
from orchenv.error import UnknownNameError
from orchenv.parsing import find_placeholders, is_placeholder
from orchenv.tasks import ListTaskSource, Task

#: the envs whose prompts and notices were rewritten (the text-game envs ALFWorld-v0 and
#: WebShop-v0 keep their original protocols, which list the available actions verbatim)
PROMPT_ENVS = (
    "orch/MathRoute-v0",
    "orch/BudgetRoute-v0",
    "orch/OrchMAS-v0",
    "orch/Puppeteer-v0",
    "orch/MultihopQA-v0",
    "orch/ALFWorldRoles-v0",
)
_EXAMPLE_BLOCK = re.compile(r"^Example[^\n]*:\n(.+?)(?:\n\n|\Z)", re.MULTILINE | re.DOTALL)
_NOTICE_EXAMPLE = re.compile(r"for example:?\s*(.+)", re.DOTALL)


def _base(env: gym.Env) -> OrchestrationEnv:
    base = env.unwrapped
    assert isinstance(base, OrchestrationEnv)
    return base


def _make(env_id: str) -> gym.Env:
    env = gym.make(env_id)
    env.reset(seed=0)
    return env


def _acts(env: gym.Env, action: str) -> bool:
    """Whether ``action`` is a valid action now (played on a fork, the env is untouched)."""
    fork = _base(env).fork()
    *_, info = fork.step(action)
    return not info["invalid_action"]


def _notice_examples(env: gym.Env, parse_error: str) -> list[str]:
    match = _NOTICE_EXAMPLE.search(parse_error)
    assert match, parse_error
    text = match.group(1).strip()
    return [part.strip() for part in text.split("\nor\n") if part.strip()]


def test_is_placeholder_tells_stand_ins_from_values():
    for stand_in in (
        "SOLVER NAME",
        "FINAL ANSWER",
        "...",
        " … ",
        "",
        "EXPERT NAME",
        "MODEL:PATTERN",
        "YOUR_REQUEST",
        "NAME",
        "True|False",
        "your answer",
        "the final answer only",
    ):
        assert is_placeholder(stand_in), stand_in
    for value in ("Qwen2.5-7B-Instruct", "42", "USA", "IBM", "planner", "\\frac{3}{4}", "Paris"):
        assert not is_placeholder(value), value
    assert not is_placeholder(None) and not is_placeholder("x" * 10_000_000)
    assert find_placeholders("<model>SOLVER NAME</model> <model>GPT-4.1</model>") == [
        "<model>SOLVER NAME</model>"
    ]


@pytest.mark.parametrize("env_id", PROMPT_ENVS)
def test_prompts_and_notices_hold_no_placeholder(env_id):
    env = gym.make(env_id)
    base = _base(env)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    seen = [obs]
    obs, *_ = env.step("I am not sure what to do.")
    seen.append(obs)
    for _ in range(2):
        obs, _, term, trunc, _ = env.step(base.demo_action(rng))
        seen.append(obs)
        if term or trunc:
            break
    for text in seen:
        assert find_placeholders(text) == [], env_id


@pytest.mark.parametrize("env_id", PROMPT_ENVS)
def test_the_prompts_example_replies_are_valid_actions(env_id):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    blocks = _EXAMPLE_BLOCK.findall(obs)
    assert blocks, f"{env_id}: no filled-in example reply in the prompt"
    first = blocks[0].strip()
    lines = first.splitlines()
    candidates = lines if all(line.startswith("<agent>") for line in lines) else [first]
    for action in candidates:
        if env_id == "orch/MultihopQA-v0" and "<finish/>" in action:
            continue  # a valid reply, but it ends the episode: checked through the others
        assert _acts(env, action), f"{env_id}: example {action!r} is not a valid action"


@pytest.mark.parametrize("env_id", PROMPT_ENVS)
def test_the_notice_shows_a_valid_action_for_this_state(env_id):
    env = _make(env_id)
    _, _, _, _, info = env.step("I am not sure what to do.")
    assert info["invalid_action"]
    examples = _notice_examples(env, info["parse_error"])
    assert examples
    for example in examples:
        assert _acts(env, example), f"{env_id}: notice example {example!r} is invalid"


def _mathroute_at_verify(author_rank: int) -> gym.Env:
    env = _make("orch/MathRoute-v0")
    names = _base(env).pool.names
    env.step(f"<model>{names[author_rank]}</model>")
    return env


def test_mathroute_verify_notice_and_examples_follow_the_draft():
    for rank in (0, -1):  # the weakest's draft (reject to a stronger one), the strongest's
        env = _mathroute_at_verify(rank)
        names = _base(env).pool.names
        obs = _base(env).render_messages(_base(env)._messages())
        for block in _EXAMPLE_BLOCK.findall(obs):
            assert _acts(env, block.strip()), block
        if rank == -1:
            assert "<model>" not in "".join(_EXAMPLE_BLOCK.findall(obs))
        else:
            assert f"<model>{names[1]}</model>" in obs
        _, _, _, _, info = env.step("<verdict>maybe</verdict>")
        for example in _notice_examples(env, info["parse_error"]):
            assert _acts(env, example), example


@pytest.mark.parametrize(
    ("env_id", "setup", "copied"),
    [
        ("orch/MathRoute-v0", [], "<thinking>...</thinking><model>SOLVER NAME</model>"),
        # the case: a copied model tag on the strongest agent's draft counted valid
        ("orch/MathRoute-v0", ["@strongest"], "<verdict>False</verdict><model>SOLVER NAME</model>"),
        ("orch/MathRoute-v0", ["@strongest"], "<verdict>False</verdict><model>@strongest</model>"),
        ("orch/MathRoute-v0", ["@weakest"], "<verdict>False</verdict><model>SOLVER NAME</model>"),
        ("orch/BudgetRoute-v0", [], "<answer>FINAL ANSWER</answer>"),
        ("orch/BudgetRoute-v0", [], "<answer>...</answer>"),
        ("orch/BudgetRoute-v0", [], "<search>EXPERT NAME: your question</search>"),
        ("orch/BudgetRoute-v0", [], "<search>GPT-4.1: ...</search>"),
        (
            "orch/OrchMAS-v0",
            [],
            '<think>short note</think><interaction_prompt>{"name": "prompt_dynamic", "arguments": '
            '{"prompt": "...", "agent_role": "..."}}</interaction_prompt>',
        ),
        (
            "orch/OrchMAS-v0",
            [],
            "<think>final reasoning</think><answer>the final answer only</answer>",
        ),
        ("orch/Puppeteer-v0", [], "<agent>MODEL:PATTERN</agent>"),
        ("orch/Puppeteer-v0", [], "<agent>...</agent>"),
        ("orch/MultihopQA-v0", [], "<plan>...</plan><query>...</query>"),
        ("orch/MultihopQA-v0", [], "<answer>...</answer>"),
        ("orch/ALFWorldRoles-v0", [], "<role>NAME</role>"),
    ],
)
def test_a_copied_placeholder_is_invalid(env_id, setup, copied):
    env = _make(env_id)
    names = _base(env).pool.names
    subst = {"@strongest": names[-1], "@weakest": names[0]}
    for action in setup:
        *_, info = env.step(f"<model>{subst[action]}</model>")
        assert not info["invalid_action"]
    copied = copied.replace("@strongest", names[-1])
    assert not _acts(env, copied), f"{env_id}: {copied!r} counted as an action"


def test_a_bare_false_on_the_strongest_draft_still_ends_the_work():
    env = _mathroute_at_verify(-1)
    *_, term, _, info = env.step("<checking>Step 2 is wrong.</checking><verdict>False</verdict>")
    assert not info["invalid_action"] and term


def _tiny_source(splits: tuple[str, ...]) -> ListTaskSource:
    task = Task("t0", "What is 2 + 3?", ("5",), {"level": 1})
    return ListTaskSource("tiny", {split: [task] for split in splits})


def test_a_default_split_resolves_to_one_the_source_has():
    env = gym.make("orch/MathRoute-v0", task_source=_tiny_source(("test",)))
    with pytest.warns(UserWarning, match="no 'train' split; using 'test'"):
        env.reset(seed=0)
    assert _base(env).split == "test"
    with pytest.warns(UserWarning, match="no 'test' split; using 'validation'"):
        assert _tiny_source(("validation",)).resolve_split("test") == "validation"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a split the source has: no warning
        assert _tiny_source(("train", "test")).resolve_split("train") == "train"
    explicit = gym.make(
        "orch/MathRoute-v0", task_source=_tiny_source(("test",)), split="validation"
    )
    with pytest.raises(UnknownNameError):
        explicit.reset(seed=0)
