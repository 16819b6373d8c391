"""One action can never crash, hang or poison an episode (issue 13, part 2).

Each attack from the issue is a real attempt: lone surrogates and NULs, actions of
megabytes, parsers fed 10 MB of adversarial tags (their work bounded by counting the
characters they scan, not by a clock), math answers that explode under symbolic work
(refused or cut off by the grading budget, also through threaded vector envs), and a
cache that must stay bounded in bytes. ``pytest-timeout`` marks are hang guards only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the ids)
from orchenv import grading, parsing
from orchenv.core import MAX_ACTION_CHARS, normalize_action
from orchenv.envs.alfworld.roles import parse_role
from orchenv.envs.budgetroute.protocol import answer_verdict
from orchenv.envs.budgetroute.protocol import parse_action as parse_budget_action
from orchenv.envs.mathroute.protocol import parse_route, parse_verify
from orchenv.envs.orchmas.protocol import answer_format, parse_call
from orchenv.envs.puppeteer.protocol import parse_action as parse_puppeteer_action
from orchenv.envs.puppeteer.tasks import graded_score
from orchenv.envs.webshop.env import parse_action as parse_webshop_action
from orchenv.grading import extract_boxed, math_verdict
from orchenv.memory import AgentOutput, extract_drafts
from orchenv.tasks import Task
from orchenv.vector import make_vec

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("orch/"))
AGENTS = ["Qwen2.5-1.5B-Instruct", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct"]
TEN_MB = 10 * 2**20
#: a parser may make a handful of passes over its input, never one per candidate position
PASSES = 16


def base(env: gym.Env) -> orchenv.OrchestrationEnv:
    return env.unwrapped  # type: ignore[return-value]


def is_json(info: dict) -> bool:
    json.dumps(info, default=lambda o: o.tolist() if isinstance(o, np.ndarray) else str(o))
    return True


# -- normalisation in the base env ------------------------------------------------------------
def test_normalize_replaces_lone_surrogates_and_nuls_and_joins_pairs():
    text, refusal = normalize_action("a\udcffb\x00c\ud83d\ude00")
    assert refusal is None
    assert text == "a\ufffdb\ufffdc\U0001f600"
    text.encode("utf-8")  # every encoder accepts it now


def test_normalize_refuses_non_text_and_oversized_actions():
    for action in (None, b"<model>x</model>", 7, {"model": "x"}):
        text, refusal = normalize_action(action)
        assert refusal and "must be a str" in refusal and len(text) < 100
    text, refusal = normalize_action("x" * (MAX_ACTION_CHARS + 1))
    assert refusal and f"longer than {MAX_ACTION_CHARS:,} characters" in refusal
    assert len(text) < 100, "the env must see a short marker, not the megabytes"
    assert normalize_action("x" * MAX_ACTION_CHARS) == ("x" * MAX_ACTION_CHARS, None)


def test_normalize_returns_a_plain_str():
    class Sneaky(str):
        def lower(self) -> str:  # type: ignore[override]
            raise RuntimeError("a str subclass must not reach the parsers")

    text, _ = normalize_action(Sneaky("<model>x</model>"))
    assert type(text) is str


@pytest.mark.timeout(300)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_surrogates_nuls_and_oversized_actions_step_cleanly(env_id):
    """The issue's crash: a lone surrogate raised after the turn counter advanced. Now each
    of these actions is one clean step whose info serialises (the eval log can hold it)."""
    env = gym.make(env_id)
    oversized = "<" + "x" * (2 * MAX_ACTION_CHARS)
    for action in ("\udcff", "\udcff" * 1000, "a\x00b", "\x00" * 1000, oversized, None, b"x"):
        env.reset(seed=1)
        turn = base(env).turn
        _, reward, _, _, info = env.step(action)
        assert base(env).turn == turn + 1 and np.isfinite(reward) and is_json(info)
        logged = [e["text"] for e in base(env).transcript if e["role"] == "controller"][-1]
        logged.encode("utf-8")  # no lone surrogate reaches the transcript or the logs
        assert "\x00" not in logged
        if action is oversized:
            assert info["invalid_action"] and "longer than" in info["parse_error"]
            assert len(logged) < 100, "the transcript holds a marker, not the megabytes"
    env.close()


@pytest.mark.parametrize("env_id", ["orch/MathRoute-v0", "orch/BudgetRoute-v0"])
def test_a_well_formed_action_padded_past_the_cap_is_not_executed(env_id):
    """The refusal happens before any parsing: padding a valid action does not run it."""
    env = gym.make(env_id)
    env.reset(seed=0)
    demo = base(env).demo_action(np.random.default_rng(0))
    _, _, terminated, _, info = env.step(demo + " " * MAX_ACTION_CHARS)
    assert info["invalid_action"] and "longer than" in info["parse_error"]
    assert info["calls"] == [] and not terminated


def test_an_env_may_lower_its_cap():
    env = gym.make("orch/MathRoute-v0")
    base(env).max_action_chars = 100  # type: ignore[misc]
    env.reset(seed=0)
    _, _, _, _, info = env.step("<model>Qwen3-30B-A3B-Instruct</model>" + " " * 100)
    assert info["invalid_action"] and "longer than 100 characters" in info["parse_error"]


# -- linear-time parsing, measured by counting --------------------------------------------------
def tenfold(piece: str) -> str:
    """``piece`` repeated to 10 MB."""
    return piece * (TEN_MB // len(piece))


ATTACKS = {
    "unclosed openers": tenfold("<model>"),
    "unclosed closers": tenfold("</model>"),
    "open close alternation": tenfold("<model>a</model>"),
    "nested": tenfold("<a><model><verdict>"),
    "answer then unclosed think": "<answer>1</answer>" + tenfold("<think>"),
    "unclosed think": tenfold("<think>x"),
    "think pairs": tenfold("<think>x</think>"),
    "whitespace inside brackets": tenfold("<" + " " * 1000),
    "spaced tags": tenfold("< model >< / model"),
    "open brackets": tenfold("<"),
    "json nesting": "<interaction_prompt>" + tenfold("[") + "</interaction_prompt>",
    "unclosed boxed": tenfold("\\boxed{"),
    "braces": tenfold("{}{"),
    "agent tags": tenfold("<agent>tool:run_python</agent><code>"),
    "plan query": tenfold("<plan><query><answer><finish"),
    "webshop": "search[" + tenfold("]["),
}


def bounded(parse, text: str) -> None:
    before = parsing.scanned_chars()
    parse(text)
    work = parsing.scanned_chars() - before
    assert work <= PASSES * len(text), f"{work:,} characters scanned for {len(text):,}"


PARSERS = {
    "extract_tag": lambda t: parsing.extract_tag(t, "model"),
    "extract_tag think": lambda t: parsing.extract_tag(t, "think"),
    "strip_reasoning": parsing.strip_reasoning,
    "has_open_tag": lambda t: parsing.has_open_tag(t, "verdict"),
    "find_tag": lambda t: parsing.find_tag(t, "answer"),
    "mathroute route": lambda t: parse_route(t, AGENTS),
    "mathroute verify": lambda t: parse_verify(t, AGENTS, AGENTS[1:]),
    "budgetroute": lambda t: parse_budget_action(t, AGENTS),
    "orchmas call": parse_call,
    "orchmas answer format": answer_format,
    "puppeteer": lambda t: parse_puppeteer_action(t, AGENTS),
    "alfworld roles": parse_role,
    "webshop": parse_webshop_action,
    "boxed": extract_boxed,
    "shared memory": lambda t: extract_drafts(AgentOutput("planner", t)),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_parsers_are_linear_on_10_mb(attack):
    """Every parser reachable from an action, on each 10 MB attack: the characters its scans
    cover stay within a few passes. A quadratic parser (OrchMAS's lazy regex took 52 s on
    336 KB) would scan ~10^13 characters here, and hit the hang guard long before."""
    text = ATTACKS[attack]
    for name, parse in PARSERS.items():
        try:
            bounded(parse, text)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


@pytest.mark.timeout(120)
def test_remove_blocks_is_linear_on_unclosed_blocks():
    opener = re.compile(r"<(?P<tag>think|answer)\s*>", re.I)
    closers = {t: re.compile(rf"</{t}\s*>", re.I) for t in ("think", "answer")}
    for text in ("<answer>1</answer>" + tenfold("<think>"), tenfold("<answer><think>x</answer>")):
        bounded(lambda t: parsing.remove_blocks(t, opener, closers), text)


def test_orchmas_answer_format_on_the_issue_input():
    """The issue's input (336 KB: an answer, then unclosed <think>s) gives the right checks."""
    text = "<think>ok</think><answer>1</answer>" + "<think>" * 48_000
    assert answer_format(text) == (False, True, False)


