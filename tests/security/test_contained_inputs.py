"""Issue 28, part 2: no input file or action stops an evaluation.

Parsed strings are normalised (a JSON escape cannot smuggle a lone surrogate past the
action normaliser), pool files refuse duplicate keys and bad names and load in linear time,
run files are read through the schema (finite numbers only), and control characters or cut
replies are visible as such in observations. Each test failed before its fix.
"""

from __future__ import annotations

import json
import time

import gymnasium as gym
import pytest

import orchenv  # noqa: F401  (registers the ids)
from orchenv.controllers import parse_kwargs
from orchenv.error import ConfigError, DataError, OrchEnvError

# -- 2. one normalisation for every parsed string -------------------------------------------

SURROGATE_CALL = (
    "<think>ask</think><interaction_prompt>"
    '{"name": "prompt_dynamic", "arguments": {"prompt": "Solve it \\ud800 \\u0000 now", '
    '"agent_role": "solver \\udfff"}}</interaction_prompt>'
)


def test_an_all_ascii_json_escape_cannot_crash_orchmas():
    """``\\ud800`` inside the call's JSON became a lone surrogate after ``json.loads``, and
    the simulated executor raised ``UnicodeEncodeError``: the evaluation stopped."""
    assert SURROGATE_CALL.isascii()
    env = gym.make("orch/OrchMAS-v0")
    env.reset(seed=0)
    obs, reward, _, _, info = env.step(SURROGATE_CALL)
    obs.encode("utf-8")
    json.dumps(info, default=str).encode("utf-8")
    for entry in env.unwrapped.transcript:
        json.dumps(entry, default=str).encode("utf-8")


def test_parsed_structures_are_cleaned_everywhere():
    from orchenv.parsing import clean_parsed, loads_json

    data = loads_json('{"k\\ud800": ["\\u0000", {"x": "\\ud83d\\ude00"}], "n": [1, 2.5]}')
    assert data == {"k\ufffd": ["\ufffd", {"x": "\U0001f600"}], "n": [1, 2.5]}
    deep = json.loads("[" * 900 + '"\\udfff"' + "]" * 900)
    cleaned = clean_parsed(deep)
    for _ in range(900):
        cleaned = cleaned[0]
    assert cleaned == "\ufffd"
    assert clean_parsed(("a", ["\x00"])) == ("a", ["\ufffd"])


# -- 7. pool files ------------------------------------------------------------------------


def _agent(name: str, **extra):
    return {"name": name, "model": "m", "tier": 0, "price_prompt": 1.0, **extra}


def test_a_key_given_twice_in_a_json_pool_file_is_refused(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text(
        '{"agents": [{"name": "a", "model": "m", "tier": 0, '
        '"price_prompt": 5.0, "price_prompt": 0.0}]}'
    )
    with pytest.raises(OrchEnvError, match="price_prompt.*twice"):
        orchenv.make_pool(path)


def test_a_key_given_twice_in_a_yaml_pool_file_is_refused(tmp_path):
    path = tmp_path / "pool.yaml"
    path.write_text("agents:\n  - name: a\n    model: m\n    tier: 0\n    tier: 1\n")
    with pytest.raises(DataError, match="tier.*twice"):
        orchenv.make_pool(path)


@pytest.mark.parametrize("bad", ["a\\ud800", "a\\u0000b", "\\u202eevil", ""])
def test_a_bad_agent_name_is_refused_with_the_field_named(tmp_path, bad):
    path = tmp_path / "pool.json"
    path.write_text('{"agents": [{"name": "' + bad + '", "model": "m", "tier": 0}]}')
    with pytest.raises(ConfigError, match=r"agents\[0\].*'name'"):
        orchenv.make_pool(path)


def test_pool_files_load_in_linear_time_with_a_cap(tmp_path):
    """5,000 agents: about 0.3 s here (before: about 9 s, quadratic); the cap is named."""
    from orchenv.pool import MAX_POOL_AGENTS

    agents = [_agent(f"a{i}", tier=i % 7) for i in range(5000)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"agents": agents}))
    start = time.perf_counter()
    pool = orchenv.make_pool(path)
    took = time.perf_counter() - start
    assert len(pool.names) == 5000 and took < 4.0, took
    strongest = [a for a in pool.names if pool.spec(a).tier == 0]
    assert set(pool.stronger_than("a6")) == {a for a in pool.names if pool.spec(a).tier < 6}
    assert pool.stronger_than(strongest[0]) == ()
    path.write_text(json.dumps({"agents": [_agent("x")] * (MAX_POOL_AGENTS + 1)}))
    with pytest.raises(ConfigError, match=f"at most {MAX_POOL_AGENTS:,}"):
        orchenv.make_pool(path)


