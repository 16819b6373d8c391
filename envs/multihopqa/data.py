"""Multihop QA data: a synthetic knowledge-base generator, real-dataset loaders, BM25 search.

The data side of ``orch/MultihopQA-v0`` (seed 004, RCR-Router: a Planner decomposes
the question, a Searcher retrieves paragraphs, a Recommender answers).

``SyntheticMultihopSource`` is the offline default. From ``seed`` it builds a
fictional world (countries, cities, universities, companies, people, films, books,
bands with pronounceable invented names) linked by functional relations
(``directed_by``, ``born_in``, ``located_in``, ``capital`` ...) and dated by years.
Every entity has one encyclopedia-style paragraph (3-5 sentences, roughly 60-120
tokens) stating its facts. Questions follow relation paths through that world,
HotpotQA-style:

- *bridge*: 2-4 hops, e.g. "In which city was the director of <Film> born?";
- *comparison*: two entities compared on a year ("Which film came out first, A or
  B?", "Was A founded before B?") or on a shared object ("Were A and B born in the
  same city?"), also through one bridge hop each ("Which film's director was born
  first, A or B?").

Each task carries the HotpotQA distractor setting (gold paragraphs plus distractors,
shuffled), sentence-level supporting facts and the gold decomposition (``chain``),
so a Planner / Searcher / Recommender team can be scored hop by hop. Written by hand
because no maintained library generates multihop questions with gold
decompositions over a controllable synthetic KB.

The loaders read the real benchmarks of the paper (HotpotQA, MuSiQue,
2WikiMultihopQA) from local files, or from the Hugging Face Hub when online, into
tasks with the same ``meta`` keys. ``ParagraphIndex`` is the Searcher's tool: BM25
(``bm25s``) over a task's paragraphs or over any corpus.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchenv.error import ConfigError, DataError, UnknownNameError
from orchenv.tasks import (
    GeneratedTaskSource,
    ListTaskSource,
    Task,
    difficulty_of,
    stable_uniform,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Hit",
    "ParagraphIndex",
    "SyntheticMultihopSource",
    "load_2wiki",
    "load_hotpotqa",
    "load_multihop",
    "load_musique",
    "paragraph_index",
    "to_hotpot_record",
]

PathLike = str | os.PathLike
Paragraph = tuple[str, Sequence[str]]

_SPLITS = ("train", "test")
_TRAIN_SHARE = 0.75  # share of question-start entities reserved for the train split
_CACHE_MAX = 16_384
_PHI = 0.6180339887498949  # golden-ratio conjugate: low-discrepancy difficulty sequence


# -- stable randomness -------------------------------------------------------------------------
def _key_int(*key: object) -> int:
    """A 64-bit integer that depends only on ``key`` (not on Python's hash seed)."""
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big")


class _Draw:
    """Cheap scalar draws from a numpy Generator (``Generator.integers`` is slow per call)."""

    __slots__ = ("_random", "_permutation")

    def __init__(self, rng: np.random.Generator) -> None:
        self._random = rng.random
        self._permutation = rng.permutation

    def u(self) -> float:
        return float(self._random())

    def ri(self, lo: int, hi: int) -> int:
        """Uniform integer in ``[lo, hi]``."""
        return lo + min(int(self._random() * (hi - lo + 1)), hi - lo)

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[min(int(self._random() * len(seq)), len(seq) - 1)]

    def shuffled(self, seq: Sequence[Any]) -> list[Any]:
        if len(seq) > 12:  # numpy's per-call overhead pays off on longer lists
            return [seq[i] for i in self._permutation(len(seq)).tolist()]
        out = list(seq)
        random = self._random
        for i in range(len(out) - 1, 0, -1):
            j = min(int(random() * (i + 1)), i)
            out[i], out[j] = out[j], out[i]
        return out


# -- vocabulary for names and prose ----------------------------------------------------------
_ONSETS = (
    "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
    "br", "dr", "st", "tr", "gr", "sh", "th", "j", "b", "d", "l", "m", "r", "t",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "a", "i", "ea", "y")
_MID_CODAS = ("", "", "", "", "", "n", "r", "l")
_CODAS = ("", "", "n", "r", "l", "s", "m", "nd", "th", "x", "k")
_CITY_SUFFIXES = ("", "", "", "", "ford", "mere", "haven", "burg", "ton", "wick", "dale", "by")
_CITY_PREFIXES = ("Port ", "New ", "Saint ", "East ", "Upper ")
_COUNTRY_SUFFIXES = ("ia", "land", "ar", "ova", "stan", "ea", "ania", "mark")
_COUNTRY_FORMS = ("Republic", "Kingdom", "Federation", "Commonwealth", "Principality")
_ADJS = (
    "Silent", "Amber", "Broken", "Golden", "Hollow", "Crimson", "Distant", "Last", "Hidden",
    "Burning", "Frozen", "Quiet", "Wild", "Pale", "Iron", "Electric", "Bitter", "Velvet",
    "Endless", "Lonely", "Restless", "Secret", "Scarlet", "Northern", "Savage", "Gentle",
    "Falling", "Wandering", "Lost", "Bright", "Dark", "Second", "Little", "Forgotten",
)  # fmt: skip
_NOUNS = (
    "Harbor", "Coast", "River", "Garden", "Mirror", "Lantern", "Empire", "Winter", "Summer",
    "Orchard", "Signal", "Tide", "Crown", "Compass", "Voyage", "Shadow", "Bridge", "Island",
    "Forest", "Horizon", "Letter", "Promise", "Season", "Kingdom", "Stranger", "Machine",
    "Meadow", "Citadel", "Ember", "Echo", "Frontier", "Harvest", "Thunder", "Witness",
)  # fmt: skip
_FILM_GENRES = ("drama", "thriller", "comedy", "science fiction", "war", "crime", "musical")
_BOOK_GENRES = ("historical", "crime", "fantasy", "literary", "science fiction", "coming-of-age")
_MUSIC_GENRES = ("indie rock", "folk", "post-punk", "jazz fusion", "synth-pop", "heavy metal")
_OCCUPATIONS = (
    "physicist", "painter", "journalist", "architect", "politician", "economist", "chemist",
    "photographer", "diplomat", "historian", "engineer", "sculptor",
)  # fmt: skip
_SUBJECTS = ("law", "physics", "history", "economics", "fine art", "philosophy", "engineering")
_REGIONS = (
    "the north of the Varen Sea", "the southern highlands", "the eastern archipelago",
    "the western plains", "the Selm river basin", "the northern steppe",
)  # fmt: skip
_COMPANY_KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "studio": (("Pictures", "Studios", "Films"), "film production company"),
    "publisher": (("Press", "Books", "House"), "publishing house"),
    "label": (("Records", "Sound", "Music"), "record label"),
    "industrial": (("Industries", "Systems", "Motors", "Foods"), "manufacturing company"),
}
_FILLER = {
    "film": (
        "The story follows {a_occ} who returns to {town} to settle an old family debt.",
        "Its plot centres on two siblings who inherit a failing hotel on the coast.",
        "The film was shot on location over eleven weeks with a largely local crew.",
        "It premiered at the {word} Film Festival, where it received a standing ovation.",
        "Critics praised its photography, although the screenplay drew mixed reviews.",
        "The score was recorded with a small string ensemble and later released as an album.",
    ),
    "book": (
        "The novel follows a young {occ} who uncovers a forgery in the archives of {town}.",
        "It was translated into more than twenty languages within a decade of publication.",
        "Reviewers admired its restrained prose, though some found the ending abrupt.",
        "The book was later adapted for radio in a six-part serial.",
        "Much of the story is told through letters exchanged between two estranged friends.",
    ),
    "band": (
        "Their debut album, {adj} {noun}, was recorded in a converted church in {town}.",
        "The group toured extensively in the following years and changed drummers twice.",
        "Critics have described their sound as dense, melodic and unusually restrained.",
        "After a long hiatus, the band reunited for a series of anniversary concerts.",
    ),
    "company": (
        "The firm grew rapidly during the following decade and opened offices abroad.",
        "It is best known for its {adj} {noun} line, launched after a long development.",
        "In its early years the company survived a hostile takeover attempt.",
        "Its annual revenue is estimated at several hundred million euros.",
        "The founder's family still holds a majority of its shares.",
    ),
    "university": (
        "The university enrols about {n} students across {m} faculties.",
        "Its library holds one of the largest collections of early printed maps in the region.",
        "The main campus lies on a hill overlooking the old town.",
        "It is known in particular for its programmes in {subject} and {subject2}.",
    ),
    "person": (
        "Over a career spanning four decades, {pr} received several national awards.",
        "{Pr} later lived in {town} for many years and taught occasional classes there.",
        "{Pr} has been married twice and has three children.",
        "In interviews, {pr} has often described a difficult but formative childhood.",
    ),
    "city": (
        "As of the last census the city had a population of about {n}.",
        "{name} is known for its covered market and its well-preserved medieval walls.",
        "The local economy relies on shipping, light industry and tourism.",
        "A railway line built in the nineteenth century links it to the coast.",
    ),
    "country": (
        "Its economy is based on agriculture, mining and a growing service sector.",
        "The country is a parliamentary democracy with a largely ceremonial head of state.",
        "Most of its population lives in a few large river valleys.",
    ),
}


