"""Token ids for servers that return sampled tokens as text only (llama.cpp's OpenAI endpoint).

A trainer that learns from served generations needs the ids the server sampled, in the
server's own segmentation: re-tokenising the completion text can split it differently and
then the log-probabilities no longer line up with the ids. llama-cpp-python returns each
sampled token's text (``logprobs.content[i].token``) but not its id; since the agent's own
tokenizer is the model's (the GGUF's here), each piece maps back to exactly one vocabulary
entry, except pieces several ids decode to (partial UTF-8 bytes, duplicates), which stay
``None``. The result is checked: ``verified`` says the ids decode to the completion text.

Hand-written because neither transformers nor tokenizers offers a piece-text -> id lookup
(``convert_tokens_to_ids`` wants the vocabulary's internal form, e.g. ``ĠParis``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

#: vocabularies above this size are not indexed (building the map decodes every id)
MAX_VOCAB = 1_000_000


class PieceIndex:
    """``piece text -> id`` for one Hugging Face tokenizer, built on first use."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._map: dict[str, int | None] | None = None
        self._lock = threading.Lock()

    def _build(self) -> dict[str, int | None]:
        size = len(self.tokenizer)
        if size > MAX_VOCAB:
            return {}
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        pieces: dict[str, int | None] = {}
        for token_id in range(size):
            piece = self.tokenizer.decode([token_id], skip_special_tokens=False)
            if token_id in special and piece in pieces:
                continue  # a special token never shadows a text piece
            pieces[piece] = None if piece in pieces else token_id
        return pieces

    def lookup(self) -> dict[str, int | None]:
        with self._lock:
            if self._map is None:
                self._map = self._build()
            return self._map

    def ids(self, pieces: Sequence[str]) -> list[int | None]:
        table = self.lookup()
        return [table.get(piece) for piece in pieces]

    def decodes_to(self, ids: Sequence[int | None], text: str) -> bool:
        if not ids or any(i is None for i in ids):
            return False
        decoded = self.tokenizer.decode([int(i) for i in ids if i is not None])
        return bool(decoded == text)


def fill_token_ids(
    logprobs: Mapping[str, Any], index: PieceIndex | None, text: str
) -> dict[str, Any]:
    """``logprobs`` with ``token_ids`` filled from ``index`` where the server gave none, and
    ``token_ids_source`` (``"server"``, ``"tokenizer"`` or ``None``) plus ``token_ids_verified``
    (the ids decode to ``text``; for server ids it is not checked and left ``None``)."""
    out = dict(logprobs)
    ids = list(out.get("token_ids") or [])
    if ids and all(i is not None for i in ids):
        return {**out, "token_ids_source": "server", "token_ids_verified": None}
    if index is None:
        return {**out, "token_ids_source": None, "token_ids_verified": False}
    mapped = index.ids([str(t) for t in out.get("tokens", [])])
    merged = [
        given if given is not None else found
        for given, found in zip(ids or mapped, mapped, strict=True)
    ]
    return {
        **out,
        "token_ids": merged,
        "token_ids_source": "tokenizer",
        "token_ids_verified": index.decodes_to(merged, text),
    }
