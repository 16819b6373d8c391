"""Shared by the ``tests/test_reproduce_seed00N.py`` modules (imported as ``reproduce_helpers``;
``tests`` is on the test path): run a seed's ``--quick`` page twice (the second call must
resume), replay a row's printed ``orchenv eval`` command, and hand a saved-policy controller
hostile arguments.

Each was written in two or more of those modules before (issue 27, duplicates D15).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from orchenv.cli import main
from orchenv.controllers import make_controller
from orchenv.error import ConfigError

#: an episode's identity (run seed, episode) -> what it played and got
Episodes = dict[tuple[int, int], tuple[Any, ...]]


def stored_results(runs: Path, patterns: Sequence[str]) -> dict[str, int]:
    """The files under ``runs`` that match one of ``patterns`` (globs relative to ``runs``),
    by relative path, and their mtimes; ``timing.json`` (rewritten by every call, by design)
    is never one of them."""
    files = {p for pattern in patterns for p in runs.glob(pattern) if p.name != "timing.json"}
    return {str(p.relative_to(runs)): p.stat().st_mtime_ns for p in sorted(files)}


def run_quick_twice(seed: str, root: Path, stored: Sequence[str]) -> dict[str, Any]:
    """``orchenv reproduce SEED --quick`` into ``root/runs`` with its page at ``root/SEED.md``,
    then the same call again. ``stored`` are globs naming the results the first call writes
    once (``stored_results``): a resuming second call leaves their mtimes as they were.

    Returns ``runs``, ``page``, the page's JSON twin (``data``), each call's wall time
    (``first_s``, ``second_s``) and the stored results ``before`` and ``after`` the second."""
    runs, page = root / "runs", root / f"{seed}.md"
    args = ["reproduce", seed, "--quick", "--runs", str(runs), "--report", str(page)]
    started = time.monotonic()
    assert main([*args, "--no-progress"]) == 0
    first_s = time.monotonic() - started
    before = stored_results(runs, stored)
    started = time.monotonic()
    assert main([*args, "--no-progress"]) == 0
    second_s = time.monotonic() - started
    return {
        "runs": runs,
        "page": page,
        "data": json.loads(page.with_suffix(".json").read_text(encoding="utf-8")),
        "first_s": first_s,
        "second_s": second_s,
        "before": before,
        "after": stored_results(runs, stored),
    }


def assert_sections(run: Mapping[str, Any], wanted: Sequence[str]) -> list[str]:
    """Each of ``wanted`` is part of a section title of ``run``'s page (its JSON) that heads a
    section of its markdown; the titles, in page order."""
    text = run["page"].read_text(encoding="utf-8")
    titles = [s["title"] for s in run["data"]["sections"]]
    for name in wanted:
        title = next((t for t in titles if name in t), None)
        assert title is not None, (name, titles)
        assert f"## {title}" in text, title
    return titles


def episodes_in(path: Path) -> Episodes:
    """An ``episodes.jsonl``'s episodes: (seed, episode) -> (task, actions, correct, reward)."""
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]
    return {
        (d["seed"], d["episode"]): (d["task_id"], d["actions"], d["correct"], d["reward"])
        for d in lines
    }


def replay_command(command: str, out: Path, episodes: int = 2) -> Episodes:
    """Run a row's printed ``orchenv eval`` command for ``episodes`` per seed into ``out``
    (everything else as printed); the episodes it played."""
    parts = shlex.split(command)
    assert parts[:2] == ["orchenv", "eval"], command
    parts[parts.index("--episodes") + 1] = str(episodes)
    parts[parts.index("--out") + 1] = str(out)
    assert main(parts[1:]) == 0
    return episodes_in(out / "episodes.jsonl")


def assert_policy_refused(
    controller: str,
    kwargs: Mapping[str, Any],
    tmp_path: Path,
    not_a_zip: Collection[str] = ("NOTAZIP",),
) -> None:
    """``make_controller(controller, **kwargs)`` raises ``ConfigError``; a value named in
    ``not_a_zip`` stands for a file that exists but is no saved policy, and ``seed`` is 0
    unless ``kwargs`` give one."""
    junk = tmp_path / "junk.zip"
    junk.write_text("not a policy", encoding="utf-8")
    given = {
        k: (str(junk) if isinstance(v, str) and v in not_a_zip else v) for k, v in kwargs.items()
    }
    given.setdefault("seed", 0)
    with pytest.raises(ConfigError):
        make_controller(controller, **given)
