"""`orchenv eval` (resumable run directories) and `orchenv leaderboard`."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import logged_rows, rows_without_timing

from orchenv.cli import main
from orchenv.error import DataError
from orchenv.eval import EvalConfig, build_leaderboard, evaluate, read_episode_log
from orchenv.eval.harness import EpisodeLog
from orchenv.eval.leaderboard import Row, rank_rows

ENV = "orch/MathRoute-v0"
EPISODE_FIELDS = {
    "run_key",
    "env_id",
    "pool",
    "split",
    "controller",
    "controller_kwargs",
    "seed",
    "episode",
    "episode_seed",
    "task_id",
    "actions",
    "agent_calls",
    "prompt_tokens",
    "completion_tokens",
    "tokens",
    "cost_usd",
    "reward",
    "correct",
    "score",
    "turns",
    "invalid_actions",
    "latency_s",
    "wall_s",
    "cached_calls",
    "final_answer",
}
SUMMARY_FIELDS = {
    "accuracy",
    "accuracy_ci95",
    "mean_score",
    "mean_reward",
    "total_cost_usd",
    "mean_cost_usd",
    "mean_tokens",
    "mean_prompt_tokens",
    "mean_completion_tokens",
    "usage_ratios",
    "agent_calls",
    "mean_turns",
    "invalid_action_rate",
    "privileged",
    "episodes",
}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def eval_args(out: Path, *extra: str, controller: str = "random") -> list[str]:
    return [
        "eval",
        ENV,
        "--controller",
        controller,
        "--split",
        "test",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


def test_eval_writes_run_episodes_and_summary(tmp_path, capsys):
    out = tmp_path / "run"
    args = eval_args(out, "-c", "p_accept=0.5", "--episodes", "15", "--seeds", "0", "1")
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "usage ratio" in printed and "seeds" in printed

    run = json.loads((out / "run.json").read_text())
    assert run["env_id"] == ENV and run["split"] == "test" and run["pool"] == "system1"
    assert run["controller"] == "random" and run["controller_kwargs"] == {"p_accept": 0.5}
    assert run["seeds"] == [0, 1] and run["episodes"] == 15 and run["privileged"] is False

    rows = lines(out / "episodes.jsonl")
    assert len(rows) == 30
    for row in rows:
        assert set(row) >= EPISODE_FIELDS, EPISODE_FIELDS - set(row)
        assert row["tokens"] == row["prompt_tokens"] + row["completion_tokens"]
        assert row["turns"] == len(row["actions"])
    assert sorted((r["seed"], r["episode"]) for r in rows) == [
        (s, i) for s in (0, 1) for i in range(15)
    ]

    summary = json.loads((out / "summary.json").read_text())
    pooled, per_seed = summary["pooled"], summary["per_seed"]
    assert set(pooled) >= SUMMARY_FIELDS, SUMMARY_FIELDS - set(pooled)
    assert pooled["seeds"] == [0, 1] and pooled["split"] == "test" and pooled["pool"] == "system1"
    assert pooled["episodes"] == 30 and [s["seed"] for s in per_seed] == [0, 1]
    agents = run["agents"]
    assert set(pooled["usage_ratios"]) == set(agents) and len(agents) == 3
    for scope, chosen in [(pooled, rows)] + [
        (s, [r for r in rows if r["seed"] == s["seed"]]) for s in per_seed
    ]:
        # usage ratio = calls / episodes (the dataset size, as the seeds define it)
        for agent in agents:
            calls = sum(r["agent_calls"].get(agent, 0) for r in chosen)
            assert scope["usage_ratios"][agent] == pytest.approx(calls / len(chosen))
        acc = sum(r["correct"] for r in chosen) / len(chosen)
        lo, hi = scope["accuracy_ci95"]
        assert scope["accuracy"] == pytest.approx(acc) and lo <= acc <= hi and lo < hi
        assert scope["total_cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in chosen))
        assert scope["mean_reward"] == pytest.approx(sum(r["reward"] for r in chosen) / len(chosen))
    assert summary["accuracy_across_seeds"]["n_seeds"] == 2


def test_episode_tasks_depend_only_on_seed_and_index(tmp_path):
    """What exact resume rests on: episode i of seed s is the same whatever ran before it."""
    a = evaluate(EvalConfig(ENV, episodes=6, seeds=[0, 1]), tmp_path / "a", progress=False)
    b = evaluate(EvalConfig(ENV, episodes=3, seeds=[1]), tmp_path / "b", progress=False)
    for i in range(3):
        assert a.records[(1, i)].task_id == b.records[(1, i)].task_id
        assert a.records[(1, i)].actions == b.records[(1, i)].actions
    assert a.records[(0, 0)].task_id != a.records[(1, 0)].task_id


SLOW_CONTROLLER = """
import sys, time
from orchenv.controllers import CONTROLLERS
from orchenv.envs.mathroute.baselines import RandomRouter

