"""Controller-output parsing: tolerant, last-occurrence rules, never raises."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from scenario import NEAR_MISS_FRAGMENTS

from orchenv.envs.mathroute.protocol import parse_route, parse_verify
from orchenv.parsing import (
    extract_tag,
    find_tag,
    match_agent,
    parse_bool,
    remove_blocks,
    scanned_chars,
    strip_reasoning,
    suggest_agent,
)

AGENTS = ["Qwen2.5-1.5B-Instruct", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct"]


def test_case_and_whitespace_tolerant():
    assert extract_tag("< MODEL >  x  </ model >", "model") == "x"
    assert extract_tag("<Verdict>\nTrue\n</VERDICT>", "verdict") == "True"


def test_any_tag_including_answer():
    assert extract_tag("<think>\\boxed{1}</think><answer> 42 </answer>", "answer") == "42"
    assert extract_tag("<answer>1</answer><answer>2</answer>", "answer") == "2"
    assert extract_tag("<answer>open", "answer") is None


def test_last_complete_occurrence_wins():
    assert extract_tag("<model>a</model> then <model>b</model>", "model") == "b"
    assert extract_tag("<model>a</model> <model>unclosed", "model") == "a"
    assert extract_tag("<model>a</model> stray </model>", "model") == "a"


def test_reasoning_blocks_are_ignored():
    text = "<think>maybe <model>Qwen3-30B-A3B-Instruct</model></think><model>Qwen2.5-7B-Instruct</model>"
    assert parse_route(text, AGENTS).agent == "Qwen2.5-7B-Instruct"
    assert strip_reasoning("a <thinking>b</thinking> c <think>unclosed d") == "a   c "
    # <thinking> itself is readable when asked for explicitly
    assert extract_tag("<thinking>hard one</thinking>", "thinking") == "hard one"


def test_agent_names_match_loosely_but_not_fuzzily():
    assert match_agent(" qwen2.5 7b instruct ", AGENTS) == "Qwen2.5-7B-Instruct"
    assert match_agent("Qwen2.5-7B", AGENTS) is None
    decision = parse_route("<model>Qwen2.5-7B</model>", AGENTS)
    assert not decision.ok and "Did you mean 'Qwen2.5-7B-Instruct'" in decision.error


def test_verdict_words():
    assert parse_bool(" TRUE. ") is True and parse_bool("false") is False
    assert parse_bool("yes") is True and parse_bool("Incorrect") is False
    assert parse_bool("perhaps") is None and parse_bool(None) is None


def test_verify_rules():
    stronger = AGENTS[1:]
    ok = parse_verify("<checking>fine</checking><verdict>True</verdict>", AGENTS, stronger)
    assert ok.ok and ok.verdict is True and ok.agent is None and ok.feedback == "fine"
    # a model after True is ignored
    assert parse_verify("<verdict>True</verdict><model>x</model>", AGENTS, stronger).ok
    reject = parse_verify(
        "<verdict>False</verdict>\n<model>Qwen3-30B-A3B-Instruct</model>", AGENTS, stronger
    )
    assert reject.ok and reject.agent == "Qwen3-30B-A3B-Instruct"
    missing = parse_verify("<verdict>False</verdict>", AGENTS, stronger)
    assert not missing.ok and "no <model>" in missing.error
    weaker = parse_verify(
        "<verdict>False</verdict><model>Qwen2.5-1.5B-Instruct</model>", AGENTS, stronger
    )
    assert not weaker.ok and "not stronger" in weaker.error
    relaxed = parse_verify(
        "<verdict>False</verdict><model>Qwen2.5-1.5B-Instruct</model>",
        AGENTS,
        stronger,
        require_stronger=False,
    )
    assert relaxed.ok and relaxed.agent == "Qwen2.5-1.5B-Instruct"
    assert parse_verify(
        "<verdict>False</verdict>", AGENTS, []
    ).ok  # nobody stronger: bare False is valid


def test_huge_inputs_are_linear():
    blob = "<model>" * 200_000 + "</model>" * 10
    assert parse_route(blob, AGENTS).ok is False
    assert parse_verify("<think>" + "<verdict>" * 100_000, AGENTS, AGENTS).ok is False


near_miss = st.sampled_from(NEAR_MISS_FRAGMENTS)
fuzz_text = st.one_of(st.text(max_size=300), st.lists(near_miss, max_size=40).map("".join))


@settings(max_examples=300, deadline=None)
@given(fuzz_text)
def test_parsers_never_raise(text):
    route = parse_route(text, AGENTS)
    verify = parse_verify(text, AGENTS, AGENTS[1:])
    for decision in (route, verify):
        assert decision.ok or (isinstance(decision.error, str) and decision.error)
        if decision.ok and decision.agent is not None:
            assert decision.agent in AGENTS


# -- remove_blocks: the lazy-regex result in linear time ----------------------------------------
LAZY = re.compile(r"<think\s*>.*?</think\s*>|<answer\s*>.*?</answer\s*>", re.S | re.I)
OPENER = re.compile(r"<(?P<tag>think|answer)\s*>", re.I)
CLOSERS = {tag: re.compile(rf"</{tag}\s*>", re.I) for tag in ("think", "answer")}
tag_soup = st.lists(
    st.sampled_from(
        ["<think>", "</think>", "<answer>", "</answer>", "<THINK >", "</answer  >", "<", "x", " "]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(tag_soup, st.text(max_size=60)))
def test_remove_blocks_matches_the_lazy_regex(text):
    assert remove_blocks(text, OPENER, CLOSERS) == LAZY.sub("", text)
    assert remove_blocks(text, OPENER, CLOSERS, " ") == LAZY.sub(" ", text)


def test_remove_blocks_examples():
    text = "a<think>b</think>c<answer>d</answer>e<think>never closed"
    assert remove_blocks(text, OPENER, CLOSERS) == "ace<think>never closed"
    assert remove_blocks("<answer>1</answer>" + "<think>" * 5, OPENER, CLOSERS) == "<think>" * 5


def test_find_tag_and_long_hint_names():
    assert find_tag("x < ANSWER > y", "answer") == 2
    assert find_tag("no tag", "answer") is None and find_tag(None, "answer") is None
    assert suggest_agent("Qwen2.5-7B", AGENTS) != ""
    assert suggest_agent("Qwen2.5-7B" * 1000, AGENTS) == "", "difflib is quadratic: no hint"


def test_scans_are_counted():
    text = "<model>" * 1000
    before = scanned_chars()
    extract_tag(text, "model")
    assert 0 < scanned_chars() - before <= 4 * len(text)
