"""Loaders: MATH-style files, the Hub's offline path, CHAMP and reasoning-gym."""

from __future__ import annotations

import json
import logging
import sys
import types
from pathlib import Path

import pytest

from orchenv.envs.mathroute.loaders import (
    ReasoningGymSource,
    load_champ,
    load_math_hf,
    load_math_records,
    load_math_splits,
)
from orchenv.error import ConfigError, DataError, DependencyError, UnknownNameError
from orchenv.tasks import ListTaskSource, difficulty_of, make_task_source

RECORDS = [
    {
        "problem": "What is $\\frac{1}{4} + \\frac{1}{4}$?",
        "solution": "Adding gives $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$.",
        "level": "Level 3",
        "type": "Prealgebra",
    },
    {
        "problem": "Compute $\\sqrt{16}$.",
        "solution": "First $\\boxed{3}$ is wrong; in fact $\\sqrt{16} = \\boxed{4}$.",
        "level": 2,
        "type": "Algebra",
    },
    {
        "problem": "A problem whose solution has no boxed answer.",
        "solution": "The answer is 5.",
        "level": "Level 1",
        "type": "Algebra",
    },
    {
        "problem": "Evaluate $\\dbinom{5}{2}$.",
        "solution": "We get $\\boxed{10}$.",
        "level": "Level ?",
        "type": "Counting & Probability",
    },
    {
        "problem": "Explicit answer field wins.",
        "solution": "No box here.",
        "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
        "level": "Level 5",
        "type": "Precalculus",
        "unique_id": "test/precalculus/807.json",
    },
]


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _check_records_source(src: ListTaskSource, name: str = "math", split: str = "test") -> None:
    assert src.splits == (split,)
    assert src.size(split) == 4  # the record without an answer is skipped
    t0, t1, t3, t4 = src.iter(split)
    assert t0.answer == "\\frac{1}{2}"  # nested braces survive
    assert t1.answer == "4"  # the last boxed expression counts
    assert t3.answer == "10"
    assert t4.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert [t.level for t in (t0, t1, t3, t4)] == [3, 2, None, 5]
    assert t0.meta["type"] == "Prealgebra"
    assert t0.meta["solution"] == RECORDS[0]["solution"]
    assert t0.meta["source"] == name
    assert t0.id == f"{name}/{split}/0"
    assert t3.id == f"{name}/{split}/3"  # ids keep the record position
    assert t4.id == "test/precalculus/807.json"
    assert src.by_id(t4.id) is t4
    # levels map onto this split's own level mix (2, 3, 5: one task each): level 3 is the middle third
    assert 1 / 3 <= difficulty_of(t0) < 2 / 3


def test_jsonl(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write_jsonl(tmp_path / "test.jsonl", RECORDS)
    with caplog.at_level(logging.WARNING, logger="orchenv.envs.mathroute.loaders"):
        src = load_math_records(path)
    _check_records_source(src)
    assert "skipped 1 of 5" in caplog.text


def test_json_list_and_in_memory_records(tmp_path: Path) -> None:
    path = tmp_path / "math.json"
    path.write_text(json.dumps(RECORDS), encoding="utf-8")
    _check_records_source(load_math_records(str(path), name="m", split="dev"), "m", "dev")
    _check_records_source(load_math_records(RECORDS))


def test_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "test.parquet"
    columns = ("problem", "solution", "level", "type", "answer", "unique_id")
    rows = [{k: r.get(k) for k in columns} for r in RECORDS]
    rows[1]["level"] = "Level 2"
    pq.write_table(pa.Table.from_pylist(rows), path)
    _check_records_source(load_math_records(path))


def test_directory_of_json_files(tmp_path: Path) -> None:
    for i, record in enumerate(RECORDS[:2]):
        sub = tmp_path / "algebra"
        sub.mkdir(exist_ok=True)
        (sub / f"{i}.json").write_text(json.dumps(record), encoding="utf-8")
    src = load_math_records(tmp_path)
    assert [t.id for t in src.iter("test")] == ["algebra/0.json", "algebra/1.json"]
    assert src.get("test", 0).answer == "\\frac{1}{2}"


def test_level_parsing_variants() -> None:
    base = {"problem": "p", "solution": "\\boxed{1}"}
    levels = ["Level 4", 4, "4", "Level ?", None, "hard", 2.0]
    src = load_math_records([{**base, "level": lv} for lv in levels])
    assert [t.level for t in src.iter("test")] == [4, 4, 4, None, None, None, 2]


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataError) as info:
        load_math_records(missing)
    assert str(missing) in str(info.value)
    assert ".jsonl" in str(info.value) and "problem" in str(info.value)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty"):
        load_math_records(path)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="no records"):
        load_math_records(blank)