class SlowRandom(RandomRouter):
    def act(self, obs, info):
        time.sleep(0.03)
        return super().act(obs, info)

CONTROLLERS["slowrandom"] = "__main__:SlowRandom"
from orchenv.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_resume_after_sigkill_and_a_torn_line_equals_an_uninterrupted_run(
    tmp_path, monkeypatch, caplog
):
    from orchenv import controllers as base

    common = [
        "-c",
        "p_accept=0.5",
        "--episodes",
        "12",
        "--seeds",
        "3",
        "4",
        # budgets that bind: the usage ledger carries over episodes and must be restored
        "-e",
        "enforce_usage_constraints=true",
        "-e",
        "usage_budget_queries=12",
    ]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    log = killed / "episodes.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SLOW_CONTROLLER,
            *eval_args(killed, *common, controller="slowrandom"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and log.read_bytes().count(b"\n") >= 5):
            if proc.poll() is not None:
                pytest.fail(f"eval exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("eval wrote no episodes within 120 s")
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    on_disk = log.read_bytes().count(b"\n")
    assert 5 <= on_disk < 24, "the kill must land mid-run"
    with log.open("ab") as fh:  # a write torn by the kill
        fh.write(b'{"run_key": "x", "seed": 4, "epis')

    # the same spec, in-process and without the sleep: identical behaviour
    monkeypatch.setitem(
        base.CONTROLLERS, "slowrandom", "orchenv.envs.mathroute.baselines:RandomRouter"
    )
    with caplog.at_level(logging.WARNING, logger="orchenv.eval.harness"):
        assert main(eval_args(killed, *common, controller="slowrandom")) == 0
    assert "unreadable tail" in caplog.text and "resuming" in caplog.text
    assert main(eval_args(whole, *common, controller="slowrandom")) == 0

    resumed, uninterrupted = lines(log), lines(whole / "episodes.jsonl")
    pairs = [(r["seed"], r["episode"]) for r in resumed]
    assert sorted(pairs) == [(s, i) for s in (3, 4) for i in range(12)]  # each exactly once
    assert len(set(pairs)) == len(pairs) == 24
    by_pair = {(r["seed"], r["episode"]): r for r in uninterrupted}
    rerouted = 0
    for row in resumed:
        ref = by_pair[(row["seed"], row["episode"])]
        for key in ("task_id", "reward", "correct", "actions", "agent_calls", "cost_usd"):
            assert row[key] == ref[key], (row["seed"], row["episode"], key)
        rerouted += row["env_state"] != ref["env_state"]
    assert rerouted == 0
    a = json.loads((killed / "summary.json").read_text())["pooled"]
    b = json.loads((whole / "summary.json").read_text())["pooled"]
    for key in ("accuracy", "mean_reward", "total_cost_usd", "usage_ratios", "mean_turns"):
        assert a[key] == b[key], key


def test_identity_mismatch_is_a_clear_error_and_overwrite_starts_over(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(eval_args(out, "--episodes", "4")) == 0
    capsys.readouterr()
    assert main(eval_args(out, "--episodes", "4", "-c", "agent=1", controller="single")) == 2
    err = capsys.readouterr().err
    assert "holds a different run" in err and "controller" in err
    assert "new --out" in err and "--overwrite" in err
    assert main(eval_args(out, "--episodes", "4", "--split", "train")) == 2
    assert "split" in capsys.readouterr().err
    # the same identity with a bigger plan extends the run; nothing is replayed
    assert main(eval_args(out, "--episodes", "6")) == 0
    assert "(2 episodes run now)" in capsys.readouterr().out
    assert len(lines(out / "episodes.jsonl")) == 6
    args = eval_args(out, "--episodes", "4", "-c", "agent=1", "--overwrite", controller="single")
    assert main(args) == 0
    rows = lines(out / "episodes.jsonl")
    assert len(rows) == 4 and {r["controller"] for r in rows} == {"single"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "0", "0"], "seeds must be distinct"),
        (["--seeds", "-1"], "non-negative"),
        (["-c", "seed=3"], "--seeds"),
        (["--controller", "randon"], "Did you mean 'random'"),
        (["-e", "max_turn=2"], "orchenv list"),
    ],
)
def test_eval_errors_are_clear(tmp_path, capsys, args, message):
    argv = ["eval", ENV, "--out", str(tmp_path / "r"), "--episodes", "2", "--no-progress", *args]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_torn_tail_is_cut_but_a_bad_middle_line_is_corruption(tmp_path, caplog):
    path = tmp_path / "episodes.jsonl"
    good = logged_rows(path, 2)
    path.write_bytes(good + b'{"c": ')
    with caplog.at_level(logging.WARNING):
        assert [r["episode"] for r in read_episode_log(path, repair=True)] == [0, 1]
    assert path.read_bytes() == good and "torn" in caplog.text
    first, second = good.splitlines(keepends=True)
    path.write_bytes(first + b"\x00\x00garbage\n" + second)
    with pytest.raises(DataError, match="corrupted"):
        read_episode_log(path)


