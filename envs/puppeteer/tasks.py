"""Puppeteer's task kinds: procedural stand-ins for seed 003's four benchmarks, their task
source, reference and flawed programs, and how answers are graded.

Seed 003 evaluates on GSM-Hard, MMLU-Pro, SRDD and CommonGen-Hard. The real sets are not
shipped (``loaders`` reads them from local files); these generators are stand-ins close to
their shape, each deterministic in ``(seed, split, index)`` with disjoint train and test
random streams (``TASK_KINDS`` -> ``task.meta["family"]``):

- ``"gsm-hard"`` -> ``gsm_hard``: GSM8K-style multi-step word problems whose numbers are
  large, as GSM-Hard replaces GSM8K's numbers with big ones (``GSM_TEMPLATES``: 24 templates,
  3 of them keep their numbers in a data file that the prompt names, so only an agent that
  reads the file can solve them). Graded by numeric equality.
- ``"multiple-choice"`` -> ``mmlu_pro``: ten options A-J, as MMLU-Pro has, over its 14
  categories: factual questions from ``corpus.FACT_GROUPS`` (the corpus states each fact, so
  searching helps) and computed questions (arithmetic, physics, engineering, chemistry,
  economics, business, binary numbers) whose nine wrong options are typical slips. Graded
  by the letter.
- ``"commongen"`` -> ``commongen_hard``: write a short text that uses 20-30 concept words,
  as in CommonGen-Hard (Self-Refine). Graded by ``commongen_score``: coverage times a
  fluency proxy, so a bag of words or a comma list scores near 0 (see there).
- ``"srdd"`` -> ``srdd``: a software requirement (name, description, category, as SRDD
  rows) to implement in Python; graded by running hidden tests against the code in the
  bubblewrap sandbox (``srdd_score``): the fraction of tests whose result equals the
  reference implementation's.

Every task's ``meta`` has ``family``, ``kind``, ``difficulty`` (in [0, 1)), ``files`` (the
task folder's files for ``read_file``) and ``doc_id`` (the corpus document that helps, or
None). ``reference_program`` / ``flawed_program`` give a right and a plausibly wrong Python
program for a task (what a simulated tool agent writes); ``search_terms`` a query that finds
the task's document.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchenv.envs.puppeteer.corpus import (
    FACT_GROUPS,
    FORMULA_DOCS,
    SOFTWARE_DOCS,
    FactGroup,
    fact_doc_id,
)
from orchenv.envs.puppeteer.tools import run_python
from orchenv.error import UnknownNameError
from orchenv.grading import extract_boxed, math_verdict
from orchenv.seeding import sealed_int
from orchenv.tasks import GeneratedTaskSource, SealedTaskSource, Task

TASK_KINDS: tuple[str, ...] = ("gsm-hard", "multiple-choice", "commongen", "srdd")
SPLITS: tuple[str, ...] = ("train", "test")
LETTERS: tuple[str, ...] = tuple("ABCDEFGHIJ")
FAMILIES: tuple[str, ...] = ("gsm_hard", "mmlu_pro", "commongen_hard", "srdd")
#: each kind's ``meta["family"]`` (the benchmark it stands in for)
FAMILY_OF_KIND: dict[str, str] = dict(zip(TASK_KINDS, FAMILIES, strict=True))
#: MMLU-Pro's 14 categories, as its ``category`` column spells them
MMLU_PRO_SUBJECTS: tuple[str, ...] = (
    "biology", "business", "chemistry", "computer science", "economics", "engineering",
    "health", "history", "law", "math", "other", "philosophy", "physics", "psychology",
)  # fmt: skip

#: the id prefix of each kind's tasks
_ID_PREFIX: dict[str, str] = {
    "gsm-hard": "gsmhard",
    "multiple-choice": "mc",
    "commongen": "cgen",
    "srdd": "srdd",
}
_NAMES = ("Ann", "Bob", "Cara", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jun", "Kofi", "Lea")


# -- shared ----------------------------------------------------------------------------------
def _task_rng(
    seed: int, index: int, split: str, *, train_tag: int | None, test_tag: int
) -> np.random.Generator:
    """The random stream of one task; train and test streams differ by their tag. A seed
    of 2**32 or more (a board's sealed seed, ``PuppeteerTaskSource.sealed``) enters whole:
    its high bits are a further word, so a sealed stream cannot be found by trying the
    2**32 low words (seeds below 2**32, the public ones, are read as they always were)."""
    if split not in SPLITS:
        raise UnknownNameError("split", split, SPLITS)
    tag = train_tag if split == "train" else test_tag
    tags = [] if tag is None else [tag]
    seed = int(seed)
    high = [seed >> 32] if seed >= 2**32 else []
    return np.random.default_rng([seed & 0xFFFFFFFF, *high, *tags, int(index)])


def _task_id(kind: str, seed: int, split: str, index: int) -> str:
    """``gsmhard-0-3`` for train tasks, ``gsmhard-0-test-3`` for the others."""
    middle = f"{seed}" if split == "train" else f"{seed}-{split}"
    return f"{_ID_PREFIX[kind]}-{middle}-{index}"


def _meta(kind: str, difficulty: float, prompt: str, **extra: Any) -> dict[str, Any]:
    files = {"problem.txt": prompt, **extra.pop("files", {})}
    return {
        "family": FAMILY_OF_KIND[kind],
        "kind": kind,
        "difficulty": float(min(0.95, max(0.0, difficulty))),
        "files": files,
        "doc_id": extra.pop("doc_id", None),
        **extra,
    }


def kind_of(task: Task) -> str:
    """The task kind (``TASK_KINDS``) of a task: ``meta["kind"]``, else from its family."""
    kind = task.meta.get("kind")
    if kind in TASK_KINDS:
        return str(kind)
    family = task.meta.get("family")
    for k, f in FAMILY_OF_KIND.items():
        if family == f:
            return k
    raise UnknownNameError("puppeteer task family", str(family), FAMILIES)


# -- GSM-Hard --------------------------------------------------------------------------------
#: number ranges: Big, Medium, Hundreds, Small, Count (a few), Percent
_RANGES = {
    "B": (100_000, 9_999_999),
    "M": (1_000, 99_999),
    "H": (100, 999),
    "S": (2, 60),
    "C": (2, 12),
    "P": (5, 95),
}


@dataclass(frozen=True)
class GsmTemplate:
    """A word problem: ``text`` with ``{a}``... slots, the answer's Python ``expression``
    over the same slots (integers, exact by construction), the slots' ``ranges`` (keys of
    ``_RANGES``) and ``derive``: assignments applied in order to make divisions exact."""

    text: str
    expression: str
    ranges: str
    derive: tuple[str, ...] = ()


GSM_TEMPLATES: tuple[GsmTemplate, ...] = (
    GsmTemplate(
        "A warehouse holds {a} boxes. Every day {b} boxes arrive and {c} boxes are shipped. "
        "How many boxes does the warehouse hold after {d} days?",
        "{a} + {d} * ({b} - {c})", "a:B b:B c:M d:H",
    ),
    GsmTemplate(
        "A company pays each of its {a} employees {b} dollars a month. How many dollars does "
        "it pay in {d} months, including a one-time bonus pool of {c} dollars?",
        "{a} * {b} * {d} + {c}", "a:M b:M c:B d:C",
    ),
    GsmTemplate(
        "A stadium sells {a} tickets at {b} dollars each and refunds {c} of them. Then it "
        "sells {d} more tickets at the same price. How many dollars does it take in?",
        "({a} - {c} + {d}) * {b}", "a:B b:H c:M d:M",
    ),
    GsmTemplate(
        "A farm harvests {a} kilograms of apples each week for {s} weeks. It keeps {p} "
        "percent of the harvest for juice and sells the rest at {c} dollars per kilogram. "
        "How many dollars does it earn?",
        "{a} * {s} * (100 - {p}) // 100 * {c}", "a:B s:S p:P c:S", ("a=a*100",),
    ),
    GsmTemplate(
        "{name} buys {s} laptops at {b} dollars each and {t} monitors at {c} dollars each "
        "from a budget of {a} dollars. How many dollars of the budget are left?",
        "{a} - {s} * {b} - {t} * {c}", "a:B s:S b:M t:S c:M", ("a=a+s*b+t*c",),
    ),
    GsmTemplate(
        "A freight train travels at {s} kilometres per hour for {t} hours, then at {u} "
        "kilometres per hour for {v} hours. How many kilometres does it cover?",
        "{s} * {t} + {u} * {v}", "s:B t:S u:M v:S",
    ),
    GsmTemplate(
        "A factory makes {a} widgets a day. {p} percent of them are defective and thrown "
        "away; the rest are packed in boxes of {s}. How many full boxes are packed in {d} "
        "days?",
        "{a} * {d} * (100 - {p}) // 100 // {s}", "a:B p:P s:S d:S", ("a=a*100",),
    ),
    GsmTemplate(
        "{name} saves {b} dollars each month. After {s} months she spends {c} dollars on a "
        "car, then saves for {t} more months. How many dollars does she have?",
        "{b} * ({s} + {t}) - {c}", "b:B s:S c:B t:S", ("c=c%(b*s)",),
    ),
    GsmTemplate(
        "A district has {s} schools with {a} students each. A bus carries {t} students. How "
        "many buses are needed to carry every student at once?",
        "({s} * {a} + {t} - 1) // {t}", "s:S a:B t:S",
    ),
    GsmTemplate(
        "A fruit stand sells {a} apples at {b} cents each and {c} oranges at {d} cents each. "
        "How many cents does it take in, after giving {e} cents of change back by mistake?",
        "{a} * {b} + {c} * {d} - {e}", "a:B b:H c:B d:H e:M",
    ),
    GsmTemplate(
        "A library owns {a} books. It lends out {p} percent of them, receives {b} donated "
        "books and discards {c} damaged ones from the shelves. How many books are on the "
        "shelves?",
        "{a} - {a} * {p} // 100 + {b} - {c}", "a:B p:P b:M c:M", ("a=a*100",),
    ),
    GsmTemplate(
        "A phone company charges {b} dollars a month plus {c} dollars per gigabyte. A "
        "business uses {s} gigabytes a month for {t} months. How many dollars does it pay?",
        "{t} * ({b} + {c} * {s})", "b:M c:H s:B t:S",
    ),
    GsmTemplate(
        "A rectangular field is {a} metres long and {b} metres wide. Fencing costs {c} "
        "dollars per metre. How many dollars does it cost to fence the whole perimeter?",
        "2 * ({a} + {b}) * {c}", "a:B b:M c:S",
    ),
    GsmTemplate(
        "{name} bakes {a} cookies. She gives {b} cookies to each of her {s} neighbours and "
        "sells the rest in packs of {t} for {c} dollars a pack. How many dollars does she "
        "make?",
        "({a} - {b} * {s}) // {t} * {c}", "a:B b:H s:S t:S c:S", ("a=b*s+t*a",),
    ),
    GsmTemplate(
        "A tank holds {a} litres. A pump fills it at {b} litres per minute while a leak "
        "drains {c} litres per minute. How many minutes does it take to fill the empty tank?",
        "{a} // ({b} - {c})", "a:M b:B c:H", ("b=b+c", "a=a*(b-c)"),
    ),
    GsmTemplate(
        "{name} is {a} years old. Her great-grandfather's tree is {s} times her age plus {b} "
        "years old. What will the sum of their ages be in {c} years?",
        "{a} + {s} * {a} + {b} + 2 * {c}", "a:S s:H b:B c:H",
    ),
    GsmTemplate(
        "A bank pays {p} percent simple interest a year on a deposit of {a} dollars. How "
        "many dollars are in the account after {t} years?",
        "{a} + {a} * {p} * {t} // 100", "p:S a:B t:S", ("a=a*100",),
    ),
    GsmTemplate(
        "A band plays {s} concerts and sells {a} tickets at each at {b} dollars a ticket. It "
        "keeps {p} percent of the ticket money and pays {c} dollars of travel per concert. "
        "How many dollars does the band keep in the end?",
        "{s} * ({a} * {b} * {p} // 100 - {c})", "s:S a:B b:H p:P c:M", ("b=b*100",),
    ),
    GsmTemplate(
        "A courier delivers {a} parcels on Monday, twice as many on Tuesday, and {b} fewer "
        "than on Tuesday on Wednesday. How many parcels does it deliver in the three days?",
        "{a} + 2 * {a} + (2 * {a} - {b})", "a:B b:M",
    ),
    GsmTemplate(
        "A bakery uses {s} grams of flour per loaf. It has {a} kilograms of flour and bakes "
        "as many loaves as it can. How many grams of flour are left over?",
        "{a} * 1000 % {s}", "s:H a:B",
    ),
    GsmTemplate(
        "One can of paint covers {s} square metres. A crew paints {t} walls of {a} square "
        "metres each. How many cans does it need?",
        "({t} * {a} + {s} - 1) // {s}", "s:S t:H a:B",
    ),
)  # fmt: skip

#: templates whose numbers are in a data file the prompt names (``read_file`` needed)
GSM_FILE_TEMPLATES: tuple[str, ...] = ("orders", "meter", "payroll")
_ITEMS = ("bolts", "cables", "drills", "gloves", "hammers", "ladders", "nails", "paint", "saws")


def _gsm_numbers(template: GsmTemplate, rng: np.random.Generator) -> dict[str, int]:
    nums: dict[str, int] = {}
    for spec in template.ranges.split():
        name, kind = spec.split(":")
        lo, hi = _RANGES[kind]
        nums[name] = int(rng.integers(lo, hi + 1))
    for assignment in template.derive:
        name, expr = assignment.split("=", 1)
        nums[name] = int(eval(expr, {"__builtins__": {}}, dict(nums)))  # noqa: S307 - ours
    return nums


def _gsm_file_task(which: str, rng: np.random.Generator) -> tuple[str, str, str, dict[str, str]]:
    """(prompt, expression, file name, files) of a data-file template."""
    if which == "orders":
        n = int(rng.integers(4, 8))
        items = [_ITEMS[int(i)] for i in rng.choice(len(_ITEMS), size=n, replace=False)]
        rows = [
            (it, int(rng.integers(1_000, 999_999)), int(rng.integers(2, 9_999))) for it in items
        ]
        rows[0] = (rows[0][0], int(rng.integers(100_000, 999_999)), rows[0][2])
        d = int(rng.integers(1_000, 99_999))
        table = "item,quantity,unit_price\n" + "".join(f"{i},{q},{p}\n" for i, q, p in rows)
        expr = " + ".join(f"{q} * {p}" for _, q, p in rows) + f" - {d}"
        prompt = (
            "The file orders.csv lists today's orders (item, quantity, unit price in dollars). "
            f"The shop gives a discount of {d} dollars on the total. How many dollars does it "
            "collect?"
        )
        return prompt, expr, "orders.csv", {"orders.csv": table}
    if which == "meter":
        n = int(rng.integers(6, 13))
        start = int(rng.integers(100_000, 9_999_999))
        steps = [int(rng.integers(1_000, 99_999)) for _ in range(n - 1)]
        readings = [start]
        for s in steps:
            readings.append(readings[-1] + s)
        c = int(rng.integers(2, 99))
        expr = f"({readings[-1]} - {readings[0]}) * {c}"
        prompt = (
            "The file readings.txt holds a factory's electricity meter reading at the end of "
            f"each month, one per line. Power costs {c} dollars per unit. How many dollars "
            "does the factory owe for the units used between the first and the last reading?"
        )
        return prompt, expr, "readings.txt", {"readings.txt": "\n".join(map(str, readings)) + "\n"}
    n = int(rng.integers(3, 7))
    names = [_NAMES[int(i)] for i in rng.choice(len(_NAMES), size=n, replace=False)]
    rows2 = [(nm, int(rng.integers(15, 400)), int(rng.integers(100, 9_999))) for nm in names]
    b = int(rng.integers(100_000, 999_999))
    table = "name,hourly_wage,hours\n" + "".join(f"{nm},{w},{h}\n" for nm, w, h in rows2)
    expr = " + ".join(f"{w} * {h}" for _, w, h in rows2) + f" + {b} * {n}"
    prompt = (
        "The file staff.csv lists each employee's hourly wage in dollars and hours worked this "
        f"year. Each employee also gets a bonus of {b} dollars. How many dollars is the "
        "company's total payroll?"
    )
    return prompt, expr, "staff.csv", {"staff.csv": table}


def _eval_int(expression: str) -> int:
    return int(eval(expression, {"__builtins__": {}}))  # noqa: S307 - digits and operators


def gsm_hard_task(seed: int, index: int, split: str = "train") -> Task:
    """A GSM-Hard-style word problem with large numbers, deterministic in ``(seed, split, index)``.

    One of ``GSM_TEMPLATES`` (or, one time in eight, a data-file template whose numbers sit
    in a file the prompt names). ``meta["expression"]`` is the answer's Python expression
    (ground truth: privileged); ``meta["steps"]`` its number of operations.
    """
    rng = _task_rng(seed, index, split, train_tag=None, test_tag=7)
    files: dict[str, str] = {}
    if rng.random() < 0.125:
        which = GSM_FILE_TEMPLATES[int(rng.integers(len(GSM_FILE_TEMPLATES)))]
        prompt, expression, data_file, files = _gsm_file_task(which, rng)
        template_id = f"file:{which}"
    else:
        t = int(rng.integers(len(GSM_TEMPLATES)))
        template = GSM_TEMPLATES[t]
        nums = _gsm_numbers(template, rng)
        name = _NAMES[int(rng.integers(len(_NAMES)))]
        prompt = template.text.format(name=name, **nums)
        expression = template.expression.format(**nums)
        template_id, data_file = str(t), None
    steps = len(re.findall(r"//|[-+*%]", expression))
    difficulty = 0.4 + 0.06 * steps + (0.1 if data_file else 0.0)
    return Task(
        id=_task_id("gsm-hard", seed, split, index),
        prompt=prompt,
        answers=(str(_eval_int(expression)),),
        meta=_meta(
            "gsm-hard",
            difficulty,
            prompt,
            files=files,
            expression=expression,
            steps=steps,
            template=template_id,
            data_file=data_file,
        ),
    )


# -- MMLU-Pro --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Computed:
    """A computed question: its text, the right value's expression, and the expressions of
    typical slips (the first wrong options)."""

    question: str
    expression: str
    slips: tuple[str, ...]


_MOLAR = (
    ("water", 18), ("carbon dioxide", 44), ("glucose", 180), ("methane", 16), ("ammonia", 17),
    ("oxygen gas", 32), ("calcium carbonate", 100), ("sulfuric acid", 98), ("ethanol", 46),
)  # fmt: skip


def _computed(doc: str, rng: np.random.Generator) -> _Computed:
    """The computed question of a formula document (``corpus.FORMULA_DOCS``)."""
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    if doc == "math/remainder":
        n, k = r(10_000, 9_999_999), r(7, 97)
        return _Computed(
            f"What is the remainder when {n} is divided by {k}?",
            f"{n} % {k}",
            (f"{n} // {k}", f"{n} % {k} + 1", f"{k} - {n} % {k}", f"({n} + 1) % {k}"),
        )
    if doc == "math/gcd":
        g, x, y = r(2, 90), r(2, 400), r(2, 400)
        while math.gcd(x, y) != 1:
            y += 1
        a, b = g * x, g * y
        return _Computed(
            f"What is the greatest common divisor of {a} and {b}?",
            f"math.gcd({a}, {b})",
            (f"{a} * {b} // math.gcd({a}, {b})", f"{g} * 2", f"abs({a} - {b})", f"{g} + 1"),
        )
    if doc == "math/binomial":
        n, k = r(10, 30), r(2, 6)
        return _Computed(
            f"In how many ways can a committee of {k} be chosen from {n} people, that is, "
            f"what is the binomial coefficient C({n}, {k})?",
            f"math.comb({n}, {k})",
            (f"math.perm({n}, {k})", f"math.comb({n}, {k - 1})", f"math.comb({n - 1}, {k})",
             f"{n} * {k}"),
        )  # fmt: skip
    if doc == "math/series":
        a, d, n = r(3, 900), r(2, 90), r(10, 200)
        return _Computed(
            f"What is the sum of the arithmetic series with first term {a}, common difference "
            f"{d} and {n} terms?",
            f"{n} * (2 * {a} + ({n} - 1) * {d}) // 2",
            (f"{n} * (2 * {a} + {n} * {d}) // 2", f"{a} + ({n} - 1) * {d}",
             f"{n} * ({a} + {d})", f"({n} - 1) * (2 * {a} + ({n} - 2) * {d}) // 2"),
        )  # fmt: skip
    if doc == "physics/kinetic":
        m, v = 2 * r(1, 200), r(2, 90)
        return _Computed(
            f"A body of mass {m} kg moves at {v} m/s. What is its kinetic energy in joules?",
            f"{m} * {v} * {v} // 2",
            (f"{m} * {v} * {v}", f"{m} * {v} // 2", f"{m} * {v}", f"{m} * {v} * 2"),
        )
    if doc == "engineering/ohm":
        i, res = r(2, 80), r(3, 900)
        return _Computed(
            f"A current of {i} A flows through a resistor of {res} ohms. By Ohm's law, what is "
            "the voltage across the resistor, in volts?",
            f"{i} * {res}",
            (f"{i} + {res}", f"{res} // {i}", f"{i} * {res} * 2", f"{i} * {i} * {res}"),
        )
    if doc == "engineering/power":
        v, i = r(5, 480), r(2, 90)
        return _Computed(
            f"A device draws {i} A from a {v} V supply. What electric power does it use, in watts?",
            f"{v} * {i}",
            (f"{v} + {i}", f"{v} * {i} * {i}", f"{v} * {v} * {i}", f"{v} // {i}"),
        )
    if doc == "engineering/stress":
        s, a = r(1_000, 900_000), r(2, 40)
        return _Computed(
            f"A bar with a cross-sectional area of {a} square metres carries an axial force "
            f"of {s * a} N. What is the normal stress in the bar, in pascals?",
            f"{s * a} // {a}",
            (f"{s * a} * {a}", f"{s * a} // ({a} * {a})", f"{s * a} - {a}", f"{s} * 2"),
        )
    if doc == "chemistry/moles":
        name, molar = _MOLAR[int(rng.integers(len(_MOLAR)))]
        k = r(2, 90)
        return _Computed(
            f"How many moles are in {k * molar} g of {name} (molar mass {molar} g/mol)?",
            f"{k * molar} // {molar}",
            (f"{k * molar} * {molar}", f"{k} * 2", f"{k} + 1", f"{k * molar} // 10"),
        )
    if doc == "economics/real-gdp":
        deflator, real = 5 * r(16, 40), 20 * r(10, 2_000)
        nominal = real * deflator // 100
        return _Computed(
            f"Nominal GDP is {nominal} billion dollars and the GDP deflator is {deflator}. What "
            "is real GDP, in billion dollars?",
            f"{nominal} * 100 // {deflator}",
            (f"{nominal} * {deflator} // 100", f"{nominal}", f"{nominal} - {deflator}",
             f"{nominal} + {deflator}"),
        )  # fmt: skip
    if doc == "business/interest":
        p, rate, t = 100 * r(10, 9_000), r(2, 15), r(2, 12)
        return _Computed(
            f"What simple interest, in dollars, does a principal of {p} dollars earn at {rate} "
            f"percent a year over {t} years?",
            f"{p} * {rate} * {t} // 100",
            (f"{p} + {p} * {rate} * {t} // 100", f"{p} * {rate} // 100", f"{p} * {rate} * {t}",
             f"{p} * {rate} * ({t} - 1) // 100"),
        )  # fmt: skip
    if doc == "business/break-even":
        var, margin, q = r(2, 400), r(2, 200), r(50, 9_000)
        fixed = q * margin
        return _Computed(
            f"A product sells for {var + margin} dollars and costs {var} dollars per unit to "
            f"make; fixed costs are {fixed} dollars. How many units must be sold to break even?",
            f"{fixed} // ({var + margin} - {var})",
            (f"{fixed} // {var + margin}", f"{fixed} // {var}", f"{q} + 1", f"{fixed} - {var}"),
        )
    if doc == "computer science/binary":
        n = r(100, 1_000_000)
        bits = format(n, "b")
        return _Computed(
            f"What is the binary number {bits} in decimal?",
            f"int('{bits}', 2)",
            (f"int('{bits[::-1]}', 2)", f"{n} * 2", f"{n} // 2", f"{n} + 1"),
        )
    raise UnknownNameError("formula document", doc, FORMULA_DOCS)


def _eval_math(expression: str) -> int:
    return int(eval(expression, {"__builtins__": {}, "math": math, "int": int, "abs": abs}))  # noqa: S307


def _numeric_distractors(right: int, slips: Sequence[str], rng: np.random.Generator) -> list[str]:
    """Nine distinct wrong values: the slips that differ from the right value, then values
    near it."""
    wrong: list[str] = []
    for slip in slips:
        value = str(_eval_math(slip))
        if value != str(right) and value not in wrong:
            wrong.append(value)
    step = max(1, abs(right) // 20)
    while len(wrong) < 9:
        value = str(right + int(rng.integers(1, 12)) * step * (1 if rng.random() < 0.5 else -1))
        if value != str(right) and value not in wrong:
            wrong.append(value)
    return wrong[:9]


def _subject_sources(subject: str) -> list[tuple[str, Any]]:
    """The question sources of an MMLU-Pro category: fact groups and formula documents."""
    sources: list[tuple[str, Any]] = [("facts", g) for g in FACT_GROUPS if g.subject == subject]
    sources += [("formula", d) for d in FORMULA_DOCS if d.split("/")[0] == subject]
    return sources


def multiple_choice_task(seed: int, index: int, split: str = "train") -> Task:
    """An MMLU-Pro-style question with ten options A-J, deterministic in ``(seed, split, index)``.

    The category is uniform over MMLU-Pro's 14 (``MMLU_PRO_SUBJECTS``); within it the
    question is a fact (``corpus.FACT_GROUPS``: wrong options are the other facts' answers)
    or a computation (``corpus.FORMULA_DOCS``: wrong options are typical slips and nearby
    values). ``answers`` is the letter; ``meta["options"]`` the ten options,
    ``meta["subject"]`` the category, ``meta["doc_id"]`` the corpus document that helps.
    """
    rng = _task_rng(seed, index, split, train_tag=11, test_tag=17)
    subject = MMLU_PRO_SUBJECTS[int(rng.integers(len(MMLU_PRO_SUBJECTS)))]
    sources = _subject_sources(subject)
    source_kind, source = sources[int(rng.integers(len(sources)))]
    if source_kind == "facts":
        group: FactGroup = source
        fact = group.facts[int(rng.integers(len(group.facts)))]
        question = group.question.format(clue=fact.clue)
        pool = [o for o in group.options_pool() if o != fact.answer]
        picks = rng.choice(len(pool), size=9, replace=False)
        correct, wrong = fact.answer, [pool[int(i)] for i in picks]
        doc_id, expression, difficulty = fact_doc_id(group, fact), None, 0.45
    else:
        computed = _computed(source, rng)
        question, expression = computed.question, computed.expression
        right = _eval_math(expression)
        correct = str(right)
        wrong = _numeric_distractors(right, computed.slips, rng)
        doc_id, difficulty = source, 0.6
    options = list(wrong)
    slot = int(rng.integers(10))
    options.insert(slot, correct)
    body = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    prompt = f"{question}\n{body}\nAnswer with the letter of the correct option."
    return Task(
        id=_task_id("multiple-choice", seed, split, index),
        prompt=prompt,
        answers=(LETTERS[slot],),
        meta=_meta(
            "multiple-choice",
            difficulty,
            prompt,
            doc_id=doc_id,
            options=tuple(options),
            subject=subject,
            question=question,
            expression=expression,
        ),
    )


mmlu_pro_task = multiple_choice_task


# -- CommonGen-Hard --------------------------------------------------------------------------
#: concept vocabulary (base forms): nouns and verbs
CONCEPT_NOUNS: tuple[str, ...] = (
    "dog", "frisbee", "river", "boat", "mountain", "rope", "guitar", "stage", "crowd",
    "kitchen", "knife", "onion", "ball", "goal", "field", "snow", "slope", "jacket", "book",
    "lamp", "desk", "wall", "brush", "ladder", "tree", "garden", "horse", "fence", "bread",
    "oven", "market", "fish", "bicycle", "street", "umbrella", "rain", "beach", "wave", "sand",
    "shell", "camera", "bridge", "train", "station", "ticket", "window", "curtain", "cat",
    "sofa", "pillow", "coffee", "cup", "table", "chair", "candle", "cake", "plate", "fork",
    "apple", "basket", "tractor", "barn", "cow", "bucket", "milk", "kite", "park", "bench",
    "newspaper", "board", "chalk", "patient", "hospital", "bed", "phone", "computer",
    "keyboard", "screen", "drum", "song", "violin", "canvas", "forest", "tent", "fire", "wood",
    "axe", "lake", "bird", "nest", "egg", "flower", "bee", "honey", "road", "car", "map", "hat",
    "mirror", "soap", "towel",
)  # fmt: skip
CONCEPT_VERBS: tuple[str, ...] = (
    "catch", "throw", "paddle", "climb", "play", "cheer", "cook", "cut", "kick", "ski", "read",
    "paint", "plant", "water", "ride", "jump", "bake", "sell", "carry", "push", "pull", "wash",
    "dry", "fold", "open", "close", "hold", "drop", "pick", "fill", "pour", "stir", "chop",
    "sweep", "watch", "sing", "write", "draw", "build", "fix", "clean", "feed", "chase", "sail",
)  # fmt: skip
#: kept for callers of the earlier three-kind module
CONCEPTS: tuple[str, ...] = CONCEPT_NOUNS + CONCEPT_VERBS
_SUBJECTS = ("A girl", "A boy", "An old man", "The woman", "A tourist", "The neighbour",
             "My uncle", "Her friend")  # fmt: skip
_PREPOSITIONS = ("near", "beside", "next to", "under", "behind", "with", "by")


def _third_person(verb: str) -> str:
    if verb.endswith(("ch", "sh", "s", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in tuple("aeiou"):
        return verb[:-1] + "ies"
    return verb + "s"


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def commongen_reference(concepts: Sequence[str], rng: np.random.Generator) -> str:
    """A text that uses every concept in plain sentences: each verb with two nouns
    ("A girl catches the frisbee near the river."), leftover nouns in pairs ("There is a cup
    and a lamp nearby."), leftover verbs alone."""
    verbs = [c for c in concepts if c in CONCEPT_VERBS]
    nouns = [c for c in concepts if c not in CONCEPT_VERBS]
    sentences: list[str] = []
    for verb in verbs:
        subject = _SUBJECTS[int(rng.integers(len(_SUBJECTS)))]
        if len(nouns) >= 2:
            n1, n2 = nouns.pop(), nouns.pop()
            prep = _PREPOSITIONS[int(rng.integers(len(_PREPOSITIONS)))]
            sentences.append(f"{subject} {_third_person(verb)} the {n1} {prep} the {n2}.")
        elif nouns:
            sentences.append(f"{subject} {_third_person(verb)} the {nouns.pop()}.")
        else:
            sentences.append(f"{subject} likes to {verb} in the afternoon.")
    while nouns:
        if len(nouns) >= 2:
            n1, n2 = nouns.pop(), nouns.pop()
            sentences.append(f"There is {_article(n1)} {n1} and {_article(n2)} {n2} nearby.")
        else:
            n1 = nouns.pop()
            sentences.append(f"Someone has left {_article(n1)} {n1} there.")
    return " ".join(sentences)


def commongen_task(seed: int, index: int, split: str = "train") -> Task:
    """A CommonGen-Hard-style task: write a short coherent text that uses 20-30 concepts.

    Deterministic in ``(seed, split, index)``; train and test draw from different random
    streams. About a third of the concepts are verbs. ``meta["concepts"]`` holds them;
    ``answers`` a reference text covering all (graded by ``commongen_score``, not equality).
    """
    rng = _task_rng(seed, index, split, train_tag=13, test_tag=19)
    n = int(rng.integers(20, 31))
    n_verbs = int(rng.integers(n // 4, n // 3 + 1))
    verbs = [CONCEPT_VERBS[int(i)] for i in rng.choice(len(CONCEPT_VERBS), n_verbs, replace=False)]
    nouns = [CONCEPT_NOUNS[int(i)] for i in rng.choice(len(CONCEPT_NOUNS), n - n_verbs, replace=False)]  # fmt: skip
    concepts = tuple(verbs + nouns)
    concepts = tuple(concepts[int(i)] for i in rng.permutation(len(concepts)))
    reference = commongen_reference(concepts, rng)
    prompt = (
        "Write a short, coherent text (one or a few natural sentences, not a list) that uses "
        "all of these concepts: " + ", ".join(concepts)
    )
    return Task(
        id=_task_id("commongen", seed, split, index),
        prompt=prompt,
        answers=(reference,),
        meta=_meta("commongen", 0.3 + 0.015 * n, prompt, concepts=concepts),
    )


def _concept_forms(concept: str) -> set[str]:
    c = concept.lower()
    forms = {c, c + "s", c + "es", c + "ing", c + "ed", c + "d"}
    if c.endswith("e"):
        forms |= {c[:-1] + "ing", c[:-1] + "ed"}
    if c.endswith("y"):
        forms |= {c[:-1] + "ies", c[:-1] + "ied"}
    forms |= {c + c[-1] + "ing", c + c[-1] + "ed"}  # doubled consonant: cut -> cutting
    return forms


def _words(text: str | None) -> list[str]:
    return re.sub(r"[^a-z0-9\s]", " ", (text or "").lower()).split()


def concept_coverage(sentence: str | None, concepts: Sequence[str]) -> float:
    """The fraction of ``concepts`` that ``sentence`` uses, in [0, 1].

    Lemma-insensitive simple matching: the sentence is lowercased and stripped of punctuation;
    a concept counts when some word equals it or a simple plural / -ing / -ed form of it
    (``throw`` matches ``throws``, ``throwing``, ``throwed``; ``bake`` matches ``baking``;
    ``cut`` matches ``cutting``).
    """
    if not concepts:
        return 0.0
    words = set(_words(sentence))
    hits = sum(1 for c in concepts if _concept_forms(c) & words)
    return hits / len(concepts)


#: English function words (articles, pronouns, prepositions, conjunctions, auxiliaries)
_FUNCTION_TEXT = (
    "a an the this that these those my your his her its our their some any each every no "
    "i you he she it we they me him us them who which what whose whom there here "
    "in on at by for with from to of into onto over under near beside behind between "
    "through across along around after before during while until since as than like "
    "about against and or but so yet nor because although though if when where then "
    "also not is are was were be been being am has have had do does did will would can "
    "could shall should may might must just very too quite still again once"
)


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


FUNCTION_WORDS: frozenset[str] = _word_set(_FUNCTION_TEXT)
#: fluency proxy thresholds (documented in ``commongen_score``)
MIN_FUNCTION_RATIO = 0.25
MAX_DENSITY, ZERO_DENSITY = 0.5, 0.8
MAX_COMMA_RATIO, ZERO_COMMA_RATIO = 0.12, 0.35
MAX_SENTENCE_WORDS, ZERO_SENTENCE_WORDS = 40, 100
WORDS_PER_VERB = 20
_AUXILIARIES = _word_set(
    "is are was were has have had does did will would can could shall should may might must"
)
_IRREGULAR_PAST = _word_set(
    "went came saw took made gave ran threw caught held sat stood ate drank rode wrote drew "
    "sang swam flew built bought brought sold told said found left kept put hit set fed led "
    "met paid began broke chose drove fell felt fought got grew hid hung knew lay lit lost "
    "rose sent shook shot shut slept spoke spent stole struck swept taught thought tore "
    "woke wore won dug spun"
)
_NOT_SUBJECTS = _word_set(
    "a an the this that these those my your his her its our their some any each every no "
    "in on at by for with from to of into onto over under near beside behind between through "
    "across along around after before during until since than about against and or but nor"
)


def _ramp_down(value: float, ok: float, zero: float) -> float:
    """1 up to ``ok``, falling linearly to 0 at ``zero``."""
    if value <= ok:
        return 1.0
    return max(0.0, 1.0 - (value - ok) / (zero - ok))


def _predicates(words: Sequence[str]) -> int:
    """How many words look like a finite verb: an auxiliary or modal, a common irregular
    past form, or a word ending in -s / -ed whose previous word is not a determiner,
    preposition or conjunction (``the dog catches`` counts; ``the nests``, ``and boats`` do
    not)."""
    count = 0
    for i, w in enumerate(words):
        inflected = len(w) > 3 and w.endswith(("s", "ed")) and not w.endswith("ss")
        after_subject = i > 0 and words[i - 1] not in _NOT_SUBJECTS
        count += w in _AUXILIARIES or w in _IRREGULAR_PAST or (inflected and after_subject)
    return count


def fluency_proxy(text: str | None, concepts: Sequence[str]) -> dict[str, float]:
    """The fluency proxy's parts for ``text`` (each in [0, 1]) and their product ``fluency``.

    Written by hand because no maintained offline library scores grammaticality without a
    language model; these are structural checks that natural English passes and a list of
    words fails: ``function`` (share of function words, full credit from 25 %: running
    English has about half), ``density`` (share of words that are concepts, full credit up to
    50 %, none from 80 %: a bag of words is 100 %), ``lists`` (commas and semicolons per word,
    full credit up to 0.12, none from 0.35), ``length`` (mean words per sentence, full credit
    up to 40, none from 100: one endless run-on is not a sentence), ``repeats`` (the most
    repeated content word's share, full credit up to 15 %, none from 50 %) and ``verbs``
    (finite-verb-like words, ``_predicates``, full credit from one per 20 words: clauses need
    verbs, "the dog the frisbee the river" has none). Known limit: present-tense verbs after
    a plural subject ("children play") are not recognised; a text written that way relies on
    its other verbs.
    """
    words = _words(text)
    names = ("function", "density", "lists", "length", "repeats", "verbs", "fluency")
    if not words:
        return dict.fromkeys(names, 0.0)
    n = len(words)
    forms = set().union(*(_concept_forms(c) for c in concepts)) if concepts else set()
    sentences = [s for s in re.split(r"[.!?]+", text or "") if s.strip()]
    content = Counter(w for w in words if w not in FUNCTION_WORDS)
    top = max(content.values(), default=0)
    parts = {
        "function": min(1.0, sum(w in FUNCTION_WORDS for w in words) / n / MIN_FUNCTION_RATIO),
        "density": _ramp_down(sum(w in forms for w in words) / n, MAX_DENSITY, ZERO_DENSITY),
        "lists": _ramp_down(len(re.findall(r"[,;]", text or "")) / n, MAX_COMMA_RATIO, ZERO_COMMA_RATIO),
        "length": _ramp_down(n / max(1, len(sentences)), MAX_SENTENCE_WORDS, ZERO_SENTENCE_WORDS),
        "repeats": _ramp_down(top / n, 0.15, 0.5),
        "verbs": min(1.0, _predicates(words) * WORDS_PER_VERB / n),
    }  # fmt: skip
    parts["fluency"] = float(np.prod(list(parts.values())))
    return parts


def commongen_score(text: str | None, concepts: Sequence[str]) -> float:
    """CommonGen-Hard stand-in score in [0, 1]: ``concept_coverage`` times the fluency
    proxy (``fluency_proxy``). Seed 003 scores CommonGen-Hard by an aggregate of grammar,
    relevance, logical consistency and coverage judged by a model; offline, coverage stays
    exact and the model's judgement is replaced by structural checks, so a bag of words, a
    comma list or a repeated word scores near 0 while plain sentences that use the concepts
    score near their coverage. Texts over 20,000 characters score 0."""
    if not text or len(text) > 20_000:
        return 0.0
    return concept_coverage(text, concepts) * fluency_proxy(text, concepts)["fluency"]


# -- SRDD --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SrddSpec:
    """An SRDD-like software requirement: ``name``, ``category`` (SRDD's five: Education,
    Work, Life, Game, Creation), ``description`` and ``reference`` (``string.Template``s over
    the spec's parameters), ``bugs`` (``(old, new)`` edits of the reference that make a
    plausible wrong solution), ``params`` and ``tests`` (hidden test expressions, given the
    parameters, a random stream and the reference's namespace), ``doc_id`` in the corpus."""

    key: str
    name: str
    category: str
    description: str
    reference: str
    bugs: tuple[tuple[str, str], ...]
    params: Callable[[np.random.Generator], dict[str, Any]]
    tests: Callable[[dict[str, Any], np.random.Generator, dict[str, Any]], list[str]]
    difficulty: float

    @property
    def doc_id(self) -> str:
        return f"software/{self.key}"


_WORDS = ("apple", "river", "stone", "Quiet", "zebra", "Yellow", "music", "Orbit", "lemon",
          "Harbor", "violet", "Xenon", "mango", "Tiger", "cloud")  # fmt: skip


def _pick(rng: np.random.Generator, seq: Sequence[Any], k: int) -> list[Any]:
    return [seq[int(i)] for i in rng.choice(len(seq), size=k, replace=False)]


def _caesar_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    texts = [" ".join(_pick(rng, _WORDS, 3)) + "!", "Hello, World 2024", "xyz XYZ abc"]
    tests = [f"encode({t!r})" for t in texts]
    tests += [f"decode({ns['encode'](t)!r})" for t in texts[:2]]
    tests += ["encode('')", f"decode(encode({' '.join(_pick(rng, _WORDS, 4))!r}))"]
    return tests


def _rle_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    def runs(k: int) -> str:
        letters = _pick(rng, "abcdefghij", k)
        return "".join(ch * int(rng.integers(1, 5)) for ch in letters)

    texts = [runs(4), runs(6), "q" * int(rng.integers(10, 25)) + "rs", "", "z"]
    tests = [f"compress({t!r})" for t in texts]
    tests += [f"decompress({ns['compress'](t)!r})" for t in texts[:3]]
    return tests


def _roman_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    numbers = [int(rng.integers(1, 4000)) for _ in range(3)] + [int(rng.integers(900, 1000)), 44]
    tests = [f"to_roman({n})" for n in numbers]
    tests += [f"from_roman({ns['to_roman'](n)!r})" for n in (int(rng.integers(1, 4000)), 1994)]
    return tests


def _isbn_check(digits: Sequence[int]) -> str:
    total = sum((10 - i) * d for i, d in enumerate(digits))
    check = (11 - total % 11) % 11
    return "X" if check == 10 else str(check)


def _isbn_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    valid = []
    for _ in range(4):
        digits = [int(d) for d in rng.integers(0, 10, size=9)]
        valid.append("".join(map(str, digits)) + _isbn_check(digits))
    hyphen = f"{valid[0][0]}-{valid[0][1:4]}-{valid[0][4:9]}-{valid[0][9]}"
    broken = valid[1][:3] + str((int(valid[1][3]) + 1) % 10) + valid[1][4:]
    x_digits = [0, 8, 0, 4, 4, 2, 9, 5, 7]  # a known ISBN-10 ending in X: 080442957X
    return [f"is_valid_isbn10({s!r})" for s in valid[:3]] + [
        f"is_valid_isbn10({hyphen!r})",
        f"is_valid_isbn10({broken!r})",
        f"is_valid_isbn10({''.join(map(str, x_digits)) + _isbn_check(x_digits)!r})",
        f"is_valid_isbn10({valid[2][:9]!r})",
        "is_valid_isbn10('12345abcde')",
    ]


def _luhn_digit(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return str((10 - total % 10) % 10)


def _luhn_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    cards = []
    for length in (16, 15, 13):
        body = "".join(str(int(d)) for d in rng.integers(0, 10, size=length - 1))
        cards.append(body + _luhn_digit(body))
    spaced = " ".join(cards[0][i : i + 4] for i in range(0, 16, 4))
    wrong = cards[1][:-1] + str((int(cards[1][-1]) + 3) % 10)
    return [f"luhn_valid({c!r})" for c in cards] + [
        f"luhn_valid({spaced!r})",
        f"luhn_valid({wrong!r})",
        "luhn_valid('0')",
        "luhn_valid('4539 1488 0343 646a')",
    ]


def _bank_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    limit = p["limit"]
    d1, w1 = int(rng.integers(100, 900)), int(rng.integers(10, 90))
    return [
        f"(lambda a: [a.deposit({d1}), a.withdraw({w1}), a.get_balance()][-1])(Account())",
        f"(lambda a: [a.withdraw({limit}), a.get_balance()][-1])(Account())",
        f"(lambda a: a.withdraw({limit + 1}))(Account())",
        f"(lambda a: [a.deposit({d1}), a.withdraw({d1 + limit}), a.get_balance()][-1])(Account())",
        "(lambda a: a.deposit(0))(Account())",
        "(lambda a: a.withdraw(-5))(Account(50))",
        f"(lambda a: [a.deposit({w1}), a.get_balance()][-1])(Account({d1}))",
    ]


def _inventory_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    t = p["threshold"]
    items = _pick(rng, ("bolt", "nut", "gear", "pipe", "valve", "screw"), 4)
    qty = [t, t + int(rng.integers(1, 20)), max(0, t - 1), t + 40]
    adds = ", ".join(f"inv.add({it!r}, {q})" for it, q in zip(items, qty, strict=True))
    seq = f"(lambda inv: [{adds}, {{}}][-1] or inv)(Inventory())"
    return [
        f"{seq}.low_stock()",
        f"{seq}.count({items[1]!r})",
        f"(lambda inv: [inv.remove({items[3]!r}, 41), inv.count({items[3]!r})][-1])({seq})",
        f"(lambda inv: inv.remove({items[2]!r}, {qty[2] + 1}))({seq})",
        f"{seq}.count('unknown')",
        f"{seq}.low_stock({t + 50})",
        f"(lambda inv: [inv.remove({items[1]!r}, {qty[1]}), inv.low_stock()][-1])({seq})",
    ]


def _words_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    vocab = ("sun", "Moon", "star", "sky", "cloud", "rain")
    texts = []
    for _ in range(3):
        words = [vocab[int(i)] for i in rng.integers(0, len(vocab), size=int(rng.integers(8, 20)))]
        texts.append(" ".join(words).replace(" sky", ", sky").replace(" rain", "! Rain"))
    return [
        f"top_words({texts[0]!r}, 2)",
        f"top_words({texts[1]!r}, 3)",
        f"top_words({texts[2]!r}, 10)",
        "top_words('b a c b a', 2)",
        "top_words('', 3)",
        'top_words("It\'s it IT its", 2)',
    ]


def _fizz_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    both = p["a"] * p["b"]
    return [f"game({n})" for n in (1, p["a"], both, both + int(rng.integers(1, 9)), 0)]


def _temperature_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:  # fmt: skip
    v = [float(rng.integers(-400, 1200)) / 10 for _ in range(4)]
    return [
        f"convert({v[0]}, 'C', 'F')",
        f"convert({v[1]}, 'F', 'C')",
        f"convert({v[2]}, 'C', 'K')",
        f"convert({v[3]}, 'K', 'F')",
        "convert(100.0, 'C', 'C')",
        "convert(1.0, 'C', 'R')",
    ]


def _queue_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    names = _pick(rng, ("mail", "shop", "cook", "gym", "call", "read", "fix"), 5)
    prios = [int(x) for x in rng.integers(1, 4, size=5)]
    adds = ", ".join(f"q.add({n!r}, {pr})" for n, pr in zip(names, prios, strict=True))
    pops = ", ".join("q.pop()" for _ in range(5))
    return [
        f"(lambda q: [{adds}, [{pops}]][-1])(TaskQueue())",
        f"(lambda q: [{adds}, len(q)][-1])(TaskQueue())",
        "(lambda q: q.pop())(TaskQueue())",
        "(lambda q: [q.add('a', 1), q.add('b', 1), q.pop()][-1])(TaskQueue())",
        "(lambda q: [q.add('a', 1), q.add('b', 5), q.pop(), len(q)][2:])(TaskQueue())",
    ]


def _grade_tests(p: dict[str, Any], rng: np.random.Generator, ns: dict[str, Any]) -> list[str]:
    cut = p["cuts"]
    scores = [cut[0], cut[1] - 1, cut[2], cut[3] - 1, 100, 0, cut[1]]
    tests = [f"letter_grade({s})" for s in scores]
    tests.append(f"grade_counts({[int(x) for x in rng.integers(30, 101, size=12)]})")
    return tests


SRDD_SPECS: tuple[SrddSpec, ...] = (
    SrddSpec(
        "caesar", "CaesarCipherTool", "Education",
        "CaesarCipherTool is a small classroom tool for secret messages. Write Python with a "
        "function encode(text) that shifts every ASCII letter $shift places forward in the "
        "alphabet, wrapping from z to a, keeping upper case upper and lower case lower; all "
        "other characters stay unchanged. Write decode(text) that undoes encode.",
        """SHIFT = $shift


def _shift(text, k):
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + k) % 26 + 97))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + k) % 26 + 65))
        else:
            out.append(ch)
    return "".join(out)


def encode(text):
    return _shift(text, SHIFT)


def decode(text):
    return _shift(text, -SHIFT)
""",
        (("% 26 + 65", "% 26 + 97"), ("return _shift(text, -SHIFT)", "return _shift(text, SHIFT)"),
         ("% 26 + 97)", "% 25 + 97)")),
        lambda rng: {"shift": int(rng.integers(1, 26))},
        _caesar_tests, 0.35,
    ),
    SrddSpec(
        "run-length", "RunLengthCompressor", "Work",
        "RunLengthCompressor shrinks log lines made of letters. Write compress(s) that "
        "replaces each run of one repeated letter by the letter followed by the run length"
        "$ones_rule; write decompress(s) that reverses compress (a length may have several "
        "digits; a letter without a length stands for one). The empty string maps to itself.",
        """OMIT_ONES = $omit


def compress(s):
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        n = j - i
        out.append(s[i] + ("" if OMIT_ONES and n == 1 else str(n)))
        i = j
    return "".join(out)


def decompress(s):
    out = []
    i = 0
    while i < len(s):
        ch = s[i]
        i += 1
        digits = ""
        while i < len(s) and s[i].isdigit():
            digits += s[i]
            i += 1
        out.append(ch * (int(digits) if digits else 1))
    return "".join(out)
""",
        (("while j < len(s) and s[j] == s[i]:", "while j < len(s) and s[j] == s[i] and j - i < 9:"),
         ("int(digits) if digits", "int(digits[-1]) if digits")),
        lambda rng: {"omit": bool(rng.random() < 0.5)},
        _rle_tests, 0.45,
    ),
    SrddSpec(
        "roman", "RomanNumeralConverter", "Education",
        "RomanNumeralConverter helps history students read dates. Write to_roman(n) for "
        "integers 1 to 3999 using standard subtractive notation (IV, IX, XL, XC, CD, CM), and "
        "from_roman(s) that converts a valid numeral back to an integer.",
        """_PAIRS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
          (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(n):
    out = []
    for value, symbol in _PAIRS:
        while n >= value:
            out.append(symbol)
            n -= value
    return "".join(out)


def from_roman(s):
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, ch in enumerate(s):
        v = values[ch]
        if i + 1 < len(s) and values[s[i + 1]] > v:
            total -= v
        else:
            total += v
    return total
""",
        (('(900, "CM"), ', ""), ("total -= v", "total += v")),
        lambda rng: {},
        _roman_tests, 0.4,
    ),
    SrddSpec(
        "isbn", "BookCatalogValidator", "Work",
        "BookCatalogValidator checks ISBN-10 codes typed by librarians. Write "
        "is_valid_isbn10(s) returning True or False: hyphens are ignored; after removing them "
        "there must be exactly 10 characters, the first nine digits and the last a digit or X "
        "(meaning 10); the sum of each value times its weight (10 for the first down to 1 for "
        "the last) must be divisible by 11.",
        """def is_valid_isbn10(s):
    chars = [c for c in s if c != "-"]
    if len(chars) != 10:
        return False
    total = 0
    for i, c in enumerate(chars):
        if c in "0123456789":
            v = int(c)
        elif c in "Xx" and i == 9:
            v = 10
        else:
            return False
        total += (10 - i) * v
    return total % 11 == 0
""",
        (("return total % 11 == 0", "return total % 10 == 0"),
         ('chars = [c for c in s if c != "-"]', "chars = list(s)")),
        lambda rng: {},
        _isbn_tests, 0.45,
    ),
    SrddSpec(
        "luhn", "CardNumberChecker", "Work",
        "CardNumberChecker validates payment card numbers before they are sent to the bank. "
        "Write luhn_valid(number) that ignores spaces, returns False unless what is left is at "
        "least two digits and only digits, and otherwise applies the Luhn check: from the "
        "right, double every second digit, subtract 9 from doubled values above 9, and accept "
        "when the total is divisible by 10.",
        """def luhn_valid(number):
    digits = number.replace(" ", "")
    if len(digits) < 2 or not all(c in "0123456789" for c in digits):
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0
""",
        (("if i % 2 == 1:", "if i % 2 == 0:"), ("d -= 9", "d -= 10")),
        lambda rng: {},
        _luhn_tests, 0.45,
    ),
    SrddSpec(
        "bank", "PiggyBankLedger", "Life",
        "PiggyBankLedger tracks a family account. Write a class Account(balance=0) with "
        "deposit(amount), withdraw(amount) and get_balance(). Amounts must be positive, else "
        "raise ValueError. A withdrawal may take the balance down to -$limit (an overdraft of "
        "$limit) but not lower: such a withdrawal raises ValueError and changes nothing.",
        """OVERDRAFT = $limit


class Account:
    def __init__(self, balance=0):
        self.balance = balance

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.balance += amount

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        if self.balance - amount < -OVERDRAFT:
            raise ValueError("overdraft limit exceeded")
        self.balance -= amount

    def get_balance(self):
        return self.balance
""",
        (("if self.balance - amount < -OVERDRAFT:", "if self.balance - amount < 0:"),
         ("    def deposit(self, amount):\n        if amount <= 0:\n            raise ValueError"
          "(\"amount must be positive\")\n", "    def deposit(self, amount):\n")),
        lambda rng: {"limit": 50 * int(rng.integers(1, 11))},
        _bank_tests, 0.5,
    ),
    SrddSpec(
        "inventory", "StockKeeper", "Work",
        "StockKeeper manages a small shop's stock. Write a class Inventory with add(item, qty), "
        "remove(item, qty) (raise ValueError when fewer than qty are in stock, changing "
        "nothing), count(item) (0 for an unknown item) and low_stock(threshold=$threshold) "
        "returning the sorted names of every item ever added whose count is at or below the "
        "threshold.",
        """class Inventory:
    def __init__(self):
        self.stock = {}

    def add(self, item, qty):
        self.stock[item] = self.stock.get(item, 0) + qty

    def remove(self, item, qty):
        if self.stock.get(item, 0) < qty:
            raise ValueError("not enough stock")
        self.stock[item] -= qty

    def count(self, item):
        return self.stock.get(item, 0)

    def low_stock(self, threshold=$threshold):
        return sorted(name for name, n in self.stock.items() if n <= threshold)
""",
        (("if n <= threshold", "if n < threshold"),
         ("if self.stock.get(item, 0) < qty:", "if item not in self.stock:")),
        lambda rng: {"threshold": int(rng.integers(3, 30))},
        _inventory_tests, 0.5,
    ),
    SrddSpec(
        "word-frequency", "WordCounter", "Creation",
        "WordCounter helps writers spot overused words. Write top_words(text, k) returning "
        "the k most frequent words as a list of [word, count] pairs. Words are maximal runs "
        "of the letters a-z after lowercasing (so \"It's\" gives \"it\" and \"s\"). Higher "
        "counts come first; equal counts in alphabetical order; fewer than k pairs if there "
        "are fewer words.",
        """import re
from collections import Counter


def top_words(text, k):
    counts = Counter(re.findall(r"[a-z]+", text.lower()))
    ranked = sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
    return [[word, n] for word, n in ranked[:k]]
""",
        (("key=lambda pair: (-pair[1], pair[0])", "key=lambda pair: -pair[1]"),
         ("text.lower()", "text")),
        lambda rng: {},
        _words_tests, 0.4,
    ),
    SrddSpec(
        "fizzbuzz", "CountingGame", "Game",
        "CountingGame is a party counting game. Write game(n) returning a list of strings for "
        "the numbers 1 to n: multiples of both $a and $b become \"$w1$w2\", other multiples of "
        "$a become \"$w1\", other multiples of $b become \"$w2\", and every other number is "
        "written in digits. game(0) is an empty list.",
        """def game(n):
    out = []
    for i in range(1, n + 1):
        if i % $a == 0 and i % $b == 0:
            out.append("$w1$w2")
        elif i % $a == 0:
            out.append("$w1")
        elif i % $b == 0:
            out.append("$w2")
        else:
            out.append(str(i))
    return out
""",
        (("range(1, n + 1)", "range(1, n)"), ('out.append("$w1$w2")', 'out.append("$w1")')),
        lambda rng: dict(
            zip(("a", "b"), sorted(int(x) for x in rng.choice([3, 4, 5, 7], 2, replace=False)), strict=True),
            w1=str(rng.choice(["Fizz", "Ping", "Zip"])),
            w2=str(rng.choice(["Buzz", "Pong", "Zap"])),
        ),  # fmt: skip
        _fizz_tests, 0.3,
    ),
    SrddSpec(
        "temperature", "ThermoConverter", "Life",
        "ThermoConverter converts readings for a weather hobbyist. Write convert(value, "
        "from_unit, to_unit) for the units 'C', 'F' and 'K' (F = C * 9 / 5 + 32, K = C + "
        "273.15), returning the result rounded to $digits decimal places with round(); an "
        "unknown unit raises ValueError.",
        """def convert(value, from_unit, to_unit):
    if from_unit == "C":
        celsius = value
    elif from_unit == "F":
        celsius = (value - 32) * 5 / 9
    elif from_unit == "K":
        celsius = value - 273.15
    else:
        raise ValueError("unknown unit")
    if to_unit == "C":
        result = celsius
    elif to_unit == "F":
        result = celsius * 9 / 5 + 32
    elif to_unit == "K":
        result = celsius + 273.15
    else:
        raise ValueError("unknown unit")
    return round(result, $digits)
""",
        (("celsius = value - 273.15", "celsius = value - 273"),
         ("celsius = (value - 32) * 5 / 9", "celsius = value * 5 / 9 - 32")),
        lambda rng: {"digits": int(rng.integers(1, 4))},
        _temperature_tests, 0.35,
    ),
    SrddSpec(
        "priority-queue", "ErrandPlanner", "Life",
        "ErrandPlanner orders a day's errands. Write a class TaskQueue with add(name, "
        "priority), pop() returning the name with the highest priority (among equal "
        "priorities, the one added first; IndexError when empty) and len() support "
        "(__len__) giving the number of waiting errands.",
        """class TaskQueue:
    def __init__(self):
        self.items = []
        self.counter = 0

    def add(self, name, priority):
        self.items.append((-priority, self.counter, name))
        self.counter += 1

    def pop(self):
        if not self.items:
            raise IndexError("empty queue")
        best = min(self.items)
        self.items.remove(best)
        return best[2]

    def __len__(self):
        return len(self.items)
""",
        (("self.items.append((-priority, self.counter, name))",
          "self.items.append((-priority, -self.counter, name))"),
         ("best = min(self.items)", "best = max(self.items)")),
        lambda rng: {},
        _queue_tests, 0.5,
    ),
    SrddSpec(
        "grades", "GradeBook", "Education",
        "GradeBook turns test scores into letter grades. Write letter_grade(score): 'A' from "
        "$a, 'B' from $b, 'C' from $c, 'D' from $d (each bound included), 'F' below. Write "
        "grade_counts(scores) returning a dict from each letter that occurs to how many "
        "scores got it.",
        """CUTS = [($a, "A"), ($b, "B"), ($c, "C"), ($d, "D")]


def letter_grade(score):
    for bound, letter in CUTS:
        if score >= bound:
            return letter
    return "F"


def grade_counts(scores):
    counts = {}
    for s in scores:
        g = letter_grade(s)
        counts[g] = counts.get(g, 0) + 1
    return counts
""",
        (("if score >= bound:", "if score > bound:"), ('return "F"', 'return "D"')),
        lambda rng: dict(zip("abcd", (int(rng.integers(86, 95)), int(rng.integers(75, 85)),
                                      int(rng.integers(63, 74)), int(rng.integers(50, 62))), strict=True)),  # fmt: skip
        _grade_tests, 0.3,
    ),
)  # fmt: skip
_SPEC_BY_KEY = {spec.key: spec for spec in SRDD_SPECS}


def _spec_values(spec: SrddSpec, params: dict[str, Any]) -> dict[str, Any]:
    """Template values: the parameters plus derived text (lists and flags)."""
    values = dict(params)
    if spec.key == "run-length":
        values["ones_rule"] = (
            ", writing the length only when the run is at least 2 long (aaab -> a3b)"
            if params["omit"]
            else ", always writing the length, also 1 (aaab -> a3b1)"
        )
    if spec.key == "grades":
        values["cuts"] = [params[k] for k in "abcd"]
    return values


def _reference_namespace(source: str) -> dict[str, Any]:
    """Run this module's own reference solution (trusted code) on the host."""
    namespace: dict[str, Any] = {"__name__": "solution"}
    exec(compile(source, "reference.py", "exec"), namespace)  # noqa: S102 - our own code
    return namespace


def _run_test(expression: str, namespace: dict[str, Any]) -> str:
    """A test's result as canonical JSON (``{"error": ExceptionName}`` when it raises); the
    sandbox harness (``_HARNESS``) computes the same for the candidate code."""
    try:
        value = eval(expression, namespace)  # noqa: S307 - our own test on our own code
        return json.dumps(value, sort_keys=True)
    except Exception as exc:  # noqa: BLE001 - the exception's name is the test's result
        return json.dumps({"error": type(exc).__name__})


def srdd_task(seed: int, index: int, split: str = "train") -> Task:
    """An SRDD-like software task, deterministic in ``(seed, split, index)``.

    One of ``SRDD_SPECS`` with its parameters drawn: the prompt is the requirement (name,
    category, description, the names to define); ``meta["files"]`` holds ``spec.md`` (the
    requirement) and ``tests.md`` (two public example calls); the hidden tests
    (``meta["tests"]``) and their expected results (``meta["expected"]``, from the
    reference solution) are privileged. ``answers`` holds the reference solution.
    """
    rng = _task_rng(seed, index, split, train_tag=23, test_tag=29)
    spec = SRDD_SPECS[int(rng.integers(len(SRDD_SPECS)))]
    params = spec.params(rng)
    values = _spec_values(spec, params)
    description = string.Template(spec.description).substitute(values)
    source = string.Template(spec.reference).substitute(values)
    namespace = _reference_namespace(source)
    tests = tuple(spec.tests(values, rng, namespace))
    expected = tuple(_run_test(t, namespace) for t in tests)
    spec_text = f"Name: {spec.name}\nCategory: {spec.category}\nDescription: {description}\n"
    examples = "".join(
        f"- `{t}` returns `{e}`\n" for t, e in list(zip(tests, expected, strict=True))[:2]
    )
    prompt = (
        f"Software requirement ({spec.category}): {spec.name}.\n{description}\n"
        "Reply with the complete Python code in one ```python block; it is run against "
        "hidden tests."
    )
    files = {"spec.md": spec_text, "tests.md": "Public examples:\n" + examples}
    return Task(
        id=_task_id("srdd", seed, split, index),
        prompt=prompt,
        answers=(source,),
        meta=_meta(
            "srdd",
            spec.difficulty,
            prompt,
            files=files,
            doc_id=spec.doc_id,
            name=spec.name,
            category=spec.category,
            spec=description,
            spec_key=spec.key,
            params=params,
            tests=tests,
            expected=expected,
        ),
    )


#: the sandbox side of ``srdd_score``: the candidate runs in its own namespace with stdout
#: and stderr sent to /dev/null; each test's JSON result goes to a saved copy of stdout,
#: tagged with a nonce. Comparison with the expected results happens outside the sandbox,
#: so faking a pass means printing the right results, which is solving the task.
_HARNESS = """\
import json as _json, os as _os
_write, _dumps = _os.write, _json.dumps
_out = _os.dup(1)
_null = _os.open(_os.devnull, _os.O_WRONLY)
_os.dup2(_null, 1)
_os.dup2(_null, 2)
_NONCE = {nonce!r}
_ns = {{"__name__": "solution"}}
try:
    exec(compile({code!r}, "solution.py", "exec"), _ns)
except BaseException as _exc:
    _write(_out, (_NONCE + "\\tload\\t" + type(_exc).__name__ + "\\n").encode())
    _os._exit(0)
_write(_out, (_NONCE + "\\tloaded\\t\\n").encode())
for _i, _test in enumerate({tests!r}):
    try:
        _value = _dumps(eval(_test, _ns), sort_keys=True)
    except BaseException as _exc:
        _value = _dumps({{"error": type(_exc).__name__}})
    _write(_out, (_NONCE + "\\t" + str(_i) + "\\t" + _value[:100000] + "\\n").encode())
_os._exit(0)
"""
#: a ``tool:run_python`` call on an SRDD task: ``_HARNESS``'s verdict first (output to
#: /dev/null, results tagged), then, in the same process and the same sandbox call, the
#: program run the way ``run_python`` runs it (``__name__ == "__main__"``, its output and
#: errors on the real stdout / stderr). One run gives the tool's output and the grade.
_HARNESS_AND_RUN = """\
import json as _json, os as _os, sys as _sys
_write, _dumps = _os.write, _json.dumps
_out, _err = _os.dup(1), _os.dup(2)
_null = _os.open(_os.devnull, _os.O_WRONLY)
_os.dup2(_null, 1)
_os.dup2(_null, 2)
_NONCE = {nonce!r}
_CODE = {code!r}
_ns = {{"__name__": "solution"}}
_loaded = False
try:
    exec(compile(_CODE, "solution.py", "exec"), _ns)
    _loaded = True
except BaseException as _exc:
    _write(_out, (_NONCE + "\\tload\\t" + type(_exc).__name__ + "\\n").encode())
if _loaded:
    _write(_out, (_NONCE + "\\tloaded\\t\\n").encode())
    for _i, _test in enumerate({tests!r}):
        try:
            _value = _dumps(eval(_test, _ns), sort_keys=True)
        except BaseException as _exc:
            _value = _dumps({{"error": type(_exc).__name__}})
        _write(_out, (_NONCE + "\\t" + str(_i) + "\\t" + _value[:100000] + "\\n").encode())
_write(_out, (_NONCE + "\\tdone\\t\\n").encode())
try:
    _sys.stdout.flush()
    _sys.stderr.flush()
except BaseException:
    pass
_os.dup2(_out, 1)
_os.dup2(_err, 2)
for _fd in (_out, _err, _null):
    _os.close(_fd)
del _ns, _loaded, _out, _err, _null, _fd, _write, _dumps
exec(compile(_CODE, "/program.py", "exec"), {{"__name__": "__main__"}})
"""
MAX_CODE_ANSWER_CHARS = 200_000
#: the sandbox time of one SRDD grading run: the env's ``tool_timeout_s`` (4 s) by default,
#: so that a step stays near the documented 4.1 s (it was 10 s on top of the tool's run)
SRDD_TIMEOUT_S = 4.0


def _read_verdict(
    output: str, nonce: str, expected: Sequence[str], total: int, timed_out: bool
) -> dict[str, Any]:
    seen: dict[str, str] = {}
    for line in output.splitlines():
        head, _, rest = line.partition("\t")
        if head != nonce:
            continue
        slot, _, value = rest.partition("\t")
        seen.setdefault(slot, value)
    loaded = "loaded" in seen and "load" not in seen
    passed = sum(seen.get(str(i)) == exp for i, exp in enumerate(expected)) if loaded else 0
    score = (passed / total if total else 1.0) if loaded else 0.0
    finished = "done" in seen or (loaded and all(str(i) in seen for i in range(total)))
    status = "timeout" if timed_out and not finished else "ok"
    return {"score": score, "loaded": loaded, "passed": passed, "total": total, "status": status}


def srdd_tool_run(
    code: str,
    tests: Sequence[str],
    expected: Sequence[str],
    *,
    timeout_s: float = SRDD_TIMEOUT_S,
    sandbox: str = "bwrap",
    max_output_chars: int = 4000,
) -> tuple[Any, dict[str, Any] | None]:
    """A ``run_python`` call on an SRDD task, graded in the same sandbox run:
    ``(ToolResult, verdict)``. The ``ToolResult`` is what ``run_python(code)`` shows (the
    program's own output, run as ``__main__``, after the hidden tests ran on a separate
    load of it); the verdict is ``srdd_verdict``'s for ``code`` (``None`` when the code is
    too long to grade, or the run was refused: then only the tool result counts)."""
    from orchenv.envs.puppeteer.tools import ToolResult

    total = len(tests)
    if len(code) > MAX_CODE_ANSWER_CHARS:
        return run_python(code, timeout_s=timeout_s, sandbox=sandbox), None
    nonce = secrets.token_hex(16)
    program = _HARNESS_AND_RUN.format(nonce=nonce, code=code, tests=list(tests))
    chars = max(1, int(max_output_chars))
    run = run_python(
        program,
        timeout_s=timeout_s,
        max_output_chars=200_000 + 1_000 * total + chars,
        sandbox=sandbox,
    )
    if run.meta.get("containment") == "refused":
        return run, None
    marker = f"{nonce}\tdone\t\n"
    head, found, own = run.output.partition(marker)
    verdict = _read_verdict(head, nonce, expected, total, run.error == "timeout")
    if not found:  # the tests did not finish: the program never ran as __main__
        own = ""
    truncated = len(own) > chars
    if truncated:
        own = own[:chars] + "\n[... output truncated ...]"
    meta = {**run.meta, "truncated": bool(run.meta.get("truncated")) or truncated}
    return ToolResult(run.ok, own, run.error, meta), verdict


def srdd_verdict(
    code: str | None,
    tests: Sequence[str],
    expected: Sequence[str],
    *,
    timeout_s: float = SRDD_TIMEOUT_S,
    sandbox: str = "bwrap",
) -> dict[str, Any]:
    """Run ``code`` and the hidden ``tests`` in the sandbox (``tools.run_python``).

    Returns ``{"score", "loaded", "passed", "total", "status"}``: ``score`` is the fraction of
    tests whose JSON result equals ``expected`` (SRDD's executability and consistency read
    as: the code loads, and its behaviour matches the requirement's tests), 0 when the code
    does not load. With no tests, ``score`` is 1.0 when the code loads (executability only).
    ``status`` is ``"ok"``, ``"timeout"`` (tests not reached count as failed), ``"refused"``
    (no sandbox: score 0) or ``"too long"``.
    """
    total = len(tests)
    result = {"score": 0.0, "loaded": False, "passed": 0, "total": total, "status": "ok"}
    if not isinstance(code, str) or not code.strip():
        return result
    if len(code) > MAX_CODE_ANSWER_CHARS:
        return {**result, "status": "too long"}
    nonce = secrets.token_hex(16)
    program = _HARNESS.format(nonce=nonce, code=code, tests=list(tests))
    run = run_python(
        program, timeout_s=timeout_s, max_output_chars=200_000 + 1_000 * total, sandbox=sandbox
    )
    if run.meta.get("containment") == "refused":
        return {**result, "status": "refused"}
    return _read_verdict(run.output, nonce, expected, total, run.error == "timeout")


def extract_code(text: str | None) -> str | None:
    """The code of a reply: the last fenced block (```python or plain ```), else the whole
    text when it looks like Python (has a def, class or import), else None."""
    if not text:
        return None
    blocks = re.findall(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", text[:MAX_CODE_ANSWER_CHARS * 2], flags=re.S)  # fmt: skip
    if blocks:
        return blocks[-1]
    if re.search(r"^\s*(def|class|import|from)\s", text, flags=re.M):
        return text
    return None


# -- task source -------------------------------------------------------------------------------
_GENERATORS: dict[str, Callable[[int, int, str], Task]] = {
    "gsm-hard": gsm_hard_task,
    "multiple-choice": multiple_choice_task,
    "commongen": commongen_task,
    "srdd": srdd_task,
}


def make_task(kind: str, seed: int, index: int, split: str = "train") -> Task:
    """The task of a kind (``TASK_KINDS``), deterministic in ``(seed, split, index)``."""
    if kind not in _GENERATORS:
        raise UnknownNameError("puppeteer tasks", kind, TASK_KINDS)
    return _GENERATORS[kind](seed, index, split)


class PuppeteerTaskSource(GeneratedTaskSource):
    """``n_tasks`` tasks of one kind per split (train, test), generated on first use.

    Ids are those of the generators (``gsmhard-0-3``, ``mc-0-test-5``, ...).
    """

    def __init__(self, kind: str = "gsm-hard", *, seed: int = 0, n_tasks: int = 10_000) -> None:
        if kind not in TASK_KINDS:
            raise UnknownNameError("puppeteer tasks", kind, TASK_KINDS)
        self.kind, self.seed = kind, int(seed)
        self.name = f"puppeteer-{kind}"
        self._sizes = {split: int(n_tasks) for split in SPLITS}

    @classmethod
    def sealed(
        cls, kind: str, secret: str, *, seed: int = 0, n_tasks: int = 10_000
    ) -> SealedTaskSource:
        """The tasks of a board's sealed plan (issue 37): the same generator with its seed
        mixed with the board's ``secret`` (``orchenv.seeding.sealed_int``, HMAC-SHA256; 63
        bits, all of which enter the task streams, ``_task_rng``), wrapped in
        ``orchenv.tasks.SealedTaskSource`` so that no sealed draw repeats a prompt of the
        public source (``seed``); without the secret the sealed tasks cannot be generated."""
        sealed_seed = sealed_int(secret.encode("utf-8"), "orchenv-puppeteer-tasks", kind, int(seed))
        sealed_seed |= 1 << 62  # always >= 2**32: never a public seed's stream
        public = cls(kind, seed=seed, n_tasks=n_tasks)
        tag = json.dumps(["puppeteer", kind, int(seed), int(n_tasks)])
        return SealedTaskSource(cls(kind, seed=sealed_seed, n_tasks=n_tasks), public, tag)

    def _generate(self, split: str, index: int) -> Task:
        return make_task(self.kind, self.seed, index, split)

    def by_id(self, task_id: str) -> Task:
        prefix = re.escape(_ID_PREFIX[self.kind])
        pattern = rf"^{prefix}-(-?\d+)-(?:(test)-)?(\d+)$"
        match = re.match(pattern, task_id) if isinstance(task_id, str) else None
        if match is not None:
            split, index = match.group(2) or "train", int(match.group(3))
            if int(match.group(1)) == self.seed and index < self._sizes[split]:
                return self.get(split, index)
        examples = [_task_id(self.kind, self.seed, split, 0) for split in SPLITS]
        raise UnknownNameError("task id", str(task_id), examples)


# -- programs an agent writes ------------------------------------------------------------------
def _mutate_expression(expression: str, rng: np.random.Generator) -> str:
    """One plausible slip in an arithmetic expression: a wrong operator, a dropped term or
    an off-by-one number; never the right value."""
    right = _eval_int(expression)
    swaps = {"+": "-", "-": "+", "*": "+", "//": "*", "%": "//"}
    ops = [m for m in re.finditer(r"//|[-+*%]", expression)]
    candidates: list[str] = []
    for m in ops:
        new = swaps.get(m.group(0))
        if new:
            candidates.append(expression[: m.start()] + new + expression[m.end() :])
    for m in re.finditer(r"\d+", expression):
        candidates.append(
            expression[: m.start()] + str(int(m.group(0)) + 1) + expression[m.end() :]
        )
    for i in rng.permutation(len(candidates)):
        candidate = candidates[int(i)]
        try:
            if _eval_int(candidate) != right:
                return candidate
        except (ZeroDivisionError, ArithmeticError, SyntaxError, ValueError):
            continue
    return f"{expression} + 1"


def reference_program(task: Task) -> str:
    """Python source that a right tool call runs: it prints the answer (gsm_hard: the
    number; mmlu_pro: the option letter, computed where the question is computed;
    commongen_hard: a text using every concept); for srdd, the correct solution itself."""
    kind = kind_of(task)
    if kind == "gsm-hard":
        code = task.meta.get("code")
        if not task.meta.get("expression") and isinstance(code, str) and "def solution" in code:
            return f"{code}\n\nprint(solution())\n"  # GSM-Hard's own PAL program
        expression = task.meta.get("expression") or task.answer
        return f"answer = {expression}\nprint(answer)\n"
    if kind == "multiple-choice":
        return _choice_program(task, None)
    if kind == "commongen":
        return f"print({task.answer!r})\n"
    return task.answer


def _choice_program(task: Task, wrong_slot: int | None) -> str:
    options = list(task.meta.get("options", ()))
    expression = task.meta.get("expression")
    slot = LETTERS.index(task.answer) if task.answer in LETTERS else 0
    if wrong_slot is not None:
        slot = wrong_slot
    lines = ["import math", f"options = {options!r}"]
    if expression and wrong_slot is None:
        lines.append(f"value = str({expression})")
    else:
        lines.append(f"value = {options[slot] if options else task.answer!r}")
    lines.append('print("ABCDEFGHIJ"[options.index(value)] if value in options else value)')
    return "\n".join(lines) + "\n"


def flawed_program(task: Task, rng: np.random.Generator) -> str:
    """A plausible wrong program of the same shape as ``reference_program``: gsm_hard with
    one slip in the arithmetic; mmlu_pro picking a wrong option; commongen_hard printing a
    text that misses concepts (or a bag of words); srdd the reference with one bug."""
    kind = kind_of(task)
    if kind == "gsm-hard":
        expression = task.meta.get("expression")
        if not expression:  # a loaded task: no expression to slip in
            sign = "+" if rng.random() < 0.5 else "-"  # as often smaller as larger (issue 25)
            return f"answer = {task.answer} {sign} {int(rng.integers(1, 10))}\nprint(answer)\n"
        return f"answer = {_mutate_expression(expression, rng)}\nprint(answer)\n"
    if kind == "multiple-choice":
        right = LETTERS.index(task.answer) if task.answer in LETTERS else 0
        n = max(2, len(task.meta.get("options", ())) or 10)
        wrong = int(rng.integers(n - 1))
        return _choice_program(task, wrong + (wrong >= right))
    if kind == "commongen":
        concepts = list(task.meta.get("concepts", ()))
        if rng.random() < 0.3 or not task.answer:
            return f"print({' '.join(concepts)!r})\n"
        sentences = re.split(r"(?<=\.)\s+", task.answer)
        keep = max(1, int(len(sentences) * rng.uniform(0.3, 0.8)))
        kept = [sentences[int(i)] for i in sorted(rng.choice(len(sentences), keep, replace=False))]
        return f"print({' '.join(kept)!r})\n"
    spec = _SPEC_BY_KEY.get(str(task.meta.get("spec_key")))
    if spec is None:
        return task.answer.replace("return", "return None  #", 1)
    values = _spec_values(spec, dict(task.meta.get("params", {})))
    old, new = spec.bugs[int(rng.integers(len(spec.bugs)))]
    return task.answer.replace(
        string.Template(old).substitute(values), string.Template(new).substitute(values), 1
    )


_QUERY_STOP = re.compile(r"\b(which|what|who|is|the|of|a|an|in|does|did|was|best|known|for)\b")


def search_terms(task: Task) -> str:
    """A query for the shipped corpus (``corpus.corpus_index``) that ranks the task's
    document (``meta["doc_id"]``) first: the question without its options (mmlu_pro), the
    software spec's name and topic (srdd), else the prompt's first sentence."""
    kind = kind_of(task)
    if kind == "multiple-choice":
        return str(task.meta.get("question") or task.prompt.split("\n", 1)[0])
    doc_id = task.meta.get("doc_id")
    if kind == "srdd" and doc_id in SOFTWARE_DOCS:
        title = SOFTWARE_DOCS[doc_id][0]
        return f"{title} {task.meta.get('name', '')}"
    first = re.split(r"(?<=[.?!])\s", task.prompt, maxsplit=1)[0]
    return _QUERY_STOP.sub(" ", first.lower()).strip()


def task_files(task: Task) -> dict[str, str]:
    """The files of the task folder that ``read_file`` serves: ``problem.txt`` (the prompt)
    and the kind's extra files (``meta["files"]``)."""
    files = dict(task.meta.get("files") or {})
    files.setdefault("problem.txt", task.prompt)
    return files


# -- grading ------------------------------------------------------------------------------------
def extract_choice(text: str | None) -> str | None:
    """The option letter of a reply: ``\\boxed{B}``, ``B``, ``(B)``, ``B. ...`` or ``Answer: B``."""
    if not text:
        return None
    text = text[:20_000]
    boxed = extract_boxed(text)
    for candidate in ((boxed,) if boxed else ()) + (text,):
        m = re.fullmatch(r"\s*\(?([A-Ja-j])\)?\s*(?:[.:)].*)?", candidate, flags=re.S)
        if m:
            return m.group(1).upper()
    # each \s* is followed by a literal, so a run of spaces is read once (no backtracking)
    m = re.search(r"answer\s*(?:is\s*)?(?:[:=]\s*)?\(?([A-J])\b", text, flags=re.I)
    return m.group(1).upper() if m else None


def extract_answer(kind: str, text: str) -> str | None:
    """The answer of an agent's reply for a task kind (None when it has none): the option
    letter (multiple-choice), the boxed number (gsm-hard), the code (srdd: the last fenced
    block), the boxed text or else the reply's last line (commongen)."""
    if kind == "multiple-choice":
        return extract_choice(text)
    if kind == "srdd":
        return extract_code(text)
    boxed = extract_boxed(text)
    if boxed:
        return boxed.strip() if kind == "commongen" else boxed
    if kind == "commongen":
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        return lines[-1] if lines else None
    return None


def score_answer(kind: str, task: Task, answer: str | None, *, sandbox: str = "bwrap") -> float:
    """The final-answer score ``r`` in [0, 1]: ``commongen_score`` (commongen), the share of
    hidden tests passed in the sandbox (srdd), else 1.0 for the right letter
    (multiple-choice) or a number equal to the reference (gsm-hard; commas, ``$`` and spaces
    ignored), 0.0 otherwise. ``sandbox`` is the mode srdd code runs under
    (``tools.SANDBOX_MODES``)."""
    return graded_score(kind, task, answer, sandbox=sandbox)[0]


def graded_score(
    kind: str,
    task: Task,
    answer: str | None,
    *,
    sandbox: str = "bwrap",
    timeout_s: float = SRDD_TIMEOUT_S,
) -> tuple[float, str]:
    """``score_answer`` and the grading status (``orchenv.grading.Verdict.status``): a number
    too large to check, or whose check runs out of time, scores 0 and says so; an srdd run
    reports ``srdd_verdict``'s status (``"refused"``, scoring 0, where bwrap cannot run and
    ``sandbox`` is not ``"unsafe-no-isolation"``)."""
    if kind not in TASK_KINDS:
        raise UnknownNameError("puppeteer tasks", kind, TASK_KINDS)
    if kind == "commongen":
        return commongen_score(answer, task.meta["concepts"]), "ok"
    if kind == "srdd":
        tests, expected = task.meta.get("tests", ()), task.meta.get("expected", ())
        run = srdd_verdict(answer, tests, expected, sandbox=sandbox, timeout_s=timeout_s)
        return float(run["score"]), str(run["status"])
    if not answer:
        return 0.0, "ok"
    if kind == "multiple-choice":
        return (1.0 if extract_choice(answer) == task.answer else 0.0), "ok"
    verdict = math_verdict(task.answer, re.sub(r"[,$\s]", "", answer[:10_000]))
    return float(verdict.equal), verdict.status
