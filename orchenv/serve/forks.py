"""Fork handles of ``orchenv serve``: the state of an episode stays on the server.

A session's ``state`` carries ``snapshot``: an opaque, random, expiring handle (``fork-`` and
32 URL-safe characters from ``secrets``) into a server-side table. What the table keeps is the
episode's *recording*, never the env's objects: the seed its reset used, the split, the reset
options, the lifetime state before the reset (``env.lifetime_state()``, e.g. MathRoute's usage
ledger) and the action texts played since. A reset with ``injected_state=HANDLE`` replays that
recording on the session's own env (envs are deterministic under a seed with simulated or
replayed agents: DESIGN.md), so restoring works for every env whose episode can be replayed,
ALFWorld's ctypes game and MultihopQA's shared task included, and reads nothing from the client
but the handle. No pickle crosses the wire or the table.

Each entry is bound to the env id, the server's env arguments and the orchenv version
(``binding``): a handle minted under other arguments is refused. The table holds at most
``capacity`` entries and ``max_chars`` action characters in all (the oldest go first) for
``ttl_s`` seconds each. With ``--workers N`` the
workers share the table through a private folder (mode 0700, one JSON file per handle) so a
handle minted on one worker restores on another; with one worker it is a dict in memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError

logger = logging.getLogger(__name__)

#: handles look like this (anything else is refused before any lookup)
HANDLE_RE = re.compile(r"^fork-[A-Za-z0-9_-]{32}$")
#: the most action characters one recording keeps (beyond: the episode cannot be forked)
MAX_RECORDING_CHARS = 4 * 1024 * 1024
#: the most action characters the in-memory table holds in all (the oldest entries go first)
MAX_TABLE_CHARS = 256 * 1024 * 1024


def _chars(entry: dict[str, Any]) -> int:
    return sum(len(a) for a in entry.get("actions", ()) if isinstance(a, str)) + 256


def binding(env_id: str, arguments: dict[str, Any], version: str) -> str:
    """What a handle is bound to: the env id, the server's env arguments, orchenv's version."""
    text = json.dumps([env_id, arguments, version], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


class ForkTable:
    """Handles -> recordings (see the module docstring); thread-safe."""

    def __init__(
        self,
        bound_to: str,
        capacity: int = 4096,
        ttl_s: float = 600.0,
        folder: str | None = None,
        max_chars: int = MAX_TABLE_CHARS,
    ) -> None:
        if capacity < 1 or ttl_s <= 0:
            raise ConfigError("the fork table needs capacity >= 1 and a ttl > 0")
        self.bound_to = bound_to
        self.capacity = capacity
        self.ttl_s = ttl_s
        self.folder = Path(folder) if folder else None
        self.max_chars = max_chars
        self._chars = 0
        self._memory: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    # -- minting -------------------------------------------------------------------------------
    def put(self, recording: dict[str, Any]) -> str:
        """Store ``recording`` (JSON-ready) and return a fresh handle."""
        handle = "fork-" + secrets.token_urlsafe(24)
        entry = {"binding": self.bound_to, "expires": time.time() + self.ttl_s, **recording}
        if self.folder is not None:
            self._put_file(handle, entry)
            return handle
        size = _chars(entry)
        with self._lock:
            self._expire_memory()
            while self._memory and (
                len(self._memory) >= self.capacity or self._chars + size > self.max_chars
            ):
                _, (_, old) = self._memory.popitem(last=False)
                self._chars -= _chars(old)
            self._memory[handle] = (entry["expires"], entry)
            self._chars += size
        return handle

    def _put_file(self, handle: str, entry: dict[str, Any]) -> None:
        assert self.folder is not None
        data = json.dumps(entry)
        now = time.time()
        files = []
        for path in self.folder.glob("fork-*.json"):
            try:
                stat = path.stat()
            except OSError:
                continue  # another worker removed it
            if stat.st_mtime + self.ttl_s < now:
                path.unlink(missing_ok=True)
            else:
                files.append((stat.st_mtime, stat.st_size, path))
        files.sort()
        total = sum(size for _, size, _ in files)
        while files and (len(files) >= self.capacity or total + len(data) > self.max_chars):
            _, size, path = files.pop(0)  # the oldest first
            path.unlink(missing_ok=True)
            total -= size
        tmp = self.folder / f".{handle}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(data)
        os.replace(tmp, self.folder / f"{handle}.json")

    # -- lookup --------------------------------------------------------------------------------
    def get(self, handle: Any) -> dict[str, Any]:
        """The recording behind ``handle`` (``ConfigError`` when it is not one this server
        minted under its current arguments, or it expired)."""
        if not isinstance(handle, str):
            raise ConfigError(
                f"injected_state must be the 'snapshot' handle of a session's state (a string "
                f"'fork-...'), got {type(handle).__name__}"
            )
        if not HANDLE_RE.match(handle):
            raise ConfigError(
                "injected_state is not a fork handle: pass the 'snapshot' string a state of "
                "this server returned ('fork-' and 32 characters); snapshots are no longer "
                "env data, the episode stays on the server"
            )
        entry = self._lookup(handle)
        if entry is None or entry.get("expires", 0) < time.time():
            raise ConfigError(
                f"unknown or expired fork handle (handles live {self.ttl_s:g} s and at most "
                f"{self.capacity} at once, on the server that minted them): ask a session's "
                "state again for a fresh one"
            )
        if entry.get("binding") != self.bound_to:
            raise ConfigError(
                "this fork handle was minted for another env id, other env arguments or "
                "another orchenv version than this server's"
            )
        return entry

    def _lookup(self, handle: str) -> dict[str, Any] | None:
        if self.folder is not None:
            try:
                with open(self.folder / f"{handle}.json", encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                return None
            return data if isinstance(data, dict) else None
        with self._lock:
            item = self._memory.get(handle)
        return None if item is None else item[1]

    def _expire_memory(self) -> None:
        now = time.time()
        while self._memory:
            handle, (expires, _) = next(iter(self._memory.items()))
            if expires >= now:
                break
            self._chars -= _chars(self._memory.pop(handle)[1])

    def __len__(self) -> int:
        if self.folder is not None:
            return len(list(self.folder.glob("fork-*.json")))
        with self._lock:
            return len(self._memory)
