"""Seed 003's four benchmarks from local files, in the formats of their public releases.

Nothing is downloaded: point a loader at the file you have. Each returns a
``ListTaskSource`` with one split (``"test"``, or the name you pass) whose tasks carry the
same ``meta`` keys as the generated stand-ins (``tasks``), so the env, the agents and the
graders treat them alike:

- ``load_gsm_hard``: GSM-Hard (``reasoning-machines/gsm-hard``, ``gsmhardv2.jsonl``): one
  JSON object per line with ``input`` (the problem), ``target`` (a number) and ``code``
  (a PAL program defining ``solution()``, kept as the reference program).
- ``load_mmlu_pro``: MMLU-Pro (``TIGER-Lab/MMLU-Pro``, ``data/test-*.parquet`` or the same
  rows as JSON Lines): ``question_id``, ``question``, ``options`` (up to ten), ``answer``
  (the letter), ``answer_index``, ``category``, ``src``.
- ``load_commongen_hard``: CommonGen-Hard (Self-Refine / AgentVerse ``commongen_hard.jsonl``:
  ``{"concepts": [...]}`` per line), also CommonGen rows (``concept_set`` as
  ``"dog#frisbee#catch"`` with ``scene`` references, or ``concepts`` with ``target``).
- ``load_srdd``: SRDD (ChatDev's ``data_attribute_format.csv``: columns ``Name``,
  ``Description``, ``Category``; JSON Lines with the same keys also read). SRDD ships no
  tests, so a loaded task's ``score_answer`` is executability only: 1.0 when the code
  loads in the sandbox, 0.0 otherwise (the generated ``srdd`` tasks have hidden tests).

Parquet needs ``pyarrow`` (the ``data`` extra); malformed files raise ``DataError``
naming the file, row and field.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from orchenv.envs.puppeteer.tasks import LETTERS, commongen_reference
from orchenv.error import DataError, DependencyError
from orchenv.tasks import ListTaskSource, Task, read_jsonl

__all__ = ["load_commongen_hard", "load_gsm_hard", "load_mmlu_pro", "load_srdd", "read_rows"]

PathLike = str | os.PathLike[str]


# -- reading rows ----------------------------------------------------------------------------
def read_rows(path: PathLike) -> list[tuple[str, dict[str, Any]]]:
    """``(where, row)`` pairs of a ``.jsonl``, ``.json`` (a list of objects), ``.csv`` or
    ``.parquet`` file; ``where`` names the line or row for error messages."""
    file = Path(path)
    if not file.is_file():
        raise DataError(f"{file}: no such file; pass the path of a downloaded data file")
    suffix = file.suffix.lower()
    if suffix == ".parquet":
        return _parquet_rows(file)
    if suffix == ".csv":
        with file.open(encoding="utf-8-sig", newline="") as fh:
            return [(f"row {i}", dict(row)) for i, row in enumerate(csv.DictReader(fh), 2)]
    if suffix == ".json":
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(f"{file}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, list):
            raise DataError(f"{file}: expected a JSON list of objects")
        return [(f"item {i}", _object(file, f"item {i}", r)) for i, r in enumerate(data)]
    return [(where, _object(file, where, record)) for where, record in read_jsonl(file)]


def _object(file: Path, where: str, record: Any) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise DataError(f"{file}, {where}: expected a JSON object, got {type(record).__name__}")
    return record


def _parquet_rows(file: Path) -> list[tuple[str, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise DependencyError("pyarrow", "data", "reading parquet files") from exc
    table = pq.read_table(file)
    return [(f"row {i}", row) for i, row in enumerate(table.to_pylist())]


def _field(file: PathLike, where: str, row: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    wanted = " or ".join(repr(n) for n in names)
    raise DataError(f"{file}, {where}: missing field {wanted}; found {sorted(row)[:10]}")


def _source(name: str, split: str, tasks: list[Task], file: PathLike) -> ListTaskSource:
    if not tasks:
        raise DataError(f"{file}: no rows")
    return ListTaskSource(name, {split: tasks})


def _limit(rows: list[tuple[str, dict[str, Any]]], limit: int | None) -> Iterable[Any]:
    return rows if limit is None else rows[: max(0, int(limit))]


def _meta(kind: str, family: str, difficulty: float, prompt: str, **extra: Any) -> dict[str, Any]:
    return {
        "family": family,
        "kind": kind,
        "difficulty": difficulty,
        "files": {"problem.txt": prompt},
        "doc_id": None,
        "source": "file",
        **extra,
    }


# -- GSM-Hard --------------------------------------------------------------------------------
def _number_text(file: PathLike, where: str, value: Any) -> str:
    """A target as the text the grader compares: integral floats without ``.0``."""
    if isinstance(value, bool):
        raise DataError(f"{file}, {where}: field 'target' must be a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.replace(",", ""))
        except ValueError:
            raise DataError(f"{file}, {where}: field 'target' is not a number: {value!r}") from None
    if not isinstance(value, (int, float)) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise DataError(f"{file}, {where}: field 'target' must be a finite number, got {value!r}")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def load_gsm_hard(
    path: PathLike, *, split: str = "test", limit: int | None = None
) -> ListTaskSource:
    """GSM-Hard from ``gsmhardv2.jsonl`` (fields ``input``, ``target``, optional ``code``).

    Task ids are ``gsmhard-file-<row>``; ``meta["code"]`` holds the PAL program when the row
    has one (``tasks.reference_program`` runs it)."""
    tasks = []
    for i, (where, row) in enumerate(_limit(read_rows(path), limit)):
        prompt = str(_field(path, where, row, "input", "question"))
        answer = _number_text(path, where, _field(path, where, row, "target", "answer"))
        code = row.get("code")
        meta = _meta(
            "gsm-hard", "gsm_hard", 0.75, prompt, code=code if isinstance(code, str) else None
        )
        tasks.append(Task(id=f"gsmhard-file-{i}", prompt=prompt, answers=(answer,), meta=meta))
    return _source("gsm-hard", split, tasks, path)


# -- MMLU-Pro ---------------------------------------------------------------------------------
def load_mmlu_pro(
    path: PathLike, *, split: str = "test", limit: int | None = None, subjects: Iterable[str] = ()
) -> ListTaskSource:
    """MMLU-Pro from its parquet (or JSON Lines) rows.

    The answer letter is ``answer``, checked against ``answer_index`` when both are present
    (a mismatch raises ``DataError``); ``subjects`` keeps only those ``category`` values.
    Task ids are ``mmlupro-<question_id>``.
    """
    keep = {s.lower() for s in subjects}
    tasks = []
    for i, (where, row) in enumerate(_limit(read_rows(path), limit)):
        category = str(row.get("category") or "other")
        if keep and category.lower() not in keep:
            continue
        question = str(_field(path, where, row, "question"))
        options = _field(path, where, row, "options")
        if isinstance(options, str):
            try:
                options = json.loads(options)
            except json.JSONDecodeError:
                raise DataError(f"{path}, {where}: field 'options' is not a list") from None
        if isinstance(options, np.ndarray):
            options = options.tolist()
        if not isinstance(options, list) or not 2 <= len(options) <= len(LETTERS):
            raise DataError(f"{path}, {where}: field 'options' must be a list of 2 to 10 options")
        options = [str(o) for o in options]
        letter = _answer_letter(path, where, row, len(options))
        body = "\n".join(f"{LETTERS[k]}. {o}" for k, o in enumerate(options))
        prompt = f"{question}\n{body}\nAnswer with the letter of the correct option."
        qid = row.get("question_id", i)
        meta = _meta(
            "multiple-choice", "mmlu_pro", 0.6, prompt,
            options=tuple(options), subject=category, question=question, expression=None,
            src=row.get("src"),
        )  # fmt: skip
        tasks.append(Task(id=f"mmlupro-{qid}", prompt=prompt, answers=(letter,), meta=meta))
    return _source("mmlu-pro", split, tasks, path)


def _answer_letter(path: PathLike, where: str, row: Mapping[str, Any], n: int) -> str:
    letter = row.get("answer")
    index = row.get("answer_index")
    if isinstance(letter, str) and letter.strip().upper() in LETTERS[:n]:
        letter = letter.strip().upper()
        if index is not None and LETTERS.index(letter) != int(index):
            raise DataError(
                f"{path}, {where}: 'answer' {letter!r} disagrees with 'answer_index' {index}"
            )
        return letter
    if isinstance(index, (int, np.integer)) and 0 <= int(index) < n:
        return LETTERS[int(index)]
    raise DataError(
        f"{path}, {where}: no valid answer; expected 'answer' as a letter A-{LETTERS[n - 1]} "
        "or 'answer_index' as a number"
    )


# -- CommonGen-Hard ---------------------------------------------------------------------------
def load_commongen_hard(
    path: PathLike, *, split: str = "test", limit: int | None = None
) -> ListTaskSource:
    """CommonGen-Hard (``{"concepts": [...]}`` per line) or CommonGen rows (``concept_set``
    as ``"a#b#c"``, ``concepts`` as a list or a comma string).

    The reference answer is the row's own sentence when it has one (``target``, the first
    of ``scene`` / ``targets``), else a generated text using every concept
    (``tasks.commongen_reference``). Task ids are ``cgen-file-<row>``.
    """
    tasks = []
    for i, (where, row) in enumerate(_limit(read_rows(path), limit)):
        raw = _field(path, where, row, "concepts", "concept_set", "keywords")
        if isinstance(raw, np.ndarray):
            raw = raw.tolist()
        if isinstance(raw, str):
            parts = raw.split("#") if "#" in raw else raw.split(",")
        elif isinstance(raw, list):
            parts = [str(p) for p in raw]
        else:
            raise DataError(f"{path}, {where}: 'concepts' must be a list or a string")
        concepts = tuple(p.strip() for p in parts if p.strip())
        if not concepts:
            raise DataError(f"{path}, {where}: no concepts")
        reference = _reference_sentence(row) or commongen_reference(
            concepts, np.random.default_rng(i)
        )
        prompt = (
            "Write a short, coherent text (one or a few natural sentences, not a list) that "
            "uses all of these concepts: " + ", ".join(concepts)
        )
        meta = _meta("commongen", "commongen_hard", min(0.9, 0.3 + 0.015 * len(concepts)), prompt, concepts=concepts)  # fmt: skip
        tasks.append(Task(id=f"cgen-file-{i}", prompt=prompt, answers=(reference,), meta=meta))
    return _source("commongen-hard", split, tasks, path)


def _reference_sentence(row: Mapping[str, Any]) -> str | None:
    target = row.get("target")
    if isinstance(target, str) and target.strip():
        return target.strip()
    for key in ("scene", "targets"):
        value = row.get(key)
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, list) and value and isinstance(value[0], str):
            return value[0].strip()
    return None


# -- SRDD -------------------------------------------------------------------------------------
def load_srdd(path: PathLike, *, split: str = "test", limit: int | None = None) -> ListTaskSource:
    """SRDD from ``data_attribute_format.csv`` (``Name``, ``Description``, ``Category``;
    lower-case keys also read). No hidden tests exist for these rows: ``score_answer`` is
    executability only (the code loads in the sandbox), and ``reference_program`` is a
    placeholder module (SRDD has no reference solutions). Task ids are ``srdd-file-<row>``.
    """
    tasks = []
    for i, (where, row) in enumerate(_limit(read_rows(path), limit)):
        lower = {str(k).strip().lower(): v for k, v in row.items()}
        name = str(_field(path, where, lower, "name")).strip()
        description = str(_field(path, where, lower, "description")).strip()
        category = str(lower.get("category") or "").strip()
        prompt = (
            f"Software requirement ({category or 'uncategorised'}): {name}.\n{description}\n"
            "Reply with the complete Python code in one ```python block."
        )
        spec_text = f"Name: {name}\nCategory: {category}\nDescription: {description}\n"
        meta = _meta(
            "srdd", "srdd", 0.7, prompt,
            name=name, category=category, spec=description, tests=(), expected=(),
        )  # fmt: skip
        meta["files"] = {"problem.txt": prompt, "spec.md": spec_text}
        placeholder = repr(f"{name}: no reference solution ships with SRDD") + "\n"
        tasks.append(Task(id=f"srdd-file-{i}", prompt=prompt, answers=(placeholder,), meta=meta))
    return _source("srdd", split, tasks, path)
