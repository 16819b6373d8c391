"""The `orchenv` command and the runner behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchenv.cli import main
from orchenv.runner import wilson_interval

ROOT = Path(__file__).resolve().parents[1]


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for expected in (
        "orch/MathRoute-v0",
        "orch/MathRouteSystem2-v0",
        "system1",
        "procedural-math",
        "cascade",
    ):
        assert expected in out


def test_run_prints_the_summary(capsys):
    assert (
        main(
            [
                "run",
                "orch/MathRoute-v0",
                "--controller",
                "random",
                "--episodes",
                "30",
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for expected in (
        "accuracy",
        "cost",
        "tokens",
        "turns",
        "usage ratio",
        "Qwen3-30B-A3B-Instruct",
    ):
        assert expected in out


def test_run_json_single_agent_and_pool(capsys):
    args = [
        "run",
        "orch/MathRoute-v0",
        "--controller",
        "single",
        "-c",
        "agent=0",
        "--pool",
        "system2",
        "--episodes",
        "20",
        "--seed",
        "3",
        "--split",
        "test",
        "--json",
        "--no-progress",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 20
    assert summary["usage_ratios"]["Qwen3-30B-A3B-Instruct"] == 1.0
    assert summary["usage_ratios"]["Llama-3.2-1B-Instruct"] == 0.0
    assert summary["mean_turns"] == 2.0


def test_same_seed_same_tasks_for_any_controller(capsys):
    import gymnasium as gym

    from orchenv.controllers import make_controller
    from orchenv.runner import run_episodes

    env = gym.make("orch/MathRoute-v0")
    _, a = run_episodes(env, make_controller("random", seed=1), 15, seed=7, progress=False)
    _, b = run_episodes(env, make_controller("single", agent=2), 15, seed=7, progress=False)
    assert [r.task_id for r in a] == [r.task_id for r in b]


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "orch/MathRoute-v0", "--controller", "randon"], "Did you mean 'random'"),
        (["run", "orch/MathRoute-v0", "-c", "speed=3"], "does not take speed"),
        (["run", "orch/NoSuchEnv-v0"], "orchenv list"),
        (["run", "orch/MathRoute-v0", "--pool", "system9"], "unknown pool preset"),
        (
            ["run", "orch/MathRoute-v0", "-e", "max_turn=2"],
            "unexpected keyword argument 'max_turn'",
        ),
        (["run", "orch/MathRoute-v0", "--split", "dev"], "unknown split"),
    ],
)
def test_errors_are_clear(capsys, args, message):
    assert main([*args, "--episodes", "1", "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_wilson_interval():
    lo, hi = wilson_interval(80, 100)
    assert 0.70 < lo < 0.80 < hi < 0.88
    assert wilson_interval(0, 0) == (0.0, 0.0)
    assert wilson_interval(10, 10)[1] == 1.0


@pytest.mark.parametrize(
    "script",
    [
        "quickstart.py",
        "custom_controller.py",
        "record_replay.py",
        "budgetroute_cheap_vs_o3.py",
        "orchmas_roles.py",
        "multihopqa_routers.py",
        "webshop_scripted.py",
        "alfworld_expert.py",
    ],
)
def test_examples_run(script):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert any(word in result.stdout for word in ("correct", "accuracy", "score"))


def test_console_script_and_module_entry():
    result = subprocess.run(
        [sys.executable, "-m", "orchenv", "list"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "orch/MathRoute-v0" in result.stdout


def test_record_then_replay_strictly(tmp_path, capsys):
    rec = tmp_path / "run.jsonl"
    base = [
        "run",
        "orch/MathRouteSystem2-v0",
        "--episodes",
        "12",
        "--seed",
        "4",
        "--json",
        "--no-progress",
    ]
    assert main([*base, "--controller", "random", "-c", "p_accept=0.5", "--record", str(rec)]) == 0
    recorded = json.loads(capsys.readouterr().out)
    assert recorded["cached_call_fraction"] == 0.0 and rec.exists()
    assert main([*base, "--controller", "random", "-c", "p_accept=0.5", "--replay", str(rec)]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["cached_call_fraction"] == 1.0
    for key in ("accuracy", "mean_reward", "total_cost_usd", "usage_ratios", "mean_turns"):
        assert replayed[key] == recorded[key], key
    # a different controller asks for calls that were never recorded: strict replay says so
    assert main([*base, "--controller", "single", "--replay", str(rec)]) == 2
    assert "no recorded call" in capsys.readouterr().err


def test_pool_file_examples_parse():
    from orchenv.pool import make_pool

    for path in sorted((ROOT / "examples" / "pools").glob("*.yaml")):
        pool = make_pool(path)
        assert len(pool.names) == 3 and all(pool.spec(n).backend == "openai" for n in pool.names)
        assert all(pool.spec(n).price_completion > 0 for n in pool.names)


def test_llm_controller_over_http_is_metered_recorded_and_replayed(tmp_path, capsys):
    """`-c base_url=` reaches the llm controller; its spend is in the summary; --record keeps
    its calls with the agents' and --replay then answers everything with no live call."""
    from orchenv.testing.fake_openai import FakeOpenAIServer

    def reply(body: dict) -> str:
        if body["model"] == "ctl":  # the controller model: route, then accept
            last = body["messages"][-1]["content"].lower()
            return (
                "<verdict>True</verdict>"
                if "verdict" in last
                else ("<model>Qwen3-30B-A3B-Instruct</model>")
            )
        return "\\boxed{4}"

    file = tmp_path / "calls.jsonl"
    with FakeOpenAIServer(reply=reply) as server:
        common = ["run", "orch/MathRoute-v0", "--controller", "llm", "-c", "model=ctl",
                  "-c", f"base_url={server.url}", "-e", "backend=openai",
                  "-e", json.dumps({"base_url": server.url}).join(["backend_kwargs=", ""]),
                  "--episodes", "3", "--json", "--no-progress"]  # fmt: skip
        assert main([*common, "--record", str(file)]) == 0
        live = json.loads(capsys.readouterr().out)
        bought = len(server.requests)
        assert main([*common, "--replay", str(file)]) == 0
        replayed = json.loads(capsys.readouterr().out)
        assert len(server.requests) == bought  # no live call, the controller's included
    assert live["controller_usage"]["controller_calls"] >= 3
    assert live["controller_usage"]["controller_prompt_tokens"] > 0
    agents = [json.loads(line)["agent"] for line in file.read_text().splitlines()]
    assert agents.count("controller") == live["controller_usage"]["controller_calls"]
    assert live["estimated_token_fraction"] == replayed["estimated_token_fraction"] == 0.0
    assert replayed["cached_call_fraction"] == 1.0
    for key in ("accuracy", "mean_reward", "mean_prompt_tokens", "total_cost_usd"):
        assert live[key] == replayed[key]
    assert replayed["controller_usage"] == live["controller_usage"]


