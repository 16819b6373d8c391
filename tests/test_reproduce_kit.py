"""The reproduction kit (orchenv.reproduce.stats, .figures, .papers and the sweep checks of
.report): the numbers every page's intervals and curves are made of, the figures' object
API, and the papers' data files read through orchenv.schema."""

from __future__ import annotations

import importlib
import json
import math
import re
import statistics
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

from orchenv.error import SchemaError
from orchenv.reproduce import figures, papers
from orchenv.reproduce import stats as kit
from orchenv.reproduce.report import Estimate, check_difference, check_sweep

SEED_MODULES = ("mathroute", "budgetroute", "orchmas", "puppeteer", "multihopqa")


# -- statistics ---------------------------------------------------------------------------------
def test_over_seeds_is_the_student_t_interval():
    values = [0.71, 0.78, 0.74]
    est = kit.over_seeds(values)
    half = scipy_stats.t.ppf(0.975, 2) * statistics.stdev(values) / math.sqrt(3)
    assert est.over == "seeds" and est.n == 3
    assert est.mean == pytest.approx(statistics.fmean(values))
    assert est.half == pytest.approx(half)


def test_seed_and_episode_differences_are_paired_and_unpaired_adds_in_quadrature():
    a, b = [0.9, 0.8, 0.85], [0.7, 0.65, 0.6]
    paired = kit.seed_difference(a, b)
    assert paired.mean == pytest.approx(0.2) and paired.over == "seeds"
    assert paired.half < kit.unpaired_difference(kit.over_seeds(a), kit.over_seeds(b)).half
    with pytest.raises(ValueError, match="equal lengths"):
        kit.seed_difference(a, b[:2])
    x, y = Estimate(0.5, 0.4, 0.6, 100), Estimate(0.3, 0.27, 0.33, 100)
    diff = kit.unpaired_difference(x, y)
    assert diff.mean == pytest.approx(0.2) and diff.half == pytest.approx(math.hypot(0.1, 0.03))
    episodes = kit.paired_difference([1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0])
    assert episodes.mean == pytest.approx(0.5) and episodes.n == 4


def test_scaled_divided_and_relative_keep_the_interval_in_order():
    est = Estimate(2.0, 1.0, 3.0, 10)
    assert kit.scaled(est, -1.0) == Estimate(-2.0, -3.0, -1.0, 10)
    assert kit.divided(est, 1000) == Estimate(0.002, 0.001, 0.003, 10)
    assert kit.relative_change(est, 4.0).mean == 0.5
    with pytest.raises(ValueError):
        kit.divided(est, 0.0)


def test_curve_binning():
    assert kit.chunk_bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert kit.chunk_bounds(3, 10) == [(0, 1), (1, 2), (2, 3)]
    assert kit.chunk_bounds(0, 10) == []
    assert kit.bin_means([1, 1, 3, 3], 2) == [1.0, 3.0]
    # by position: (lo, hi] bins of equal width, empty ones left out (seed 001's curves)
    items = [{"t": t} for t in (1, 5, 10, 11, 40)]
    binned = kit.bins_by_position(items, lambda e: e["t"], 40, 4)
    assert [(end, [e["t"] for e in group]) for end, group in binned] == [
        (10, [1, 5, 10]),
        (20, [11]),
        (40, [40]),
    ]
    assert list(kit.moving_average([1, 2, 3, 4], 2)) == [1.5, 2.5, 3.5]
    assert list(kit.moving_average([1, 2], 5)) == [1.0, 2.0]


def test_mean_band_cuts_to_the_shortest_and_gives_a_t_band():
    curves = [[1.0, 2.0, 3.0], [3.0, 4.0], [2.0, 3.0, 9.0]]
    mean, lo, hi = kit.mean_band(curves, "ci")
    assert list(mean) == [2.0, 3.0]
    assert hi[0] - mean[0] == pytest.approx(scipy_stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3))
    _, lo, hi = kit.mean_band(curves, "minmax")
    assert list(lo) == [1.0, 2.0] and list(hi) == [3.0, 4.0]
    with pytest.raises(ValueError, match="band"):
        kit.mean_band(curves, "sd")


