"""Token ids recovered from the piece texts a llama.cpp-style server returns."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from tiny_model import tiny_qwen2_path  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from orchenv.backends.token_ids import PieceIndex, fill_token_ids  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(tiny_qwen2_path()), local_files_only=True)


def served(tokenizer, text):
    """What a server that returns token texts only sends back for ``text``."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    return ids, {"tokens": pieces, "logprobs": [-0.5] * len(ids), "token_ids": [None] * len(ids)}


def test_pieces_map_back_to_the_sampled_ids_and_are_verified(tokenizer):
    text = "Route to the strongest agent: 12 + 30 = 42."
    ids, logprobs = served(tokenizer, text)
    out = fill_token_ids(logprobs, PieceIndex(tokenizer), text)
    assert out["token_ids"] == ids
    assert out["token_ids_source"] == "tokenizer" and out["token_ids_verified"] is True
    assert out["logprobs"] == logprobs["logprobs"]


def test_server_ids_are_kept_and_unknown_pieces_stay_none(tokenizer):
    given = {"tokens": ["a", "b"], "logprobs": [-1.0, -2.0], "token_ids": [5, 6]}
    out = fill_token_ids(given, PieceIndex(tokenizer), "ab")
    assert out["token_ids"] == [5, 6] and out["token_ids_source"] == "server"
    text = "hello"
    _, logprobs = served(tokenizer, text)
    logprobs["tokens"] = [*logprobs["tokens"], "\x00not-a-piece\x00"]
    logprobs["token_ids"].append(None)
    logprobs["logprobs"].append(-1.0)
    out = fill_token_ids(logprobs, PieceIndex(tokenizer), text + "\x00not-a-piece\x00")
    assert out["token_ids"][-1] is None and out["token_ids_verified"] is False


def test_without_a_tokenizer_ids_are_reported_missing():
    out = fill_token_ids({"tokens": ["x"], "logprobs": [-1.0], "token_ids": [None]}, None, "x")
    assert out["token_ids"] == [None]
    assert out["token_ids_source"] is None and out["token_ids_verified"] is False


def test_pieces_several_ids_decode_to_are_ambiguous():
    class TwoWays:
        all_special_ids: list[int] = []

        def __len__(self):
            return 3

        def decode(self, ids, skip_special_tokens=False):
            return "".join({0: "a", 1: "a", 2: "b"}[i] for i in ids)

    assert PieceIndex(TwoWays()).ids(["a", "b", "c"]) == [None, 2, None]


def test_the_openai_backend_fills_ids_from_the_agents_tokenizer(tokenizer):
    """A llama.cpp-style choice (token texts, no ids) gets ids from ``tokenizer=``."""
    from orchenv.backends.openai_compat import OpenAICompatBackend

    text = "Ask the middle agent."
    ids, logprobs = served(tokenizer, text)
    choice = {
        "message": {"content": text},
        "logprobs": {
            "content": [
                {"token": t, "logprob": lp}
                for t, lp in zip(logprobs["tokens"], logprobs["logprobs"], strict=True)
            ]
        },
    }
    backend = OpenAICompatBackend(
        base_url="http://127.0.0.1:9/v1", tokenizer=str(tiny_qwen2_path())
    )
    try:
        out = backend._logprobs_with_ids(choice, text)["logprobs"]
    finally:
        backend.close()
    assert out["token_ids"] == ids and out["token_ids_verified"] is True
    plain = OpenAICompatBackend(base_url="http://127.0.0.1:9/v1")
    try:
        assert plain._logprobs_with_ids(choice, text)["logprobs"]["token_ids_source"] is None
        assert plain._logprobs_with_ids({"message": {"content": text}}, text) == {}
    finally:
        plain.close()