# -- the relation schema ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Relation:
    """A functional relation of an entity type; ``target`` is a type or ``"year"``."""

    key: str  # "<type>.<name>"
    target: str
    question: str  # sub-question about a named subject
    phrase: str  # noun phrase for the object, nested inside longer questions
    role: str = ""  # object noun for comparisons ("director"), empty if unused
    verb: str = ""  # year relations: "released", "born", "founded" ...
    subject: str = field(init=False)  # the type it applies to
    name: str = field(init=False)  # the fact's name inside that type

    def __post_init__(self) -> None:
        subject, name = self.key.split(".", 1)
        object.__setattr__(self, "subject", subject)
        object.__setattr__(self, "name", name)


_RELATIONS: tuple[_Relation, ...] = (
    _Relation("film.directed_by", "person", "Who directed {}?", "the director of {}", "director"),
    _Relation(
        "film.produced_by", "company", "Which studio produced {}?", "the studio behind {}", "studio"
    ),
    _Relation("film.year", "year", "In what year was {} released?", "", verb="released"),
    _Relation("book.written_by", "person", "Who wrote {}?", "the author of {}", "author"),
    _Relation(
        "book.published_by",
        "company",
        "Which company published {}?",
        "the publisher of {}",
        "publisher",
    ),  # fmt: skip
    _Relation("book.year", "year", "In what year was {} first published?", "", verb="published"),
    _Relation("band.founded_by", "person", "Who founded {}?", "the founder of {}", "founder"),
    _Relation(
        "band.formed_in",
        "city",
        "In which city was {} formed?",
        "the city where {} was formed",
        "home city",
    ),  # fmt: skip
    _Relation("band.year", "year", "In what year was {} formed?", "", verb="formed"),
    _Relation("company.founded_by", "person", "Who founded {}?", "the founder of {}", "founder"),
    _Relation(
        "company.headquartered_in",
        "city",
        "In which city is {} headquartered?",
        "the city where {} is headquartered",
        "headquarters city",
    ),  # fmt: skip
    _Relation("company.year", "year", "In what year was {} founded?", "", verb="founded"),
    _Relation(
        "university.located_in",
        "city",
        "In which city is {} located?",
        "the home city of {}",
        "home city",
    ),  # fmt: skip
    _Relation("university.year", "year", "In what year was {} founded?", "", verb="founded"),
    _Relation(
        "person.born_in",
        "city",
        "In which city was {} born?",
        "the birthplace of {}",
        "birthplace",
    ),  # fmt: skip
    _Relation(
        "person.educated_at",
        "university",
        "Which university did {} attend?",
        "the university attended by {}",
        "alma mater",
    ),  # fmt: skip
    _Relation("person.year", "year", "In what year was {} born?", "", verb="born"),
    _Relation(
        "city.in_country",
        "country",
        "In which country is {} located?",
        "the country where {} lies",
        "country",
    ),  # fmt: skip
    _Relation("city.year", "year", "In what year was {} founded?", "", verb="founded"),
    _Relation(
        "country.capital", "city", "What is the capital of {}?", "the capital of {}", "capital"
    ),
)
_REL = {r.key: r for r in _RELATIONS}
_RELS_OF: dict[str, tuple[_Relation, ...]] = {}
for _r in _RELATIONS:
    _RELS_OF[_r.subject] = (*_RELS_OF.get(_r.subject, ()), _r)

# comparison wording per entity type: (earlier, later) questions
_EARLIER = {
    "film": (
        "Which film came out first, {} or {}?",
        "Which film came out more recently, {} or {}?",
    ),
    "book": (
        "Which book was published first, {} or {}?",
        "Which book was published more recently, {} or {}?",
    ),
    "band": ("Which band formed first, {} or {}?", "Which band formed more recently, {} or {}?"),
    "company": (
        "Which company was founded first, {} or {}?",
        "Which company is younger, {} or {}?",
    ),
    "university": (
        "Which university is older, {} or {}?",
        "Which university was founded more recently, {} or {}?",
    ),
    "person": ("Who was born first, {} or {}?", "Who was born later, {} or {}?"),
    "city": ("Which city was founded first, {} or {}?", "Which city is younger, {} or {}?"),
}
_SAME = {
    "person.born_in": "Were {} and {} born in the same city?",
    "person.educated_at": "Did {} and {} attend the same university?",
    "city.in_country": "Are {} and {} in the same country?",
    "film.directed_by": "Were {} and {} directed by the same person?",
    "book.written_by": "Were {} and {} written by the same author?",
    "company.headquartered_in": "Are {} and {} headquartered in the same city?",
    "band.formed_in": "Were {} and {} formed in the same city?",
}
_WHOSE = {
    "film": "Which film's",
    "book": "Which book's",
    "band": "Which band's",
    "company": "Which company's",
    "university": "Which university's",
    "person": "Whose",
}
_START_WEIGHT = {
    "film": 3.0,
    "book": 2.0,
    "band": 1.5,
    "company": 2.0,
    "university": 1.0,
    "person": 2.0,
    "city": 1.0,
    "country": 0.2,
}
_MAX_HOPS = 5


def _type_paths(max_len: int) -> dict[tuple[str, int], list[tuple[_Relation, ...]]]:
    """Every relation path by (start type, length); year relations only end a path."""
    paths: dict[tuple[str, int], list[tuple[_Relation, ...]]] = {}

    def walk(start: str, etype: str, path: tuple[_Relation, ...]) -> None:
        for rel in _RELS_OF.get(etype, ()):
            if path and path[-1].key == "country.capital" and rel.key == "city.in_country":
                continue  # a capital lies in its own country: always a cycle
            new = (*path, rel)
            paths.setdefault((start, len(new)), []).append(new)
            if rel.target != "year" and len(new) < max_len:
                walk(start, rel.target, new)

    for etype in _RELS_OF:
        walk(etype, etype, ())
    return paths


_PATHS = _type_paths(_MAX_HOPS)


# -- the knowledge base -------------------------------------------------------------------------
_COUNTS = {
    "country": 30,
    "city": 360,
    "university": 150,
    "company": 460,
    "person": 2400,
    "film": 1000,
    "book": 600,
    "band": 350,
}
_ROLE_COUNTS = {"director": 320, "author": 260, "musician": 250, "entrepreneur": 380}