def test_fsync_schedule(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    log = EpisodeLog(
        tmp_path / "e.jsonl", header={"run": "x"}, fsync_every=2, fsync_interval_s=None
    )
    fd = log.fd
    for i in range(5):
        log.append({"i": i})
    assert synced.count(fd) == 2  # after episodes 2 and 4
    log.close()
    assert synced.count(fd) == 3  # the unsynced fifth, on close
    assert [r["i"] for r in lines(tmp_path / "e.jsonl")] == list(range(5))
    first = lines(tmp_path / "e.jsonl")[0]
    assert first.pop("line_digest") and first == {"run": "x", "i": 0}


def test_python_api_with_a_controller_factory(tmp_path):
    class AlwaysStrongest:
        def __init__(self, seed: int) -> None:
            self.seed = seed

        def act(self, obs, info):
            if info["phase"] == "route":
                return f"<model>{info['valid_agents'][-1]}</model>"
            return "<verdict>True</verdict>"

    config = EvalConfig(ENV, controller="always-strongest", episodes=5, seeds=[0, 1])
    result = evaluate(config, tmp_path / "r", controller_factory=AlwaysStrongest, progress=False)
    assert result.ran == 10 and result.pooled.controller == "always-strongest"
    assert result.pooled.usage_ratios["Qwen3-30B-A3B-Instruct"] == 1.0
    again = evaluate(config, tmp_path / "r", controller_factory=AlwaysStrongest, progress=False)
    assert again.ran == 0 and again.summary["pooled"] == result.summary["pooled"]


def _row(controller: str, accuracy: float, cost: float, privileged: bool = False) -> Row:
    return Row(
        run=controller,
        dir=controller,
        env_id=ENV,
        pool="system1",
        split="test",
        controller=controller,
        controller_spec=controller,
        privileged=privileged,
        seeds=[0],
        episodes=100,
        accuracy=accuracy,
        ci_low=accuracy - 0.05,
        ci_high=accuracy + 0.05,
        mean_cost_usd=cost,
        mean_tokens=500.0,
        usage={"a": 1.0},
        mean_turns=2.0,
        invalid_rate=0.0,
        mean_reward=0.5,
        primary=accuracy,  # these rows' primary metric: ranked by it
        primary_low=accuracy - 0.05,
        primary_high=accuracy + 0.05,
    )


def test_ranking_rule():
    rows = [
        _row("cheap", 0.8, 0.001),
        _row("oracle", 0.99, 0.0005, privileged=True),
        _row("best", 0.9, 0.01),
        _row("pricey-tie", 0.8, 0.002),
        _row("verifier", 0.95, 0.002, privileged=True),
    ]
    (group,) = rank_rows(rows)
    assert [r.controller for r in group.rows] == [
        "best",
        "cheap",
        "pricey-tie",
        "oracle",
        "verifier",
    ]
    assert [r.rank for r in group.rows] == [1, 2, 3, None, None]
    other = _row("x", 0.5, 0.1)
    other.split = "train"
    assert len(rank_rows([*rows, other])) == 2


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory) -> list[Path]:
    """random, single and a privileged run (cascade's noisy-oracle verifier)."""
    root = tmp_path_factory.mktemp("runs")
    specs = {
        "random": ("random", {}),
        "single": ("single", {"agent": 0}),
        "cascade": ("cascade", {"verifier_accuracy": 0.9}),
    }
    dirs = []
    for name, (spec, kwargs) in specs.items():
        config = EvalConfig(
            ENV, controller=spec, controller_kwargs=kwargs, split="test", episodes=25, seeds=[0, 1]
        )
        evaluate(config, root / name, progress=False)
        dirs.append(root / name)
    return dirs


