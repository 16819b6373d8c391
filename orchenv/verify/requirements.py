"""Pinned requirements of a re-executed entry point (``orchenv verify --rerun --board``,
docs/board-referee.md).

A bundle names its requirements file in ``entry_point.json`` (``"requirements":
"requirements.txt"``). Every line pins one distribution with ``==`` and at least one sha256
hash (``pip hash`` / ``pip-compile --generate-hashes`` write them)::

    tinyroute==1.0 --hash=sha256:0123...

Nothing else is accepted: no ranges, URLs, editable or local paths, ``-r`` / ``-c`` includes,
index options or markers. The verifier installs them, *before* the sandbox starts and outside
it, into a fresh virtual environment (``install``): ``pip install --isolated --no-deps
--require-hashes --only-binary=:all:`` from the maintainer's wheelhouse (``--no-index
--find-links DIR``) or the maintainer's index (``--index-url URL``), never an index the
bundle names. Only wheels: installing a wheel runs none of its code (building a source
distribution would run the submitter's ``setup.py`` next to the board's key). The venv sees
its own packages first, then the verifier's (orchenv, the wire client), and is mounted
read-only in the sandbox; during play the sandbox has no network.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import site
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from pathlib import Path

from orchenv.error import ConfigError, DataError

logger = logging.getLogger(__name__)

#: the most lines a requirements file may hold, and its largest size
MAX_REQUIREMENTS = 200
MAX_BYTES = 256 * 1024
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
PIN_RE = re.compile(
    rf"(?P<name>{_NAME})(?:\[(?P<extras>{_NAME}(?:\s*,\s*{_NAME})*)\])?"
    r"\s*==\s*(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)"
    r"(?P<hashes>(?:\s+--hash[=\s]sha256:[0-9a-f]{64})+)\s*\Z"
)


@dataclass(frozen=True)
class Pin:
    """One pinned requirement: name, version and its allowed sha256 hashes."""

    name: str
    version: str
    hashes: tuple[str, ...]

    def line(self) -> str:
        return f"{self.name}=={self.version} " + " ".join(f"--hash=sha256:{h}" for h in self.hashes)


def read_requirements(path: Path) -> list[Pin]:
    """The pins of ``path`` (module docstring); ``DataError`` naming the line and the rule for
    anything else (an unpinned, unhashed, URL, editable or option line)."""
    if path.is_symlink() or not path.is_file():
        raise DataError(f"{path} is not a regular file of the bundle")
    if path.stat().st_size > MAX_BYTES:
        raise DataError(f"{path} is over {MAX_BYTES} bytes")
    text = path.read_text(encoding="utf-8", errors="replace")
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            logical.append((start, line))
    if pending.strip():
        logical.append((start, pending.strip()))
    if len(logical) > MAX_REQUIREMENTS:
        raise DataError(f"{path} has {len(logical)} requirements; at most {MAX_REQUIREMENTS}")
    pins: list[Pin] = []
    seen: set[str] = set()
    for number, line in logical:
        match = PIN_RE.match(line)
        if match is None:
            raise DataError(
                f"{path}:{number}: {line[:120]!r} is not a pinned, hashed requirement: each line "
                "is NAME==VERSION --hash=sha256:HEX (pip hash, pip-compile --generate-hashes); "
                "no ranges, URLs, paths, -e / -r / -c, index options or markers"
            )
        name = re.sub(r"[-_.]+", "-", match["name"]).lower()
        if name in seen:
            raise DataError(f"{path}:{number}: {name} is pinned twice")
        seen.add(name)
        hashes = tuple(re.findall(r"sha256:([0-9a-f]{64})", match["hashes"]))
        pins.append(Pin(name, match["version"], hashes))
    if not pins:
        raise DataError(f"{path} pins nothing: drop it from entry_point.json")
    return pins


def requirements_sha256(pins: list[Pin]) -> str:
    return hashlib.sha256("\n".join(p.line() for p in pins).encode()).hexdigest()


def site_packages(env_dir: Path) -> Path:
    """The site-packages folder of the venv ``env_dir`` (this Python's layout)."""
    rel = Path(sysconfig.get_path("purelib", vars={"base": "", "platbase": ""}).lstrip("/"))
    return env_dir / rel


def install(
    pins: list[Pin],
    env_dir: Path,
    *,
    wheelhouse: str | os.PathLike[str] | None = None,
    index_url: str | None = None,
    timeout_s: float = 600.0,
) -> Path:
    """A fresh venv at ``env_dir`` with ``pins`` installed (module docstring); its Python.
    ``ConfigError`` with pip's reason when an install fails (a hash mismatch, a wheel that
    is not in the wheelhouse, a source distribution only)."""
    if (wheelhouse is None) == (index_url is None):
        raise ConfigError(
            "pinned requirements are installed from the maintainer's wheelhouse "
            "(--wheelhouse DIR: pip --no-index --find-links DIR) or index (--index-url URL): "
            "give exactly one"
        )
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=False).create(env_dir)
    target = site_packages(env_dir)
    target.mkdir(parents=True, exist_ok=True)
    # the verifier's packages (orchenv, the wire client) after the venv's own
    verifier = [p for p in site.getsitepackages() if os.path.isdir(p)]
    lines = [f"import site; site.addsitedir({p!r})" for p in verifier]
    (target / "_orchenv_verifier.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    req = env_dir / "requirements.txt"
    req.write_text("\n".join(p.line() for p in pins) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--no-input"]
    cmd += ["--disable-pip-version-check", "--no-deps", "--require-hashes"]
    cmd += ["--only-binary=:all:", "--no-compile", "--target", str(target), "-r", str(req)]
    if wheelhouse is not None:
        cmd += ["--no-index", "--find-links", str(Path(wheelhouse).resolve())]
    else:
        cmd += ["--index-url", str(index_url)]
    logger.info("installing %d pinned requirements: %s", len(pins), " ".join(cmd))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"installing the pinned requirements took over {timeout_s} s") from exc
    if done.returncode != 0:
        raise ConfigError(
            "the bundle's pinned requirements could not be installed (pip --require-hashes "
            f"--only-binary=:all: --no-deps): {(done.stderr or done.stdout).strip()[-1500:]}"
        )
    return env_dir / "bin" / "python"


__all__ = [
    "Pin",
    "install",
    "read_requirements",
    "requirements_sha256",
    "site_packages",
]