# -- grading under a budget ------------------------------------------------------------------
EXPLOSIVE = [
    "9^{9^{9}}",
    "9**9**9",
    "x^{9^{9^{9}}}",
    "10^{100000000}",
    "1e999999",
    "7" * 5000,
    "10" * 600 + "^2",
    "(" * 100 + "1" + ")" * 100,
    "\\frac{1}{2}" * 300,
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer", EXPLOSIVE, ids=lambda a: a[:16])
def test_explosive_answers_are_refused_before_symbolic_work(answer):
    before = grading.cache_info()
    verdict = math_verdict("42", answer)
    assert verdict == grading.Verdict(False, "too-large")
    after = grading.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses), "no symbolic check ran"


def test_bundled_answers_are_never_refused():
    """The limits sit far above every answer the bundled task sources hold."""
    from orchenv.tasks import make_task_source

    for name in ("procedural-math", "champ", "reasoning-gym"):
        source = make_task_source(name)
        for split in source.splits:
            for i in range(source.size(split)):
                for answer in source.get(split, i).answers:
                    assert grading.answer_refusal(answer) is None, (name, answer)


SLOW = "\\sum_{k=1}^{100000} k^{k}"  # passes the size checks; sympy would run for minutes


@pytest.mark.timeout(60)
def test_a_slow_check_is_cut_off_and_counts_as_wrong():
    verdict = math_verdict("42", SLOW)
    assert verdict == grading.Verdict(False, "timeout")
    assert math_verdict("43", SLOW).status == "timeout", "a timed-out candidate is not retried"
    assert math_verdict("\\frac{1}{2}", "0.5").equal, "the next worker grades normally"
    assert math_verdict("\\sqrt{8}", "2\\sqrt{2}").equal


