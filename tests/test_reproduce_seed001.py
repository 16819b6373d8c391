"""``orchenv reproduce 001 --quick``: seed 001's page (Table 2 per budget mode, the modes
compared, section 4.5) is written with intervals and checked claims, and a second call
resumes everything from disk. The budget-baseline controller and the prompt styles it
relies on are checked directly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from orchenv.cli import main
from orchenv.controllers import make_controller
from orchenv.error import ConfigError, UnknownNameError
from orchenv.runner import run_episode

SECTIONS = (
    "Table 2 in the low budget mode",
    "Table 2 in the medium budget mode",
    "Table 2 in the high budget mode",
    "Budget modes compared, and training dynamics",
    "Section 4.5: hard-constraint vs guidance prompts",
)
ROWS = ("controller alone", "GPT-4.1-nano", "GPT-4.1", "o3", "random assign")


def _stored(runs: Path) -> dict[str, float]:
    """Every stored result file (episode logs, cached experiments, models) -> its mtime
    (the page's own ``001.json`` is rewritten by every call)."""
    files = [*runs.glob("*/episodes.jsonl"), *runs.glob("ppo*.json"), *runs.glob("*.zip")]
    return {str(p): p.stat().st_mtime_ns for p in files}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("sb3_contrib")
    runs = tmp_path_factory.mktemp("r001")
    page = runs / "001.md"
    args = ["reproduce", "001", "--quick", "--runs", str(runs), "--report", str(page)]
    started = time.monotonic()
    assert main([*args, "--no-progress"]) == 0
    first_s = time.monotonic() - started
    stored = _stored(runs)
    started = time.monotonic()
    assert main([*args, "--no-progress"]) == 0
    second_s = time.monotonic() - started
    return {
        "runs": runs,
        "page": page,
        "data": json.loads(page.with_suffix(".json").read_text(encoding="utf-8")),
        "stored": stored,
        "first_s": first_s,
        "second_s": second_s,
    }


@pytest.mark.slow
def test_the_page_has_every_section_with_intervals_and_findings(quick: dict[str, Any]) -> None:
    text = quick["page"].read_text(encoding="utf-8")
    data = quick["data"]
    titles = [s["title"] for s in data["sections"]]
    for want in SECTIONS:
        assert any(t.startswith(want) for t in titles), (want, titles)
        assert f"## {want}" in text
    for section in data["sections"][:3]:  # Table 2, one per budget mode
        labels = [r["label"] for r in section["rows"]]
        assert labels[: len(ROWS)] == list(ROWS)
        assert labels[-1].startswith("trained controller")
        for row in section["rows"]:
            acc = row["ours"]["accuracy"]
            assert {"mean", "lo", "hi", "n"} <= set(acc) and acc["lo"] <= acc["mean"] <= acc["hi"]
            assert row["paper"]["accuracy"] > 0 and row["verdict"]
        baseline = section["rows"][0]["ours"]["accuracy"]
        assert baseline["n"] == 20 and baseline["hi"] > baseline["lo"]  # an interval
        assert section["findings"]
    modes = data["sections"][3]
    assert len(modes["findings"]) >= 5 and modes["figures"]
    for fig in modes["figures"]:
        assert (quick["page"].parent / fig).is_file()
    prompt = next(s for s in data["sections"] if s["title"].startswith(SECTIONS[-1]))
    assert "Not run" in text.split(f"## {SECTIONS[-1]}")[1]  # not in --quick, said plainly
    assert not prompt["rows"]


@pytest.mark.slow
def test_a_second_call_resumes_without_rerunning(quick: dict[str, Any]) -> None:
    assert quick["stored"] and _stored(quick["runs"]) == quick["stored"]
    assert any(k.endswith(".zip") for k in quick["stored"])  # the trained model is kept
    assert quick["second_s"] < quick["first_s"]


def test_budget_baselines_play_table_2s_plans() -> None:
    env = gym.make("orch/BudgetRoute-v0", split="test", budget_mode="high")
    try:
        alone = run_episode(env, make_controller("budget-baseline"), seed=1)
        assert alone.agent_calls == {} or sum(alone.agent_calls.values()) == 0
        o3 = run_episode(env, make_controller("budget-baseline", expert="o3"), seed=1)
        assert o3.agent_calls.get("o3") == 1 and sum(o3.agent_calls.values()) == 1
        assert o3.invalid_actions == 0 and o3.actions[-1].startswith("<answer>")
        picked = set()
        for seed in range(12):
            rec = run_episode(
                env, make_controller("budget-baseline", expert="random", seed=seed), seed=seed
            )
            picked |= {k for k, v in rec.agent_calls.items() if v}
        assert picked == {"GPT-4.1-nano", "GPT-4.1", "o3"}
        with pytest.raises(UnknownNameError):
            run_episode(env, make_controller("budget-baseline", expert="gpt-5"), seed=0)
    finally:
        env.close()
    other = gym.make("orch/MathRoute-v0")
    with pytest.raises(ConfigError, match="does not apply"):
        run_episode(other, make_controller("budget-baseline"), seed=0)


def test_prompt_styles_state_the_mode_as_a_rule_or_as_guidance() -> None:
    texts = {}
    for style in ("guidance", "hard"):
        env = gym.make("orch/BudgetRoute-v0", budget_mode="low", prompt_style=style)
        _, info = env.reset(seed=0)
        texts[style] = info["messages"][0]["content"]
    assert "do not call any expert" in texts["hard"].lower()
    assert "do not call any expert" not in texts["guidance"].lower()
    default = gym.make("orch/BudgetRoute-v0", budget_mode="low")
    _, info = default.reset(seed=0)
    assert info["messages"][0]["content"] == texts["guidance"]
    with pytest.raises(Exception, match="prompt style"):
        gym.make("orch/BudgetRoute-v0", prompt_style="polite").reset(seed=0)
