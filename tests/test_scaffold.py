"""``orchenv init NAME`` (issue 40): the generated package passes ``check_orch_env``, its own
tests and ``orchenv audit`` (loaded with the ``MODULE:ENV_ID`` form) as generated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from orchenv.audit import AuditReport
from orchenv.cli import main
from orchenv.testing.checks import check_orch_env


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    assert main(["init", "myorchenv", "--out", str(tmp_path)]) == 0
    assert "wrote" in capsys.readouterr().out
    root = tmp_path / "myorchenv"
    monkeypatch.syspath_prepend(str(root))
    yield root
    gym.registry.pop("myorchenv/Echo-v0", None)
    for name in [m for m in sys.modules if m == "myorchenv" or m.startswith("myorchenv.")]:
        del sys.modules[name]


def test_the_generated_package_has_its_files(generated: Path):
    for rel in (
        "pyproject.toml",
        "README.md",
        "openenv.yaml",
        "myorchenv/env.py",
        "tests/test_env.py",
    ):
        assert (generated / rel).is_file(), rel
    assert (
        "orchenv --import myorchenv serve myorchenv/Echo-v0"
        in (generated / "openenv.yaml").read_text()
    )


def test_it_passes_the_checks_and_the_audit_as_generated(generated: Path, capsys):
    import myorchenv  # noqa: F401  # type: ignore[import-not-found]

    listed = str(check_orch_env("myorchenv/Echo-v0", fuzz_episodes=5))
    assert "9 checks passed" in listed
    argv = ["audit", "myorchenv:myorchenv/Echo-v0", "--tasks", "8", "--json", "--no-progress"]
    assert main(argv) == 0
    report = AuditReport.from_json(capsys.readouterr().out)
    assert report.skill_available and not report.flagged
    assert report.skill_row(1.0).return_mean == 1.0


@pytest.mark.slow
def test_its_own_tests_pass(generated: Path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(generated), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=generated,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_bad_names_and_existing_folders_are_refused(tmp_path: Path, capsys):
    for bad in ("My-Env", "1env", "class", "x" * 41, "a/b"):
        assert main(["init", bad, "--out", str(tmp_path)]) == 2
        assert "lower-case Python identifier" in capsys.readouterr().err
    (tmp_path / "taken").mkdir()
    assert main(["init", "taken", "--out", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
