"""Issue 37 item 5: re-execution. `orchenv verify --rerun` plays the declared, registered
controller (seeded as `orchenv eval` seeds it) and requires each submitted action; controllers
that call pool agents themselves (cascade, pool-agent) submit and verify; replay-only verdicts
are listed as "consistent", never ranked. Every registered controller's honest run submits and
verifies, on an id it applies to (those that need files or a model are named with the reason).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_verify_rerun_files import COVERED

import orchenv  # noqa: F401 - registers the envs
import orchenv.agents  # noqa: F401 - registers the shared controllers
from orchenv.controllers import CONTROLLERS, make_controller
from orchenv.eval.harness import EvalConfig, evaluate
from orchenv.eval.leaderboard import build_leaderboard
from orchenv.verify import verify_bundle, write_bundle
from orchenv.verify.keys import read_key, write_key

#: controller -> (env id, kwargs) of an honest run it applies to
HONEST: dict[str, tuple[str, dict[str, Any]]] = {
    "random": ("orch/MathRoute-v0", {}),
    "single": ("orch/MathRoute-v0", {"agent": 0}),
    "oracle": ("orch/MathRoute-v0", {}),
    "cascade": ("orch/MathRoute-v0", {}),
    "strategy": ("orch/MathRoute-v0", {"strategy": "always-reject"}),
    "pool-agent": ("orch/MathRoute-v0", {"agent": "Qwen2.5-7B-Instruct"}),
    "env-random": ("orch/MultihopQA-v0", {}),
    "budget-baseline": ("orch/BudgetRoute-v0", {"expert": "random"}),
    "scripted-single-executor": ("orch/OrchMAS-v0", {}),
    "scripted-decompose": ("orch/OrchMAS-v0", {}),
    "scripted-puppeteer": ("orch/Puppeteer-v0", {"script": ["mistral-7b", "qwen-2.5-14b"]}),
    "alfworld-adaptive": ("orch/ALFWorldRoles-v0", {}),
}
#: the controllers that need files or a model and re-execute honestly (knn, classifier, llm,
#: router-r1): tests/test_verify_rerun_files.py makes what they need (training labels from
#: the env's pool, a tiny local model) and submits and verifies their honest runs re-executed
FILES_MADE_THERE = COVERED
#: registered controllers whose honest run cannot be re-executed safely or yet, and why
NEEDS_FILES: dict[str, str] = {}


def test_every_registered_controller_is_covered_or_named():
    # the registry's names, less the "test-" controllers test modules register for themselves
    # (tests/test_board_sealed_tasks.py's cheaters)
    registered = {n for n in CONTROLLERS._entries if not n.startswith("test-")}  # noqa: SLF001
    covered = set(HONEST) | set(FILES_MADE_THERE) | set(NEEDS_FILES)
    assert registered == covered, registered ^ covered
    assert not (set(HONEST) | set(NEEDS_FILES)) & set(FILES_MADE_THERE)


@pytest.mark.parametrize("name", sorted(HONEST))
def test_an_honest_run_of_every_registered_controller_submits_and_re_executes(name, tmp_path):
    env_id, kwargs = HONEST[name]
    config = EvalConfig(env_id, controller=name, controller_kwargs=kwargs, episodes=3, seeds=[0])
    evaluate(config, tmp_path / "run", progress=False)
    bundle = write_bundle(tmp_path / "run", tmp_path / "bundle")
    report = verify_bundle(bundle, oracle_episodes=0, rerun=True)
    assert report.verified, [(c.name, c.reason) for c in report.failures()]
    assert report.execution == "re-executed" and report.check("execution").verdict == "pass"


def _forged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """single(agent=2)'s routes declared as `random`, bundled by a submit that only replays
    actions (as a forger's own tooling would)."""
    config = EvalConfig("orch/MathRoute-v0", controller="random", episodes=10, seeds=[0])
    evaluate(
        config,
        tmp_path / "run",
        progress=False,
        controller_factory=lambda s: make_controller("single", agent=2),
    )
    with pytest.raises(Exception, match="not what the declared controller does"):
        write_bundle(tmp_path / "run", tmp_path / "refused")  # orchenv submit re-executes
    import orchenv.verify.bundle as bundle_module

    monkeypatch.setattr(bundle_module, "rerunnable", lambda run: None)
    bundle = write_bundle(tmp_path / "run", tmp_path / "bundle")
    monkeypatch.undo()
    return bundle


def test_actions_other_than_the_declared_controllers_are_refused_on_rerun(tmp_path, monkeypatch):
    bundle = _forged(tmp_path, monkeypatch)
    replay_only = verify_bundle(bundle, oracle_episodes=0)
    assert replay_only.verified and replay_only.execution == "replay only"  # consistent ...
    report = verify_bundle(bundle, oracle_episodes=0, rerun=True)  # ... but not re-executed
    assert not report.verified
    reason = report.check("execution").reason
    assert "not what the declared controller does" in reason and "action 1" in reason


def test_replay_only_verdicts_are_listed_as_consistent_not_ranked(tmp_path):
    key = read_key(write_key(tmp_path / "board.key"))
    runs = []
    for name, kwargs in (("random", {}), ("single", {"agent": 0})):
        config = EvalConfig("orch/MathRoute-v0", controller=name, controller_kwargs=kwargs,
                            episodes=6, seeds=[0])  # fmt: skip
        evaluate(config, tmp_path / name, progress=False)
        runs.append(write_bundle(tmp_path / name, tmp_path / f"b-{name}"))
    assert verify_bundle(runs[0], oracle_episodes=0, key=key, rerun=True).verified
    assert verify_bundle(runs[1], oracle_episodes=0, key=key).verified  # replay only
    board = build_leaderboard(runs, tmp_path / "board", plots=False, key=key)
    status = {r.run: (r.verification, r.rank) for r in board.rows}
    assert status == {"b-random": ("verified", 1), "b-single": ("consistent", None)}
    assert (
        "not re-executed" in next(r for r in board.rows if r.run == "b-single").verification_reason
    )
