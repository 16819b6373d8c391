"""Loaders for seed 002's single-hop and math benchmarks, from the files of their public
releases: GSM8K, PopQA, TriviaQA, SQuAD v2, and summarisation sets (XSum-style).

The multihop sets (2WikiMultihopQA, HotpotQA, MuSiQue) come from
``orchenv.envs.multihopqa.loaders``; ``orchenv.envs.orchmas.qa.orchmas_qa_source`` reaches
every set by name. Each loader reads a local file into a ``ListTaskSource`` with one split
and sets ``meta["domain"]`` (what the simulated executor's role fit reads), ``dataset``
and, where the release gives a signal, ``difficulty``. Malformed files raise
``DataError`` naming the file, the record and what was expected. Written by hand: the
formats are small and ``datasets`` would add a heavy dependency for reading a local file.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError
from orchenv.tasks import ListTaskSource, Task, difficulty_of, read_data_text, read_json_records

__all__ = [
    "LOADERS",
    "SQUAD_UNANSWERABLE",
    "gsm8k_final_answer",
    "load_gsm8k",
    "load_popqa",
    "load_squad_v2",
    "load_summarization",
    "load_triviaqa",
]

PathLike = str | os.PathLike
#: the reference answer of an unanswerable SQuAD v2 question (the prompt asks for it)
SQUAD_UNANSWERABLE = "unanswerable"


def _check(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive integer or None, got {limit!r}")


def _json_rows(
    path: PathLike, dataset: str, list_keys: tuple[str, ...] = ("data",)
) -> Iterator[tuple[str, Any]]:
    """(where, record) of a JSON list, a JSON object holding one under ``list_keys``, or
    JSON lines; ``where`` names the file too."""
    for where, row in read_json_records(path, dataset, list_keys):
        yield f"{Path(path).expanduser()}, {where}", row


def _field(row: Any, where: str, *names: str) -> str:
    if not isinstance(row, Mapping):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for name in names:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return value
    raise DataError(f"{where}: missing the {' / '.join(repr(n) for n in names)} field (a string)")


def _source(name: str, split: str, tasks: list[Task], path: PathLike) -> ListTaskSource:
    if not tasks:
        raise DataError(f"{path}: no usable {name} records")
    return ListTaskSource(name, {split: tasks})


def _with_level(task_id: str, prompt: str, answers: tuple[str, ...], meta: dict[str, Any]) -> Task:
    if meta.get("level") is not None and "difficulty" not in meta:
        meta["difficulty"] = difficulty_of(Task(task_id, prompt, answers, meta))
    return Task(task_id, prompt, answers, meta)


def gsm8k_final_answer(solution: str) -> str | None:
    """The number after the last ``####`` of a GSM8K solution, commas removed."""
    if "####" not in solution:
        return None
    answer = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return answer or None


def load_gsm8k(path: PathLike, *, split: str = "test", limit: int | None = None) -> ListTaskSource:
    """GSM8K JSON lines (``grade-school-math/data/{train,test}.jsonl``: ``question`` and an
    ``answer`` whose worked solution ends in ``#### N``).

    The reference is N (commas removed); the solution is kept in ``meta["solution"]``;
    ``level`` is the number of solution lines minus one, clipped to 1-5 (more steps,
    harder). ``meta["domain"] = "math"``.
    """
    _check(limit)
    tasks: list[Task] = []
    for i, (where, row) in enumerate(_json_rows(path, "GSM8K")):
        if limit is not None and len(tasks) >= limit:
            break
        question = _field(row, where, "question")
        solution = _field(row, where, "answer")
        final = gsm8k_final_answer(solution)
        if final is None:
            raise DataError(f"{where}: the answer has no '#### N' final line (GSM8K format)")
        steps = sum(1 for line in solution.split("####")[0].splitlines() if line.strip())
        meta = {
            "domain": "math",
            "type": "gsm8k",
            "dataset": "gsm8k",
            "solution": solution,
            "level": min(max(steps - 1, 1), 5),
        }
        tasks.append(_with_level(f"gsm8k/{split}/{i}", question, (final,), meta))
    return _source("gsm8k", split, tasks, path)


def _string_list(value: Any, where: str, name: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}: {name!r} must be a list of strings (or its JSON text)")
    return [v for v in value if v.strip()]


