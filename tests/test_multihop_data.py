"""Multihop QA data: synthetic generator, HotpotQA / MuSiQue / 2Wiki loaders, BM25 searcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import HOTPOT_RECORD as HOTPOT

from orchenv.envs.multihopqa.loaders import (
    load_2wiki,
    load_hotpotqa,
    load_multihop,
    load_musique,
    to_hotpot_record,
)
from orchenv.envs.multihopqa.search import ParagraphIndex, paragraph_index
from orchenv.envs.multihopqa.synth import SyntheticMultihopSource
from orchenv.error import ConfigError, DataError, UnknownNameError
from orchenv.tasks import Task, make_task_source

N = 300  # tasks per split checked in the property tests


@pytest.fixture(scope="module")
def source() -> SyntheticMultihopSource:
    return SyntheticMultihopSource(seed=0)


@pytest.fixture(scope="module")
def tasks(source: SyntheticMultihopSource) -> list[Task]:
    return [source.get(s, i) for s in ("train", "test") for i in range(N)]


def _sentence(task: Task, title: str, index: int) -> str:
    paragraphs = dict((t, s) for t, s in task.meta["context"])
    return paragraphs[title][index]


# -- generator ---------------------------------------------------------------------------------
def test_registered_and_deterministic_across_processes(source: SyntheticMultihopSource) -> None:
    made = make_task_source("multihop-synth", seed=0)
    assert isinstance(made, SyntheticMultihopSource)
    here = [json.dumps([t.prompt, t.answers, t.meta]) for t in made.iter("test", 25)]
    code = (
        "import json\n"
        "from orchenv.envs.multihopqa.synth import SyntheticMultihopSource\n"
        "s = SyntheticMultihopSource(seed=0)\n"
        "print(json.dumps([json.dumps([t.prompt, t.answers, t.meta]) for t in s.iter('test', 25)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    assert json.loads(out.stdout) == here
    other = SyntheticMultihopSource(seed=1)
    assert [t.prompt for t in other.iter("test", 25)] != [t.prompt for t in made.iter("test", 25)]


def test_by_id_and_prefix_stability(source: SyntheticMultihopSource) -> None:
    task = source.get("train", 17)
    assert source.by_id(task.id) is task
    small = SyntheticMultihopSource(seed=0, n_train=40, n_test=5)
    assert [t.prompt for t in small.iter("train")] == [t.prompt for t in source.iter("train", 40)]
    with pytest.raises(UnknownNameError):
        source.by_id("mhqa-0/train/999999")
    with pytest.raises(IndexError):
        small.get("test", 5)


def test_splits_are_disjoint_and_questions_rarely_repeat(source: SyntheticMultihopSource) -> None:
    train = [t.prompt for t in source.iter("train")]
    test = [t.prompt for t in source.iter("test")]
    assert not set(train) & set(test)
    # no question's subject entity (the entity the first hop asks about) crosses splits
    first = {s: {t.meta["chain"][0]["entity"] for t in source.iter(s)} for s in ("train", "test")}
    assert not first["train"] & first["test"]
    assert len(set(train)) >= 0.99 * len(train)
    assert len(set(test)) >= 0.99 * len(test)


def test_meta_schema_is_json_and_hotpot_like(tasks: list[Task]) -> None:
    types = Counter(t.meta["type"] for t in tasks)
    assert set(types) == {"bridge", "comparison"}
    assert 0.1 < types["comparison"] / len(tasks) < 0.3
    for task in tasks:
        meta = task.meta
        assert json.loads(json.dumps(meta)) == meta
        assert meta["dataset"] == "synthetic"
        assert 0.0 <= meta["difficulty"] < 1.0
        assert meta["level"] == 1 + int(5 * meta["difficulty"])  # the documented level rule
        assert meta["hops"] == len(meta["chain"])
        titles = [t for t, _ in meta["context"]]
        assert len(titles) == len(set(titles)) == len({h["title"] for h in meta["chain"]}) + 8
        assert task.answers and all(isinstance(a, str) and a for a in task.answers)


def test_supporting_facts_hold_the_hop_answers(tasks: list[Task]) -> None:
    for task in tasks:
        chain = task.meta["chain"]
        assert task.meta["supporting_facts"] == [[h["title"], h["sent"]] for h in chain]
        for hop in chain:
            assert hop["answer"] in _sentence(task, hop["title"], hop["sent"])
            assert hop["entity"] in hop["question"]
            assert hop["title"] == hop["entity"]


def test_bridge_chains_link_and_end_in_the_answer(tasks: list[Task]) -> None:
    bridges = [t for t in tasks if t.meta["type"] == "bridge"]
    assert len(bridges) > 200
    for task in bridges:
        chain = task.meta["chain"]
        for prev, nxt in zip(chain, chain[1:], strict=False):
            assert nxt["entity"] == prev["answer"]
        assert chain[-1]["answer"] == task.answer
        assert chain[0]["entity"] in task.prompt
        assert all(h["entity"] not in task.prompt for h in chain[1:])  # bridges stay hidden


def test_comparison_answers_follow_from_the_hops(tasks: list[Task]) -> None:
    checked = Counter()
    for task in tasks:
        if task.meta["type"] != "comparison":
            continue
        chain, q = task.meta["chain"], task.prompt
        a, b = chain[0], chain[len(chain) // 2]
        assert a["entity"] in q and b["entity"] in q
        last_a, last_b = chain[len(chain) // 2 - 1], chain[-1]
        if task.answer in ("yes", "no"):
            if " same " in q:
                expect = last_a["answer"] == last_b["answer"]
            else:  # "Was A <verb> before B?"
                expect = int(last_a["answer"]) < int(last_b["answer"])
            assert task.answer == ("yes" if expect else "no"), q
            checked["yes/no"] += 1
        else:
            ya, yb = int(last_a["answer"]), int(last_b["answer"])
            assert ya != yb
            later = "recently" in q or "later" in q or "younger" in q
            winner = a if (ya > yb) == later else b
            assert task.answer == winner["entity"], q
            checked["which"] += 1
    assert checked["yes/no"] > 10 and checked["which"] > 10


def test_difficulty_knob_raises_hops_and_confusable_distractors() -> None:
    def profile(difficulty: float) -> tuple[float, float, float]:
        src = SyntheticMultihopSource(seed=3, difficulty=difficulty, n_train=200, n_test=0)
        hops, shared, top1 = [], [], []
        for task in src.iter("train"):
            gold = {h["title"] for h in task.meta["chain"]}
            gold_tokens = {w for h in task.meta["chain"] for w in h["entity"].split()}
            gold_tokens |= {h["answer"] for h in task.meta["chain"]}
            distractors = [(t, s) for t, s in task.meta["context"] if t not in gold]
            # a confusable distractor mentions a gold entity or answer, or shares a name token
            hits = sum(
                any(tok in t or tok in " ".join(s) for tok in gold_tokens if len(tok) > 3)
                for t, s in distractors
            )
            hops.append(task.meta["hops"])
            shared.append(hits / len(distractors))
            index = paragraph_index(task)
            for hop in task.meta["chain"]:
                found = index.search(hop["question"], k=1)
                top1.append(bool(found) and found[0].title == hop["title"])
        return float(np.mean(hops)), float(np.mean(shared)), float(np.mean(top1))

    easy, mid, hard = profile(0.1), profile(0.5), profile(0.9)
    assert easy[0] < mid[0] < hard[0]
    assert easy[1] < mid[1] < hard[1]
    assert easy[2] > hard[2]  # confusable distractors make the Searcher's job harder
    assert SyntheticMultihopSource(hops=(2, 2)).get("train", 0).meta["hops"] == 2


def test_paragraph_lengths_are_realistic(tasks: list[Task]) -> None:
    lengths = [len(" ".join(s).split()) for t in tasks[:100] for _, s in t.meta["context"]]
    sentences = [len(s) for t in tasks[:100] for _, s in t.meta["context"]]
    assert 45 <= np.mean(lengths) <= 90 and min(lengths) >= 25
    assert min(sentences) >= 3 and max(sentences) <= 5


@pytest.mark.parametrize(
    "kwargs",
    [{"hops": (1, 3)}, {"hops": (3, 2)}, {"hops": (2, 9)}, {"difficulty": 1.5}, {"n_train": -1}],
)
def test_bad_arguments_raise_config_error(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        SyntheticMultihopSource(**kwargs)


def test_hotpot_records_round_trip(tmp_path: Path, tasks: list[Task]) -> None:
    sample = tasks[:40]
    path = tmp_path / "synthetic_hotpot.json"
    path.write_text(json.dumps([to_hotpot_record(t) for t in sample]))
    loaded = load_hotpotqa(path, split="test")
    assert loaded.size("test") == len(sample)
    for original, back in zip(sample, loaded.iter("test"), strict=True):
        assert (back.id, back.prompt, back.answer) == (
            original.id,
            original.prompt,
            original.answer,
        )
        for key in ("type", "context", "supporting_facts"):
            assert back.meta[key] == original.meta[key]
        assert back.meta["dataset"] == "hotpotqa"


# -- searcher ----------------------------------------------------------------------------------
def test_searcher_ranks_the_gold_paragraph_first(tasks: list[Task]) -> None:
    hits = total = 0
    for task in tasks:
        index = paragraph_index(task)
        for hop in task.meta["chain"]:
            result = index.search(hop["question"], k=1)
            total += 1
            hits += bool(result) and result[0].title == hop["title"]
    # measured 0.967 at the default difficulty (seed 0, 600 tasks, 1761 hops)
    assert hits / total >= 0.9


def test_searcher_is_deterministic_cached_and_never_raises(tasks: list[Task]) -> None:
    task = tasks[0]
    index = paragraph_index(task)
    assert paragraph_index(task) is index
    fresh = ParagraphIndex(task.meta["context"])
    query = task.meta["chain"][0]["question"]
    assert index.search(query, k=3) == fresh.search(query, k=3)
    ranked = index.search(task.prompt, k=50)
    assert [h.rank for h in ranked] == list(range(len(ranked)))
    assert all(a.score >= b.score > 0 for a, b in zip(ranked, ranked[1:], strict=False))
    for query in ["", "   ", "?!#", "x" * 1_000_000, "\x00\ud800", "the of and"]:
        assert isinstance(index.search(query), list)
    assert index.search(query, k=0) == [] and ParagraphIndex([]).search("anything") == []
    changed = Task(task.id, task.prompt, task.answers, {**task.meta, "context": [["A", ["b c"]]]})
    assert paragraph_index(changed) is not index
    with pytest.raises(DataError):
        paragraph_index(Task("x", "q", ("a",), {}))


def test_corpus_index_finds_entities() -> None:
    src = SyntheticMultihopSource(seed=0)
    index = ParagraphIndex(src.corpus())
    task = src.get("test", 3)
    hop = task.meta["chain"][0]
    assert index.search(hop["question"], k=5)[0].title == hop["title"]


# -- loaders -----------------------------------------------------------------------------------
MUSIQUE = {
    "id": "2hop__13548_13529",
    "question": "When was the director of Jaws born?",
    "answer": "December 18, 1946",
    "answer_aliases": ["18 December 1946"],
    "answerable": True,
    "paragraphs": [
        {"idx": 0, "title": "Duel", "paragraph_text": "Duel is a TV film.", "is_supporting": False},
        {
            "idx": 1,
            "title": "Jaws (film)",
            "paragraph_text": "Jaws is a 1975 thriller. It was directed by Steven Spielberg.",
            "is_supporting": True,
        },
        {
            "idx": 2,
            "title": "Steven Spielberg",
            "paragraph_text": "Steven Spielberg is a director. He was born December 18, 1946.",
            "is_supporting": True,
        },
    ],
    "question_decomposition": [
        {
            "id": 1,
            "question": "Jaws >> director",
            "answer": "Steven Spielberg",
            "paragraph_support_idx": 1,
        },
        {
            "id": 2,
            "question": "When was #1 born?",
            "answer": "December 18, 1946",
            "paragraph_support_idx": 2,
        },
    ],  # fmt: skip
}
WIKI2 = {
    "_id": "8813f87c0bdd11eba7f7acde48001122",
    "type": "compositional",
    "question": "Who is the mother of the director of film Polish-Russian War?",
    "context": [
        ["Xawery Żuławski", ["Xawery Żuławski is a Polish director.", "His mother is Małgorzata."]],
        ["Polish-Russian War (film)", ["Polish-Russian War is a 2009 film by Xawery Żuławski."]],
    ],
    "supporting_facts": [["Polish-Russian War (film)", 0], ["Xawery Żuławski", 1]],
    "evidences": [
        ["Polish-Russian War", "director", "Xawery Żuławski"],
        ["Xawery Żuławski", "mother", "Małgorzata"],
    ],
    "answer": "Małgorzata",
}


def test_load_hotpotqa_file(tmp_path: Path) -> None:
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps([HOTPOT]))
    task = load_hotpotqa(path).get("validation", 0)
    assert task.answers == ("yes",) and task.meta["type"] == "comparison"
    assert task.meta["level"] == 5 and task.meta["hops"] == 2
    assert task.meta["context"][1] == HOTPOT["context"][1]
    assert task.meta["supporting_facts"] == [["Scott Derrickson", 0], ["Ed Wood", 0]]
    # the Hugging Face column layout of the same record
    hf = {
        "id": "x1",
        "question": HOTPOT["question"],
        "answer": "yes",
        "type": "comparison",
        "level": "easy",
        "supporting_facts": {"title": ["Ed Wood"], "sent_id": [0]},
        "context": {
            "title": [t for t, _ in HOTPOT["context"]],
            "sentences": [s for _, s in HOTPOT["context"]],
        },
    }
    path.write_text(json.dumps([hf]))
    assert load_hotpotqa(path).get("validation", 0).meta["context"] == HOTPOT["context"]


def test_load_musique_file(tmp_path: Path) -> None:
    path = tmp_path / "musique_ans_v1.0_dev.jsonl"
    unanswerable = {**MUSIQUE, "id": "2hop__1_2", "answerable": False}
    path.write_text(json.dumps(MUSIQUE) + "\n\n" + json.dumps(unanswerable) + "\n")
    source = load_musique(path)
    assert source.size("validation") == 1
    task = source.get("validation", 0)
    assert task.answers == ("December 18, 1946", "18 December 1946")
    assert task.meta["hops"] == 2 and task.meta["subtype"] == "2hop"
    assert task.meta["context"][1] == ["Jaws (film)", ["Jaws is a 1975 thriller.",
                                                       "It was directed by Steven Spielberg."]]  # fmt: skip
    chain = task.meta["chain"]
    assert chain[1]["question"] == "When was Steven Spielberg born?"
    assert chain[1]["entity"] == "Steven Spielberg"
    assert task.meta["supporting_facts"] == [["Jaws (film)", 1], ["Steven Spielberg", 1]]
    for hop in chain:
        assert hop["answer"] in _sentence(task, hop["title"], hop["sent"])


def test_load_2wiki_file(tmp_path: Path) -> None:
    path = tmp_path / "dev.json"
    path.write_text(json.dumps([WIKI2, {**WIKI2, "_id": "c2", "type": "bridge_comparison"}]))
    source = load_2wiki(path, limit=2)
    task, comparison = source.get("validation", 0), source.get("validation", 1)
    assert task.meta["type"] == "bridge" and comparison.meta["type"] == "comparison"
    assert comparison.meta["subtype"] == "bridge_comparison"
    chain = task.meta["chain"]
    assert [h["answer"] for h in chain] == ["Xawery Żuławski", "Małgorzata"]
    assert chain[1]["title"] == "Xawery Żuławski" and chain[1]["sent"] == 1
    assert chain[0]["title"] == "Polish-Russian War (film)"
    assert load_multihop("2wiki", path=path, split="dev", limit=1).size("validation") == 1


@pytest.mark.parametrize(
    ("loader", "content", "message"),
    [
        (load_hotpotqa, '[{"_id": "a", "question": "q?", "context": []}]', "'answer'"),
        (load_hotpotqa, json.dumps([{**HOTPOT, "context": [["t", 3]]}]), "context entry 0"),
        (load_hotpotqa, json.dumps([HOTPOT, HOTPOT]), "duplicate id"),
        (load_hotpotqa, '[{"_id": ', "malformed JSON"),
        (load_hotpotqa, "", "empty"),
        (load_musique, json.dumps(MUSIQUE) + "\n{oops\n", "line 2"),
        (load_musique, json.dumps({**MUSIQUE, "paragraphs": []}), "'paragraphs'"),
        (load_2wiki, json.dumps([{**WIKI2, "evidences": [["a", "b"]]}]), "evidence 0"),
        (load_2wiki, json.dumps([3]), "record 0"),
    ],
)
def test_malformed_files_raise_data_error(tmp_path: Path, loader, content, message) -> None:
    path = tmp_path / "data.json"
    path.write_text(content)
    with pytest.raises(DataError, match=message) as info:
        loader(path)
    assert str(path) in str(info.value)


def test_load_multihop_offline_says_what_to_download(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ORCHENV_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="hotpot_dev_distractor_v1.json") as info:
        load_multihop("hotpotqa")
    assert str(tmp_path / "hotpotqa") in str(info.value)
    with pytest.raises(UnknownNameError, match="did you mean|Did you mean"):
        load_multihop("musiqe")
    # a file in the data folder is found without a path
    (tmp_path / "musique").mkdir()
    (tmp_path / "musique" / "musique_ans_v1.0_dev.jsonl").write_text(json.dumps(MUSIQUE))
    assert load_multihop("musique").get("validation", 0).answer == "December 18, 1946"
    assert make_task_source("multihop-file", name="musique").size("validation") == 1