def test_llm_controller_without_a_server_names_the_fix(capsys):
    args = ["run", "orch/MathRoute-v0", "--controller", "llm", "-c", "model=m", "--episodes", "1"]
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "llm controller" in err and "-c base_url=" in err and "'controller'" not in err


def test_main_in_process_keeps_pythons_sigpipe_handling(capsys):
    """Only the executable restores SIGPIPE's default action: a process that calls ``main``
    (this test suite) must keep raising BrokenPipeError, or one write to a dead child's pipe
    would kill it."""
    import signal

    if not hasattr(signal, "SIGPIPE"):
        pytest.skip("no SIGPIPE on this platform")
    before = signal.getsignal(signal.SIGPIPE)
    assert main(["list"]) == 0
    assert signal.getsignal(signal.SIGPIPE) == before != signal.SIG_DFL
    capsys.readouterr()


def test_eval_without_a_controller_plays_the_envs_default(tmp_path):
    """The routing baselines apply to MathRoute only; elsewhere the default is env-random."""
    import json

    from orchenv.controllers import default_controller

    assert default_controller("orch/MathRoute-v0") == "random"
    assert default_controller("orch/OrchMAS-v0") == "env-random"
    out = tmp_path / "orchmas"
    assert main(["eval", "orch/OrchMAS-v0", "--episodes", "2", "--out", str(out),
                 "--no-progress"]) == 0  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["controller"] == "env-random"


def test_reproduce_writes_docs_only_when_asked(monkeypatch, capsys):
    """Issue 40: a full `orchenv reproduce SEED` writes its page under the runs folder (or
    --out DIR), never the checkout's docs/reproduction/SEED.md unless --update-docs."""
    import orchenv.reproduce as kit
    from orchenv.cli import main

    seen = []

    def fake(seed_id, *, report, runs_dir, **kwargs):
        seen.append((str(report), str(runs_dir)))
        return report

    monkeypatch.setattr(kit, "reproduce", fake)
    assert main(["reproduce", "000", "--no-progress"]) == 0
    assert seen[-1] == ("runs/reproduce/000/000.md", "runs/reproduce/000")
    assert main(["reproduce", "0", "--quick", "--no-progress"]) == 0
    assert seen[-1][0] == "runs/reproduce/000-quick/000.md"
    assert main(["reproduce", "000", "--out", "pages", "--no-progress"]) == 0
    assert seen[-1][0] == "pages/000.md"
    assert main(["reproduce", "000", "--update-docs", "--no-progress"]) == 0
    assert seen[-1][0] == "docs/reproduction/000.md"
    assert main(["reproduce", "000", "--update-docs", "--out", "x"]) == 2
    assert "give one of --report FILE, --out DIR and --update-docs" in capsys.readouterr().err


def test_run_numbers_are_explained_and_costs_share_one_format(capsys):
    """Issue 40: usage ratios say they count every call (a cascade's verifier calls), the
    agents' summed latency is not called this run's latency, and every cost has one format."""
    import re

    from orchenv.cli import main

    args = ["run", "orch/MathRoute-v0", "--controller", "cascade", "--episodes", "10"]
    assert main([*args, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "latency" not in out.split("agent time")[0]
    assert "not this run's wall time" in out and "verifier or consult calls" in out
    costs = re.findall(r"\$[0-9.]+", out)
    assert costs and all(re.fullmatch(r"\$\d+\.\d{6}", c) for c in costs), costs


def test_list_describes_each_controller_on_one_line(capsys):
    from orchenv.cli import main
    from orchenv.controllers import CONTROLLERS

    assert main(["list"]) == 0
    out = capsys.readouterr().out.split("Controllers", 1)[1]
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert set(lines) == set(CONTROLLERS)
    assert "orch/MathRoute-v0" in lines["cascade"] and "verifier" in lines["cascade"]
    assert "[applies to: orch/BudgetRoute-v0]" in lines["budget-baseline"]
    assert all("[applies to: " in line and ":" not in line.split()[1] for line in lines.values())