def _tsv_rows(path: PathLike, dataset: str) -> Iterator[tuple[str, Any]]:
    p, text = read_data_text(path, dataset)
    delimiter = "\t" if p.suffix.lower() == ".tsv" or "\t" in text.splitlines()[0] else ","
    reader = csv.DictReader(text.splitlines(), delimiter=delimiter)
    for lineno, row in enumerate(reader, 2):
        yield f"{p}, line {lineno}", row


def load_popqa(path: PathLike, *, split: str = "test", limit: int | None = None) -> ListTaskSource:
    """PopQA (``popQA.tsv`` of the release, or JSON / JSON lines with the same columns):
    ``question``, ``possible_answers`` (a JSON list of strings), ``s_pop`` (the subject's
    monthly Wikipedia page views), ``prop``, ``subj``, ``id``.

    Less popular subjects are harder (the paper's finding): ``difficulty`` is one minus
    the popularity's quantile within the file. ``meta["domain"] = "factoid"``.
    """
    _check(limit)
    p = Path(path)
    rows = (
        _tsv_rows(path, "PopQA")
        if p.suffix.lower() in (".tsv", ".csv")
        else _json_rows(path, "PopQA")
    )
    raw: list[tuple[str, str, tuple[str, ...], float, dict[str, Any]]] = []
    for i, (where, row) in enumerate(rows):
        if limit is not None and len(raw) >= limit:
            break
        question = _field(row, where, "question")
        answers = _string_list(row.get("possible_answers"), where, "possible_answers")
        if not answers:
            raise DataError(f"{where}: 'possible_answers' is empty")
        try:
            pop = float(row.get("s_pop") or 0.0)
        except (TypeError, ValueError):
            raise DataError(f"{where}: 's_pop' must be a number") from None
        task_id = f"popqa/{split}/{row.get('id', i)}"
        meta = {
            "domain": "factoid",
            "type": str(row.get("prop") or "popqa"),
            "dataset": "popqa",
            "subject": str(row.get("subj") or ""),
            "popularity": pop,
        }
        raw.append((task_id, question, tuple(dict.fromkeys(answers)), pop, meta))
    order = sorted(range(len(raw)), key=lambda k: raw[k][3])
    tasks: list[Task | None] = [None] * len(raw)
    for rank, k in enumerate(order):
        task_id, question, refs, _, meta = raw[k]
        meta["difficulty"] = 1.0 - (rank + 0.5) / len(raw)
        tasks[k] = Task(task_id, question, refs, meta)
    return _source("popqa", split, [t for t in tasks if t is not None], path)


def load_triviaqa(
    path: PathLike, *, split: str = "validation", limit: int | None = None
) -> ListTaskSource:
    """TriviaQA: the release's JSON (``{"Data": [{"Question", "QuestionId", "Answer":
    {"Value", "Aliases", ...}}]}``, rc or unfiltered) or rows of the Hub's layout
    (``question``, ``question_id``, ``answer: {value, aliases}``), JSON or JSON lines.
    References: the value, then its aliases. ``meta["domain"] = "factoid"``."""
    _check(limit)
    tasks: list[Task] = []
    for i, (where, row) in enumerate(_json_rows(path, "TriviaQA", ("Data", "data"))):
        if limit is not None and len(tasks) >= limit:
            break
        question = _field(row, where, "Question", "question")
        answer = row.get("Answer", row.get("answer"))
        if not isinstance(answer, Mapping):
            raise DataError(f"{where}: missing the 'Answer' object (Value, Aliases)")
        value = _field(answer, where, "Value", "value")
        aliases = _string_list(answer.get("Aliases", answer.get("aliases", [])), where, "Aliases")
        qid = row.get("QuestionId", row.get("question_id", i))
        meta = {"domain": "factoid", "type": "trivia", "dataset": "triviaqa"}
        tasks.append(
            Task(f"triviaqa/{split}/{qid}", question, tuple(dict.fromkeys([value, *aliases])), meta)
        )
    return _source("triviaqa", split, tasks, path)


SQUAD_PROMPT = (
    "Read the passage and answer the question with a short span from it. If the passage "
    "does not contain the answer, answer: {none}.\n\nPassage:\n{passage}\n\nQuestion: {question}"
)


