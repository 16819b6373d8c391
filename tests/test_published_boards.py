"""The published boards under docs/leaderboard/ (benchmarks/publish_boards.py, issue 37 item 6).

Reads the committed pages, not a fresh run: every board's table parses, its ranked rows are
in the order of the env's primary metric (the spec's), BudgetRoute ranks answering alone
above always-o3 (the env pays for right answers within budget), OrchMAS is ranked by its F1
score, no page names the sealed plan's seeds, and every board's index.html renders in headless
Chromium without console errors (same browser setup as test_leaderboard_browser.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

BOARDS = Path(__file__).resolve().parent.parent / "docs" / "leaderboard"
NUMBER = re.compile(r"[-+]?\d[\d,]*\.?\d*")


def _published() -> list[Path]:
    return sorted(p.parent for p in BOARDS.glob("*/spec.json"))


def _index() -> list[dict]:
    return json.loads((BOARDS / "index.json").read_text(encoding="utf-8"))


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip() for c in parts[1:-1]]


def ranked_table(page: Path) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the first table of ``page``/board.md (the ranked rows)."""
    lines = (page / "board.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| # |"))
    header = _cells(lines[start])
    assert re.fullmatch(r"\|(-{3,}:?\|)+", lines[start + 1].replace("---:", "---")), lines[
        start + 1
    ]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        row = _cells(line)
        assert len(row) == len(header), f"{page.name}: {line}"
        rows.append(row)
    return header, rows


def _value(text: str) -> float:
    return float(NUMBER.search(text).group().replace(",", ""))


def _column(page: Path, label: str) -> tuple[list[str], list[float]]:
    header, rows = ranked_table(page)
    col = header.index(f"{label} [95% CI]")
    return [r[header.index("controller")] for r in rows], [_value(r[col]) for r in rows]


def test_index_lists_every_registered_id():
    from orchenv.registry import ENV_SUMMARIES

    entries = {e["env_id"]: e for e in _index()}
    assert set(entries) == set(ENV_SUMMARIES)
    readme = (BOARDS / "README.md").read_text(encoding="utf-8")
    assert "re-executed" in readme and "consistent" in readme
    for env_id, entry in entries.items():
        assert f"`{env_id}`" in readme
        page = BOARDS / entry["slug"]
        assert (page / "board.md").is_file(), env_id
        if "error" in entry:  # said plainly on the page and in the index
            assert "no published board" in (page / "board.md").read_text(encoding="utf-8")
    assert len(_published()) >= 3


