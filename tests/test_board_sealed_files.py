"""Issue 37 item 2 (file-based task sources): a board's sealed plan reads a private task file.

The spec names the file only by its sha256 (and the task-source argument it fills); the
maintainer gives the path at play time (``orchenv board play --task-file FILE``), and a
file with another hash, a symlink or no file at all is refused. A board whose task source
takes no seed and names no private file has no sealed plan: its sealed tasks would be the
public ones. The sealed run plays the private file's tasks, shows them by opaque ids and
keeps the path out of its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.cli import main
from orchenv.envs.multihopqa.loaders import to_hotpot_record
from orchenv.envs.multihopqa.synth import SyntheticMultihopSource
from orchenv.error import ConfigError
from orchenv.eval.board import (
    WITHHELD,
    make_spec,
    play_sealed,
    sealed_plan,
    sealed_task_ids,
    write_spec,
)
from orchenv.eval.harness import EvalConfig, evaluate, read_episode_log
from orchenv.verify.keys import read_key, write_key

ENV = "orch/MultihopQA-v0"
N = 6


def _task_file(path: Path, seed: int) -> tuple[Path, list[str]]:
    source = SyntheticMultihopSource(seed=seed, n_train=0, n_test=12)
    records = [to_hotpot_record(t) for t in source.iter("test")]
    path.write_text(json.dumps(records), encoding="utf-8")
    return path, [r["_id"] for r in records]


@pytest.fixture
def board(tmp_path: Path) -> dict:
    public, public_ids = _task_file(tmp_path / "public.json", seed=1)
    private_dir = tmp_path / "maintainer"
    private_dir.mkdir()
    private, private_ids = _task_file(private_dir / "private.json", seed=2)
    kwargs = {
        "judge": None,
        "role_agents": {"searcher": "Qwen2.5-7B-Instruct", "recommender": "Qwen3-30B-A3B-Instruct"},
        "task_source": "multihop-file",
        "task_source_kwargs": {"path": str(public)},
    }
    key = read_key(write_key(private_dir / "board.key"))
    spec = make_spec(ENV, pool="system1", split="validation", env_kwargs=kwargs,
                     dev_episodes=N, sealed_episodes=N, key=key, sealed_task_file=private)  # fmt: skip
    return {"tmp": tmp_path, "key": key, "spec": spec, "kwargs": kwargs, "private": private,
            "public_ids": public_ids, "private_ids": private_ids}  # fmt: skip


def test_the_spec_names_the_private_file_by_hash_and_play_needs_that_file(board):
    spec, key, private = board["spec"], board["key"], board["private"]
    assert str(private) not in json.dumps(spec) and "maintainer" not in json.dumps(spec)
    assert len(spec["sealed_plan"]["task_file"]["sha256"]) == 64
    with pytest.raises(ConfigError, match="reads a private task file"):
        sealed_plan(spec, key)
    other, _ = _task_file(board["tmp"] / "other.json", seed=3)
    with pytest.raises(ConfigError, match="another file"):
        sealed_plan(spec, key, other)
    link = board["tmp"] / "link.json"
    link.symlink_to(private)
    with pytest.raises(ConfigError, match="not a regular file"):
        sealed_plan(spec, key, link)
    _, kwargs = sealed_plan(spec, key, private)
    assert kwargs["task_source_kwargs"]["path"] == str(private.resolve())


def test_a_sealed_run_plays_the_private_tasks_and_keeps_the_path_out(board):
    tmp, spec, key = board["tmp"], board["spec"], board["key"]
    config = EvalConfig(ENV, controller="env-random", pool="system1", split="validation",
                        episodes=N, seeds=[0], env_kwargs=board["kwargs"])  # fmt: skip
    evaluate(config, tmp / "dev", progress=False)
    dev_ids = [r["task_id"] for r in read_episode_log(tmp / "dev" / "episodes.jsonl")]
    assert set(dev_ids) <= set(board["public_ids"])  # the dev plan: public, reproducible
    write_spec(tmp / "board.json", spec)
    (tmp / "board.key").write_bytes(b"")  # the CLI reads the key from the maintainer's file
    out = tmp / "sealed"
    assert main(["board", "play", str(tmp / "dev"), "--board", str(tmp / "board.json"),
                 "--key", str(tmp / "maintainer" / "board.key"), "--out", str(out),
                 "--task-file", str(board["private"])]) == 0  # fmt: skip
    shown = [r["task_id"] for r in read_episode_log(out / "episodes.jsonl")]
    assert len(shown) == N and all(t.startswith("sealed-") for t in shown)
    real = sealed_task_ids(out, spec, key)
    assert set(real) <= set(board["private_ids"])
    for name in ("run.json", "summary.json", "episodes.jsonl", "sealed.json"):
        text = (out / name).read_text()
        assert str(board["private"]) not in text and not any(t in text for t in real), name
    run = json.loads((out / "run.json").read_text())
    assert run["env_kwargs"]["task_source_kwargs"]["path"] == WITHHELD
    with pytest.raises(ConfigError, match="another file"):
        play_sealed(tmp / "dev", spec, key, tmp / "again", task_file=tmp / "public.json")


def test_a_file_source_without_a_private_file_has_no_sealed_plan(board):
    with pytest.raises(ConfigError, match="takes no seed"):
        make_spec(ENV, pool="system1", split="validation", env_kwargs=board["kwargs"],
                  sealed_episodes=N, key=board["key"])  # fmt: skip


def test_the_cli_writes_a_spec_with_a_private_task_file(board, tmp_path):
    kwargs = board["kwargs"]
    out = tmp_path / "cli-board.json"
    assert main(["board", "init", ENV, "--pool", "system1", "--split", "validation",
                 "-e", "judge=null", "-e", f"role_agents={json.dumps(kwargs['role_agents'])}",
                 "-e", "task_source=multihop-file",
                 "-e", f"task_source_kwargs={json.dumps(kwargs['task_source_kwargs'])}",
                 "--episodes", str(N), "--sealed-episodes", str(N),
                 "--key", str(tmp_path / "maintainer" / "board.key"),
                 "--sealed-task-file", str(board["private"]), "--out", str(out)]) == 0  # fmt: skip
    spec = json.loads(out.read_text())
    assert spec["sealed_plan"]["task_file"] == board["spec"]["sealed_plan"]["task_file"]
    assert str(board["private"]) not in out.read_text()
