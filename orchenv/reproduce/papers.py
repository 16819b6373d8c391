"""The seed papers' numbers, read from a JSON data file beside each seed module.

Each seed module (``orchenv.envs.<env>.reproduce``) keeps the numbers its paper reports in
``paper_numbers.json`` in its own package instead of in code::

    {"seed": "001", "source": "CoRL (arXiv 2511.02755), Table 2", "notes": "...",
     "tables": {"accuracy": {"o3": 0.938, ...}, "cost_500": {...}}}

:func:`load_paper_numbers` reads it the way orchenv reads every file (``orchenv.schema``:
``parse_json`` with bounded digits and depth, then a closed ``Schema`` whose errors name the
file and the field): ``tables`` maps a table's name to a tree of objects whose leaves are
finite numbers (an integer stays an integer), names or lists of them, and every table the
module asks for must be there. The module then gives the tables the shapes its code uses
(:func:`int_keys`, tuples). A page's paper column therefore comes from a file a reader can
check against the paper without reading Python.
"""

from __future__ import annotations

import importlib.resources
import math
from collections.abc import Mapping, Sequence
from typing import Any

from orchenv.error import SchemaError
from orchenv.schema import MAX_DEPTH, Invalid, Schema, dict_of, name, parse_json, show, text

__all__ = [
    "PAPER_FILE",
    "PAPER_NUMBERS",
    "int_keys",
    "load_paper_numbers",
    "parse_paper_numbers",
    "table_value",
]

#: the data file's name in each seed module's package
PAPER_FILE = "paper_numbers.json"
#: the longest list a table may hold (a table row, not a data set)
MAX_LIST = 1000


def table_value(value: Any, depth: int = 0) -> Any:
    """A table's entry: a finite number (an int kept as an int, up to 10**15), a name, a list
    of those, or an object of entries, nested at most ``MAX_DEPTH`` deep."""
    if depth > MAX_DEPTH:
        raise Invalid(f"must nest at most {MAX_DEPTH} levels deep")
    if isinstance(value, bool) or value is None:
        raise Invalid(f"must be a number, a name, a list or an object, got {show(value)}")
    if isinstance(value, int):
        if abs(value) > 10**15:
            raise Invalid(f"must be at most 10**15 in size, got {show(value)}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid(f"must be a finite number, got {show(value)}")
        return value
    if isinstance(value, str):
        return name(value)
    if isinstance(value, list):
        if len(value) > MAX_LIST:
            raise Invalid(f"must hold at most {MAX_LIST} items, got {len(value):,}")
        out = []
        for i, item in enumerate(value):
            try:
                out.append(table_value(item, depth + 1))
            except Invalid as exc:
                raise Invalid(f"item {i} {exc}") from None
        return out
    if isinstance(value, dict):
        checked = {}
        for key, item in value.items():
            try:
                name(key)
                checked[key] = table_value(item, depth + 1)
            except Invalid as exc:
                raise Invalid(f"entry {show(key)} {exc}") from None
        return checked
    raise Invalid(f"must be a number, a name, a list or an object, got {show(value)}")


#: the data file's top level
PAPER_NUMBERS = Schema(
    "paper numbers",
    {
        "seed": text,
        "source": text,
        "notes": text,
        "tables": dict_of(table_value, name),
    },
    required=frozenset({"seed", "source", "tables"}),
)


def load_paper_numbers(
    package: str | None, tables: Sequence[str], *, filename: str = PAPER_FILE
) -> dict[str, Any]:
    """The checked ``tables`` of ``package``'s ``paper_numbers.json`` (every name in
    ``tables`` must be present; a ``SchemaError`` names the file and the field otherwise)."""
    if not package:
        raise SchemaError("load_paper_numbers needs the seed module's package (__package__)")
    where = f"{package.replace('.', '/')}/{filename}"
    try:
        raw = importlib.resources.files(package).joinpath(filename).read_bytes()
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise SchemaError(f"{where}: the paper's numbers are missing ({exc})") from None
    return parse_paper_numbers(raw, where, tables)


def parse_paper_numbers(raw: bytes | str, where: str, tables: Sequence[str]) -> dict[str, Any]:
    """The checked ``tables`` of one ``paper_numbers.json`` document (``where`` names it in
    errors)."""
    try:
        parsed = parse_json(raw, where)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONLimitError is a SchemaError already
        if isinstance(exc, SchemaError):
            raise
        raise SchemaError(f"{where}: not a JSON document ({exc})") from None
    data = PAPER_NUMBERS.validate(parsed, where)
    found = data["tables"]
    missing = [t for t in tables if t not in found]
    if missing:
        raise SchemaError(
            f"{where}: paper numbers lack the table(s) {', '.join(missing)} "
            f"(present: {', '.join(sorted(found)) or 'none'})"
        )
    return dict(found)


def int_keys(table: Mapping[str, Any]) -> dict[int, Any]:
    """A table keyed by integers (budgets, rounds) from its JSON object's string keys."""
    out = {}
    for key, value in table.items():
        try:
            out[int(key)] = value
        except ValueError:
            raise SchemaError(f"paper numbers: key {key!r} must be an integer") from None
    return out
