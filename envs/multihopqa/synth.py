"""``SyntheticMultihopSource``: HotpotQA-style multihop questions over a generated world.

The offline default task source of ``orch/MultihopQA-v0`` (seed 004, RCR-Router: a
Planner decomposes the question, a Searcher retrieves paragraphs, a Recommender
answers). Questions follow relation paths through the world of ``world.py``:

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchenv.envs.multihopqa.world import (
    EARLIER_QUESTIONS,
    MAX_HOPS,
    PATHS,
    RELATIONS,
    RELATIONS_BY_KEY,
    SAME_QUESTIONS,
    START_WEIGHTS,
    WHOSE,
    Draw,
    KnowledgeBase,
    Relation,
    knowledge_base,
)
from orchenv.error import ConfigError
from orchenv.seeding import stable_int, stable_uniform
from orchenv.tasks import GeneratedTaskSource, Task

SPLITS = ("train", "test")
_CACHE_MAX = 16_384
_PHI = 0.6180339887498949
#: ``same_type_names`` holds at least this many names (when the world has them)
MIN_GUESSES = 3  # golden-ratio conjugate: low-discrepancy difficulty sequence


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
    ``answer_type`` is the answer's kind ("city", "person", "year", "yes/no" ...) and
    ``same_type_names`` the names of that kind the question's paragraphs mention, other
    than the answers, the chain's entities and their answers: what a reader of this
    context could guess in place of the answer (the simulated Recommender's wrong answers,
    issue 38; privileged, like ``chain``).
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
        if not 2 <= lo <= hi <= MAX_HOPS:
            raise ConfigError(
                f"hops must satisfy 2 <= min <= max <= {MAX_HOPS}, got {hops!r}; "
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
        self._offsets = {s: stable_uniform("mhqa-offset", self.seed, s) for s in SPLITS}
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
        kb = knowledge_base(self.seed)
        return [(title, sents) for title, sents, _ in map(kb.paragraph, range(len(kb.name)))]

    # generation ------------------------------------------------------------------------------
    def _generate(self, split: str, index: int) -> Task:
        kb = knowledge_base(self.seed)
        t = self.task_difficulty(split, index)
        hops = self._hop_count(split, index)
        d = Draw(np.random.default_rng(stable_int("mhqa-task", self.seed, split, index)))
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
        kind = answer_type(kb, chain, answers)
        meta["answer_type"] = kind
        meta["same_type_names"] = same_type_names(kb, context, kind, chain, answers)
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
            u = np.random.default_rng(stable_int("mhqa-plan", self.seed, split)).random((n, 2))
            comparison = [bool(x) for x in u[:, 0] < self.comparison_share]
            types: list[str] = []
            ranks: list[int] = []
            seen: dict[tuple[int, str], int] = {}
            for i in range(n):
                hops = self._hop_count(split, i)
                options = [ty for ty in START_WEIGHTS if (ty, hops) in PATHS]
                weights = np.array([START_WEIGHTS[ty] for ty in options])
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

    def _pairs(self, kb: KnowledgeBase, split: str, hops: int, etype: str) -> list[tuple[int, int]]:
        """All (start entity, path index) pairs of a split, in a seeded order."""
        key = (split, hops, etype)
        pairs = self._combos.get(key)
        if pairs is None:
            paths = PATHS[(etype, hops)]
            pool = kb.pools[(split, etype)]
            rng = np.random.default_rng(stable_int("mhqa-pairs", self.seed, *key))
            order = rng.permutation(len(pool) * len(paths)).tolist()
            pairs = [(pool[k // len(paths)], k % len(paths)) for k in order]
            pairs = self._combos[key] = [p for p in pairs if _walk(kb, p[0], paths[p[1]])]
        return pairs

    def _start(
        self, kb: KnowledgeBase, d: Draw, split: str, index: int, types: Sequence[str]
    ) -> int:
        """A start entity of one of ``types`` for a comparison question."""
        pool = kb.pools[(split, types[0] if len(types) == 1 else d.pick(types))]
        return pool[(index * 7919 + d.ri(0, 7)) % len(pool)]

    def _hop(self, kb: KnowledgeBase, e: int, rel: Relation) -> dict[str, Any]:
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
        self, kb: KnowledgeBase, d: Draw, split: str, index: int, hops: int
    ) -> tuple[str, tuple[str, ...], list[dict[str, Any]], list[int]]:
        _, types, ranks = self._plan(split)
        etype = types[index]
        pairs = self._pairs(kb, split, hops, etype)
        start, path_index = pairs[ranks[index] % len(pairs)]
        path = PATHS[(etype, hops)][path_index]
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
        self, kb: KnowledgeBase, d: Draw, split: str, index: int, deep: bool
    ) -> tuple[str, tuple[str, ...], list[dict[str, Any]], list[int]]:
        if deep:
            return self._deep_comparison(kb, d, split, index)
        kind = d.u()
        if kind < 0.3:  # same object? (yes/no)
            key = d.pick(sorted(SAME_QUESTIONS))
            rel = RELATIONS_BY_KEY[key]
            a = self._start(kb, d, split, index, [rel.subject])
            pool = kb.pools[(split, rel.subject)]
            members = kb.pool_sets[(split, rel.subject)]
            same = [x for x in kb.siblings(rel, kb.value(a, rel)) if x != a and x in members]
            b = d.pick(same) if same and d.u() < 0.5 else d.pick([x for x in pool if x != a])
            answer = "yes" if kb.value(a, rel) == kb.value(b, rel) else "no"
            question = SAME_QUESTIONS[key].format(kb.name[a], kb.name[b])
            chain = [self._hop(kb, a, rel), self._hop(kb, b, rel)]
            return question, (answer,), chain, [a, b]
        etype = d.pick(sorted(EARLIER_QUESTIONS))
        rel = RELATIONS_BY_KEY[f"{etype}.year"]
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
        question = EARLIER_QUESTIONS[etype][int(later)].format(kb.name[a], kb.name[b])
        winner = (a if ya > yb else b) if later else (a if ya < yb else b)
        return question, (kb.name[winner], *kb.aliases(winner)), chain, [a, b]

    def _deep_comparison(
        self, kb: KnowledgeBase, d: Draw, split: str, index: int
    ) -> tuple[str, tuple[str, ...], list[dict[str, Any]], list[int]]:
        """Compare the objects of one bridge hop each: 4 hops."""
        firsts = [
            r for r in RELATIONS if r.target in EARLIER_QUESTIONS and r.role and r.subject in WHOSE
        ]
        for _ in range(64):
            r1 = d.pick(firsts)
            a = self._start(kb, d, split, index, [r1.subject])
            b = d.pick(kb.pools[(split, r1.subject)])
            oa, ob = kb.value(a, r1), kb.value(b, r1)
            if a == b or oa == ob:
                continue
            if r1.target == "person" and d.u() < 0.35:  # were both objects born in one city?
                r2 = RELATIONS_BY_KEY["person.born_in"]
                answer = "yes" if kb.value(oa, r2) == kb.value(ob, r2) else "no"
                question = (
                    f"Were the {r1.role}s of {kb.name[a]} and {kb.name[b]} born in the same city?"
                )
                answers: tuple[str, ...] = (answer,)
                break
            r2 = RELATIONS_BY_KEY[f"{r1.target}.year"]
            ya, yb = kb.value(oa, r2), kb.value(ob, r2)
            if ya == yb:
                continue
            verb = "is older" if r2.verb == "founded" and d.u() < 0.3 else f"was {r2.verb} first"
            question = f"{WHOSE[r1.subject]} {r1.role} {verb}, {kb.name[a]} or {kb.name[b]}?"
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
        kb: KnowledgeBase,
        d: Draw,
        chain: Sequence[Mapping[str, Any]],
        related: Sequence[int],
        t: float,
    ) -> list[list[Any]]:
        gold = list(dict.fromkeys(kb.by_name[hop["entity"]] for hop in chain))
        taken = set(gold)
        n_conf = min(round(t * self.n_distractors), self.n_distractors)
        candidates: list[int] = [e for e in related if e not in taken]
        for hop in chain:
            rel = RELATIONS_BY_KEY[hop["relation"]]
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


def answer_type(
    kb: KnowledgeBase, chain: Sequence[Mapping[str, Any]], answers: Sequence[str]
) -> str:
    """The kind of a question's answer: ``"yes/no"``, ``"year"``, or an entity type."""
    if answers and answers[0] in ("yes", "no"):
        return "yes/no"
    entity = kb.by_name.get(answers[0]) if answers else None
    if entity is not None:
        return kb.etype[entity]
    return RELATIONS_BY_KEY[chain[-1]["relation"]].target if chain else "year"


