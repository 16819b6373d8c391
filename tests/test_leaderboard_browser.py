"""leaderboard.html in a real browser: headless Chromium driven by Selenium.

Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install -y chromium
chromium-driver``) and the ``selenium`` package. Without them the test is skipped, except
under CI (the ``CI`` environment variable set), where it fails saying what to install.
Selenium Manager is never used: the driver and browser paths are given explicitly, so
nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchenv.eval import EvalConfig, build_leaderboard, evaluate

CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = (
    "leaderboard browser test needs headless Chromium: run "
    "`apt-get install -y chromium chromium-driver` and `pip install selenium` "
    '(or `pip install -e ".[dev]"`)'
)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed"
    if _chromium() is None:
        return "chromium is not installed"
    if not os.access(CHROMEDRIVER, os.X_OK):
        return f"{CHROMEDRIVER} (Debian package chromium-driver) is not installed"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}; {INSTALL}")
        pytest.skip(f"{missing}; {INSTALL}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _chromium()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--window-size=1600,1200",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    # the console log, for tests that assert a page logs no errors (test_published_boards)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser-runs")
    runs = []
    for name, spec, kwargs in (
        ("random", "random", {}),
        ("weakest", "single", {"agent": 2}),
        ("strongest", "single", {"agent": 0}),
        ("cascade", "cascade", {"verifier_accuracy": 0.9}),  # privileged
    ):
        config = EvalConfig(
            "orch/MathRoute-v0",
            controller=spec,
            controller_kwargs=kwargs,
            split="test",
            episodes=30,
            seeds=[0, 1],
        )
        evaluate(config, root / name, progress=False)
        runs.append(root / name)
    out = root / "board"
    build_leaderboard(runs, out)
    return out / "leaderboard.html"


def _column(driver, body: str, col: str) -> list[str]:
    from selenium.webdriver.common.by import By

    cells = driver.find_elements(By.CSS_SELECTOR, f"tbody.{body} td[data-col='{col}']")
    return [c.text for c in cells]


def _values(driver, body: str, col: str) -> list[float]:
    from selenium.webdriver.common.by import By

    cells = driver.find_elements(By.CSS_SELECTOR, f"tbody.{body} td[data-col='{col}']")
    return [float(c.get_attribute("data-value")) for c in cells]


def test_table_renders_and_headers_sort(browser, board):
    from selenium.webdriver.common.by import By

    browser.get(board.as_uri())
    assert browser.title == "orchenv leaderboard"
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.board")) == 1

    # rendered in rank order: by accuracy (higher first); the privileged run apart, marked
    ranked = _column(browser, "ranked", "controller")
    assert sorted(ranked) == ["random", "single(agent=0)", "single(agent=2)"]
    assert ranked[0] == "single(agent=0)"
    accuracy = _values(browser, "ranked", "accuracy")
    assert accuracy == sorted(accuracy, reverse=True)
    assert _column(browser, "ranked", "rank") == ["1", "2", "3"]
    assert _column(browser, "privileged", "controller") == ["cascade(verifier_accuracy=0.9) †"]
    row = browser.find_element(By.CSS_SELECTOR, "tbody.privileged tr")
    assert "privileged" in row.get_attribute("class")

    # the inline plots decoded
    images = browser.find_elements(By.TAG_NAME, "img")
    assert len(images) == 2
    assert all(browser.execute_script("return arguments[0].naturalWidth", i) > 100 for i in images)

    header = browser.find_element(By.CSS_SELECTOR, "th[data-col='accuracy']")
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    ascending = _values(browser, "ranked", "accuracy")
    assert ascending == sorted(accuracy)
    assert _column(browser, "ranked", "controller")[-1] == "single(agent=0)"
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert _values(browser, "ranked", "accuracy") == sorted(accuracy, reverse=True)

    # numeric-aware: cost sorts by value, not by its text
    cost = browser.find_element(By.CSS_SELECTOR, "th[data-col='cost']")
    cost.click()
    costs = _values(browser, "ranked", "cost")
    assert costs == sorted(costs) and len(set(costs)) == 3
    assert header.get_attribute("aria-sort") is None
    # text columns sort too, and the privileged run never leaves its section
    browser.find_element(By.CSS_SELECTOR, "th[data-col='controller']").click()
    assert _column(browser, "ranked", "controller") == sorted(ranked)
    assert _column(browser, "privileged", "controller") == ["cascade(verifier_accuracy=0.9) †"]
