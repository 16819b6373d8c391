"""``orchenv view RUN_DIR`` (issue 40): a static HTML viewer of a run's episodes.

The data tests replay a MathRoute run's logged actions and check the turns against the log;
the hostile-text tests check what goes into the page; the browser test opens the page in
headless Chromium (Selenium, as tests/test_leaderboard_browser.py) and asserts on the
rendered DOM: a MathRoute episode's turns with their observation, action and agent reply,
the filters and the paired comparison; it saves screenshots next to the page.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from test_leaderboard_browser import browser  # noqa: F401  (the Chromium fixture)

from orchenv.cli import main
from orchenv.eval import EvalConfig, evaluate
from orchenv.view import MAX_TEXT_CHARS, _episode, build_view, render_html, safe_text

ENV_ID = "orch/MathRoute-v0"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("view-runs")
    out = []
    for controller in ("random", "cascade"):
        evaluate(
            EvalConfig(ENV_ID, controller=controller, episodes=6, seeds=[0]),
            root / controller,
            progress=False,
        )
        out.append(root / controller)
    return out[0], out[1]


def page_data(path: Path) -> list[dict]:
    text = path.read_text("utf-8")
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_the_replayed_turns_match_the_log(runs):
    view = build_view(runs[0], progress=False)
    assert view["env_id"] == ENV_ID and view["turns_note"] == ""
    assert len(view["episodes"]) == 6
    for ep in view["episodes"]:
        assert ep["note"] == ""  # same task, same return as logged
        assert [t["action"] for t in ep["turn_log"]] == ep["actions"]
        assert sum(t["reward"] for t in ep["turn_log"]) == pytest.approx(ep["reward"])
        first = ep["turn_log"][0]
        assert "math solvers" in first["observation"]
        assert ep["turn_log"][0]["replies"], "the routed agent's draft is shown"


def test_the_cli_writes_run_dir_view_html_and_compares(runs, capsys):
    assert main(["view", str(runs[0]), "--compare", str(runs[1]), "--no-progress"]) == 0
    assert f"wrote {runs[0] / 'view.html'}" in capsys.readouterr().out
    data = page_data(runs[0] / "view.html")
    assert [d["controller"] for d in data] == ["random", "cascade"]
    keys = [[(e["seed"], e["episode"], e["task"]) for e in d["episodes"]] for d in data]
    assert keys[0] == keys[1]  # paired by seed: the same tasks


def test_no_replay_keeps_the_logged_actions(runs, tmp_path):
    assert main(["view", str(runs[1]), "--no-replay", "--out", str(tmp_path / "v.html")]) == 0
    (run,) = page_data(tmp_path / "v.html")
    assert run["turns_note"] and all(not e["turn_log"] and e["actions"] for e in run["episodes"])


def test_not_a_run_dir_is_a_clear_error(tmp_path, capsys):
    assert main(["view", str(tmp_path)]) == 2
    assert "not an `orchenv eval` run directory" in capsys.readouterr().err


HOSTILE = "</script><script>window.__pwned = 1</script><!-- \ud800 & <b>bold</b>"


def test_hostile_text_is_escaped_and_cut():
    row = {
        "seed": 0,
        "episode": 0,
        "task_id": HOSTILE,
        "reward": float("nan"),
        "correct": True,
        "actions": [HOSTILE, "x" * 10_000_000],
        "agent_calls": {HOSTILE: 1},
        "final_answer": HOSTILE,
    }
    ep = _episode(row)
    assert ep["reward"] is None  # NaN is not a number the page can show
    assert (
        len(ep["actions"][1]) < MAX_TEXT_CHARS + 100 and "more characters cut" in ep["actions"][1]
    )
    assert "\ud800" not in safe_text(HOSTILE)
    run = {"run_dir": HOSTILE, "env_id": HOSTILE, "controller": HOSTILE, "pool": "", "split": ""}
    html = render_html([{**run, "episodes": [ep], "episodes_total": 1, "turns_note": ""}], HOSTILE)
    assert "</script><script>window.__pwned" not in html
    assert "<b>bold</b>" not in html and "<!-- " not in html.split("<script", 1)[1]
    assert len(html) < 200_000
    html.encode("utf-8")  # no lone surrogate left


def _open(driver, path: Path) -> None:
    driver.get(path.resolve().as_uri())


def test_the_page_in_chromium(runs, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    main(["view", str(runs[0]), "--no-progress"])
    page = runs[0] / "view.html"
    _open(browser, page)
    rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr.ep")
    assert len(rows) == 6
    turns = browser.find_elements(By.CSS_SELECTOR, "#detail .turn")
    assert len(turns) >= 2  # the first episode is shown: route, then verify
    first = turns[0]
    assert "math solvers" in first.find_element(By.CSS_SELECTOR, "pre.obs").text
    assert "<model>" in first.find_element(By.CSS_SELECTOR, "pre.act").text
    assert "\\boxed" in first.find_element(By.CSS_SELECTOR, "pre.reply").text
    assert "reward" in first.find_element(By.TAG_NAME, "h4").text
    shot = Path(os.environ.get("ORCHENV_SCREENSHOTS", tmp_path)) / "view_mathroute.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000

    wrong = sum(1 for r in rows if "wrong" in r.text)
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("wrong")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr.ep")) == wrong
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("")
    rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr.ep")
    rows[-1].click()
    assert "episode 5" in browser.find_element(By.CSS_SELECTOR, "#detail h3").text

    main(["view", str(runs[0]), "--compare", str(runs[1]), "--no-progress"])
    _open(browser, page)
    sides = browser.find_elements(By.CSS_SELECTOR, "#detail .cols > div")
    assert len(sides) == 2
    assert "random" in sides[0].text and "cascade" in sides[1].text
    assert sides[1].find_elements(By.CSS_SELECTOR, ".turn")
    assert browser.save_screenshot(str(shot.with_name("view_compare.png")))


def test_hostile_page_runs_no_injected_script(browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By

    ep = _episode({"seed": 0, "episode": 0, "task_id": HOSTILE, "actions": [HOSTILE]})
    run = {"run_dir": HOSTILE, "env_id": HOSTILE, "controller": HOSTILE, "pool": "", "split": ""}
    page = tmp_path / "hostile.html"
    page.write_text(
        render_html([{**run, "episodes": [ep], "episodes_total": 1, "turns_note": "x"}], HOSTILE),
        encoding="utf-8",
    )
    _open(browser, page)
    assert browser.execute_script("return window.__pwned === undefined")
    text = browser.find_element(By.CSS_SELECTOR, "#detail pre.act").text
    assert "</script><script>window.__pwned" in text  # shown as text, not run
    assert not browser.find_elements(By.CSS_SELECTOR, "#detail b b")
