"""Answer checking.

Math equivalence goes through HuggingFace's ``math-verify`` (LaTeX, boxed
answers, fractions, plain numbers, sets and intervals); we add only the
pieces it does not do: pulling the last ``\\boxed{...}`` out of a worked
solution with balanced braces, a bounded LRU cache (a GRPO group checks the
same response many times), and a guarantee never to raise on odd input.
"""

from __future__ import annotations

import logging
import re
import string
import threading
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

logger = logging.getLogger(__name__)

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MAX_CHECK_CHARS = 20_000  # math-verify's parser is slow on huge inputs; answers are short


def extract_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced.

    Returns None when there is no complete boxed expression.
    """
    if not isinstance(text, str):
        return None
    last: str | None = None
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    last = text[start:i].strip()
                    break
    return last


class _DropTimeoutNotice(logging.Filter):
    """math-verify warns on every call made without its signal-based timeout."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutNotice())


def _timeout_s() -> int | None:
    # math-verify times out with SIGALRM, which only works in the main thread;
    # worker threads (vector envs, call_many) check without a timeout.
    return 5 if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=65_536)
def _verify_cached(reference: str, candidate: str) -> bool:
    from math_verify import parse, verify

    try:
        timeout = _timeout_s()
        gold = parse(_as_latex(reference), parsing_timeout=timeout)
        pred = parse(_as_latex(candidate), parsing_timeout=timeout)
        if not gold or not pred:
            return False
        return bool(verify(gold, pred, timeout_seconds=timeout))
    except Exception:  # math-verify can raise on exotic input; a failed parse is "not equal"
        logger.debug("math-verify failed on %r vs %r", reference, candidate, exc_info=True)
        return False


def _as_latex(answer: str) -> str:
    """Wrap a bare answer in ``$...$`` so math-verify parses it as LaTeX."""
    if "\\boxed" in answer or "$" in answer:
        return answer
    return f"${answer}$"


def math_answer(text: str) -> str | None:
    """The final answer of a worked solution: its last boxed expression."""
    return extract_boxed(text)


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


def math_equal(reference: str, candidate: str | None) -> bool:
    """True when ``candidate`` is mathematically equivalent to ``reference``.

    Both are answers (not whole solutions): ``"\\frac{1}{2}"`` equals ``"0.5"``.
    Cached; never raises.
    """
    if candidate is None or not isinstance(candidate, str) or not isinstance(reference, str):
        return False
    candidate, reference = candidate.strip(), reference.strip()
    if not candidate or not reference:
        return False
    if candidate == reference:
        return True
    ref_num, cand_num = _plain_number(reference), _plain_number(candidate)
    if ref_num is not None and cand_num is not None:
        return ref_num == cand_num
    if len(candidate) > _MAX_CHECK_CHARS or len(reference) > _MAX_CHECK_CHARS:
        return False
    return _verify_cached(reference, candidate)


def check_math_solution(solution: str, answers: tuple[str, ...] | list[str]) -> bool:
    """True when the solution's last boxed answer matches any reference answer."""
    predicted = math_answer(solution)
    return predicted is not None and any(math_equal(ref, predicted) for ref in answers)


def cache_info():  # noqa: ANN201 - functools' CacheInfo
    """Hit/miss statistics of the equivalence cache."""
    return _verify_cached.cache_info()


# -- text answers (QA environments) -----------------------------------------
def normalize_text(text: str) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, articles or extra spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


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
