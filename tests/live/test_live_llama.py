"""orchenv against a real model: SmolLM2-135M-Instruct served by llama.cpp (docs/live.md).

Every figure asserted here is what users rely on with a served model: token counts come from
the server, the ``llm`` controller's invalid replies are penalised rather than fatal, a
recorded run replays identically with the server out of reach (each env that takes a pool
plays an episode per model in ``test_live_envs.py``). The measured numbers are printed (``-s``) and appended to
``ORCHENV_LIVE_REPORT`` for docs/live.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import orchenv  # noqa: F401 - registers the env ids
from orchenv.backends.openai_compat import OpenAICompatBackend
from orchenv.cli import main
from orchenv.eval import read_episode_log
from orchenv.pool import AgentPool, AgentSpec

pytestmark = [pytest.mark.live, pytest.mark.timeout(1800)]

MATH = "orch/MathRoute-v0"
DEAD = "http://127.0.0.1:9/v1"  # nobody listens on port 9: any live call would fail
MESSAGES = [
    [{"role": "user", "content": "What is 12 + 30? Answer with the number."}],
    [
        {"role": "system", "content": "You are a careful mathematician."},
        {"role": "user", "content": "Is 91 a prime number? Explain in one sentence."},
    ],
    [{"role": "user", "content": "Name the capital of France."}],
]


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*args, "--json", "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_and_eval_on_a_live_pool(
    live_server: Any, live_report: Any, tmp_path: Path, capsys
) -> None:
    """Three agent names served by one model; every token count comes from the server."""
    pool = live_server.pool_file(tmp_path / "pool.json")
    start = time.perf_counter()
    summary = run_json(["run", MATH, "--pool", str(pool), "--controller", "random",
                        "--episodes", "3", "--seed", "0"], capsys)  # fmt: skip
    run_s = time.perf_counter() - start
    assert summary["episodes"] == 3
    assert summary["estimated_token_fraction"] == 0.0  # metered by the server
    assert summary["mean_prompt_tokens"] > 0 and summary["mean_completion_tokens"] > 0
    assert set(summary["usage_ratios"]) == {"smol-a", "smol-b", "smol-c"}

    out = tmp_path / "eval"
    start = time.perf_counter()
    pooled = run_json(["eval", MATH, "--pool", str(pool), "--controller", "random",
                       "--episodes", "4", "--out", str(out), "--concurrency", "2"], capsys)  # fmt: skip
    eval_s = time.perf_counter() - start
    rows = read_episode_log(out / "episodes.jsonl")
    assert len(rows) == 4 and all(r["estimated_calls"] == 0 for r in rows)
    assert pooled["episodes"] == 4
    live_report(
        "run+eval MathRoute, random controller",
        s_per_episode_run=run_s / 3,
        s_per_episode_eval_concurrency2=eval_s / 4,
        mean_tokens=summary["mean_prompt_tokens"] + summary["mean_completion_tokens"],
        accuracy=summary["accuracy"],
    )


def test_llm_controller_on_the_real_model_then_replay_without_the_server(
    live_server: Any, live_report: Any, tmp_path: Path, capsys
) -> None:
    """The 135M model drives the llm controller: its invalid actions are penalised, not
    fatal; record then strict replay with every URL dead reproduces the run exactly."""
    episodes = 5
    calls = tmp_path / "calls.jsonl"
    live_pool = live_server.pool_file(tmp_path / "pool.json")
    dead_pool = live_server.pool_file(tmp_path / "dead.json", url=DEAD)
    controller = ["--controller", "llm", "-c", "model=smollm2", "-c", "max_tokens=48",
                  "--episodes", str(episodes), "--seed", "0"]  # fmt: skip
    start = time.perf_counter()
    live = run_json(["run", MATH, "--pool", str(live_pool), *controller,
                     "-c", f"base_url={live_server.url}", "--record", str(calls)], capsys)  # fmt: skip
    live_s = time.perf_counter() - start
    spend = live["controller_usage"]
    assert spend["controller_calls"] >= episodes
    assert spend["controller_prompt_tokens"] > 0
    valid_rate = 1.0 - live["invalid_action_rate"]

    replayed = run_json(["run", MATH, "--pool", str(dead_pool), *controller,
                         "-c", f"base_url={DEAD}", "--replay", str(calls)], capsys)  # fmt: skip
    for key in ("accuracy", "mean_reward", "mean_prompt_tokens", "mean_completion_tokens",
                "total_cost_usd", "invalid_action_rate", "usage_ratios", "mean_turns"):  # fmt: skip
        assert replayed[key] == live[key], key
    assert replayed["controller_usage"] == spend
    agent_calls = sum(live["usage_ratios"].values()) * episodes
    # every agent call (if the controller's actions led to any) was served from the file
    assert replayed["cached_call_fraction"] == (1.0 if agent_calls else 0.0)
    assert replayed["estimated_token_fraction"] == 0.0  # the server's counts, kept
    live_report(
        "llm controller (SmolLM2-135M) on MathRoute",
        episodes=episodes,
        valid_action_rate=valid_rate,
        agent_calls_per_episode=agent_calls / episodes,
        accuracy=live["accuracy"],
        controller_calls_per_episode=spend["controller_calls"] / episodes,
        controller_tokens_per_episode=(
            spend["controller_prompt_tokens"] + spend["controller_completion_tokens"]
        )
        / episodes,
        s_per_episode=live_s / episodes,
        replay_identical=True,
    )


def test_metering_agrees_with_the_gguf_tokenizer_and_logprobs_come_back(
    live_server: Any, live_report: Any
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    backend = OpenAICompatBackend(
        base_url=live_server.url,
        timeout_s=300,
        tokenizer=str(live_server.gguf),
        # llama-cpp-python returns logprobs only when top_logprobs is set too
        default_params={"max_tokens": 32, "temperature": 0.0, "logprobs": True, "top_logprobs": 1},
    )
    pool = AgentPool([AgentSpec(name="smol", model="smollm2", tier=0, backend="openai")],
                     {"openai": backend})  # fmt: skip
    agree, prompt_equal, logprob_tokens, ids_found, ids_verified = 0, 0, 0, 0, 0
    try:
        for messages in MESSAGES:
            completion = pool.call("smol", messages)
            metering = completion.meta["metering"]
            assert completion.token_source == "server"
            assert metering["server"] == [completion.prompt_tokens, completion.completion_tokens]
            agree += not metering["disagree"]
            prompt_equal += metering["server"][0] == metering["tokenizer"][0]
            lp = completion.meta.get("logprobs")
            assert lp is not None, "llama.cpp returns logprobs when asked"
            assert len(lp["tokens"]) == len(lp["logprobs"]) > 0
            assert all(v <= 0.0 for v in lp["logprobs"])
            assert abs(len(lp["tokens"]) - completion.completion_tokens) <= 1
            logprob_tokens += len(lp["tokens"])
            # llama.cpp sends token texts only: ids come from the GGUF's own tokenizer
            assert lp["token_ids_source"] == "tokenizer"
            ids_found += sum(i is not None for i in lp["token_ids"])
            ids_verified += bool(lp["token_ids_verified"])
    finally:
        pool.close()
    assert agree == len(MESSAGES)
    assert ids_found >= 0.9 * logprob_tokens and ids_verified >= 1
    live_report(
        "verified metering (server usage vs the GGUF's tokenizer)",
        calls=len(MESSAGES),
        agreeing=agree,
        prompt_counts_equal=prompt_equal,
        logprob_tokens=logprob_tokens,
        token_ids_found=ids_found,
        completions_whose_ids_decode_to_the_text=ids_verified,
    )


def test_hf_backend_runs_the_same_gguf_in_process(live_server: Any, live_report: Any) -> None:
    """The same SmolLM2 file loads in transformers (dequantised): it answers, and counts
    the prompt as the server does."""
    pytest.importorskip("torch")
    pytest.importorskip("gguf")
    from orchenv.backends.hf import HFBackend

    spec = AgentSpec(name="smol", model=str(live_server.gguf), tier=0, backend="hf")
    local = AgentPool([spec], {"hf": HFBackend(model=str(live_server.gguf), max_new_tokens=16,
                                               device="cpu")})  # fmt: skip
    served = AgentPool(
        [AgentSpec(name="smol", model="smollm2", tier=0, backend="openai")],
        {"openai": OpenAICompatBackend(base_url=live_server.url, timeout_s=300,
                                       default_params={"max_tokens": 16, "temperature": 0.0})},
    )  # fmt: skip
    try:
        mine = local.call("smol", MESSAGES[0])
        theirs = served.call("smol", MESSAGES[0])
    finally:
        local.close()
        served.close()
    assert mine.text.strip() and mine.token_source == "tokenizer"
    assert mine.prompt_tokens == theirs.prompt_tokens
    live_report("hf backend on the GGUF", prompt_tokens=mine.prompt_tokens, text=mine.text[:80])
