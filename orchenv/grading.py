"""Answer checking.

Math equivalence goes through HuggingFace's ``math-verify`` (LaTeX, boxed
answers, fractions, plain numbers, sets and intervals); we add only the
pieces it does not do: pulling the last ``\\boxed{...}`` out of a worked
solution with balanced braces (in linear time), a cache bounded in bytes
(a GRPO group checks the same response many times), a hard time budget, and
a guarantee never to raise on odd input.

The budget
----------
A controller's answer is untrusted text, and symbolic work on it can take any
time: ``9^{9^{9}}`` asks sympy for a number with 370 million digits, and that
multiplication runs inside C with the GIL held, so neither math-verify's own
``SIGALRM`` timeout (main thread only) nor a watchdog thread can stop it. Two
layers keep every check bounded:

1. ``answer_refusal`` refuses, before any symbolic work, answers longer than
   ``MAX_SYMBOLIC_CHARS``, digit runs longer than ``MAX_DIGITS``, brackets nested
   deeper than ``MAX_NESTING``, numeric exponents, factorials or scientific
   exponents above ``MAX_EXPONENT``, and power towers whose exponent is itself a
   numeric power. No answer of any bundled task source comes near these limits.
   The candidate gets every test; the reference (from a dataset, trusted) only the
   length limit, so a reference such as ``2^{2^{2}}`` is still checked (by the worker).
2. What passes is checked in a worker process (one per parent process, started
   on first use) that the parent waits on with a deadline of ``GRADING_TIMEOUT_S``
   seconds, without holding the GIL, and kills when it is passed; a fresh worker
   starts at once. The worker also runs under a 1 GiB address-space limit.

A refused or timed-out check counts as "not equal"; ``math_verdict`` says which
(``Verdict.status``) so envs can report it in ``info["grading"]``. Setting
``GRADING_TIMEOUT_S = None`` checks in this process instead (no hard budget; the
refusals still apply); so does a machine where the worker cannot start.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import string
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

from orchenv.parsing import counted_finditer

logger = logging.getLogger(__name__)

#: seconds one equivalence check may take in the worker (None: check in this process)
GRADING_TIMEOUT_S: float | None = 2.0
#: answers longer than this (characters) are refused before symbolic work
MAX_SYMBOLIC_CHARS = 2_000
#: a run of more digits than this is refused (plain numbers up to 1,000 characters are
#: compared exactly without a parser)
MAX_DIGITS = 1_000
#: brackets nested deeper than this are refused
MAX_NESTING = 64
#: numeric exponents (``^``, ``**``, ``1e...``) and factorials above this are refused
MAX_EXPONENT = 100_000
#: the equivalence cache's budget in bytes (keys and values, estimated)
CACHE_BYTES = 8 * 2**20
#: seconds a new worker may take to import math-verify before grading falls back in-process
_STARTUP_TIMEOUT_S = 60.0
_WORKER_ADDRESS_SPACE = 2**30  # bytes (RLIMIT_AS of the worker)


# -- boxed answers --------------------------------------------------------------------------
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")


def last_boxed_span(text: str) -> tuple[int, int, int] | None:
    """``(start, content_start, end)`` of the last complete ``\\boxed{...}`` in ``text``.

    ``text[start:end]`` is the whole expression and ``text[content_start:end - 1]`` its
    contents. "Last" is the last ``\\boxed{`` (or ``\\fbox{``) whose brace is closed.
    One pass pairs every brace with a stack, so thousands of unclosed ``\\boxed{`` cost
    no rescans.
    """
    if not isinstance(text, str) or "box" not in text:
        return None
    boxes = {m.end() - 1: m.start() for m in counted_finditer(_BOXED, text)}  # brace -> start
    if not boxes:
        return None
    unclosed: list[int] = []
    best: tuple[int, int, int] | None = None
    for match in counted_finditer(_BRACE, text, min(boxes)):
        i = match.start()
        if text[i] == "{":
            unclosed.append(i)
        elif unclosed:
            j = unclosed.pop()
            start = boxes.get(j)
            if start is not None and (best is None or start > best[0]):
                best = (start, j + 1, i + 1)
    return best


#: texts up to this many characters have their boxed answer cached (``extract_boxed``):
#: a simulated draft is read by the backend, the env's grader and the episode's summary
#: (issue 40); the cache holds at most ``_BOXED_CACHE_SIZE`` of them (a few MB)
BOXED_CACHE_CHARS = 4096
_BOXED_CACHE_SIZE = 2048


def extract_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced.

    Returns None when there is no complete boxed expression. Cached for texts up to
    ``BOXED_CACHE_CHARS`` characters (a pure function of the text).
    """
    if type(text) is str and len(text) <= BOXED_CACHE_CHARS:
        return _extract_boxed_cached(text)
    return _extract_boxed(text)


@lru_cache(maxsize=_BOXED_CACHE_SIZE)
def _extract_boxed_cached(text: str) -> str | None:
    return _extract_boxed(text)


def _extract_boxed(text: str) -> str | None:
    span = last_boxed_span(text)
    return None if span is None else text[span[1] : span[2] - 1].strip()


def math_answer(text: str) -> str | None:
    """The final answer of a worked solution: its last boxed expression."""
    return extract_boxed(text)


# -- refusals before symbolic work ----------------------------------------------------------
_POWER = re.compile(r"\^|\*\*")
_LONG_DIGITS = re.compile(rf"(?<!\d)\d{{{MAX_DIGITS + 1}}}")
_SCIENTIFIC = re.compile(r"\d[eE][+-]?(\d+)")
_NEXT_POWER = re.compile(r"\s*(?:\^|\*\*)")
_FACTORIAL = re.compile(r"(?<!\d)(\d+)\s*!")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_LETTER = re.compile(r"[A-Za-z]")
_TOKEN = re.compile(r"\s*(?:\d+(?:\.\d*)?|\\[A-Za-z]+|[A-Za-z])")
_PAIRS = {"{": "}", "(": ")", "[": "]"}


def _bracket_pairs(text: str) -> tuple[dict[int, int], int]:
    """Each opening bracket's closing position, and the deepest nesting seen."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    deepest = 0
    for i, ch in enumerate(text):
        if ch in _PAIRS:
            stack.append(i)
            deepest = max(deepest, len(stack))
        elif ch in "})]" and stack and _PAIRS[text[stack[-1]]] == ch:
            pairs[stack.pop()] = i
    return pairs, deepest


def _exponent(text: str, at: int, pairs: dict[int, int]) -> tuple[str, int]:
    """The exponent operand that starts at ``at`` (after ``^`` or ``**``) and where it ends."""
    i = at
    while i < len(text) and text[i].isspace():
        i += 1
    if i < len(text) and i in pairs:
        return text[i + 1 : pairs[i]], pairs[i] + 1
    token = _TOKEN.match(text, at)
    return (text[at : token.end()], token.end()) if token else ("", at)


def _is_number_tower(exponent: str) -> bool:
    """Whether an exponent holds a power of its own and nothing symbolic (``9^{9^{9}}``)."""
    return bool(_POWER.search(exponent)) and not _LETTER.search(_COMMAND.sub("", exponent))


def answer_refusal(answer: str) -> str | None:
    """Why ``answer`` is too large to check symbolically, or None when it may be checked.

    Cheap (linear) tests of size, run before any parser sees the text; see the module
    docstring for the limits.
    """
    if len(answer) > MAX_SYMBOLIC_CHARS:
        return f"longer than {MAX_SYMBOLIC_CHARS} characters"
    if _LONG_DIGITS.search(answer):
        return f"a number with more than {MAX_DIGITS} digits"
    pairs, deepest = _bracket_pairs(answer)
    if deepest > MAX_NESTING:
        return f"brackets nested deeper than {MAX_NESTING}"
    for pattern in (_SCIENTIFIC, _FACTORIAL):
        for match in pattern.finditer(answer):
            if int(match.group(1)) > MAX_EXPONENT:
                return f"{match.group(0)[:40]!r} is above {MAX_EXPONENT}"
    for match in _POWER.finditer(answer):
        exponent, end = _exponent(answer, match.end(), pairs)
        chained = _NEXT_POWER.match(answer, end)
        if chained:  # a^b^c: the exponent is b^c
            exponent += "^" + _exponent(answer, chained.end(), pairs)[0]
        if _is_number_tower(exponent):
            return "a power tower"
        digits = exponent.strip().strip("{}() +-")
        if digits.isdecimal() and int(digits) > MAX_EXPONENT:
            return f"an exponent above {MAX_EXPONENT}"
    return None


# -- verdicts and their cache -----------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """One equivalence check: ``equal``, and ``status``: ``"ok"`` when the check ran, else
    why it did not (the answer then counts as not equal): ``"too-large"`` (refused before
    symbolic work, or the worker ran out of memory), ``"timeout"`` (past
    ``GRADING_TIMEOUT_S``) or ``"error"`` (math-verify failed on it)."""

    equal: bool
    status: str = "ok"


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    currsize: int  # entries
    nbytes: int
    maxbytes: int


class _ByteLRU:
    """A thread-safe LRU of verdicts that evicts by an estimate of the bytes it holds
    (``CACHE_BYTES``, read at each insertion)."""

    def __init__(self) -> None:
        self.nbytes = self.hits = self.misses = 0
        self._data: OrderedDict[tuple[str | None, str], tuple[Verdict, int]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def cost(key: tuple[str | None, str]) -> int:
        return sum(sys.getsizeof(part) for part in key) + 200  # + entry and verdict overhead

    def get(self, key: tuple[str | None, str]) -> Verdict | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: tuple[str | None, str], verdict: Verdict) -> None:
        size = self.cost(key)
        with self._lock:
            if key in self._data:
                self.nbytes -= self._data.pop(key)[1]
            self._data[key] = (verdict, size)
            self.nbytes += size
            while self.nbytes > CACHE_BYTES and self._data:
                self.nbytes -= self._data.popitem(last=False)[1][1]

    def reset_lock(self) -> None:
        self._lock = threading.Lock()

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._data), self.nbytes, CACHE_BYTES)


_cache = _ByteLRU()


def cache_info() -> CacheInfo:
    """Hits, misses, entries and bytes of the equivalence cache."""
    return _cache.info()


# -- the worker process ---------------------------------------------------------------------
# Runs as ``python -I -c _WORKER_CODE SYS_PATH RLIMIT_AS``: it imports only math-verify
# (from the parent's sys.path), answers one JSON line per JSON line, and writes through
# a private copy of stdout so that nothing the libraries print can break the protocol.
_WORKER_CODE = r"""
import json, os, resource, signal, sys
sys.path[:] = json.loads(sys.argv[1])
signal.signal(signal.SIGINT, signal.SIG_IGN)
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
import logging
logging.disable(logging.CRITICAL)
from math_verify import parse, verify
out.write("ready\n")
out.flush()
for line in sys.stdin:
    try:
        gold_text, pred_text = json.loads(line)
        gold = parse(gold_text, parsing_timeout=None)
        pred = parse(pred_text, parsing_timeout=None)
        reply = {"equal": bool(gold and pred and verify(gold, pred, timeout_seconds=None))}
    except MemoryError:
        reply = {"status": "too-large"}
    except BaseException:
        reply = {"status": "error"}
    out.write(json.dumps(reply) + "\n")
    out.flush()
"""
#: environment variables the worker gets (none that could hold a secret)
_WORKER_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")


class _Worker:
    """The grading process: started on first use, killed when a check runs past its deadline
    (a replacement starts at once), replaced in a forked child, ended at exit."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = False
        self.buffer = b""
        self.unavailable = False

    def start(self) -> None:
        env = {k: os.environ[k] for k in _WORKER_ENV if k in os.environ}
        path = json.dumps([p for p in sys.path if p])
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _WORKER_CODE, path, str(_WORKER_ADDRESS_SPACE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C in a terminal reaches the parent only
        )
        self.ready, self.buffer = False, b""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def _line(self, deadline: float) -> bytes | None:
        """The worker's next line, or None at the deadline or when the worker died. Waits
        in ``poll`` (no GIL held, no fd-number limit)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def _send(self, gold: str, pred: str) -> None:
        """Start the worker if needed (or if it died), wait until it is ready, send one check."""
        if self.proc is not None and self.proc.poll() is not None:
            self.stop()
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        if not self.ready:
            if self._line(time.monotonic() + _STARTUP_TIMEOUT_S) != b"ready":
                raise OSError(f"the grading worker did not start within {_STARTUP_TIMEOUT_S} s")
            self.ready = True
        self.proc.stdin.write(json.dumps([gold, pred]).encode() + b"\n")
        self.proc.stdin.flush()

    def _give_up(self, exc: Exception) -> None:
        logger.warning("orchenv grades in-process from now on (no hard time budget): %s", exc)
        self.stop()
        self.unavailable = True

    def check(self, gold: str, pred: str, timeout: float) -> Verdict | None:
        """The worker's verdict on two LaTeX answers; None when no worker can run here.

        A worker found dead (killed from outside) is replaced and the check asked once
        more; one that dies on the second try too is taken to have died on this input.
        """
        with self.lock:
            for retry in (False, True):
                if self.unavailable:
                    return None
                try:
                    self._send(gold, pred)
                except BrokenPipeError:  # it died before reading the check
                    self.stop()
                    continue
                except (OSError, ValueError, AttributeError) as exc:  # no poll, fork, python
                    self._give_up(exc)
                    return None
                deadline = time.monotonic() + timeout
                line = self._line(deadline)
                if line is not None:
                    return self._verdict(line)
                timed_out = time.monotonic() >= deadline
                self.stop()
                if timed_out or retry:
                    self._restart()
                    return Verdict(False, "timeout" if timed_out else "error")
            return Verdict(False, "error")

    def _restart(self) -> None:
        """A fresh worker, importing while the caller moves on."""
        try:
            self.start()
        except OSError as exc:
            self._give_up(exc)

    @staticmethod
    def _verdict(line: bytes) -> Verdict:
        try:
            reply = json.loads(line)
        except ValueError:
            return Verdict(False, "error")
        if isinstance(reply, dict) and "equal" in reply:
            return Verdict(bool(reply["equal"]))
        status = reply.get("status") if isinstance(reply, dict) else None
        return Verdict(False, str(status or "error"))

    def forget(self) -> None:
        """In a forked child: leave the parent's worker alone and start a new one on use."""
        self.lock = threading.Lock()
        proc, self.proc = self.proc, None
        for stream in (proc.stdin, proc.stdout) if proc is not None else ():
            if stream is not None:
                stream.close()
        self.ready, self.buffer = False, b""


_worker = _Worker()
atexit.register(_worker.stop)


def worker_pid() -> int | None:
    """The grading worker's process id (for monitoring), or None when none is running."""
    proc = _worker.proc
    return None if proc is None else proc.pid


class _DropTimeoutNotice(logging.Filter):
    """math-verify warns on every call made without its signal-based timeout."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutNotice())


def _verify_here(gold_text: str, pred_text: str) -> Verdict:
    """math-verify in this process (no hard budget): with its ``SIGALRM`` timeout in the
    main thread, without one in other threads."""
    from math_verify import parse, verify

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse(gold_text, parsing_timeout=timeout)
        pred = parse(pred_text, parsing_timeout=timeout)
        return Verdict(bool(gold and pred and verify(gold, pred, timeout_seconds=timeout)))
    except Exception:  # math-verify can raise on exotic input; a failed parse is "not equal"
        logger.debug("math-verify failed on %r vs %r", gold_text, pred_text, exc_info=True)
        return Verdict(False, "error")


def _as_latex(answer: str) -> str:
    """Wrap a bare answer in ``$...$`` so math-verify parses it as LaTeX."""
    if "\\boxed" in answer or "$" in answer:
        return answer
    return f"${answer}$"


_symbolic_lock = threading.Lock()


def _cached(reference: str, candidate: str) -> Verdict | None:
    for key in ((reference, candidate), (None, candidate)):
        verdict = _cache.get(key)
        if verdict is not None:
            return verdict
    return None


def _symbolic(reference: str, candidate: str) -> Verdict:
    """The symbolic check, cached (both answers passed ``answer_refusal``, so every entry
    is small); a candidate that timed out once is not tried against other references.

    One check runs at a time (the worker is one process); the cache is read again once
    it is this thread's turn, so threads that wait on the same slow answer (a vector
    env's copies, a GRPO group) do not each spend the budget on it.
    """
    verdict = _cached(reference, candidate)
    if verdict is not None:
        return verdict
    with _symbolic_lock:
        verdict = _cached(reference, candidate)
        if verdict is not None:
            return verdict
        if GRADING_TIMEOUT_S is not None:
            verdict = _worker.check(_as_latex(reference), _as_latex(candidate), GRADING_TIMEOUT_S)
        if verdict is None:
            verdict = _verify_here(_as_latex(reference), _as_latex(candidate))
        _cache.put((reference, candidate), verdict)
        if verdict.status == "timeout":
            _cache.put((None, candidate), verdict)
    return verdict


def _after_fork_in_child() -> None:
    """A forked child gets fresh locks (another thread may have held one at the fork) and
    its own worker, so it never talks over its parent's pipes."""
    global _symbolic_lock
    _symbolic_lock = threading.Lock()
    _cache.reset_lock()
    _worker.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- equivalence ----------------------------------------------------------------------------
_NUMBER = re.compile(r"^([+-]?)(\d+(?:\.\d+)?)$")
_FRACTION = re.compile(r"^([+-]?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$|^([+-]?)(\d+)/(\d+)$")


def _plain_number(text: str) -> Fraction | None:
    """``-12``, ``3.5``, ``\\frac{3}{4}``, ``-3/4`` as an exact Fraction; None for anything else.

    A fast path: most procedural answers are plain numbers, and comparing two
    of them exactly needs no parser. Everything else goes to math-verify.
    """
    t = text.replace(" ", "").replace("$", "")
    if len(t) > 1000:  # int() refuses >4300 digits; no real answer is this long
        return None
    m = _NUMBER.match(t)
    if m:
        value = Fraction(m.group(2))
        return -value if m.group(1) == "-" else value
    m = _FRACTION.match(t)
    if m:
        sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) else m.group(4, 5, 6)
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
        return -value if sign == "-" else value
    return None


def math_verdict(reference: str, candidate: str | None) -> Verdict:
    """Whether ``candidate`` is mathematically equivalent to ``reference``, and whether the
    check could run (``Verdict.status``). Never raises; bounded in time (module docstring)."""
    if candidate is None or not isinstance(candidate, str) or not isinstance(reference, str):
        return Verdict(False)
    candidate, reference = candidate.strip(), reference.strip()
    if not candidate or not reference:
        return Verdict(False)
    if candidate == reference:
        return Verdict(True)
    ref_num, cand_num = _plain_number(reference), _plain_number(candidate)
    if ref_num is not None and cand_num is not None:
        return Verdict(ref_num == cand_num)
    if len(reference) > MAX_SYMBOLIC_CHARS or answer_refusal(candidate) is not None:
        return Verdict(False, "too-large")
    return _symbolic(reference, candidate)


def math_equal(reference: str, candidate: str | None) -> bool:
    """True when ``candidate`` is mathematically equivalent to ``reference``.

    Both are answers (not whole solutions): ``"\\frac{1}{2}"`` equals ``"0.5"``.
    Cached; never raises; a check refused or cut off by the budget is ``False``.
    """
    return math_verdict(reference, candidate).equal


def match_any(references: Iterable[str], candidate: str | None) -> Verdict:
    """``math_verdict`` against several references: equal to any of them, else the first
    status that is not ``"ok"`` (so a refusal or timeout is reported)."""
    worst = Verdict(False)
    for reference in references:
        verdict = math_verdict(reference, candidate)
        if verdict.equal:
            return verdict
        if worst.status == "ok":
            worst = verdict
    return worst


def solution_verdict(solution: str, answers: Sequence[str]) -> Verdict:
    """``match_any`` for the last boxed answer of a worked solution (none: not equal)."""
    predicted = math_answer(solution)
    return Verdict(False) if predicted is None else match_any(answers, predicted)


def check_math_solution(solution: str, answers: tuple[str, ...] | list[str]) -> bool:
    """True when the solution's last boxed answer matches any reference answer."""
    return solution_verdict(solution, answers).equal


# -- text answers (QA environments) -----------------------------------------
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_text(text: str) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, articles or extra spaces."""
    text = text.lower().translate(_NO_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(reference: str, candidate: str | None) -> bool:
    return candidate is not None and normalize_text(reference) == normalize_text(candidate)


def answer_prf(reference: str, candidate: str | None) -> tuple[float, float, float]:
    """Token-level (precision, recall, F1) between normalised strings (SQuAD / HotpotQA).

    An unanswered candidate scores (0, 0, 0); two strings that normalise to
    nothing count as a match (1, 1, 1).
    """
    if candidate is None:
        return 0.0, 0.0, 0.0
    ref, pred = normalize_text(reference).split(), normalize_text(candidate).split()
    if not ref or not pred:
        same = float(ref == pred)
        return same, same, same
    overlap = sum((Counter(ref) & Counter(pred)).values())
    if overlap == 0:
        return 0.0, 0.0, 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return precision, recall, 2 * precision * recall / (precision + recall)


def best_answer_prf(references: Sequence[str], candidate: str | None) -> tuple[float, float, float]:
    """``answer_prf`` against the reference (or alias) that gives the highest F1."""
    scores = [answer_prf(ref, candidate) for ref in references] or [(0.0, 0.0, 0.0)]
    return max(scores, key=lambda prf: prf[2])


def f1_score(reference: str, candidate: str | None) -> float:
    """Token-level F1 between normalised strings (SQuAD / HotpotQA definition)."""
    return answer_prf(reference, candidate)[2]
