"""``orchenv audit`` on a toy env whose best response, skill reference and shortcuts are
known by hand (tests/toy_bits.py): the skill curve rises, shortcuts are flagged against the
skill reference at the realistic level (not against the privileged best response, an upper
bound), the best blind policy is picked on one half of the tasks and reported on the other,
every search finds the exact best response, strategies get their exact returns, costs and
calls, the searches step only forks (never the task's start state), tasks do not influence
each other, and the report survives JSON and the CLI. Then a small sample of every
registered id gives a well-formed report."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from toy_bits import ENV_ID, BitsEnv, register

import orchenv.audit as audit_module
from orchenv.audit import (
    DEFAULT_REALISTIC_SKILL,
    AuditReport,
    audit,
    play,
    play_skill,
    search_beam,
    search_exact,
    search_mcts,
    t95,
    tree_size,
)
from orchenv.cli import main
from orchenv.core import OrchestrationEnv
from orchenv.discrete import MaskedPolicyController, make_discrete_env
from orchenv.error import ConfigError, DependencyError
from orchenv.registry import ENV_SUMMARIES

register()
ALL_TASKS = 8
#: per task: 3 first guesses (stop is masked), 11 second moves (stop still masked after an
#: ask), 35 third moves (see toy_bits)
EXACT_STEPS = 49


def run(**kwargs: Any) -> AuditReport:
    return audit(ENV_ID, tasks=ALL_TASKS, progress=False, **kwargs)


def test_exact_best_response_and_strategy_returns():
    report = run()
    assert (report.method, report.exact, report.split) == ("exact", True, "test")
    assert report.searches == {"exact": ALL_TASKS}
    assert sorted(report.task_ids) == [f"bits-{i:03b}" for i in range(8)]
    assert report.search_steps == EXACT_STEPS * ALL_TASKS
    best = report.best
    assert best.name == "best-response" and best.returns == [3.0] * ALL_TASKS
    assert (best.accuracy, best.calls, best.invalid_actions, best.turns) == (1.0, 0.0, 0.0, 3.0)
    assert best.actions[0] == {"<bit>0</bit>": 0.5, "<bit>1</bit>": 0.5}
    assert best.metrics == {"asks": 0.0, "mistakes": 0.0}
    stop = report.row("stop-early")
    assert (stop.kind, stop.return_mean, stop.gap) == ("env", 1.0, 2.0)
    assert stop.gap_ref == 0.5  # skill@0.5 (1.5) minus 1.0
    assert stop.description == "Guess 0, then stop."
    assert stop.return_se == pytest.approx(np.std([1.5] * 4 + [0.5] * 4, ddof=1) / np.sqrt(8))
    assert report.row("always-choice-0").return_mean == 7 / 8  # leading zeros
    ask = report.row("always-choice-2")
    assert (ask.return_mean, ask.calls, ask.agent_calls) == (-0.75, 3.0, {"helper": 3.0})
    # a call: 4 prompt words at $1/M, 6 completion words at $2/M (tests/toy_bits.py)
    assert ask.tokens == 30.0 and ask.cost_usd == pytest.approx(3 * (4 * 1 + 6 * 2) / 1e6)
    # "always stop" cannot stop before a guess: it guesses the first choice, then stops
    assert report.row("always-choice-3").returns == stop.returns
    assert report.row("first-available").returns == report.row("always-choice-0").returns
    assert not report.flagged


@pytest.mark.parametrize("method", ["exact", "mcts", "beam"])
def test_every_search_finds_a_history_dependent_optimum(method: str):
    """With stop paying 2.5 the best response guesses two bits right, then stops (4.5):
    returns depend on the whole history, so forks mixed up would miss it."""
    report = run(method=method, env_kwargs={"stop_reward": 2.5})
    assert report.best.returns == [4.5] * ALL_TASKS
    assert report.best.actions[2] == {"<stop/>": 1.0}
    assert report.exact  # MCTS marks the small tree solved; beam never had to prune
    assert not any("scored above the search" in note for note in report.notes)


def test_auto_enumerates_when_the_real_tree_fits_else_falls_back_to_mcts():
    assert tree_size(4, 3) == 84  # the largest tree of 4 choices over 3 turns; masks make it 49
    report = run(budget=50)
    assert (report.method, report.searches) == ("exact", {"exact": ALL_TASKS})
    assert report.search_steps == EXACT_STEPS * ALL_TASKS
    report = run(budget=48)  # the capped enumeration stops at step 49, then MCTS searches
    assert (report.method, report.searches) == ("mcts", {"mcts": ALL_TASKS})
    assert report.best.returns == [3.0] * ALL_TASKS  # found, though not proven (not exact)
    assert report.search_steps > EXACT_STEPS * ALL_TASKS
    assert "MCTS" in report.to_markdown()


def test_a_budget_too_small_is_a_lower_bound_and_says_so():
    report = run(method="mcts", budget=2)
    assert not report.exact
    assert "lower bound" in report.to_markdown()
    for row in report.rows[1:]:  # the best response is at least every strategy, per task
        assert all(b >= r for b, r in zip(report.best.returns, row.returns, strict=True))


@pytest.mark.parametrize(("tolerance", "flagged"), [(0.51, True), (0.49, False)])
def test_flags_follow_the_tolerance(tolerance: float, flagged: bool):
    """The comparison level is the skill reference at the toy's realistic s = 0.5 (1.5)."""
    report = run(tolerance=tolerance)
    assert report.comparison_levels == ["skill@0.5"]
    assert report.reference is not None and report.reference.return_mean == 1.5
    names = {row.name for row in report.flagged}
    assert ("stop-early" in names) is flagged  # 1.0: gap 0.5
    assert ("always-choice-3" in names) is flagged  # the same episodes
    assert "always-choice-0" not in names  # 0.875: gap 0.625
    assert not names & {"best-response", "skill@0.75", "skill@1"}  # never flagged
    assert report.row("stop-early").gap_ref == pytest.approx(0.5)
    assert ("FLAG (skill@0.5)" in report.to_markdown()) is flagged