def test_malformed_line_names_its_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(RECORDS[0]), json.dumps(RECORDS[1]), '{"problem": "oops", ', ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_math_records(path)
    assert "line 3" in str(info.value)
    assert str(path) in str(info.value)


def test_malformed_json_and_bad_records(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(DataError, match="malformed JSON"):
        load_math_records(path)
    path.write_text(json.dumps({"a": 1}), encoding="utf-8")
    with pytest.raises(DataError, match="list"):
        load_math_records(path)
    with pytest.raises(DataError, match="problem"):
        load_math_records([{"solution": "\\boxed{1}"}])
    with pytest.raises(DataError, match="JSON object"):
        load_math_records([["not", "a", "record"]])
    with pytest.raises(DataError, match="no usable records"):
        load_math_records([{"problem": "p", "solution": "no answer"}])
    with pytest.raises(DataError, match="duplicate"):
        load_math_records([{"problem": "p", "solution": "\\boxed{1}", "id": 1}] * 2)
    other = tmp_path / "data.csv"
    other.write_text("problem,solution\n", encoding="utf-8")
    with pytest.raises(DataError, match="unknown file type"):
        load_math_records(other)
    with pytest.raises(ConfigError):
        load_math_records(42)  # type: ignore[arg-type]


def test_splits(tmp_path: Path) -> None:
    train = _write_jsonl(tmp_path / "train.jsonl", RECORDS[:2])
    test = _write_jsonl(tmp_path / "test.jsonl", RECORDS[3:4])
    src = load_math_splits({"train": train, "test": test}, name="mine")
    assert src.splits == ("train", "test")
    assert (src.size("train"), src.size("test")) == (2, 1)
    assert src.get("test", 0).id == "mine/test/0"
    clash = [{"problem": "p", "solution": "\\boxed{1}", "id": "same"}]
    with pytest.raises(DataError, match="both split"):
        load_math_splits({"train": clash, "test": clash})
    with pytest.raises(ConfigError):
        load_math_splits({})


def test_parquet_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(DependencyError, match=r"orchenv\[data\]"):
        load_math_records(path)


def test_hub_offline_gives_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("datasets")

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'DigitalLearningGmbH/MATH-lighteval' on the Hub")

    fake.load_dataset = offline  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(DataError) as info:
        load_math_hf()
    message = str(info.value)
    assert "offline" in message and "load_math_records" in message
    assert "MATH-lighteval" in message


def test_hub_records_become_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("datasets")
    calls = []

    def load_dataset(name: str, split: str, **kwargs: object) -> list[dict]:
        calls.append((name, split, kwargs))
        return RECORDS

    fake.load_dataset = load_dataset  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", fake)
    src = load_math_hf(splits=("test",), cache_dir="/tmp/x")
    assert calls == [("DigitalLearningGmbH/MATH-lighteval", "test", {"cache_dir": "/tmp/x"})]
    assert src.name == "math-lighteval" and src.size("test") == 4


def test_hub_without_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DependencyError, match="datasets"):
        load_math_hf()


# -- CHAMP -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def champ() -> ListTaskSource:
    pytest.importorskip("champ_dataset")
    return load_champ()


