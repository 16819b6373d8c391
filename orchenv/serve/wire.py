"""What crosses the wire: JSON-safe info without ground truth.

Written by hand because no library does this orchenv-specific thing:

* ``wire_safe`` turns an env's ``info`` into plain JSON (numpy scalars and arrays to
  Python numbers and lists, non-finite floats to ``None``, lone surrogates escaped,
  tuples and sets to lists, anything else to its ``repr`` with memory addresses
  (`` at 0x...``) removed: they leak the server's address layout and make the
  output differ between runs) and drops every
  ``privileged`` key at any depth: the ground truth the audit and skill probes read
  in process must never reach a remote learner.

Env state never crosses the wire: fork is an opaque handle into the server's table
(``orchenv.serve.forks``), and nothing a client sends is unpickled.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

#: keys never sent to a client, at any depth of ``info``
PRIVATE_KEYS = frozenset({"privileged"})
#: deeper structures are cut (a ``"<truncated: too deep>"`` marker)
MAX_DEPTH = 32


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
    return safe_repr(value)


_ADDRESS_RE = re.compile(r" at 0x[0-9a-fA-F]+")


def safe_repr(value: Any) -> str:
    """``repr(value)``, at most 10,000 characters, without memory addresses, valid UTF-8."""
    return safe_text(_ADDRESS_RE.sub("", repr(value)[:10_000]))