class _Watched(BitsEnv):
    """Records which env objects are stepped."""

    stepped: list[int] = []  # noqa: RUF012  (class-level on purpose: forks share it)

    def step(self, action: Any) -> Any:
        self.stepped.append(id(self))
        return super().step(action)


@pytest.mark.parametrize(
    "search",
    [
        lambda root: search_exact(root, 4),
        lambda root: search_mcts(root, 4, 500, np.random.default_rng(0)),
        lambda root: search_beam(root, 4, 500),
        lambda root: play(root, lambda env: "<ask/>"),
        lambda root: play_skill(root, 0.5, (0, 0)),
    ],
    ids=["exact", "mcts", "beam", "play", "skill"],
)
def test_searches_step_forks_only(search):
    root = _Watched()
    root.reset(seed=0, options={"task_index": 5})
    _Watched.stepped.clear()
    search(root)
    assert _Watched.stepped and id(root) not in _Watched.stepped
    assert (root.turn, root.bits, root.meter.total_calls) == (0, [], 0)


def test_tasks_do_not_influence_each_other():
    """Two seeds visit the eight tasks in different orders; per task, the results agree."""
    a, b = run(seed=0), run(seed=1)
    assert a.task_ids != b.task_ids and sorted(a.task_ids) == sorted(b.task_ids)
    for name in ("best-response", "stop-early", "always-choice-2", "skill@0", "skill@1"):
        by_task_a = dict(zip(a.task_ids, a.row(name).returns, strict=True))
        by_task_b = dict(zip(b.task_ids, b.row(name).returns, strict=True))
        assert by_task_a == by_task_b


def test_the_same_seed_gives_the_same_report():
    a, b = run(method="mcts", budget=20), run(method="mcts", budget=20)
    a.elapsed_s = b.elapsed_s = 0.0
    assert a == b


def test_json_round_trip():
    report = run(tolerance=2.01)
    again = AuditReport.from_json(report.to_json())
    assert again == report
    assert json.loads(report.to_json())["rows"][0]["name"] == "best-response"


def test_time_limit_and_task_count():
    report = audit(ENV_ID, tasks=4, progress=False, time_limit_s=1e-9)
    assert len(report.task_ids) == 1 and "stopped after 1 of 4 tasks" in report.notes[0]
    report = audit(ENV_ID, tasks=50, progress=False)
    assert len(report.task_ids) == ALL_TASKS and "has 8 tasks" in report.notes[0]


class _NoChoices(BitsEnv):
    action_choices = OrchestrationEnv.action_choices


def test_an_env_without_choices_still_gets_its_skill_reference_and_strategies():
    report = audit_of(_NoChoices, tasks=8)
    assert report.n_choices == 0 and report.best is None and report.best_response is False
    assert report.blind == {"method": "skipped", "note": "the env has no action_choices()"}
    assert {r.name for r in report.rows} == {f"skill@{s:g}" for s in (0, 0.25, 0.5, 0.75, 1)} | {
        "stop-early"
    }
    assert any("no discrete action set" in note for note in report.notes)
    assert "Best blind policy: skipped" in report.to_markdown()


