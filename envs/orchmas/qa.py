"""``orchmas-qa``: the question sets of ``orch/OrchMAS-v0`` besides procedural math.

``orchmas_qa_source(dataset=...)`` (task source ``"orchmas-qa"``) reaches them by name:

- ``"mixed"`` (default, the env's default task set): procedural math and
  ``"multihop-synth"`` interleaved (even indices math, odd multihop), so the role that
  fits depends on the question, as in the paper's mixed training set (2Wiki, HotpotQA,
  GSM8K, DAPO, MuSiQue, PopQA);
- ``"multihop-synth"``: ``SyntheticMultihopSource`` of ``orchenv.envs.multihopqa``
  (2-3 hop bridge and comparison questions with a gold hop ``chain`` and supporting
  facts), the offline stand-in for 2Wiki / HotpotQA / MuSiQue: the simulated executor
  rewards correct sub-questions of the chain;
- ``"2wiki"``, ``"hotpotqa"``, ``"musique"``: the multihop loaders of
  ``orchenv.envs.multihopqa.loaders`` (a local file: ``path=...``);
- ``"gsm8k"``, ``"popqa"``, ``"triviaqa"``, ``"squad_v2"``, ``"xsum"`` / ``"summarization"``:
  ``orchenv.envs.orchmas.loaders``;
- ``"countries"``: the earlier default, one-hop questions about made-up countries
  (capital / currency / language), kept as a named option (``countries_source``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from orchenv.envs.multihopqa.loaders import load_2wiki, load_hotpotqa, load_musique
from orchenv.envs.multihopqa.synth import SyntheticMultihopSource
from orchenv.envs.orchmas.loaders import LOADERS
from orchenv.error import ConfigError, DataError, UnknownNameError
from orchenv.seeding import stable_uniform
from orchenv.tasks import ListTaskSource, Task, TaskSource, make_task_source

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


def countries_source(*, n_countries: int = 120, seed: int = 0) -> ListTaskSource:
    """Short-answer questions over a synthetic knowledge base of made-up countries
    (``dataset="countries"``; the default QA set before the multihop generator).

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


_MULTIHOP_LOADERS = {
    "2wiki": load_2wiki,
    "2wikimultihopqa": load_2wiki,
    "hotpotqa": load_hotpotqa,
    "musique": load_musique,
}
#: every ``dataset`` name ``orchmas_qa_source`` takes
DATASETS = ("mixed", "multihop-synth", *_MULTIHOP_LOADERS, *LOADERS, "countries")


class MixedSource(TaskSource):
    """Several task sources interleaved: index ``i`` is task ``i // k`` of source ``i % k``
    (``k`` sources; each split as long as ``k`` times its shortest member).

    ``seed`` is the generator seed its members were built with (``None``: not generated).
    An int marks the source as generated for ``orchenv.tasks.sealed_task_source``, so a
    sealed env (a board's sealed plan) rebuilds it with its seed mixed with the board's
    secret; without it the default ``orchmas-qa`` set could not be sealed (its sealed tasks
    would be the public ones)."""

    name = "orchmas-mixed"

    def __init__(self, sources: list[TaskSource], seed: int | None = None) -> None:
        if not sources:
            raise DataError("MixedSource needs at least one task source")
        self.sources = list(sources)
        #: the members' generator seed (``None`` when they are not generated)
        self.seed = seed

    @property
    def splits(self) -> tuple[str, ...]:
        first = self.sources[0].splits
        return tuple(s for s in first if all(s in src.splits for src in self.sources[1:]))

    def size(self, split: str) -> int:
        self.check_split(split)
        return len(self.sources) * min(src.size(split) for src in self.sources)

    def get(self, split: str, index: int) -> Task:
        if not 0 <= index < self.size(split):
            raise IndexError(f"index {index} out of range for split {split!r}")
        k = len(self.sources)
        return self.sources[index % k].get(split, index // k)

    def by_id(self, task_id: str) -> Task:
        for src in self.sources:
            try:
                return src.by_id(task_id)
            except (UnknownNameError, DataError, KeyError, ValueError, IndexError):
                continue
        raise UnknownNameError("task id", task_id, [])


def orchmas_qa_source(
    *, dataset: str = "mixed", path: str | None = None, **kwargs: Any
) -> TaskSource:
    """The OrchMAS question set called ``dataset`` (see the module docstring).

    ``mixed`` takes ``seed`` and ``multihop-synth``'s arguments; ``multihop-synth`` takes ``SyntheticMultihopSource``'s arguments (defaults here:
    ``hops=(2, 3)``, ``n_train=2000``, ``n_test=500``, ``seed=0``); the file datasets take
    ``path`` (required) and their loader's arguments (``split``, ``limit``, ...): set the
    env's ``split`` to the loader's split; ``countries`` takes ``n_countries`` and ``seed``.
    """
    key = dataset.lower()
    if key == "mixed":
        seed = int(kwargs.pop("seed", 0))
        math_tasks = make_task_source("procedural-math", seed=seed)
        return MixedSource(
            [math_tasks, orchmas_qa_source(dataset="multihop-synth", seed=seed, **kwargs)],
            seed=seed,
        )
    if key == "multihop-synth":
        kwargs.setdefault("hops", (2, 3))
        return SyntheticMultihopSource(**kwargs)
    if key == "countries":
        return countries_source(**kwargs)
    loader = _MULTIHOP_LOADERS.get(key) or LOADERS.get(key)
    if loader is None:
        raise UnknownNameError("OrchMAS dataset", dataset, DATASETS)
    if path is None:
        raise ConfigError(
            f"dataset {dataset!r} is read from a local file: pass "
            f"task_source_kwargs={{'dataset': {dataset!r}, 'path': 'FILE'}}"
        )
    return loader(path, **kwargs)
