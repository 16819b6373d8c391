"""Issue 37 item 3: a board is a spec (`orchenv board init`): rows are grouped by the spec's
hash; a run with another seed plan, other env kwargs, another pool or an edited pool.json is
kept out of the group with the reason. Without a spec, a kwargs variant forms its own group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.cli import main
from orchenv.error import DataError
from orchenv.eval.board import make_spec, read_spec, write_spec
from orchenv.eval.harness import EvalConfig, evaluate
from orchenv.eval.leaderboard import build_leaderboard
from orchenv.verify import write_bundle
from orchenv.verify.bundle import MANIFEST, digest_files, file_digests

ENV = "orch/MathRoute-v0"
N = 12


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("spec")
    out: dict[str, Path] = {}
    for name, kwargs in (
        ("honest", {"seeds": [0]}),
        ("other-seeds", {"seeds": [1]}),
        ("variant", {"seeds": [0], "env_kwargs": {"require_stronger": False}}),
        ("other-pool", {"seeds": [0], "pool": "system2"}),
    ):
        config = EvalConfig(ENV, controller="random", split="train", episodes=N, **kwargs)
        evaluate(config, tmp / name, progress=False)
        out[name] = tmp / name
    bundle = write_bundle(out["honest"], tmp / "bundle")
    pool = json.loads((bundle / "pool.json").read_text())
    pool["agents"][0]["calibration"]["accuracy"] = 0.99
    (bundle / "pool.json").write_text(json.dumps(pool))
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"] = file_digests(bundle, sorted(manifest["files"]))
    manifest["bundle_sha256"] = digest_files(manifest["files"])
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    out["edited-pool"] = bundle
    out["spec"] = write_spec(
        tmp / "board.json", make_spec(ENV, pool="system1", split="train", dev_episodes=N)
    )
    return out


def test_runs_outside_the_spec_are_kept_out_with_the_reason(runs, tmp_path):
    spec = read_spec(runs["spec"])
    names = ("honest", "other-seeds", "variant", "other-pool", "edited-pool")
    board = build_leaderboard([runs[n] for n in names], tmp_path / "b", plots=False, spec=spec)
    (group,) = board.groups
    assert [r.run for r in group.rows] == ["honest"] and group.rows[0].rank == 1
    assert group.key[3] == f"board {spec['spec_sha256'][:12]}"
    reasons = {Path(r.dir).name: r.reason for r in board.rejected}
    assert "is not the board's dev plan" in reasons["other-seeds"]
    assert "env kwargs" in reasons["variant"] and "require_stronger" in reasons["variant"]
    assert "pool 'system2', not 'system1'" in reasons["other-pool"]
    assert "an edited pool.json" in reasons["bundle"]
    assert all(r.startswith(f"outside board {spec['spec_sha256'][:12]}") for r in reasons.values())


def test_without_a_spec_a_kwargs_variant_is_its_own_group(runs, tmp_path):
    board = build_leaderboard([runs["honest"], runs["variant"]], tmp_path / "b", plots=False)
    assert len(board.groups) == 2
    assert all(g.rows[0].rank == 1 for g in board.groups)  # neither outranks the other
    variant = next(g for g in board.groups if g.key[3])
    assert variant.key[3].startswith("env kwargs ") and "require_stronger" in variant.header


def test_an_edited_spec_is_refused_and_the_cli_writes_and_uses_one(runs, tmp_path, capsys):
    path = tmp_path / "board.json"
    assert main(["board", "init", ENV, "--pool", "system1", "--split", "train",
                 "--episodes", str(N), "--out", str(path)]) == 0  # fmt: skip
    out = tmp_path / "b"
    assert main(["leaderboard", str(runs["honest"]), str(runs["other-seeds"]), "--out",
                 str(out), "--no-plots", "--board", str(path)]) == 0  # fmt: skip
    rows = json.loads((out / "leaderboard.json").read_text())
    assert [r["run"] for r in rows] == ["honest"]
    spec = json.loads(path.read_text())
    spec["dev_plan"]["seeds"] = [1]
    path.write_text(json.dumps(spec))
    with pytest.raises(DataError, match="was edited"):
        read_spec(path)
    assert main(["board", "init", ENV, "--pool", "nope", "--split", "train", "--out",
                 str(tmp_path / "x.json")]) == 2  # fmt: skip


def test_the_spec_names_the_primary_metric_and_the_pool_hash():
    spec = make_spec("orch/OrchMAS-v0", pool="system1", split="test")
    assert spec["primary_metric"] == {"field": "score", "label": "F1 score"}
    assert len(spec["pool"]["sha256"]) == 64 and len(spec["spec_sha256"]) == 64
