"""Re-execution of a bundle's Python entry point, sandboxed, against a sealed referee:
``orchenv verify BUNDLE --rerun --board BOARD --key KEYFILE --out DIR`` (docs/board-referee.md).

The verifier starts a referee (``orchenv.serve.referee``) for the board on a private Unix
socket, in its own process, accepting one submission (named after ``DIR``) and one session.
The submission's code runs in a child process under bubblewrap (``bwrap``):

* no network at all (``--unshare-all``: a fresh network namespace); the only way out is the
  referee's socket, bind-mounted at ``/referee``;
* a read-only filesystem of the Python installation, the virtual environment, orchenv's own
  package folders and the bundle (at ``/submission``); ``/tmp`` is an empty tmpfs. The key
  file, the board file and the runs folder are not mounted (a key inside a mounted folder is
  refused before anything runs);
* a cleared environment, its own PID / IPC / UTS namespaces, killed with the verifier.

The row is the referee's signed record in ``DIR`` (``sealed.json``): whatever the child does
(crash, hang past ``timeout_s``, try the key file or the network), the referee counts every
sealed task (an unfinished one with its return so far, unplayed ones at 0).

No bwrap, or a bwrap that cannot create namespaces here: ``ConfigError`` with the reason;
there is no unsandboxed fallback. Saved policies (pickles and other serialized objects) are
refused: loading one runs its bytes as code.

The bundle names its entry point in ``entry_point.json``::

    {"entry_point": "my_policy:act", "kwargs": {}}

``act`` is a function ``(observation: str) -> str`` or a controller class whose
``act(observation, info) -> str`` is called (``orchenv.verify.player``).

A bundle may name an OpenAI-compatible endpoint instead of (or besides) an entry point,
``{"endpoint": {"base_url": "https://host/v1", "model": "m"}}``: the sandbox then reaches it
only through the verifier's recording proxy (``orchenv.verify.endpoint``) on a second socket
in the same private folder; the calls are signed with the record and the row says
"re-executed against endpoint X (calls recorded, model not verified)".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError

logger = logging.getLogger(__name__)

ENTRY_FILE = "entry_point.json"
ENTRY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")
#: files a bundle may not ship: serialized objects whose loading runs code
SAVED_POLICY_SUFFIXES = (".pkl", ".pickle", ".pt", ".pth", ".joblib", ".npy", ".npz", ".zip")
#: seconds the sandboxed player may take, in all (default)
DEFAULT_TIMEOUT_S = 600.0


@dataclass
class Rerun:
    """What a sandboxed re-execution produced: the signed record and the child's fate."""

    out: Path
    status: str  # the referee's: "complete" or "abandoned"
    exit_code: int | None  # the child's (None: killed at the timeout)
    stderr_tail: str
    seconds: float
    #: the row's words for a re-execution against an endpoint (None: no endpoint)
    note: str | None = None
    #: the endpoint calls recorded (None: no endpoint)
    calls: int | None = None


