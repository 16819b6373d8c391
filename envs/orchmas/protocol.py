"""The orchestrator protocol of ``orch/OrchMAS-v0`` (seed 002, Table 2): prompts and parsers.

The prompts are written for orchenv (Table 2, reworded); the action protocol follows
the paper: ``<think>``, then an ``<interaction_prompt>`` JSON call of ``prompt_dynamic``
with a ``prompt`` and an ``agent_role``, or an ``<answer>``.
"""

from __future__ import annotations

import json
import re
import reprlib

from orchenv.envs.orchmas.executor import ROLE_PREFIX
from orchenv.parsing import extract_tag, has_open_tag, is_placeholder, loads_json, remove_blocks

CONTROLLER_SYSTEM = """\
You orchestrate an external language model (the executor) to answer a question. You never \
talk to the user; you talk to the executor, giving it a role and a request each turn, and \
finally you give the answer yourself.

How to proceed:
1. First turn: explain the question briefly (no deep reasoning, at most 80 words) inside a \
<think> tag, then hand the question to the executor inside an <interaction_prompt> tag \
holding the JSON object {{"name": "prompt_dynamic", "arguments": {{"prompt": REQUEST, \
"agent_role": ROLE}}}}, where ROLE is a JSON string naming any role you choose for the \
executor (e.g. a domain expert, a planner, a verifier) and REQUEST is a JSON string with \
your request. The executor does not see the question unless you put it in the request; it \
does see your earlier requests and its earlier replies.
2. Later turns: reflect on the executor's last reply inside a <think> tag and send a new \
request that builds on it (outline -> details -> refine -> check); do not repeat yourself.
3. When the answer is ready: your final reasoning inside a <think> tag, then the final \
answer only inside an <answer> tag.
You may call the executor at most {max_calls} times; the answer takes one more turn \
({max_turns} turns in all). An episode without an <answer> scores nothing.

Example first reply (write your own note, role and request for the question you are given):
{call_example}

Example final reply (with the answer the executor's replies support):
{answer_example}"""

EXECUTOR_SYSTEM = (
    ROLE_PREFIX + "{role}\n"
    "Read everything you are given (the earlier exchanges and the current request) and help "
    "complete the task or answer the question. Put a final answer, if you give one, in "
    "\\boxed{{...}}."
)

#: what a usable turn looks like, for the notice after an unusable one. Written so that the
#: notice is not itself a usable action: it holds no ``<interaction_prompt>`` or ``<answer>``
#: tag and its JSON has placeholders, not strings (a policy that copies it back is invalid)
CALL_FORMAT = (
    "a <think> tag with your reasoning followed by an interaction_prompt tag pair around the JSON "
    'object {"name": "prompt_dynamic", "arguments": {"prompt": YOUR_REQUEST, "agent_role": '
    "YOUR_ROLE}} with YOUR_REQUEST and YOUR_ROLE as JSON strings; or, to finish, "
    "a <think> tag with your reasoning followed by the final answer inside an answer tag pair"
)

_TAG_RE = re.compile(r"<(/?)(think|interaction_prompt|answer)\s*>", re.IGNORECASE)
#: the blocks a final turn may consist of (I_c): ``<think>...</think>``, ``<answer>...</answer>``
_BLOCK_OPEN = re.compile(r"<(?P<tag>think|answer)\s*>", re.IGNORECASE)
_BLOCK_CLOSE = {tag: re.compile(rf"</{tag}\s*>", re.IGNORECASE) for tag in ("think", "answer")}
_short_repr = reprlib.Repr()
_short_repr.maxstring = _short_repr.maxother = 60


#: the filled-in example replies of the prompt and the notice (issue 31: a small model
#: copies a bare ``{"prompt": "...", "agent_role": "..."}``; a concrete call it can adapt)
EXAMPLE_ROLE = "a domain expert who answers precisely"
EXAMPLE_THINK = "The question needs one fact looked up and checked; ask an expert for it."
EXAMPLE_ANSWER_THINK = "The executor's last reply answers the question and checks out."
EXAMPLE_ANSWER = "1947"
#: the longest question quoted in an example request
EXAMPLE_QUESTION_CHARS = 300


