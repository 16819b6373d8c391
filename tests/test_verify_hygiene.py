"""Issue 37 item 1: files read back are regular files checked before they are opened (a FIFO
never hangs `verify` or `leaderboard`), within the size cap, symlinks refused; `verify` removes
a shipped verdict before reading anything and leaves a failed verdict on any error; the board
trusts only verdicts signed with its key (HMAC) or verified by itself; pool.json must be the
named preset; a price key must name the agent's own model."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.cli import main
from orchenv.error import DataError
from orchenv.eval.harness import EvalConfig, evaluate
from orchenv.eval.leaderboard import build_leaderboard
from orchenv.verify import verify_bundle, write_bundle
from orchenv.verify.bundle import MANIFEST, MAX_FILE_BYTES, digest_files, file_digests
from orchenv.verify.checks import FAIL, VERIFIED_FILE
from orchenv.verify.keys import read_key, write_key

ENV = "orch/MathRoute-v0"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("hygiene")
    config = EvalConfig(ENV, controller="random", episodes=12, seeds=[0])
    evaluate(config, tmp / "run", progress=False)
    bundle = write_bundle(tmp / "run", tmp / "bundle")
    write_key(tmp / "board.key")
    write_key(tmp / "other.key")
    return {
        "run": tmp / "run",
        "bundle": bundle,
        "key": tmp / "board.key",
        "other": tmp / "other.key",
    }


def _copy(src: Path, tmp_path: Path, name: str = "b") -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _reseal(bundle: Path) -> None:
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"] = file_digests(bundle, sorted(manifest["files"]))
    manifest["bundle_sha256"] = digest_files(manifest["files"])
    (bundle / MANIFEST).write_text(json.dumps(manifest))


def _failed(report: Any, name: str) -> str:
    assert not report.verified
    check = report.check(name)
    assert check.verdict == FAIL, (name, check)
    return check.reason


def _within(seconds: float, fn: Any) -> Any:
    """fn() in a daemon thread; the test fails (instead of hanging) when it blocks."""
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"blocked for more than {seconds} s (a FIFO was opened?)"
    if "error" in out:
        raise out["error"]
    return out["value"]


# -- files ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["run.json", "summary.json", "episodes.jsonl", "calls.jsonl"])
def test_a_fifo_in_a_bundle_is_refused_without_hanging(made, tmp_path, name):
    bundle = _copy(made["bundle"], tmp_path)
    (bundle / name).unlink()
    os.mkfifo(bundle / name)
    report = _within(30, lambda: verify_bundle(bundle, oracle_episodes=0))
    assert "FIFO" in _failed(report, "files") and name in report.check("files").reason
    assert json.loads((bundle / VERIFIED_FILE).read_text())["verdict"] == "failed"


@pytest.mark.parametrize("name", ["run.json", "summary.json"])
def test_a_fifo_run_file_is_rejected_by_the_leaderboard_without_hanging(made, tmp_path, name):
    run = _copy(made["run"], tmp_path, "run")
    (run / name).unlink()
    os.mkfifo(run / name)
    other = _copy(made["run"], tmp_path, "ok")
    board = _within(30, lambda: build_leaderboard([run, other], tmp_path / "board", plots=False))
    assert [r.dir for r in board.rejected] == [str(run)]
    assert "FIFO" in board.rejected[0].reason


def test_an_oversize_episode_log_is_refused_before_it_is_read(made, tmp_path):
    bundle = _copy(made["bundle"], tmp_path)
    with open(bundle / "episodes.jsonl", "r+b") as fh:  # sparse: no disk, no memory
        fh.truncate(MAX_FILE_BYTES + 1)
    report = _within(30, lambda: verify_bundle(bundle, oracle_episodes=0))
    assert "over the" in _failed(report, "files")


def test_a_symlink_out_of_the_bundle_is_refused(made, tmp_path):
    bundle = _copy(made["bundle"], tmp_path)
    outside = tmp_path / "elsewhere.jsonl"
    shutil.move(bundle / "episodes.jsonl", outside)
    (bundle / "episodes.jsonl").symlink_to(outside)
    assert "symbolic link" in _failed(verify_bundle(bundle, oracle_episodes=0), "files")
    with pytest.raises(DataError, match="symbolic link"):
        from orchenv.eval.harness import read_episode_log

        read_episode_log(bundle / "episodes.jsonl")


# -- verdicts ---------------------------------------------------------------------------------------
def test_a_shipped_verdict_is_removed_and_a_failed_one_written_when_the_manifest_is_unreadable(
    made, tmp_path
):
    honest = _copy(made["bundle"], tmp_path, "honest")
    assert verify_bundle(honest, oracle_episodes=0, key=read_key(made["key"]), rerun=True).verified
    forged = _copy(honest, tmp_path, "forged")  # ships the honest bundle's signed verdict
    (forged / MANIFEST).write_text("{not json")
    assert main(["verify", str(forged)]) == 2
    data = json.loads((forged / VERIFIED_FILE).read_text())
    assert data["verdict"] == "failed" and "bundle.json" in data["checks"][0]["reason"]
    board = build_leaderboard([forged], tmp_path / "board", plots=False, key=read_key(made["key"]))
    (row,) = board.rows
    assert row.verification != "verified" and not row.verified


def test_only_verdicts_signed_with_the_boards_key_are_trusted(made, tmp_path):
    key, other = read_key(made["key"]), read_key(made["other"])
    signed = _copy(made["bundle"], tmp_path, "signed")
    assert verify_bundle(signed, oracle_episodes=0, key=key, rerun=True).verified
    unsigned = _copy(made["bundle"], tmp_path, "unsigned")
    assert verify_bundle(
        unsigned, oracle_episodes=0, rerun=True
    ).verified  # a valid sha256 seal, no HMAC
    foreign = _copy(made["bundle"], tmp_path, "foreign")
    assert verify_bundle(foreign, oracle_episodes=0, key=other, rerun=True).verified
    stale = _copy(signed, tmp_path, "stale")
    (stale / "summary.json").write_text((stale / "summary.json").read_text() + " ")
    board = build_leaderboard(
        [signed, unsigned, foreign, stale], tmp_path / "board", plots=False, key=key
    )
    status = {r.run: r.verification for r in board.rows}
    assert status == {
        "signed": "verified",
        "unsigned": "unsigned",
        "foreign": "unsigned",
        "stale": "stale",
    }
    ranked = [r.run for r in board.rows if r.rank is not None]
    assert ranked == ["signed"]
    reasons = {r.run: r.verification_reason for r in board.rows}
    assert "not signed with this board's key" in reasons["foreign"]
    # without the key nothing shipped is trusted; with --verify the board checks each itself
    assert not any(
        r.verified for r in build_leaderboard([signed], tmp_path / "b2", plots=False).rows
    )
    own = build_leaderboard(
        [unsigned, foreign], tmp_path / "b3", plots=False, verify=True, oracle_episodes=0
    )
    assert all(r.verified for r in own.rows)


def test_the_cli_signs_and_the_board_checks(made, tmp_path, capsys):
    bundle = _copy(made["bundle"], tmp_path)
    assert (
        main(
            ["verify", str(bundle), "--oracle-episodes", "0", "--rerun", "--key", str(made["key"])]
        )
        == 0
    )
    out = tmp_path / "board"
    assert (
        main(
            ["leaderboard", str(bundle), "--out", str(out), "--no-plots", "--key", str(made["key"])]
        )
        == 0
    )
    rows = json.loads((out / "leaderboard.json").read_text())
    assert rows[0]["verification"] == "verified" and rows[0]["rank"] == 1
    assert main(["board", "key", str(made["key"])]) == 2  # never overwritten


# -- pool and prices -------------------------------------------------------------------------------
def _edit_pool(bundle: Path, edit: Any) -> None:
    pool = json.loads((bundle / "pool.json").read_text())
    edit(pool["agents"])
    (bundle / "pool.json").write_text(json.dumps(pool))
    _reseal(bundle)


def test_a_pool_json_other_than_the_named_preset_is_refused(made, tmp_path):
    bundle = _copy(made["bundle"], tmp_path)

    def stronger(agents: list[dict[str, Any]]) -> None:
        agents[0]["calibration"]["accuracy"] = agents[-1]["calibration"]["accuracy"]

    _edit_pool(bundle, stronger)
    reason = _failed(verify_bundle(bundle, oracle_episodes=0), "pool")
    assert "differs from the preset" in reason and "Qwen2.5-1.5B-Instruct" in reason


def test_a_price_key_of_another_model_is_refused(made, tmp_path):
    bundle = _copy(made["bundle"], tmp_path)

    def cheaper(agents: list[dict[str, Any]]) -> None:
        agents[-1]["price"] = agents[0]["price"]

    _edit_pool(bundle, cheaper)
    reason = _failed(verify_bundle(bundle, oracle_episodes=0), "prices")
    assert "must name the agent's own model" in reason


# -- the oracle's budget ----------------------------------------------------------------------------
def test_the_oracle_check_says_not_checked_past_its_budget(made, tmp_path):
    bundle = _copy(made["bundle"], tmp_path)
    report = verify_bundle(bundle, oracle_episodes=12, oracle_seconds=0.0)
    oracle = report.check("oracle")
    assert oracle.verdict == "not checked" and "past its 0 s budget" in oracle.reason
    assert oracle.details["episodes"] == 0 and oracle.details["out_of_budget"]
    assert report.verified  # a budget is not a failure
    full = verify_bundle(_copy(made["bundle"], tmp_path, "full"), oracle_episodes=12)
    assert full.check("oracle").verdict == "pass"
