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
