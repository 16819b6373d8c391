"""The audit's tell meter (orchenv.audit_tells): the AUC, the classifier, the within-author
measure, and the meter on a real env (a tell is found; an env without labels says so)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from orchenv.audit_tells import (
    Output,
    TellClassifier,
    TellMeter,
    auc_score,
    measure,
    tell_meter,
    within_auc,
)
from orchenv.error import ConfigError, OrchEnvError


def _pairs_auc(y: list[bool], s: list[float]) -> float:
    pos = [v for v, lab in zip(s, y, strict=True) if lab]
    neg = [v for v, lab in zip(s, y, strict=True) if not lab]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auc_matches_pair_counting_with_ties() -> None:
    rng = np.random.default_rng(0)
    y = [bool(v) for v in rng.integers(0, 2, 60)]
    s = [float(v) for v in rng.integers(0, 5, 60)]  # many ties
    assert auc_score(y, s) == pytest.approx(_pairs_auc(y, s))
    assert auc_score([True, False], [1.0, 0.0]) == 1.0
    assert auc_score([True, False], [0.0, 1.0]) == 0.0
    assert math.isnan(auc_score([True, True], [0.0, 1.0]))


def test_classifier_learns_a_signal_and_not_noise() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 3))
    y = x[:, 0] + 0.3 * rng.normal(size=400) > 0
    clf = TellClassifier().fit(x[:300], y[:300])
    assert auc_score(y[300:], clf.predict_proba(x[300:])) > 0.9
    noise = rng.integers(0, 2, 400).astype(bool)
    clf = TellClassifier().fit(x[:300], noise[:300])
    assert abs(auc_score(noise[300:], clf.predict_proba(x[300:])) - 0.5) < 0.15
    with pytest.raises(OrchEnvError, match="before fit"):
        TellClassifier().predict_proba(x)


def test_within_author_auc_ignores_who_wrote_it() -> None:
    # the strong author is right more often; the score only says who wrote the output
    y = np.array([True] * 8 + [False] * 2 + [True] * 2 + [False] * 8)
    groups = ["strong"] * 10 + ["weak"] * 10
    scores = np.array([1.0] * 10 + [0.0] * 10)
    assert auc_score(y, scores) > 0.75
    assert within_auc(y, scores, groups) == pytest.approx(0.5)


def _outputs(n: int, tell: bool, seed: int, first: int) -> list[Output]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        right = bool(rng.random() < 0.6)
        # a tell: wrong outputs report more completion tokens than their text has
        tokens = int(rng.integers(50, 80)) + (200 if tell and not right else 0)
        out.append(
            Output(
                agent="a" if i % 2 else "b",
                text="Step 1. x = 2\n\\boxed{2}",
                record={"completion_tokens": tokens, "prompt_tokens": 40},
                turn=0,
                position=0,
                consult=False,
                label=right,
                episode=first + i // 2,
            )
        )
    return out


@pytest.mark.parametrize("tell", [True, False])
def test_measure_flags_a_token_tell_and_only_a_tell(tell: bool) -> None:
    meter = TellMeter(env_id="synthetic", measurable=False)
    fitted = measure(meter, _outputs(300, tell, 0, 0), _outputs(200, tell, 1, 1000), bootstrap=200)
    assert fitted is not None and meter.measurable
    assert meter.auc_within is not None and len(meter.auc_within_ci) == 2
    assert meter.auc_within_ci[0] <= meter.auc_within <= meter.auc_within_ci[1]
    assert meter.flagged is tell
    if tell:
        assert meter.auc_within > 0.95
        assert "log_completion_tokens" in meter.top_features
    else:
        assert meter.auc_within < 0.6 and meter.auc_within_ci[0] < 0.5


def test_tell_meter_on_mathroute_measures_every_output() -> None:
    meter, fitted = tell_meter("orch/MathRoute-v0", episodes=40, test_episodes=30, bootstrap=100)
    assert meter.measurable and fitted is not None
    assert meter.label_key == "correct"
    assert meter.train_episodes == 40 and meter.test_episodes == 30
    assert meter.train_split == "train" and meter.test_split == "test"
    assert meter.test_outputs > 30  # at least one output per episode
    assert meter.text_visible == 1.0  # MathRoute shows the draft to the controller
    for value in (meter.auc, meter.auc_context, meter.auc_within):
        assert value is not None and 0.0 <= value <= 1.0
    assert set(meter.agents) >= {"Qwen2.5-7B-Instruct"}
    assert "AUC" in meter.line()


def test_tell_meter_without_labels_is_not_measurable() -> None:
    # WebShop's controller acts alone: no agent output, nothing to measure (never guessed)
    meter, fitted = tell_meter("orch/WebShop-v0", episodes=2, test_episodes=2, bootstrap=0)
    assert not meter.measurable and fitted is None
    assert "privileged label" in meter.reason
    assert meter.line().startswith("not measurable")
    # it stops after NO_LABEL_EPISODES episodes without one labelled output, not after all
    from orchenv.audit_tells import NO_LABEL_EPISODES

    meter, _ = tell_meter("orch/WebShop-v0", episodes=40, test_episodes=30, bootstrap=0)
    assert (meter.train_episodes, meter.test_episodes) == (NO_LABEL_EPISODES, NO_LABEL_EPISODES)
    assert not meter.measurable and any("without one labelled" in n for n in meter.notes)


def test_tell_meter_refuses_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="episodes"):
        tell_meter("orch/MathRoute-v0", episodes=1)
    with pytest.raises(ConfigError, match="threshold"):
        tell_meter("orch/MathRoute-v0", threshold=1.5)


# -- in the audit: the surface verifier and the observer's reference ------------------------------
def test_verify_choices_finds_accept_and_reject() -> None:
    from orchenv.audit_tells import has_verify_decision, verify_choices

    choices = [
        None,
        "<checking></checking>\n<verdict>False</verdict>\n<model>b</model>",
        "<checking></checking>\n<verdict>True</verdict>",
    ]
    assert verify_choices(choices) == (2, 1)
    assert has_verify_decision(choices)
    assert not has_verify_decision(["<model>a</model>", "<model>b</model>", None])
    assert verify_choices(["Accept the plan", "Reject it"]) == (0, 1)


def test_audit_with_tells_adds_the_surface_verifier_on_a_verify_env() -> None:
    from orchenv.audit import AuditReport, audit

    report = audit(
        "orch/MathRoute-v0",
        tasks=8,
        best_response=False,
        blind=False,
        progress=False,
        tells=True,
        tell_episodes=30,
    )
    assert report.tells is not None and report.tells["measurable"]
    row = report.row("surface-verifier")
    assert row.kind == "generic" and len(row.returns) == 8
    assert "threshold" in row.description
    assert row.gap_ref is not None  # compared with skill@realistic like every shortcut
    text = report.to_markdown()
    assert "**Tell meter**" in text and "AUC within authors" in text
    again = AuditReport.from_json(report.to_json())
    assert again.tells == report.tells
    # no tells asked: no meter, no verifier row
    plain = audit("orch/MathRoute-v0", tasks=2, best_response=False, blind=False, progress=False)
    assert plain.tells is None and "surface-verifier" not in [r.name for r in plain.rows]


def test_audit_without_a_verify_decision_has_no_surface_verifier() -> None:
    from orchenv.audit import audit

    report = audit(
        "orch/BudgetRoute-v0",
        tasks=4,
        best_response=False,
        blind=False,
        progress=False,
        tells=True,
        tell_episodes=20,
    )
    assert report.tells is not None and report.tells["verify_decisions"] == 0
    assert "surface-verifier" not in [r.name for r in report.rows]


def test_observer_reference_tiny_budget() -> None:
    pytest.importorskip("sb3_contrib")
    from orchenv.audit import audit

    report = audit(
        "orch/MathRoute-v0",
        tasks=6,
        best_response=False,
        progress=False,
        observer_steps=256,
    )
    row = report.row("observer-ppo")
    assert row.kind == "observer" and not row.flagged
    assert "observer-ppo" not in report.comparison_levels  # reported, never a level
    assert report.observer is not None
    assert report.observer["steps"] == 256 and report.observer["split"] == "train"
    assert report.observer["baseline"] == "best-blind"
    assert report.observer["reference"] == "skill@0.7"
    assert isinstance(report.observer["verdict"], str) and report.observer["verdict"]
    assert "**Observer's reference**" in report.to_markdown()


def test_observer_steps_must_not_be_negative() -> None:
    from orchenv.audit import audit

    with pytest.raises(ConfigError, match="observer_steps"):
        audit("orch/MathRoute-v0", tasks=1, observer_steps=-1, progress=False)


def test_audit_all_reports_the_tell_meter_and_the_observer(tmp_path) -> None:
    import importlib.util
    import json
    from pathlib import Path

    pytest.importorskip("sb3_contrib")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "audit_all.py"
    spec = importlib.util.spec_from_file_location("audit_all_tells", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "tables.md"
    module.main(
        [
            *("--tasks", "4", "--no-best-response", "--tells", "--tell-episodes", "20"),
            *("--observer-steps", "256", "--markdown", str(out), "--ids", "orch/MathRoute-v0"),
        ]
    )
    text = out.read_text("utf-8")
    assert "--tells --tell-episodes 20 --observer-steps 256`" in text
    assert "tell AUC within authors" in text
    (line,) = [row for row in text.splitlines() if row.startswith("| `orch/MathRoute-v0`")]
    assert "not run" not in line and "256 steps)" in line
    assert "**Tell meter**" in text and "**Observer's reference**" in text
    # runs split across processes (--out) are merged by --combine, in --ids order
    first, second = tmp_path / "a", tmp_path / "b"
    module.main(["--tasks", "2", "--no-best-response", "--out", str(first), "--ids",
                 "orch/MathRoute-v0"])  # fmt: skip
    module.main(["--tasks", "2", "--no-best-response", "--out", str(second), "--ids",
                 "orch/MathRouteSystem2-v0"])  # fmt: skip
    merged = tmp_path / "merged.md"
    module.main(
        ["--tasks", "2", "--no-best-response", "--markdown", str(merged), "--combine",
         str(first), str(second), "--ids", "orch/MathRouteSystem2-v0", "orch/MathRoute-v0",
         "orch/Nothing-v0", "--note", "A note."]
    )  # fmt: skip
    text = merged.read_text("utf-8")
    assert "merged by `--combine`" in text and "never the comparison). A note." in text
    rows = [row for row in text.splitlines() if row.startswith("| `orch/")]
    assert [row.split("`")[1] for row in rows] == [
        "orch/MathRouteSystem2-v0",
        "orch/MathRoute-v0",
        "orch/Nothing-v0",
    ]
    assert "not audited: no report in" in rows[2]
    assert "## `orch/MathRoute-v0`" in text and "## `orch/MathRouteSystem2-v0`" in text
    # --tells-only re-measures the meter into reports already written (no tells before)
    report = second / "orch_MathRouteSystem2-v0.json"
    assert json.loads(report.read_text("utf-8"))["tells"] is None
    assert module.main(["--tells-only", "--tell-episodes", "8", "--out", str(second),
                        "--ids", "orch/MathRouteSystem2-v0"]) == 0  # fmt: skip
    tells = json.loads(report.read_text("utf-8"))["tells"]
    assert tells["train_episodes"] == 8 and "auc_within_task" in tells
    assert "--tells-only" in report.with_suffix(".md").read_text("utf-8")
    assert module.main(["--tells-only", "--out", str(tmp_path / "none"), "--ids",
                        "orch/MathRoute-v0"]) == 1  # fmt: skip


def test_classifier_matches_scikit_learn() -> None:
    sklearn = pytest.importorskip("sklearn")
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    assert sklearn.__version__
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 4)) * [1.0, 10.0, 0.1, 3.0] + [0.0, 5.0, 0.0, -2.0]
    y = x[:, 0] - 0.1 * x[:, 1] + rng.normal(size=300) > -0.5
    ours = TellClassifier(l2=1.0).fit(x, y)
    scaler = StandardScaler().fit(x)
    theirs = LogisticRegression(C=1.0, tol=1e-10, max_iter=10_000).fit(scaler.transform(x), y)
    assert ours.weights is not None
    np.testing.assert_allclose(ours.weights[1:], theirs.coef_[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        ours.predict_proba(x), theirs.predict_proba(scaler.transform(x))[:, 1], atol=1e-5
    )


def test_a_real_draft_figure_raises_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    import gymnasium as gym

    from orchenv.discrete import orch_base

    cls = type(orch_base(gym.make("orch/MathRoute-v0")))
    monkeypatch.setattr(cls, "real_draft_auc", 0.99, raising=False)
    monkeypatch.setattr(cls, "real_draft_auc_source", "a test", raising=False)
    meter, _ = tell_meter("orch/MathRoute-v0", episodes=60, test_episodes=40, bootstrap=0)
    assert meter.threshold == 0.99 and meter.auc_within is not None
    assert meter.flagged is (
        meter.auc_within > 0.99 and meter.auc_within - (meter.auc_within_task or 0.5) > 0.05
    )
    assert any("real-draft AUC 0.99 (a test)" in note for note in meter.notes)
    monkeypatch.setattr(cls, "real_draft_auc", 0.3)  # below 0.65: the default stays
    meter, _ = tell_meter("orch/MathRoute-v0", episodes=20, test_episodes=10, bootstrap=0)
    assert meter.threshold == 0.65


def _row(name: str, kind: str, returns: list[float], skill: float | None = None):
    from orchenv.audit import Episode
    from orchenv.audit import _row as make_row

    return make_row(name, kind, "", [Episode(ret=r) for r in returns], skill=skill)


@pytest.mark.parametrize(
    ("observer", "verdict"),
    [
        ([1.0, 1.0, 0.9, 1.0, 1.0, 0.9], "learnable"),
        ([0.8, 0.7, 0.8, 0.7, 0.8, 0.7], "partly learned"),
        ([0.5, 0.5, 0.4, 0.5, 0.5, 0.4], "not learned at this budget"),
    ],
)
def test_observer_verdicts(observer: list[float], verdict: str) -> None:
    from orchenv.audit import _observer_summary

    rows = [
        _row("skill@0.7", "skill", [1.0, 1.0, 0.9, 1.0, 1.0, 0.95], skill=0.7),
        _row("observer-ppo", "observer", observer),
        _row("best-blind", "blind", [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),
    ]
    out = _observer_summary(rows, {"steps": 8}, 0.7, 0.05)
    assert out["verdict"].startswith(verdict), out["verdict"]
    assert out["learnable"] is (verdict == "learnable")
    # blind play as good as the observer: nothing learned beyond a fixed plan
    rows[2] = _row("best-blind", "blind", [1.0, 1.0, 0.9, 1.0, 1.0, 0.9])
    out = _observer_summary(rows, {"steps": 8}, 0.7, 0.05)
    assert not out["learnable"]


def test_features_survive_hostile_text() -> None:
    import time

    from orchenv.audit_tells import output_features, record_features, text_features

    started = time.monotonic()
    for text in ("x" * 10_000_000, "\ud800 lone surrogate \\boxed{\udfff}", "9" * 5000, ""):
        values = text_features(text)
        assert all(math.isfinite(v) for v in values)
    assert time.monotonic() - started < 20
    record = {"completion_tokens": float("inf"), "prompt_tokens": -3, "latency_s": "x"}
    assert all(math.isfinite(v) for v in record_features(record, 0))
    out = Output("a", "\\boxed{" + "9" * 400 + "}", record, 0, 0, False, True, 0)
    full, context, task = output_features(out, ["a"])
    assert np.isfinite(full).all() and np.isfinite(context).all() and np.isfinite(task).all()


def test_cli_audit_runs_the_tell_meter(capsys: pytest.CaptureFixture[str]) -> None:
    """`orchenv audit --tells --tell-episodes N` reaches audit(tells=True): the JSON report
    carries the tell meter's section (measured or saying why not), and without the flag none."""
    import json

    from orchenv.cli import main

    base = ["audit", "orch/MathRoute-v0", "--tasks", "4", "--no-best-response", "--no-blind"]
    base += ["--no-progress", "--json"]
    assert main([*base, "--tells", "--tell-episodes", "8"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tells"]["env_id"] == "orch/MathRoute-v0"
    assert report["tells"]["train_episodes"] == 8
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["tells"] is None


def test_a_tell_is_what_the_output_says_beyond_the_task() -> None:
    """Outputs whose length follows the task's own length (harder-looking tasks, longer and
    more often wrong drafts, as with real models) are not flagged: the task alone ranks them as
    well. Outputs whose length follows their correctness regardless of the task are."""
    from orchenv.audit_tells import TellMeter, measure

    rng = np.random.default_rng(0)

    def outputs(tell: bool, n: int, first: int) -> list[Output]:
        made = []
        for k in range(n):
            hard = bool(rng.random() < 0.5)
            right = bool(rng.random() < (0.35 if hard else 0.85))
            task = "Solve: " + ("x + " * (40 if hard else 5)) + "1"
            words = (30 if right else 60) if tell else (60 if hard else 30)
            text = " ".join(["step"] * int(words * rng.uniform(0.8, 1.2))) + " \\boxed{3}"
            made.append(Output("a", text, {}, 0, 0, False, right, first + k, True, task))
        return made

    for tell in (False, True):
        meter = TellMeter(env_id="test", measurable=False)
        measure(meter, outputs(tell, 600, 0), outputs(tell, 400, 10_000), bootstrap=50)
        assert meter.auc_within is not None and meter.auc_within > 0.65, meter.line()
        assert meter.auc_within_task is not None
        if tell:
            assert meter.flagged and meter.auc_within_task < 0.9, meter.line()
        else:
            assert not meter.flagged, meter.line()
            assert meter.auc_within - meter.auc_within_task < 0.05
            assert any("task's own surface" in note for note in meter.notes)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("so \\boxed{\\frac{1}{2}}", ["\\frac{1}{2}"]),  # nested braces (the old regex missed it)
        ("\\boxed{1} then \\boxed{x^{2}}", ["1", "x^{2}"]),
        ("\\boxed{\\boxed{3}}", ["\\boxed{3}"]),  # an inner one belongs to the outer
        ("\\boxed{a{b}c}d} \\boxed{7}", ["a{b}c", "7"]),  # a stray closing brace is ignored
        ("}} \\boxed{} {", [""]),
        ("\\boxed{1", []),  # unclosed
        ("\\boxed{ \\boxed{2}", []),  # inside an unclosed one
        ("no box {1}", []),
        ("\ud800\\boxed{\udfff}", ["\udfff"]),
    ],
)
def test_boxed_contents_match_braces(text: str, want: list[str]) -> None:
    from orchenv.audit_tells import boxed_contents

    assert boxed_contents(text) == want


