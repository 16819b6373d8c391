"""``orchenv reproduce 004 --quick``: seed 004's (RCR-Router) page, its sections and resuming."""

from __future__ import annotations

import json
import time

import pytest

from orchenv.cli import main

pytestmark = pytest.mark.slow

SECTIONS = (
    "Table 2:",
    "Table 3:",
    "Table 4:",
    "Per-role budgets",
    "Table 5 and Figure 2: rounds T",
    "Table 8: ALFWorld",
    "Table 10: WebShop",
)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("r004")
    args = ["reproduce", "004", "--quick", "--runs", str(tmp), "--report", str(tmp / "004.md")]
    started = time.monotonic()
    assert main([*args, "--no-progress"]) == 0
    first = time.monotonic() - started
    return tmp, args, first


def test_page_has_every_section_with_intervals_and_findings(quick):
    tmp, _, _ = quick
    page = (tmp / "004.md").read_text()
    data = json.loads((tmp / "004.json").read_text())
    titles = [s["title"] for s in data["sections"]]
    for name in SECTIONS:
        assert any(t.startswith(name) for t in titles), (name, titles)
        assert f"## {name}" in page
    assert "not run: no local file" in page or "file " in page  # real datasets: run or said why
    assert "± " in page
    for section in data["sections"]:
        assert section["rows"]
        estimates = [c for r in section["rows"] for c in r["ours"].values() if isinstance(c, dict)]
        assert estimates and all({"mean", "lo", "hi", "n"} <= set(c) for c in estimates)
    findings = [f for s in data["sections"] for f in s["findings"]]
    assert len(findings) >= 10 and all(isinstance(f["reproduced"], bool) for f in findings)
    verdicts = [r["verdict"] for s in data["sections"] for r in s["rows"] if r["verdict"]]
    assert verdicts and all(v.startswith(("matches", "does not match")) for v in verdicts)
    for fig in ("004_runtime.png", "004_budgets.png", "004_rounds.png"):
        assert (tmp / "figures" / fig).stat().st_size > 1000


def test_rounds_compare_with_full_context_at_the_same_rounds(quick):
    tmp, _, _ = quick
    names = {p.stem for p in tmp.glob("*.json")}
    for t in (1, 2, 4, 5):
        assert f"multihop-rounds-full-T{t}-seed0" in names
        assert f"multihop-rounds-rcr-T{t}-seed0" in names


def test_a_second_run_resumes_without_rerunning(quick):
    tmp, args, first = quick
    stored = {
        p: p.stat().st_mtime_ns
        for p in tmp.glob("*.json")
        if p.name not in ("004.json", "timing.json")
    }
    started = time.monotonic()
    assert main([*args, "--no-progress"]) == 0
    assert time.monotonic() - started < first / 2
    assert {p: p.stat().st_mtime_ns for p in stored} == stored
