"""docs/adding-a-backend.md, adding-a-controller.md and adding-a-reproduction.md work as
written: each page's module goes into a package of its own in a temporary folder, its
registration and usage blocks run as printed (issue 27)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def blocks(page: str, lang: str = "python") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text("utf-8"), flags=re.S)


@pytest.fixture
def mypkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package of ones own."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield package
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def install(package: Path, page: str) -> list[str]:
    """Write the page's ``# mypkg/NAME.py`` block into the package; the other blocks."""
    rest = []
    for block in blocks(page):
        first = block.splitlines()[0]
        if first.startswith("# mypkg/"):
            (package / first.removeprefix("# mypkg/").strip()).write_text(block)
        else:
            rest.append(block)
    return rest


def test_adding_a_backend(mypkg):
    from orchenv.pool import BACKENDS

    register, use = install(mypkg, "adding-a-backend.md")
    try:
        exec(compile(register, "adding-a-backend.md", "exec"), {})
        scope: dict = {}
        exec(compile(use, "adding-a-backend.md", "exec"), scope)
        assert scope["obs"].count("?") >= 1 and scope["info"]["calls"]
    finally:
        if "shout" in BACKENDS:
            del BACKENDS["shout"]


def test_adding_a_controller(mypkg):
    from orchenv.controllers import CONTROLLERS

    register, play = install(mypkg, "adding-a-controller.md")
    try:
        exec(compile(register, "adding-a-controller.md", "exec"), {})
        scope: dict = {}
        exec(compile(play, "adding-a-controller.md", "exec"), scope)
        summary = scope["result"].summary
        assert summary["run"]["controller"] == "first-choice"
        assert summary["pooled"]["episodes"] == 3
    finally:
        if "first-choice" in CONTROLLERS:
            del CONTROLLERS["first-choice"]


def test_adding_a_reproduction(mypkg, tmp_path):
    from orchenv.registry import REPRODUCTION_TITLES, REPRODUCTIONS
    from orchenv.reproduce import reproduce

    (register,) = install(mypkg, "adding-a-reproduction.md")
    try:
        exec(compile(register, "adding-a-reproduction.md", "exec"), {})
        page = reproduce("900", quick=True, runs_dir=tmp_path / "runs", progress=False)
        text = page.read_text("utf-8")
        assert "orchenv eval orch/MathRoute-v0 --controller cascade" in text
        assert "calibrated" in text and "--out" in text
    finally:
        if "900" in REPRODUCTIONS:
            del REPRODUCTIONS["900"]
        REPRODUCTION_TITLES.pop("900", None)