class _KB:
    """The synthetic world of one seed: entities, their facts, and lazily rendered paragraphs."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        rng = np.random.default_rng(_key_int("mhqa-kb", seed))
        d = _Draw(rng)
        self.etype: list[str] = []
        self.name: list[str] = []
        self.facts: list[dict[str, int]] = []  # relation name -> entity id or year
        self.extra: list[dict[str, Any]] = []
        self.of_type: dict[str, list[int]] = {}
        self.role: dict[int, str] = {}
        self.works: dict[int, list[int]] = {}  # person -> films/books/bands/companies
        self._used: set[str] = set()
        self._build(d)
        self._reverse: dict[tuple[str, int], list[int]] = {}
        for e, facts in enumerate(self.facts):
            for rel, obj in facts.items():
                if _REL[f"{self.etype[e]}.{rel}"].target != "year":
                    self._reverse.setdefault((f"{self.etype[e]}.{rel}", obj), []).append(e)
        self._by_token: dict[tuple[str, str], list[int]] = {}
        for e, name in enumerate(self.name):
            for tok in _name_tokens(name):
                self._by_token.setdefault((self.etype[e], tok), []).append(e)
        self.by_name = {n: e for e, n in enumerate(self.name)}
        # question-start pools per split; notable people only
        self.pools: dict[tuple[str, str], list[int]] = {}
        for e, etype in enumerate(self.etype):
            if etype == "person" and e not in self.role:
                continue
            split = "train" if stable_uniform("mhqa-split", seed, e) < _TRAIN_SHARE else "test"
            self.pools.setdefault((split, etype), []).append(e)
        self.pool_sets = {key: frozenset(pool) for key, pool in self.pools.items()}
        self._namesakes: dict[int, list[int]] = {}
        self._paragraphs: dict[int, tuple[str, list[str], dict[str, int]]] = {}

    # names ---------------------------------------------------------------------------------
    def _word(self, d: _Draw, syllables: int) -> str:
        parts = []
        for i in range(syllables):
            coda = d.pick(_CODAS) if i == syllables - 1 else d.pick(_MID_CODAS)
            parts.append(d.pick(_ONSETS) + d.pick(_VOWELS) + coda)
        return "".join(parts).capitalize()

    def _unique(self, d: _Draw, make: Any) -> str:
        for _ in range(200):
            name = make()
            if name not in self._used:
                self._used.add(name)
                return name
        raise AssertionError("name space exhausted")  # pragma: no cover - sizes are fixed

    def _add(self, etype: str, name: str, facts: dict[str, int], extra: dict[str, Any]) -> int:
        e = len(self.name)
        self.etype.append(etype)
        self.name.append(name)
        self.facts.append(facts)
        self.extra.append(extra)
        self.of_type.setdefault(etype, []).append(e)
        return e

    def _build(self, d: _Draw) -> None:
        first = [self._word(d, 2 if d.u() < 0.8 else 3) for _ in range(420)]
        surnames = [self._word(d, 2 if d.u() < 0.6 else 3) for _ in range(520)]
        self.surnames = surnames
        words = [self._word(d, 2) for _ in range(300)]
        # countries and cities
        for _ in range(_COUNTS["country"]):
            name = self._unique(d, lambda: self._word(d, d.ri(1, 2)) + d.pick(_COUNTRY_SUFFIXES))
            extra = {
                "form": d.pick(_COUNTRY_FORMS),
                "region": d.pick(_REGIONS),
                "language": self._word(d, 2) + "ic",
                "independence": d.ri(1800, 1990),
            }
            self._add("country", name, {}, extra)
        countries = self.of_type["country"]

        def city_name() -> str:
            suffix = d.pick(_CITY_SUFFIXES)
            base = self._word(d, 2 if suffix or d.u() < 0.6 else 3)
            name = base + suffix if suffix else base
            return d.pick(_CITY_PREFIXES) + name if d.u() < 0.12 else name

        for i in range(_COUNTS["city"]):
            country = countries[i % len(countries)] if i < 3 * len(countries) else d.pick(countries)
            name = self._unique(d, city_name)
            self._add(
                "city",
                name,
                {"in_country": country, "year": d.ri(700, 1890)},
                {"population": d.ri(12, 2400) * 1000},
            )
        for c in countries:  # the first city made for each country is its capital
            capital = next(e for e in self.of_type["city"] if self.facts[e]["in_country"] == c)
            self.facts[c]["capital"] = capital
        cities = self.of_type["city"]
        # universities
        for _ in range(_COUNTS["university"]):
            pattern = d.ri(0, 2)
            name = self._unique(
                d,
                lambda p=pattern: (
                    f"{d.pick(surnames)} University",
                    f"{d.pick(words)} Institute of Technology",
                    f"{d.pick(surnames)} College",
                )[p],
            )
            self._add(
                "university",
                name,
                {"located_in": d.pick(cities), "year": d.ri(1150, 1985)},
                {
                    "students": d.ri(4, 60) * 1000,
                    "subjects": (d.pick(_SUBJECTS), d.pick(_SUBJECTS)),
                },
            )
        universities = self.of_type["university"]
        # people; the first ones get roles that their works refer to
        roles = [r for r, n in _ROLE_COUNTS.items() for _ in range(n)]
        for i in range(_COUNTS["person"]):
            name = self._unique(d, lambda: f"{d.pick(first)} {d.pick(surnames)}")
            role = roles[i] if i < len(roles) else ""
            facts = {
                "born_in": d.pick(cities),
                "educated_at": d.pick(universities),
                "year": d.ri(1900, 1990),
            }
            extra = {
                "she": d.u() < 0.5,
                "occupation": d.pick(_OCCUPATIONS),
                "subject": d.pick(_SUBJECTS),
                "lives_in": d.pick(cities),
            }
            e = self._add("person", name, facts, extra)
            if role:
                self.role[e] = role
        people = {r: [e for e, rr in self.role.items() if rr == r] for r in _ROLE_COUNTS}
        others = [e for e in self.of_type["person"] if e not in self.role]

        def after(person: int, lo: int, hi: int) -> int:
            return min(self.facts[person]["year"] + d.ri(lo, hi), 2024)

        # companies
        kinds = ["studio"] * 150 + ["publisher"] * 120 + ["label"] * 100 + ["industrial"] * 90
        for kind in kinds:
            suffixes, _ = _COMPANY_KINDS[kind]
            founder = d.pick(people["entrepreneur"])
            name = self._unique(
                d, lambda s=suffixes: f"{d.pick(surnames if d.u() < 0.5 else words)} {d.pick(s)}"
            )
            facts = {"founded_by": founder, "headquartered_in": d.pick(cities)}
            facts["year"] = after(founder, 22, 55)
            e = self._add("company", name, facts, {"kind": kind, "staff": d.ri(1, 90) * 100})
            self.works.setdefault(founder, []).append(e)
        by_kind = {
            k: [e for e in self.of_type["company"] if self.extra[e]["kind"] == k]
            for k in _COMPANY_KINDS
        }

        def title(patterns: int) -> str:
            p = d.ri(0, patterns - 1)
            adj, noun, noun2 = d.pick(_ADJS), d.pick(_NOUNS), d.pick(_NOUNS)
            return (
                f"The {adj} {noun}",
                f"{adj} {noun}",
                f"{noun} of the {adj} {noun2}",
                f"The {noun} of {d.pick(surnames)}",
                f"{noun} in {d.pick(words)}",
            )[p]

        for _ in range(_COUNTS["film"]):
            director = d.pick(people["director"])
            facts = {
                "directed_by": director,
                "produced_by": d.pick(by_kind["studio"]),
                "year": after(director, 24, 60),
            }
            extra = {
                "genre": d.pick(_FILM_GENRES),
                "stars": (d.pick(others), d.pick(others)),
                "filler": d.ri(0, 10_000),
            }
            e = self._add("film", self._unique(d, lambda: title(5)), facts, extra)
            self.works.setdefault(director, []).append(e)
        for _ in range(_COUNTS["book"]):
            author = d.pick(people["author"])
            facts = {
                "written_by": author,
                "published_by": d.pick(by_kind["publisher"]),
                "year": after(author, 22, 62),
            }
            extra = {"genre": d.pick(_BOOK_GENRES), "filler": d.ri(0, 10_000)}
            e = self._add("book", self._unique(d, lambda: title(5)), facts, extra)
            self.works.setdefault(author, []).append(e)
        for _ in range(_COUNTS["band"]):
            founder = d.pick(people["musician"])
            facts = {
                "founded_by": founder,
                "formed_in": d.pick(cities),
                "year": after(founder, 16, 34),
            }
            name = self._unique(
                d,
                lambda: (
                    f"The {d.pick(_ADJS)} {d.pick(_NOUNS)}s"
                    if d.u() < 0.6
                    else f"{d.pick(words)} {d.pick(_NOUNS)}"
                ),
            )
            e = self._add("band", name, facts, {"genre": d.pick(_MUSIC_GENRES), "filler": 0})
            self.works.setdefault(founder, []).append(e)

    # queries -------------------------------------------------------------------------------
    def value(self, e: int, rel: _Relation) -> int:
        return self.facts[e][rel.name]

    def answer_text(self, e: int, rel: _Relation) -> str:
        v = self.value(e, rel)
        return str(v) if rel.target == "year" else self.name[v]

    def aliases(self, e: int) -> tuple[str, ...]:
        """Other accepted spellings of an entity's name."""
        name, etype = self.name[e], self.etype[e]
        if etype == "country":
            return (f"{self.extra[e]['form']} of {name}",)
        if name.startswith("The ") and etype in ("film", "book", "band"):
            return (name[4:],)
        return ()

    def siblings(self, rel: _Relation, obj: int) -> list[int]:
        """Entities that share ``rel``'s object (e.g. other films by the same director)."""
        return self._reverse.get((rel.key, obj), [])

    def namesakes(self, e: int) -> list[int]:
        """Same-type entities that share a name token with ``e``."""
        out = self._namesakes.get(e)
        if out is None:
            out = []
            for tok in _name_tokens(self.name[e]):
                out.extend(x for x in self._by_token.get((self.etype[e], tok), ()) if x != e)
            self._namesakes[e] = out
        return out

    # paragraphs ----------------------------------------------------------------------------
    def paragraph(self, e: int) -> tuple[str, list[str], dict[str, int]]:
        """(title, sentences, relation name -> index of the sentence stating it)."""
        cached = self._paragraphs.get(e)
        if cached is None:
            cached = self._paragraphs[e] = self._render(e)
        return cached

    def _render(self, e: int) -> tuple[str, list[str], dict[str, int]]:
        d = _Draw(np.random.default_rng(_key_int("mhqa-para", self.seed, e)))
        etype, name, f, x = self.etype[e], self.name[e], self.facts[e], self.extra[e]
        n = self.name
        sents: list[tuple[str, tuple[str, ...]]] = []  # (sentence, relation names stated)
        if etype == "film":
            director, studio = n[f["directed_by"]], n[f["produced_by"]]
            star1, star2 = (n[s] for s in x["stars"])
            if d.u() < 0.5:
                sents.append(
                    (f"{name} is a {f['year']} {x['genre']} film directed by {director}.",
                     ("directed_by", "year"))
                )  # fmt: skip
                sents.append((f"It was produced by {studio} and stars {star1} and {star2}.",
                              ("produced_by",)))  # fmt: skip
            else:
                sents.append((f"{name} is a {x['genre']} film released in {f['year']}.", ("year",)))
                sents.append(
                    (f"Directed by {director} and produced by {studio}, it stars {star1} in "
                     "the leading role.", ("directed_by", "produced_by"))
                )  # fmt: skip
        elif etype == "book":
            author, publisher = n[f["written_by"]], n[f["published_by"]]
            sents.append(
                (f"{name} is {_a(x['genre'])} novel by {author}, first published in {f['year']}.",
                 ("written_by", "year"))
            )  # fmt: skip
            sents.append((f"The original edition was published by {publisher}.", ("published_by",)))
        elif etype == "band":
            founder, city = n[f["founded_by"]], n[f["formed_in"]]
            sents.append(
                (f"{name} are {_a(x['genre'])} band formed in {city} in {f['year']}.",
                 ("formed_in", "year"))
            )  # fmt: skip
            sents.append(
                (f"The group was founded by {founder}, who wrote most of its early songs.",
                 ("founded_by",))
            )  # fmt: skip
        elif etype == "company":
            founder, city = n[f["founded_by"]], n[f["headquartered_in"]]
            desc = _COMPANY_KINDS[x["kind"]][1]
            sents.append(
                (f"{name} is a {desc} founded in {f['year']} by {founder}.", ("year", "founded_by"))
            )
            sents.append(
                (f"The company is headquartered in {city}, where it employs about {x['staff']} "
                 "people.", ("headquartered_in",))
            )  # fmt: skip
        elif etype == "university":
            city = n[f["located_in"]]
            kind = d.pick(("public research", "private", "technical"))
            sents.append((f"{name} is a {kind} university located in {city}.", ("located_in",)))
            sents.append(
                (f"It was founded in {f['year']} as a small school of theology and law.", ("year",))
            )
        elif etype == "person":
            pr = "she" if x["she"] else "he"
            city, uni = n[f["born_in"]], n[f["educated_at"]]
            role = self.role.get(e, "")
            job = {
                "director": "film director",
                "author": "novelist",
                "musician": "musician",
                "entrepreneur": "businessperson",
            }.get(role, x["occupation"])
            works = self.works.get(e, [])
            known = f", best known for {n[works[0]]}" if works else ""
            sents.append((f"{name} (born {f['year']}) is {_a(job)}{known}.", ("year",)))
            sents.append(
                (f"{pr.capitalize()} was born in {city} and grew up in a family of teachers.",
                 ("born_in",))
            )  # fmt: skip
            sents.append(
                (f"{pr.capitalize()} studied {x['subject']} at {uni} before moving abroad.",
                 ("educated_at",))
            )  # fmt: skip
        elif etype == "city":
            country = n[f["in_country"]]
            sents.append(
                (f"{name} is a city located in the {d.pick(('north', 'south', 'east', 'west'))} of "
                 f"{country}.", ("in_country",))
            )  # fmt: skip
            sents.append(
                (f"It was founded in {f['year']} as a small trading post on the river.", ("year",))
            )
        elif etype == "country":
            capital = n[f["capital"]]
            sents.append(
                (f"{name}, officially the {x['form']} of {name}, is a country in {x['region']}.",
                 ())
            )  # fmt: skip
            sents.append((f"Its capital and largest city is {capital}.", ("capital",)))
            sents.append(
                (f"The official language is {x['language']}, and the country gained "
                 f"independence in {x['independence']}.", ())
            )  # fmt: skip
        fillers = d.shuffled(_FILLER[etype])[: max(0, d.ri(4, 5) - len(sents))]
        pr = "she" if x.get("she") else "he"
        for text in fillers:
            sents.append(
                (
                    text.format(
                        occ=d.pick(_OCCUPATIONS),
                        a_occ=_a(d.pick(_OCCUPATIONS)),
                        town=n[d.pick(self.of_type["city"])],
                        word=d.pick(self.surnames),
                        adj=d.pick(_ADJS),
                        noun=d.pick(_NOUNS),
                        n=x.get("students", d.ri(2, 90) * 100)
                        if etype == "university"
                        else x.get("population", d.ri(2, 90) * 100),
                        m=d.ri(4, 14),
                        subject=x.get("subjects", ("law", "law"))[0],
                        subject2=x.get("subjects", ("law", "law"))[1],
                        pr=pr,
                        Pr=pr.capitalize(),
                        name=name,
                    ),
                    (),
                )
            )
        # keep the opening sentence first; shuffle the rest lightly like real articles
        body = sents[1:]
        if d.u() < 0.5 and len(body) > 2:
            body = [body[0], *d.shuffled(body[1:])]
        sents = [sents[0], *body]
        where = {rel: i for i, (_, rels) in enumerate(sents) for rel in rels}
        return name, [s for s, _ in sents], where