@pytest.mark.parametrize("page", _published(), ids=lambda p: p.name)
def test_table_parses_and_is_sorted_by_the_primary_metric(page):
    spec = json.loads((page / "spec.json").read_text(encoding="utf-8"))
    label = spec["primary_metric"]["label"]
    header, rows = ranked_table(page)
    assert rows, page.name
    assert header[:5] == ["#", "controller", "verified", f"{label} [95% CI]", "vs next [95% CI]"]
    names, values = _column(page, label)
    assert values == sorted(values, reverse=True), (
        page.name,
        list(zip(names, values, strict=True)),
    )
    assert [r[0] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    for row in rows:  # every ranked row is a signed sealed run with an interval
        assert "verified" in row[2], row
        lo, hi = (float(x) for x in re.findall(r"[-+]?\d+\.\d+", row[3])[1:3])
        assert lo <= _value(row[3]) <= hi
        assert row[header.index("seeds")] == "sealed"
        assert int(row[header.index("episodes")]) == spec["sealed_plan"]["episodes"]
    for row in rows[:-1]:
        assert "paired" in row[4], row  # same sealed tasks: paired differences
    text = (page / "board.md").read_text(encoding="utf-8")
    assert f"key id {spec['sealed_plan']['key_id']}" in text
    assert f"sealed plan of {spec['sealed_plan']['episodes']} episodes per row" in text
    assert "re-executed" in text
    assert "backend_kwargs" not in text  # the sealed simulated-backend seed is not shown
    assert "backend_kwargs" not in (page / "rows.json").read_text(encoding="utf-8")


def test_budgetroute_ranks_answering_alone_above_always_o3():
    names, values = _column(BOARDS / "budgetroute-v0", "return")
    alone = names.index('budget-baseline(expert="none")')
    o3 = names.index('budget-baseline(expert="o3")')
    assert alone < o3 and values[alone] > values[o3]
    _, rows = ranked_table(BOARDS / "budgetroute-v0")
    header, _ = ranked_table(BOARDS / "budgetroute-v0")
    accuracy = header.index("accuracy [95% CI]")
    # o3 is right more often; the env pays for right answers within budget
    assert _value(rows[o3][accuracy]) > _value(rows[alone][accuracy])


def test_orchmas_is_ranked_by_its_f1_score():
    page = BOARDS / "orchmas-v0"
    if not (page / "spec.json").is_file():  # no board for this id yet: the page says why
        reason = (page / "board.md").read_text(encoding="utf-8")
        assert "no published board" in reason
        pytest.skip(f"no published OrchMAS board: {reason.splitlines()[2][:300]}")
    spec = json.loads((page / "spec.json").read_text(encoding="utf-8"))
    assert spec["primary_metric"] == {"field": "score", "label": "F1 score"}
    header, _ = ranked_table(page)
    assert header[3] == "F1 score [95% CI]" and "accuracy [95% CI]" in header[4:]
    _, f1 = _column(page, "F1 score")
    assert f1 == sorted(f1, reverse=True)


def test_llm_row_with_a_real_model():
    text = (BOARDS / "mathroute-v0" / "board.md").read_text(encoding="utf-8")
    names, _ = _column(BOARDS / "mathroute-v0", "return")
    assert any(n.startswith("llm(") and "SmolLM2-135M-Instruct" in n for n in names), names
    assert re.search(r"Valid-action rate \d\.\d{3}", text)


def test_sealed_rows_show_the_boards_kwargs_and_the_notes(tmp_path):
    """A sealed run's env kwargs carry the key-derived backend seed: the board shows the
    spec's kwargs instead, in board.md, the HTML and the JSON; notes are printed (escaped in
    the HTML)."""
    from orchenv.eval import EvalConfig, build_leaderboard, evaluate
    from orchenv.eval.board import make_spec, play_sealed
    from orchenv.verify.keys import read_key, write_key

    key = read_key(write_key(tmp_path / "board.key"))
    spec = make_spec(
        "orch/MathRoute-v0",
        pool="system1",
        split="test",
        dev_episodes=2,
        sealed_episodes=3,
        key=key,
    )
    dev = tmp_path / "dev"
    evaluate(
        EvalConfig(
            "orch/MathRoute-v0", controller="random", pool="system1", split="test", episodes=2
        ),
        dev,
        progress=False,
    )
    sealed = play_sealed(dev, spec, key, tmp_path / "sealed")
    played = json.loads((sealed / "run.json").read_text(encoding="utf-8"))["env_kwargs"]
    assert played != spec["env_kwargs"]  # the sealed plan plays other kwargs than it shows
    out = tmp_path / "board"
    build_leaderboard(
        [sealed], out, spec=spec, key=key, plots=False, notes=["sizes: 3 <sealed> episodes"]
    )
    md = (out / "leaderboard.md").read_text(encoding="utf-8")
    html = (out / "leaderboard.html").read_text(encoding="utf-8")
    rows = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    assert "(default kwargs)" in md and "sealed plan" in md
    assert "backend_kwargs" not in md + html
    assert [r["env_kwargs"] for r in rows] == [spec["env_kwargs"]]
    assert "sizes: 3 <sealed> episodes" in md
    assert "sizes: 3 &lt;sealed&gt; episodes" in html and "<sealed>" not in html


# -- benchmarks/publish_boards.py: --ids keeps other ids, --index-only runs nothing ------------
def _publish_module():
    import importlib.util

    path = BOARDS.parent.parent / "benchmarks" / "publish_boards.py"
    spec = importlib.util.spec_from_file_location("publish_boards_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _entry(env_id: str, slug: str, **extra) -> dict:
    return {"env_id": env_id, "slug": slug, "pool": "p", "metric": "return",
            "sealed_episodes": 3, "rows": 2, "top": "x", **extra}  # fmt: skip


def test_publishing_some_ids_keeps_the_others_and_index_only_rebuilds_the_index(
    tmp_path, monkeypatch
):
    pb = _publish_module()
    out, work = tmp_path / "leaderboard", tmp_path / "work"
    ids = list(pb.BOARDS)
    a, b, c = ids[0], ids[1], ids[2]
    # a folder published earlier with entry.json, one from before entry.json existed (its
    # entry is in the old index.json), and the reproduction's own files at the top
    for env_id in (a, b):
        (out / pb.slug(env_id)).mkdir(parents=True)
        (out / pb.slug(env_id) / "board.md").write_text(f"# {env_id}\n", encoding="utf-8")
    (out / pb.slug(a) / "entry.json").write_text(json.dumps(_entry(a, pb.slug(a))))
    (out / pb.slug(b) / "board.md").write_text(f"# {b}: no published board yet\n\nwhy not\n")
    (out / "index.json").write_text(json.dumps([_entry(b, pb.slug(b), top="old")]))
    (out / "leaderboard.md").write_text("the reproduction's board\n")

    def fake_publish(board, work_dir, out_dir, key, extra, fresh=False):
        page = out_dir / pb.slug(board.env_id)
        page.mkdir(parents=True, exist_ok=True)
        (page / "board.md").write_text("# new\n", encoding="utf-8")
        return _entry(board.env_id, pb.slug(board.env_id), top="new")

    def fake_run(cmd, log, timeout):  # only the key is made outside publish()
        Path(cmd[-1]).write_bytes(b"k" * 32)
        return True, ""

    monkeypatch.setattr(pb, "publish", fake_publish)
    monkeypatch.setattr(pb, "_run", fake_run)
    assert pb.main(["--ids", c, "--no-llm", "--out", str(out), "--work", str(work)]) == 0
    for env_id in (a, b, c):  # every folder is still there, the new one with its entry
        assert (out / pb.slug(env_id) / "board.md").is_file(), env_id
    assert json.loads((out / pb.slug(c) / "entry.json").read_text())["top"] == "new"
    index = {e["env_id"]: e for e in json.loads((out / "index.json").read_text())}
    assert set(index) == {a, b, c} and index[b]["top"] == "old"
    # --index-only: rebuilt from the folders alone, nothing run, the top-level files untouched
    (out / "README.md").unlink()
    (out / "index.json").write_text("[]")
    entry_a = _entry(a, pb.slug(a), top="edited")
    (out / pb.slug(a) / "entry.json").write_text(json.dumps(entry_a))
    monkeypatch.setattr(pb, "publish", None)  # would fail if called
    monkeypatch.setattr(pb, "_run", None)
    assert pb.main(["--index-only", "--out", str(out), "--work", str(work)]) == 0
    index = json.loads((out / "index.json").read_text())
    # b's entry was only in the old index: read back from its folder (no spec: no board)
    assert [e["env_id"] for e in index] == [a, b, c]
    assert index[0]["top"] == "edited"
    assert index[1]["error"] == "why not" and index[1]["pool"] == pb.BOARDS[b].pool
    readme = (out / "README.md").read_text()
    assert f"`{a}`" in readme and f"`{c}`" in readme and "re-executed" in readme
    assert (out / "leaderboard.md").read_text() == "the reproduction's board\n"
    with pytest.raises(SystemExit):
        pb.main(["--ids", "orch/NoSuch-v0", "--out", str(out)])


def test_every_published_folder_has_its_index_entry():
    """Each id folder written since ``entry.json`` existed matches its line of index.json
    (``publish_boards.py --index-only`` rebuilds the index from these)."""
    entries = {e["env_id"]: e for e in _index()}
    for path in sorted(BOARDS.glob("*/entry.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        assert entry["slug"] == path.parent.name
        assert entries.get(entry["env_id"]) == entry, path


# -- the HTML in headless Chromium --------------------------------------------------------------
from test_leaderboard_browser import browser  # noqa: E402, F401  (the Chromium fixture)


def test_every_board_renders_without_console_errors(browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    pages = _published()
    assert pages
    for page in pages:
        browser.get((page / "index.html").as_uri())
        spec = json.loads((page / "spec.json").read_text(encoding="utf-8"))
        assert browser.title == f"{spec['env_id']} leaderboard (sealed plan)"
        ranked = browser.find_elements(By.CSS_SELECTOR, "tbody.ranked tr")
        assert len(ranked) == len(ranked_table(page)[1]), page.name
        images = browser.find_elements(By.TAG_NAME, "img")
        assert images and all(
            browser.execute_script("return arguments[0].naturalWidth", i) > 100 for i in images
        )
        # the table's own script ran: a header sorts
        header = browser.find_element(By.CSS_SELECTOR, "th[data-col='cost']")
        header.click()
        assert header.get_attribute("aria-sort") == "ascending"
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert not errors, (page.name, errors)
