"""``orchmas-qa``: short-answer questions over a synthetic knowledge base of made-up countries."""

from __future__ import annotations

import numpy as np

from orchenv.seeding import stable_uniform
from orchenv.tasks import ListTaskSource, Task

_SYLLABLES = (
    "ar", "bel", "cor", "dan", "el", "fir", "gal", "hes", "ir", "jor", "kal", "lum", "mar",
    "nor", "os", "pel", "quin", "ros", "sel", "tor", "ul", "vak", "wen", "yor", "zem",
)  # fmt: skip
_CAPITAL_FORMS = ("{}", "Port {}", "New {}", "{} City", "San {}", "{}grad")
_LANG_SUFFIX = ("ish", "ic", "ese", "an")
_CURRENCY = ("crown", "mark", "dinar", "florin", "real", "lira", "shilling", "peso")
_QUESTIONS = (
    ("capital", "geography", "What is the capital of {}?"),
    ("currency", "economics", "Which currency is used in {}?"),
    ("language", "linguistics", "What language is mainly spoken in {}?"),
)


def _name(rng: np.random.Generator, n: int) -> str:
    return "".join(str(rng.choice(_SYLLABLES)) for _ in range(n)).capitalize()


def _knowledge_base(n_countries: int, seed: int) -> list[dict[str, str]]:
    """One row per country: its name, capital, currency and language."""
    rng = np.random.default_rng(seed)
    names: list[str] = []
    while len(names) < n_countries:
        name = _name(rng, int(rng.integers(2, 4)))
        if name not in names:
            names.append(name)
    kb = []
    for name in names:
        capital = str(rng.choice(_CAPITAL_FORMS)).format(_name(rng, 2))
        currency = f"{name[:4]}an {rng.choice(_CURRENCY)}"
        language = name[:5] + str(rng.choice(_LANG_SUFFIX))
        kb.append({"country": name, "capital": capital, "currency": currency, "language": language})
    return kb


def orchmas_qa_source(*, n_countries: int = 120, seed: int = 0) -> ListTaskSource:
    """Short-answer questions over a synthetic knowledge base of made-up countries.

    Each country has a capital (some multi-word, e.g. "Port Elra"), a currency
    ("Velan crown") and a language ("Velanish"). Questions: "What is the capital
    of X?" (domain geography), "Which currency is used in X?" (economics),
    "What language is mainly spoken in X?" (linguistics). ``meta`` holds
    ``type``/``domain``, ``difficulty`` (hash-uniform), and ``distractors``
    (the same attribute of other countries, for wrong simulated replies).
    Countries 0..79% go to "train", the rest to "test".
    """
    kb = _knowledge_base(n_countries, seed)
    cut = int(0.8 * n_countries)
    splits: dict[str, list[Task]] = {"train": [], "test": []}
    for i, row in enumerate(kb):
        split = "train" if i < cut else "test"
        for attr, domain, template in _QUESTIONS:
            others = [kb[(i + k) % len(kb)][attr] for k in (1, 7, 13)]
            task_id = f"orchmas-qa/{split}/{row['country']}/{attr}"
            splits[split].append(
                Task(
                    id=task_id,
                    prompt=template.format(row["country"]),
                    answers=(row[attr],),
                    meta={
                        "type": domain,
                        "domain": domain,
                        "difficulty": stable_uniform("orchmas-qa", seed, task_id),
                        "distractors": tuple(others),
                        "source": "orchmas-qa",
                    },
                )
            )
    return ListTaskSource("orchmas-qa", splits)
