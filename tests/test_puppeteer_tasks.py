"""Puppeteer's task stand-ins, corpus and real-dataset loaders (``orchenv.envs.puppeteer``
``tasks``, ``corpus``, ``loaders``): shapes close to GSM-Hard, MMLU-Pro, CommonGen-Hard and
SRDD, graders that reward the right thing, and the sandboxed SRDD test run."""

from __future__ import annotations

import csv
import json
import re
import string

import numpy as np
import pytest

from orchenv.envs.puppeteer import tasks as T
from orchenv.envs.puppeteer.corpus import (
    CORPUS,
    FACT_GROUPS,
    corpus_index,
    fact_doc_id,
    load_corpus,
)
from orchenv.envs.puppeteer.loaders import (
    load_commongen_hard,
    load_gsm_hard,
    load_mmlu_pro,
    load_srdd,
)
from orchenv.envs.puppeteer.tools import run_python, sandbox_problem, search
from orchenv.error import DataError

PROBLEM = sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"bwrap unusable here: {PROBLEM}")


def last_line(code: str) -> str:
    result = run_python(code, timeout_s=10)
    assert result.ok, (result.error, result.meta.get("stderr"))
    return result.output.strip().splitlines()[-1]


# -- every kind ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", T.TASK_KINDS)
def test_meta_contract_and_determinism(kind):
    for i in range(6):
        task = T.make_task(kind, 3, i, "train")
        assert task == T.make_task(kind, 3, i, "train")
        assert task.prompt != T.make_task(kind, 3, i, "test").prompt or kind == "srdd"
        meta = task.meta
        assert meta["family"] == T.FAMILY_OF_KIND[kind] and meta["kind"] == kind
        assert T.kind_of(task) == kind
        assert 0.0 <= meta["difficulty"] < 1.0
        assert meta["files"]["problem.txt"] == task.prompt
        assert meta["doc_id"] is None or meta["doc_id"] in CORPUS
    source = T.PuppeteerTaskSource(kind, seed=3, n_tasks=5)
    first = source.get("test", 2)
    assert source.by_id(first.id) == first


# -- GSM-Hard --------------------------------------------------------------------------------
def test_gsm_hard_many_templates_large_numbers_exact_answers():
    tasks = [T.gsm_hard_task(0, i) for i in range(300)]
    templates = {t.meta["template"] for t in tasks}
    assert len(templates) >= 20 and {f"file:{w}" for w in T.GSM_FILE_TEMPLATES} <= templates
    for task in tasks:
        assert re.fullmatch(r"-?\d+", task.answer)
        assert str(eval(task.meta["expression"])) == task.answer  # noqa: S307 - generated
        numbers = [int(n) for n in re.findall(r"\d+", str(task.meta["files"]))]
        assert max(numbers) >= 100_000  # GSM-Hard's big numbers
        assert task.meta["steps"] >= 2  # multi-step


def test_gsm_file_tasks_need_the_file():
    task = next(t for t in map(lambda i: T.gsm_hard_task(0, i), range(200)) if t.meta["data_file"])
    name = task.meta["data_file"]
    assert name in task.prompt and name in task.meta["files"]
    data_numbers = set(re.findall(r"\d{4,}", task.meta["files"][name]))
    assert data_numbers and not data_numbers & set(re.findall(r"\d+", task.prompt))


# -- MMLU-Pro --------------------------------------------------------------------------------
def test_mmlu_pro_ten_options_over_its_categories():
    tasks = [T.multiple_choice_task(0, i, "test") for i in range(300)]
    assert {t.meta["subject"] for t in tasks} == set(T.MMLU_PRO_SUBJECTS)
    assert len({t.answer for t in tasks}) == 10  # the right letter moves over A-J
    for task in tasks:
        options = task.meta["options"]
        assert len(options) == len(set(options)) == 10
        assert f"J. {options[9]}" in task.prompt
        assert T.extract_choice(f"The answer is ({task.answer})") == task.answer


def test_every_fact_is_found_by_its_question_and_wrong_queries_miss():
    index = corpus_index()
    for group in FACT_GROUPS:
        assert len(group.options_pool()) >= 10
        for fact in group.facts:
            hits = search(group.question.format(clue=fact.clue), index, k=1).meta["hits"]
            assert hits[0][0] == fact_doc_id(group, fact)
    assert not search("zzzz qqqq", index).ok


@pytest.mark.parametrize("kind", ["multiple-choice", "srdd"])
def test_search_terms_rank_the_task_document_first(kind):
    index = corpus_index()
    for i in range(40):
        task = T.make_task(kind, 0, i)
        hits = search(T.search_terms(task), index, k=1).meta["hits"]
        assert hits[0][0] == task.meta["doc_id"], (T.search_terms(task), hits)