def _a(word: str) -> str:
    """``word`` with its indefinite article."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


_NAME_STOP = frozenset(
    {"the", "of", "in", "university", "college", "institute", "technology", "new", "saint"}
    | {"port", "east", "upper", "pictures", "studios", "films", "press", "books", "house"}
    | {"records", "sound", "music", "industries", "systems", "motors", "foods"}
)


def _name_tokens(name: str) -> list[str]:
    return [t for t in re.findall(r"\w+", name.lower()) if len(t) > 2 and t not in _NAME_STOP]


@functools.lru_cache(maxsize=4)
def _kb(seed: int) -> _KB:
    return _KB(seed)


# -- the synthetic source ------------------------------------------------------------------------
class SyntheticMultihopSource(GeneratedTaskSource):
    """Multihop questions over a synthetic knowledge base, generated lazily per index.

    Arguments:
        seed: builds the world and the questions; same seed, same tasks in any process.
        n_train, n_test: split sizes. Train and test questions never share a start
            entity (each entity that can open a question belongs to one split), so no
            test question appears in train.
        n_distractors: paragraphs added to the gold ones (HotpotQA uses 8 with 2 gold).
        hops: (min, max) hops of bridge questions, within [2, 5].
        difficulty: the knob, in [0, 1]. Each task ``i`` gets its own difficulty
            ``t_i = z_i ** ((1 - difficulty) / difficulty)`` where ``z_i`` is a
            low-discrepancy uniform sequence over the index, so ``difficulty`` is the
            mean of ``t_i`` (0.5: uniform over [0, 1)). ``t_i`` sets
              - ``meta["difficulty"] = t_i`` and ``meta["level"] = 1 + floor(5 t_i)``;
              - the hop count of bridge questions: ``min + floor(t_i (max - min + 1))``;
                comparisons go through one bridge hop per entity (4 hops) when that
                count reaches 4, else compare directly (2 hops);
              - the share of *confusable* distractors, ``round(t_i * n_distractors)``:
                paragraphs that share a relation and its object with a gold paragraph
                (other films by the same director, other people born in the same city)
                or share a name token with a gold entity; the rest are random
                paragraphs of the world.
        comparison_share: fraction of comparison questions (HotpotQA has about 20%).

    Confusable candidates also include the paragraph of a bridge question's final
    answer. At ``difficulty=0.5`` BM25 ranks the gold paragraph first for about 97%
    of the hop sub-questions, 99% at 0.1 and 94% at 0.9 (seed 0).

    Task ``meta``: ``type`` ("bridge" | "comparison"), ``hops``, ``level``,
    ``difficulty``, ``context`` ([title, [sentence, ...]] gold + distractors, shuffled),
    ``supporting_facts`` ([title, sentence index], one per hop, in chain order),
    ``chain`` (one dict per hop: ``question``, ``entity``, ``answer``, ``title``,
    ``sent``, ``relation``; comparisons list the hops of the first entity, then those
    of the second, and the answer follows from comparing their last answers),
    ``dataset`` ("synthetic") and ``source``. Years are answered as digits; a
    country also accepts its official name ("Republic of X"), a title "The X" also "X".
    """

    name = "multihop-synth"
    id_prefix = "mhqa"
    cache_max = _CACHE_MAX

    def __init__(
        self,
        *,
        seed: int = 0,
        n_train: int = 2000,
        n_test: int = 500,
        n_distractors: int = 8,
        hops: tuple[int, int] = (2, 4),
        difficulty: float = 0.5,
        comparison_share: float = 0.2,
    ) -> None:
        for label, value in (
            ("n_train", n_train),
            ("n_test", n_test),
            ("n_distractors", n_distractors),
        ):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{label} must be a non-negative integer, got {value!r}")
        try:
            lo, hi = (int(h) for h in hops)
        except (TypeError, ValueError):
            raise ConfigError(f"hops must be a pair (min, max) of integers, got {hops!r}") from None
        if not 2 <= lo <= hi <= _MAX_HOPS:
            raise ConfigError(
                f"hops must satisfy 2 <= min <= max <= {_MAX_HOPS}, got {hops!r}; "
                "for example hops=(2, 4)"
            )
        for label, number in (("difficulty", difficulty), ("comparison_share", comparison_share)):
            ok = isinstance(number, (int, float)) and not isinstance(number, bool)
            if not ok or not 0.0 <= float(number) <= 1.0:
                raise ConfigError(f"{label} must be a number in [0, 1], got {number!r}")
        self.seed = int(seed)
        self.n_distractors = int(n_distractors)
        self.hops = (lo, hi)
        self.difficulty = float(difficulty)
        self.comparison_share = float(comparison_share)
        self._sizes = {"train": int(n_train), "test": int(n_test)}
        self._offsets = {s: stable_uniform("mhqa-offset", self.seed, s) for s in _SPLITS}
        self._plans: dict[str, tuple[list[bool], list[str], list[int]]] = {}
        self._combos: dict[tuple[str, int, str], list[tuple[int, int]]] = {}

    def task_difficulty(self, split: str, index: int) -> float:
        """The difficulty ``t_i`` of a task in [0, 1), without generating it."""
        self.check_split(split)
        z = (self._offsets[split] + index * _PHI) % 1.0
        k = self.difficulty
        if k <= 0.0:
            return 0.0
        t = z ** ((1.0 - k) / k) if k < 1.0 else 1.0
        return min(t, math.nextafter(1.0, 0.0))

    def corpus(self) -> list[tuple[str, list[str]]]:
        """Every paragraph of this seed's world, for open-domain retrieval."""
        kb = _kb(self.seed)
        return [(title, sents) for title, sents, _ in map(kb.paragraph, range(len(kb.name)))]

    # generation ------------------------------------------------------------------------------
    def _generate(self, split: str, index: int) -> Task:
        kb = _kb(self.seed)
        t = self.task_difficulty(split, index)
        hops = self._hop_count(split, index)
        d = _Draw(np.random.default_rng(_key_int("mhqa-task", self.seed, split, index)))
        if self._plan(split)[0][index]:
            question, answers, chain, gold = self._comparison(kb, d, split, index, hops >= 4)
            qtype = "comparison"
        else:
            question, answers, chain, gold = self._bridge(kb, d, split, index, hops)
            qtype = "bridge"
        context = self._context(kb, d, chain, gold, t)
        supporting = [[hop["title"], hop["sent"]] for hop in chain]
        meta = {
            "type": qtype,
            "hops": len(chain),
            "level": min(1 + int(5 * t), 5),
            "difficulty": t,
            "context": context,
            "supporting_facts": supporting,
            "chain": chain,
            "dataset": "synthetic",
            "source": self.name,
        }
        return Task(f"mhqa-{self.seed}/{split}/{index}", question, answers, meta)

    def _hop_count(self, split: str, index: int) -> int:
        lo, hi = self.hops
        return min(lo + int(self.task_difficulty(split, index) * (hi - lo + 1)), hi)

    def _plan(self, split: str) -> tuple[list[bool], list[str], list[int]]:
        """Per index: comparison?, bridge start type, rank among same (hops, type) bridges.

        Bridge question ``i`` takes the ``rank``-th (start entity, relation path) pair of
        a seeded shuffle of all pairs, so bridge questions of a split do not repeat until
        that list is used up. Prefix-stable: growing ``n_train`` keeps earlier tasks.
        """
        plan = self._plans.get(split)
        if plan is None:
            n = self._sizes[split]
            u = np.random.default_rng(_key_int("mhqa-plan", self.seed, split)).random((n, 2))
            comparison = [bool(x) for x in u[:, 0] < self.comparison_share]
            types: list[str] = []
            ranks: list[int] = []
            seen: dict[tuple[int, str], int] = {}
            for i in range(n):
                hops = self._hop_count(split, i)
                options = [ty for ty in _START_WEIGHT if (ty, hops) in _PATHS]
                weights = np.array([_START_WEIGHT[ty] for ty in options])
                cum = np.cumsum(weights) / weights.sum()
                etype = options[
                    min(int(np.searchsorted(cum, u[i, 1], side="right")), len(options) - 1)
                ]
                types.append(etype)
                if comparison[i]:
                    ranks.append(-1)
                    continue
                ranks.append(seen.get((hops, etype), 0))
                seen[(hops, etype)] = ranks[-1] + 1
            plan = self._plans[split] = (comparison, types, ranks)
        return plan

    def _pairs(self, kb: _KB, split: str, hops: int, etype: str) -> list[tuple[int, int]]:
        """All (start entity, path index) pairs of a split, in a seeded order."""
        key = (split, hops, etype)
        pairs = self._combos.get(key)
        if pairs is None:
            paths = _PATHS[(etype, hops)]
            pool = kb.pools[(split, etype)]
            rng = np.random.default_rng(_key_int("mhqa-pairs", self.seed, *key))
            order = rng.permutation(len(pool) * len(paths)).tolist()
            pairs = [(pool[k // len(paths)], k % len(paths)) for k in order]
            pairs = self._combos[key] = [p for p in pairs if _walk(kb, p[0], paths[p[1]])]
        return pairs

    def _start(self, kb: _KB, d: _Draw, split: str, index: int, types: Sequence[str]) -> int:
        """A start entity of one of ``types`` for a comparison question."""
        pool = kb.pools[(split, types[0] if len(types) == 1 else d.pick(types))]
        return pool[(index * 7919 + d.ri(0, 7)) % len(pool)]

    def _hop(self, kb: _KB, e: int, rel: _Relation) -> dict[str, Any]:
        title, _, where = kb.paragraph(e)
        return {
            "question": rel.question.format(kb.name[e]),
            "entity": kb.name[e],
            "answer": kb.answer_text(e, rel),
            "title": title,
            "sent": where[rel.name],
            "relation": rel.key,
        }

    def _bridge(
        self, kb: _KB, d: _Draw, split: str, index: int, hops: int
    ) -> tuple[str, tuple[str, ...], list[dict[str, Any]], list[int]]:
        _, types, ranks = self._plan(split)
        etype = types[index]
        pairs = self._pairs(kb, split, hops, etype)
        start, path_index = pairs[ranks[index] % len(pairs)]
        path = _PATHS[(etype, hops)][path_index]
        walked = _walk(kb, start, path)
        assert walked is not None  # _pairs keeps acyclic pairs only
        entities, final = walked
        phrase = kb.name[start]
        for rel in path[:-1]:
            phrase = rel.phrase.format(phrase)
        question = path[-1].question.format(phrase)
        chain = [self._hop(kb, e, rel) for e, rel in zip(entities, path, strict=True)]
        if path[-1].target == "year":
            answers: tuple[str, ...] = (str(final),)
        else:
            answers = (kb.name[final], *kb.aliases(final))
            entities.append(final)  # its paragraph is a natural confusable distractor
        return question, answers, chain, entities

    def _comparison(
        self, kb: _KB, d: _Draw, split: str, index: int, deep: bool
    ) -> tuple[str, tuple[str, ...], list[dict[str, Any]], list[int]]:
        if deep:
            return self._deep_comparison(kb, d, split, index)
        kind = d.u()
        if kind < 0.3:  # same object? (yes/no)
            key = d.pick(sorted(_SAME))
            rel = _REL[key]
            a = self._start(kb, d, split, index, [rel.subject])
            pool = kb.pools[(split, rel.subject)]
            members = kb.pool_sets[(split, rel.subject)]
            same = [x for x in kb.siblings(rel, kb.value(a, rel)) if x != a and x in members]
            b = d.pick(same) if same and d.u() < 0.5 else d.pick([x for x in pool if x != a])
            answer = "yes" if kb.value(a, rel) == kb.value(b, rel) else "no"
            question = _SAME[key].format(kb.name[a], kb.name[b])
            chain = [self._hop(kb, a, rel), self._hop(kb, b, rel)]
            return question, (answer,), chain, [a, b]
        etype = d.pick(sorted(_EARLIER))
        rel = _REL[f"{etype}.year"]
        a = self._start(kb, d, split, index, [etype])
        pool = kb.pools[(split, etype)]
        for _ in range(64):
            b = d.pick(pool)
            if b != a and kb.value(a, rel) != kb.value(b, rel):
                break
        ya, yb = kb.value(a, rel), kb.value(b, rel)
        chain = [self._hop(kb, a, rel), self._hop(kb, b, rel)]
        if kind < 0.5:  # yes/no on order
            question = f"Was {kb.name[a]} {rel.verb} before {kb.name[b]}?"
            return question, ("yes" if ya < yb else "no",), chain, [a, b]
        later = d.u() < 0.35
        question = _EARLIER[etype][int(later)].format(kb.name[a], kb.name[b])
        winner = (a if ya > yb else b) if later else (a if ya < yb else b)
        return question, (kb.name[winner], *kb.aliases(winner)), chain, [a, b]

    def _deep_comparison(
        self, kb: _KB, d: _Draw, split: str, index: int
    ) -> tuple[str, tuple[str, ...], list[dict[str, Any]], list[int]]:
        """Compare the objects of one bridge hop each: 4 hops."""
        firsts = [r for r in _RELATIONS if r.target in _EARLIER and r.role and r.subject in _WHOSE]
        for _ in range(64):
            r1 = d.pick(firsts)
            a = self._start(kb, d, split, index, [r1.subject])
            b = d.pick(kb.pools[(split, r1.subject)])
            oa, ob = kb.value(a, r1), kb.value(b, r1)
            if a == b or oa == ob:
                continue
            if r1.target == "person" and d.u() < 0.35:  # were both objects born in one city?
                r2 = _REL["person.born_in"]
                answer = "yes" if kb.value(oa, r2) == kb.value(ob, r2) else "no"
                question = (
                    f"Were the {r1.role}s of {kb.name[a]} and {kb.name[b]} born in the same city?"
                )
                answers: tuple[str, ...] = (answer,)
                break
            r2 = _REL[f"{r1.target}.year"]
            ya, yb = kb.value(oa, r2), kb.value(ob, r2)
            if ya == yb:
                continue
            verb = "is older" if r2.verb == "founded" and d.u() < 0.3 else f"was {r2.verb} first"
            question = f"{_WHOSE[r1.subject]} {r1.role} {verb}, {kb.name[a]} or {kb.name[b]}?"
            winner = a if ya < yb else b
            answers = (kb.name[winner], *kb.aliases(winner))
            break
        else:  # pragma: no cover - 64 failures in a row do not happen with this world
            raise AssertionError("no comparison pair found")
        chain = [
            self._hop(kb, a, r1),
            self._hop(kb, oa, r2),
            self._hop(kb, b, r1),
            self._hop(kb, ob, r2),
        ]
        return question, answers, chain, [a, oa, b, ob]

    def _context(
        self,
        kb: _KB,
        d: _Draw,
        chain: Sequence[Mapping[str, Any]],
        related: Sequence[int],
        t: float,
    ) -> list[list[Any]]:
        gold = list(dict.fromkeys(kb.by_name[hop["entity"]] for hop in chain))
        taken = set(gold)
        n_conf = min(round(t * self.n_distractors), self.n_distractors)
        candidates: list[int] = [e for e in related if e not in taken]
        for hop in chain:
            rel = _REL[hop["relation"]]
            e = kb.by_name[hop["entity"]]
            if rel.target != "year":
                candidates.extend(kb.siblings(rel, kb.value(e, rel)))
            candidates.extend(kb.namesakes(e))
        candidates = [e for e in dict.fromkeys(candidates) if e not in taken]
        chosen = d.shuffled(candidates)[:n_conf]
        taken.update(chosen)
        n_total = len(kb.name)
        while len(chosen) < self.n_distractors:
            e = d.ri(0, n_total - 1)
            if e not in taken:
                taken.add(e)
                chosen.append(e)
        order = d.shuffled([*gold, *chosen])
        return [[kb.paragraph(e)[0], list(kb.paragraph(e)[1])] for e in order]


def _walk(kb: _KB, start: int, path: Sequence[_Relation]) -> tuple[list[int], int] | None:
    """(subjects of each hop, final value) along ``path``; None if an entity repeats."""
    facts = kb.facts
    entities = [start]
    for rel in path[:-1]:
        entities.append(facts[entities[-1]][rel.name])
    final = facts[entities[-1]][path[-1].name]
    visited = [*entities, final] if path[-1].target != "year" else entities
    return (entities, final) if len(set(visited)) == len(visited) else None


def to_hotpot_record(task: Task) -> dict[str, Any]:
    """The task as a HotpotQA distractor-setting JSON record (what ``load_hotpotqa`` reads)."""
    meta = task.meta
    missing = [k for k in ("context", "supporting_facts") if k not in meta]
    if missing:
        raise DataError(
            f"task {task.id!r} has no {', '.join(missing)} in meta; to_hotpot_record needs a "
            "multihop task (from SyntheticMultihopSource or one of the multihop loaders)"
        )
    level = meta.get("level")
    return {
        "_id": task.id,
        "question": task.prompt,
        "answer": task.answer,
        "type": str(meta.get("type", "bridge")),
        "level": _LEVEL_NAMES.get(int(level), "medium") if level is not None else "medium",
        "supporting_facts": [[str(t), int(s)] for t, s in meta["supporting_facts"]],
        "context": [[str(t), [str(s) for s in sents]] for t, sents in meta["context"]],
    }


_LEVEL_NAMES = {1: "easy", 2: "easy", 3: "medium", 4: "hard", 5: "hard"}
_LEVEL_OF_NAME = {"easy": 1, "medium": 3, "hard": 5}


# -- the Searcher's tool: BM25 over paragraphs ---------------------------------------------------
_MAX_QUERY_CHARS = 20_000  # longer queries are cut: BM25 over a megabyte of text is noise


@dataclass(frozen=True)
class Hit:
    """One retrieved paragraph; ``rank`` is 0-based."""

    title: str
    sentences: tuple[str, ...]
    score: float
    rank: int

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


class ParagraphIndex:
    """BM25 (``bm25s``, Lucene variant, English stopwords) over ``(title, sentences)`` paragraphs.

    The indexed text is the title twice followed by the sentences, so a query that
    names an entity finds that entity's own paragraph before paragraphs that merely
    mention it. Results are deterministic: ties break by paragraph order.
    """

    def __init__(self, paragraphs: Sequence[Paragraph]) -> None:
        import bm25s

        self._paragraphs: list[tuple[str, tuple[str, ...]]] = []
        for i, item in enumerate(paragraphs):
            try:
                title, sentences = item
            except (TypeError, ValueError):
                raise DataError(
                    f"paragraph {i}: expected a (title, [sentence, ...]) pair, got {item!r:.80}"
                ) from None
            if isinstance(sentences, str):
                sentences = [sentences]
            self._paragraphs.append((str(title), tuple(str(s) for s in sentences)))
        self._bm25s = bm25s
        self._retriever: Any = None
        if self._paragraphs:
            texts = [f"{t}. {t}. " + " ".join(s) for t, s in self._paragraphs]
            tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
            if not tokens.vocab:  # nothing indexable (only stopwords or one-letter words)
                return
            retriever = bm25s.BM25()
            retriever.index(tokens, show_progress=False)
            self._retriever = retriever

    def __len__(self) -> int:
        return len(self._paragraphs)

    @property
    def paragraphs(self) -> list[tuple[str, tuple[str, ...]]]:
        return list(self._paragraphs)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every paragraph for ``query`` (zeros when nothing matches)."""
        scores = np.zeros(len(self._paragraphs), dtype=np.float64)
        if self._retriever is None or not isinstance(query, str):
            return scores
        tokens = self._bm25s.tokenize(
            [query[:_MAX_QUERY_CHARS]], stopwords="en", return_ids=False, show_progress=False
        )[0]
        ids = self._retriever.get_tokens_ids(tokens)
        if not ids:
            return scores
        return np.asarray(self._retriever.get_scores_from_ids(ids), dtype=np.float64)

    def search(self, query: str, k: int = 2) -> list[Hit]:
        """The ``k`` best paragraphs with a positive score, best first; [] if none match."""
        try:
            k = int(k)
        except (TypeError, ValueError):
            return []
        if k <= 0:
            return []
        scores = self.scores(query)
        order = sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: -scores[i])
        return [
            Hit(self._paragraphs[i][0], self._paragraphs[i][1], float(scores[i]), rank)
            for rank, i in enumerate(order[:k])
        ]


class _IndexKey:
    """lru_cache key: task id + content digest; carries the paragraphs without hashing them."""

    __slots__ = ("key", "paragraphs")

    def __init__(self, key: tuple[str, str], paragraphs: Sequence[Paragraph]) -> None:
        self.key, self.paragraphs = key, paragraphs

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _IndexKey) and other.key == self.key


@functools.lru_cache(maxsize=512)
def _cached_index(key: _IndexKey) -> ParagraphIndex:
    return ParagraphIndex(key.paragraphs)


def paragraph_index(task: Task) -> ParagraphIndex:
    """The task's distractor-setting paragraphs as a ``ParagraphIndex``, built once and cached."""
    context = task.meta.get("context")
    if not isinstance(context, Sequence) or isinstance(context, str):
        raise DataError(
            f"task {task.id!r} has no meta['context'] (a list of [title, [sentence, ...]]); "
            "paragraph_index needs a multihop task"
        )
    digest = hashlib.blake2b(
        json.dumps(context, ensure_ascii=False, default=str).encode(), digest_size=16
    ).hexdigest()
    return _cached_index(_IndexKey((task.id, digest), context))


# -- real datasets: HotpotQA, MuSiQue, 2WikiMultihopQA -------------------------------------------
@dataclass(frozen=True)
class _Dataset:
    name: str
    loader: str  # function name in this module
    hub_id: str
    hub_config: str | None
    files: Mapping[str, str]  # split -> official file name
    where: str  # where the official files come from


_DATASETS = {
    "hotpotqa": _Dataset(
        "hotpotqa",
        "load_hotpotqa",
        "hotpotqa/hotpot_qa",
        "distractor",
        {"train": "hotpot_train_v1.1.json", "validation": "hotpot_dev_distractor_v1.json"},
        "http://curtis.ml.cmu.edu/datasets/hotpot/",
    ),
    "musique": _Dataset(
        "musique",
        "load_musique",
        "dgslibisey/MuSiQue",
        None,
        {"train": "musique_ans_v1.0_train.jsonl", "validation": "musique_ans_v1.0_dev.jsonl"},
        "https://github.com/StonyBrookNLP/musique (download.sh) or "
        "https://huggingface.co/datasets/dgslibisey/MuSiQue",
    ),
    "2wikimultihopqa": _Dataset(
        "2wikimultihopqa",
        "load_2wiki",
        "ohjoonhee/2WikiMultihopQA",
        None,
        {"train": "train.json", "validation": "dev.json"},
        "https://github.com/Alab-NII/2wikimultihop (data_ids_april7.zip)",
    ),
}
_DATASET_ALIASES = {
    "hotpot_qa": "hotpotqa",
    "hotpot": "hotpotqa",
    "musique_ans": "musique",
    "2wiki": "2wikimultihopqa",
    "2wikimultihop": "2wikimultihopqa",
    "2wikimqa": "2wikimultihopqa",
}
_SPLIT_ALIASES = {"dev": "validation", "val": "validation", "valid": "validation"}


def _read_records(path: PathLike, dataset: str) -> list[tuple[str, Any]]:
    """(location, record) pairs of a ``.json`` list or a ``.jsonl`` file; DataError otherwise."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"{dataset} file {p} does not exist (or is not a file)")
    text = p.read_text(encoding="utf-8")
    if not text.strip():
        raise DataError(f"{dataset} file {p} is empty")
    stripped = text.lstrip()
    if (
        p.suffix.lower() in (".jsonl", ".ndjson")
        or not stripped.startswith(("[", "{"))
        or (stripped.startswith("{") and "\n{" in stripped.rstrip())
    ):
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((f"line {lineno}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{p}, line {lineno}: malformed JSON ({exc.msg} at column {exc.colno}); "
                    "expected one JSON object per line"
                ) from None
        return records
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{p}: malformed JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            f"expected a JSON list of {dataset} records"
        ) from None
    if isinstance(data, Mapping):
        data = data.get("data", [data])
    if not isinstance(data, list):
        raise DataError(
            f"{p}: expected a JSON list of {dataset} records, got {type(data).__name__}"
        )
    return [(f"record {i}", r) for i, r in enumerate(data)]


class _Record:
    """Field access with errors that name the file, the record and the missing field."""

    def __init__(self, record: Any, origin: str, where: str, dataset: str) -> None:
        if not isinstance(record, Mapping):
            raise DataError(
                f"{origin}, {where}: expected a JSON object ({dataset} record), "
                f"got {type(record).__name__}"
            )
        self.record, self.origin, self.where, self.dataset = record, origin, where, dataset

    def fail(self, what: str) -> DataError:
        return DataError(f"{self.origin}, {self.where}: {what} (a {self.dataset} record)")

    def text(self, *names: str, required: bool = True) -> str | None:
        for field_name in names:
            value = self.record.get(field_name)
            if value is not None and not isinstance(value, (dict, list)):
                return str(value)
        if required:
            raise self.fail(f"missing the {names[0]!r} field (a string)")
        return None

    def get(self, name: str, default: Any = None) -> Any:
        return self.record.get(name, default)


def _context(rec: _Record, raw: Any) -> list[list[Any]]:
    """``[[title, [sentence, ...]], ...]`` from list-of-pairs or HF column form."""
    if isinstance(raw, Mapping):  # Hugging Face: {"title": [...], "sentences"/"content": [...]}
        titles = raw.get("title")
        sents = raw.get("sentences", raw.get("content"))
        if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
            raise rec.fail("'context' must map 'title' and 'sentences' to lists of equal length")
        raw = list(zip(titles, sents, strict=True))
    if not isinstance(raw, list) or not raw:
        raise rec.fail("missing the 'context' field (a non-empty list of [title, [sentences]])")
    out: list[list[Any]] = []
    for i, item in enumerate(raw):
        if isinstance(item, Mapping):
            item = (item.get("title"), item.get("sentences", item.get("content")))
        ok = isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
        if ok and isinstance(item[1], str):
            item = (item[0], [item[1]])
        if not ok or not isinstance(item[1], (list, tuple)):
            raise rec.fail(
                f"context entry {i} is not a [title, [sentence, ...]] pair: {item!r:.80}"
            )
        out.append([item[0], [str(s) for s in item[1]]])
    return out


def _supporting(rec: _Record, raw: Any) -> list[list[Any]]:
    if raw is None:
        return []
    if isinstance(raw, Mapping):  # Hugging Face column form
        titles, ids = raw.get("title", []), raw.get("sent_id", [])
        if not isinstance(titles, list) or not isinstance(ids, list) or len(titles) != len(ids):
            raise rec.fail(
                "'supporting_facts' must map 'title' and 'sent_id' to equal-length lists"
            )
        raw = list(zip(titles, ids, strict=True))
    if not isinstance(raw, list):
        raise rec.fail("'supporting_facts' must be a list of [title, sentence_index]")
    out = []
    for i, item in enumerate(raw):
        if (
            not isinstance(item, (list, tuple))
            or len(item) < 2
            or not isinstance(item[0], str)
            or isinstance(item[1], bool)
            or not isinstance(item[1], int)
        ):
            raise rec.fail(
                f"supporting fact {i} is not a [title, sentence_index] pair: {item!r:.80}"
            )
        out.append([item[0], int(item[1])])
    return out


def _sentence_with(sentences: Sequence[str], answer: str) -> int | None:
    low = answer.lower().strip()
    if not low:
        return None
    for i, sent in enumerate(sentences):
        if low in sent.lower():
            return i
    return None


_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def _sentences(text: str) -> list[str]:
    """Split a paragraph into sentences at ., ! or ? followed by a capital or digit.

    A small rule-based splitter: MuSiQue ships paragraphs as plain text, and the
    distractor format wants sentences. It splits after abbreviations like "Dr." too.
    """
    parts = [s.strip() for s in _SENT_SPLIT.split(text.strip())]
    return [s for s in parts if s] or [text.strip()]


def _finish(
    tasks: list[Task], seen: set[str], rec: _Record, task_id: str, task: Task, level: int | None
) -> None:
    if task_id in seen:
        raise rec.fail(f"duplicate id {task_id!r}")
    seen.add(task_id)
    meta = dict(task.meta)
    meta["level"] = level
    if level is not None:
        meta["difficulty"] = difficulty_of(Task(task_id, task.prompt, task.answers, meta))
    tasks.append(Task(task_id, task.prompt, task.answers, meta))


def _answers(rec: _Record, answer_field: str = "answer") -> tuple[str, ...]:
    answer = rec.text(answer_field, required=False)
    if answer is None:
        raise rec.fail(
            f"missing the {answer_field!r} field; test files of these benchmarks hold no "
            "answers, use the train or dev/validation file"
        )
    aliases = rec.get("answer_aliases") or []
    if not isinstance(aliases, list):
        raise rec.fail("'answer_aliases' must be a list of strings")
    return tuple(dict.fromkeys([answer, *(str(a) for a in aliases)]))


def _hotpot_tasks(records: Iterable[tuple[str, Any]], origin: str, limit: int | None) -> list[Task]:
    tasks: list[Task] = []
    seen: set[str] = set()
    for where, raw in records:
        if limit is not None and len(tasks) >= limit:
            break
        rec = _Record(raw, origin, where, "HotpotQA")
        task_id = rec.text("_id", "id")
        question = rec.text("question")
        answers = _answers(rec)
        context = _context(rec, rec.get("context"))
        support = _supporting(rec, rec.get("supporting_facts"))
        level_raw = rec.get("level")
        if isinstance(level_raw, int) and not isinstance(level_raw, bool):
            level: int | None = min(max(level_raw, 1), 5)
        else:
            level = _LEVEL_OF_NAME.get(str(level_raw).lower()) if level_raw is not None else None
        meta = {
            "type": str(rec.get("type") or "bridge"),
            "hops": max(len({t for t, _ in support}), 1) if support else 2,
            "context": context,
            "supporting_facts": support,
            "chain": [],
            "dataset": "hotpotqa",
        }
        _finish(
            tasks, seen, rec, str(task_id), Task(str(task_id), str(question), answers, meta), level
        )
    return tasks


def _musique_tasks(
    records: Iterable[tuple[str, Any]], origin: str, limit: int | None
) -> list[Task]:
    tasks: list[Task] = []
    seen: set[str] = set()
    skipped = 0
    for where, raw in records:
        if limit is not None and len(tasks) >= limit:
            break
        rec = _Record(raw, origin, where, "MuSiQue")
        if rec.get("answerable") is False:
            skipped += 1
            continue
        task_id, question = rec.text("id"), rec.text("question")
        answers = _answers(rec)
        paragraphs = rec.get("paragraphs")
        if not isinstance(paragraphs, list) or not paragraphs:
            raise rec.fail(
                "missing the 'paragraphs' field (a list of {idx, title, paragraph_text, "
                "is_supporting})"
            )
        context: list[list[Any]] = []
        by_idx: dict[int, int] = {}
        supporting_paras: list[int] = []
        for i, para in enumerate(paragraphs):
            if not isinstance(para, Mapping) or not isinstance(para.get("paragraph_text"), str):
                raise rec.fail(f"paragraph {i} has no 'paragraph_text' string")
            title = para.get("title")
            if not isinstance(title, str):
                raise rec.fail(f"paragraph {i} has no 'title' string")
            idx = para.get("idx", i)
            by_idx[int(idx) if isinstance(idx, int) else i] = i
            context.append([title, _sentences(para["paragraph_text"])])
            if para.get("is_supporting"):
                supporting_paras.append(i)
        decomposition = rec.get("question_decomposition") or []
        if not isinstance(decomposition, list):
            raise rec.fail("'question_decomposition' must be a list of {question, answer, ...}")
        chain: list[dict[str, Any]] = []
        hop_answers: list[str] = []
        for k, step in enumerate(decomposition):
            if not isinstance(step, Mapping) or not isinstance(step.get("question"), str):
                raise rec.fail(f"question_decomposition step {k} has no 'question' string")
            sub_q = step["question"]
            refs = [int(m) for m in re.findall(r"#(\d+)", sub_q)]
            for ref in refs:
                if 1 <= ref <= len(hop_answers):
                    sub_q = sub_q.replace(f"#{ref}", hop_answers[ref - 1])
            hop_answer = str(step.get("answer", ""))
            hop_answers.append(hop_answer)
            para = by_idx.get(step.get("paragraph_support_idx"))  # type: ignore[arg-type]
            title = context[para][0] if para is not None else None
            sent = _sentence_with(context[para][1], hop_answer) if para is not None else None
            entity = hop_answers[refs[-1] - 1] if refs and 1 <= refs[-1] <= k else None
            chain.append(
                {"question": sub_q, "entity": entity, "answer": hop_answer, "title": title,
                 "sent": sent if sent is not None or para is None else 0}
            )  # fmt: skip
        support = [[h["title"], h["sent"]] for h in chain if h["title"] is not None]
        covered = {t for t, _ in support}
        for i in supporting_paras:
            if context[i][0] not in covered:
                sent = _sentence_with(context[i][1], answers[0])
                support.append([context[i][0], sent or 0])
        subtype = str(task_id).split("__", 1)[0] if "__" in str(task_id) else "compositional"
        hops_match = re.match(r"(\d)hop", subtype)
        hops = len(chain) or (int(hops_match.group(1)) if hops_match else len(supporting_paras))
        meta = {
            "type": "bridge",
            "subtype": subtype,
            "hops": hops,
            "context": context,
            "supporting_facts": support,
            "chain": chain,
            "dataset": "musique",
        }
        level = {2: 2, 3: 3, 4: 5}.get(hops)
        _finish(
            tasks, seen, rec, str(task_id), Task(str(task_id), str(question), answers, meta), level
        )
    if skipped:
        logger.info("%s: skipped %d unanswerable MuSiQue records", origin, skipped)
    return tasks


_2WIKI_TYPES = {
    "comparison": "comparison",
    "bridge_comparison": "comparison",
    "compositional": "bridge",
    "inference": "bridge",
}


def _evidences(rec: _Record, raw: Any) -> list[tuple[str, str, str]]:
    if raw is None:
        return []
    if isinstance(raw, Mapping):  # Hugging Face column form: fact / relation / entity
        columns = [raw.get(k, []) for k in ("fact", "relation", "entity")]
        if not all(isinstance(c, list) and len(c) == len(columns[0]) for c in columns):
            raise rec.fail("'evidences' must map fact, relation, entity to equal-length lists")
        raw = list(zip(*columns, strict=True))
    if not isinstance(raw, list):
        raise rec.fail("'evidences' must be a list of [subject, relation, object] triples")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, (list, tuple)) or len(item) != 3:
            raise rec.fail(
                f"evidence {i} is not a [subject, relation, object] triple: {item!r:.80}"
            )
        out.append((str(item[0]), str(item[1]), str(item[2])))
    return out


def _2wiki_tasks(records: Iterable[tuple[str, Any]], origin: str, limit: int | None) -> list[Task]:
    tasks: list[Task] = []
    seen: set[str] = set()
    for where, raw in records:
        if limit is not None and len(tasks) >= limit:
            break
        rec = _Record(raw, origin, where, "2WikiMultihopQA")
        task_id, question = rec.text("_id", "id"), rec.text("question")
        answers = _answers(rec)
        context = _context(rec, rec.get("context"))
        support = _supporting(rec, rec.get("supporting_facts"))
        sentences = {t: s for t, s in context}
        chain = []
        for subj, relation, obj in _evidences(rec, rec.get("evidences")):
            title, sent = None, None
            for t, i in support:
                if t == subj or (title is None and 0 <= i < len(sentences.get(t, ())) and
                                 obj.lower() in sentences[t][i].lower()):  # fmt: skip
                    title, sent = t, i
                    if t == subj:
                        break
            chain.append(
                {"question": f"What is the {relation.replace('_', ' ')} of {subj}?",
                 "entity": subj, "answer": obj, "title": title, "sent": sent}
            )  # fmt: skip
        subtype = str(rec.get("type") or "compositional")
        hops = len(chain) or len({t for t, _ in support}) or 2
        meta = {
            "type": _2WIKI_TYPES.get(subtype, "bridge"),
            "subtype": subtype,
            "hops": hops,
            "context": context,
            "supporting_facts": support,
            "chain": chain,
            "dataset": "2wikimultihopqa",
        }
        level = min(max(hops - 1, 1), 5) if chain else None
        _finish(
            tasks, seen, rec, str(task_id), Task(str(task_id), str(question), answers, meta), level
        )
    return tasks


def _source(name: str, split: str, tasks: list[Task], origin: str) -> ListTaskSource:
    if not tasks:
        raise DataError(f"{origin}: no usable {name} records")
    return ListTaskSource(name, {split: tasks})


def _check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ConfigError(f"limit must be a positive integer or None, got {limit!r}")


def load_hotpotqa(
    path: PathLike, *, split: str = "validation", limit: int | None = None
) -> ListTaskSource:
    """HotpotQA distractor-setting file (a JSON list of ``{_id, question, answer, type,
    level, supporting_facts, context}``) as one split; ``level`` easy/medium/hard -> 1/3/5."""
    _check_limit(limit)
    tasks = _hotpot_tasks(_read_records(path, "HotpotQA"), str(path), limit)
    return _source("hotpotqa", split, tasks, str(path))


def load_musique(
    path: PathLike, *, split: str = "validation", limit: int | None = None
) -> ListTaskSource:
    """MuSiQue JSONL (``id, question, answer, answer_aliases, paragraphs,
    question_decomposition``) as one split.

    Paragraph text is split into sentences; the chain is the decomposition with ``#k``
    replaced by earlier answers, and each hop's supporting sentence is the first one of
    its paragraph that contains the hop's answer (0 when none does). Unanswerable
    records (MuSiQue-full) are skipped.
    """
    _check_limit(limit)
    tasks = _musique_tasks(_read_records(path, "MuSiQue"), str(path), limit)
    return _source("musique", split, tasks, str(path))


def load_2wiki(
    path: PathLike, *, split: str = "validation", limit: int | None = None
) -> ListTaskSource:
    """2WikiMultihopQA JSON (``_id, question, answer, type, context, supporting_facts,
    evidences``) as one split; each evidence triple becomes a chain hop.

    ``type`` comparison / bridge_comparison -> "comparison", compositional / inference
    -> "bridge"; the original is kept in ``meta["subtype"]``.
    """
    _check_limit(limit)
    tasks = _2wiki_tasks(_read_records(path, "2WikiMultihopQA"), str(path), limit)
    return _source("2wikimultihopqa", split, tasks, str(path))


def data_dir() -> Path:
    """Where ``load_multihop`` looks for downloaded files: ``$ORCHENV_DATA_DIR`` or
    ``~/.cache/orchenv/data``, one sub-folder per dataset."""
    return Path(os.environ.get("ORCHENV_DATA_DIR", "~/.cache/orchenv/data")).expanduser()


def load_multihop(
    name: str = "hotpotqa",
    path: PathLike | None = None,
    split: str = "validation",
    limit: int | None = None,
) -> ListTaskSource:
    """One split of HotpotQA (distractor), MuSiQue or 2WikiMultihopQA.

    Reads ``path`` when given; else the official file in ``data_dir()/<name>/``; else
    the Hugging Face Hub through ``datasets`` when online. Offline with no file, a
    ``DataError`` says which file to download and where to put it.
    """
    key = _DATASET_ALIASES.get(str(name).lower(), str(name).lower())
    if key not in _DATASETS:
        raise UnknownNameError("multihop dataset", str(name), [*_DATASETS, *_DATASET_ALIASES])
    _check_limit(limit)
    spec = _DATASETS[key]
    split = _SPLIT_ALIASES.get(split, split)
    loader = globals()[spec.loader]
    if path is not None:
        return loader(path, split=split, limit=limit)
    if split not in spec.files:
        raise UnknownNameError(f"split of {key}", split, spec.files)
    local = data_dir() / key / spec.files[split]
    if local.is_file():
        return loader(local, split=split, limit=limit)
    how = (
        f"download {spec.files[split]} from {spec.where} and put it at {local} "
        f"(or pass path=...; set ORCHENV_DATA_DIR to use another folder)"
    )
    offline = any(os.environ.get(v, "") in ("1", "true", "TRUE") for v in _OFFLINE_VARS)
    if offline:
        raise DataError(f"no local {key} {split} file and the Hub is offline; {how}")
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"no local {key} {split} file and the datasets package is missing (pip install "
            f'"orchenv[data]" to read it from the Hub); or {how}'
        ) from None
    try:
        rows = datasets.load_dataset(spec.hub_id, spec.hub_config, split=split)
    except Exception as exc:  # network, auth and format errors all mean: use a file
        raise DataError(
            f"could not load {spec.hub_id} ({split}) from the Hugging Face Hub "
            f"({type(exc).__name__}: {exc}); {how}"
        ) from exc
    origin = f"hf:{spec.hub_id}"
    records = ((f"row {i}", row) for i, row in enumerate(rows))
    make = {"hotpotqa": _hotpot_tasks, "musique": _musique_tasks, "2wikimultihopqa": _2wiki_tasks}
    return _source(key, split, make[key](records, origin, limit), origin)


_OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