def test_errors():
    with pytest.raises(ConfigError, match="method must be one of"):
        audit(ENV_ID, method="dfs")
    with pytest.raises(ConfigError, match="cannot make"):
        audit("toy/Nothing-v0")
    for levels in ([1.5], [-0.1], [float("nan")], ["0.5"], [True]):
        with pytest.raises(ConfigError, match="skill levels"):
            audit(ENV_ID, tasks=1, progress=False, skill_levels=levels)
    with pytest.raises(ConfigError, match="blind_budget"):
        audit(ENV_ID, blind_budget=0)
    with pytest.raises(ConfigError, match="tolerance"):
        audit(ENV_ID, tolerance=float("nan"))


def test_cli(tmp_path, capsys):
    out = tmp_path / "audit.json"
    args = ["audit", ENV_ID, "--tasks", "8", "--no-progress", "-e", "stop_reward=2.5"]
    assert main([*args, "--json", "--out", str(out)]) == 0
    printed = AuditReport.from_json(capsys.readouterr().out)
    assert printed == AuditReport.from_json(out.read_text())
    assert printed.env_kwargs == {"stop_reward": 2.5} and printed.best.return_mean == 4.5
    assert main([*args, "--no-best-response", "--skill-levels", "0.3", "--no-blind"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"### `{ENV_ID}`") and "not searched" in text
    assert "| best-response |" not in text and "| skill@0.3 | skill |" in text
    assert "| stop-early | env | 3.000" in text and "FLAG (skill@0.5)" in text
    assert "Best blind policy: skipped" in text
    assert main(["audit", "toy/Nothing-v0", "--no-progress"]) == 2
    assert main(["audit", ENV_ID, "--no-progress", "--skill-levels", "2"]) == 2


# -- the skill reference, the best blind policy, the gap -------------------------------------------
def audit_of(cls: type[OrchestrationEnv], **kwargs: Any) -> AuditReport:
    """Audit ``cls`` registered for the duration under a throwaway id."""
    env_id = f"toy/{cls.__name__.strip('_')}-v0"
    gym.register(id=env_id, entry_point=cls)
    try:
        return audit(env_id, progress=False, **kwargs)
    finally:
        gym.registry.pop(env_id)


def test_the_skill_curve_rises_and_is_exact_at_its_ends():
    report = run(best_response=False)
    assert report.skill_available and report.skill_rises is True and not report.skill_trend
    assert report.skill_levels == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert (report.realistic_skill, report.realistic_defaulted) == (0.5, False)
    assert report.realistic_skill_source == "toy: a learner that knows half the bits"
    curve = report.skill_curve
    assert [r.skill for r in curve] == report.skill_levels
    assert curve[-1].returns == [3.0] * ALL_TASKS and curve[-1].accuracy == 1.0
    # no skill: the fixed default (guess 0) every turn, i.e. always choice 0
    assert curve[0].returns == report.row("always-choice-0").returns
    means = [r.return_mean for r in curve]
    assert means == sorted(means) and means[0] < means[-1]
    assert "The curve rises" in report.to_markdown()


def test_a_shortcut_flagged_against_the_skill_reference_passes_against_the_upper_bound():
    """stop_reward = 1.5: "guess 0, then stop" returns 2.0 on average, above what a learner
    at the realistic skill reaches (1.5) but 1.5 below the privileged best response (3.5),
    so the old comparison passed it; always guessing 0 (0.875) is flagged by neither."""
    report = run(env_kwargs={"stop_reward": 1.5})
    assert report.best is not None and report.best.return_mean == 3.5
    stop = report.row("stop-early")
    assert stop.flagged and stop.flagged_by == ["skill@0.5"]
    assert stop.gap == pytest.approx(1.5) and stop.gap_ref == pytest.approx(-0.5)
    zero = report.row("always-choice-0")
    assert not zero.flagged and zero.gap_ref == pytest.approx(0.625)
    assert zero.gap == pytest.approx(2.625)
    gap = report.gameability_gap
    assert gap is not None and gap["reference"] == "skill@1" and gap["against"] == "stop-early"
    assert gap["mean"] == pytest.approx(1.0) and gap["ci95"][0] < 1.0 < gap["ci95"][1]
    diffs = np.subtract(report.row("skill@1").returns, stop.returns)
    assert gap["se"] == pytest.approx(np.std(diffs, ddof=1) / np.sqrt(ALL_TASKS))
    assert gap["ci95"][1] - 1.0 == pytest.approx(t95(ALL_TASKS) * gap["se"])


def test_the_best_blind_policy_finds_the_best_constant_sequence():
    """Asking pays +1: "always ask" (3.0) is the best blind policy on either half."""
    report = run(env_kwargs={"ask_reward": 1.0}, best_response=False)
    assert report.blind["method"] == "exhaustive" and report.blind["sequences"] == 64
    assert [f["sequence"] for f in report.blind["folds"]] == [[2, 2, 2], [2, 2, 2]]
    assert report.blind["folds"][0]["labels"] == ["2: <ask/>"] * 3
    blind = report.row("best-blind")
    assert blind.returns == [3.0] * ALL_TASKS and blind.flagged_by == ["skill@0.5"]


def test_the_best_blind_policy_is_reported_on_the_half_it_was_not_picked_on():
    """stop_reward = 2.5: the best blind sequences guess two bits, then stop; a task's
    reported return is that of the sequence picked on the other half (leading right guesses
    of the two bits, plus 2.5)."""
    report = run(env_kwargs={"stop_reward": 2.5}, best_response=False)
    folds = report.blind["folds"]
    assert [f["picked_on"] for f in folds] == ["even-numbered tasks", "odd-numbered tasks"]
    blind = report.row("best-blind")
    for number, (task_id, ret) in enumerate(zip(report.task_ids, blind.returns, strict=True)):
        seq = folds[1 - number % 2]["sequence"]
        assert seq[2] == 3 and folds[1 - number % 2]["labels"][2] == "3: <stop/>"
        bits = task_id.removeprefix("bits-")
        right = 0
        for guess, bit in zip(seq[:2], bits, strict=False):
            if str(guess) != bit:
                break
            right += 1
        assert ret == right + 2.5
    # in-sample, a fold's pick scores at least its out-of-sample report
    for fold, on in zip(folds, (0, 1), strict=True):
        out_of_sample = blind.returns[1 - on :: 2]
        assert fold["in_sample_return"] >= -1  # a mean of returns
        assert len(out_of_sample) == ALL_TASKS // 2


def test_coordinate_ascent_when_the_sequences_are_too_many(monkeypatch):
    monkeypatch.setattr(audit_module, "BLIND_EXHAUSTIVE_CAP", 10)
    report = run(env_kwargs={"ask_reward": 1.0}, best_response=False, skill_levels=())
    assert report.blind["method"] == "coordinate ascent"
    assert [f["sequence"] for f in report.blind["folds"]] == [[2, 2, 2], [2, 2, 2]]
    assert all(f["evaluated"] < 64 for f in report.blind["folds"])
    assert "**No skill reference** (not asked for" in report.to_markdown()
    report = run(env_kwargs={"ask_reward": 1.0}, skill_levels=(), blind_budget=2)
    assert all(f["evaluated"] == 2 for f in report.blind["folds"])  # constants 0 and 1 only
    assert report.blind["folds"][0]["sequence"] in ([0, 0, 0], [1, 1, 1])


class _Unskilled(BitsEnv):
    """No skill reference (the core's default), no realistic level."""

    realistic_skill = None
    skill_action = OrchestrationEnv.skill_action


class _SkillStopsAnswering(BitsEnv):
    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        return None if self.turn else "<bit>0</bit>"


@pytest.mark.parametrize("cls", [_Unskilled, _SkillStopsAnswering])
def test_an_env_without_a_skill_reference_is_reported_not_crashed(cls):
    report = audit_of(cls, tasks=8, env_kwargs={"stop_reward": 2.5})
    assert not report.skill_available and report.skill_rises is None
    assert not report.skill_levels and not any(r.kind == "skill" for r in report.rows)
    assert report.comparison_levels == [] and not report.flagged
    assert report.gameability_gap is None
    assert any(note.startswith("no skill reference") for note in report.notes)
    assert "returned None" in report.notes[-1]
    assert {"best-response", "best-blind", "stop-early"} <= {r.name for r in report.rows}
    text = report.to_markdown()
    assert "**No skill reference** (" in text and "returned None" in text
    assert "nothing can be flagged" in text
    assert AuditReport.from_json(report.to_json()) == report
    if cls is _Unskilled:
        assert report.realistic_defaulted and report.realistic_skill == DEFAULT_REALISTIC_SKILL


class _SkillHurts(BitsEnv):
    """A "skill" that guesses the wrong bit: the curve falls."""

    realistic_skill = None

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        assert self.task is not None
        if skilled and len(self.bits) < 3:
            return f"<bit>{1 - int(self.task.answer[len(self.bits)])}</bit>"
        return "<bit>0</bit>"


def test_a_curve_that_does_not_rise_is_reported():
    report = audit_of(_SkillHurts, tasks=8, best_response=False, skill_levels=(0.5,))
    assert report.skill_rises is False and report.realistic_defaulted
    assert [r.skill for r in report.skill_curve] == [0.0, 0.5, 0.75, 1.0]
    assert report.row("skill@1").returns == [0.0] * ALL_TASKS
    assert "skill@1 is not above skill@0" in report.skill_trend[0]
    assert any("does not rise from skill@0.5 to skill@0.75" in t for t in report.skill_trend)
    text = report.to_markdown()
    assert "DOES NOT RISE" in text and "defaulted to 0.75" in text


class _GuessZero:
    """A controller (``act(obs, info)``) that always guesses 0."""

    def __init__(self) -> None:
        self.bound: list[OrchestrationEnv] = []

    def bind(self, env: OrchestrationEnv) -> None:
        self.bound.append(env)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        assert "Guess the next bit" in obs
        return "<bit>0</bit>"


class _PredictsOne:
    """An sb3-like model that always predicts choice 1 (guess 1)."""

    def predict(self, obs: Any, deterministic: bool = True, action_masks: Any = None) -> Any:
        assert obs.ndim == 1 and list(action_masks) in ([1, 1, 1, 0], [1, 1, 1, 1])
        return np.int64(1), None


def test_trained_rows_are_comparison_levels():
    controller = _GuessZero()
    trained = {
        "trained-zero": controller,
        "trained-one": lambda env: "<bit>1</bit>",
        "masked-one": MaskedPolicyController(_PredictsOne()),
    }
    report = run(trained=trained, best_response=False)
    assert report.comparison_levels == ["skill@0.5", "trained-zero", "trained-one", "masked-one"]
    assert report.row("masked-one").returns == report.row("always-choice-1").returns
    assert len(controller.bound) == ALL_TASKS and len(set(map(id, controller.bound))) == 8
    zero, one = report.row("trained-zero"), report.row("trained-one")
    assert zero.kind == "trained" and not zero.flagged
    assert zero.returns == report.row("always-choice-0").returns
    assert one.returns == report.row("always-choice-1").returns
    stop = report.row("stop-early")  # 1.0: above both trained levels (0.875), below skill@0.5
    both = ["trained-zero", "trained-one", "masked-one"]
    assert stop.flagged_by == both and report.row("always-choice-0").flagged_by == both
    assert "FLAG (trained-zero, trained-one, masked-one)" in report.to_markdown()


def test_t_quantiles():
    assert t95(1) == 0.0 and t95(2) == 12.706 and t95(31) == 2.042
    assert t95(32) == pytest.approx(2.040, abs=1e-3) and t95(121) == pytest.approx(1.980, abs=1e-3)
    assert t95(10**6) == pytest.approx(1.960, abs=1e-3)


# -- every registered id, small samples ------------------------------------------------------------
#: fewer tasks (and turns) for the slow ones: OrchMAS plays its agents' discussion on every
#: step; the MultihopQA ids enumerate 8**3 blind sequences per task; Puppeteer has 67
#: choices, each an "always choice k" row; WebShop and ALFWorld play long episodes, and a
#: TextWorld step costs about 0.1 s (21 policies of 50 turns are minutes), so their horizon
#: is cut to a few turns (the report's form does not depend on it)
SMALL: dict[str, tuple[int, dict[str, Any]]] = {
    "orch/ALFWorld-v0": (1, {"max_turns": 4}),
    "orch/ALFWorldRoles-v0": (1, {"max_turns": 4}),
    "orch/OrchMAS-v0": (2, {}),
    "orch/Puppeteer-v0": (2, {}),
    "orch/WebShop-v0": (2, {"max_turns": 6}),
    "orch/MultihopQA-v0": (2, {}),
    "orch/MultihopQAFull-v0": (2, {}),
    "orch/MultihopQAStatic-v0": (2, {}),
}


@pytest.mark.parametrize("env_id", sorted(ENV_SUMMARIES))
def test_small_audit_of_every_env(env_id: str):
    tasks, kwargs = SMALL.get(env_id, (4, {}))
    try:
        report = audit(
            env_id,
            tasks=tasks,
            env_kwargs=kwargs,
            progress=False,
            best_response=False,
            skill_levels=(0.5,),
            blind_budget=4,
            time_limit_s=None,
        )
    except DependencyError as exc:
        pytest.skip(f"optional dependency missing: {exc}")
    assert len(report.task_ids) == tasks and report.n_choices >= 1
    assert report.best is None and report.method == "none"
    names = {r.name for r in report.rows}
    assert {"first-available", "random-available", "best-blind"} <= names
    assert report.blind["method"] in ("exhaustive", "coordinate ascent")
    for row in report.rows:
        assert len(row.returns) == tasks and np.isfinite(row.return_mean)
        assert row.actions and all(abs(sum(t.values()) - 1) < 1e-9 for t in row.actions[:1])
        assert row.flagged == bool(row.flagged_by)
        assert not row.flagged or row.kind in ("blind", "env", "generic")
    if report.skill_available:
        levels = [0.0, 0.5, report.realistic_skill, 1.0]
        assert report.skill_levels == sorted(set(levels))
        assert [r.skill for r in report.skill_curve] == report.skill_levels
        assert report.skill_rises is not None and report.gameability_gap is not None
        assert report.comparison_levels == [f"skill@{report.realistic_skill:g}"]
    else:
        assert "No skill reference" in report.to_markdown() and not report.flagged
    assert AuditReport.from_json(report.to_json()) == report
    assert report.to_markdown().startswith(f"### `{env_id}`")


# -- docs/adding-an-env.md's discrete example ------------------------------------------------------
def test_the_documented_discrete_example_audits_as_described():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "adding-an-env.md").read_text("utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    module = types.ModuleType("echo_doc")
    for marker in ("class EchoEnv(OrchestrationEnv)", "class EchoChoicesEnv(EchoEnv)"):
        (block,) = [b for b in blocks if marker in b]
        exec(block, module.__dict__)
    gym.register(id="doc/EchoChoices-v0", entry_point=module.EchoChoicesEnv)
    try:
        assert make_discrete_env("doc/EchoChoices-v0").action_space == gym.spaces.Discrete(9)
        report = audit("doc/EchoChoices-v0", tasks=8, progress=False)
    finally:
        gym.registry.pop("doc/EchoChoices-v0")
    assert report.exact and report.best.returns == [1.0] * 8
    assert report.row("always-think").return_mean == 0.0
    assert report.row("always-think").description == "Think every turn; never answer."
    for k in range(8):
        assert report.row(f"always-choice-{k}").return_mean == 1 / 8


# -- benchmarks/audit_all.py -----------------------------------------------------------------------
class _BrokenSkill(BitsEnv):
    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        raise RuntimeError("a bug in the env")


def test_audit_all_writes_the_summary_and_every_report(tmp_path, capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "audit_all.py"
    spec = importlib.util.spec_from_file_location("audit_all", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gym.register(id="toy/BrokenSkill-v0", entry_point=_BrokenSkill)
    out = tmp_path / "tables.md"
    try:
        args = ["--tasks", "8", "--no-best-response", "--markdown", str(out)]
        module.main([*args, "--ids", ENV_ID, "toy/BrokenSkill-v0", "--skill-levels", "0.5"])
    finally:
        gym.registry.pop("toy/BrokenSkill-v0")
    text = out.read_text("utf-8")
    assert "--no-best-response --skill-levels 0.5`" in text
    (line,) = [row for row in text.splitlines() if row.startswith(f"| `{ENV_ID}`")]
    assert "| 8 | 0.5 | yes | 1.500 ± " in line and "| not searched |" in line
    assert "stop-early 1.000 ± 0.447" in line and "| none |" in line
    assert (
        "| `toy/BrokenSkill-v0` | not audited: OrchEnvError: _BrokenSkill.skill_action failed"
        in text
    )
    assert f"## `{ENV_ID}`" in text and "**Gameability gap**" in text
    assert "not audited: toy/BrokenSkill-v0" in capsys.readouterr().out


def test_control_strategies_are_reported_never_flagged_nor_in_the_gap():
    """OrchMAS's scripted plan in natural wording is an honest control, not a shortcut."""
    report = audit(
        "orch/OrchMAS-v0", tasks=3, best_response=False, blind=False,
        skill_levels=(1.0,), progress=False,
    )  # fmt: skip
    controls = [row for row in report.rows if row.kind == "control"]
    assert controls and not any(row.flagged for row in controls)
    assert "legit-paraphrased-subquestions" in {row.name for row in controls}
