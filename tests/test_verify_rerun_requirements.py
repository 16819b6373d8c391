"""Pinned requirements of a re-executed entry point (issue 37 item 3): the bundle ships
``requirements.txt`` (``NAME==VERSION --hash=sha256:...`` lines only); ``orchenv verify --rerun
--board`` installs them into a fresh venv (pip --require-hashes --no-deps --only-binary, from
the maintainer's wheelhouse, before the sandbox starts) and plays the entry point with that
venv's Python, read-only, in bubblewrap.

Offline: the wheel is built here (a zip with its dist-info, as a wheel is), put in a wheelhouse
folder, and installed with ``--no-index --find-links``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("openenv")

import orchenv  # noqa: E402,F401
from orchenv.error import ConfigError, DataError  # noqa: E402
from orchenv.eval.board import make_spec, sealed_status, write_spec  # noqa: E402
from orchenv.eval.rundir import read_episode_log  # noqa: E402
from orchenv.verify.keys import read_key, write_key  # noqa: E402
from orchenv.verify.requirements import install, read_requirements  # noqa: E402
from orchenv.verify.sandbox import rerun_entry_point  # noqa: E402

MATH = "orch/MathRoute-v0"
EPISODES = 3
STRONGEST = "Qwen3-30B-A3B-Instruct"

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"
)


def build_wheel(folder: Path, name: str, version: str, source: str) -> tuple[Path, str]:
    """A pure-Python wheel of one module package ``name`` (``__init__.py`` = ``source``);
    its path and sha256."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: orchenv-test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel, hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("wheelhouse")
    _, digest = build_wheel(
        root / "wheels", "tinyroute", "1.0", f"AGENT = {STRONGEST!r}\n__version__ = '1.0'\n"
    )
    return {"dir": root / "wheels", "sha256": digest}


def _pins(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_only_pinned_hashed_requirements_are_read(tmp_path: Path) -> None:
    h = "a" * 64
    pins = read_requirements(
        _pins(
            tmp_path,
            f"# pinned\nTiny_Route==1.0 \\\n    --hash=sha256:{h} --hash=sha256:{'b' * 64}\n\n"
            f"numpy[extra]==2.1.0 --hash=sha256:{h}  # a comment\n",
        )
    )
    assert [(p.name, p.version, len(p.hashes)) for p in pins] == [
        ("tiny-route", "1.0", 2),
        ("numpy", "2.1.0", 1),
    ]
    for bad, why in (
        ("tinyroute>=1.0 --hash=sha256:" + h, "pinned"),
        ("tinyroute==1.0", "pinned"),
        ("tinyroute==1.0 --hash=md5:" + "a" * 32, "pinned"),
        ("-e .", "pinned"),
        ("-r other.txt", "pinned"),
        ("--index-url https://evil.example/simple", "pinned"),
        ("--extra-index-url https://evil.example/simple", "pinned"),
        ("tinyroute @ https://evil.example/t.whl", "pinned"),
        (f"tinyroute==1.0 ; python_version > '3' --hash=sha256:{h}", "pinned"),
        (f"./local.whl --hash=sha256:{h}", "pinned"),
        (f"a==1 --hash=sha256:{h}\nA==2 --hash=sha256:{h}", "twice"),
        ("# nothing\n", "pins nothing"),
        ("x" * 300_000, "bytes"),
        ("a\ud800==1", "pinned"),
    ):
        path = tmp_path / "bad.txt"
        path.write_text(bad, encoding="utf-8", errors="surrogatepass")
        with pytest.raises(DataError, match=why):
            read_requirements(path)
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "requirements.txt")
    with pytest.raises(DataError, match="regular file"):
        read_requirements(link)


def test_install_makes_a_fresh_venv_and_checks_hashes(tmp_path: Path, wheelhouse: dict) -> None:
    good = read_requirements(
        _pins(tmp_path, f"tinyroute==1.0 --hash=sha256:{wheelhouse['sha256']}\n")
    )
    python = install(good, tmp_path / "venv", wheelhouse=wheelhouse["dir"])
    shown = subprocess.run(
        [
            str(python),
            "-I",
            "-c",
            "import tinyroute, orchenv.verify.player; print(tinyroute.AGENT)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and shown.stdout.strip() == STRONGEST, shown.stderr
    # the verifier's own Python does not see it: the venv is fresh
    assert subprocess.run(
        [shutil.which("python3") or "python3", "-I", "-c", "import tinyroute"],
        capture_output=True,
        timeout=60,
    ).returncode
    wrong = read_requirements(_pins(tmp_path, f"tinyroute==1.0 --hash=sha256:{'0' * 64}\n"))
    with pytest.raises(ConfigError, match="(?i)hash"):
        install(wrong, tmp_path / "venv2", wheelhouse=wheelhouse["dir"])
    missing = read_requirements(_pins(tmp_path, f"absent==1.0 --hash=sha256:{'0' * 64}\n"))
    with pytest.raises(ConfigError, match="could not be installed"):
        install(missing, tmp_path / "venv3", wheelhouse=wheelhouse["dir"])
    with pytest.raises(ConfigError, match="exactly one"):
        install(good, tmp_path / "venv4")


POLICY = """
import tinyroute


class Router:
    def act(self, observation, info):
        if info.get("phase") == "verify":
            return "<verdict>True</verdict>"
        return f"<model>{tinyroute.AGENT}</model>"
"""


@needs_bwrap
def test_an_entry_point_with_pinned_requirements_is_re_executed(
    tmp_path: Path, wheelhouse: dict
) -> None:
    key_file = write_key(tmp_path / "secret" / "board.key")
    key = read_key(key_file)
    spec = make_spec(MATH, pool="system1", split="test", sealed_episodes=EPISODES, key=key)
    board = write_spec(tmp_path / "secret" / "board.json", spec)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "policy.py").write_text(POLICY, encoding="utf-8")
    (bundle / "requirements.txt").write_text(
        f"tinyroute==1.0 --hash=sha256:{wheelhouse['sha256']}\n", encoding="utf-8"
    )
    (bundle / "entry_point.json").write_text(
        json.dumps({"entry_point": "policy:Router", "requirements": "requirements.txt"})
    )
    with pytest.raises(ConfigError, match="wheelhouse"):  # where from: the maintainer says
        rerun_entry_point(bundle, board, key_file, tmp_path / "runs" / "nowhere")
    out = tmp_path / "runs" / "pinned"
    result = rerun_entry_point(
        bundle, board, key_file, out, timeout_s=300, wheelhouse=wheelhouse["dir"]
    )
    assert result.status == "complete", result.stderr_tail
    rows = read_episode_log(out / "episodes.jsonl")
    assert len(rows) == EPISODES
    assert all(f"<model>{STRONGEST}</model>" == r["actions"][0] for r in rows)
    run = json.loads((out / "run.json").read_text())
    assert run["refereed"]["rerun"]["requirements"] == ["tinyroute==1.0"]
    assert result.note == (
        "re-executed with 1 pinned requirements installed (sha256 hashes checked, wheels only)"
    )
    assert json.loads((out / "sealed.json").read_text())["note"] == result.note
    assert sealed_status(out, spec, key) == "sealed"
    # a requirements file outside the bundle is refused
    (bundle / "entry_point.json").write_text(
        json.dumps({"entry_point": "policy:Router", "requirements": "../secret/board.key"})
    )
    with pytest.raises(DataError, match="requirements"):
        rerun_entry_point(
            bundle, board, key_file, tmp_path / "runs" / "escape", wheelhouse=wheelhouse["dir"]
        )
