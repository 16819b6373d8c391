"""docs/adding-an-env.md works as written: its example env, put in a package of its own in a
temporary folder and registered with its one ``register()`` line, passes the same public
checks (``orchenv.testing.checks``) as every orchenv env."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from orchenv.testing import checks

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-an-env.md"
ENV_ID = "mypkg/Echo-v0"
CHOICES_ID = "mypkg/EchoChoices-v0"
REGISTER = 'gymnasium.register(id="mypkg/Echo-v0"'


def code_block(containing: str) -> str:
    """The one ```python block of the doc that contains ``containing``."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), flags=re.S)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"expected one python block with {containing!r}, found {len(found)}"
    return found[0]


@pytest.fixture
def mypkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``mypkg.echo`` holding the doc's env, importable from a temporary folder."""
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package of ones own."""\n')
    (package / "echo.py").write_text(
        code_block("class EchoEnv(OrchestrationEnv)") + code_block("class EchoChoicesEnv(EchoEnv)")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    gym.registry.pop(ENV_ID, None)
    gym.registry.pop(CHOICES_ID, None)
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def test_the_documented_env_passes_the_shared_checks(mypkg: Path):
    exec(code_block(REGISTER), {})  # the doc's one register() line
    assert gym.spec(ENV_ID).entry_point == "mypkg.echo:EchoEnv"
    check = code_block("check_orch_env(").replace("import mypkg  # registers mypkg/Echo-v0", "")
    exec(check, {})  # the doc's check, all of it
    listed = str(checks.check_orch_env(ENV_ID, fuzz_episodes=3))
    for name in ("check_api", "check_hostile_actions", "check_horizon", "check_fork"):
        assert f"[ok] {name}" in listed
    assert "9 checks passed" in listed


def test_the_documented_env_plays_as_described(mypkg: Path):
    exec(code_block(REGISTER), {})
    env = gym.make(ENV_ID, max_turns=3)
    obs, _ = env.reset(seed=0)
    word = obs.split("Word: ")[1].split()[0]
    obs, reward, terminated, truncated, info = env.step("hello")
    assert (reward, terminated, truncated, info["invalid_action"]) == (-0.1, False, False, True)
    assert "Your previous reply could not be used: no <answer>" in obs
    obs, reward, *_ = env.step("<think>hm</think>")
    assert reward == 0.0 and "could not be used" not in obs
    _, reward, terminated, truncated, info = env.step(f"<answer>{word}</answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] and info["final_answer"] == word and info["turns"] == 3
    assert info["metrics"] == {"thoughts": 1.0}
    env.reset(seed=0)
    for _ in range(3):
        *_, terminated, truncated, info = env.step("<think>hm</think>")
    assert truncated and not terminated and info["correct"] is False


BROKEN = {
    # the old horizon rule: the last turn counts as a decision
    "check_horizon": "return Outcome(error='x', done=self.turn >= self.max_turns)",
    # a parser that trips over text it did not expect
    "check_hostile_actions": "action.encode('ascii'); return super()._apply(action)",
    # randomness outside the env's seeded np_random
    "check_determinism": "return Outcome(reward=random.random(), done=True)",
}


@pytest.mark.parametrize("check", sorted(BROKEN))
def test_the_checks_catch_a_broken_env(mypkg: Path, check: str):
    (mypkg / "broken.py").write_text(
        "import random\n"
        "from orchenv.core import Outcome\n"
        "from mypkg.echo import EchoEnv\n"
        "class BrokenEnv(EchoEnv):\n"
        f"    def _apply(self, action):\n        {BROKEN[check]}\n"
    )
    from mypkg.broken import BrokenEnv  # type: ignore[import-not-found]

    with pytest.raises(AssertionError):
        getattr(checks, check)(BrokenEnv)
    with pytest.raises(AssertionError) as failed:
        checks.check_orch_env(BrokenEnv, fuzz_episodes=5)
    assert "failed; passed before it" in str(failed.value)  # names the first failing check


def _init_py(package: Path) -> None:
    """``mypkg/__init__.py`` as the doc builds it: its two ``# mypkg/__init__.py`` blocks."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), flags=re.S)
    parts = [b for b in blocks if b.startswith("# mypkg/__init__.py")]
    assert len(parts) == 2
    (package / "__init__.py").write_text("\n".join(parts))


@pytest.mark.parametrize("form", ["module-id", "import-option"])
def test_the_documented_audit_runs_from_the_cli(mypkg: Path, form: str, capsys):
    """Issue 40: ``orchenv audit`` loads an env registered by another package (Gymnasium's
    ``MODULE:ENV_ID`` form, or ``--import MODULE``) and, with the doc's ``skill_action``,
    compares the shortcuts with a skill reference instead of saying nothing can be flagged."""
    from orchenv.cli import main

    _init_py(mypkg)
    args = ["--tasks", "8", "--json", "--no-progress", "--time-limit", "0"]
    if form == "module-id":
        argv = ["audit", f"mypkg:{CHOICES_ID}", *args]
    else:
        argv = ["audit", CHOICES_ID, *args, "--import", "mypkg"]
    assert main(argv) == 0
    from orchenv.audit import AuditReport

    report = AuditReport.from_json(capsys.readouterr().out)
    assert report.env_id == CHOICES_ID and report.skill_available
    assert report.reference is not None and report.realistic_skill == 0.5
    assert report.skill_row(1.0).return_mean == 1.0
    assert report.row("always-think").return_mean == 0.0
    assert not report.flagged


def test_an_unknown_import_is_a_clear_error(capsys):
    from orchenv.cli import main

    assert main(["--import", "no_such_pkg_40", "audit", "x/Y-v0"]) == 2
    assert "--import no_such_pkg_40: cannot import it" in capsys.readouterr().err
