"""Issue 30: the leaderboard reads runs through the schema, marks verified rows (linked to their
reports), lists unverified / failed / stale ones apart, and rejects an unreadable run (a NaN or
Infinity in its summary) with the reason instead of crashing or copying it onto the board."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.error import DataError
from orchenv.eval.harness import EvalConfig, evaluate
from orchenv.eval.leaderboard import build_leaderboard
from orchenv.verify import verify_bundle, write_bundle
from orchenv.verify.checks import audit_gap
from orchenv.verify.keys import read_key, write_key

ENV = "orch/MathRoute-v0"


@pytest.fixture(scope="module")
def board_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("board")
    runs: dict[str, Path] = {"key": write_key(tmp / "board.key")}
    for name, controller, kwargs in (
        ("random", "random", {}),
        ("single", "single", {"agent": 0}),
        ("oracle", "oracle", {}),
    ):
        config = EvalConfig(ENV, controller=controller, controller_kwargs=kwargs, episodes=12)
        evaluate(config, tmp / f"run-{name}", progress=False)
        runs[name] = tmp / f"run-{name}"
    for name in ("random", "oracle"):
        bundle = write_bundle(runs[name], tmp / f"bundle-{name}")
        assert verify_bundle(
            bundle, oracle_episodes=0, key=read_key(runs["key"]), rerun=True
        ).verified
        runs[f"bundle-{name}"] = bundle
    return runs


def test_verified_rows_are_ranked_and_linked_unverified_ones_apart(board_runs, tmp_path):
    out = tmp_path / "board"
    runs = [board_runs["bundle-random"], board_runs["single"], board_runs["bundle-oracle"]]
    board = build_leaderboard(runs, out, plots=False, key=read_key(board_runs["key"]))
    (group,) = board.groups
    by_run = {r.run: r for r in group.rows}
    random_row = by_run["bundle-random"]
    assert random_row.verified and random_row.rank == 1
    link = os.path.relpath(board_runs["bundle-random"] / "verification.md", out.resolve())
    assert random_row.report == link and (out / link).is_file()
    single = by_run["run-single"]
    assert single.verification == "unverified" and single.rank is None  # listed apart
    assert group.section(single) == "unverified"
    assert group.section(by_run["bundle-oracle"]) == "privileged"  # verified, still apart
    md = (out / "leaderboard.md").read_text()
    assert "### Unverified runs (not ranked)" in md
    gap = audit_gap("orch/MathRoute-v0")["gameability_gap"]  # docs/audit_tables.md's row
    assert gap and f"Env gameability gap (`orchenv audit`): {gap}" in md
    assert f"[✓ verified]({link})" in md
    html = (out / "leaderboard.html").read_text()
    assert '<tbody class="unverified"><tr data-run="run-single">' in html
    assert f'<a href="{link}">✓ verified</a>' in html
    rows = json.loads((out / "leaderboard.json").read_text())
    assert {r["run"]: r["verification"] for r in rows}["bundle-random"] == "verified"


def test_a_run_edited_after_verification_is_stale(board_runs, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(board_runs["bundle-random"], bundle)
    summary = json.loads((bundle / "summary.json").read_text())
    summary["pooled"]["accuracy"] = 1.0  # a better number after the verifier signed off
    (bundle / "summary.json").write_text(json.dumps(summary))
    board = build_leaderboard(
        [bundle, board_runs["bundle-oracle"]],
        tmp_path / "o",
        plots=False,
        key=read_key(board_runs["key"]),
    )
    row = next(r for r in board.rows if r.run == "b")
    assert row.verification == "stale" and row.rank is None
    assert "changed after verification" in row.verification_reason


def test_a_board_without_any_verification_says_so(board_runs, tmp_path):
    board = build_leaderboard(
        [board_runs["random"], board_runs["single"]], tmp_path / "o", plots=False
    )
    assert [r.rank for r in board.rows] == [1, 2]
    assert "No run on this board is verified" in (tmp_path / "o" / "leaderboard.md").read_text()


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_summary_is_rejected_with_its_reason(board_runs, tmp_path, bad):
    run = tmp_path / "bad"
    shutil.copytree(board_runs["single"], run)
    text = (run / "summary.json").read_text()
    at = text.index('"mean_cost_usd":', text.index('"pooled"'))
    (run / "summary.json").write_text(
        text[:at] + f'"mean_cost_usd": {bad}' + text[text.index(",", at) :]
    )
    out = tmp_path / "board"
    board = build_leaderboard(
        [board_runs["random"], run], out, plots=False, key=read_key(board_runs["key"])
    )  # no crash
    assert [r.run for r in board.rows] == ["run-random"]
    (rejected,) = board.rejected
    assert "summary.json" in rejected.reason
    md = (out / "leaderboard.md").read_text()
    assert "## Rejected runs (not on the board)" in md and bad not in md.split("## Rejected")[0]
    json.loads((out / "leaderboard.json").read_text())  # strict JSON, no NaN in it
    with pytest.raises(DataError, match="no run could be read"):
        build_leaderboard(
            [run], tmp_path / "only-bad", plots=False, key=read_key(board_runs["key"])
        )


def test_a_failed_verification_is_listed_apart_with_the_failed_checks(board_runs, tmp_path):
    bundle = tmp_path / "tampered"
    shutil.copytree(board_runs["bundle-random"], bundle)
    (bundle / "pool.json").write_text((bundle / "pool.json").read_text() + "\n")
    key = read_key(board_runs["key"])
    assert not verify_bundle(bundle, oracle_episodes=0, key=key).verified  # rewrites it
    board = build_leaderboard(
        [bundle, board_runs["bundle-oracle"]],
        tmp_path / "o",
        plots=False,
        key=read_key(board_runs["key"]),
    )
    row = next(r for r in board.rows if r.run == "tampered")
    assert row.verification == "failed" and row.rank is None
    assert row.verification_reason == "failed: bundle"
    assert "- tampered: failed (failed: bundle)" in (tmp_path / "o" / "leaderboard.md").read_text()
