"""The audit's **tell meter**: can surface features of what the controller sees tell whether an
agent's output is right?

A simulated agent's correctness should reach the controller only through the content (the
reasoning and the answer it writes). If a simple classifier on surface features (lengths, line
counts, number formats, token, cost and latency fields, the author's name, the turn) predicts
the privileged correctness of an output well, a learner can judge drafts without the skill the
env studies, and a real model's drafts would not give that away.

For one env id, ``tell_meter`` plays episodes under a mix of policies (a uniformly random
available choice, and the skill reference at the env's realistic level) on the **train** split,
records every agent output (each ``pool.call``, routed or consulted) with its privileged label,
fits a logistic regression (L2, Newton's method, numpy) on the train outputs and reports its
AUC on outputs of episodes on the **test** split, with a 95% interval from a bootstrap over
test episodes (outputs of one episode are resampled together). Three AUCs:

- ``auc``: the classifier on every feature, across authors;
- ``auc_context``: a classifier on the context alone (author, turn, position, consult): how much
  of ``auc`` is the legitimate prior that a stronger agent is right more often;
- ``auc_within``: the full classifier's scores ranked within each author (pairs of one author's
  right and wrong outputs; authors weighted by their pairs): what surface features tell beyond
  who wrote the output;
- ``auc_within_task``: the same within-author ranking by a classifier on what the controller
  knew before the output existed: the context, the author, the surface of the task's own
  statement (a harder-looking problem is more often answered wrong by a real model too) and
  the call's prompt tokens (the size of what was sent: an agent given more of the chain is
  right more often, in a real team too).
  ``auc_within`` (whose classifier also sees the task's surface) is **flagged** when it is
  above ``threshold`` (0.65) *and* more than ``TASK_MARGIN`` (0.05) above ``auc_within_task``:
  a tell is what the output's surface says about its correctness beyond what the task said.

The threshold is 0.65, or the env's ``real_draft_auc`` when it is higher (a class attribute:
the same classifier's within-author AUC on real models' drafts, with
``real_draft_auc_source`` saying where it was measured): a simulator need not hide what real
drafts show.

The privileged label is the completion's ``meta["correct"]`` (the simulated backend's outcome),
else ``meta["right"]`` (ALFWorld's role agents); an env whose agents record neither is reported
*not measurable*, never guessed. Text features are used only when the output's text appears in
an observation the controller receives (``text_visible`` says for what share); the call's
record fields (``info["calls"]``) are always visible.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from orchenv.core import OrchestrationEnv
from orchenv.discrete import available, current_choices, orch_base
from orchenv.error import ConfigError, OrchEnvError

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TELL_THRESHOLD",
    "TASK_MARGIN",
    "LABEL_KEYS",
    "Output",
    "TellClassifier",
    "TellMeter",
    "auc_score",
    "output_features",
    "tell_meter",
]

#: within-author AUC above this is a tell (issue 38)
DEFAULT_TELL_THRESHOLD = 0.65
#: ... when it is also this much above what the task's own surface tells (``auc_within_task``)
TASK_MARGIN = 0.05
DEFAULT_TELL_EPISODES = 200
DEFAULT_TELL_TEST_EPISODES = 100
BOOTSTRAP = 1000
#: ``meta`` keys read as the privileged correctness of an output, in order
LABEL_KEYS = ("correct", "right")
#: L2 strength of the logistic regression (on standardised features)
L2 = 1.0
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
#: the tokens the \\boxed{...} scan stops at: an opener, or a run of opening or closing braces
_BRACE_RE = re.compile(r"\\boxed\{|\{+|\}+")
#: \\boxed{ openers nested deeper than this inside another one are read as plain braces
MAX_BOXED_NESTING = 64
_TAG_RE = re.compile(r"<[A-Za-z/][^<>]{0,40}>")
#: episodes played without one labelled output before the meter stops (not measurable)
NO_LABEL_EPISODES = 10
#: characters of an output's text looked for in the observations (visibility)
SNIPPET_CHARS = 60

TEXT_FEATURES = (
    "log_chars",
    "lines",
    "log_words",
    "digit_share",
    "numbers",
    "boxed",
    "answer_integer",
    "answer_log_magnitude",
    "answer_chars",
    "fractions",
    "tags",
)
RECORD_FEATURES = (
    "log_prompt_tokens",
    "log_completion_tokens",
    "tokens_per_char",
    "latency_s",
    "log_cost",
    "cached",
)
CONTEXT_FEATURES = ("turn", "position", "consult", "text_visible")
#: the task statement's surface (``text_features`` of the prompt the controller is shown)
TASK_FEATURES = tuple(f"task_{name}" for name in TEXT_FEATURES)


@dataclass
class Output:
    """One agent output as the controller sees it, with its privileged label."""

    agent: str
    text: str
    record: dict[str, Any]
    turn: int
    position: int
    consult: bool
    label: bool
    episode: int
    visible: bool = True
    #: the task's statement, as the controller is shown it (its surface is a legitimate prior)
    task_text: str = ""


def boxed_contents(text: str) -> list[str]:
    """The contents of every closed top-level ``\\boxed{...}`` in ``text``, in order, with nested
    braces kept (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``). One pass over the braces
    from each top-level opener to its closing brace (linear time, bounded memory on hostile
    text): a stray ``}`` is ignored, a ``\\boxed`` inside another belongs to the outer one, and
    an unclosed ``\\boxed{`` yields nothing (nor do the openers inside it)."""
    found: list[str] = []
    pos = text.find("\\boxed{")
    while pos >= 0:  # from one top-level opener to where it closes; the braces between are moot
        depth = 0
        opened: list[tuple[int, int]] = []  # (depth of a boxed brace, index after it)
        for match in _BRACE_RE.finditer(text, pos):
            token = match.group()
            if token[0] == "}":  # a run of closing braces: the i-th closes depth - i
                first = match.start()
                low = max(depth - len(token), 0)
                while opened and opened[-1][0] > low:
                    level, start = opened.pop()
                    if not opened:
                        found.append(text[start : first + depth - level])
                depth = low
                if not opened:
                    pos = text.find("\\boxed{", first + len(token))
                    break
            elif token[0] == "{":
                depth += len(token)
            else:
                depth += 1
                if len(opened) < MAX_BOXED_NESTING:
                    opened.append((depth, match.end()))
        else:  # the text ended inside an unclosed \\boxed{: nothing after it can close it
            break
    return found


def _answer(text: str, boxed: list[str] | None = None) -> str | None:
    boxed = boxed_contents(text) if boxed is None else boxed
    if boxed:
        return boxed[-1]
    tagged = re.findall(r"<answer>(.*?)</answer>", text, flags=re.S)
    if tagged:
        return tagged[-1]
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


def text_features(text: str) -> list[float]:
    """Surface statistics of an output's text (``TEXT_FEATURES``); never its meaning."""
    text = text[:200_000]
    chars = len(text)
    boxed = boxed_contents(text)
    answer = _answer(text, boxed)
    magnitude = 0.0
    integer = 0.0
    if answer is not None:
        found = _NUMBER_RE.findall(answer)
        if found:
            try:
                value = float(found[-1])
                magnitude = math.log10(abs(value) + 1.0) if math.isfinite(value) else 0.0
                integer = float(value.is_integer() and "/" not in answer and "frac" not in answer)
            except (ValueError, OverflowError):
                pass
    return [
        math.log1p(chars),
        float(text.count("\n") + 1),
        math.log1p(len(text.split())),
        sum(c.isdigit() for c in text) / max(chars, 1),
        float(len(_NUMBER_RE.findall(text))),
        float(bool(boxed)),
        integer,
        magnitude,
        float(len(answer)) if answer is not None else 0.0,
        float(text.count("\\frac") + text.count("/")),
        float(len(_TAG_RE.findall(text))),
    ]


def record_features(record: Mapping[str, Any], chars: int) -> list[float]:
    """The call record's fields (``RECORD_FEATURES``), as ``info["calls"]`` shows them."""

    def num(key: str) -> float:
        value = record.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return 0.0
        value = float(value)
        return value if math.isfinite(value) and value >= 0 else 0.0

    completion = num("completion_tokens")
    return [
        math.log1p(num("prompt_tokens")),
        math.log1p(completion),
        completion / max(chars, 1),
        num("latency_s"),
        math.log1p(num("cost_usd") * 1e6),
        float(bool(record.get("cached"))),
    ]


def output_features(
    output: Output, agents: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(all features, context features, task features)`` of one output: text statistics
    (zero when the text is not shown to the controller), record fields, context, the author
    one-hot and the task statement's surface; the context alone (with the author); what was
    known before the output existed (context, author, the task's surface, the call's prompt
    tokens: the size of what was sent)."""
    text = text_features(output.text) if output.visible else [0.0] * len(TEXT_FEATURES)
    record = record_features(output.record, len(output.text))
    author = [float(output.agent == a) for a in agents]
    context = [float(output.turn), float(output.position), float(output.consult)]
    context += [float(output.visible)]
    task = text_features(output.task_text)
    full = np.array([*text, *record, *context, *author, *task], dtype=float)
    # what the controller knew before the output: the size of what it sent is an input too
    sent = record[RECORD_FEATURES.index("log_prompt_tokens")]
    return (
        full,
        np.array([*context, *author], dtype=float),
        np.array([*context, *author, *task, sent], dtype=float),
    )


def feature_names(agents: Sequence[str]) -> list[str]:
    return [
        *TEXT_FEATURES,
        *RECORD_FEATURES,
        *CONTEXT_FEATURES,
        *(f"agent={a}" for a in agents),
        *TASK_FEATURES,
    ]


# -- the classifier --------------------------------------------------------------------------------
class TellClassifier:
    """Logistic regression with an L2 penalty on standardised features, fitted by Newton's
    method (numpy only; deterministic)."""

    def __init__(self, l2: float = L2, iterations: int = 50) -> None:
        self.l2, self.iterations = l2, iterations
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.weights: np.ndarray | None = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> TellClassifier:
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        self.mean = x.mean(axis=0)
        scale = x.std(axis=0)
        self.scale = np.where(scale > 1e-12, scale, 1.0)
        z = self._design(x)
        w = np.zeros(z.shape[1])
        penalty = np.full(z.shape[1], self.l2)
        penalty[0] = 0.0  # the intercept is not penalised
        for _ in range(self.iterations):
            p = _sigmoid(z @ w)
            grad = z.T @ (p - y) + penalty * w
            hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
            step = np.linalg.solve(hess, grad)
            w -= step
            if float(np.max(np.abs(step))) < 1e-8:
                break
        self.weights = w
        return self

    def _design(self, x: np.ndarray) -> np.ndarray:
        assert self.mean is not None and self.scale is not None
        z = (np.asarray(x, dtype=float) - self.mean) / self.scale
        return np.hstack([np.ones((z.shape[0], 1)), z])

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """P(right) per row."""
        if self.weights is None:
            raise OrchEnvError("TellClassifier.predict_proba before fit(); call fit(x, y) first")
        return _sigmoid(self._design(np.atleast_2d(x)) @ self.weights)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


def auc_score(y: Sequence[bool] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half); NaN with one class only."""
    y = np.asarray(y, dtype=bool)
    s = np.asarray(scores, dtype=float)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return math.nan
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def within_auc(y: np.ndarray, scores: np.ndarray, groups: Sequence[str]) -> float:
    """AUC over pairs of one group's right and wrong outputs (groups weighted by pairs)."""
    total, weight = 0.0, 0
    groups_arr = np.asarray(groups)
    for g in sorted(set(groups)):
        mask = groups_arr == g
        yg = y[mask]
        pairs = int(yg.sum()) * int((~yg).sum())
        if pairs:
            total += auc_score(yg, scores[mask]) * pairs
            weight += pairs
    return total / weight if weight else math.nan


# -- the report ------------------------------------------------------------------------------------
@dataclass
class TellMeter:
    """What the tell meter found for one env id (see the module docstring)."""

    env_id: str
    measurable: bool
    reason: str = ""
    label_key: str = ""
    train_split: str = ""
    test_split: str = ""
    train_episodes: int = 0
    test_episodes: int = 0
    train_outputs: int = 0
    test_outputs: int = 0
    #: share of test outputs labelled right
    right_share: float | None = None
    #: share of outputs whose text the controller sees in an observation
    text_visible: float | None = None
    auc: float | None = None
    auc_ci: list[float] = field(default_factory=list)
    auc_within: float | None = None
    auc_within_ci: list[float] = field(default_factory=list)
    auc_context: float | None = None
    auc_context_ci: list[float] = field(default_factory=list)
    #: within-author AUC of what was known before the output (context, author, task surface)
    auc_within_task: float | None = None
    auc_within_task_ci: list[float] = field(default_factory=list)
    #: ``auc_within - auc_within_task``, paired over the same bootstrap resamples
    beyond_task_ci: list[float] = field(default_factory=list)
    threshold: float = DEFAULT_TELL_THRESHOLD
    flagged: bool = False
    #: the largest standardised weights: feature -> weight (positive: more often right)
    top_features: dict[str, float] = field(default_factory=dict)
    agents: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    #: decisions (train and test episodes) that offered both an accept and a reject choice
    verify_decisions: int = 0
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line for a report."""
        if not self.measurable:
            return f"not measurable ({self.reason})"
        return (
            f"within-author AUC {_fmt(self.auc_within)} {_ci(self.auc_within_ci)}, across "
            f"authors {_fmt(self.auc)} {_ci(self.auc_ci)}, context alone {_fmt(self.auc_context)} "
            f"{_ci(self.auc_context_ci)}, the task alone within authors "
            f"{_fmt(self.auc_within_task)} {_ci(self.auc_within_task_ci)}; "
            f"{self.test_outputs} test outputs" + (" — FLAG (tell)" if self.flagged else "")
        )


def _fmt(value: float | None) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.3f}"


def _ci(ci: Sequence[float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if len(ci) == 2 else "[–]"


# -- collection ------------------------------------------------------------------------------------
class _Recorder:
    """Wraps the env's pool's ``call`` (shared by the env's forks) to record completions."""

    def __init__(self, base: OrchestrationEnv) -> None:
        self.base = base
        self.pool = base.pool
        self.calls: list[tuple[Any, int]] = []
        self._original = self.pool.call

    def __enter__(self) -> _Recorder:
        original = self._original

        def call(name: str, messages: Any, context: Any = None, *args: Any, **kw: Any) -> Any:
            completion = original(name, messages, context, *args, **kw)
            self.calls.append((completion, int(self.base.turn)))
            return completion

        self.pool.call = call  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            del self.pool.call  # back to the class's method
        except AttributeError:
            self.pool.call = self._original  # type: ignore[method-assign]


def label_of(meta: Mapping[str, Any]) -> tuple[str, bool] | None:
    """The privileged label of a completion (``LABEL_KEYS``), or None."""
    for key in LABEL_KEYS:
        value = meta.get(key)
        if isinstance(value, (bool, np.bool_)):
            return key, bool(value)
    return None


Chooser = Callable[[OrchestrationEnv, np.random.Generator], str]


def _random_available(env: OrchestrationEnv, rng: np.random.Generator) -> str:
    try:
        choices = current_choices(env)
    except NotImplementedError:
        return env.demo_action(rng)
    options = available(choices)
    text = choices[options[int(rng.integers(len(options)))]]
    assert text is not None
    return text


def _skill_player(level: float) -> Chooser:
    def choose(env: OrchestrationEnv, rng: np.random.Generator) -> str:
        text = env.skill_action(bool(rng.random() < level), rng)
        return text if isinstance(text, str) else _random_available(env, rng)

    return choose


def _collect(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    split: str,
    episodes: int,
    seed: int,
    players: Sequence[Chooser],
    deadline: float | None,
    first_episode: int,
) -> tuple[list[Output], int, set[str], int]:
    """Outputs of up to ``episodes`` episodes on ``split`` (policies alternate by episode)."""
    env = gym.make(env_id, **{**env_kwargs, "split": split})
    try:
        return _play_outputs(
            orch_base(env), split, episodes, seed, players, deadline, first_episode
        )
    finally:
        env.close()


def _play_outputs(
    base: OrchestrationEnv,
    split: str,
    episodes: int,
    seed: int,
    players: Sequence[Chooser],
    deadline: float | None,
    first_episode: int,
) -> tuple[list[Output], int, set[str], int]:
    outputs: list[Output] = []
    keys: set[str] = set()
    verify = 0
    try:
        size = base.task_source.size(split)
        indices = [int(i) for i in np.random.default_rng([seed, 7]).permutation(size)]
    except OrchEnvError:
        indices = []
    played = 0
    for number in range(episodes):
        if deadline is not None and number and time.monotonic() > deadline:
            break
        if number >= NO_LABEL_EPISODES and not outputs:
            break  # an env whose agents label nothing (or that makes no calls): not measurable
        rng = np.random.default_rng([seed, 11, first_episode + number])
        options: dict[str, Any] = {}
        if indices:
            options["task_index"] = indices[number % len(indices)]
        obs, _ = base.reset(seed=int(rng.integers(2**31)), options=options)
        seen = [str(obs)]
        task_text = _task_text(base)
        player = players[number % len(players)]
        episode_id = first_episode + number
        pending: list[tuple[Any, int, int, int, bool]] = []
        with _Recorder(base) as recorder:
            for _ in range(base.max_turns + 1):
                start = len(recorder.calls)
                with contextlib.suppress(NotImplementedError):
                    verify += has_verify_decision(current_choices(base))
                obs, _, terminated, truncated, info = base.step(player(base, rng))
                seen.append(str(obs))
                consults = sum(bool(c.get("consult")) for c in info.get("calls") or ())
                for position, (completion, turn) in enumerate(recorder.calls[start:]):
                    pending.append((completion, turn, position, len(seen) - 1, position < consults))
                if terminated or truncated:
                    break
        for completion, turn, position, step_index, consult in pending:
            labelled = label_of(completion.meta)
            if labelled is None:
                continue
            keys.add(labelled[0])
            snippet = completion.text.strip()[:SNIPPET_CHARS]
            visible = bool(snippet) and any(snippet in o for o in seen[step_index:])
            record = OrchestrationEnv._call_record(completion)
            outputs.append(
                Output(
                    agent=completion.agent,
                    text=completion.text,
                    record=record,
                    turn=turn,
                    position=position,
                    consult=consult,
                    label=labelled[1],
                    episode=episode_id,
                    visible=visible,
                    task_text=task_text,
                )
            )
        played += 1
    return outputs, played, keys, verify


def _task_text(base: OrchestrationEnv) -> str:
    """The episode's task statement (empty when the env has no task object)."""
    try:
        task = base.task
    except (AttributeError, OrchEnvError):
        return ""
    return "" if task is None else str(task.prompt)


def _bootstrap(
    y: np.ndarray,
    full: np.ndarray,
    context: np.ndarray,
    task: np.ndarray,
    agents: list[str],
    episodes: np.ndarray,
    rng: np.random.Generator,
    draws: int = BOOTSTRAP,
) -> dict[str, list[float]]:
    """95% percentile intervals of the AUCs (and of the paired within-author difference
    full minus task), resampling test episodes."""
    ids = np.unique(episodes)
    rows = {e: np.flatnonzero(episodes == e) for e in ids}
    out: dict[str, list[float]] = {
        "auc": [],
        "within": [],
        "context": [],
        "within_task": [],
        "beyond_task": [],
    }
    for _ in range(draws):
        pick = np.concatenate([rows[e] for e in rng.choice(ids, size=len(ids))])
        yb = y[pick]
        authors = [agents[i] for i in pick]
        out["auc"].append(auc_score(yb, full[pick]))
        out["context"].append(auc_score(yb, context[pick]))
        within = within_auc(yb, full[pick], authors)
        within_task = within_auc(yb, task[pick], authors)
        out["within"].append(within)
        out["within_task"].append(within_task)
        out["beyond_task"].append(within - within_task)
    return {
        k: [float(np.nanpercentile(v, 2.5)), float(np.nanpercentile(v, 97.5))]
        if np.isfinite(v).any()
        else []
        for k, v in out.items()
    }


def _real_draft_auc(base: OrchestrationEnv) -> tuple[float, str] | None:
    """The env's ``real_draft_auc`` (the same classifier's AUC on real models' drafts) and its
    ``real_draft_auc_source``, when it names a number in (0, 1)."""
    value = getattr(type(base), "real_draft_auc", None)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        return None
    return float(value), str(getattr(type(base), "real_draft_auc_source", "") or "")


def _splits(base: OrchestrationEnv) -> tuple[str, ...]:
    try:
        return tuple(base.task_source.splits)
    except OrchEnvError:
        return ()


@dataclass
class FittedTells:
    """A fitted tell classifier and how to featurise an output for it."""

    classifier: TellClassifier
    agents: list[str]

    def prob_right(self, output: Output) -> float:
        full = output_features(output, self.agents)[0]
        return float(self.classifier.predict_proba(full[None, :])[0])


def tell_meter(
    env_id: str,
    *,
    episodes: int = DEFAULT_TELL_EPISODES,
    test_episodes: int = DEFAULT_TELL_TEST_EPISODES,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    threshold: float = DEFAULT_TELL_THRESHOLD,
    skill_level: float | None = None,
    time_limit_s: float | None = None,
    bootstrap: int = BOOTSTRAP,
) -> tuple[TellMeter, FittedTells | None]:
    """Fit the tell classifier on train episodes of ``env_id`` and measure it on test ones.

    Args:
        episodes: train episodes (policies alternate: random available choice, skill reference).
        test_episodes: test episodes (the same mix).
        skill_level: the skill reference's level in the mix (default: the env's realistic one).
        time_limit_s: stop collecting past this (train gets 60% of it); the report says so.
        bootstrap: resamples of test episodes for the intervals.

    Returns the ``TellMeter`` and the fitted classifier (None when not measurable).
    """
    if episodes < 2 or test_episodes < 2:
        raise ConfigError(
            f"episodes and test_episodes must be >= 2, got {episodes}, {test_episodes}"
        )
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"threshold must be in (0, 1), got {threshold!r}")
    started = time.monotonic()
    kwargs = {k: v for k, v in dict(env_kwargs or {}).items() if k != "split"}
    env = gym.make(env_id, **kwargs)
    try:
        base = orch_base(env)
        reference = _real_draft_auc(base)
        level = skill_level
        if level is None:
            value = getattr(type(base), "realistic_skill", None)
            level = float(value) if isinstance(value, (int, float)) else 0.75
        splits = _splits(base)
        train_split = "train" if "train" in splits else base.split
        test_split = "test" if "test" in splits else base.split
        notes: list[str] = []
        if train_split == test_split:
            notes.append(f"one split ({train_split!r}): train and test episodes draw its tasks")
    finally:
        env.close()
    players = [_random_available, _skill_player(level)]
    policies = ["random-available", f"skill@{level:g}"]
    train_deadline = None if time_limit_s is None else started + 0.6 * time_limit_s
    train, n_train, keys, verify = _collect(
        env_id, kwargs, train_split, episodes, seed, players, train_deadline, 0
    )
    test_deadline = None if time_limit_s is None else started + time_limit_s
    test, n_test, keys2, verify2 = _collect(
        env_id, kwargs, test_split, test_episodes, seed + 1, players, test_deadline, 1_000_000
    )
    if reference is not None and reference[0] > threshold:
        notes.append(
            f"threshold raised from {threshold:g} to the env's real-draft AUC {reference[0]:g} "
            f"({reference[1] or 'no source given'})"
        )
        threshold = reference[0]
    meter = TellMeter(
        env_id=env_id,
        measurable=False,
        train_split=train_split,
        test_split=test_split,
        train_episodes=n_train,
        test_episodes=n_test,
        train_outputs=len(train),
        test_outputs=len(test),
        threshold=threshold,
        policies=policies,
        notes=notes,
    )
    meter.verify_decisions = verify + verify2
    meter.label_key = "/".join(sorted(keys | keys2))
    if not train and not test and (n_train < episodes or n_test < test_episodes):
        notes.append(
            f"stopped after {n_train} train and {n_test} test episodes without one labelled "
            "agent output"
        )
    elif n_train < episodes or n_test < test_episodes:
        notes.append(
            f"time limit: {n_train} of {episodes} train and {n_test} of {test_episodes} test "
            "episodes played"
        )
    meter.elapsed_s = round(time.monotonic() - started, 2)
    fitted = measure(meter, train, test, seed=seed, bootstrap=bootstrap)
    meter.elapsed_s = round(time.monotonic() - started, 2)
    logger.info("tell meter %s: %s", env_id, meter.line())
    return meter, fitted


def measure(
    meter: TellMeter,
    train: Sequence[Output],
    test: Sequence[Output],
    *,
    seed: int = 0,
    bootstrap: int = BOOTSTRAP,
) -> FittedTells | None:
    """Fit the classifiers on ``train`` outputs and fill ``meter``'s AUCs, intervals and flag
    from ``test`` outputs (``meter.reason`` says why when it cannot); the fitted classifier."""
    threshold, notes = meter.threshold, meter.notes
    train, test = list(train), list(test)
    meter.train_outputs, meter.test_outputs = len(train), len(test)
    if not train and not test:
        meter.reason = (
            "no agent output carries a privileged label (completion meta "
            f"{' or '.join(repr(k) for k in LABEL_KEYS)})"
        )
        return None
    y_train = np.array([o.label for o in train], dtype=bool)
    y_test = np.array([o.label for o in test], dtype=bool)
    if len(set(y_train.tolist())) < 2 or len(set(y_test.tolist())) < 2:
        meter.reason = "the outputs are all right or all wrong on a split (no AUC)"
        return None
    agents = sorted({o.agent for o in train} | {o.agent for o in test})
    feats = [output_features(o, agents) for o in train]
    x_full = np.array([f[0] for f in feats])
    x_context = np.array([f[1] for f in feats])
    x_task = np.array([f[2] for f in feats])
    full_clf = TellClassifier().fit(x_full, y_train)
    context_clf = TellClassifier().fit(x_context, y_train)
    task_clf = TellClassifier().fit(x_task, y_train)
    test_feats = [output_features(o, agents) for o in test]
    s_full = full_clf.predict_proba(np.array([f[0] for f in test_feats]))
    s_context = context_clf.predict_proba(np.array([f[1] for f in test_feats]))
    s_task = task_clf.predict_proba(np.array([f[2] for f in test_feats]))
    authors = [o.agent for o in test]
    meter.measurable = True
    meter.agents = agents
    meter.right_share = float(y_test.mean())
    meter.text_visible = float(np.mean([o.visible for o in train + test]))
    meter.auc = auc_score(y_test, s_full)
    meter.auc_context = auc_score(y_test, s_context)
    within = within_auc(y_test, s_full, authors)
    meter.auc_within = None if math.isnan(within) else within
    within_task = within_auc(y_test, s_task, authors)
    meter.auc_within_task = None if math.isnan(within_task) else within_task
    if bootstrap:
        cis = _bootstrap(
            y_test,
            s_full,
            s_context,
            s_task,
            authors,
            np.array([o.episode for o in test]),
            np.random.default_rng([seed, 13]),
            bootstrap,
        )
        meter.auc_ci, meter.auc_within_ci, meter.auc_context_ci = (
            cis["auc"],
            cis["within"],
            cis["context"],
        )
        meter.auc_within_task_ci, meter.beyond_task_ci = cis["within_task"], cis["beyond_task"]
    if meter.auc_within is None:
        notes.append("no author has both right and wrong test outputs: no within-author AUC")
    meter.flagged = (
        meter.auc_within is not None
        and meter.auc_within > threshold
        and meter.auc_within - (meter.auc_within_task or 0.5) > TASK_MARGIN
    )
    if (
        meter.auc_within is not None
        and meter.auc_within > threshold
        and not meter.flagged
        and meter.auc_within_task is not None
    ):
        notes.append(
            f"within-author AUC {meter.auc_within:.3f} is above {threshold:g}, but the task's "
            f"own surface already tells {meter.auc_within_task:.3f} (within {TASK_MARGIN:g}): "
            "difficulty a real model's answers share, not a tell of the simulator"
        )
    assert full_clf.weights is not None
    names = feature_names(agents)
    order = np.argsort(-np.abs(full_clf.weights[1:]))[:6]
    meter.top_features = {names[i]: round(float(full_clf.weights[1 + i]), 3) for i in order}
    return FittedTells(full_clf, agents)


# -- the surface-feature verifier ------------------------------------------------------------------
#: a choice that accepts the draft / rejects it (MathRoute's ``<verdict>True</verdict>``)
ACCEPT_RE = re.compile(r"<verdict>\s*true\b|\baccept", re.IGNORECASE)
REJECT_RE = re.compile(r"<verdict>\s*false\b|\breject", re.IGNORECASE)
SURFACE_VERIFIER = "surface-verifier"
SURFACE_VERIFIER_DOC = (
    "accepts the latest draft when the tell meter's classifier (surface features only, fitted "
    "on train episodes) puts P(right) at or above a threshold picked on train episodes, else "
    "takes the first reject choice; elsewhere the env's no-skill default"
)
#: the acceptance thresholds ``tune_verifier`` tries
VERIFIER_THRESHOLDS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9)


def verify_choices(choices: Sequence[str | None]) -> tuple[int | None, int | None]:
    """The first available accept choice and the first available reject choice (None: none)."""

    def first(match: re.Pattern[str], other: re.Pattern[str]) -> int | None:
        return next(
            (k for k, c in enumerate(choices) if c and match.search(c) and not other.search(c)),
            None,
        )

    return first(ACCEPT_RE, REJECT_RE), first(REJECT_RE, ACCEPT_RE)


def latest_output(env: OrchestrationEnv) -> Output | None:
    """The latest routed agent output as the controller sees it now (the previous step's last
    call record and the transcript's text), unlabelled; None when the step called nobody."""
    records = list(getattr(env, "_step_calls", ()) or ())
    routed = [(i, r) for i, r in enumerate(records) if not r.get("consult")]
    if not routed:
        return None
    position, record = routed[-1]
    agent = str(record.get("agent", ""))
    entry = next((e for e in reversed(env.transcript) if e.get("role") == agent), None)
    if entry is None:
        return None
    text = str(entry.get("text", ""))
    shown = env.render_messages(env._messages())
    snippet = text.strip()[:SNIPPET_CHARS]
    return Output(
        agent=agent,
        text=text,
        record=dict(record),
        turn=int(entry.get("turn", env.turn)),
        position=position,
        consult=False,
        label=False,
        episode=-1,
        visible=bool(snippet) and snippet in shown,
        task_text=_task_text(env),
    )


def has_verify_decision(choices: Sequence[str | None]) -> bool:
    accept, reject = verify_choices(choices)
    return accept is not None and reject is not None


def surface_verifier(
    fitted: FittedTells, rng: np.random.Generator, threshold: float = 0.5
) -> Callable[[OrchestrationEnv], str]:
    """The surface-feature verifier (``SURFACE_VERIFIER_DOC``) as an audit strategy: accept
    when the classifier's P(right) is at least ``threshold``."""

    def policy(env: OrchestrationEnv) -> str:
        choices = current_choices(env)
        accept, reject = verify_choices(choices)
        output = latest_output(env) if accept is not None and reject is not None else None
        if accept is not None and reject is not None and output is not None:
            k = accept if fitted.prob_right(output) >= threshold else reject
            text = choices[k]
            assert text is not None
            return text
        default = env.skill_action(False, rng)
        return default if isinstance(default, str) else _random_available(env, rng)

    policy.__doc__ = SURFACE_VERIFIER_DOC
    return policy


def tune_verifier(
    env_id: str,
    fitted: FittedTells,
    *,
    episodes: int = 100,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    thresholds: Sequence[float] = VERIFIER_THRESHOLDS,
) -> tuple[float, dict[float, float]]:
    """The acceptance threshold of the surface verifier with the best mean return over
    ``episodes`` episodes on the **train** split (the same tasks for every threshold), and
    the mean return of each threshold tried."""
    kwargs = {k: v for k, v in dict(env_kwargs or {}).items() if k != "split"}
    env = gym.make(env_id, **kwargs)
    splits = _splits(orch_base(env))
    env.close()
    if "train" in splits:
        kwargs["split"] = "train"
    env = gym.make(env_id, **kwargs)
    base = orch_base(env)
    try:
        try:
            size = base.task_source.size(base.split)
        except OrchEnvError:
            size = 0
        means: dict[float, float] = {}
        for threshold in thresholds:
            total = 0.0
            for number in range(episodes):
                rng = np.random.default_rng([seed, 17, number])
                options = {"task_index": number % size} if size else {}
                base.reset(seed=int(rng.integers(2**31)), options=options)
                policy = surface_verifier(fitted, rng, threshold)
                for _ in range(base.max_turns + 1):
                    _, reward, terminated, truncated, _ = base.step(policy(base))
                    total += float(reward)
                    if terminated or truncated:
                        break
            means[float(threshold)] = total / episodes
    finally:
        env.close()
    best = max(means, key=lambda t: (means[t], -abs(t - 0.5)))
    return best, means