def example_call(question: str) -> str:
    """A filled-in first call that hands ``question`` (shortened) to an expert executor."""
    quoted = " ".join(question.split())
    if len(quoted) > EXAMPLE_QUESTION_CHARS:
        quoted = quoted[: EXAMPLE_QUESTION_CHARS - 3] + "..."
    request = f"Answer this question step by step and give the final answer: {quoted}"
    return call_action(EXAMPLE_ROLE, request, EXAMPLE_THINK)


def example_answer() -> str:
    """A filled-in final turn: ``<think>`` then ``<answer>``."""
    return f"<think>{EXAMPLE_ANSWER_THINK}</think>\n<answer>{EXAMPLE_ANSWER}</answer>"


def call_action(role: str, prompt: str, think: str = "Ask the executor.") -> str:
    """A well-formed call: ``<think>`` and the ``prompt_dynamic`` JSON (demos, examples)."""
    payload = {"name": "prompt_dynamic", "arguments": {"prompt": prompt, "agent_role": role}}
    return f"<think>{think}</think><interaction_prompt>{json.dumps(payload)}</interaction_prompt>"


def parse_call(text: str) -> tuple[dict[str, str] | None, str | None]:
    """``({"prompt", "agent_role"}, None)`` from the call tag, else ``(None, error)``."""
    body = extract_tag(text, "interaction_prompt")
    if body is None:
        if has_open_tag(text, "interaction_prompt"):
            return None, f"the interaction_prompt tag is not closed. Expected {CALL_FORMAT}."
        return None, f"no interaction_prompt tag and no answer tag found. Expected {CALL_FORMAT}."
    try:
        data = loads_json(body)
    except (ValueError, RecursionError) as exc:
        return (
            None,
            f"the interaction_prompt body is not valid JSON ({exc}). Expected {CALL_FORMAT}.",
        )
    if not isinstance(data, dict):
        return None, f"the interaction_prompt JSON must be an object. Expected {CALL_FORMAT}."
    if data.get("name") != "prompt_dynamic":
        return (
            None,
            f'"name" must be "prompt_dynamic", got {_short_repr.repr(data.get("name")).replace("<", "&lt;")}. '
            f"Expected {CALL_FORMAT}.",
        )
    args = data.get("arguments")
    if not isinstance(args, dict):
        return None, f'"arguments" must be an object. Expected {CALL_FORMAT}.'
    prompt, role = args.get("prompt"), args.get("agent_role")
    if not isinstance(prompt, str) or not prompt.strip():
        return None, f'"arguments.prompt" must be a non-empty string. Expected {CALL_FORMAT}.'
    if not isinstance(role, str):
        return None, f'"arguments.agent_role" must be a string. Expected {CALL_FORMAT}.'
    for field, value in (("prompt", prompt), ("agent_role", role)):
        if value.strip() and is_placeholder(value.strip()):
            return None, (
                f'"arguments.{field}" is a placeholder ({value.strip()[:40]!r}); write your own. '
                f"Expected {CALL_FORMAT}."
            )
    return {"prompt": prompt.strip(), "agent_role": " ".join(role.split())}, None


def answer_format(text: str) -> tuple[bool, bool, bool]:
    """(B_m, B_v, I_c) of a final turn (see ``OrchMASEnv`` ## Rewards)."""
    tags = [(m.group(1), m.group(2).lower()) for m in _TAG_RE.finditer(text)]
    think, answer = extract_tag(text, "think"), extract_tag(text, "answer")
    count = {t: sum(1 for c, n in tags if n == t and not c) for t in ("think", "answer")}
    closes = {t: sum(1 for c, n in tags if n == t and c) for t in ("think", "answer")}
    b_m = (
        think is not None
        and answer is not None
        and count == {"think": 1, "answer": 1}
        and closes == count
        and not any(n == "interaction_prompt" for _, n in tags)
    )
    b_v = answer is not None and bool(answer.strip()) and len(answer) <= 500
    outside = remove_blocks(text, _BLOCK_OPEN, _BLOCK_CLOSE)  # linear; a lazy regex is not
    i_c = bool(think) and not outside.strip()
    return b_m, b_v, i_c