def test_duplicate_agent_names_are_named(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"agents": [_agent("a"), _agent("b"), _agent("a")]}))
    with pytest.raises(ConfigError, match=r"agents\[2\].*'a'.*agents\[0\]"):
        orchenv.make_pool(path)


# -- 8. run files through the schema, finite settings ----------------------------------------


def _finished_run(tmp_path):
    from orchenv.eval.harness import EvalConfig, evaluate

    out = tmp_path / "run"
    evaluate(
        EvalConfig(env_id="orch/MathRoute-v0", controller="random", episodes=2), out, progress=False
    )
    return out


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e309"])
def test_a_non_finite_number_in_summary_json_is_refused(tmp_path, value):
    """NaN was copied into leaderboard.json and Infinity crashed `orchenv leaderboard`."""
    from orchenv.eval.leaderboard import build_leaderboard

    out = _finished_run(tmp_path)
    summary = out / "summary.json"
    text = summary.read_text()
    pooled = json.loads(text)["pooled"]
    edited = text.replace(
        f'"mean_reward": {json.dumps(pooled["mean_reward"])}', f'"mean_reward": {value}', 1
    )
    assert edited != text
    summary.write_text(edited)
    with pytest.raises(DataError, match="summary.json"):
        build_leaderboard([out], tmp_path / "board")
    assert not (tmp_path / "board" / "leaderboard.json").exists()


def test_a_non_finite_number_in_run_json_is_refused(tmp_path):
    from orchenv.eval.harness import load_summary

    out = _finished_run(tmp_path)
    run = out / "run.json"
    run.write_text(run.read_text().replace("{", '{"weight": NaN, ', 1))
    with pytest.raises(DataError, match="run.json"):
        load_summary(out)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e309"])
def test_non_finite_settings_are_refused(value):
    with pytest.raises(ConfigError, match="finite"):
        parse_kwargs([f"format_penalty={value}"])
    with pytest.raises(ConfigError, match="format_penalty"):
        gym.make("orch/MathRoute-v0", format_penalty=float(value))
    assert parse_kwargs(["format_penalty=-0.5", "name=NaNa"]) == {
        "format_penalty": -0.5,
        "name": "NaNa",
    }


# -- 10. control characters and cut replies -------------------------------------------------


def test_control_characters_reach_the_observation_escaped():
    from orchenv.core import escape_controls

    env = gym.make("orch/MathRoute-v0")
    env.reset(seed=0)
    base = env.unwrapped
    original = base._messages

    def with_controls():
        messages = original()
        return [*messages, {"role": "user", "content": "tool said \x00\x1b[2J\u202eevil\x07 ok\n"}]

    base._messages = with_controls
    obs, *_, info = env.step("<model>nonsense</model>")
    assert "\x00" not in obs and "\x1b" not in obs and "\u202e" not in obs and "\x07" not in obs
    assert "tool said \\x00\\x1b[2J\\u202eevil\\x07 ok\n" in obs
    assert all("\x1b" not in m["content"] for m in info["messages"])
    assert escape_controls("tab\tline\nok") == "tab\tline\nok"


def test_a_cut_role_reply_says_so():
    """A role reply over ``max_reply_chars`` was cut silently and then reported as having
    no tags; now ``info`` and the parse error say it was cut."""
    from orchenv.envs.multihopqa.env import MultihopQAGame

    game = MultihopQAGame()
    game.reset(seed=0)
    role = game.roles[0]
    reply = "x" * (game.max_reply_chars + 10) + "<answer>late</answer>"
    info = game.act(role, reply)
    assert info["reply_cut"] == {"chars": len(reply), "kept": game.max_reply_chars}
    if info.get("parse_error"):
        assert "cut" in info["parse_error"]
    assert "cut" in info["notice"]
    assert "Your last reply was cut" in game.observe(role)