def load_squad_v2(
    path: PathLike,
    *,
    split: str = "validation",
    limit: int | None = None,
    unanswerable: str = "keep",
) -> ListTaskSource:
    """SQuAD v2.0 (``dev-v2.0.json``: ``data[].paragraphs[].{context, qas[].{id, question,
    answers[].text, is_impossible}}``), or rows of the Hub's layout (``id``, ``context``,
    ``question``, ``answers: {text: [...]}``) as JSON lines.

    The prompt holds the passage and the question (``SQUAD_PROMPT``); ``meta["passage"]``
    and ``meta["question"]`` let the simulated executor tell whether a request carries
    them. Unanswerable questions: ``unanswerable="keep"`` (default) gives them the
    reference ``SQUAD_UNANSWERABLE``, which the prompt asks for; ``"skip"`` drops them.
    ``meta["domain"] = "reading"``.
    """
    _check(limit)
    if unanswerable not in ("keep", "skip"):
        raise ConfigError(f"unanswerable must be 'keep' or 'skip', got {unanswerable!r}")
    tasks: list[Task] = []

    def add(
        where: str, qid: Any, title: str, passage: str, question: str, texts: list[str]
    ) -> None:
        impossible = not texts
        if impossible and unanswerable == "skip":
            return
        answers = tuple(dict.fromkeys(texts)) if texts else (SQUAD_UNANSWERABLE,)
        prompt = SQUAD_PROMPT.format(none=SQUAD_UNANSWERABLE, passage=passage, question=question)
        meta = {
            "domain": "reading",
            "type": "reading",
            "dataset": "squad_v2",
            "title": title,
            "passage": passage,
            "question": question,
            "is_impossible": impossible,
        }
        tasks.append(Task(f"squad_v2/{split}/{qid}", prompt, answers, meta))

    for where, row in _json_rows(path, "SQuAD v2"):
        if limit is not None and len(tasks) >= limit:
            break
        if isinstance(row, Mapping) and "paragraphs" in row:  # the release's article
            for j, para in enumerate(row.get("paragraphs") or []):
                at = f"{where}, paragraph {j}"
                passage = _field(para, at, "context")
                for k, qa in enumerate(para.get("qas") or []):
                    qat = f"{at}, question {k}"
                    texts = [
                        a.get("text", "")
                        for a in (qa.get("answers") or [])
                        if isinstance(a, Mapping) and str(a.get("text", "")).strip()
                    ]
                    if qa.get("is_impossible"):
                        texts = []
                    add(qat, qa.get("id", f"{j}-{k}"), str(row.get("title", "")), passage,
                        _field(qa, qat, "question"), texts)  # fmt: skip
        else:  # a Hub row
            if not isinstance(row, Mapping):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            answers = row.get("answers") if isinstance(row, Mapping) else None
            texts = answers.get("text", []) if isinstance(answers, Mapping) else []
            add(where, row.get("id", len(tasks)), str(row.get("title", "")),
                _field(row, where, "context"), _field(row, where, "question"),
                [t for t in _string_list(texts, where, "answers.text")])  # fmt: skip
    if limit is not None:
        tasks = tasks[:limit]
    return _source("squad_v2", split, tasks, path)


def load_summarization(
    path: PathLike,
    *,
    name: str = "xsum",
    split: str = "test",
    limit: int | None = None,
    document_field: str = "document",
    summary_field: str = "summary",
    id_field: str = "id",
) -> ListTaskSource:
    """A summarisation set as JSON lines / a JSON list of ``{id, document, summary}``
    (XSum's Hub layout; for BookSum or WritingPrompts name their fields).

    Tasks are scored by cosine similarity (``meta["metric"] = "cosine"``, section 4.1);
    ``meta["passage"]`` is the document, which a request to the executor must carry.
    ``meta["domain"] = "summarization"``.
    """
    _check(limit)
    tasks: list[Task] = []
    for i, (where, row) in enumerate(_json_rows(path, name)):
        if limit is not None and len(tasks) >= limit:
            break
        document = _field(row, where, document_field)
        summary = _field(row, where, summary_field)
        prompt = f"Summarise the following text.\n\n{document}"
        meta = {
            "domain": "summarization",
            "type": "summarization",
            "dataset": name,
            "metric": "cosine",
            "passage": document,
            "question": "Summarise the following text.",
        }
        tasks.append(Task(f"{name}/{split}/{row.get(id_field, i)}", prompt, (summary,), meta))
    return _source(name, split, tasks, path)


#: dataset name -> loader (``orchmas_qa_source``)
LOADERS: dict[str, Callable[..., ListTaskSource]] = {
    "gsm8k": load_gsm8k,
    "popqa": load_popqa,
    "triviaqa": load_triviaqa,
    "squad_v2": load_squad_v2,
    "xsum": load_summarization,
    "summarization": load_summarization,
}