# -- CommonGen-Hard ----------------------------------------------------------------------------
def test_commongen_hard_scores_more_than_coverage():
    task = T.commongen_task(0, 4)
    concepts = task.meta["concepts"]
    assert 20 <= len(concepts) <= 30
    assert T.commongen_score(task.answer, concepts) == 1.0
    cheats = [
        " ".join(concepts),  # a bag of words covers everything
        ", ".join(concepts) + ".",
        "The story involves " + ", ".join(concepts) + ".",
        "the " + " the ".join(concepts),  # function words alone do not help: density and
        " and ".join(concepts),  # lists stay list-like
    ]
    for text in cheats:
        assert T.concept_coverage(text, concepts) == 1.0
        assert T.commongen_score(text, concepts) < 0.2, text
    half = " ".join(re.split(r"(?<=\.)\s+", task.answer)[:4])
    assert 0.0 < T.commongen_score(half, concepts) < 0.7
    assert T.commongen_score("", concepts) == T.commongen_score(None, concepts) == 0.0
    assert T.commongen_score("x" * 30_000, concepts) == 0.0


# -- programs --------------------------------------------------------------------------------
@needs_bwrap
@pytest.mark.parametrize("kind", ["gsm-hard", "multiple-choice", "commongen"])
def test_reference_program_right_flawed_program_wrong(kind):
    rng = np.random.default_rng(0)
    for i in range(4):
        task = T.make_task(kind, 1, i, "test")
        assert T.score_answer(kind, task, last_line(T.reference_program(task))) == 1.0
        assert T.score_answer(kind, task, last_line(T.flawed_program(task, rng))) < 0.95


# -- SRDD ------------------------------------------------------------------------------------
def _task_of_spec(key: str) -> T.Task:
    return next(t for t in (T.srdd_task(0, i) for i in range(500)) if t.meta["spec_key"] == key)


@needs_bwrap
@pytest.mark.timeout(120)
def test_srdd_reference_passes_every_bug_fails_in_the_sandbox():
    for spec in T.SRDD_SPECS:
        task = _task_of_spec(spec.key)
        assert "spec.md" in task.meta["files"] and task.meta["name"] == spec.name
        answer = T.extract_answer("srdd", f"Here it is:\n```python\n{task.answer}```\nDone.")
        assert T.graded_score("srdd", task, answer) == (1.0, "ok"), spec.key
        values = T._spec_values(spec, task.meta["params"])  # noqa: SLF001 - same package's test
        for old, new in spec.bugs:
            old_text = string.Template(old).substitute(values)
            assert old_text in task.answer
            buggy = task.answer.replace(old_text, string.Template(new).substitute(values), 1)
            assert T.score_answer("srdd", task, buggy) < 1.0, (spec.key, old)


@needs_bwrap
@pytest.mark.timeout(60)
def test_srdd_hostile_candidates_cannot_fake_a_pass():
    task = _task_of_spec("inventory")
    tests, expected = task.meta["tests"], task.meta["expected"]
    always_equal = (
        "class Yes:\n    def __eq__(self, other):\n        return True\n"
        "class Inventory:\n    def __getattr__(self, name):\n        return lambda *a: Yes()\n"
    )
    fake_lines = "for i in range(20):\n    print('0' * 32 + '\\t' + str(i) + '\\t[]')\n"
    cases = {
        "always-equal": always_equal,
        "fake-lines": fake_lines,
        "exit-early": "import os\nos._exit(0)\n",
        "syntax-error": "def (:\n",
        "not-code": "I cannot do that.",
    }
    for name, code in cases.items():
        verdict = T.srdd_verdict(code, tests, expected, timeout_s=5)
        assert verdict["score"] == 0.0, (name, verdict)
    looping = T.srdd_verdict("while True:\n    pass\n", tests, expected, timeout_s=1.5)
    assert looping["score"] == 0.0 and looping["status"] == "timeout"
    noisy = task.answer + "\nprint('x' * 5_000_000)\n"  # output is discarded, not capped
    assert T.srdd_verdict(noisy, tests, expected)["score"] == 1.0