def test_a_nested_boxed_answer_is_read_whole() -> None:
    from orchenv.audit_tells import TEXT_FEATURES, text_features

    values = dict(zip(TEXT_FEATURES, text_features("So \\boxed{\\frac{1}{2}}"), strict=True))
    assert values["boxed"] == 1.0  # before: 0 (the regex took no nested brace)
    assert values["answer_chars"] == len("\\frac{1}{2}")  # before: 1, the last number "2"
    assert values["answer_integer"] == 0.0  # before: 1, a fraction read as the integer 2


def test_boxed_scan_is_linear_on_hostile_text() -> None:
    """10 MB of unclosed openers, lone braces and deep nesting: a rescan from each opener
    (quadratic) would not finish; the one-pass scan takes seconds (a generous hang guard)."""
    import time

    from orchenv.audit_tells import MAX_BOXED_NESTING, boxed_contents

    started = time.monotonic()
    assert boxed_contents("\\boxed{" * 1_400_000) == []  # 9.8 MB, nothing closes
    assert boxed_contents("\\boxed{" + "{" * 10_000_000) == []
    assert boxed_contents("}" * 10_000_000 + "{" * 10) == []
    assert boxed_contents("\\boxed{" + "{}" * 500_000) == []
    deep = "\\boxed{" * 100_000 + "1" + "}" * 100_000
    assert boxed_contents(deep) == ["\\boxed{" * 99_999 + "1" + "}" * 99_999]
    assert boxed_contents("\\boxed{7}" * 100_000) == ["7"] * 100_000
    assert MAX_BOXED_NESTING < 100_000  # the deep case above kept bounded memory
    assert time.monotonic() - started < 60
