"""A tiny random Qwen2 model with its own tokenizer, built in seconds for offline tests.

Why: the ``hf`` backend must be tested end to end (chat template, batching,
token counting, generation) without downloading weights. The model is random,
so its answers are nonsense, but every code path of a real causal LM runs.
The builder lives in ``orchenv.agents.grpo.tiny`` (the GRPO smoke run of
``orchenv reproduce 000`` uses it too); this module keeps one per test session.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

from orchenv.agents.grpo.tiny import BOS, CHAT_TEMPLATE, EOS, PAD, SPECIAL_TOKENS, build_tiny_qwen2

__all__ = [
    "BOS",
    "CHAT_TEMPLATE",
    "EOS",
    "PAD",
    "SPECIAL_TOKENS",
    "build_tiny_qwen2",
    "tiny_qwen2_path",
]


@lru_cache(maxsize=1)
def tiny_qwen2_path() -> Path:
    """One tiny model per test session, in a temporary directory removed at exit."""
    tmp = tempfile.mkdtemp(prefix="orchenv-tiny-qwen2-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    return build_tiny_qwen2(tmp)
