"""Tables fit the terminal they are printed in (playground/display/fit.py, report.render_table): at
80 and 120 columns and piped, every value is printed whole in its row and column; headers and text
wrap, and columns a terminal cannot hold move to a next part that starts with the row's key
columns; PLAYGROUND_WIDE keeps one piece; a legend explains its columns once."""

import json
import random

import pytest
from tables import assert_fits, printed, read_back

from playground.cli.testing import run_cli
from playground.collectives.bench_report import bench_report
from playground.display.fit import Column, fit, table_width
from playground.display.report import Table, cell_text
from playground.models.calibration import ModelSource, default_link

WIDTHS = [80, 120, None]  # None: piped


def _ring8() -> Table:
    """The table of `run ring --ranks 8` (152 columns at its natural width), from synthetic records."""
    sizes = [8, 1024, 32768, 1048576, 4194304]
    per_rank = [
        [
            {"size": s, "count": s // 4, "algorithm": a, "median_us": 5421.3 + s / 77 + r, "wrong": 0}
            for a in ("ring", "tree")
            for s in sizes
        ]
        for r in range(8)
    ]
    return bench_report(
        per_rank,
        "allreduce",
        "float32",
        "sum",
        10,
        2,
        model=ModelSource(default_link("ipc"), "default", "ipc", "ipc"),
    ).tables[0]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_ring_table_fits_and_keeps_every_number(width):
    table = _ring8()
    text = assert_fits(table, width)
    parts = text.count("┏")
    assert parts == (2 if width == 80 else 1), text
    if width == 80:  # the second part starts with what names a row: its size and algorithm
        second = read_back("┏" + text.split("┏")[2])
        assert list(second[0])[:2] == ["size (B)", "algo"] and len(second[0]) < len(read_back(text)[0])
    assert text.count("model pick: the algorithm the model predicts fastest") == 1


def test_wide_keeps_one_piece_at_full_width():
    text = printed(_ring8(), 80, wide=True)
    assert text.count("┏") == 1 and "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines() if line.startswith(("┃", "│"))) > 120
    assert len(read_back(text)) == 10


def _random_table(rng: random.Random) -> Table:
    columns = {
        f"c{i}": rng.choice(["n", "count", "time (us)", "a long header of words", "x_B"]) + f" {i}"
        for i in range(rng.randint(1, 16))
    }
    rows = []
    for _ in range(rng.randint(1, 5)):
        row = {}
        for i, key in enumerate(columns):
            kind = i % 4
            row[key] = (
                rng.uniform(-1e7, 1e7)
                if kind == 0
                else rng.randint(0, 10 ** rng.randint(0, 12))
                if kind == 1
                else rng.choice(["ring", "reserve_max + prefix cache", "float32", "gloo", None, True])
                if kind == 2
                else rng.uniform(1e-9, 1e-3)
            )
        rows.append(row)
    first = next(iter(columns))
    for row in rows:  # the key column names a row: never empty
        row[first] = rng.randint(1, 10**6)
    return Table("random", rows, columns)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("width", WIDTHS)
def test_any_table_fits_with_every_value_whole(seed, width):
    assert_fits(_random_table(random.Random(seed)), width)


def test_a_table_that_fits_is_left_as_it_is_and_one_that_does_not_wraps_before_it_splits():
    narrow = [Column("size", ("8", "1024"), True), Column("algo", ("ring",), False)]
    (part,) = fit(narrow, 80)
    assert part.widths == (4, 4)
    wrapped = [Column("a long header here", ("1",), True), Column("another long header", ("22",), True)]
    (part,) = fit(wrapped, 30)  # natural 18 + 19 + 7 = 44 > 30; least 6 + 7 + 7 = 20 fits
    assert table_width(part.widths) <= 30 and part.widths[0] >= 6 and part.widths[1] >= 7
    many = [Column(f"column {i}", ("123456789",), True) for i in range(12)]
    parts = fit(many, 80, keys=2)
    assert len(parts) > 1 and all(p.columns[:2] == (0, 1) for p in parts)
    assert sorted({c for p in parts for c in p.columns}) == list(range(12))
    assert all(table_width(p.widths) <= 80 for p in parts)


@pytest.mark.timeout(60)
def test_run_ring_on_8_ranks_fits_80_columns_and_its_files_keep_every_column(runs_dir):
    """The README's first command in an 80-column terminal: every value of result.json's table is
    printed whole; the run's files keep the table, which renders whole at 120 columns and piped."""
    proc = run_cli(["run", "ring", "--ranks", "8", "--out", str(runs_dir), "--set", "params.iters=2",
                    "--set", "params.warmup=0"], env={"COLUMNS": "80"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert max(len(line.rstrip()) for line in proc.stdout.splitlines()) <= 80, proc.stdout
    result = json.loads((runs_dir / "latest" / "result.json").read_text())
    table = Table.from_dict(result["tables"][0])
    got = read_back(proc.stdout)
    assert len(got) == len(table.rows) and "…" not in proc.stdout
    for want, row in zip(table.rows, got, strict=True):
        assert row == {h: cell_text(k, want.get(k)) for k, h in table.columns.items()}
    assert proc.stdout.count("model pick: ") == 1
    for width in (120, None):
        assert_fits(table, width)
