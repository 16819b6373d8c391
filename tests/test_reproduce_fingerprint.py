"""Stored reproduction results are keyed on the simulator that made them: a changed simulator
recomputes cached results and moves old evaluations aside instead of resuming them."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

import orchenv.reproduce.context as context
from orchenv.registry import REPRODUCTIONS
from orchenv.reproduce import Reproduction, simulator_fingerprint


def _rep(tmp_path: Path, fingerprint: str) -> Reproduction:
    return Reproduction(
        "000",
        quick=True,
        runs_dir=tmp_path,
        figures_dir=tmp_path,
        figures_link=".",
        progress=False,
        fingerprint=fingerprint,
    )


def test_a_cached_result_from_another_simulator_is_recomputed_with_a_warning(tmp_path, caplog):
    calls: list[int] = []

    def compute() -> dict[str, int]:
        calls.append(1)
        return {"value": len(calls)}

    old = _rep(tmp_path, "a" * 64)
    assert old.cached("train seed 0", {"steps": 10}, compute) == {"value": 1}
    assert old.cached("train seed 0", {"steps": 10}, compute) == {"value": 1}
    new = _rep(tmp_path, "b" * 64)
    with caplog.at_level(logging.WARNING, logger="orchenv.reproduce.context"):
        assert new.cached("train seed 0", {"steps": 10}, compute) == {"value": 2}
    assert "another simulator" in caplog.text and "aaaaaaaaaaaa" in caplog.text
    stored = json.loads((tmp_path / "train_seed_0.json").read_text())
    assert stored["simulator"] == "b" * 64 and stored["result"] == {"value": 2}
    assert new.cached("train seed 0", {"steps": 10}, compute) == {"value": 2}
    assert len(calls) == 2


def test_a_result_stored_before_fingerprints_is_not_reused(tmp_path):
    # the payload an older orchenv wrote: keyed on the config alone
    import hashlib

    config = {"steps": 10}
    key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    payload = {"name": "t", "config": config, "config_key": key, "result": {"value": "old"}}
    (tmp_path / "t.json").write_text(json.dumps(payload))
    assert _rep(tmp_path, "c" * 64).cached("t", config, lambda: {"value": "new"}) == {
        "value": "new"
    }


def test_an_evaluation_from_another_simulator_is_moved_aside_and_rerun(
    tmp_path, monkeypatch, caplog
):
    played: list[Path] = []

    def fake_evaluate(config: Any, out_dir: Path, **_: Any) -> str:
        played.append(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        lines = out_dir / "episodes.jsonl"
        lines.write_text(lines.read_text() + "x\n" if lines.exists() else "x\n")
        return "result"

    monkeypatch.setattr(context, "evaluate", fake_evaluate)
    old = _rep(tmp_path, "a" * 64)
    assert old.evaluate("agent 1", object()) == "result"  # type: ignore[arg-type]
    assert old.evaluate("agent 1", object()) == "result"  # type: ignore[arg-type]
    # same simulator: resumed in place (the harness skips finished episodes)
    assert (tmp_path / "agent_1" / "episodes.jsonl").read_text() == "x\nx\n"
    new = _rep(tmp_path, "b" * 64)
    with caplog.at_level(logging.WARNING, logger="orchenv.reproduce.context"):
        new.evaluate("agent 1", object())  # type: ignore[arg-type]
    assert "another simulator" in caplog.text
    assert (tmp_path / "agent_1" / "episodes.jsonl").read_text() == "x\n"  # afresh
    stale = tmp_path / "agent_1.stale-aaaaaaaaaaaa"
    assert (stale / "episodes.jsonl").read_text() == "x\nx\n"  # kept, not resumed
    assert (tmp_path / "agent_1.simulator").read_text().strip() == "b" * 64
    # a directory left by a version that did not stamp it counts as another simulator
    (tmp_path / "agent_1.simulator").unlink()
    new.evaluate("agent 1", object())  # type: ignore[arg-type]
    assert (tmp_path / "agent_1.stale-unstamped" / "episodes.jsonl").exists()
    # a stale name already taken gets a suffix, nothing is overwritten
    (tmp_path / "agent_1.simulator").write_text("a" * 64)
    new.evaluate("agent 1", object())  # type: ignore[arg-type]
    assert (tmp_path / "agent_1.stale-aaaaaaaaaaaa.2" / "episodes.jsonl").exists()


def _package(root: Path, body: str, doc: str = "") -> Path:
    pkg = root / "fakeenv"
    pkg.mkdir(exist_ok=True)
    (pkg / "backend.py").write_text(f'"""{doc}"""\n\n\ndef luck(x):\n{body}\n')
    return pkg


def test_the_fingerprint_follows_the_code_not_its_docstrings_comments_or_page(tmp_path):
    # a private copy of orchenv's simulator sources: the shared checkout may change meanwhile
    core = tmp_path / "orchenv"
    (core / "backends").mkdir(parents=True)
    (core / "backends" / "simulated.py").write_text("RATE = 4\n")
    (core / "unrelated.py").write_text("X = 1\n")

    def fingerprint(package: Path | None) -> str:
        return simulator_fingerprint(package, orchenv_dir=core)

    pkg = _package(tmp_path, "    return x * 2")
    base = fingerprint(pkg)
    assert base == fingerprint(pkg) and len(base) == 64
    assert base != fingerprint(None)  # the env package counts
    (core / "unrelated.py").write_text("X = 2\n")
    assert fingerprint(pkg) == base  # not a simulator source
    (core / "backends" / "simulated.py").write_text("RATE = 3\n")
    assert fingerprint(pkg) != base  # the backend counts
    (core / "backends" / "simulated.py").write_text("RATE = 4  # chars per token\n")
    assert fingerprint(pkg) == base
    _package(tmp_path, "    # a comment\n    return (x * 2)", doc="reworded docstring")
    assert fingerprint(pkg) == base  # same code
    (pkg / "reproduce.py").write_text("TITLE = 'a page edit'\n")
    (pkg / "paper_numbers.json").write_text('{"accuracy": 0.5}')
    assert fingerprint(pkg) == base  # what only renders the page is left out
    _package(tmp_path, "    return x * 3")
    changed = fingerprint(pkg)
    assert changed != base  # a simulator change
    (pkg / "calibration.json").write_text('{"accuracy": 0.7}')
    assert fingerprint(pkg) != changed  # its data files count too
    (pkg / "broken.py").write_text("def (:\n")  # not Python: hashed as bytes, no crash
    assert len(fingerprint(pkg)) == 64


@pytest.mark.parametrize("seed", ["000", "001", "002"])
def test_each_seed_is_keyed_on_its_own_env_package(seed):
    build = REPRODUCTIONS.resolve(seed)
    module_file = sys.modules[build.__module__].__file__
    assert module_file is not None
    package = Path(module_file).parent
    assert simulator_fingerprint(package) != simulator_fingerprint(None)
