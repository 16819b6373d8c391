"""The discrete view's text features stay bit-identical (issue 40 item 8).

``hashed_ngrams`` feeds every policy trained on ``make_discrete_env`` (the saved policies of
``envs/*/saved_policy.py``, the PPO rows of ``docs/leaderboard``, the reproduction pages), so
speeding it up must not move a single bit. ``tests/data/hashed_ngrams_golden.json.gz`` holds
observation texts of five envs (MathRoute, BudgetRoute, OrchMAS, Puppeteer, MultihopQA; the
joined non-system messages the view hashes) with the SHA-256 of their feature vectors under
the feature options the shipped policies use, recorded by the implementation of commit
df61962 (before issue 40's speed work); hostile strings built here (empty, whitespace only,
paragraph breaks in every place, case folding that changes length, Unicode digits and
spaces, 100 kB texts, thousands of paragraphs) were recorded by the same code. A slow,
plain-Python copy of that implementation (:func:`reference`) is the oracle for generated
strings.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from orchenv.discrete import ObservationFeatures, hashed_ngrams, make_discrete_env

GOLDEN = Path(__file__).parent / "data" / "hashed_ngrams_golden.json.gz"

#: (name, kwargs of hashed_ngrams): the shipped policies' options and some odd ones
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "mathroute": {"n_features": 256, "raw_numbers": True},
    "budgetroute": {"n_features": 64},
    "orchmas": {"n_features": 128, "word_ngrams": (1, 2), "char_ngrams": ()},
    "odd": {"n_features": 7, "word_ngrams": (1, 2, 3), "char_ngrams": (2, 4)},
    "one": {"n_features": 1, "word_ngrams": (1,), "char_ngrams": (1,), "damp": False},
    "undamped": {"n_features": 32, "word_ngrams": (3,), "char_ngrams": (3, 5), "damp": False},
}


def hostile_texts() -> list[str]:
    """Strings that stress every edge of the text featuriser (no lone surrogates: the
    recorded implementation raised on them; see the surrogate test)."""
    texts = [
        "",
        " ",
        "\n",
        "\n\n",
        "\n\n\n",
        "\n\n\n\n",
        "a\n\nb",
        "\n\na",
        "a\n\n",
        "a\n\n\n\nb",
        "a \n\n b",
        "ab\n\ncd\n\nef",
        "x\n\ny\n\nz\n\nw",
        "ΑΣ\n\nΣ ΟΔΟΣ Σ\n\nΑΣ.",
        "İstanbul\n\nİİ\n\nİ",
        "ﬁ ß ẞ ǅ Ǆ\n\nﬃ",
        "١٢٣ ٤.٥\n\n٦ 12.\n\n5 3.\n\n.4 7.25",
        "a\\\n\nb \\frac\n\n\\x \\\\ \\Alpha",
        "\x1c\x1d\x1e\x1f a\x85b\u2028c\u3000d\n\n\t\x0b\x0ce\u00a0f",
        "Problem:\n" + "x = 12 + 3.5 \\cdot y\n\n" * 5000,
        "a" * 100_000,
        "\n\n".join(str(i) for i in range(3000)),
        "\n\n".join(["same paragraph 12"] * 50),
        "<search>q</search>\n<information>\n$42$\n</information>\n\n(Round 3 of 3.)",
        "\x00\n\n\x00 \x00",
        "🙂🙂 x\n\n🙂",
    ]
    alphabet = list("aAbZz09 .\\$\n\n\t,;:()[]{}-+=^_") + ["\n\n", "ΣΑ", "İ", "٣", "\u3000", "é"]
    rng = random.Random(40)
    for _ in range(120):
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120))))
    return texts


def digest(vec: np.ndarray) -> str:
    assert vec.dtype == np.float32 and vec.ndim == 1
    return hashlib.sha256(vec.tobytes()).hexdigest()[:24]


def golden() -> dict[str, Any]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return json.load(f)


_TOKEN_RE = re.compile(r"\\[a-z]+|[a-z]+|\d+(?:\.\d+)?|[^\sa-z\d]")


def reference(
    text: str,
    n_features: int = 256,
    *,
    word_ngrams: tuple[int, ...] = (1, 2),
    char_ngrams: tuple[int, ...] = (3,),
    raw_numbers: bool = False,
    damp: bool = True,
) -> np.ndarray:
    """The recorded implementation written out plainly: every gram counted, then hashed."""
    vec = np.zeros(n_features, dtype=np.float64)
    if text:
        lower = text.lower()
        words = _TOKEN_RE.findall(lower)
        shapes = [f"#{len(w)}" if w[0].isdigit() else w for w in words]
        grams: Counter[str] = Counter()
        for n in word_ngrams:
            for i in range(len(shapes) - n + 1):
                grams[f"w{n}:" + " ".join(shapes[i : i + n])] += 1
        if raw_numbers:
            for w, s in zip(words, shapes, strict=True):
                if w != s:
                    grams["w1:" + w] += 1
        flat = " ".join(lower.split())
        for n in char_ngrams:
            for i in range(len(flat) - n + 1):
                grams["c:" + flat[i : i + n]] += 1
        for gram, count in grams.items():
            value = int.from_bytes(
                hashlib.blake2b(gram.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                "little",
            )
            vec[(value >> 1) % n_features] += count if value & 1 else -count
    out = vec.astype(np.float32)
    if damp:
        out = np.sign(out) * np.log1p(np.abs(out))
    norm = float(np.linalg.norm(out))
    return (out / norm if norm > 0 else out).astype(np.float32)


def test_env_observations_keep_their_recorded_features() -> None:
    data = golden()
    checked = 0
    for env_id, entries in data["envs"].items():
        for entry in entries:
            for name, expected in entry["digests"].items():
                got = digest(hashed_ngrams(entry["text"], **CONFIGS[name]))
                assert got == expected, (env_id, name, entry["text"][:200])
                checked += 1
    assert checked >= 175 * len(CONFIGS)


def reference_text_statistics(text: str) -> np.ndarray:
    """MathRoute's ``text_statistics`` as commit df61962 wrote it (before issue 40's speed
    work): the oracle for the faster one."""
    import math

    from orchenv.envs.mathroute.features import (
        _LATEX_RE,
        _NUMBER_RE,
        _OPERATOR_RE,
        MAX_STAT_CHARS,
    )

    head = text[:MAX_STAT_CHARS]
    numbers = _NUMBER_RE.findall(head)
    logs = [math.log10(1.0 + float(x)) for x in numbers]
    return np.array(
        [
            math.log1p(len(text)) / 8.0,
            math.log1p(len(head.split())) / 6.0,
            math.log1p(sum(c.isdigit() for c in head)) / 5.0,
            math.log1p(len(numbers)) / 4.0,
            math.log1p(len(set(numbers))) / 4.0,
            max(logs, default=0.0) / 6.0,
            (sum(logs) / len(logs) if logs else 0.0) / 4.0,
            math.log1p(len(_OPERATOR_RE.findall(head))) / 4.0,
            math.log1p(len(_LATEX_RE.findall(head))) / 4.0,
            math.log1p(head.count("\n")) / 4.0,
            float("." in "".join(numbers)),
            float("%" in head),
        ],
        dtype=np.float32,
    )


def test_mathroute_text_statistics_are_the_recorded_ones() -> None:
    from orchenv.envs.mathroute.features import text_statistics

    texts = [x["text"] for e in golden()["envs"].values() for x in e]
    texts += [*hostile_texts(), "x² + ³ ١٢ 42", "no digits", "½ ⅓ 12.5%"]
    for text in texts:
        for part in {text, *text.split("\n\n")}:
            assert np.array_equal(text_statistics(part), reference_text_statistics(part)), part[:80]


def test_hostile_texts_keep_their_recorded_features() -> None:
    recorded = golden()["hostile"]
    texts = hostile_texts()
    assert len(recorded) == len(texts)
    for text, digests in zip(texts, recorded, strict=True):
        for name, expected in digests.items():
            got = digest(hashed_ngrams(text, **CONFIGS[name]))
            assert got == expected, (name, text[:200])


def test_repeated_calls_and_shared_paragraphs_give_the_same_features() -> None:
    # caches (per gram, per paragraph, per text) must not change a value: call in an order
    # that reuses paragraphs across texts and configs, twice
    texts = hostile_texts()[:40] + [
        t for e in golden()["envs"].values() for t in [x["text"] for x in e][:10]
    ]
    for _ in range(2):
        for text in texts:
            for options in CONFIGS.values():
                assert np.array_equal(hashed_ngrams(text, **options), reference(text, **options))


def test_reference_matches_the_recorded_digests() -> None:
    # the oracle itself is the recorded implementation (else the property test proves nothing)
    entry = golden()["envs"]["orch/MathRoute-v0"][3]
    for name, expected in entry["digests"].items():
        assert digest(reference(entry["text"], **CONFIGS[name])) == expected


def test_lone_surrogates_do_not_crash() -> None:
    for text in ["\ud800", "a \udfff b\n\nc", "\n\n\ud800\n\n" * 3]:
        for options in CONFIGS.values():
            vec = hashed_ngrams(text, **options)
            assert np.isfinite(vec).all()
            assert np.array_equal(vec, reference(text, **options))


def test_view_observations_equal_hashing_the_joined_text() -> None:
    # the wrapper's ngrams block is hashed_ngrams of the joined non-system messages, step
    # after step (its per-text cache and any per-paragraph reuse give the same vector)
    env = make_discrete_env("orch/MathRoute-v0", raw_numbers=True)
    view = env
    while not isinstance(view, ObservationFeatures):
        view = view.env
    obs, info = env.reset(seed=3)
    for i in range(30):
        text = "\n\n".join(m["content"] for m in info["messages"] if m.get("role") != "system")
        want = reference(text, 256, raw_numbers=True)
        base = env.unwrapped
        # the whole vector, assembled the plain way (concatenate, then clip)
        whole = np.concatenate(
            [
                want,
                np.array([info["turn"] / base.max_turns], dtype=np.float32),
                np.asarray(info["action_mask"], dtype=np.float32),
                np.asarray(base.observation_features(), dtype=np.float32),
            ]
        )
        assert np.array_equal(obs, np.clip(whole, -10, 10).astype(np.float32))
        options = np.flatnonzero(env.action_masks())
        obs, _, term, trunc, info = env.step(int(options[i % len(options)]))
        if term or trunc:
            obs, info = env.reset()


def test_tables_past_their_bounds_start_over_and_keep_the_features(monkeypatch) -> None:
    # tiny bounds: every table (gram codes, packed char grams, shapes, paragraphs) fills and
    # starts over many times; values must not change
    import orchenv.discrete as discrete

    for name, size in [
        ("_CODES_MAX", 40),
        ("_SHAPES_MAX", 10),
        ("_PARAGRAPH_CACHE_SIZE", 3),
        ("_PARAGRAPH_CACHE_CHARS", 60),
        ("_DEDUPE_CHARS", 50),  # most paragraphs counted by distinct gram
    ]:
        monkeypatch.setattr(discrete, name, size)
    monkeypatch.setattr(discrete, "_CODES", {})
    monkeypatch.setattr(discrete, "_PACKED", {})
    monkeypatch.setattr(discrete, "_SHAPES", {})
    monkeypatch.setattr(discrete, "_PARAGRAPHS", {})
    texts = [x["text"] for e in golden()["envs"].values() for x in e[:8]] + hostile_texts()[30:70]
    for _ in range(2):
        for text in texts:
            for options in (CONFIGS["mathroute"], CONFIGS["odd"]):
                assert np.array_equal(hashed_ngrams(text, **options), reference(text, **options))


def test_threads_hashing_at_once_get_the_plain_features() -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [x["text"] for e in golden()["envs"].values() for x in e[:12]] * 2
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda t: hashed_ngrams(t, 48, char_ngrams=(1, 2, 3)), texts))
    for text, vec in zip(texts, got, strict=True):
        assert np.array_equal(vec, reference(text, 48, char_ngrams=(1, 2, 3)))


def test_paragraph_table_memory_is_bounded_whatever_n_features() -> None:
    import orchenv.discrete as discrete

    texts = [f"paragraph {i}\n\nsecond part {i}" for i in range(40)]
    for text in texts:  # 8 MB of counts per paragraph at this size
        vec = hashed_ngrams(text, 1 << 20, char_ngrams=())
        assert vec.shape == (1 << 20,)
        assert discrete._PARAGRAPH_BYTES <= discrete._PARAGRAPH_BUDGET
    held = sum(c.vector.nbytes for c in discrete._PARAGRAPHS.values())
    assert held <= discrete._PARAGRAPH_BUDGET
    assert np.array_equal(hashed_ngrams(texts[0], 64), reference(texts[0], 64))


def test_the_view_keeps_no_huge_observation_text() -> None:
    env = make_discrete_env("orch/MathRoute-v0")
    view = env
    while not isinstance(view, ObservationFeatures):
        view = view.env
    huge = "1 + 1 = 2. " * 200_000  # 2.2 MB
    vec = view._ngrams(huge)
    assert np.array_equal(vec, hashed_ngrams(huge))
    assert huge not in view._cache and "short text" not in view._cache
    view._ngrams("short text")
    assert "short text" in view._cache