def test_leaderboard_builds_markdown_html_and_plots(three_runs, tmp_path, capsys):
    board = tmp_path / "board"
    assert main(["leaderboard", *map(str, three_runs), "--out", str(board)]) == 0
    printed = capsys.readouterr().out
    for name in (
        "leaderboard.md",
        "leaderboard.html",
        "leaderboard.json",
        "accuracy_vs_cost.png",
        "usage.png",
    ):
        assert (board / name).exists() and name in printed
    for png in ("accuracy_vs_cost.png", "usage.png"):
        data = (board / png).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000

    rows = json.loads((board / "leaderboard.json").read_text())
    assert [r["privileged"] for r in rows] == [False, False, True]
    assert rows[-1]["controller_spec"] == "cascade" and rows[-1]["display_name"].endswith("†")
    open_rows = rows[:2]
    assert open_rows[0]["accuracy"] > open_rows[1]["accuracy"]  # single(agent=0) beats random
    assert open_rows[0]["controller"] == "single(agent=0)" and open_rows[0]["rank"] == 1

    md = (board / "leaderboard.md").read_text()
    assert md.startswith("# orchenv leaderboard") and "Ranking:" in md.split("##")[0]
    assert md.index("single(agent=0)") < md.index("| random |") < md.index("Privileged")
    assert md.index("Privileged") < md.index("cascade(verifier_accuracy=0.9) †")
    header = next(line for line in md.splitlines() if line.startswith("| #"))
    for column in ("return [95% CI]", "vs next", "seeds", "episodes", "accuracy", "cost", "calls"):
        assert column in header
    for shared in ("| env |", "| pool |", "| split |"):  # said once, above the table
        assert shared not in header
    assert (
        "env `orch/MathRoute-v0` (default kwargs), pool `system1`, split `test`; ranked by return"
        in md
    )
    assert "usage Qwen3-30B-A3B-Instruct" in header and "turns" in header and "invalid" in header

    html = (board / "leaderboard.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "<script>" in html
    assert "http://" not in html and "https://" not in html and "<link" not in html
    assert 'class="privileged"' in html and "cascade(verifier_accuracy=0.9) †" in html


def test_leaderboard_groups_and_missing_summaries(three_runs, tmp_path, capsys):
    other = tmp_path / "train-run"
    evaluate(EvalConfig(ENV, split="train", episodes=5), other, progress=False)
    board = build_leaderboard([*three_runs, other], tmp_path / "board")
    assert len(board.groups) == 2
    names = sorted(p.name for p in board.files if p.suffix == ".png")
    assert len(names) == 4 and all("_orch-mathroute-v0-system1-" in n for n in names)
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "episodes.jsonl").write_text("")
    assert main(["leaderboard", str(tmp_path / "unfinished"), "--out", str(tmp_path / "b")]) == 2
    assert "rerun the same `orchenv eval` command" in capsys.readouterr().err


# -- concurrency ------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_concurrent_eval_over_http_equals_sequential_and_overlaps_calls(tmp_path):
    from orchenv.testing.fake_openai import FakeOpenAIServer

    def reply(body: dict) -> str:  # depends on the request: a crossed answer would show
        return f"\\boxed{{{sum(len(m['content']) for m in body['messages']) % 7}}}"

    results, peaks = [], []
    for concurrency in (1, 4):
        with FakeOpenAIServer(reply=reply, latency_s=0.05) as server:
            kwargs = {"base_url": server.url, "timeout_s": 10.0}
            config = EvalConfig(
                ENV,
                controller="env-random",
                env_kwargs={"backend": "openai", "backend_kwargs": kwargs},
                episodes=6,
                seeds=[0, 1],
            )
            out = tmp_path / f"c{concurrency}"
            results.append(evaluate(config, out, progress=False, concurrency=concurrency))
            peaks.append(server.max_in_flight)
        rows = read_episode_log(out / "episodes.jsonl")
        assert sorted((r["seed"], r["episode"]) for r in rows) == [
            (s, i) for s in (0, 1) for i in range(6)
        ]
    assert rows_without_timing(results[0]) == rows_without_timing(results[1])
    assert results[0].summary["pooled"]["accuracy"] == results[1].summary["pooled"]["accuracy"]
    assert peaks[0] == 1 and peaks[1] > 1


