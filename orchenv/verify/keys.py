"""The board's key: an HMAC-SHA256 secret that signs verdicts (``orchenv verify --key``) and
that the leaderboard checks (``orchenv leaderboard --key``).

A ``verified.json`` carries a ``seal_sha256`` anyone can recompute after an edit, so a board
cannot trust it; it trusts a verdict only when its ``signature`` is the HMAC of the verdict's
body under the board's key, which only the maintainer holds (never in a bundle), or when it
verified the bundle itself (``orchenv leaderboard --verify``).

The key file holds 64 hex characters (32 random bytes), written by ``write_key`` /
``orchenv board key FILE`` with mode 0600.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError

#: the field of verified.json holding the HMAC-SHA256 (hex) of the rest of the verdict
SIGNATURE = "signature_hmac_sha256"
#: bytes of randomness in a new key
KEY_BYTES = 32
_MAX_KEY_FILE = 4096


def write_key(path: str | os.PathLike[str]) -> Path:
    """Write a new random key to ``path`` (mode 0600); refuses to replace an existing file."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise ConfigError(
            f"{target} exists: a board key is never overwritten (verdicts signed with it would "
            "stop verifying); choose another path or delete it on purpose"
        ) from exc
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_hex(KEY_BYTES) + "\n")
    return target


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The key in ``path`` (a regular file of at least 32 hex characters; ``DataError``
    naming the fix otherwise)."""
    from orchenv.eval.rundir import read_regular

    raw = read_regular(Path(path), _MAX_KEY_FILE).strip()
    try:
        key = bytes.fromhex(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(
            f"{path} is not a board key (hex characters); make one with `orchenv board key FILE`"
        ) from exc
    if len(key) < 16:
        raise DataError(f"{path} holds {len(key)} key bytes; a board key needs at least 16")
    return key


def _canonical(body: Mapping[str, Any]) -> bytes:
    payload = {k: v for k, v in body.items() if k != SIGNATURE}
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def sign(body: Mapping[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex) of ``body`` without its signature field, canonical JSON."""
    return hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()


def signed_by(body: Mapping[str, Any], key: bytes) -> bool:
    """Whether ``body`` carries a signature made with ``key`` (constant-time compare)."""
    got = body.get(SIGNATURE)
    return isinstance(got, str) and hmac.compare_digest(got, sign(body, key))


__all__ = ["SIGNATURE", "read_key", "sign", "signed_by", "write_key"]
