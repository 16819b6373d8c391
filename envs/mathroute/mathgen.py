"""Procedural math problems with worked solutions whose mistakes are real.

This is the offline default task source of ``orch/MathRoute-v0``. Every task is
generated lazily and deterministically from ``(seed, split, index)``; its level
(1-5, MATH-like) comes from a low-discrepancy sequence over the index so that any
prefix of a split covers difficulty nearly uniformly (simulated-agent calibration
relies on that).

Each family solves its problem step by step through *error sites*: places where a
weak solver could slip (an arithmetic slip, a sign error, a dropped term, an
off-by-one, a misapplied formula). ``worked_solution(task, correct=False, ...)``
injects one such error and lets it propagate, so a wrong solution contains a
concrete faulty step and a wrong final ``\\boxed{...}`` answer. A verifier can
therefore learn to spot mistakes from the text alone.

Everything is plain Python ints and ``fractions.Fraction`` (no sympy): a task plus
a worked solution costs well under a millisecond.

Written by hand because no maintained library does this: ``reasoning-gym``
generates verifiable problems (orchenv exposes it as the ``reasoning-gym`` task
source) but not step-by-step solutions with injectable, propagating mistakes,
which the verification half of seed 000's controller needs.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

import numpy as np

from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import extract_boxed, last_boxed_span, math_equal
from orchenv.seeding import stable_int, stable_uniform
from orchenv.tasks import GeneratedTaskSource, Task

logger = logging.getLogger(__name__)

__all__ = [
    "FAMILIES",
    "ProceduralMathSource",
    "worked_solution",
    "wrong_answer",
]

Num = int | Fraction

_PHI = 0.6180339887498949  # golden-ratio conjugate: Kronecker sequence step
_SPLITS = ("train", "test")
_CACHE_MAX = 32_768
_MAX_ATTEMPTS = 64  # rejection sampling for the train/test partition (p=1/2 each)


# -- random draws and error sites ----------------------------------------------------------
class _Draw:
    """Cheap scalar draws from a numpy Generator (``Generator.integers`` is slow per call)."""

    __slots__ = ("_random",)

    def __init__(self, rng: np.random.Generator) -> None:
        self._random = rng.random

    def u(self) -> float:
        return float(self._random())

    def ri(self, lo: int, hi: int) -> int:
        """Uniform integer in ``[lo, hi]``."""
        return lo + int(self._random() * (hi - lo + 1))

    def nz(self, lo: int, hi: int) -> int:
        """Uniform non-zero integer in ``[lo, hi]`` (which must contain one)."""
        while True:
            v = self.ri(lo, hi)
            if v:
                return v

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[int(self._random() * len(seq))]

    def sign(self) -> int:
        return 1 if self._random() < 0.5 else -1


class _Err:
    """Error injection for one solve: sites are numbered in order; one may misfire.

    ``target = -1`` gives the correct solution (and counts the sites).
    """

    __slots__ = ("target", "kind_u", "forced", "count", "applied", "draw")

    def __init__(
        self,
        draw: _Draw | None = None,
        target: int = -1,
        kind_u: float = 0.0,
        forced: str | None = None,
    ) -> None:
        self.draw, self.target, self.kind_u, self.forced = draw, target, kind_u, forced
        self.count = 0
        self.applied: str | None = None

    def at(self, *kinds: str) -> str | None:
        """Register an error site; returns the error kind to commit here, or None."""
        i = self.count
        self.count += 1
        if i != self.target:
            return None
        if self.forced is not None and self.forced in kinds:
            kind = self.forced
        else:
            kind = kinds[min(int(self.kind_u * len(kinds)), len(kinds) - 1)]
        self.applied = kind
        return kind

    def u(self) -> float:
        return self.draw.u() if self.draw is not None else 0.0

    def slipped(self, v: Num, avoid: Sequence[Num] = ()) -> Num:
        """A "slip" error site on ``v``: ``v`` itself, or a slip of it when the site fires."""
        return self.slip(v, avoid) if self.at("slip") else v

    def signed(self, v: Num, flipped: Num) -> Num:
        """A "slip"/"sign" error site on ``v``: ``v``, a slip of it, or ``flipped`` (the
        value with a sign mistaken; computed by the caller, so it must not raise)."""
        kind = self.at("slip", "sign")
        if kind == "sign":
            return flipped
        return self.slip(v) if kind else v

    def slip(self, v: Num, avoid: Sequence[Num] = ()) -> Num:
        """A nearby wrong value, as from an arithmetic slip (never equal to ``v``)."""
        v = _norm(v)
        if isinstance(v, Fraction):
            for _ in range(16):
                delta = self._pick((1, 1, 2)) * self._sign()
                w = _norm(Fraction(v.numerator + delta, v.denominator))
                if w != v and w not in avoid:
                    return w
            w = v + 1
        else:
            mag = abs(v)
            deltas = (1, 2, 3) if mag < 20 else (1, 2, 10) if mag < 500 else (1, 10, 100)
            for _ in range(16):
                w = v + self._pick(deltas) * self._sign()
                if w != v and w not in avoid:
                    return w
            w = v + 1
        while w in avoid or w == v:
            w += 1
        return w

    def _pick(self, seq: Sequence[Any]) -> Any:
        return self.draw.pick(seq) if self.draw is not None else seq[0]

    def _sign(self) -> int:
        return self.draw.sign() if self.draw is not None else 1


# -- formatting ------------------------------------------------------------------------------
def _norm(v: Num) -> Num:
    """Fractions with denominator 1 become ints, so answers render canonically."""
    if isinstance(v, Fraction) and v.denominator == 1:
        return int(v.numerator)
    return v


def _abs(v: Num) -> Num:
    """``abs`` that keeps the ``int | Fraction`` type (mypy widens ``abs`` of a union to object)."""
    return -v if v < 0 else v


def _tex(v: Num) -> str:
    """Canonical LaTeX for an int or a Fraction: ``-7``, ``\\frac{3}{4}``, ``-\\frac{3}{4}``."""
    if isinstance(v, Fraction):
        if v.denominator == 1:
            return str(v.numerator)
        sign = "-" if v < 0 else ""
        return f"{sign}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"
    return str(v)


def _p(v: Num) -> str:
    """``_tex`` with negatives parenthesised, for use as an operand."""
    s = _tex(v)
    return f"({s})" if v < 0 else s


def _sum_tex(items: Sequence[tuple[Num, str]]) -> str:
    """Signed sum of monomials ``[(coef, var), ...]`` (``var=""`` for constants)."""
    out = ""
    for coef, var in items:
        if coef == 0:
            continue
        body = var if (abs(coef) == 1 and var) else f"{_tex(_abs(coef))}{var}"
        if not out:
            out = ("-" if coef < 0 else "") + body
        else:
            out += (" - " if coef < 0 else " + ") + body
    return out or "0"


def _eq(lhs: str, v: Num) -> str:
    """``lhs = v`` without a redundant ``= v`` when ``lhs`` already reads as ``v``."""
    rhs = _tex(v)
    return lhs if lhs == rhs else f"{lhs} = {rhs}"


def _frac_eq(num: Num, den: Num, v: Num) -> str:
    return _eq(f"\\frac{{{_tex(num)}}}{{{_tex(den)}}}", v)


def _lin(p: Num, q: Num, var: str = "x") -> str:
    return _sum_tex(((p, var), (q, "")))


def _lin_xy(a: Num, b: Num) -> str:
    return _sum_tex(((a, "x"), (b, "y")))


@dataclass(frozen=True)
class _Style:
    """Phrasing variant of a worked solution."""

    so: str
    prefix: str
    intro: str | None


_STYLES = (
    _Style("So", "Step {}: ", None),
    _Style("Thus", "{}. ", "Let's work through this step by step."),
    _Style("Hence", "Step {}. ", "We solve the problem one step at a time."),
)


def _render(steps: Sequence[str], answer: str, sty: _Style) -> str:
    lines = [sty.intro] if sty.intro else []
    lines.extend(sty.prefix.format(i) + s for i, s in enumerate(steps, 1))
    lines.append(f"The final answer is $\\boxed{{{answer}}}$")
    return "\n".join(lines)


Steps = list[str]
Solved = tuple[Steps, Num]


# -- family: order-of-operations arithmetic ---------------------------------------------------
_SYM = {"+": "+", "-": "-", "*": "\\times", "/": "\\div"}
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "^": 3}


def _arith_eval(node: Any) -> int:
    if not isinstance(node, list):
        return node
    op, a, b = node
    x, y = _arith_eval(a), _arith_eval(b)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        return x // y
    return x**y


def _arith_sample(d: _Draw, level: int) -> dict[str, Any]:
    hi = (9, 12, 15, 20, 25)[level - 1]
    lo = 1 if level <= 2 else 2
    ops = ("+", "-", "*") if level == 1 else ("+", "-", "*", "/")

    def gen(k: int) -> Any:
        if k == 0:
            return d.ri(lo, hi)
        if k == 1 and level >= 4 and d.u() < 0.25:
            base = d.ri(2, 5 if level == 4 else 7)
            return ["^", base, 3 if base <= 4 and d.u() < 0.3 else 2]
        op = d.pick(ops)
        if op == "/":
            left = gen(k - 1)
            lv = _arith_eval(left)
            divs = [q for q in range(2, 13) if lv != 0 and lv % q == 0]
            return ["/", left, d.pick(divs)] if divs else ["*", left, d.ri(2, 9)]
        kl = d.ri(0, k - 1)
        left, right = gen(kl), gen(k - 1 - kl)
        if op == "*" and abs(_arith_eval(left) * _arith_eval(right)) > 2000:
            op = "+"
        return [op, left, right]

    return {"expr": gen(level + 1), "q": d.ri(0, 2)}


def _arith_tex(node: Any, parent: int = 0, right: bool = False) -> str:
    if not isinstance(node, list):
        return _p(node)
    op, a, b = node
    if op == "^":
        return f"{_p(a)}^{{{b}}}"
    prec = _PREC[op]
    s = f"{_arith_tex(a, prec)} {_SYM[op]} {_arith_tex(b, prec, True)}"
    return f"({s})" if prec < parent or (right and prec == parent) else s


def _arith_prompt(params: dict[str, Any]) -> str:
    e = _arith_tex(params["expr"])
    return (f"Evaluate ${e}$.", f"What is the value of ${e}$?", f"Compute ${e}$.")[params["q"]]


def _arith_apply(op: str, a: Num, b: Num, err: _Err) -> Num:
    v: Num
    kinds: tuple[str, ...]
    if op == "+":
        v, kinds = a + b, ("slip",)
    elif op == "-":
        v, kinds = a - b, ("slip", "sign")
    elif op == "*":
        v = a * b
        kinds = ("slip", "sign") if v < 0 else ("slip",)
    elif op == "/":
        v, kinds = Fraction(a) / b, ("slip",)
    else:
        # "^" nodes always hold an int base and a positive int exponent, so this is an int.
        v = cast(Num, a**b)
        kinds = ("slip", "formula") if a * b != v else ("slip",)
    v = _norm(v)
    kind = err.at(*kinds)
    if kind == "sign":
        w = (a + b if b < 0 else b - a) if op == "-" else -v
        v = w if w != v else err.slip(v)
    elif kind == "formula":
        v = a * b  # exponent read as a factor: 3^2 = 6
    elif kind == "slip":
        v = err.slip(v)
    return _norm(v)


def _arith_step(node: list[Any], err: _Err) -> tuple[Any, tuple[Num, str, Num, Num]]:
    """Evaluate the first ready operation in post-order; returns the new tree and what was done."""
    op, a, b = node
    if isinstance(a, list):
        new, info = _arith_step(a, err)
        return [op, new, b], info
    if isinstance(b, list):
        new, info = _arith_step(b, err)
        return [op, a, new], info
    v = _arith_apply(op, a, b, err)
    return v, (a, op, b, v)


def _arith_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    node: Any = params["expr"]
    steps: Steps = []
    while isinstance(node, list):
        node, (a, op, b, v) = _arith_step(node, err)
        shown = f"{_p(a)}^{{{b}}}" if op == "^" else f"{_p(a)} {_SYM[op]} {_p(b)}"
        if isinstance(node, list):
            steps.append(
                f"Compute ${shown} = {_tex(v)}$, so the expression becomes ${_arith_tex(node)}$."
            )
        else:
            steps.append(f"Finally, ${shown} = {_tex(v)}$.")
    return steps, node


# -- family: linear equation ------------------------------------------------------------------
def _pm(d: _Draw, lo: int, hi: int) -> int:
    """Random magnitude in ``[lo, hi]`` with a random sign."""
    return d.ri(lo, hi) * d.sign()


def _lineq_sample(d: _Draw, level: int) -> dict[str, Any]:
    x = d.ri(-10, 10)
    if level == 1:
        a = d.ri(2, 9) * (1 if d.u() < 0.8 else -1)
        b = d.nz(-20, 20)
        left, right = [[1, a, b]], [[1, 0, a * x + b]]
    elif level == 2:
        a = d.ri(2, 9)
        c = a
        while c == a:
            c = _pm(d, 1, 9)
        b = d.nz(-20, 20)
        left, right = [[1, a, b]], [[1, c, (a - c) * x + b]]
    elif level == 3:
        k = _pm(d, 2, 9)
        c = k
        while c == k:
            c = _pm(d, 1, 9)
        b = d.nz(-9, 9)
        left, right = [[k, 1, b]], [[1, c, k * (x + b) - c * x]]
    elif level == 4:
        k1 = _pm(d, 2, 9)
        k2 = k1
        while k2 == k1:
            k2 = _pm(d, 2, 9)
        b1, b2 = d.nz(-9, 9), d.nz(-9, 9)
        e = k2 * (x + b2) - k1 * (x + b1)
        if e == 0:
            b2 += 1
            e = k2 * (x + b2) - k1 * (x + b1)
        left, right = [[k1, 1, b1], [1, 0, e]], [[k2, 1, b2]]
    else:
        k1, p1, b1 = d.ri(2, 9), d.ri(1, 5), d.nz(-9, 9)
        k2, p2, b2 = d.ri(2, 9), d.ri(1, 5), d.nz(-9, 9)
        big_a, big_b = k1 * p1 - k2 * p2, k1 * b1 - k2 * b2
        m = _pm(d, 2, 7)
        n = d.nz(-30, 30)
        left, right = [[k1, p1, b1], [-k2, p2, b2]], [[1, big_a - m, n + big_b]]
    return {"left": left, "right": right, "q": d.ri(0, 1)}


def _term_tex(k: int, p: int, q: int) -> str:
    lead = "" if k == 1 else "-" if k == -1 else str(k)
    return f"{lead}({_lin(p, q)})"


def _side_tex(terms: Sequence[Sequence[int]]) -> str:
    out = ""
    for k, p, q in terms:
        if p == 0:
            c = k * q
            neg, body = c < 0, str(abs(c))
        elif k == 1:
            neg, body = False, _lin(p, q)
            if out and body.startswith("-"):
                body = f"({body})"
        else:
            neg = k < 0
            body = f"{'' if abs(k) == 1 else abs(k)}({_lin(p, q)})"
        if not out:
            out = ("-" if neg else "") + body
        else:
            out += (" - " if neg else " + ") + body
    return out


def _lineq_prompt(params: dict[str, Any]) -> str:
    eq = f"{_side_tex(params['left'])} = {_side_tex(params['right'])}"
    return (f"Solve for $x$: ${eq}$.", f"Find the value of $x$ that satisfies ${eq}$.")[params["q"]]


def _lineq_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    sides: list[tuple[Num, Num]] = []
    for side, terms in (("left", params["left"]), ("right", params["right"])):
        items: list[tuple[Num, str]] = []
        big_p: Num = 0
        big_q: Num = 0
        last_q: Num = 0
        for k, p, q in terms:
            if p == 0:
                c = k * q
                items.append((c, ""))
                big_q += c
                last_q = c
                continue
            kp, kq = k * p, k * q
            if k != 1:
                kind = err.at("slip", "sign")
                if kind == "sign" and kq != 0:
                    kq = -kq  # distributed the factor without its sign
                elif kind:
                    kq = err.slip(kq)
                steps.append(
                    f"Distribute on the {side} side: ${_term_tex(k, p, q)} = {_lin(kp, kq)}$."
                )
            items += [(kp, "x"), (kq, "")]
            big_p += kp
            big_q += kq
            last_q = kq
        if len(terms) > 1:
            kind = err.at("slip", "drop")
            if kind == "drop" and last_q != 0:
                big_q -= last_q  # dropped a constant while collecting terms
            elif kind:
                big_q = err.slip(big_q)
            steps.append(
                f"Combine like terms on the {side} side: ${_sum_tex(items)} = {_lin(big_p, big_q)}$."
            )
        sides.append((big_p, big_q))
    (a, b), (c, dd) = sides
    m: Num = a
    if c != 0:
        m = a - c
        m = err.signed(m, a + c)
        if m == 0:
            m = err.slip(a - c, avoid=(0,))
        verb = f"Subtract ${_lin(c, 0)}$ from" if c > 0 else f"Add ${_lin(-c, 0)}$ to"
        steps.append(f"{verb} both sides: ${_lin(m, b)} = {_tex(dd)}$.")
    n: Num = dd
    if b != 0:
        n = dd - b
        n = err.signed(n, dd + b)
        verb = f"Subtract ${_tex(b)}$ from" if b > 0 else f"Add ${_tex(-b)}$ to"
        steps.append(f"{verb} both sides: ${_lin(m, 0)} = {_tex(n)}$.")
    x = _norm(Fraction(n) / m)
    x = err.slipped(x)
    if m == 1:
        steps.append(f"{sty.so} $x = {_tex(x)}$.")
    else:
        steps.append(f"Divide both sides by ${_tex(m)}$: $x = {_frac_eq(n, m, x)}$.")
    return steps, x


# -- family: 2x2 linear system ----------------------------------------------------------------
def _sys_sample(d: _Draw, level: int) -> dict[str, Any]:
    span, vr = ((3, 5), (5, 6), (6, 8), (9, 10), (12, 12))[level - 1]
    a1, b1, a2, b2 = 1, 1, 1, 2
    for _ in range(100):
        if level <= 2:
            a1, b1, a2, b2 = (d.ri(1, span) for _ in range(4))
        else:
            a1, b1, a2, b2 = (d.nz(-span, span) for _ in range(4))
        if a1 * b2 - a2 * b1 != 0:
            break
    else:
        a1, b1, a2, b2 = 1, 1, 1, 2
    x, y = d.ri(-vr, vr), d.ri(-vr, vr)
    eqs = [[a1, b1, a1 * x + b1 * y], [a2, b2, a2 * x + b2 * y]]
    if level == 1:
        ask: dict[str, Any] = {"mode": "y"}
    elif level == 2:
        ask = {"mode": "x"}
    elif level == 3:
        ask = {"mode": "lin", "k": [1, d.sign()]}
    elif level == 4 and d.u() < 0.5:
        ask = {"mode": "xy"}
    else:
        top = 3 if level == 4 else 5
        ask = {"mode": "lin", "k": [_pm(d, 2, top), _pm(d, 2, top)]}
    return {"eqs": eqs, "ask": ask, "q": d.ri(0, 1)}


def _ask_tex(ask: dict[str, Any]) -> str:
    if ask["mode"] in ("x", "y"):
        return ask["mode"]
    if ask["mode"] == "xy":
        return "xy"
    return _lin_xy(*ask["k"])


def _sys_prompt(params: dict[str, Any]) -> str:
    (a1, b1, c1), (a2, b2, c2) = params["eqs"]
    e1, e2 = f"{_lin_xy(a1, b1)} = {c1}", f"{_lin_xy(a2, b2)} = {c2}"
    target = _ask_tex(params["ask"])
    if params["q"] == 0:
        return f"If ${e1}$ and ${e2}$, what is the value of ${target}$?"
    return f"The numbers $x$ and $y$ satisfy ${e1}$ and ${e2}$. Find ${target}$."


def _sys_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    (a1, b1, c1), (a2, b2, c2) = params["eqs"]
    steps: Steps = []
    if a1 == a2:
        nb1, nc1, nb2, nc2 = b1, c1, b2, c2
        intro = "Subtract the second equation from the first to eliminate $x$"
    else:
        nb1, nc1, nb2, nc2 = a2 * b1, a2 * c1, a1 * b2, a1 * c2
        if err.at("slip"):
            if err.u() < 0.5:
                nb1 = err.slip(nb1)
            else:
                nc1 = err.slip(nc1)
        if err.at("slip"):
            if err.u() < 0.5:
                nb2 = err.slip(nb2)
            else:
                nc2 = err.slip(nc2)
        lead = a1 * a2
        steps.append(
            f"Multiply the first equation by ${_tex(a2)}$ and the second by ${_tex(a1)}$: "
            f"${_lin_xy(lead, nb1)} = {nc1}$ and ${_lin_xy(lead, nb2)} = {nc2}$."
        )
        intro = "Subtract the second new equation from the first"
    m: Num = nb1 - nb2
    m = err.signed(m, nb1 + nb2)
    if m == 0:
        m = err.slip(nb1 - nb2, avoid=(0,))
    n: Num = nc1 - nc2
    n = err.signed(n, nc1 + nc2)
    steps.append(
        f"{intro}: $({nb1} - {_p(nb2)})y = {nc1} - {_p(nc2)}$, so ${_lin(m, 0, 'y')} = {n}$."
    )
    y = _norm(Fraction(n) / m)
    y = err.slipped(y)
    if m == 1:
        steps.append(f"{sty.so} $y = {_tex(y)}$.")
    else:
        steps.append(f"{sty.so} $y = {_frac_eq(n, m, y)}$.")
    mode = params["ask"]["mode"]
    if mode == "y":
        return steps, y
    by = _norm(b1 * y)
    by = err.slipped(by)
    rhs = _norm(c1 - by)
    rhs = err.signed(rhs, _norm(c1 + by))
    steps.append(
        f"Substitute into the first equation: ${_lin(a1, 0)} + {_p(b1)} \\cdot {_p(y)} = {c1}$, "
        f"so ${_lin(a1, 0)} = {c1} - {_p(by)} = {_tex(rhs)}$."
    )
    x = _norm(Fraction(rhs) / a1)
    x = err.slipped(x)
    if a1 == 1:
        steps.append(f"{sty.so} $x = {_tex(x)}$.")
    else:
        steps.append(f"{sty.so} $x = {_frac_eq(rhs, a1, x)}$.")
    if mode == "x":
        return steps, x
    if mode == "xy":
        v = _norm(x * y)
        v = err.slipped(v)
        steps.append(f"Then $xy = {_p(x)} \\cdot {_p(y)} = {_tex(v)}$.")
        return steps, v
    kx, ky = params["ask"]["k"]
    v = _norm(kx * x + ky * y)
    kind = err.at("slip", "sign")
    if kind == "sign":
        v = _norm(kx * x - ky * y)
        shown = f"{kx} \\cdot {_p(x)} - {ky} \\cdot {_p(y)}"
    else:
        if kind:
            v = err.slip(v)
        shown = f"{kx} \\cdot {_p(x)} + {ky} \\cdot {_p(y)}"
    steps.append(f"Then ${_lin_xy(kx, ky)} = {shown} = {_tex(v)}$.")
    return steps, v


# -- family: fraction arithmetic --------------------------------------------------------------
def _frac_sample(d: _Draw, level: int) -> dict[str, Any]:
    def fr(dmax: int, improper: bool = False) -> list[int]:
        den = d.ri(2, dmax)
        while True:
            num = d.ri(1, 2 * den if improper else den - 1)
            if math.gcd(num, den) == 1:
                return [num, den]

    def signed(t: list[int]) -> list[int]:
        return [-t[0], t[1]] if d.u() < 0.5 else t

    if level == 1:
        groups, mode = [[fr(8), fr(8)]], "sum"
    elif level == 2:
        groups, mode = [[fr(10), signed(fr(10))]], "sum"
    elif level == 3:
        groups, mode = [[fr(12), signed(fr(12)), signed(fr(12))]], "sum"
    elif level == 4:
        groups, mode = [[fr(9), signed(fr(9))], [fr(9, improper=True)]], "mul"
    else:
        first = [fr(9), [-1, 1]]
        while True:
            t = fr(9)
            first[1] = [-t[0], t[1]]
            if Fraction(*first[0]) != Fraction(*t):
                break
        groups, mode = [first, [fr(9), fr(9)]], "div"
    return {"groups": groups, "mode": mode}


def _fracs_tex(group: Sequence[Sequence[int]]) -> str:
    out = ""
    for n, den in group:
        body = f"\\frac{{{abs(n)}}}{{{den}}}"
        if not out:
            out = ("-" if n < 0 else "") + body
        else:
            out += (" - " if n < 0 else " + ") + body
    return out


def _frac_prompt(params: dict[str, Any]) -> str:
    groups, mode = params["groups"], params["mode"]
    if mode == "sum":
        expr = _fracs_tex(groups[0])
    else:
        g1 = _fracs_tex(groups[1])
        right = f"\\left({g1}\\right)" if len(groups[1]) > 1 else g1
        op = "\\times" if mode == "mul" else "\\div"
        expr = f"\\left({_fracs_tex(groups[0])}\\right) {op} {right}"
    return f"Compute ${expr}$. Express your answer as a fraction in lowest terms."


def _frac_group(
    terms: Sequence[Sequence[int]], err: _Err, steps: Steps, label: str, nonzero: bool = False
) -> Num:
    if len(terms) == 1:
        return _norm(Fraction(terms[0][0], terms[0][1]))
    dens = [den for _, den in terms]
    lcd = math.lcm(*dens)
    nums: list[Num] = [n * (lcd // den) for n, den in terms]
    convert = [i for i, den in enumerate(dens) if den != lcd]
    if convert:
        if err.at("slip"):
            j = convert[int(err.u() * len(convert))]
            nums[j] = err.slip(nums[j])
        conv = ", ".join(
            f"\\frac{{{abs(terms[i][0])}}}{{{dens[i]}}} = \\frac{{{_tex(_abs(nums[i]))}}}{{{lcd}}}"
            for i in convert
        )
        steps.append(f"Use the common denominator ${lcd}${label}: ${conv}$.")
    shown = list(nums)
    total = sum(nums)
    kind = err.at("slip", "sign")
    if kind == "sign":
        j = 1 + int(err.u() * (len(nums) - 1))
        shown[j] = -shown[j]  # copied a term with the wrong sign
        total = sum(shown)
    elif kind:
        total = err.slip(total)
    if nonzero and total == 0:  # only after a mistake: keep the divisor usable
        total = err.slip(total, avoid=(0,))
    numer = _sum_tex([(v, "") for v in shown])
    steps.append(
        f"Combine the numerators: $\\frac{{{numer}}}{{{lcd}}} = \\frac{{{total}}}{{{lcd}}}$."
    )
    value = _norm(Fraction(total, lcd))
    if math.gcd(int(total), lcd) != 1:
        value = err.slipped(value, avoid=(0,) if nonzero else ())
        steps.append(f"Simplify: $\\frac{{{total}}}{{{lcd}}} = {_tex(value)}$.")
    return value


def _frac_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    groups, mode = params["groups"], params["mode"]
    label = "" if mode == "sum" else " inside the first parentheses"
    s0 = _frac_group(groups[0], err, steps, label)
    if mode == "sum":
        return steps, s0
    s1 = _frac_group(groups[1], err, steps, " inside the second parentheses", mode == "div")
    f0, f1 = Fraction(s0), Fraction(s1)
    if mode == "mul":
        v = _norm(f0 * f1)
        v = err.slipped(v)
        raw = f"\\frac{{{f0.numerator * f1.numerator}}}{{{f0.denominator * f1.denominator}}}"
        steps.append(f"Multiply: ${_p(s0)} \\times {_p(s1)} = {raw} = {_tex(v)}$.")
        return steps, v
    kind = err.at("formula", "slip")
    if kind == "formula":
        v = _norm(f0 * f1)  # multiplied without flipping the divisor
        steps.append(
            f"Dividing by ${_tex(s1)}$ means multiplying: ${_p(s0)} \\times {_p(s1)} = {_tex(v)}$."
        )
        return steps, v
    recip = _norm(1 / f1)
    v = _norm(f0 / f1)
    if kind:
        v = err.slip(v)
    steps.append(
        f"Dividing by ${_tex(s1)}$ is multiplying by its reciprocal ${_tex(recip)}$: "
        f"${_p(s0)} \\times {_p(recip)} = {_tex(v)}$."
    )
    return steps, v


# -- family: gcd / lcm ------------------------------------------------------------------------
def _factorize(n: int) -> dict[int, int]:
    out: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
        p += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


def _fac_tex(f: dict[int, int]) -> str:
    parts = [str(p) if e == 1 else f"{p}^{{{e}}}" for p, e in sorted(f.items()) if e > 0]
    return " \\cdot ".join(parts) or "1"


def _fac_value(f: dict[int, int]) -> int:
    v = 1
    for p, e in f.items():
        v *= p**e
    return v


def _gcd_sample(d: _Draw, level: int) -> dict[str, Any]:
    count = 3 if level in (3, 4) else 2
    ask = ("gcd", "lcm", "gcd", "lcm", "sum")[level - 1]
    limit = (100, 180, 400, 300, 2000)[level - 1]
    primes = (
        (2, 3, 5, 7) if level <= 2 else (2, 3, 5, 7, 11) if level <= 4 else (2, 3, 5, 7, 11, 13)
    )
    commons = (1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 14, 15)
    for _ in range(200):
        c = d.pick(commons)
        nums = []
        for _ in range(count):
            v = c
            for p in primes:
                if d.u() < 0.45:
                    v *= p ** d.ri(1, 3 if p == 2 else 2 if p <= 5 else 1)
            nums.append(v)
        if len(set(nums)) == count and all(4 <= v <= limit for v in nums):
            return {"nums": sorted(nums), "ask": ask}
    fallback = {2: [12, 18], 3: [12, 18, 30]}[count]
    return {"nums": fallback, "ask": ask}


def _gcd_prompt(params: dict[str, Any]) -> str:
    nums = [f"${v}$" for v in params["nums"]]
    listed = " and ".join(nums) if len(nums) == 2 else f"{', '.join(nums[:-1])}, and {nums[-1]}"
    ask = params["ask"]
    if ask == "gcd":
        return f"What is the greatest common divisor of {listed}?"
    if ask == "lcm":
        return f"What is the least common multiple of {listed}?"
    return (
        f"What is the sum of the greatest common divisor and the least common multiple of {listed}?"
    )


def _gcd_combine(
    facs: list[dict[int, int]], which: str, err: _Err, nums: Sequence[int]
) -> tuple[int, str]:
    if which == "gcd":
        common = set(facs[0]).intersection(*facs[1:])
        res = {p: min(f[p] for f in facs) for p in sorted(common)}
    else:
        res = {p: max(f.get(p, 0) for f in facs) for p in sorted(set().union(*facs))}
    kind = err.at("formula", "drop", "slip")
    if kind in ("formula", "drop") and res:
        p = sorted(res)[int(err.u() * len(res))]
        if kind == "drop":
            del res[p]  # forgot one prime
        elif which == "gcd":
            res[p] = max(f[p] for f in facs)  # took the highest power instead of the lowest
        else:
            low = min(f.get(p, 0) for f in facs)  # took the lowest power instead of the highest
            if low:
                res[p] = low
            else:
                del res[p]
    v = _fac_value(res)
    if kind == "slip":
        v = int(err.slip(v))
    args = ", ".join(str(n) for n in nums)
    if which == "gcd":
        text = (
            "The greatest common divisor takes the lowest power of each shared prime: "
            f"$\\gcd({args}) = {_eq(_fac_tex(res), v)}$."
        )
    else:
        text = (
            "The least common multiple takes the highest power of every prime that appears: "
            f"$\\operatorname{{lcm}}({args}) = {_eq(_fac_tex(res), v)}$."
        )
    return v, text


def _gcd_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    nums, ask = params["nums"], params["ask"]
    facs = []
    for n in nums:
        f = _factorize(n)
        kind = err.at("exp", "drop")
        if kind:
            primes = sorted(f)
            p = primes[int(err.u() * len(primes))]
            if kind == "drop" and len(f) > 1:
                del f[p]
            else:
                f[p] += 1 if (f[p] == 1 or err.u() < 0.5) else -1
        steps.append(f"Factor ${n} = {_fac_tex(f)}$.")
        facs.append(f)
    if ask != "sum":
        v, text = _gcd_combine(facs, ask, err, nums)
        steps.append(text)
        return steps, v
    g, text = _gcd_combine(facs, "gcd", err, nums)
    steps.append(text)
    m, text = _gcd_combine(facs, "lcm", err, nums)
    steps.append(text)
    v = g + m
    v = int(err.slipped(v))
    steps.append(f"{sty.so} the sum is ${g} + {m} = {v}$.")
    return steps, v


# -- family: modular arithmetic ----------------------------------------------------------------
def _mod_sample(d: _Draw, level: int) -> dict[str, Any]:
    if level == 1:
        return {"kind": "sum", "a": d.ri(100, 999), "b": d.ri(100, 999), "m": d.ri(3, 12)}
    if level == 2:
        return {"kind": "prod", "a": d.ri(100, 999), "b": d.ri(100, 999), "m": d.ri(5, 13)}
    moduli = ((5, 7, 9, 10, 11), (7, 9, 11, 13), (11, 13, 17, 19))[level - 3]
    m = d.pick(moduli)
    lo, hi = ((2, m - 1), (m + 2, 90), (20, 300))[level - 3]
    n = d.ri(*((10, 60), (50, 300), (100, 2000))[level - 3])
    for _ in range(200):
        a = d.ri(lo, hi)
        r = a % m
        if math.gcd(a, m) == 1 and r not in (0, 1) and (level == 3 or r != m - 1):
            break
    else:
        a = 2 if m % 2 else 3
    return {"kind": "pow", "a": a, "n": n, "m": m}


def _mod_prompt(params: dict[str, Any]) -> str:
    a, m = params["a"], params["m"]
    if params["kind"] == "sum":
        return f"What is the remainder when ${a} + {params['b']}$ is divided by ${m}$?"
    if params["kind"] == "prod":
        return f"What is the remainder when ${a} \\times {params['b']}$ is divided by ${m}$?"
    return f"What is the remainder when ${a}^{{{params['n']}}}$ is divided by ${m}$?"


def _rem_err(r: int, m: int, err: _Err, kind: str, coprime: bool = False) -> int:
    """A wrong remainder in ``[0, m)``: off by one for ``offbyone``, by 2-3 for a slip."""
    deltas = (1, -1) if kind == "offbyone" else (2, -2, 3, -3, 1, -1)
    cands = [(r + dl) % m for dl in deltas]
    cands = [c for c in cands if c != r and (not coprime or math.gcd(c, m) == 1)]
    if not cands:
        cands = [c for c in range(m) if c != r and (not coprime or math.gcd(c, m) == 1)] or [r]
    return cands[int(err.u() * len(cands))]


def _mod_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    kind, a, m = params["kind"], params["a"], params["m"]
    if kind in ("sum", "prod"):
        b = params["b"]
        if kind == "sum":
            t = a + b
            t = int(err.slipped(t))
            steps.append(f"First add: ${a} + {b} = {t}$.")
        else:
            ra, rb = a % m, b % m
            e = err.at("slip", "offbyone")
            if e:
                ra = _rem_err(ra, m, err, e)
            e = err.at("slip", "offbyone")
            if e:
                rb = _rem_err(rb, m, err, e)
            steps.append(
                f"Reduce each factor: ${a} \\equiv {ra} \\pmod{{{m}}}$ and ${b} \\equiv {rb} \\pmod{{{m}}}$."
            )
            t = ra * rb
            t = int(err.slipped(t))
            steps.append(f"Multiply the remainders: ${ra} \\cdot {rb} = {t}$.")
        q, r = divmod(t, m)
        e = err.at("slip", "offbyone")
        if e:
            r = _rem_err(r, m, err, e)
        steps.append(f"Divide: ${t} = {m} \\cdot {q} + {r}$, so the remainder is ${r}$.")
        return steps, r
    n = params["n"]
    base = a
    if a >= m:
        base = a % m
        e = err.at("slip", "offbyone")
        if e:
            base = _rem_err(base, m, err, e, coprime=True)
        steps.append(f"Reduce the base: ${a} \\equiv {base} \\pmod{{{m}}}$.")
    vals = [base % m]
    while vals[-1] != 1 and len(vals) <= m:
        vals.append(vals[-1] * base % m)
    k = len(vals)
    if err.at("offbyone"):
        k = k + 1 if (k == 1 or err.u() < 0.5) else k - 1  # miscounted the cycle
    listing = ", ".join(f"{base}^{{{i}}} \\equiv {v}" for i, v in enumerate(vals, 1))
    steps.append(
        f"Compute successive powers modulo ${m}$: ${listing}$. The powers repeat every ${k}$ steps."
    )
    s = n % k
    e = err.at("slip", "offbyone")
    if e and k > 1:
        s = _rem_err(s, k, err, e)
    e_used = s if s else k
    steps.append(
        f"Since ${n} = {k} \\cdot {n // k} + {s}$, we get ${base}^{{{n}}} \\equiv {base}^{{{e_used}}} \\pmod{{{m}}}$."
    )
    v = pow(base, e_used, m)
    e = err.at("slip")
    if e:
        v = _rem_err(v, m, err, e)
    steps.append(f"{sty.so} ${a}^{{{n}}} \\equiv {v} \\pmod{{{m}}}$, and the remainder is ${v}$.")
    return steps, v


# -- family: counting --------------------------------------------------------------------------
_OBJECTS = ("books", "paintings", "trophies", "flags", "students")
_OUTFITS = (
    ("shirts", "pairs of pants", "hats", "outfits"),
    ("appetizers", "main courses", "desserts", "dinners"),
    ("bread types", "fillings", "sauces", "sandwiches"),
)
_ROLE_SETS = (
    ("president", "vice-president", "secretary", "treasurer"),
    ("first prize", "second prize", "third prize", "fourth prize"),
)
_CHOOSE_CTX = (
    ("A club has ${n}$ members.", "a ${k}$-person committee be chosen"),
    (
        "A pizzeria offers ${n}$ different toppings.",
        "a pizza with ${k}$ different toppings be ordered",
    ),
    ("Maria owns ${n}$ novels.", "she choose ${k}$ of them to take on vacation"),
)
_PAIRS = (("teachers", "students"), ("men", "women"), ("seniors", "juniors"))


def _falling(n: int, k: int) -> int:
    v = 1
    for i in range(n, n - k, -1):
        v *= i
    return v


def _count_sample(d: _Draw, level: int) -> dict[str, Any]:
    if level == 1:
        if d.u() < 0.4:
            return {"kind": "arrange", "n": d.ri(4, 9), "obj": d.ri(0, len(_OBJECTS) - 1)}
        counts = [d.ri(2, 9) for _ in range(3)]
        return {"kind": "outfit", "counts": counts, "ctx": d.ri(0, len(_OUTFITS) - 1)}
    if level == 2:
        return {
            "kind": "perm",
            "n": d.ri(5, 40),
            "k": d.ri(2, 4),
            "ctx": d.ri(0, len(_ROLE_SETS) - 1),
        }
    if level == 3:
        n = d.ri(7, 25)
        return {"kind": "choose", "n": n, "k": d.ri(2, 6), "ctx": d.ri(0, len(_CHOOSE_CTX) - 1)}
    if level == 4:
        return {
            "kind": "groups",
            "n1": d.ri(5, 12),
            "a": d.ri(2, 3),
            "n2": d.ri(5, 12),
            "b": d.ri(1, 3),
            "who": d.ri(0, len(_PAIRS) - 1),
        }
    return {"kind": "atleast", "boys": d.ri(5, 12), "girls": d.ri(3, 9), "k": d.ri(3, 5)}


def _count_prompt(params: dict[str, Any]) -> str:
    kind = params["kind"]
    if kind == "arrange":
        return (
            f"In how many ways can ${params['n']}$ different {_OBJECTS[params['obj']]} "
            "be arranged in a row?"
        )
    if kind == "outfit":
        a, b, c = params["counts"]
        x, y, z, whole = _OUTFITS[params["ctx"]]
        return (
            f"A menu lists ${a}$ {x}, ${b}$ {y}, and ${c}$ {z}. How many different {whole} "
            f"consisting of one of each can be made?"
            if params["ctx"]
            else f"Sam owns ${a}$ {x}, ${b}$ {y}, and ${c}$ {z}. How many different {whole} "
            "consisting of one shirt, one pair of pants, and one hat can he wear?"
        )
    if kind == "perm":
        roles = _ROLE_SETS[params["ctx"]][: params["k"]]
        listed = ", ".join(roles[:-1]) + (", and " if len(roles) > 2 else " and ") + roles[-1]
        if params["ctx"] == 0:
            return (
                f"A club has ${params['n']}$ members. In how many ways can it choose a {listed}, "
                "if no member can hold more than one office?"
            )
        return (
            f"In a contest with ${params['n']}$ entrants, in how many ways can the {listed} be "
            "awarded, if no entrant can win more than one prize?"
        )
    if kind == "choose":
        setup, ask = _CHOOSE_CTX[params["ctx"]]
        setup = setup.replace("{n}", str(params["n"]))
        ask = ask.replace("{k}", str(params["k"]))
        return f"{setup} In how many ways can {ask}?"
    if kind == "groups":
        g1, g2 = _PAIRS[params["who"]]
        return (
            f"A committee of ${params['a']}$ {g1} and ${params['b']}$ {g2} is to be chosen from "
            f"${params['n1']}$ {g1} and ${params['n2']}$ {g2}. "
            "How many different committees are possible?"
        )
    return (
        f"A team of ${params['k']}$ is chosen from ${params['boys']}$ boys and "
        f"${params['girls']}$ girls. How many possible teams include at least one girl?"
    )


def _binom_step(n: int, k: int, err: _Err) -> tuple[int, str]:
    """``C(n, k)`` written out; errors: off-by-one top, dividing by k instead of k!, a slip."""
    if k == 0:
        return 1, f"\\binom{{{n}}}{{0}} = 1"
    kind = err.at("offbyone", "formula", "slip")
    top = n
    if kind == "offbyone":
        top = n + 1 if (err.u() < 0.5 or n - 1 < k) else n - 1
    num = _falling(top, k)
    den = math.factorial(k)
    if kind == "formula" and k >= 2:
        den = k
    v = num // den
    if kind == "slip":
        v = int(err.slip(v))
    factors = " \\cdot ".join(str(i) for i in range(top, top - k, -1))
    if k == 1:
        return v, f"\\binom{{{n}}}{{1}} = {v}"
    return v, f"\\binom{{{n}}}{{{k}}} = \\frac{{{factors}}}{{{den}}} = {v}"


def _binom_product(
    steps: list[str], err: _Err, first: tuple[int, int, str], second: tuple[int, int, str]
) -> tuple[int, int, int, str]:
    """Two groups chosen independently: each group's binomial step (``(n, k, what)``), then
    ``(ways1, ways2, combined, operator)``; a "formula" error adds the two instead of
    multiplying, a "slip" misses the product."""
    (n1, k1, what1), (n2, k2, what2) = first, second
    v1, t1 = _binom_step(n1, k1, err)
    steps.append(f"Ways to choose the {what1}: ${t1}$.")
    v2, t2 = _binom_step(n2, k2, err)
    steps.append(f"Ways to choose the {what2}: ${t2}$.")
    e = err.at("formula", "slip")
    if e == "formula":
        return v1, v2, v1 + v2, "+"
    v = v1 * v2
    return v1, v2, (int(err.slip(v)) if e else v), "\\times"


def _count_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    kind = params["kind"]
    if kind == "arrange":
        n = params["n"]
        steps.append(
            f"There are ${n}$ choices for the first position, ${n - 1}$ for the second, and so on, "
            f"so the count is ${n}!$."
        )
        e = err.at("offbyone", "slip")
        top = n - 1 if e == "offbyone" else n
        v = math.factorial(top)
        if e == "slip":
            v = int(err.slip(v))
        chain = " \\times ".join(str(i) for i in range(top, 0, -1))
        steps.append(f"${n}! = {chain} = {v}$.")
        return steps, v
    if kind == "outfit":
        a, b, c = params["counts"]
        steps.append("By the multiplication principle, multiply the numbers of choices.")
        ab = a * b
        ab = int(err.slipped(ab))
        steps.append(f"First ${a} \\times {b} = {ab}$.")
        e = err.at("formula", "slip")
        if e == "formula":
            v = ab + c  # added the last choice instead of multiplying
            steps.append(f"Then ${ab} + {c} = {v}$.")
            return steps, v
        v = ab * c
        if e:
            v = int(err.slip(v))
        steps.append(f"Then ${ab} \\times {c} = {v}$.")
        return steps, v
    if kind == "perm":
        n, k = params["n"], params["k"]
        roles = _ROLE_SETS[params["ctx"]]
        steps.append("The positions are different, so the order of selection matters.")
        factors = list(range(n, n - k, -1))
        if err.at("offbyone"):
            j = 1 + int(err.u() * (k - 1))
            factors[j] += 1  # forgot that one more member is already taken
        rest = ", ".join(
            f"${f}$ for the {role}" for f, role in zip(factors[1:], roles[1:], strict=False)
        )
        steps.append(f"There are ${factors[0]}$ choices for the {roles[0]}, {rest}.")
        e = err.at("formula", "slip")
        if e == "formula":
            v = sum(factors)  # added the choices instead of multiplying
            shown = " + ".join(str(f) for f in factors)
        else:
            v = math.prod(factors)
            if e:
                v = int(err.slip(v))
            shown = " \\times ".join(str(f) for f in factors)
        steps.append(f"By the counting principle, the number of ways is ${shown} = {v}$.")
        return steps, v
    if kind == "choose":
        n, k = params["n"], params["k"]
        steps.append(
            f"Order does not matter, so the answer is $\\binom{{{n}}}{{{k}}} = \\frac{{{n}!}}{{{k}!\\,{n - k}!}}$."
        )
        top = n
        if err.at("offbyone"):
            top = n + 1 if err.u() < 0.5 else n - 1
        num = _falling(top, k)
        factors_tex = " \\cdot ".join(str(i) for i in range(top, top - k, -1))
        steps.append(f"The numerator after cancelling ${n - k}!$ is ${factors_tex} = {num}$.")
        e = err.at("formula", "slip")
        den = k if e == "formula" else math.factorial(k)
        v = num // den
        if e == "slip":
            v = int(err.slip(v))
        steps.append(f"Divide by ${k}! = {den}$: $\\frac{{{num}}}{{{den}}} = {v}$.")
        return steps, v
    if kind == "groups":
        g1, g2 = _PAIRS[params["who"]]
        steps.append(f"Choose the {g1} and the {g2} independently, then multiply.")
        v1, v2, v, op = _binom_product(
            steps, err, (params["n1"], params["a"], g1), (params["n2"], params["b"], g2)
        )
        steps.append(f"{sty.so} the number of committees is ${v1} {op} {v2} = {v}$.")
        return steps, v
    boys, girls, k = params["boys"], params["girls"], params["k"]
    steps.append("Count all teams, then subtract the teams with no girls.")
    total, t1 = _binom_step(boys + girls, k, err)
    steps.append(f"All teams: ${t1}$.")
    none, t2 = _binom_step(boys, k, err)
    steps.append(f"Teams with only boys: ${t2}$.")
    e = err.at("slip", "drop")
    if e == "drop":
        steps.append(f"{sty.so} the number of teams with at least one girl is ${total}$.")
        return steps, total
    v = total - none
    if e:
        v = int(err.slip(v))
    steps.append(
        f"{sty.so} the number of teams with at least one girl is ${total} - {none} = {v}$."
    )
    return steps, v


# -- family: series ----------------------------------------------------------------------------
_RATIOS = ((1, 2), (-1, 2), (1, 3), (-1, 3), (2, 3), (-2, 3), (3, 4))


def _series_sample(d: _Draw, level: int) -> dict[str, Any]:
    if level == 1:
        return {"kind": "nat", "n": d.ri(10, 200)}
    if level == 2:
        return {"kind": "arith", "a": d.ri(1, 15), "d": d.ri(2, 7), "n": d.ri(8, 25)}
    if level == 3:
        k = d.ri(3, 13)
        lo = d.ri(10, 100)
        hi = lo + d.ri(60, 300)
        if lo % k == 0:
            lo += 1
        if hi % k == 0:
            hi += 1
        return {"kind": "mult", "k": k, "lo": lo, "hi": hi}
    if level == 4:
        return {"kind": "geom", "a": d.ri(1, 12), "r": d.pick((2, 3, -2, -3)), "n": d.ri(4, 8)}
    return {
        "kind": "geomf",
        "a": d.ri(1, 9) * d.pick((1, 2, 3, 4, 6)),
        "r": list(d.pick(_RATIOS)),
        "n": d.ri(4, 6),
    }


def _series_prompt(params: dict[str, Any]) -> str:
    kind = params["kind"]
    if kind == "nat":
        return f"What is the sum $1 + 2 + 3 + \\cdots + {params['n']}$?"
    if kind == "arith":
        a, dd, n = params["a"], params["d"], params["n"]
        return f"Find the sum of the arithmetic sequence ${a} + {a + dd} + {a + 2 * dd} + \\cdots + {a + (n - 1) * dd}$."
    if kind == "mult":
        return f"What is the sum of all multiples of ${params['k']}$ between ${params['lo']}$ and ${params['hi']}$?"
    if kind == "geom":
        a, r, n = params["a"], params["r"], params["n"]
        terms = [a * r**i for i in range(3)]
        series = _sum_tex([(t, "") for t in terms])
        last = a * r ** (n - 1)
        sep = " - " if last < 0 else " + "
        return f"Evaluate the sum ${series} + \\cdots{sep}{abs(last)}$."
    r = Fraction(*params["r"])
    return (
        f"What is the sum of the first ${params['n']}$ terms of the geometric sequence whose first term "
        f"is ${params['a']}$ and whose common ratio is ${_tex(r)}$? Express your answer as a common fraction."
    )


def _series_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    kind = params["kind"]
    if kind == "nat":
        n = params["n"]
        steps.append("Use the formula $1 + 2 + \\cdots + n = \\frac{n(n+1)}{2}$.")
        e = err.at("formula", "slip")
        other = n - 1 if e == "formula" else n + 1  # n(n-1) instead of n(n+1)
        prod = n * other
        if e == "slip":
            prod = int(err.slip(prod))
        steps.append(f"Here $n = {n}$, so $n(n+1) = {n} \\cdot {other} = {prod}$.")
        v = _norm(Fraction(prod, 2))
        v = err.slipped(v)
        steps.append(f"Divide by $2$: $\\frac{{{prod}}}{{2}} = {_tex(v)}$.")
        return steps, v
    if kind == "arith":
        a, dd, n = params["a"], params["d"], params["n"]
        last = a + (n - 1) * dd
        e = err.at("offbyone", "slip")
        cnt = n - 1 if e == "offbyone" else n
        if e == "slip":
            cnt = int(err.slip(cnt, avoid=(0,)))
        plus = "" if e == "offbyone" else " + 1"
        steps.append(f"The number of terms is $\\frac{{{last} - {a}}}{{{dd}}}{plus} = {cnt}$.")
        pair = a + last
        pair = int(err.slipped(pair))
        steps.append(f"The first and last terms add to ${a} + {last} = {pair}$.")
        v = _norm(Fraction(cnt * pair, 2))
        v = err.slipped(v)
        steps.append(f"The sum is $\\frac{{{cnt} \\cdot {pair}}}{{2}} = {_tex(v)}$.")
        return steps, v
    if kind == "mult":
        k, lo, hi = params["k"], params["lo"], params["hi"]
        first = -(-lo // k) * k
        if err.at("offbyone"):
            first -= k  # started below the range
        steps.append(
            f"The smallest multiple of ${k}$ in the range is ${first} = {k} \\cdot {first // k}$."
        )
        last = hi // k * k
        if err.at("offbyone"):
            last += k  # ended above the range
        steps.append(
            f"The largest multiple of ${k}$ in the range is ${last} = {k} \\cdot {last // k}$."
        )
        e = err.at("offbyone", "slip")
        cnt = (last - first) // k + (0 if e == "offbyone" else 1)
        if e == "slip":
            cnt = int(err.slip(cnt, avoid=(0,)))
        plus = "" if e == "offbyone" else " + 1"
        steps.append(f"There are $\\frac{{{last} - {first}}}{{{k}}}{plus} = {cnt}$ multiples.")
        v = _norm(Fraction(cnt * (first + last), 2))
        v = err.slipped(v)
        steps.append(f"Their sum is $\\frac{{{cnt}({first} + {last})}}{{2}} = {_tex(v)}$.")
        return steps, v
    if kind == "geom":
        a, r, n = params["a"], params["r"], params["n"]
        e = err.at("offbyone")
        cnt = n - 1 if e else n
        steps.append(
            f"This is a geometric series with first term ${a}$, common ratio ${r}$, and ${cnt}$ terms "
            f"(the last term is ${a} \\cdot {_p(r)}^{{{n - 1}}}$)."
        )
        e = err.at("offbyone", "slip")
        ex = cnt - 1 if e == "offbyone" else cnt
        rn = r**ex
        if e == "slip":
            rn = int(err.slip(rn))
        steps.append(f"Compute ${_p(r)}^{{{ex}}} = {rn}$.")
        num = a * (rn - 1)
        num = int(err.slipped(num))
        steps.append(f"The sum formula gives numerator ${a}({rn} - 1) = {num}$.")
        v = _norm(Fraction(num, r - 1))
        v = err.slipped(v)
        steps.append(f"Divide by $r - 1 = {r - 1}$: $\\frac{{{num}}}{{{r - 1}}} = {_tex(v)}$.")
        return steps, v
    a, n = params["a"], params["n"]
    r = Fraction(*params["r"])
    steps.append("The sum of the first $n$ terms is $S_n = a \\cdot \\frac{1 - r^n}{1 - r}$.")
    e = err.at("offbyone", "slip")
    ex = n - 1 if e == "offbyone" else n
    r_pow: Num = _norm(r**ex)
    if e == "slip":
        r_pow = err.slip(r_pow)
    steps.append(f"Compute $r^{{{ex}}} = \\left({_tex(r)}\\right)^{{{ex}}} = {_tex(r_pow)}$.")
    e = err.at("sign", "slip")
    one_minus = _norm(1 + r_pow) if e == "sign" else _norm(1 - r_pow)
    if e == "slip":
        one_minus = err.slip(one_minus)
    op = "+" if e == "sign" else "-"
    steps.append(f"Then $1 {op} {_p(r_pow)} = {_tex(one_minus)}$.")
    e = err.at("formula", "slip")
    den = _norm(1 + r) if e == "formula" else _norm(1 - r)
    ratio = _norm(Fraction(one_minus) / den)
    if e == "slip":
        ratio = err.slip(ratio)
    dop = "+" if e == "formula" else "-"
    steps.append(f"Divide by $1 {dop} {_p(r)} = {_tex(den)}$: the quotient is ${_tex(ratio)}$.")
    v = _norm(a * ratio)
    v = err.slipped(v)
    steps.append(f"Multiply by the first term: ${a} \\cdot {_p(ratio)} = {_tex(v)}$.")
    return steps, v


# -- family: quadratic with integer roots ------------------------------------------------------
def _quad_sample(d: _Draw, level: int) -> dict[str, Any]:
    span = 12
    r1 = d.nz(-span, span)
    r2 = r1
    while r2 == r1:
        r2 = d.nz(-span, span)
    a = (1, d.pick((1, 1, 2, -1)), d.pick((1, 2, 3, -2)), d.ri(1, 4), d.ri(2, 6))[level - 1]
    ask = ("sum", "product", "larger", "sumsq", "recip")[level - 1]
    return {"a": a, "roots": sorted((r1, r2)), "ask": ask}


def _poly(a: int, b: int, c: int) -> str:
    return _sum_tex(((a, "x^2"), (b, "x"), (c, "")))


def _quad_coeffs(params: dict[str, Any]) -> tuple[int, int, int]:
    a = params["a"]
    r1, r2 = params["roots"]
    return a, -a * (r1 + r2), a * r1 * r2


def _quad_prompt(params: dict[str, Any]) -> str:
    eq = f"{_poly(*_quad_coeffs(params))} = 0"
    ask = params["ask"]
    if ask == "sum":
        return f"What is the sum of the solutions of ${eq}$?"
    if ask == "product":
        return f"What is the product of the solutions of ${eq}$?"
    if ask == "larger":
        return f"What is the larger solution of ${eq}$?"
    target = "r_1^2 + r_2^2" if ask == "sumsq" else "\\frac{1}{r_1} + \\frac{1}{r_2}"
    return f"Let $r_1$ and $r_2$ be the roots of ${eq}$. Find ${target}$."


def _quad_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    a, b, c = _quad_coeffs(params)
    r1, r2 = params["roots"]
    ask = params["ask"]
    if ask in ("sum", "product", "larger"):
        if a != 1:
            steps.append(f"Divide both sides by ${a}$: ${_poly(1, b // a, c // a)} = 0$.")
        f1, f2 = r1, r2
        f2 = int(err.slipped(f2, avoid=(f1,)))  # a factorisation that does not expand back
        steps.append(f"Factor: $({_lin(1, -f1)})({_lin(1, -f2)}) = 0$.")
        s1, s2 = f1, f2
        if err.at("sign"):
            s1, s2 = -f1, -f2  # read the roots off the factors with the wrong sign
        steps.append(f"{sty.so} the solutions are $x = {s1}$ and $x = {s2}$.")
        if ask == "larger":
            e = err.at("formula", "slip")
            v = min(s1, s2) if e == "formula" else max(s1, s2)
            if e == "slip":
                v = int(err.slip(v))
            steps.append(f"The larger solution is ${v}$.")
            return steps, v
        if ask == "sum":
            v = s1 + s2
            v = int(err.slipped(v))
            steps.append(f"Their sum is ${s1} + {_p(s2)} = {v}$.")
            return steps, v
        v = s1 * s2
        v = int(err.slipped(v))
        steps.append(f"Their product is ${s1} \\cdot {_p(s2)} = {v}$.")
        return steps, v
    steps.append(
        f"By Vieta's formulas for ${_poly(a, b, c)} = 0$, $r_1 + r_2 = -\\frac{{b}}{{a}}$ and "
        "$r_1 r_2 = \\frac{c}{a}$."
    )
    e = err.at("sign", "slip")
    s: Num = _norm(Fraction(b, a)) if e == "sign" else _norm(Fraction(-b, a))
    if e == "slip":
        s = err.slip(s)
    steps.append(f"$r_1 + r_2 = -\\frac{{{b}}}{{{a}}} = {_tex(s)}$.")
    e = err.at("sign", "slip")
    p: Num = _norm(Fraction(c, a))
    if e == "sign":
        p = -p
    elif e:
        p = err.slip(p, avoid=(0,))
    steps.append(f"$r_1 r_2 = \\frac{{{c}}}{{{a}}} = {_tex(p)}$.")
    if ask == "sumsq":
        e = err.at("drop", "slip")
        if e == "drop":
            v = _norm(s * s)  # forgot the -2 r1 r2 term
            steps.append(f"$r_1^2 + r_2^2 = (r_1 + r_2)^2 = {_p(s)}^2 = {_tex(v)}$.")
            return steps, v
        v = _norm(s * s - 2 * p)
        if e:
            v = err.slip(v)
        steps.append(
            f"$r_1^2 + r_2^2 = (r_1 + r_2)^2 - 2r_1 r_2 = {_p(s)}^2 - 2 \\cdot {_p(p)} = {_tex(v)}$."
        )
        return steps, v
    e = err.at("formula", "slip")
    if e == "formula" and s != 0:
        v = _norm(Fraction(p) / s)  # inverted the fraction
        steps.append(
            f"$\\frac{{1}}{{r_1}} + \\frac{{1}}{{r_2}} = \\frac{{r_1 r_2}}{{r_1 + r_2}} = {_tex(v)}$."
        )
        return steps, v
    v = _norm(Fraction(s) / p)
    if e:
        v = err.slip(v)
    steps.append(
        f"$\\frac{{1}}{{r_1}} + \\frac{{1}}{{r_2}} = \\frac{{r_1 + r_2}}{{r_1 r_2}} = "
        f"\\frac{{{_tex(s)}}}{{{_tex(p)}}} = {_tex(v)}$."
    )
    return steps, v


# -- family: probability -----------------------------------------------------------------------
_COLORS = ("red", "blue", "green")
_EVENTS = (
    "A basketball player makes each free throw with probability {p}, independently of the "
    "others. If she attempts {n} free throws, what is the probability that she makes at least one?",
    "Each seed in a packet sprouts with probability {p}, independently of the others. If {n} "
    "seeds are planted, what is the probability that at least one of them sprouts?",
    "An archer hits the target on each shot with probability {p}, independently of the other "
    "shots. If she shoots {n} times, what is the probability that she hits the target at least once?",
)


def _prob_sample(d: _Draw, level: int) -> dict[str, Any]:
    if level == 1:
        return {"kind": "marble", "counts": [d.ri(2, 15) for _ in range(3)], "color": d.ri(0, 2)}
    if level == 2:
        faces = d.pick((4, 6, 8, 10, 12))
        mode = d.pick(("eq", "ge", "le"))
        lo, hi = {"eq": (3, 2 * faces - 1), "ge": (faces + 1, 2 * faces - 1), "le": (3, faces + 1)}[
            mode
        ]
        return {"kind": "dice", "faces": faces, "target": d.ri(lo, hi), "mode": mode}
    if level == 3:
        return {"kind": "draw2", "red": d.ri(3, 12), "white": d.ri(2, 12), "ask": d.ri(0, 1)}
    if level == 4:
        u = d.u()
        if u < 0.25:
            return {"kind": "atleast", "p": [1, 2], "n": d.ri(2, 10), "ctx": -1}
        if u < 0.5:
            return {"kind": "atleast", "p": [1, 6], "n": d.ri(2, 5), "ctx": -2}
        while True:
            den = d.ri(3, 9)
            num = d.ri(1, den - 1)
            if math.gcd(num, den) == 1:
                break
        return {
            "kind": "atleast",
            "p": [num, den],
            "n": d.ri(2, 6),
            "ctx": d.ri(0, len(_EVENTS) - 1),
        }
    red, blue = d.ri(3, 9), d.ri(3, 9)
    k = d.ri(3, 5)
    j = d.ri(max(1, k - blue), min(red, k - 1))
    return {"kind": "hyper", "red": red, "blue": blue, "k": k, "j": j}


_FRACTION_ASK = " Express your answer as a common fraction."


def _prob_prompt(params: dict[str, Any]) -> str:
    kind = params["kind"]
    if kind == "marble":
        r, b, g = params["counts"]
        return (
            f"A bag holds ${r}$ red, ${b}$ blue, and ${g}$ green marbles. One marble is drawn at "
            f"random. What is the probability that it is {_COLORS[params['color']]}?{_FRACTION_ASK}"
        )
    if kind == "dice":
        rel = {"eq": "equal to", "ge": "at least", "le": "at most"}[params["mode"]]
        f = params["faces"]
        return (
            f"Two fair ${f}$-sided dice, with faces numbered $1$ through ${f}$, are rolled. What is "
            f"the probability that the sum is {rel} ${params['target']}$?{_FRACTION_ASK}"
        )
    if kind == "draw2":
        color = ("red", "white")[params["ask"]]
        return (
            f"A box contains ${params['red']}$ red balls and ${params['white']}$ white balls. Two "
            f"balls are drawn at random without replacement. What is the probability that both are "
            f"{color}?{_FRACTION_ASK}"
        )
    if kind == "atleast":
        n, (num, den) = params["n"], params["p"]
        if params["ctx"] == -1:
            return (
                f"A fair coin is flipped ${n}$ times. What is the probability of getting at least "
                f"one head?{_FRACTION_ASK}"
            )
        if params["ctx"] == -2:
            return (
                f"A fair die is rolled ${n}$ times. What is the probability of rolling at least one "
                f"six?{_FRACTION_ASK}"
            )
        text = _EVENTS[params["ctx"]].format(p=f"$\\frac{{{num}}}{{{den}}}$", n=f"${n}$")
        return text + _FRACTION_ASK
    return (
        f"An urn contains ${params['red']}$ red and ${params['blue']}$ blue marbles. "
        f"${params['k']}$ marbles are drawn at random without replacement. What is the probability "
        f"that exactly ${params['j']}$ of them are red?{_FRACTION_ASK}"
    )


def _prob_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    kind = params["kind"]
    if kind == "marble":
        counts, color = params["counts"], params["color"]
        shown = list(counts)
        e = err.at("slip", "drop")
        if e == "drop":
            shown.pop((color + 1 + int(err.u() * 2)) % 3)  # left a colour out of the total
        tot = sum(shown)
        if e == "slip":
            tot = int(err.slip(tot, avoid=(0,)))
        steps.append(f"There are ${' + '.join(str(c) for c in shown)} = {tot}$ marbles in total.")
        v = _norm(Fraction(counts[color], tot))
        v = err.slipped(v)
        steps.append(f"The probability is ${_frac_eq(counts[color], tot, v)}$.")
        return steps, v
    if kind == "dice":
        t, mode, f = params["target"], params["mode"], params["faces"]
        hit = {"eq": t.__eq__, "ge": t.__le__, "le": t.__ge__}[mode]
        pairs = [(i, j) for i in range(1, f + 1) for j in range(1, f + 1) if hit(i + j)]
        e = err.at("offbyone", "slip")
        shown = pairs[:-1] if e == "offbyone" else pairs  # missed an outcome
        cnt = len(shown)
        if e == "slip":
            cnt = int(err.slip(cnt, avoid=(0,)))
        listing = ", ".join(f"({i},{j})" for i, j in shown)
        steps.append(f"The favorable outcomes are ${listing}$, which is ${cnt}$ outcomes.")
        if err.at("formula"):
            total, how = 2 * f, f"{f} + {f} = {2 * f}"  # added the faces instead of multiplying
        else:
            total, how = f * f, f"{f} \\times {f} = {f * f}"
        steps.append(f"There are ${how}$ equally likely outcomes.")
        v = _norm(Fraction(cnt, total))
        v = err.slipped(v)
        steps.append(f"The probability is ${_frac_eq(cnt, total, v)}$.")
        return steps, v
    if kind == "draw2":
        n = params["red"] + params["white"]
        color = ("red", "white")[params["ask"]]
        red = params[color]
        steps.append(f"The first ball is {color} with probability $\\frac{{{red}}}{{{n}}}$.")
        e = err.at("formula", "offbyone")
        if e == "formula":
            n2, d2 = red, n  # treated the draws as with replacement
        elif e == "offbyone":
            n2, d2 = red - 1, n  # forgot that one ball is gone
        else:
            n2, d2 = red - 1, n - 1
        steps.append(f"Then the second ball is {color} with probability $\\frac{{{n2}}}{{{d2}}}$.")
        pn, pd = red * n2, n * d2
        pn = int(err.slipped(pn))
        steps.append(
            f"Multiply: $\\frac{{{red}}}{{{n}}} \\cdot \\frac{{{n2}}}{{{d2}}} = \\frac{{{pn}}}{{{pd}}}$."
        )
        v = _norm(Fraction(pn, pd))
        v = err.slipped(v)
        steps.append(f"Simplify: ${_frac_eq(pn, pd, v)}$.")
        return steps, v
    if kind == "atleast":
        n = params["n"]
        q = 1 - Fraction(*params["p"])
        event = {-1: "every flip is tails", -2: "no six appears"}.get(
            params["ctx"], "it never happens"
        )
        steps.append(f"Use the complement: {event}. Each trial fails with probability ${_tex(q)}$.")
        e = err.at("offbyone", "slip")
        ex = n - 1 if e == "offbyone" else n
        none: Num = _norm(q**ex)
        if e == "slip":
            none = err.slip(none)
        steps.append(
            f"The chance that this happens in all trials is $\\left({_tex(q)}\\right)^{{{ex}}} = {_tex(none)}$."
        )
        e = err.at("drop", "slip")
        if e == "drop":
            steps.append(
                f"{sty.so} the probability is ${_tex(none)}$."
            )  # forgot to subtract from 1
            return steps, none
        v = _norm(1 - none)
        if e:
            v = err.slip(v)
        steps.append(f"{sty.so} the probability is $1 - {_tex(none)} = {_tex(v)}$.")
        return steps, v
    red, blue, k, j = params["red"], params["blue"], params["k"], params["j"]
    steps.append("Count the favorable selections and divide by all selections.")
    c1, c2, fav, op = _binom_product(
        steps, err, (red, j, "red marbles"), (blue, k - j, "blue marbles")
    )
    steps.append(f"Favorable selections: ${c1} {op} {c2} = {fav}$.")
    tot, t3 = _binom_step(red + blue, k, err)
    if tot == 0:
        tot = 1
    steps.append(f"All selections: ${t3}$.")
    v = _norm(Fraction(fav, tot))
    v = err.slipped(v)
    steps.append(f"The probability is ${_frac_eq(fav, tot, v)}$.")
    return steps, v


# -- family: percents and ratios ---------------------------------------------------------------
_RATIO_NAMES = (
    ("boys", "girls", "students in a class"),
    ("red", "blue", "marbles in a jar"),
    ("cats", "dogs", "animals at a shelter"),
)


def _pct_sample(d: _Draw, level: int) -> dict[str, Any]:
    if level == 1:
        p = d.ri(1, 19) * 5 if d.u() < 0.7 else d.ri(1, 99)
        step = 100 // math.gcd(p, 100)
        return {"kind": "of", "p": p, "N": step * d.ri(1, max(1, 1000 // step))}
    if level == 2:
        return {
            "kind": "updown",
            "P": 100 * d.ri(1, 20),
            "p": 10 * d.ri(1, 6),
            "q": 10 * d.ri(1, 6),
        }
    if level == 3:
        while True:
            a, b = d.ri(1, 9), d.ri(1, 9)
            if a != b and math.gcd(a, b) == 1:
                break
        return {
            "kind": "ratio",
            "a": a,
            "b": b,
            "T": (a + b) * d.ri(2, 30),
            "who": d.ri(0, 1),
            "names": d.ri(0, 2),
        }
    if level == 4:
        return {"kind": "reverse", "P": 20 * d.ri(2, 50), "p": 5 * d.ri(1, 15)}
    while True:
        p, q = 5 * d.ri(1, 20), 5 * d.ri(-8, 20)
        if q != 0 and (p * q) % 100 == 0 and (100 + p) * (100 + q) > 10_000:
            return {"kind": "growth", "p": p, "q": q}


def _pct_prompt(params: dict[str, Any]) -> str:
    kind = params["kind"]
    if kind == "of":
        return f"What is ${params['p']}\\%$ of ${params['N']}$?"
    if kind == "updown":
        return (
            f"A jacket costs ${params['P']}$ dollars. Its price is raised by ${params['p']}\\%$, and then the new "
            f"price is lowered by ${params['q']}\\%$. What is the final price, in dollars?"
        )
    if kind == "ratio":
        first, second, whole = _RATIO_NAMES[params["names"]]
        asked = second if params["who"] else first
        return (
            f"The ratio of {first} to {second} among the ${params['T']}$ {whole} is ${params['a']}:{params['b']}$. "
            f"How many are {asked}?"
        )
    if kind == "reverse":
        sale = params["P"] * (100 - params["p"]) // 100
        return (
            f"After a ${params['p']}\\%$ discount, a bicycle sells for ${sale}$ dollars. "
            "What was its original price, in dollars?"
        )
    q = params["q"]
    second = f"grows by ${q}\\%$" if q > 0 else f"shrinks by ${-q}\\%$"
    return (
        f"A town's population grows by ${params['p']}\\%$ one year and {second} the next year. "
        "By what percent did the population increase over the two years?"
    )


def _pct_solve(params: dict[str, Any], err: _Err, sty: _Style) -> Solved:
    steps: Steps = []
    kind = params["kind"]
    if kind == "of":
        p, n = params["p"], params["N"]
        prod = p * n
        prod = int(err.slipped(prod))
        steps.append(
            f"${p}\\%$ of ${n}$ is $\\frac{{{p}}}{{100}} \\times {n} = \\frac{{{prod}}}{{100}}$."
        )
        v = _norm(Fraction(prod, 100))
        v = err.slipped(v)
        steps.append(f"$\\frac{{{prod}}}{{100}} = {_tex(v)}$.")
        return steps, v
    if kind == "updown":
        price, p, q = params["P"], params["p"], params["q"]
        e = err.at("formula", "slip")
        if e == "formula":
            net = p - q  # treated successive percents as additive
            v = _norm(Fraction(price * (100 + net), 100))
            steps.append(
                f"The net change is ${p}\\% - {q}\\% = {net}\\%$, so the final price is "
                f"${price} \\times \\frac{{{100 + net}}}{{100}} = {_tex(v)}$."
            )
            return steps, v
        p1 = _norm(Fraction(price * (100 + p), 100))
        if e:
            p1 = err.slip(p1)
        steps.append(
            f"After the increase the price is ${price} \\times \\frac{{{100 + p}}}{{100}} = {_tex(p1)}$."
        )
        e = err.at("sign", "slip")
        factor = 100 + q if e == "sign" else 100 - q
        v = _norm(p1 * Fraction(factor, 100))
        if e == "slip":
            v = err.slip(v)
        steps.append(
            f"After the decrease it is ${_tex(p1)} \\times \\frac{{{factor}}}{{100}} = {_tex(v)}$."
        )
        return steps, v
    if kind == "ratio":
        a, b, total = params["a"], params["b"], params["T"]
        parts = a + b
        parts = int(err.slipped(parts, avoid=(0,)))
        steps.append(f"The ratio has ${a} + {b} = {parts}$ equal parts.")
        one = _norm(Fraction(total, parts))
        one = err.slipped(one)
        steps.append(f"Each part is $\\frac{{{total}}}{{{parts}}} = {_tex(one)}$.")
        e = err.at("formula", "slip")
        want = b if params["who"] else a
        k = (a if params["who"] else b) if e == "formula" else want  # used the other share
        v = _norm(k * one)
        if e == "slip":
            v = err.slip(v)
        steps.append(f"The requested group has ${k}$ parts: ${k} \\times {_p(one)} = {_tex(v)}$.")
        return steps, v
    if kind == "reverse":
        p = params["p"]
        sale = params["P"] * (100 - p) // 100
        e = err.at("sign", "slip")
        rem = 100 + p if e == "sign" else 100 - p
        if e == "slip":
            rem = int(err.slip(rem, avoid=(0,)))
        steps.append(f"After the discount the price is ${rem}\\%$ of the original price $P$.")
        steps.append(f"So $\\frac{{{rem}}}{{100}} P = {sale}$.")
        e = err.at("formula", "slip")
        if e == "formula":
            v = _norm(Fraction(sale * (100 + p), 100))  # added the percent back to the sale price
            steps.append(f"Then $P = {sale} \\times \\frac{{{100 + p}}}{{100}} = {_tex(v)}$.")
            return steps, v
        v = _norm(Fraction(sale * 100, rem))
        if e:
            v = err.slip(v)
        steps.append(f"Then $P = \\frac{{{sale} \\times 100}}{{{rem}}} = {_tex(v)}$.")
        return steps, v
    p, q = params["p"], params["q"]
    steps.append(
        f"The population is multiplied by $\\frac{{{100 + p}}}{{100}}$ and then by $\\frac{{{100 + q}}}{{100}}$."
    )
    prod = (100 + p) * (100 + q)
    prod = int(err.slipped(prod))
    steps.append(
        f"Overall it is multiplied by $\\frac{{{100 + p} \\times {100 + q}}}{{10000}} = \\frac{{{prod}}}{{10000}}$."
    )
    e = err.at("formula", "slip")
    if e == "formula":
        v = p + q  # added the two percents
        steps.append(f"The total increase is ${p}\\% + {_p(q)}\\% = {v}\\%$.")
        return steps, v
    v = _norm(Fraction(prod, 100) - 100)
    if e:
        v = err.slip(v)
    steps.append(f"The increase is $\\frac{{{prod}}}{{100}} - 100 = {_tex(v)}$ percent.")
    return steps, v


# -- registry ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Family:
    name: str
    sample: Callable[[_Draw, int], dict[str, Any]]
    prompt: Callable[[dict[str, Any]], str]
    solve: Callable[[dict[str, Any], _Err, _Style], Solved]
    types: tuple[str, str, str, str, str]  # MATH subject per level 1-5


def _same(t: str) -> tuple[str, str, str, str, str]:
    return (t, t, t, t, t)


_ALG_INT = ("Algebra", "Algebra", "Algebra", "Intermediate Algebra", "Intermediate Algebra")
_FAMILIES: dict[str, _Family] = {
    f.name: f
    for f in (
        _Family("arithmetic", _arith_sample, _arith_prompt, _arith_solve, _same("Prealgebra")),
        _Family("linear_equation", _lineq_sample, _lineq_prompt, _lineq_solve, _same("Algebra")),
        _Family("linear_system", _sys_sample, _sys_prompt, _sys_solve, _same("Algebra")),
        _Family("fractions", _frac_sample, _frac_prompt, _frac_solve, _same("Prealgebra")),
        _Family("gcd_lcm", _gcd_sample, _gcd_prompt, _gcd_solve, _same("Number Theory")),
        _Family("modular", _mod_sample, _mod_prompt, _mod_solve, _same("Number Theory")),
        _Family(
            "counting", _count_sample, _count_prompt, _count_solve, _same("Counting & Probability")
        ),
        _Family("series", _series_sample, _series_prompt, _series_solve, _ALG_INT),
        _Family("quadratic", _quad_sample, _quad_prompt, _quad_solve, _ALG_INT),
        _Family(
            "probability", _prob_sample, _prob_prompt, _prob_solve, _same("Counting & Probability")
        ),
        _Family("percent", _pct_sample, _pct_prompt, _pct_solve, _same("Prealgebra")),
    )
}
FAMILIES: tuple[str, ...] = tuple(_FAMILIES)
"""Names of the procedural problem families, in registry order."""


def _split_of(fam: _Family, params: dict[str, Any]) -> str:
    """The split a problem belongs to, hashed from its text with phrasing fixed.

    Assigning every problem to exactly one split keeps train and test disjoint even
    where parameter spaces are small (and whatever the seed).
    """
    canonical = fam.prompt({**params, "q": 0} if "q" in params else params)
    return "train" if stable_uniform("procmath-split", fam.name, canonical) < 0.5 else "test"


# -- the task source ---------------------------------------------------------------------------


class ProceduralMathSource(GeneratedTaskSource):
    """Procedural math tasks with worked solutions, generated lazily from (seed, split, index).

    Difficulty ``z_i = frac(offset(seed, split) + i * 0.618...)`` covers [0, 1) nearly
    uniformly on every prefix; ``level = 1 + floor(5 z)`` sets the problem size. Train and
    test never share a problem: each problem's content hash assigns it to one split.
    """

    name = "procedural-math"
    id_prefix = "procmath"
    cache_max = _CACHE_MAX

    def __init__(
        self,
        *,
        seed: int = 0,
        train_size: int = 7500,
        test_size: int = 5000,
        families: Sequence[str] | None = None,
    ) -> None:
        for label, value in (("train_size", train_size), ("test_size", test_size)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{label} must be a non-negative integer, got {value!r}")
        if isinstance(families, str):
            raise ConfigError(
                f"families must be a sequence of family names, got the string {families!r}"
            )
        names = FAMILIES if families is None else tuple(dict.fromkeys(families))
        if not names:
            raise ConfigError(f"families must name at least one family of {', '.join(FAMILIES)}")
        for fam in names:
            if fam not in _FAMILIES:
                raise UnknownNameError("math family", fam, FAMILIES)
        self.seed = int(seed)
        self._families = tuple(_FAMILIES[f] for f in names)
        self._sizes = {"train": int(train_size), "test": int(test_size)}
        self._offsets = {s: stable_uniform("procmath-offset", self.seed, s) for s in _SPLITS}

    @property
    def families(self) -> tuple[str, ...]:
        """Enabled family names."""
        return tuple(f.name for f in self._families)

    def difficulty(self, split: str, index: int) -> float:
        """The difficulty quantile of a task, without generating it."""
        return (self._offsets[split] + index * _PHI) % 1.0

    def _generate(self, split: str, index: int) -> Task:
        z = self.difficulty(split, index)
        level = min(1 + int(5 * z), 5)
        u = stable_uniform("procmath-family", self.seed, split, index)
        fam = self._families[min(int(u * len(self._families)), len(self._families) - 1)]
        for attempt in range(_MAX_ATTEMPTS):
            rng = np.random.default_rng(stable_int("procmath", self.seed, split, index, attempt))
            params = fam.sample(_Draw(rng), level)
            if _split_of(fam, params) == split:
                break
        else:  # probability 2**-64; keep the last draw rather than loop forever
            logger.warning(
                "no %s-side problem found for %s/%d; splits may overlap", split, fam.name, index
            )
        steps, value = fam.solve(params, _Err(), _STYLES[0])
        answer = _tex(value)
        meta = {
            "level": level,
            "difficulty": z,
            "family": fam.name,
            "type": fam.types[level - 1],
            "params": params,
            "solution": _render(steps, answer, _STYLES[0]),
            "source": self.name,
        }
        return Task(f"procmath-{self.seed}/{split}/{index}", fam.prompt(params), (answer,), meta)


# -- worked solutions --------------------------------------------------------------------------
def worked_solution(
    task: Task, *, correct: bool, rng: np.random.Generator, style: int | None = None
) -> str:
    """A numbered step-by-step solution ending in ``The final answer is $\\boxed{...}$``.

    ``correct=False`` commits one concrete mistake inside a step (slip, sign error,
    dropped term, off-by-one, misapplied formula) that propagates to a wrong boxed
    answer. Deterministic given ``rng``'s state; ``style`` fixes the phrasing (drawn
    from ``rng`` when None). Tasks from other sources reuse ``meta["solution"]``.
    """
    d = _Draw(rng)
    sty = _STYLES[(d.ri(0, len(_STYLES) - 1) if style is None else int(style)) % len(_STYLES)]
    fam = _FAMILIES.get(task.meta.get("family", "")) if "params" in task.meta else None
    if fam is None:
        return _fallback_solution(task, correct, d, sty)
    params = task.meta["params"]
    steps, truth = fam.solve(params, _Err(), sty)
    if correct:
        return _render(steps, _tex(truth), sty)
    steps, value = _wrong_solve(fam, params, sty, d, truth)
    return _render(steps, _tex(value), sty)


def _wrong_solve(fam: _Family, params: dict[str, Any], sty: _Style, d: _Draw, truth: Num) -> Solved:
    probe = _Err()
    fam.solve(params, probe, sty)
    n_sites = probe.count
    fallback: Solved | None = None
    for _ in range(8):
        err = _Err(d, target=d.ri(0, n_sites - 1), kind_u=d.u())
        try:
            steps, value = fam.solve(params, err, sty)
        except ZeroDivisionError:  # a mistake that makes a later step undefined: pick another
            continue
        if value != truth:
            # a wrong answer in the right one's form (a whole number stays one): the answer's
            # form must not tell a wrong draft from a right one (issue 38's tell meter)
            if isinstance(_norm(value), int) == isinstance(_norm(truth), int):
                return steps, value
            fallback = fallback or (steps, value)
    if fallback is not None:
        return fallback
    # the last site always computes the final value, so a slip there always changes it
    err = _Err(d, target=n_sites - 1, forced="slip")
    steps, value = fam.solve(params, err, sty)
    if value == truth:  # pragma: no cover - guarded by construction
        value = _norm(value + 1)
        steps = [*steps[:-1], steps[-1] + f" That gives ${_tex(value)}$."]
    return steps, value


# -- wrong answers and solutions for tasks from other sources ----------------------------------
_INT_RE = re.compile(r"^([+-]?)(\d{1,3}(?:,\d{3})+|\d+)$")
_DEC_RE = re.compile(r"^([+-]?)(\d*)\.(\d+)$")
_FRAC_RE = re.compile(
    r"^([+-]?)\\[dt]?frac\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))$"
)
_SLASH_RE = re.compile(r"^([+-]?\d+)\s*/\s*([+-]?\d+)$")
_CHOICE_RE = re.compile(r"\(([A-E])\)")
_DIGITS_RE = re.compile(r"\d+")


def _parse_rational(answer: str) -> tuple[Fraction, str, int] | None:
    """(value, kind, decimal places) of a plain integer, decimal or simple fraction answer."""
    s = answer.strip().strip("$").strip().replace(" ", "")
    if m := _INT_RE.match(s):
        iv = int(m.group(2).replace(",", ""))
        return Fraction(-iv if m.group(1) == "-" else iv), "int", 0
    if m := _DEC_RE.match(s):
        places = len(m.group(3))
        v = Fraction(int((m.group(2) or "0") + m.group(3)), 10**places)
        return (-v if m.group(1) == "-" else v), "dec", places
    m = _FRAC_RE.match(s)
    if m:
        num, den = int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
        kind = "frac"
    else:
        m = _SLASH_RE.match(s)
        if not m:
            return None
        num, den = int(m.group(1)), int(m.group(2))
        kind = "slash"
    if den == 0:
        return None
    v = Fraction(num, den)
    return (-v if kind == "frac" and m.group(1) == "-" else v), kind, 0


def _format_rational(v: Fraction, kind: str, places: int) -> str:
    if kind == "dec":
        scaled = v * 10**places
        if scaled.denominator == 1:
            digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
            return ("-" if v < 0 else "") + digits[:-places] + "." + digits[-places:]
        kind = "frac"
    if kind == "slash" and v.denominator != 1:
        return f"{v.numerator}/{v.denominator}"
    return _tex(_norm(v))


def _wrong_rational(v: Fraction, kind: str, places: int, d: _Draw) -> str:
    if kind == "int" or (kind != "dec" and v.denominator == 1):
        n = int(v)
        mag = abs(n)
        for _ in range(16):
            if n != 0 and d.u() < 0.2:
                wi = -n
            else:
                deltas = (1, 2, 3) if mag < 20 else (1, 2, 10) if mag < 500 else (1, 10, 100)
                wi = n + d.pick(deltas) * d.sign()
            if wi != n:
                return str(wi)
        return str(n + 1)
    if kind == "dec":
        unit = Fraction(1, 10**places)
        for _ in range(16):
            w = -v if (v != 0 and d.u() < 0.2) else v + unit * d.pick((1, 2, 3)) * d.sign()
            if w != v:
                return _format_rational(w, kind, places)
        return _format_rational(v + unit, kind, places)
    for _ in range(16):
        choice = d.ri(0, 3)
        if choice == 0:
            w = Fraction(v.numerator + d.pick((1, 2)) * d.sign(), v.denominator)
        elif choice == 1:
            w = Fraction(v.numerator, max(1, v.denominator + d.pick((1, 2)) * d.sign()))
        elif choice == 2:
            w = -v
        else:
            w = 1 / v if v != 0 else Fraction(1)
        if w != v:
            return _format_rational(w, kind, places)
    return _format_rational(v + 1, kind, places)


def _wrong_text(answer: str, d: _Draw) -> str:
    """Near-miss for a non-numeric answer: change one of its numbers, a choice letter or a sign."""
    ints = list(_DIGITS_RE.finditer(answer))
    choice = _CHOICE_RE.search(answer)
    for _ in range(8):
        if ints:
            m = ints[-1] if (len(ints) == 1 or d.u() < 0.7) else d.pick(ints[:-1])
            n = int(m.group())
            w = n + d.pick((1, 1, 2)) * (d.sign() if n > 2 else 1)
            cand = answer[: m.start()] + str(w) + answer[m.end() :]
        elif choice:
            letter = "ABCDE"[("ABCDE".index(choice.group(1)) + d.ri(1, 4)) % 5]
            cand = answer[: choice.start(1)] + letter + answer[choice.end(1) :]
        else:
            s = answer.strip()
            cand = s[1:].strip() if s.startswith("-") else (f"-{s}" if " " not in s else f"-({s})")
        if cand.strip() and cand != answer and not math_equal(answer, cand):
            return cand
    for cand in (f"{answer} + 1", "\\text{no solution}", "\\text{undefined}"):
        if not math_equal(answer, cand):
            return cand
    return "0" if answer.strip() != "0" else "1"  # pragma: no cover


def _wrong_answer(answer: str, d: _Draw) -> str:
    parsed = _parse_rational(answer)
    if parsed is not None:
        return _wrong_rational(*parsed, d)
    return _wrong_text(answer, d)


def wrong_answer(answer: str, rng: np.random.Generator) -> str:
    """A plausible near-miss of ``answer`` that ``math_equal`` says is different.

    Integers move by a small amount or flip sign, decimals change a last digit,
    fractions change numerator or denominator (or flip/invert); other answers get one
    of their numbers nudged. Numeric cases differ by construction (no math-verify call).
    """
    return _wrong_answer(str(answer), _Draw(rng))


def _wrong_for_task(task: Task, d: _Draw) -> str:
    answers = tuple(task.answers) or ("0",)
    ref = answers[0]
    numeric = _parse_rational(ref) is not None
    cand = ref
    for _ in range(10):
        cand = _wrong_answer(ref, d)
        if (numeric and len(answers) == 1) or not any(math_equal(a, cand) for a in answers):
            return cand
    for cand in ("\\text{no solution}", "\\text{undefined}", "-1", "0"):
        if not any(math_equal(a, cand) for a in answers):
            return cand
    return cand  # pragma: no cover


def _generic_solution(answer: str, sty: _Style) -> str:
    steps = [
        "Identify the quantities given in the problem and what is asked.",
        "Set up the relation between them and carry out the computation.",
        f"Carrying the computation through gives {answer}.",
    ]
    return _render(steps, answer, sty)


def _last_boxed_span(text: str) -> tuple[int, int] | None:
    """(start, end) of the last complete ``\\boxed{...}``/``\\fbox{...}`` in ``text``."""
    span = last_boxed_span(text)
    return None if span is None else (span[0], span[2])


def _perturb_tail(head: str, ref: str, wrong: str, d: _Draw) -> str:
    """Put the mistake in the final steps: the reference value (or the last number) changes."""
    start = max(0, len(head) - 240)
    region = head[start:]
    ref_s = ref.strip()
    if ref_s and len(ref_s) <= 40:
        pattern = re.compile(r"(?<![\w.])" + re.escape(ref_s) + r"(?!\w|\.\d)")
        hits = list(pattern.finditer(region))
        if hits:
            m = hits[-1]
            return head[: start + m.start()] + wrong + head[start + m.end() :]
    nums = list(_DIGITS_RE.finditer(region))
    if nums:
        m = nums[-1]
        n = int(m.group())
        w = n + d.pick((1, 2)) * (d.sign() if n > 2 else 1)
        return head[: start + m.start()] + str(w) + head[start + m.end() :]
    return head


def _fallback_solution(task: Task, correct: bool, d: _Draw, sty: _Style) -> str:
    solution = task.meta.get("solution")
    solution = solution if isinstance(solution, str) and solution.strip() else None
    ref = task.answer
    if correct:
        if solution is None:
            return _generic_solution(ref, sty)
        boxed = extract_boxed(solution)
        if boxed is not None and any(boxed == a or math_equal(a, boxed) for a in task.answers):
            return solution
        return f"{solution.rstrip()}\nThe final answer is $\\boxed{{{ref}}}$"
    wrong = _wrong_for_task(task, d)
    if solution is None:
        return _generic_solution(wrong, sty)
    span = _last_boxed_span(solution)
    if span is None:
        head = _perturb_tail(solution.rstrip(), ref, wrong, d)
        return f"{head}\nThe final answer is $\\boxed{{{wrong}}}$"
    head = _perturb_tail(solution[: span[0]], ref, wrong, d)
    return f"{head}\\boxed{{{wrong}}}{solution[span[1] :]}"
