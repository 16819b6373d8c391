"""Which relation a request asks about, whatever its wording (issue 25).

The simulated executor of ``orch/OrchMAS-v0`` reads a request as a correct sub-question
of a multi-hop chain when it names the hop's entity *and* asks for the hop's relation.
Before issue 25 "asks for the relation" meant "repeats most of the generator's own
words" ("Who founded X?"), so a correct sub-question in natural wording ("Who is the
founder of X?") was read as off-chain and answered wrongly: an LLM orchestrator was
punished for paraphrasing. This module reads the relation the way a reader would:

* ``RELATION_TERMS``: for each relation of the multi-hop generator
  (``orchenv.envs.multihopqa.world.RELATIONS``), words that name it (its verb, the
  verb's other forms, its noun: "founded", "founder", "started", "established", ...);
* ``TARGET_CUES``: words that say what kind of answer is wanted ("who" / "person" for a
  person, "where" / "city" for a city, "when" / "year" for a year, ...).

A request asks for relation ``r`` of a subject when it holds a word of ``r`` and scores
strictly higher than every other relation of the same subject type, where a relation
scores 1 for a word of its own plus 1 for a cue of its answer type. "Who founded X?"
and "Who is the founder of X?" ask ``company.founded_by`` (founder word + person cue),
"When was X founded?" asks ``company.year`` (the same verb, a year cue), and "X
founded" alone is ambiguous (a tie) and asks neither. Word order, questions or
imperatives and politeness do not matter: the reading is a set of words. A request that
names every relation at once ties and asks none of them, so stuffing does not pay.

Linear in the request's length (one pass to build its word set, then a fixed number of
set look-ups); relations the lexicon does not know (the real datasets' free-form
relations) are left to the caller's older word-recall rule (``relation_asked`` returns
None).
"""

from __future__ import annotations

from collections.abc import Iterable

from orchenv.envs.multihopqa.world import RELATIONS, RELATIONS_BY_KEY


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: answer type -> words that ask for an answer of that type
TARGET_CUES: dict[str, frozenset[str]] = {
    "person": _words("who whom whose person people individual name"),
    "company": _words("who which company studio publisher firm house label"),
    "city": _words("where city town place"),
    "country": _words("where country nation"),
    "university": _words("where university college school institution"),
    "year": _words("year when date"),
}

_FOUNDED = (
    "founded found founds founding started start starts establish established created create set"
)

#: relation key -> words that name the relation (normalised, lower case)
RELATION_TERMS: dict[str, frozenset[str]] = {
    "film.directed_by": _words("directed director directs direct directing filmmaker helmed helm"),
    "film.produced_by": _words(
        "produced producer produce produces production studio made make behind"
    ),
    "film.year": _words(
        "released release releases premiered premiere came come debut debuted made make"
    ),
    "book.written_by": _words("wrote written write writes author authored writer penned"),
    "book.published_by": _words("published publisher publish publishes publishing imprint"),
    "book.year": _words("published publish publication released release came come appeared first"),
    "band.founded_by": _words(f"{_FOUNDED} founder founders formed form cofounded"),
    "band.formed_in": _words(f"{_FOUNDED} formed form origin originated from hometown"),
    "band.year": _words(f"{_FOUNDED} formed form"),
    "company.founded_by": _words(f"{_FOUNDED} founder founders cofounded formed form"),
    "company.headquartered_in": _words(
        "headquartered headquarters hq based base head office offices located"
    ),
    "company.year": _words(f"{_FOUNDED} incorporated opened formed form"),
    "university.located_in": _words("located location situated based lies campus city where"),
    "university.year": _words(f"{_FOUNDED} opened open chartered"),
    "person.born_in": _words("born birth birthplace native hometown"),
    "person.educated_at": _words(
        "attend attended attends studied study studies educated education alma mater "
        "graduate graduated university college school enrolled"
    ),
    "person.year": _words("born birth"),
    "city.in_country": _words("country nation located lies lie situated part"),
    "city.year": _words(f"{_FOUNDED} settled built"),
    "country.capital": _words("capital"),
}

#: subject type -> its relations (keys)
_BY_SUBJECT: dict[str, tuple[str, ...]] = {}
for _rel in RELATIONS:
    _BY_SUBJECT[_rel.subject] = (*_BY_SUBJECT.get(_rel.subject, ()), _rel.key)


def _score(key: str, words: frozenset[str]) -> int:
    if not RELATION_TERMS[key] & words:
        return 0
    cues = TARGET_CUES.get(RELATIONS_BY_KEY[key].target, frozenset())
    return 1 + bool(cues & words)


def relation_asked(key: str, words: Iterable[str]) -> bool | None:
    """Whether a request whose normalised words are ``words`` asks for relation ``key``
    (module docstring); None when the lexicon does not know ``key``."""
    if key not in RELATION_TERMS or key not in RELATIONS_BY_KEY:
        return None
    have = words if isinstance(words, frozenset) else frozenset(words)
    own = _score(key, have)
    if own == 0:
        return False
    rivals = _BY_SUBJECT.get(RELATIONS_BY_KEY[key].subject, ())
    return all(_score(other, have) < own for other in rivals if other != key)


def relation_words(key: str) -> frozenset[str]:
    """The words that name relation ``key`` or its answer type (empty when unknown)."""
    rel = RELATIONS_BY_KEY.get(key)
    if rel is None or key not in RELATION_TERMS:
        return frozenset()
    return RELATION_TERMS[key] | TARGET_CUES.get(rel.target, frozenset())