def test_concurrency_is_refused_for_envs_with_state_across_episodes(tmp_path):
    from orchenv.error import ConfigError

    config = EvalConfig(ENV, env_kwargs={"enforce_usage_constraints": True}, episodes=3, seeds=[0])
    with pytest.raises(ConfigError, match="--concurrency 1"):
        evaluate(config, tmp_path / "run", progress=False, concurrency=2)
    assert main(["eval", ENV, "--out", str(tmp_path / "cli"), "--episodes", "2",
                 "--concurrency", "2", "--no-progress"]) == 0  # fmt: skip


def test_controller_spend_is_in_the_records_and_the_summary(tmp_path):
    class Spending:
        """A controller that calls a model of its own: 1 call, 10 + 2 tokens per action."""

        def __init__(self) -> None:
            self.calls = 0

        def usage(self) -> dict:
            return {"controller_calls": self.calls, "controller_prompt_tokens": 10 * self.calls}

        def act(self, obs, info):
            self.calls += 1
            return "<model>Qwen3-30B-A3B-Instruct</model>" if "verdict" not in obs else "x"

    result = evaluate(
        EvalConfig(ENV, controller="spending", episodes=3, seeds=[0]),
        tmp_path / "run",
        controller_factory=lambda seed: Spending(),
        progress=False,
    )
    for record in result.records.values():
        assert record.metrics["controller_calls"] == record.turns >= 1
        assert record.metrics["controller_prompt_tokens"] == 10 * record.turns
    assert result.pooled.metrics["controller_calls"] > 0


def test_summaries_report_the_share_of_calls_and_actions_cut_at_max_tokens(tmp_path):
    """Issue 31: finish_reason "length" is counted per episode and shared in `eval` / `run`."""
    import dataclasses

    import gymnasium as gym

    from orchenv.runner import format_summary, run_episodes

    class Cutting:
        """Every other agent call stops at max_tokens."""

        def __init__(self, inner) -> None:
            self.inner, self.n, self.cut = inner, 0, 0

        def complete(self, spec, messages, context):
            completion = self.inner.complete(spec, messages, context)
            self.n += 1
            if self.n % 2:
                return completion
            self.cut += 1
            return dataclasses.replace(
                completion, meta={**completion.meta, "finish_reason": "length"}
            )

    class Replying:
        """A model-calling controller: every action is a reply, the first one of each episode
        cut at max_tokens."""

        def __init__(self) -> None:
            self.calls = self.truncated = 0

        def usage(self) -> dict:
            return {"controller_calls": self.calls, "controller_truncated": self.truncated}

        def reset(self, seed=None) -> None:
            self.first = True

        def act(self, obs, info):
            self.calls += 1
            self.truncated += self.first
            self.first = False
            return "<model>Qwen3-30B-A3B-Instruct</model>" if "verdict" not in obs else "x"

    env = gym.make(ENV, split="test")
    env.reset(seed=0)
    cutting: list[Cutting] = []
    env.unwrapped.pool.wrap_backends(lambda name, b: cutting.append(Cutting(b)) or cutting[-1])
    result = evaluate(
        EvalConfig(ENV, controller="replying", episodes=4, seeds=[0], split="test"),
        tmp_path / "run",
        controller_factory=lambda seed: Replying(),
        env=env,
        progress=False,
    )
    cut = sum(c.cut for c in cutting)
    calls = sum(sum(r.agent_calls.values()) for r in result.records.values())
    turns = sum(r.turns for r in result.records.values())
    assert cut >= 1 and calls > cut
    pooled = result.summary["pooled"]
    assert pooled["truncated_calls"] == cut and pooled["truncated_call_share"] == cut / calls
    assert pooled["agent_calls_total"] == calls
    assert pooled["truncated_actions"] == 4 and pooled["controller_replies"] == turns
    assert pooled["truncated_action_share"] == 4 / turns
    lo, hi = pooled["truncated_call_ci95"]
    assert lo < cut / calls < hi
    # `orchenv run` prints both shares
    summary, _ = run_episodes(env, Replying(), 3, seed=1, progress=False)
    text = format_summary(summary)
    assert "of agent calls" in text and "of controller replies (3 of" in text
    env.close()
