"""What crosses the wire: JSON-safe info without ground truth, and signed env snapshots.

Written by hand because no library does these two orchenv-specific things:

* ``wire_safe`` turns an env's ``info`` into plain JSON (numpy scalars and arrays to
  Python numbers and lists, non-finite floats to ``None``, lone surrogates escaped,
  tuples and sets to lists, anything else to its ``repr``) and drops every
  ``privileged`` key at any depth: the ground truth the audit and skill probes read
  in process must never reach a remote learner.
* ``export_snapshot`` / ``import_snapshot`` carry an ``OrchestrationEnv``'s state
  from one session to another (``env.fork()`` semantics across processes): the
  env's attributes are pickled with its shared collaborators (pool, task source,
  catalogs: ``_shared_attrs``) replaced by references to the receiving env's own,
  compressed, and signed with HMAC-SHA256 under the server's key. A snapshot whose
  signature does not verify is refused before it is unpickled, so a client can only
  hand back what this server (or a worker sharing its key) exported.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import math
import pickle
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from orchenv.error import ConfigError

#: keys never sent to a client, at any depth of ``info``
PRIVATE_KEYS = frozenset({"privileged"})
#: deeper structures are cut (a ``"<truncated: too deep>"`` marker)
MAX_DEPTH = 32
#: the longest snapshot string ``import_snapshot`` reads (base64 characters)
MAX_SNAPSHOT_CHARS = 16 * 1024 * 1024
_SNAPSHOT_VERSION = b"orchenv-snapshot-1"


def safe_text(text: str) -> str:
    """``text`` as valid UTF-8 (lone surrogates become ``\\udXXX`` escapes)."""
    if text.isascii():  # the common case, without encoding a copy
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def wire_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready Python (see the module docstring); ``privileged`` dropped.

    Runs on every served reset and step, so the exact built-in types an env's ``info``
    is made of (dict, list, str, int, float, bool, None) are dispatched first by
    ``type(...) is``; everything else (subclasses, numpy, tuples, sets, other objects)
    takes the general path. Both give the same result (``tests/test_serve_wire.py``).
    """
    if depth > MAX_DEPTH:
        return "<truncated: too deep>"
    cls = type(value)
    if cls is str:
        return value if value.isascii() else safe_text(value)
    if cls is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                k = safe_text(str(k))
            elif not k.isascii():
                k = safe_text(k)
            if k not in PRIVATE_KEYS:
                out[k] = wire_safe(v, depth + 1)
        return out
    if cls is list:
        return [wire_safe(v, depth + 1) for v in value]
    if value is None or cls is bool or cls is int:
        return value
    if cls is float:
        return value if math.isfinite(value) else None
    return _wire_safe_general(value, depth)


def _wire_safe_general(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return wire_safe(value.item(), depth)
    if isinstance(value, np.ndarray):
        return wire_safe(value.tolist(), depth)
    if isinstance(value, Mapping):
        return {
            safe_text(str(k)): wire_safe(v, depth + 1)
            for k, v in value.items()
            if str(k) not in PRIVATE_KEYS
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [wire_safe(v, depth + 1) for v in value]
    return safe_text(repr(value)[:10_000])


def _shared_objects(env: Any) -> dict[str, Any]:
    """The env's collaborators that a snapshot references instead of copying."""
    names = list(getattr(env, "_shared_attrs", ()))
    for name in ("_pool_arg", "_task_source_arg"):  # a built pool passed in (record/replay)
        if not isinstance(getattr(env, name, None), str | type(None)):
            names.append(name)
    return {name: getattr(env, name) for name in names if getattr(env, name, None) is not None}


class _SnapshotPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, shared: Mapping[str, Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._refs = {id(obj): name for name, obj in shared.items()}

    def persistent_id(self, obj: Any) -> str | None:
        return self._refs.get(id(obj))


class _SnapshotUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, target: Any) -> None:
        super().__init__(file)
        self._target = target

    def persistent_load(self, pid: Any) -> Any:
        # the receiving env's own collaborator (None: it builds one lazily, as configured)
        return getattr(self._target, str(pid), None)


def _sign(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, _SNAPSHOT_VERSION + payload, hashlib.sha256).digest()


def export_snapshot(env: Any, key: bytes, env_id: str, extra: Any = None) -> str:
    """The env's state (and ``extra``, e.g. the last observation) as a signed string that
    ``import_snapshot`` restores."""
    buffer = io.BytesIO()
    _SnapshotPickler(buffer, _shared_objects(env)).dump((env_id, env.__dict__, extra))
    payload = zlib.compress(buffer.getvalue(), 6)
    return base64.urlsafe_b64encode(_sign(key, payload) + payload).decode("ascii")


def import_snapshot(env: Any, snapshot: Any, key: bytes, env_id: str) -> Any:
    """Put ``env`` in the state ``snapshot`` was exported from and return its ``extra``
    (``ConfigError`` when the snapshot is not a string this server signed for ``env_id``)."""
    if not isinstance(snapshot, str):
        raise ConfigError(
            f"injected_state must be the 'snapshot' string of a session's state, got "
            f"{type(snapshot).__name__}"
        )
    if len(snapshot) > MAX_SNAPSHOT_CHARS:
        raise ConfigError(f"injected_state is longer than {MAX_SNAPSHOT_CHARS:,} characters")
    try:
        raw = base64.urlsafe_b64decode(snapshot.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise ConfigError("injected_state is not a snapshot (bad base64)") from exc
    signature, payload = raw[:32], raw[32:]
    if len(signature) < 32 or not hmac.compare_digest(signature, _sign(key, payload)):
        raise ConfigError(
            "injected_state was not exported by this server (bad signature): pass the "
            "'snapshot' of a state this server (or a worker with the same --state-key) sent"
        )
    snap_id, state, extra = _SnapshotUnpickler(io.BytesIO(zlib.decompress(payload)), env).load()
    if snap_id != env_id:
        raise ConfigError(f"injected_state is a snapshot of {snap_id!r}, not {env_id!r}")
    shared = {name: getattr(env, name, None) for name in getattr(env, "_shared_attrs", ())}
    env.__dict__.update(state)
    for name, obj in shared.items():  # keep the receiver's built collaborators
        if obj is not None and state.get(name) is None:
            setattr(env, name, obj)
    return extra