def same_type_names(
    kb: KnowledgeBase,
    context: Sequence[Sequence[Any]],
    kind: str,
    chain: Sequence[Mapping[str, Any]],
    answers: Sequence[str],
) -> list[str]:
    """Names of entities of type ``kind`` mentioned in ``context`` (whole words), in the
    world's order, except the answers and the chain's entities and hop answers; filled up
    to ``MIN_GUESSES`` with other names of that kind from the world (a reader who finds no
    candidate in its context still names one of the right kind)."""
    if kind not in kb.of_type:
        return []
    text = "\n".join(" ".join(str(s) for s in sentences) for _, sentences in context)
    skip = {
        *answers,
        *(str(h.get("entity")) for h in chain),
        *(str(h.get("answer")) for h in chain),
    }
    out = []
    for e in kb.of_type[kind]:
        name = kb.name[e]
        at = text.find(name)
        while at >= 0:
            end = at + len(name)
            if (at == 0 or not text[at - 1].isalnum()) and (
                end == len(text) or not text[end].isalnum()
            ):
                break
            at = text.find(name, at + 1)
        if at >= 0 and name not in skip:
            out.append(name)
    if len(out) < MIN_GUESSES:
        pool = kb.of_type[kind]
        start = stable_int("mhqa-guess", kb.seed, *answers) % len(pool)
        for e in (*pool[start:], *pool[:start]):
            if len(out) >= MIN_GUESSES:
                break
            if kb.name[e] not in skip and kb.name[e] not in out:
                out.append(kb.name[e])
    return out


def _walk(kb: KnowledgeBase, start: int, path: Sequence[Relation]) -> tuple[list[int], int] | None:
    """(subjects of each hop, final value) along ``path``; None if an entity repeats."""
    facts = kb.facts
    entities = [start]
    for rel in path[:-1]:
        entities.append(facts[entities[-1]][rel.name])
    final = facts[entities[-1]][path[-1].name]
    visited = [*entities, final] if path[-1].target != "year" else entities
    return (entities, final) if len(set(visited)) == len(visited) else None
