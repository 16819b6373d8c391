"""Issue 38 for the multihop QA ids: the simulated Recommender's answer without the whole
chain is a guess of the kind the question asks for, never a hop of the chain.

Before, a Recommender missing a hop answered the last entity of its known chain (the next
hop's subject). That had two effects the audit flagged: "look up whatever the Recommender
answered" (discrete choice 3) followed the hops with no Planner skill and tied or beat the
skill reference at its realistic level under full and static routing (0.776 and 0.833
against 0.733, 30 tasks), and the answer's length (a person's name where a city or a year
was asked) told the controller right from wrong (tell meter within-author AUC 0.784).
"""

from __future__ import annotations

import re
import statistics

import gymnasium as gym
import pytest

import orchenv  # noqa: F401
from orchenv.audit import play, play_skill
from orchenv.audit_tells import tell_meter
from orchenv.discrete import available, current_choices
from orchenv.envs.multihopqa.agents import MultihopRoleBackend, gold_sentences, guess
from orchenv.envs.multihopqa.synth import SyntheticMultihopSource

FAST = {"token_counter": "estimate", "judge": None}
_YEAR = re.compile(r"^(1[0-9]{3}|20[0-9]{2})$")


def _bridges(n: int = 60) -> list:
    source = SyntheticMultihopSource(n_train=2, n_test=n)
    return [t for t in (source.get("test", i) for i in range(n)) if t.meta["type"] == "bridge"]


def test_a_recommender_missing_a_hop_guesses_the_kind_asked_never_a_hop():
    backend = MultihopRoleBackend(token_counter="estimate", distraction=0.0)
    checked = 0
    for task in _bridges():
        chain = task.meta["chain"]
        hops = {str(h["entity"]) for h in chain} | {str(h["answer"]) for h in chain[:-1]}
        gold = gold_sentences(task)
        kind = task.meta["answer_type"]
        for known in range(1, len(chain)):  # the first `known` hops, the rest missing
            prompt = f"Question: {task.prompt}\n" + "\n".join(gold[:known])
            for luck in (0.01, 0.37, 0.93):
                text, meta = backend._recommender(task, prompt, 0.99, luck)
                answer = re.fullmatch(r"<answer>(.*)</answer>", text)
                assert answer, text  # the reply is the answer only: no note on the facts
                said = answer.group(1)
                assert not meta["complete"] and not meta["correct"]
                assert said not in hops, (task.prompt, known, said)
                if kind == "year":
                    assert _YEAR.match(said), said
                else:
                    assert said in task.meta["same_type_names"], (kind, said)
                checked += 1
    assert checked > 50


def test_guesses_on_comparisons_and_loaded_tasks():
    source = SyntheticMultihopSource(n_train=2, n_test=80)
    comparisons = [
        t for t in (source.get("test", i) for i in range(80)) if t.meta["type"] == "comparison"
    ]
    assert comparisons
    for task in comparisons:
        said = guess(task, f"Question: {task.prompt}", 0.5)
        if task.answer in ("yes", "no"):
            assert said in ("yes", "no")
        else:  # one of the two entities the question names
            assert said in task.prompt
    # a task without kinds (a loaded file): a distractor's title, never a chain paragraph
    task = _bridges()[0]
    bare = type(task)(
        id=task.id,
        prompt=task.prompt,
        answers=task.answers,
        meta={k: v for k, v in task.meta.items() if k not in ("answer_type", "same_type_names")},
    )
    said = guess(bare, f"Question: {task.prompt}", 0.25)
    assert said in {t for t, _ in task.meta["context"]} - {h["title"] for h in task.meta["chain"]}


def _always(k: int):
    def policy(env):
        choices = current_choices(env, 8)
        text = choices[k] if choices[k] is not None else choices[available(choices)[0]]
        assert text is not None
        return text

    return policy


@pytest.mark.parametrize("env_id", ["orch/MultihopQAFull-v0", "orch/MultihopQAStatic-v0"])
def test_no_constant_choice_comes_near_the_realistic_skill(env_id):
    """The audit's finding (always-choice-3, "look up the Recommender's answer", at or above
    skill@0.75 under full and static routing) on 24 test tasks: every constant choice now
    stays far below the skill reference."""
    env = gym.make(env_id, **FAST).unwrapped
    skill, constant = [], {k: [] for k in range(8)}
    for i in range(24):
        env.reset(seed=i, options={"task_index": i})
        skill.append(play_skill(env, 0.75, (0, i)).ret)
        for k in constant:
            constant[k].append(play(env, _always(k)).ret)
    reference = statistics.fmean(skill)
    best = max(constant, key=lambda k: statistics.fmean(constant[k]))
    assert reference > 0.6, reference
    assert statistics.fmean(constant[3]) < reference - 0.3, (reference, constant[3])
    assert statistics.fmean(constant[best]) < reference - 0.15, (best, reference)


@pytest.mark.parametrize("env_id", ["orch/MultihopQA-v0", "orch/MultihopQAStatic-v0"])
def test_the_recommenders_reply_tells_nothing_beyond_its_content(env_id):
    """The audit's tell meter on the Recommender's replies (its record fields: tokens, cost,
    latency; turn): they tell nothing beyond what the task and the size of what was sent
    already tell (the meter's rule: not flagged, within 0.05 of ``auc_within_task``; before
    the kind-matched guess, the next hop's name made the reply's length a tell: 0.797 on the
    RCR id, 0.840 on the static one, with these sizes, by the earlier reply-only rule)."""
    meter, _ = tell_meter(env_id, episodes=60, test_episodes=40, seed=0, bootstrap=0)
    assert meter.measurable and meter.agents == ["recommender"]
    assert meter.auc_within is not None and meter.auc_within_task is not None
    assert not meter.flagged, meter.line()
    assert meter.auc_within - meter.auc_within_task <= 0.05, meter.line()


@pytest.mark.parametrize("answer", ["\u00b2", "9" * 5000, "x\ud800y", "", "yes"])
def test_guess_survives_hostile_tasks_and_prompts(answer):
    from orchenv.tasks import Task

    task = Task("t", "Q?", (answer,), {"chain": [], "context": []})
    for prompt in ("Question: Q?\n" + "a" * 10_000_000, "\ud800" * 1000, ""):
        said = guess(task, prompt, 0.3)
        assert isinstance(said, str) and said