# -- loaders ----------------------------------------------------------------------------------
def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_gsm_hard_release_format(tmp_path):
    code = "def solution():\n    apples = 4000000\n    eaten = 3999997\n    return apples - eaten\n"
    path = write_jsonl(
        tmp_path / "gsmhardv2.jsonl",
        [
            {"input": "Ann has 4000000 apples and eats 3999997. How many are left?",
             "code": code, "target": 3.0},
            {"input": "Split 7 into halves.", "code": "", "target": 3.5},
        ],
    )  # fmt: skip
    source = load_gsm_hard(path)
    first, second = source.get("test", 0), source.get("test", 1)
    assert first.answer == "3" and second.answer == "3.5"
    assert first.meta["family"] == "gsm_hard" and first.meta["kind"] == "gsm-hard"
    assert T.score_answer("gsm-hard", first, "3") == 1.0
    assert T.score_answer("gsm-hard", second, "3.5") == 1.0
    assert "print(solution())" in T.reference_program(first)
    (tmp_path / "bad.jsonl").write_text('{"input": "x", "target": "many"}\n')
    with pytest.raises(DataError, match="line 1.*target"):
        load_gsm_hard(tmp_path / "bad.jsonl")


def mmlu_rows():
    options = [f"option {k}" for k in range(10)]
    return [
        {"question_id": 70, "question": "Which is option 3?", "options": options,
         "answer": "D", "answer_index": 3, "cot_content": "", "category": "law",
         "src": "ori_mmlu-law"},
        {"question_id": 71, "question": "Pick the second.", "options": options[:4],
         "answer": "B", "answer_index": 1, "cot_content": "", "category": "math", "src": "x"},
    ]  # fmt: skip


def test_load_mmlu_pro_jsonl_and_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = mmlu_rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test-00000-of-00001.parquet")
    write_jsonl(tmp_path / "test.jsonl", rows)
    for name in ("test-00000-of-00001.parquet", "test.jsonl"):
        source = load_mmlu_pro(tmp_path / name)
        task = source.by_id("mmlupro-70")
        assert task.answer == "D" and len(task.meta["options"]) == 10
        assert task.meta["subject"] == "law" and "J. option 9" in task.prompt
        assert T.score_answer("multiple-choice", task, "\\boxed{D}") == 1.0
        assert source.get("test", 1).answer == "B"
    only_math = load_mmlu_pro(tmp_path / "test.jsonl", subjects=["math"])
    assert only_math.size("test") == 1
    bad = dict(rows[0], answer="E")
    write_jsonl(tmp_path / "bad.jsonl", [bad])
    with pytest.raises(DataError, match="disagrees with 'answer_index'"):
        load_mmlu_pro(tmp_path / "bad.jsonl")


def test_load_commongen_hard_and_commongen(tmp_path):
    concepts = ["dog", "frisbee", "catch", "throw", "river", "boat", "paddle", "rope"]
    hard = load_commongen_hard(write_jsonl(tmp_path / "commongen_hard.jsonl", [{"concepts": concepts}]))  # fmt: skip
    task = hard.get("test", 0)
    assert task.meta["concepts"] == tuple(concepts) and task.meta["family"] == "commongen_hard"
    assert T.commongen_score(task.answer, concepts) == 1.0  # the generated reference
    plain = load_commongen_hard(
        write_jsonl(
            tmp_path / "commongen.dev.jsonl",
            [{"concept_set": "field#look#stand", "scene": ["I stand and look at the field."]}],
        )
    )
    task = plain.get("test", 0)
    assert task.meta["concepts"] == ("field", "look", "stand")
    assert task.answer == "I stand and look at the field."


@needs_bwrap
def test_load_srdd_csv_scores_executability(tmp_path):
    path = tmp_path / "data_attribute_format.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["Name", "Description", "Category"])
        writer.writerow(["Sudoku_Solver", "A program that solves sudoku puzzles.", "Game"])
    task = load_srdd(path).get("test", 0)
    assert task.meta["name"] == "Sudoku_Solver" and task.meta["category"] == "Game"
    assert "spec.md" in task.meta["files"] and task.meta["family"] == "srdd"
    assert T.score_answer("srdd", task, "def solve(grid):\n    return grid\n") == 1.0
    assert T.score_answer("srdd", task, "def solve(:\n") == 0.0


def test_loader_errors_name_the_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_gsm_hard(tmp_path / "missing.jsonl")
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(DataError, match="broken.jsonl, line 1"):
        load_commongen_hard(tmp_path / "broken.jsonl")


def test_load_corpus(tmp_path):
    path = write_jsonl(tmp_path / "wiki.jsonl", [{"id": "x", "title": "Zebra", "text": "Stripes."}])
    assert load_corpus(path) == {"x": "Zebra. Stripes."}
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="empty"):
        load_corpus(tmp_path / "empty.jsonl")