@pytest.mark.timeout(60)
def test_a_killed_worker_is_replaced():
    """A worker that dies (OOM killer, a stray signal) costs one restart, not the budget."""
    assert math_verdict("\\sqrt{8}", "2\\sqrt{2}").equal
    pid = grading.worker_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert math_verdict("\\sqrt{18}", "3\\sqrt{2}") == grading.Verdict(True)
    assert grading.worker_pid() not in (None, pid)


@pytest.mark.timeout(60)
def test_the_budget_holds_off_the_main_thread():
    """math-verify's own timeout needs the main thread; the worker's deadline does not."""
    results: list[grading.Verdict] = []
    thread = threading.Thread(target=lambda: results.append(math_verdict("41", SLOW + " + 1")))
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and results == [grading.Verdict(False, "timeout")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", ["9^{9^{9}}", SLOW + " + 2"])
def test_make_vec_returns_on_explosive_answers(answer):
    """The issue's hang: ``9^{9^{9}}`` through ``make_vec`` did not return in 100 s."""
    vec = make_vec("orch/BudgetRoute-v0", 2)
    vec.reset(seed=0)
    _, _, terminated, _, infos = vec.step([f"<answer>{answer}</answer>"] * 2)
    assert terminated.all()
    assert list(infos["grading"]) == [math_verdict("1", answer).status] * 2
    vec.close()


@pytest.mark.timeout(60)
def test_envs_report_a_refused_answer_in_info():
    env = gym.make("orch/OrchMAS-v0")
    env.reset(seed=0)
    _, _, terminated, _, info = env.step("<think>t</think><answer>9^{9^{9}}</answer>")
    assert terminated and info["grading"] == "too-large" and info["correct"] is False
    env = gym.make("orch/BudgetRoute-v0")
    env.reset(seed=0)
    _, _, _, _, info = env.step("<answer>\\boxed{9^{9^{9}}}</answer>")
    assert info["grading"] == "too-large" and info["correct"] is False
    assert answer_verdict("9^{9^{9}}", ["1"]).status == "too-large"
    task = Task(id="t", prompt="p", answers=("12",))
    assert graded_score("gsm-hard", task, "9^{9^{9}}") == (0.0, "too-large")


@pytest.mark.timeout(120)
def test_the_cache_is_bounded_in_bytes(monkeypatch):
    monkeypatch.setattr(grading, "CACHE_BYTES", 40_000)
    long_ones = [f"x + {i} + " + "y + " * 400 for i in range(30)]  # ~1.6 KB each
    for candidate in long_ones:
        math_verdict("x", candidate)
    info = grading.cache_info()
    assert 0 < info.nbytes <= 40_000 and info.currsize < len(long_ones)
    before = grading.cache_info().currsize
    math_verdict("5", "x" * 1_000_000)  # refused: never cached
    assert grading.cache_info().currsize == before