def bwrap_path() -> str:
    """The bubblewrap binary, checked to work here (``ConfigError`` with the reason)."""
    found = shutil.which("bwrap")
    if found is None:
        raise ConfigError(
            "sandboxed re-execution needs bubblewrap (bwrap), which is not installed: "
            "`apt-get install bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`. There is "
            "no unsandboxed fallback: a submission's code never runs next to the board's key"
        )
    probe = subprocess.run(
        [found, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        raise ConfigError(
            f"bubblewrap ({found}) cannot create its namespaces here: "
            f"{probe.stderr.strip()[:300]}. Allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1) or run the verifier where they are "
            "allowed; there is no unsandboxed fallback"
        )
    return found


def read_entry(bundle: Path) -> tuple[str | None, dict[str, Any]]:
    """The bundle's entry point (``MODULE:NAME``; None for an endpoint submission without
    code of its own, ``read_endpoint``) and its kwargs; ``DataError`` naming the fix for a
    missing or malformed ``entry_point.json``, a module outside the bundle, or a saved policy
    in the bundle."""
    from orchenv.eval.rundir import read_json_file

    if not bundle.is_dir() or bundle.is_symlink():
        raise DataError(f"{bundle} is not a bundle directory")
    saved = sorted(
        str(p.relative_to(bundle))
        for p in bundle.rglob("*")
        if p.suffix.lower() in SAVED_POLICY_SUFFIXES or p.is_symlink()
    )
    if saved:
        raise DataError(
            f"{bundle} ships {saved[:5]}: saved policies (pickles, torch / joblib / numpy "
            "files, archives) and symlinks are refused, since loading one runs its bytes as "
            "code; ship Python source and name it in entry_point.json"
        )
    path = bundle / ENTRY_FILE
    if not path.exists():
        raise DataError(
            f"{bundle} has no {ENTRY_FILE}: a re-executable bundle names its Python entry "
            'point there, e.g. {"entry_point": "my_policy:act", "kwargs": {}}'
        )
    data = read_json_file(path)
    entry = data.get("entry_point")
    kwargs = data.get("kwargs", {})
    if entry is None and "endpoint" in data:  # the built-in endpoint controller plays
        if kwargs:
            raise DataError(f"{path}: kwargs go with an entry_point; this bundle names none")
        return None, {}
    if not isinstance(entry, str) or not ENTRY_RE.match(entry):
        raise DataError(f"{path}: entry_point must be 'module:name', got {str(entry)[:80]!r}")
    if not isinstance(kwargs, dict):
        raise DataError(f"{path}: kwargs must be an object")
    module = entry.split(":")[0].replace(".", "/")
    if not ((bundle / f"{module}.py").is_file() or (bundle / module / "__init__.py").is_file()):
        raise DataError(f"{path}: module {entry.split(':')[0]!r} is not a .py file of the bundle")
    return entry, kwargs


def read_pins(bundle: Path) -> list[Any] | None:
    """The pinned requirements ``entry_point.json`` names (``"requirements":
    "requirements.txt"``, a file of the bundle; ``orchenv.verify.requirements``), or None."""
    from orchenv.eval.rundir import read_json_file
    from orchenv.verify.requirements import read_requirements

    path = bundle / ENTRY_FILE
    name = read_json_file(path).get("requirements")
    if name is None:
        return None
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,200}", name):
        raise DataError(f"{path}: requirements must name a file of the bundle, got {name!r}")
    file = bundle / name
    if ".." in Path(name).parts or not _inside(file, bundle):
        raise DataError(f"{path}: requirements {name!r} is outside the bundle")
    return read_requirements(file)


def read_endpoint(bundle: Path) -> dict[str, Any] | None:
    """The OpenAI-compatible endpoint ``entry_point.json`` names (``endpoint``: base_url,
    model, optional system prompt and params; ``orchenv.verify.endpoint.check_endpoint``), or
    None."""
    from orchenv.eval.rundir import read_json_file
    from orchenv.verify.endpoint import check_endpoint

    path = bundle / ENTRY_FILE
    data = read_json_file(path)
    if "endpoint" not in data:
        return None
    return check_endpoint(data["endpoint"], str(path))


def _mounts() -> list[Path]:
    """What the child reads: the Python installation, the venv, orchenv's package folders."""
    import importlib.util

    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    for name in ("orchenv", "orchenv.agents", "orchenv.envs"):  # editable installs map these
        spec = importlib.util.find_spec(name)
        for where in (spec.submodule_search_locations or []) if spec else []:
            paths.add(Path(where).resolve())
    return sorted(paths)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def sandbox_command(
    bwrap: str,
    bundle: Path,
    socket_dir: Path,
    player_args: list[str],
    venv_dir: Path | None = None,
) -> list[str]:
    """The bwrap command line that runs ``python -m orchenv.verify.player`` (module doc);
    with ``venv_dir`` (the bundle's pinned requirements, ``orchenv.verify.requirements``),
    that venv's Python, the venv mounted read-only at its own path."""
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for system in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.lexists(system):
            if os.path.islink(system):
                cmd += ["--symlink", os.readlink(system), system]
            else:
                cmd += ["--ro-bind", system, system]
    for etc in ("/etc/ld.so.cache", "/etc/localtime", "/etc/ssl/certs"):
        cmd += ["--ro-bind-try", etc, etc]
    for folder in _mounts():
        cmd += ["--ro-bind", str(folder), str(folder)]
    cmd += ["--ro-bind", str(bundle.resolve()), "/submission"]
    cmd += ["--bind", str(socket_dir), "/referee"]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/submission"]
    cmd += ["--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin"]
    cmd += ["--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv", "PYTHONNOUSERSITE", "1"]
    python = sys.executable
    if venv_dir is not None:  # after the /tmp tmpfs: the venv may live under /tmp
        where = str(venv_dir.resolve())
        cmd += ["--ro-bind", where, where]
        python = os.path.join(where, "bin", "python")
    # the player runs as a script (-I: no script folder, no PYTHON* variables, no user site),
    # so it needs no orchenv import; the entry point may still import orchenv
    player = str(Path(__file__).resolve().parent / "player.py")
    return [*cmd, python, "-I", player, *player_args]


class _Server:
    """The referee on a Unix socket, in a thread of this process (uvicorn)."""

    def __init__(self, app: Any, uds: str) -> None:
        import uvicorn

        from orchenv.serve.app import WS_MAX_BYTES

        config = uvicorn.Config(app, uds=uds, ws_max_size=WS_MAX_BYTES, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError("the referee server did not start on its Unix socket")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def rerun_entry_point(
    bundle: str | os.PathLike[str],
    board: str | os.PathLike[str],
    key_file: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    task_file: str | os.PathLike[str] | None = None,
    endpoint_key_env: str | None = None,
    endpoint_max_calls: int | None = None,
    endpoint_allow_private: bool = False,
    wheelhouse: str | os.PathLike[str] | None = None,
    index_url: str | None = None,
) -> Rerun:
    """Play ``bundle``'s entry point, sandboxed, on ``board``'s sealed plan against a referee
    (module docstring); the signed record is written to ``out`` (a new folder). A bundle that
    names an OpenAI-compatible endpoint reaches it through the recording proxy
    (``orchenv.verify.endpoint``; ``endpoint_key_env``: the verifier's environment variable
    holding the endpoint's API key, never passed into the sandbox; ``endpoint_allow_private``:
    let the proxy connect to loopback / private addresses too); its calls are signed
    with the record (``endpoint_calls.jsonl``). A bundle with pinned requirements gets them
    installed first into a fresh venv from the maintainer's ``wheelhouse`` or ``index_url``
    (``orchenv.verify.requirements``; hashes required, wheels only, outside the sandbox)."""
    from orchenv.serve.app import build_app
    from orchenv.serve.environment import ServeConfig
    from orchenv.serve.referee import NAME_RE, RecordExtra
    from orchenv.verify import endpoint as ep

    bundle_path, target = Path(bundle), Path(out)
    entry, kwargs = read_entry(bundle_path)
    endpoint = read_endpoint(bundle_path)
    pins = read_pins(bundle_path)
    if pins is None and (wheelhouse is not None or index_url is not None):
        raise ConfigError(
            f"--wheelhouse / --index-url: {bundle} names no requirements in {ENTRY_FILE}; drop them"
        )
    if pins is not None and (wheelhouse is None) == (index_url is None):
        raise ConfigError(
            f"{bundle} pins {len(pins)} requirements: give the wheelhouse (--wheelhouse DIR) "
            "or the index (--index-url URL) to install them from (exactly one)"
        )
    api_key = None
    if endpoint_key_env is not None:
        api_key = os.environ.get(endpoint_key_env)
        if not api_key:
            raise ConfigError(
                f"--endpoint-key-env {endpoint_key_env}: that environment variable is unset or "
                "empty; export the endpoint's API key in it (it never enters the sandbox)"
            )
        if endpoint is None:
            raise ConfigError(
                f"--endpoint-key-env: {bundle} names no endpoint in {ENTRY_FILE}; drop it"
            )
    bwrap = bwrap_path()
    if not NAME_RE.match(target.name):
        raise ConfigError(f"--out {out}: the folder's name is the submission's ({NAME_RE.pattern})")
    if os.path.lexists(target):
        raise ConfigError(f"--out {out} exists: a refereed record is written once; pick a new one")
    secret = [Path(key_file), Path(board), target.parent]
    if task_file is not None:
        secret.append(Path(task_file))
    for folder in [*_mounts(), bundle_path]:
        for path in secret:
            if _inside(path, folder):
                raise ConfigError(
                    f"{path} lies inside {folder}, which the sandbox mounts: keep the key, the "
                    "board file and the runs folder outside the bundle and the Python install"
                )
    spec_env = json.loads(Path(board).read_text(encoding="utf-8")).get("env_id")
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="orchenv-referee-") as sock_dir,
        tempfile.TemporaryDirectory(prefix="orchenv-calls-") as calls_dir,
        contextlib.ExitStack() as stack,
    ):
        os.chmod(sock_dir, 0o700)
        os.chmod(calls_dir, 0o700)
        extra: RecordExtra | None = None
        notes: list[str] = []
        details: dict[str, Any] = {}
        player_extra: list[str] = []
        proxy: ep.RecordingProxy | None = None
        venv_dir: Path | None = None
        if pins is not None:
            from orchenv.verify.requirements import install, requirements_sha256

            venv_dir = Path(calls_dir) / "venv"
            install(pins, venv_dir, wheelhouse=wheelhouse, index_url=index_url)
            notes.append(
                f"with {len(pins)} pinned requirements installed (sha256 hashes checked, "
                "wheels only)"
            )
            details["requirements"] = [f"{p.name}=={p.version}" for p in pins]
            details["requirements_sha256"] = requirements_sha256(pins)
        if endpoint is not None:
            proxy = ep.RecordingProxy(
                endpoint,
                os.path.join(sock_dir, "endpoint.sock"),
                Path(calls_dir) / ep.CALLS_FILE,
                api_key=api_key,
                max_calls=endpoint_max_calls or ep.DEFAULT_MAX_CALLS,
                allow_private=endpoint_allow_private,
            )
            stack.enter_context(proxy)
            notes.insert(0, ep.note(endpoint))
            details.update(
                kind="endpoint" if entry is None else "entry point with an endpoint",
                endpoint=endpoint["base_url"],
                model=endpoint["model"],
                calls=ep.CALLS_FILE,
            )
            public = {k: endpoint[k] for k in ("model", "system", "params") if k in endpoint}
            player_extra = ["--endpoint-socket", "/referee/endpoint.sock"]
            player_extra += ["--endpoint", json.dumps(public)]
        if notes:
            note = notes[0] if endpoint is not None else "re-executed " + notes[0]
            note = " ".join([note, *notes[1:]])
            extra = RecordExtra(
                note=note,
                details=details,
                seal=proxy.seal_into if proxy is not None else None,
            )
        config = ServeConfig(
            env_id=str(spec_env),
            max_sessions=1,
            referee_board=str(board),
            referee_key=str(key_file),
            referee_runs=str(target.parent),
            referee_name=target.name,
            referee_task_file=str(task_file) if task_file is not None else None,
        )
        config.referee_extra = extra  # type: ignore[attr-defined]  # read by serve.app._referee
        app = build_app(config)
        uds = os.path.join(sock_dir, "referee.sock")
        with _Server(app, uds):
            cmd = sandbox_command(
                bwrap,
                bundle_path,
                Path(sock_dir),
                [
                    "--socket",
                    "/referee/referee.sock",
                    "--bundle",
                    "/submission",
                    *(["--entry", entry] if entry is not None else []),
                    "--kwargs",
                    json.dumps(kwargs),
                    "--name",
                    target.name,
                    *player_extra,
                ],
                venv_dir=venv_dir,
            )
            logger.info("sandboxed player: %s", " ".join(cmd))
            with tempfile.TemporaryFile() as err:
                child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
                try:
                    code: int | None = child.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait(30)
                    code = None
                err.seek(0)
                tail = err.read()[-4000:].decode("utf-8", "replace")
            if not os.path.lexists(target):  # it never opened its submission: all count 0
                from orchenv.serve.referee import Referee

                Referee(
                    board,
                    key_file,
                    target.parent,
                    only=target.name,
                    task_file=task_file,
                    extra=extra,
                ).open(target.name).close()
            # the child's session closes when it exits: wait for the referee to sign
            deadline = time.monotonic() + 120
            while not (target / "sealed.json").exists():
                if time.monotonic() > deadline:
                    raise DataError(
                        f"the referee wrote no signed record in {target} (child exit {code}): "
                        f"{tail[-500:]}"
                    )
                time.sleep(0.05)
    from orchenv.serve.referee import read_record

    record = read_record(target)
    return Rerun(
        out=target,
        status=str(record.get("status")),
        exit_code=code,
        stderr_tail=tail,
        seconds=time.monotonic() - started,
        note=extra.note if extra is not None else None,
        calls=(proxy.calls if proxy is not None else None),
    )


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ENTRY_FILE",
    "Rerun",
    "bwrap_path",
    "read_endpoint",
    "read_pins",
    "read_entry",
    "rerun_entry_point",
    "sandbox_command",
]
