"""Issue 37 item 2: the board's sealed plan. `orchenv board play` re-executes a submission's
registered controller on seeds derived from the maintainer's key (HMAC) in a sealed env (the
``sealed`` secret: task-source seed, task draw and backend seeds mixed with it, opaque task
ids), so the sealed tasks and the pool's luck on them cannot be computed without the key; the
dev plan stays reproducible; the board ranks sealed runs (seeds hidden) only when their
sealed.json is signed with its key and their files are unchanged; the run's files do not hold
the secret. The controllers that try to get around it: tests/test_board_sealed_tasks.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.cli import main
from orchenv.error import ConfigError, DataError
from orchenv.eval.board import (
    WITHHELD,
    make_spec,
    play_sealed,
    sealed_plan,
    sealed_secret,
    sealed_task_ids,
    write_spec,
)
from orchenv.eval.harness import EvalConfig, evaluate, read_episode_log
from orchenv.eval.leaderboard import build_leaderboard
from orchenv.seeding import sealed_int
from orchenv.verify import write_bundle
from orchenv.verify.keys import read_key, write_key

ENV = "orch/MathRoute-v0"
N = 10


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("sealed")
    key = read_key(write_key(tmp / "board.key"))
    spec = make_spec(ENV, pool="system1", split="test", dev_episodes=N, sealed_episodes=N, key=key)
    write_spec(tmp / "board.json", spec)
    out = {"dir": tmp, "key": tmp / "board.key", "spec": tmp / "board.json"}
    for name, kwargs in (("single", {"agent": 0}), ("random", {})):
        config = EvalConfig(ENV, controller=name, controller_kwargs=kwargs, pool="system1",
                            split="test", episodes=N, seeds=[0])  # fmt: skip
        evaluate(config, tmp / f"dev-{name}", progress=False)
        out[f"bundle-{name}"] = write_bundle(tmp / f"dev-{name}", tmp / f"bundle-{name}")
    return out


def test_the_sealed_plan_depends_on_the_key_and_the_dev_plan_does_not(board):
    spec = json.loads(board["spec"].read_text())
    key = read_key(board["key"])
    seeds, kwargs = sealed_plan(spec, key)
    assert seeds != spec["dev_plan"]["seeds"] and len(kwargs["sealed"]) == 64
    assert kwargs["sealed"] == sealed_secret(spec, key) and key.hex() not in kwargs["sealed"]
    assert sealed_int(b"another key" * 2, "x") != sealed_int(key, "x")
    with pytest.raises(ConfigError, match="not the board's"):
        sealed_plan(spec, b"0" * 32)
    assert sealed_plan(spec, key) == (seeds, kwargs)  # the maintainer can replay it


def test_sealed_runs_are_played_by_the_board_and_ranked_with_hidden_seeds(board, tmp_path):
    spec = json.loads(board["spec"].read_text())
    key = read_key(board["key"])
    sealed = {
        n: play_sealed(board[f"bundle-{n}"], spec, key, tmp_path / f"sealed-{n}")
        for n in ("single", "random")
    }
    dev_tasks = [
        r["task_id"] for r in read_episode_log(board["dir"] / "dev-random" / "episodes.jsonl")
    ]
    sealed_tasks = [r["task_id"] for r in read_episode_log(sealed["random"] / "episodes.jsonl")]
    assert sealed_tasks != dev_tasks and len(sealed_tasks) == N
    assert all(t.startswith("sealed-") for t in sealed_tasks)  # opaque in the log
    real = sealed_task_ids(sealed["random"], spec, key)  # the maintainer opens them
    assert all(t.startswith("procmath-") and t not in dev_tasks for t in real)
    assert real == sealed_task_ids(sealed["single"], spec, key)  # both played the same tasks
    secret = sealed_secret(spec, key)
    for name in ("run.json", "summary.json", "episodes.jsonl", "sealed.json"):
        text = (sealed["random"] / name).read_text()
        assert secret not in text and not any(t in text for t in real), name
    assert json.loads((sealed["random"] / "run.json").read_text())["env_kwargs"] == {
        "sealed": WITHHELD
    }
    out = tmp_path / "b"
    result = build_leaderboard([*sealed.values()], out, plots=False, spec=spec, key=key)
    (group,) = result.groups
    assert group.key[3].endswith("sealed plan")
    assert all(r.verified and r.rank in (1, 2) and r.seeds == [] for r in group.rows)
    assert "| sealed |" in (out / "leaderboard.md").read_text()
    assert "paired" in group.rows[0].vs_next  # both played the same sealed tasks
    # a forged or edited sealed run is kept out
    forged = read_key(write_key(tmp_path / "other.key"))
    with pytest.raises(DataError, match="not signed with this board's key"):
        build_leaderboard([sealed["single"]], tmp_path / "o", plots=False, spec=spec, key=forged)
    (sealed["random"] / "summary.json").write_text(
        (sealed["random"] / "summary.json").read_text() + " "
    )
    kept = build_leaderboard([*sealed.values()], tmp_path / "k", plots=False, spec=spec, key=key)
    assert [r.run for r in kept.rows] == ["sealed-single"]
    assert "changed after the sealed run was signed" in kept.rejected[0].reason


def test_the_cli_plays_the_sealed_plan(board, tmp_path):
    out = tmp_path / "run"
    assert main(["board", "play", str(board["bundle-random"]), "--board", str(board["spec"]),
                 "--key", str(board["key"]), "--out", str(out)]) == 0  # fmt: skip
    assert (out / "sealed.json").is_file() and (out / "summary.json").is_file()
