"""The real multihop benchmarks of seed 004: HotpotQA (distractor), MuSiQue, 2WikiMultihopQA.

The loaders read local files, or the Hugging Face Hub through ``datasets`` when
online, into tasks with the same ``meta`` keys as ``SyntheticMultihopSource``
(``type``, ``hops``, ``level``, ``difficulty``, ``context``, ``supporting_facts``,
``chain``, ``dataset``). ``to_hotpot_record`` writes any multihop task back as a
HotpotQA record.

Every task gets a hop ``chain``, which the simulated pool needs to tell which facts a
prompt holds: MuSiQue's from its question decomposition, 2WikiMultihopQA's from its
evidence triples, HotpotQA's (and a 2Wiki file without triples) from the supporting facts
(``support_chain``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError, UnknownNameError
from orchenv.tasks import ListTaskSource, Task, difficulty_of, read_json_records

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

#: HotpotQA's level names and orchenv's 1-5 levels
_LEVEL_NAMES = {1: "easy", 2: "easy", 3: "medium", 4: "hard", 5: "hard"}
_LEVEL_OF_NAME = {"easy": 1, "medium": 3, "hard": 5}
#: environment variables that keep ``datasets`` off the network
_OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


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


_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)$")


def _bare(title: str) -> str:
    """A Wikipedia title without its disambiguation: "Jaws (film)" -> "Jaws"."""
    return _DISAMBIGUATION.sub("", title).strip() or title


def _mentions(sentences: Sequence[str], name: str) -> bool:
    """Whether a sentence names ``name`` (or its bare title), case-insensitively."""
    names = {name.lower().strip(), _bare(name).lower()} - {""}
    return any(n in s.lower() for s in sentences for n in names)


def support_chain(
    question: str,
    answer: str,
    qtype: str,
    context: Sequence[Sequence[Any]],
    support: Sequence[Sequence[Any]],
) -> list[dict[str, Any]]:
    """A hop chain (``question``, ``entity``, ``answer``, ``title``, ``sent``) built from
    HotpotQA-style supporting facts, for records that ship no decomposition.

    One hop per supporting paragraph. A comparison keeps the facts' order: each hop is
    about its paragraph's title, and its "answer" is the supporting sentence (the fact to
    compare). A bridge question orders the paragraphs so that each one's supporting
    sentence names the next paragraph's title (the bridge entity, the hop's answer), with
    the paragraph that holds the answer last. The first hop asks the question itself; a
    later hop asks it about the entity just found. The simulated pool uses the chain to
    tell which facts a prompt holds; nothing here reads the answer into the question.
    """
    paragraphs = {str(t): list(sents) for t, sents in context}
    titles = list(dict.fromkeys(str(t) for t, _ in support if str(t) in paragraphs))
    facts = {
        t: [i for tt, i in support if tt == t and 0 <= int(i) < len(paragraphs[t])] or [0]
        for t in titles
    }

    def text(title: str) -> list[str]:
        return [paragraphs[title][i] for i in facts[title]]

    def sentence_naming(title: str, name: str) -> int:
        return next(
            (i for i in facts[title] if _mentions([paragraphs[title][i]], name)), facts[title][0]
        )

    if qtype == "comparison":
        return [
            {
                "question": f"About {_bare(t)}: {question}",
                "entity": _bare(t),
                "answer": paragraphs[t][facts[t][0]].strip(),
                "title": t,
                "sent": facts[t][0],
            }
            for t in titles
        ]
    order: list[str] = []
    remaining = list(titles)
    while remaining:
        free = [t for t in remaining if not any(_mentions(text(o), t) for o in remaining if o != t)]
        candidates = free or remaining
        pick = next((t for t in candidates if not _mentions(text(t), answer)), candidates[0])
        order.append(pick)
        remaining.remove(pick)
    chain = []
    for k, title in enumerate(order):
        last = k == len(order) - 1
        target = answer if last else _bare(order[k + 1])
        chain.append(
            {
                "question": question if k == 0 else f"About {_bare(title)}: {question}",
                "entity": None if k == 0 else _bare(title),
                "answer": target,
                "title": title,
                "sent": sentence_naming(title, target),
            }
        )
    return chain


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
        qtype = str(rec.get("type") or "bridge")
        chain = support_chain(str(question), answers[0], qtype, context, support)
        meta = {
            "type": qtype,
            "hops": len(chain) or 2,
            "context": context,
            "supporting_facts": support,
            "chain": chain,
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


def _locate_fact(
    context: Sequence[Sequence[Any]], support: Sequence[Sequence[Any]], subject: str, obj: str
) -> tuple[str | None, int | None]:
    """(title, sentence index) of the sentence stating ``subject`` -> ``obj``: a supporting
    fact of the subject's paragraph (the one naming ``obj`` first), else any supporting
    fact naming ``obj``, else the subject's paragraph in the context; (None, None) if none."""
    sentences = {str(t): list(s) for t, s in context}

    def names_obj(title: str, i: int) -> bool:
        return 0 <= i < len(sentences.get(title, ())) and _mentions([sentences[title][i]], obj)

    own = [(t, i) for t, i in support if subject in (t, _bare(t))]
    found = next(((t, i) for t, i in own if names_obj(t, i)), None) or (own[0] if own else None)
    found = found or next(((t, i) for t, i in support if names_obj(t, i)), None)
    if found is not None:
        return found[0], found[1]
    for title, sents in sentences.items():
        if subject in (title, _bare(title)):
            return title, next((i for i in range(len(sents)) if names_obj(title, i)), 0)
    return None, None


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
        chain = []
        for subj, relation, obj in _evidences(rec, rec.get("evidences")):
            title, sent = _locate_fact(context, support, subj, obj)
            chain.append(
                {"question": f"What is the {relation.replace('_', ' ')} of {subj}?",
                 "entity": subj, "answer": obj, "title": title, "sent": sent}
            )  # fmt: skip
        subtype = str(rec.get("type") or "compositional")
        if not chain:  # a file without evidence triples: build the hops from the facts
            kind = _2WIKI_TYPES.get(subtype, "bridge")
            chain = support_chain(str(question), answers[0], kind, context, support)
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
    level, supporting_facts, context}``) as one split; ``level`` easy/medium/hard -> 1/3/5.
    The hop chain comes from the supporting facts (``support_chain``)."""
    _check_limit(limit)
    tasks = _hotpot_tasks(read_json_records(path, "HotpotQA"), str(path), limit)
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
    tasks = _musique_tasks(read_json_records(path, "MuSiQue"), str(path), limit)
    return _source("musique", split, tasks, str(path))


def load_2wiki(
    path: PathLike, *, split: str = "validation", limit: int | None = None
) -> ListTaskSource:
    """2WikiMultihopQA JSON (``_id, question, answer, type, context, supporting_facts,
    evidences``) as one split; each evidence triple becomes a chain hop.

    ``type`` comparison / bridge_comparison -> "comparison", compositional / inference
    -> "bridge"; the original is kept in ``meta["subtype"]``. A hop's sentence is the
    supporting fact of its subject's paragraph that names its object (``_locate_fact``);
    a record without evidence triples gets its chain from the supporting facts.
    """
    _check_limit(limit)
    tasks = _2wiki_tasks(read_json_records(path, "2WikiMultihopQA"), str(path), limit)
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


# -- FanOutQA (oracle evidence) --------------------------------------------------------------

#: what ``meta["evidence"]`` says about a FanOutQA task's paragraphs
FANOUTQA_EVIDENCE = "oracle-subanswers"
#: the longest answer text built from a FanOutQA answer (dict answers list every entity)
_FANOUT_ANSWER_CHARS = 2_000


def _fanout_text(value: Any) -> str:
    """A FanOutQA answer (str, number, bool, list or ``{entity: answer}``) as one string:
    lists joined by ``", "``, dicts as ``"key: value; ..."``."""
    if isinstance(value, Mapping):
        text = "; ".join(f"{k}: {_fanout_text(v)}" for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = ", ".join(_fanout_text(v) for v in value)
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    else:
        text = str(value)
    return text[:_FANOUT_ANSWER_CHARS]


def _fanout_hops(subquestions: Sequence[Any]) -> Iterable[Any]:
    """Every sub-question of a decomposition that has evidence or no further decomposition,
    depth first (an intermediate node without a page of its own is covered by its leaves)."""
    for sub in subquestions:
        if sub.evidence is not None or not sub.decomposition:
            yield sub
        yield from _fanout_hops(sub.decomposition)


def _fanout_task(question: Any) -> Task:
    """One FanOutQA dev question as a task whose context is its oracle evidence: one
    paragraph per Wikipedia page its decomposition cites, each sentence a sub-question with
    its gold sub-answer ("Q? A.")."""
    context: dict[str, list[str]] = {}
    chain: list[dict[str, Any]] = []
    urls: list[str] = []
    for sub in _fanout_hops(question.decomposition):
        title = sub.evidence.title if sub.evidence is not None else f"FanOutQA note {sub.id}"
        if sub.evidence is not None and sub.evidence.url not in urls:
            urls.append(sub.evidence.url)
        answer = _fanout_text(sub.answer)
        sentences = context.setdefault(title, [])
        sentences.append(f"{' '.join(str(sub.question).split())} {answer}.")
        chain.append(
            {
                "question": str(sub.question),
                "entity": title,
                "answer": answer,
                "title": title,
                "sent": len(sentences) - 1,
            }
        )
    hops = len(chain)
    meta: dict[str, Any] = {
        "type": "bridge",
        "subtype": "fanout",
        "hops": hops,
        "context": [[title, sentences] for title, sentences in context.items()],
        "supporting_facts": [[h["title"], h["sent"]] for h in chain],
        "chain": chain,
        "dataset": "fanoutqa",
        "evidence": FANOUTQA_EVIDENCE,
        "wikipedia_urls": urls,
        "categories": list(question.categories or []),
    }
    meta["level"] = 2 if hops <= 2 else 3 if hops <= 4 else 4 if hops <= 8 else 5
    task = Task(str(question.id), str(question.question), (_fanout_text(question.answer),), meta)
    meta["difficulty"] = difficulty_of(task)
    return Task(task.id, task.prompt, task.answers, meta)


def load_fanoutqa(*, split: str = "validation", limit: int | None = None) -> ListTaskSource:
    """FanOutQA's 310 dev questions (the ``fanoutqa`` package ships them; ``pip install
    "orchenv[data]"``) as the ``validation`` split, in an **oracle-evidence** setting.

    FanOutQA's evidence is live English Wikipedia (each sub-question cites a page revision),
    which orchenv does not fetch. What stands in for it: each cited page becomes a paragraph
    whose sentences are the decomposition's own sub-questions with their gold sub-answers
    (``meta["evidence"] == "oracle-subanswers"``; the page URLs are in
    ``meta["wikipedia_urls"]``). There are no distractor paragraphs, so the search finds
    gold facts easily: scores on this source measure whether a team follows the chain and
    assembles the answer, not retrieval from Wikipedia, and are not comparable with the
    FanOutQA leaderboard. Answers with several entities (``{entity: value}``) become one
    string ``"entity: value; ..."``, graded by token F1 like the other multihop sources.
    The test questions ship without answers and are not loaded.
    """
    _check_limit(limit)
    split = _SPLIT_ALIASES.get(split, split)
    if split != "validation":
        raise UnknownNameError(
            "split of fanoutqa (the test questions ship without answers)", split, ["validation"]
        )
    try:
        import fanoutqa
    except ImportError:
        raise DataError(
            'the fanoutqa package is missing; pip install "orchenv[data]" (or fanoutqa)'
        ) from None
    try:
        questions = fanoutqa.load_dev()
    except Exception as exc:  # a broken install: say which package
        raise DataError(
            f"could not load FanOutQA's dev set from the fanoutqa package ({exc})"
        ) from exc
    tasks = [_fanout_task(q) for q in questions[:limit]]
    return _source("fanoutqa", split, tasks, "fanoutqa (package data)")
