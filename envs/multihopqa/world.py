"""The fictional world behind ``SyntheticMultihopSource``: entities, facts, paragraphs.

From ``seed`` it builds countries, cities, universities, companies, people, films,
books and bands with pronounceable invented names, linked by functional relations
(``directed_by``, ``born_in``, ``located_in``, ``capital`` ...) and dated by years.
Every entity has one encyclopedia-style paragraph (3-5 sentences, roughly 60-120
tokens) stating its facts, rendered on first use. The relation schema (``RELATIONS``,
the question wording, ``PATHS``) is what ``synth.py`` walks to write questions.
Every draw comes from ``orchenv.seeding``, so a seed gives the same world in any
process.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchenv.seeding import stable_int, stable_uniform

#: share of question-start entities reserved for the train split
TRAIN_SHARE = 0.75


# -- draws ---------------------------------------------------------------------------------------
class Draw:
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
class Relation:
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


RELATIONS: tuple[Relation, ...] = (
    Relation("film.directed_by", "person", "Who directed {}?", "the director of {}", "director"),
    Relation(
        "film.produced_by", "company", "Which studio produced {}?", "the studio behind {}", "studio"
    ),
    Relation("film.year", "year", "In what year was {} released?", "", verb="released"),
    Relation("book.written_by", "person", "Who wrote {}?", "the author of {}", "author"),
    Relation(
        "book.published_by",
        "company",
        "Which company published {}?",
        "the publisher of {}",
        "publisher",
    ),  # fmt: skip
    Relation("book.year", "year", "In what year was {} first published?", "", verb="published"),
    Relation("band.founded_by", "person", "Who founded {}?", "the founder of {}", "founder"),
    Relation(
        "band.formed_in",
        "city",
        "In which city was {} formed?",
        "the city where {} was formed",
        "home city",
    ),  # fmt: skip
    Relation("band.year", "year", "In what year was {} formed?", "", verb="formed"),
    Relation("company.founded_by", "person", "Who founded {}?", "the founder of {}", "founder"),
    Relation(
        "company.headquartered_in",
        "city",
        "In which city is {} headquartered?",
        "the city where {} is headquartered",
        "headquarters city",
    ),  # fmt: skip
    Relation("company.year", "year", "In what year was {} founded?", "", verb="founded"),
    Relation(
        "university.located_in",
        "city",
        "In which city is {} located?",
        "the home city of {}",
        "home city",
    ),  # fmt: skip
    Relation("university.year", "year", "In what year was {} founded?", "", verb="founded"),
    Relation(
        "person.born_in",
        "city",
        "In which city was {} born?",
        "the birthplace of {}",
        "birthplace",
    ),  # fmt: skip
    Relation(
        "person.educated_at",
        "university",
        "Which university did {} attend?",
        "the university attended by {}",
        "alma mater",
    ),  # fmt: skip
    Relation("person.year", "year", "In what year was {} born?", "", verb="born"),
    Relation(
        "city.in_country",
        "country",
        "In which country is {} located?",
        "the country where {} lies",
        "country",
    ),  # fmt: skip
    Relation("city.year", "year", "In what year was {} founded?", "", verb="founded"),
    Relation(
        "country.capital", "city", "What is the capital of {}?", "the capital of {}", "capital"
    ),
)
RELATIONS_BY_KEY = {r.key: r for r in RELATIONS}
_RELS_OF: dict[str, tuple[Relation, ...]] = {}
for _r in RELATIONS:
    _RELS_OF[_r.subject] = (*_RELS_OF.get(_r.subject, ()), _r)

# comparison wording per entity type: (earlier, later) questions
EARLIER_QUESTIONS = {
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
SAME_QUESTIONS = {
    "person.born_in": "Were {} and {} born in the same city?",
    "person.educated_at": "Did {} and {} attend the same university?",
    "city.in_country": "Are {} and {} in the same country?",
    "film.directed_by": "Were {} and {} directed by the same person?",
    "book.written_by": "Were {} and {} written by the same author?",
    "company.headquartered_in": "Are {} and {} headquartered in the same city?",
    "band.formed_in": "Were {} and {} formed in the same city?",
}
WHOSE = {
    "film": "Which film's",
    "book": "Which book's",
    "band": "Which band's",
    "company": "Which company's",
    "university": "Which university's",
    "person": "Whose",
}
START_WEIGHTS = {
    "film": 3.0,
    "book": 2.0,
    "band": 1.5,
    "company": 2.0,
    "university": 1.0,
    "person": 2.0,
    "city": 1.0,
    "country": 0.2,
}
MAX_HOPS = 5


def _type_paths(max_len: int) -> dict[tuple[str, int], list[tuple[Relation, ...]]]:
    """Every relation path by (start type, length); year relations only end a path."""
    paths: dict[tuple[str, int], list[tuple[Relation, ...]]] = {}

    def walk(start: str, etype: str, path: tuple[Relation, ...]) -> None:
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


PATHS = _type_paths(MAX_HOPS)


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


class KnowledgeBase:
    """The synthetic world of one seed: entities, their facts, and lazily rendered paragraphs."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        rng = np.random.default_rng(stable_int("mhqa-kb", seed))
        d = Draw(rng)
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
                if RELATIONS_BY_KEY[f"{self.etype[e]}.{rel}"].target != "year":
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
            split = "train" if stable_uniform("mhqa-split", seed, e) < TRAIN_SHARE else "test"
            self.pools.setdefault((split, etype), []).append(e)
        self.pool_sets = {key: frozenset(pool) for key, pool in self.pools.items()}
        self._namesakes: dict[int, list[int]] = {}
        self._paragraphs: dict[int, tuple[str, list[str], dict[str, int]]] = {}

    # names ---------------------------------------------------------------------------------
    def _word(self, d: Draw, syllables: int) -> str:
        parts = []
        for i in range(syllables):
            coda = d.pick(_CODAS) if i == syllables - 1 else d.pick(_MID_CODAS)
            parts.append(d.pick(_ONSETS) + d.pick(_VOWELS) + coda)
        return "".join(parts).capitalize()

    def _unique(self, d: Draw, make: Any) -> str:
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

    def _build(self, d: Draw) -> None:
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
    def value(self, e: int, rel: Relation) -> int:
        return self.facts[e][rel.name]

    def answer_text(self, e: int, rel: Relation) -> str:
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

    def siblings(self, rel: Relation, obj: int) -> list[int]:
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
        d = Draw(np.random.default_rng(stable_int("mhqa-para", self.seed, e)))
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
def knowledge_base(seed: int) -> KnowledgeBase:
    return KnowledgeBase(seed)