def test_champ_loads_all_problems(champ: ListTaskSource) -> None:
    assert champ.name == "champ" and champ.splits == ("test",)
    tasks = list(champ.iter("test"))
    assert len(tasks) == 270
    assert len({t.id for t in tasks}) == 270
    for task in tasks:
        assert task.prompt.strip() and task.answer.strip()
        assert task.meta["answer_kind"] in ("number", "text")
        assert task.meta["type"] and task.meta["source"] == "champ"
        assert "@@" not in task.prompt
    first = champ.by_id("champ/P_Combinatorics_1")
    assert first.answer == "239" and first.meta["answer_kind"] == "number"
    assert first.meta["solution"] and "\n" in first.meta["solution"]
    kinds = {t.meta["answer_kind"] for t in tasks}
    assert kinds == {"number", "text"}
    assert {t.meta["type"] for t in tasks} >= {"Combinatorics", "Number-Theory"}


def test_champ_registered_and_split_name() -> None:
    pytest.importorskip("champ_dataset")
    src = make_task_source("champ", split="eval")
    assert src.splits == ("eval",) and src.size("eval") == 270


def test_champ_without_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "champ_dataset", None)
    with pytest.raises(DependencyError, match="champ_dataset"):
        load_champ()


# -- reasoning-gym ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def arithmetic() -> ReasoningGymSource:
    pytest.importorskip("reasoning_gym")
    return ReasoningGymSource("basic_arithmetic", seed=3, train_size=50, test_size=20)


def test_reasoning_gym_tasks(arithmetic: ReasoningGymSource) -> None:
    assert arithmetic.splits == ("train", "test")
    assert (arithmetic.size("train"), arithmetic.size("test")) == (50, 20)
    task = arithmetic.get("test", 4)
    assert task.id == "rg-basic_arithmetic-3/test/4"
    assert task.prompt and task.answers
    assert task.meta["source"] == "reasoning-gym" and task.meta["dataset"] == "basic_arithmetic"
    json.dumps(task.meta["rg_metadata"])
    assert 0.0 <= task.meta["difficulty"] < 1.0
    assert arithmetic.by_id(task.id) is task
    with pytest.raises(UnknownNameError):
        arithmetic.by_id("rg-basic_arithmetic-3/test/20")
    with pytest.raises(UnknownNameError):
        arithmetic.by_id("procmath-0/test/0")
    with pytest.raises(IndexError):
        arithmetic.get("train", 50)


def test_reasoning_gym_deterministic_and_split_seeds(arithmetic: ReasoningGymSource) -> None:
    again = ReasoningGymSource("basic_arithmetic", seed=3, train_size=50, test_size=20)
    other = ReasoningGymSource("basic_arithmetic", seed=4, train_size=50, test_size=20)
    test = [arithmetic.get("test", i).prompt for i in range(20)]
    assert test == [again.get("test", i).prompt for i in range(20)]
    assert test != [other.get("test", i).prompt for i in range(20)]
    assert test != [arithmetic.get("train", i).prompt for i in range(20)]


def test_reasoning_gym_score(arithmetic: ReasoningGymSource) -> None:
    for i in range(20):
        task = arithmetic.get("test", i)
        assert arithmetic.score(task, task.answer) == 1.0
        assert arithmetic.score(task.id, task.answer) == 1.0
        assert arithmetic.score(task, "not a number") < 1.0
        assert arithmetic.score(task, None) == 0.0


def test_reasoning_gym_other_dataset_and_config() -> None:
    pytest.importorskip("reasoning_gym")
    src = make_task_source(
        "reasoning-gym", dataset="leg_counting", seed=1, train_size=5, test_size=5
    )
    task = src.get("train", 0)
    assert src.score(task, task.answer) == 1.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError):
        ReasoningGymSource("basic_arithmetic", test_size=3, no_such_option=1)


def test_reasoning_gym_unknown_dataset() -> None:
    pytest.importorskip("reasoning_gym")
    with pytest.raises(UnknownNameError) as info:
        ReasoningGymSource("basic_arithmetik")
    assert "basic_arithmetic" in str(info.value)
