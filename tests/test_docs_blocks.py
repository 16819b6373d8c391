"""Every ```python block of README.md and docs/*.md runs as written (issue 40).

Each block runs in a fresh interpreter (what a reader pasting it gets), in a temporary folder,
unless a marker says otherwise. The markers are HTML comments (invisible on GitHub, visible in
the source, and listed in ``docs/adding-an-env.md``'s section "Code blocks in the docs"):

- ``<!-- docs-test: skip: REASON -->`` on the line above the fence: the block is not run
  (a live server, a GPU, a downloaded data set...); pytest reports it as skipped with REASON.
- ``<!-- docs-test: continues -->`` on the line above the fence: the block runs after the
  page's previous block (and whatever that one continued), in the same interpreter.
- A block whose first line is ``# mypkg/NAME.py`` is a file of the reader's own package: it is
  written to ``mypkg/NAME.py`` (appended when several blocks name the same file) in the
  temporary folder, which is on ``sys.path``, and not run itself.

A block fails the test when it raises or runs past its time limit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*docs-test:\s*(skip|continues)\s*:?\s*(.*?)\s*-->")
MODULE = re.compile(r"#\s*mypkg/([A-Za-z_][A-Za-z0-9_]*\.py)\b")
TIME_LIMIT_S = 240


@dataclass
class Block:
    page: Path
    line: int
    code: str
    marker: str  # "", "skip" or "continues"
    reason: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    """The page's python blocks with the marker on the line above each (if any)."""
    text = page.read_text("utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        found.append(
            Block(
                page=page,
                line=text[: match.start()].count("\n") + 1,
                code=match.group(1),
                marker=marker.group(1) if marker else "",
                reason=marker.group(2) if marker else "",
            )
        )
    return found


def module_name(block: Block) -> str | None:
    first = block.code.lstrip().split("\n", 1)[0]
    match = MODULE.match(first)
    return match.group(1) if match else None


def program(blocks: list[Block], index: int) -> str:
    """Block ``index`` with the chain of blocks it continues, in page order."""
    chain = [blocks[index]]
    i = index
    while blocks[i].marker == "continues" and i > 0:
        i -= 1
        while i > 0 and module_name(blocks[i]) is not None:  # files are not code to run
            i -= 1
        chain.insert(0, blocks[i])
    return "\n".join(b.code for b in chain if module_name(b) is None)


CASES = [
    pytest.param(page, i, id=block.name)
    for page in PAGES
    for i, block in enumerate(page_blocks(page))
    if module_name(block) is None
]


def test_the_pages_have_blocks():
    assert len(CASES) >= 20  # the finder itself works (README alone has three)


def test_markers_parse():
    text = "a\n<!-- docs-test: skip: needs a GPU -->\n```python\nx = 1\n```\n"
    match = FENCE.search(text)
    assert match is not None and match.group(1) == "x = 1\n"
    marker = MARKER.search(text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1])
    assert marker is not None and marker.groups() == ("skip", "needs a GPU")
    assert MODULE.match("# mypkg/echo.py (inside orchenv: envs/echo/env.py)")


@pytest.mark.parametrize(("page", "index"), CASES)
def test_block_runs(page: Path, index: int, tmp_path: Path):
    blocks = page_blocks(page)
    block = blocks[index]
    if block.marker == "skip":
        pytest.skip(f"{block.name}: docs-test: skip: {block.reason or 'no reason given'}")
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package of ones own."""\n')
    for other in blocks:
        name = module_name(other)
        if name is not None:
            with (package / name).open("a", encoding="utf-8") as fh:
                fh.write(other.code + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.setdefault("MPLBACKEND", "Agg")
    try:
        done = subprocess.run(
            [sys.executable, "-c", program(blocks, index)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name}: ran past {TIME_LIMIT_S} s")
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr[-4000:]}"