# -- figures ------------------------------------------------------------------------------------
def test_figures_draw_on_the_object_api_without_touching_pyplot(tmp_path):
    import matplotlib

    backend = matplotlib.get_backend()
    had_pyplot = "matplotlib.pyplot" in sys.modules
    fig, axes = figures.new_figure(1, 3, size=(9, 3))
    figures.curves_with_band(axes[0], [1, 2, 3], [[1, 2, 3], [2, 3, 4]], band="ci", label="a")
    ests = [Estimate(0.5, 0.4, 0.6, 10), Estimate(math.nan, math.nan, math.nan, 0)]
    figures.points_with_intervals(axes[1], [1.0, 2.0], ests, labels=["x", "y"])
    figures.bars_with_intervals(axes[2], np.arange(2), ests, 0.4, scale=100)
    assert figures.errors(ests).tolist() == [[pytest.approx(0.1), 0.0], [pytest.approx(0.1), 0.0]]
    out = figures.save(fig, tmp_path / "f.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 1000
    assert matplotlib.get_backend() == backend
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot


# -- the papers' numbers ------------------------------------------------------------------------
@pytest.mark.parametrize("family", SEED_MODULES)
def test_every_seed_module_reads_its_paper_numbers_from_its_data_file(family):
    module = importlib.import_module(f"orchenv.envs.{family}.reproduce")
    package = f"orchenv.envs.{family}"
    raw = importlib.resources.files(package).joinpath(papers.PAPER_FILE).read_text()
    data = json.loads(raw)
    assert data["seed"] in str(module.__doc__) or data["seed"].isdigit()
    tables = papers.load_paper_numbers(package, list(data["tables"]))
    assert tables == data["tables"]
    # no paper number is typed in the module any more: every PAPER_ table comes from the file
    source = importlib.resources.files(package).joinpath("reproduce.py").read_text()
    assert "load_paper_numbers(" in source
    blocks = re.findall(r"^PAPER_\w+[^=\n]* = .*?(?=^\S)", source, re.M | re.S)
    assert blocks
    for block in blocks:
        assert re.search(r"\d\.\d", block) is None, block


def _doc(tables: object, **top: object) -> str:
    return json.dumps({"seed": "999", "source": "test", "tables": tables, **top})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_doc({"t": {"a": 0.5}}, extra=1), "unknown paper numbers field 'extra'"),
        (_doc({"u": {"a": 0.5}}), "lack the table"),
        (_doc({"t": {"a": True}}), "entry 'a' must be a number"),
        (_doc({"t": {"a": 10**16}}), "at most 10\\*\\*15"),
        (_doc({"t": {"a": "x" * 300}}), "1 to 200 characters"),
        (_doc({"t": {"\ud800": 1}}), "lone surrogates"),
        (_doc({"t": [0.1] * 1001}), "at most 1000 items"),
        ('{"seed": "9", "source": "s", "tables": {"t": NaN}}', "NaN|finite"),
        ('{"seed": "9", "source": "s", "tables": {"t": 1' + "0" * 500 + "}}", "digits"),
        ('{"seed": "9", "source": "s", "tables": {"t": ' + "[" * 100 + "]" * 100 + "}}", "deep"),
        ("not json", "JSON"),
    ],
)
def test_a_broken_or_hostile_paper_file_fails_with_the_file_and_field(raw, message):
    with pytest.raises(SchemaError, match=message) as info:
        papers.parse_paper_numbers(raw, "envs/x/paper_numbers.json", ["t"])
    assert "envs/x/paper_numbers.json" in str(info.value)


def test_a_missing_paper_file_or_package_is_a_schema_error():
    with pytest.raises(SchemaError, match="missing"):
        papers.load_paper_numbers("orchenv.reproduce", ["t"])
    with pytest.raises(SchemaError, match="__package__"):
        papers.load_paper_numbers(None, ["t"])
    assert papers.int_keys({"512": 1}) == {512: 1}
    with pytest.raises(SchemaError, match="integer"):
        papers.int_keys({"x": 1})


# -- sweeps -------------------------------------------------------------------------------------
def test_check_difference_decides_only_outside_zero():
    assert check_difference("c", Estimate(0.2, 0.1, 0.3, 3), up=True).status == "reproduced"
    against = check_difference("c", Estimate(-0.2, -0.3, -0.1, 3), up=True)
    assert against.decided and not against.reproduced
    open_ = check_difference("c", Estimate(0.1, -0.1, 0.3, 3), up=True)
    assert not open_.decided and "holds zero" in open_.observed


def test_a_headline_that_holds_in_part_of_a_sweep_says_so():
    up = check_difference("", Estimate(0.2, 0.1, 0.3, 3), up=True)
    down = check_difference("", Estimate(-0.2, -0.3, -0.1, 3), up=True)
    wide = check_difference("", Estimate(0.1, -0.1, 0.3, 3), up=True)
    every = check_sweep("h", {"a": up, "b": up})
    assert every.reproduced and "holds at every point" in every.observed
    assert not every.paper and every.status == "reproduced"
    part = check_sweep("h", {"a": up, "b": down, "c": wide})
    assert part.decided and not part.reproduced
    assert (
        "holds only in part of the sweep: holds at a; fails at b; undecided at c" in part.observed
    )
    undecided = check_sweep("h", {"a": up, "c": wide})
    assert not undecided.decided and undecided.status == "undecided"
    assert not check_sweep("h", {}).reproduced
