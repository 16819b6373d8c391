"""Stable randomness: numbers that depend only on a key, never on Python's hash seed or
the process, so simulated outcomes, task splits and cache names agree across runs,
machines and workers. One hash (BLAKE2b of the key's ``repr``) for all of orchenv."""

from __future__ import annotations

import hashlib


def stable_digest(*key: object, size: int = 8) -> bytes:
    """``size`` bytes that depend only on ``key`` (BLAKE2b of its ``repr``)."""
    return hashlib.blake2b(repr(key).encode(), digest_size=size).digest()


def stable_int(*key: object) -> int:
    """A 64-bit integer that depends only on ``key``."""
    return int.from_bytes(stable_digest(*key), "big")


def stable_uniform(*key: object) -> float:
    """A uniform float in [0, 1) that depends only on ``key``."""
    return stable_int(*key) / 2.0**64


def sealed_int(secret: bytes, *key: object) -> int:
    """A 63-bit integer that depends on ``key`` and a maintainer's ``secret`` (HMAC-SHA256):
    without the secret it cannot be computed or enumerated, so seeds derived from it (a
    board's sealed plan) pick tasks and simulated outcomes nobody can precompute."""
    import hmac

    mac = hmac.new(secret, repr(key).encode(), hashlib.sha256).digest()
    return int.from_bytes(mac[:8], "big") >> 1


#: the prefix of an opaque task id (``seal_task_id``)
SEALED_ID_PREFIX = "sealed-"
_BLOCK = 16


def _secret_bytes(secret: str | bytes) -> bytes:
    return secret if isinstance(secret, bytes) else secret.encode("utf-8")


def _keystream(secret: bytes, iv: bytes, size: int) -> bytes:
    import hmac

    out = b""
    counter = 0
    while len(out) < size:
        out += hmac.new(secret, b"ks" + iv + counter.to_bytes(8, "big"), hashlib.sha256).digest()
        counter += 1
    return out[:size]


def seal_task_id(real_id: str, secret: str | bytes) -> str:
    """An opaque stand-in for ``real_id`` under ``secret`` (a board's sealed-plan secret).

    Deterministic (the same task gets the same opaque id in every run of the plan, so runs
    pair up on the same tasks) and reversible only with the secret (``open_task_id``):
    a synthetic-IV cipher from HMAC-SHA256, the id padded to a multiple of 16 bytes so its
    length tells little. Without the secret the opaque id names no task.
    """
    import base64
    import hmac

    key = _secret_bytes(secret)
    raw = real_id.encode("utf-8", "surrogatepass")
    padded = raw + b"\x00" * (-len(raw) % _BLOCK or (_BLOCK if not raw else 0))
    iv = hmac.new(key, b"iv" + padded, hashlib.sha256).digest()[:16]
    body = bytes(a ^ b for a, b in zip(padded, _keystream(key, iv, len(padded)), strict=True))
    return SEALED_ID_PREFIX + base64.urlsafe_b64encode(iv + body).decode("ascii").rstrip("=")


def open_task_id(opaque_id: str, secret: str | bytes) -> str:
    """The real task id behind ``seal_task_id``'s ``opaque_id`` (``DataError`` when it was
    not sealed with this ``secret`` or is not an opaque id at all)."""
    import base64
    import binascii
    import hmac

    from orchenv.error import DataError

    key = _secret_bytes(secret)
    text = str(opaque_id)
    bad = DataError(
        f"{text[:60]!r} is not a task id sealed with this secret (expected "
        f"'{SEALED_ID_PREFIX}...' from the same board's sealed plan)"
    )
    if not text.startswith(SEALED_ID_PREFIX) or len(text) > 65_536:
        raise bad
    data = text[len(SEALED_ID_PREFIX) :]
    try:
        blob = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        raise bad from None
    iv, body = blob[:16], blob[16:]
    if len(iv) < 16 or len(body) % _BLOCK:
        raise bad
    padded = bytes(a ^ b for a, b in zip(body, _keystream(key, iv, len(body)), strict=True))
    if not hmac.compare_digest(hmac.new(key, b"iv" + padded, hashlib.sha256).digest()[:16], iv):
        raise bad
    return padded.rstrip(b"\x00").decode("utf-8", "surrogatepass")
